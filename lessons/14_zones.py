"""Lesson 14 · Zones: smart eviction
Motto: tidy up early and losslessly; lose information only when you must.

The problem: the ladder of lesson 13 waits until 70% and then may summarize. But a lot can be
done that loses nothing: merge split messages, drop duplicate outputs, clear cache reads, mask
what can be re-run. Doing that early keeps the lossy steps rare. And some tools (SQL, a shell
whose exact output matters) must never be paraphrased at all.

How it works: the history's share of the effective window picks the zone.

    0% ──────────── 60% ─────────────── 85% ─────────── 100%
       nothing         lossless only       lossy allowed
                       merge, dedupe,      snip, shorten, evict,
                       clear, mask         summary, last resort

  The zones are data, as every policy is: the lossless steps run from the trigger (60%), and
  lossy(0.85, 0.75, "snip", ...) gives each lossy step its own rule, ("snip", {"at": 0.85, "until":
  0.75}): it runs only once the history passed 85%, and only while the steps before it left it
  above 75%. Tools in `precise_tools` are never masked, snipped or deduplicated. One step runs
  before every call, below every zone (EVERY_CALL, {"at": 0, "until": 0}): "admit" shrinks each
  new output over 2,000 tokens as it enters the context (the cheap model summarizes it; with no
  model it is cut). flag_unverified marks a summary line whose numbers or paths its source never
  said, or that drops the negation of a rule the turns state.

What changed since lesson 13: the same rungs, sorted by what they cost in information.
Try it: Compactor(policy="zones", trigger=0.5) (where lossless steps start); build your own with
  layers=(..., *lossy(0.95, 0.75, "snip", "summary")); replace ("bash",) by ("read_file",).
Explains compact.py Part III ("The ladder's steps and policies"): the policy "zones", lossy,
  EVERY_CALL, snip, evict; ("Admission"): admit, summarize_tool_output; ("Zones"): merge_same_role;
  Part II ("The engine"): Compactor, Step; ("The summarizer that reads in pieces"): flag_unverified.
  The runs are replayed with lessons/benchmark.py's replay (through show.watch).
Run: python lessons/14_zones.py
"""

import show
from compact import Compactor, content_text, flag_unverified, merge_same_role, text_tokens
from conversations import generate_conversation

LOSSLESS = ("reasoning", "merge", "dedupe", "clear", "mask")


def zones(precise_tools=()):
    """What show.watch builds for each run: the zones policy at a 32,000-token window."""
    return lambda summarizer: Compactor(context_window=32_000, reserved_output=4_000, policy="zones",
                                        precise_tools=precise_tools)


def zones_run(messages):
    quiet = []

    def on_compaction(compactor, before, after):
        share = lambda ms: compactor.budget.history(ms) / compactor.budget.effective(ms)
        ran = [(name, b - a) for name, b, a, _ in compactor.report if a < b]
        admitted = " ".join(f"-{d:,}" for n, d in ran if n == "admit") or "—"  # every call, below every zone
        lossless = " ".join(f"{n} -{d:,}" for n, d in ran if n in LOSSLESS) or "—"
        lossy = " ".join(f"{n} -{d:,}" for n, d in ran if n not in (*LOSSLESS, "admit"))
        ms = 1000 * sum(s for *_, s in compactor.report)
        if lossy or admitted != "—" or compactor.state.compactions <= 3:
            print(f"  #{compactor.state.compactions:<3}{share(before):>5.0%} →{share(after):>4.0%}  {admitted:<9}"
                  f"{lossless:<36} {lossy or '—':<33}{ms:5.1f} ms")
        else:
            quiet.append(ms)
    print(f"  {'pass':<4}{'from':>5} →{'to':>4}  {'admitted':<9}{'lossless (tokens removed)':<36} "
          f"{'lossy (past 85%)':<33} time")
    compactor, _, _ = show.watch(messages, zones(), on_compaction)
    print(f"  … and {len(quiet)} more lossless-only passes, {sum(quiet):.0f} ms in all")
    return compactor


def altered_results(messages, tool, precise_tools):
    """Replay with zones and count the `tool` results that were changed while in the context."""
    original = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    altered = set()

    def on_compaction(compactor, before, after):
        altered.update(m["tool_call_id"] for m in after if m["role"] == "tool"
                       and names.get(m["tool_call_id"]) == tool and m["content"] != original[m["tool_call_id"]])
    show.watch(messages, zones(precise_tools), on_compaction)
    return len(altered), sum(name == tool for name in names.values())


def main():
    messages = generate_conversation(250, seed=3).messages
    show.banner("1. Zones over a 250-turn run (share of the effective window)")
    compactor = zones_run(messages)

    show.banner("2. Lossless: merge_same_role")
    split = [{"role": "assistant", "content": "The login test passes now."},
             {"role": "assistant", "content": "The diff is small."}]
    merged = merge_same_role(split)  # the user's latest request is never merged: it stays verbatim
    print(f"[merge] {len(split)} assistant messages → {len(merged)}: {merged[0]['content']!r}")

    show.banner("3. A never-compress tool keeps its results verbatim")
    for precise in ((), ("bash",)):
        altered, total = altered_results(messages, "bash", precise)
        print(f"[precise] precise_tools={precise!s:<9} bash results altered while in context: "
              f"{altered} of {total}")

    show.banner("4. Admit a huge tool output, then check a summary")
    log = "\n".join(f"step {i}: ok" if i != 1_500 else "step 1500: ERROR disk quota exceeded"
                    for i in range(3_000))
    calls = [show.call("c1", "bash", command="./migrate.sh"), show.call("c2", "run_sql", query="SELECT * FROM log")]
    entering = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Run the migration."}, show.asks(*calls),
                show.result("c1", log), show.result("c2", log)]
    admit = Compactor(policy="zones", precise_tools=("run_sql",))  # ("admit", {"tokens": 2_000, **EVERY_CALL})
    admitted = admit.compact(entering)  # at 3% of the window: only the every-call step runs
    for name, m in zip(("bash", "run_sql"), admitted[3:]):
        kept = content_text(m)
        print(f"[admit] {name:<7} {text_tokens(log):,} → {text_tokens(kept):,} tokens; "
              f"error line kept: {'ERROR disk quota' in kept}; {'verbatim' if kept == log else 'cut (no model)'}")
    source = ("FAILED tests/test_auth.py::test_login\n3 failed, 41 passed\nTIMEOUT = 30  # src/config.py\n"
              "Do not modify the deploy script, look at the possible causes first.")  # echo-agent's example
    summary = ("- 3 tests fail in tests/test_auth.py\n- The timeout is 45 seconds (src/config.py)\n"
               "- The user asked to modify the deploy script")
    for line in flag_unverified(summary, source).split("\n"):
        print(f"[drift] {line}")
    print(f"\n[lesson 14] done: {compactor.state.compactions} zone passes, "
          f"{compactor.state.tokens_saved:,} tokens saved; precise bash results altered: {altered}")


if __name__ == "__main__":
    main()
