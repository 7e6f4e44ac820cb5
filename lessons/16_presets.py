"""Lesson 16 · Presets: each design document's ladder
Motto: the same rungs in five orders with five sets of numbers; run each as its author meant it.

The problem: five design documents (seeds 000-004) describe five ladders. They share the rungs of
lessons 05-14 but not the order, the numbers or a few extra behaviours; rebuilt by hand, each
would be a guess at its design.

How it works: compact.PRESETS writes each document's ladder down as data, a policy of the one
engine (its steps, then its numbers, a comment beside it), and Compactor(policy=name, **overrides)
builds it. Every summary ends with the focus it was asked for ("Focus of this compaction: ...").

    evo-agent          000  reasoning → mask (before EVERY call, last 3 whole) → summary → last resort
    five-layer         001  reasoning → [snip 100/20 + mask + clear + dedupe: one batch, kept if ≥ 2,000 tok]
                            → light (extractive update) → summary → last resort
    smart-eviction     002  zones: lossless from 60% │ lossy from 75%, eviction by multiplied importance;
                            a 10% margin, confidence labels, a raw tail that grows with the task
    echo-agent         003  reasoning → mask (tool-specific placeholders) → dedupe → snip → summary
                            → last resort; compaction_stats() times the summarizer's failures
    sawtooth-tutorial  004  hybrid: [system][graded rolling summary][last 6 messages raw]

Part 1 replays one generated conversation through every preset, as lesson 15 replays strategies;
parts 2-6 show each seed's signature behaviour on a tiny input.

What changed since lesson 15: the benchmark compared our own policies; here each design document's
ladder, built from its own settings, runs on the same conversation.
Try it: set TURNS to 250 or WINDOW to 64_000; Compactor(policy="five-layer", cache_min_tokens=0).
Explains compact.py Part III ("Presets"): PRESETS; ("The ladder's steps and policies"): evict(weights),
  the step "light"; ("Eviction and the rolling window"): Weights(multiply=True), importance; ("The
  cheap layers"): placeholder; Part II ("The one engine every strategy runs"): Compactor(policy=name,
  every_call, cache_min_tokens, tail_growth), Compactor.summary_message (its focus line), batched,
  task_complexity; ("The offline summarizer"): grade, summarize_extractive(graded=True); ("The
  summarizer that reads in pieces"): flag_unverified(confidence); ("The guard"): compaction_stats. Part 1 replays with lessons/benchmark.py's
  replay and counted.
Run: python lessons/16_presets.py
"""

import show
from benchmark import Strategy, counted, replay
from compact import (EARLIER, PRESETS, PRUNED, Compactor, Pass, admit_tool_result, compaction_stats, content_text,
                     estimate_tokens, evict, flag_unverified, importance, is_summary, parse_summary, task_complexity)
from conversations import generate_conversation

TURNS, WINDOW = 150, 32_000
DECISION = "最终结论：选择方案B，因为它更简单。"  # "final conclusion: choose plan B, because it is simpler"


def start(text="Survey the code."):
    return [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": text}]


def reads(n, size=400):
    """n read_file turns, each output `size` words long."""
    return [m for i in range(n) for m in show.step(f"r{i}", "read_file", f"word{i} " * size, path=f"src/m{i}.py")]


def say(text):
    return {"role": "assistant", "content": text}


def preset_run(name, conversation):
    """Replay the conversation through Compactor(policy=name), its summaries counted."""
    box = {"premasks": 0, "reports": []}

    def begin(summarizer):
        compactor = box["compactor"] = counted(
            Compactor(policy=name, context_window=WINDOW, reserved_output=WINDOW // 4), summarizer)

        def compact(history):
            done = compactor.state.compactions
            out = compactor.compact(history)
            if out is not history and compactor.state.compactions == done:
                box["premasks"] += 1  # evo-agent's every_call: old results masked below the trigger
            elif out is not history:
                box["reports"].append({step: b - a for step, b, a, _ in compactor.report})
            return out
        admit = (lambda call, output: admit_tool_result(compactor, call, output)) if compactor.admit_tokens else None
        return compact, admit
    return replay(conversation.messages, Strategy(name, begin), WINDOW, conversation.facts), box


def main():
    conversation = generate_conversation(TURNS, seed=2)
    show.banner(f"1. One {TURNS}-turn conversation through every preset (window {WINDOW:,})")
    none = replay(conversation.messages, Strategy("none", lambda s: (lambda h: h, None)), WINDOW)
    kinds = ("constraint", "decision", "error")
    print(f"  {'preset':<18}{'sent':>6}  {'compactions':<21}summaries  " + "  ".join(f"{k}s" for k in kinds))
    runs = {name: preset_run(name, conversation) for name in PRESETS}
    for name, (run, box) in runs.items():
        kept = [f"{sum(run.kept[f.text] for f in conversation.facts if f.kind == k)} of "
                f"{sum(f.kind == k for f in conversation.facts)}" for k in kinds]
        done = f"{box['compactor'].state.compactions}" + (f" (+{box['premasks']} premasks)" * bool(box["premasks"]))
        print(f"  {name:<18}{run.requests / none.requests:>6.1%}  {done:<21}{run.summaries:>9}  "
              f"{kept[0]:>11}  {kept[1]:>9}  {kept[2]:>6}")
    for name, (_, box) in runs.items():
        print(f"[steps] {name:<18} " + " · ".join(step for step, *_ in box["compactor"].steps()))

    show.banner("2. evo-agent (seed 000): mask before every call; the focus")
    messages = [*start(), *reads(6)]
    plain, evo = Compactor(context_window=200_000), Compactor(policy="evo-agent", context_window=200_000)
    out = evo.compact(messages)
    print(f"[evo-agent] at {evo.budget.history(messages) / evo.budget.effective(messages):.0%} of the window the "
          f"default changes nothing ({plain.compact(messages) is messages}); evo-agent masks "
          f"{sum(content_text(m).startswith(PRUNED) for m in out)} of 6 results, the last 3 stay whole")
    small = Compactor(policy="evo-agent", context_window=8_000, reserved_output=500)
    out = small.compact([*start(), *reads(30)], focus="the parser module", level=1)
    summary = content_text(next(m for m in out if is_summary(m)))
    print(f"[evo-agent] the focus ends the summary, as in every policy: "
          f"{next(line for line in summary.splitlines() if 'Focus' in line)!r}")

    show.banner("3. five-layer (seed 001): snip 100/20, cache first, the light tier")
    five = Compactor(policy="five-layer")
    batch, step, _ = five.steps()[1]
    log = "\n".join(f"line {i}" for i in range(3_000))
    lines = content_text(step([*start("Why does the job fail?"), *show.step("c1", "bash", log, command="cat job.log"),
                               *show.step("c2", "bash", "ok", command="true")], Pass())[3]).split("\n")
    print(f"[five-layer] {batch!r}: a 3,000-line log → {lines[0]!r} … {lines[99]!r}, {lines[100]!r}, "
          f"{lines[101]!r} … {lines[-1]!r}")
    reports = runs["five-layer"][1]["reports"]
    freed = ", ".join(f"{r[batch]:,}" + " (not kept)" * (r[batch] < five.cache_min_tokens) for r in reports if batch in r)
    print(f"[five-layer] cache first: the batch freed {freed} tokens in part 1; one under "
          f"{five.cache_min_tokens:,} is not kept, so the cached prefix changes once or not at all")
    light = [r for r in reports if "light" in r]
    kept = sum("summary" not in r for r in light)  # a light tier not kept hands over to the summary rung
    print(f"[five-layer] the light tier ran in {len(light)} compactions: kept in {kept} (no model call); "
          f"where it was not, the summary rung rebuilt")

    show.banner("4. smart-eviction (seed 002): multiplied importance, 75%, a margin")
    routine = [m for i in range(8) for m in show.step(f"l{i}", "bash", "ok " * 300, command=f"ls dir{i}")]
    messages = [*start("比较方案A和方案B，然后实现。"), *routine[:8], say(DECISION), *routine[8:],
                {"role": "user", "content": "继续。"}]
    smart = Compactor(policy="smart-eviction", context_window=int(estimate_tokens(messages) / 0.9),
                                reserved_output=0)
    weights = dict(step for step in smart.layers if not isinstance(step, str))["evict"]["weights"]
    texts = [content_text(m) for m in evict(smart, messages, Pass())]
    print(f"[smart-eviction] importance (role × (1 + recency) × 1.5 a kind): the decision "
          f"{importance(messages, (10, 11), 0.5, weights):.1f}, a routine ls "
          f"{importance(messages, (2, 4), 0.5, weights):.1f}")
    print(f"[smart-eviction] evict: {len(messages)} → {len(texts)} messages, "
          f"{sum(t.startswith('[evicted]') for t in texts)} [evicted] notes; {DECISION!r} kept: {DECISION in texts}")
    messages = [*start(), *[m for i in range(12) for m in (say(f"Plan {i}: " + "step " * 150),
                                                           {"role": "user", "content": f"Fine, go on {i}."})]]
    window, lossy = int(estimate_tokens(messages) / 0.8), {"snip", "shorten", "evict", "summary", "last resort"}
    for label, c in (("zones default", Compactor(policy="zones", context_window=window, reserved_output=0)),
                     ("smart-eviction", Compactor(policy="smart-eviction", context_window=window,
                                                            reserved_output=0, margin=0.0))):
        c.compact(messages)  # talk only, nothing lossless to do, at 80% of the window
        print(f"[zones] at 80%: {label:<15} lossy from {c.lossy_at:.0%}: ran "
              f"{', '.join(n for n, *_ in c.report if n in lossy) or 'no lossy step'}")
    effective = [c.budget.effective([]) for c in (Compactor(policy="smart-eviction", context_window=100_000,
                                                                      reserved_output=0),
                                                  Compactor(context_window=100_000, reserved_output=0))]
    print(f"[margin] a 100,000-token window: smart-eviction plans with {effective[0]:,}, the default {effective[1]:,}")
    print(f"[confidence] {flag_unverified('- HAT123 departs at 10:40 from gate 7', 'HAT123 gate 7', smart.confidence)}")
    tails = [len(conversation.messages) - c.boundaries(conversation.messages)[1] for c in (
        Compactor(policy="zones", context_window=WINDOW, reserved_output=WINDOW // 4),
        Compactor(policy="smart-eviction", context_window=WINDOW, reserved_output=WINDOW // 4))]
    print(f"[adaptive] part 1's task: task_complexity {task_complexity(conversation.messages):.2f}; raw tail "
          f"{tails[0]} messages by default, {tails[1]} with tail_growth={Compactor(policy='smart-eviction').tail_growth}")

    show.banner("5. echo-agent (seed 003): tool-specific placeholders, compaction_stats()")
    grep = "exit code 0\n" + "\n".join(f"src/m{i}.py:{i + 3}: # TODO: handle a missing value" for i in range(12))
    messages = [*start(), *show.step("g", "bash", grep, command="grep -rn TODO src"),
                *show.step("f", "read_file", "def load(item):\n    return item\n" * 60, path="src/app.py"), *reads(3)]
    mask = {name: step for name, step, _ in Compactor(policy="echo-agent").steps()}["mask"]
    for m in mask(messages, Pass())[3:6:2]:
        print(f"[echo-agent] {content_text(m).splitlines()[0]}")

    def broken(messages, focus=None):
        raise RuntimeError("model down")
    echo = Compactor(policy="echo-agent", context_window=4_000, reserved_output=500, summarize=broken)
    echo.compact([*start(), *reads(10, 60)], level=1)
    print(f"[stats] {compaction_stats(echo.state, echo.guard)}")

    show.banner("6. sawtooth-tutorial (seed 004): the graded rolling summary")
    saw, tests = Compactor(policy="sawtooth-tutorial", keep_recent=2), "collected 40 items\n" + "." * 40 + "\n"
    messages = [*start("Fix the login bug."), *show.step("t0", "read_file", "def check(token, now):\n    return "
                "token.expiry < now\n" * 20, path="src/auth.py", text="I read auth.py. The token check is wrong."),
                say("Decided: compare with <= instead of <."),
                *show.step("t1", "bash", tests * 5 + "FAILED tests/test_auth.py::test_expiry", command="pytest")]
    later = [say("The check uses <= now. Running the tests."), *show.step("t2", "bash", tests * 5 + "41 passed",
             command="pytest"), say("The tests pass."), *show.step("t3", "bash", "ok", command="git diff")]
    for n, more in enumerate(([], later), start=1):
        messages = saw.compact([*messages, *more], level=1)
        sections = parse_summary(saw.state.summary)
        print(f"[graded] summary {n}: " + "; ".join(f"{t}: {sections[t]}" for t in (EARLIER, "Decisions", "Progress")
                                                   if t in sections))
    best = min(runs, key=lambda name: runs[name][0].requests)
    print(f"\n[lesson 16] done: {len(PRESETS)} presets on one {TURNS}-turn conversation, the fewest tokens sent by "
          f"{best} ({runs[best][0].requests / none.requests:.1%} of no compaction); {DECISION!r} survived eviction")


if __name__ == "__main__":
    main()
