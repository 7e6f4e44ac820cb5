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

  Lossy steps run only once the history passed `lossy_at`, and stop as soon as the lossless ones
  brought it back under `lossy_resume` (75%). Tools in `precise_tools` are never masked, snipped
  or deduplicated. admit_tool_result(compactor, call, output) shrinks a huge output before it even enters the context
  (past the policy's admit_tokens, 2,000; the cheap model summarizes it; with no model it is snipped), and flag_unverified marks a
  summary line whose numbers or paths its source never said. One rule stands outside the zones, as
  in every policy: an old output over a fifth of the room for messages is cut once read (five-layer).

What changed since lesson 13: the same rungs, sorted by what they cost in information.
Try it: set trigger=0.5 (where lossless steps start) or lossy_at=0.95; replace ("bash",) by ("read_file",).
Explains compact.py Part II ("The one engine every strategy runs"): Compactor, admit_tool_result,
  summarize_tool_output; ("The summarizer that reads in pieces"): flag_unverified; Part III ("The
  ladder's steps and policies"): the policy "zones", snip, evict; ("Zones"): merge_same_role. The
  runs are replayed with lessons/benchmark.py's replay (through show.watch).
Run: python lessons/14_zones.py
"""

import show
from compact import Compactor, admit_tool_result, flag_unverified, merge_same_role, text_tokens
from conversations import generate_conversation

LOSSLESS = ("reasoning", "merge", "dedupe", "clear", "mask")


def zones(precise_tools=()):
    """What show.watch builds for each run: the zones policy at a 32,000-token window."""
    return lambda summarizer: Compactor(context_window=32_000, reserved_output=4_000, policy="zones",
                                        trigger=0.60, lossy_at=0.85, precise_tools=precise_tools)


def zones_run(messages):
    quiet = []

    def on_compaction(compactor, before, after):
        share = lambda ms: compactor.budget.history(ms) / compactor.budget.effective(ms)
        ran = [(name, b - a) for name, b, a, _ in compactor.report if a < b]
        lossless = " ".join(f"{n} -{d:,}" for n, d in ran if n in LOSSLESS) or "—"
        lossy = " ".join(f"{n} -{d:,}" for n, d in ran if n not in (*LOSSLESS, "too large"))
        cut = sum(d for n, d in ran if n == "too large")  # the rule every policy shares, outside the zones
        ms = 1000 * sum(s for *_, s in compactor.report)
        if lossy or cut or compactor.state.compactions <= 3:
            print(f"  #{compactor.state.compactions:<3}{share(before):>5.0%} →{share(after):>4.0%}  "
                  f"{lossless:<36} {lossy or '—':<33}{ms:5.1f} ms"
                  + f"\n{'':13}one old output too large, cut as in every policy: -{cut:,}" * bool(cut))
        else:
            quiet.append(ms)
    print(f"  {'pass':<4}{'from':>5} →{'to':>4}  {'lossless (tokens removed)':<36} {'lossy':<33} time")
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
    admit = Compactor(policy="zones", precise_tools=("run_sql",))  # admit_tokens 2,000
    for name in ("bash", "run_sql"):
        call = {"function": {"name": name, "arguments": "{}"}}
        kept = admit_tool_result(admit, call, log)
        print(f"[admit] {name:<7} {text_tokens(log):,} → {text_tokens(kept):,} tokens; "
              f"error line kept: {'ERROR disk quota' in kept}; {'verbatim' if kept == log else 'snipped (no model)'}")
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
