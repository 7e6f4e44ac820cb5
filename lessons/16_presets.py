"""Lesson 16 · Presets: each design document's ladder
Motto: the same rungs in five orders with five sets of numbers; run each as its author meant it.

The problem: five design documents describe five ladders. They share the rungs of
lessons 05-14 but not the order, the numbers or a few extra behaviours; rebuilt by hand, each
would be a guess at its design.

How it works: compact.PRESETS writes each document's ladder down as data, a policy of the one
engine: its steps, each a name or (name, {parameters}), and the numbers it differs in, a comment
beside it; Compactor(policy=name, **overrides) builds it, and a setting you give is kept. The
engine's own parameters say when a step runs: "at" (0, EVERY_CALL: before every call, below the
trigger too), "until", and "frees" (cache first: kept only when it frees that many tokens); the
others go to the step. Every summary ends with the focus it was asked for.

    evo-agent          000  mask (EVERY call, last 3 whole) → compact history (past 50,000 characters,
                            every call) → reasoning → summary → last resort
    five-layer         001  reasoning → batch [snip 100/20 + mask + clear + dedupe], frees 2,000
                            → light (extractive update) → summary → last resort
    smart-eviction     002  zones: admit, lossless from 60% │ lossy(0.75, 0.75, ...): evict by
                            multiplied importance, a summary with confidence labels, both with a
                            tail grown(20, 30); a 10% margin
    echo-agent         003  reasoning → mask (tool-specific placeholders, before its token-budget
                            tail) → dedupe → snip → shorten → summary (tail from_user) → last resort
    sawtooth-tutorial  004  hybrid: [system][the rolling summary, ("summary", {"graded": True})]
                            [last 6 messages raw]

Part 1 replays one generated conversation through every preset, as lesson 15 replays strategies;
parts 2-6 show each document's signature behaviour on a tiny input, each step run alone as the engine
runs it (Compactor.steps gives the Step, its run takes the messages and a Pass).

What changed since lesson 15: the benchmark compared our own policies; here each design document's
ladder, built from its own settings, runs on the same conversation.
Try it: set TURNS to 250 or WINDOW to 64_000; Compactor(policy="five-layer", layers=(...)) with
  ("batch", {"frees": 0, "steps": (...)}) keeps every batch.
Explains compact.py Part III ("Presets"): PRESETS, grown, from_user, task_complexity; ("The ladder's
  steps and policies"): EVERY_CALL, lossy, batch, light, compact_history, mask, evict; ("Eviction and
  the rolling window"): Weights, importance; ("The cheap layers"): placeholder; Part II ("The
  engine"): Compactor, Compactor.steps, Step, Pass; ("The summary step"): boundaries; ("The
  offline summarizer"): grade, summarize_extractive; ("The summarizer that reads in pieces"):
  flag_unverified; ("The guard"): compaction_stats. Part 1 replays with lessons/benchmark.py's
  replay and counted.
Run: python lessons/16_presets.py
"""

import show
from benchmark import Strategy, counted, replay
from compact import (EARLIER, PRESETS, PRUNED, Compactor, Pass, compaction_stats, content_text,
                     estimate_tokens, flag_unverified, importance, is_summary, parse_summary, task_complexity)
from conversations import generate_conversation

TURNS, WINDOW = 150, 32_000
DECISION = "最终结论：选择方案B，因为它更简单。"  # "final conclusion: choose plan B, because it is simpler"
LOSSY = ("snip", "shorten", "evict", "summary", "last resort")


def start(text="Survey the code."):
    return [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": text}]


def reads(n, size=400):
    """n read_file turns, each output `size` words long."""
    return [m for i in range(n) for m in show.step(f"r{i}", "read_file", f"word{i} " * size, path=f"src/m{i}.py")]


def say(text):
    return {"role": "assistant", "content": text}


def step_of(compactor, name):
    """The preset's step called `name`, as the engine runs it: a Step whose run takes (messages, Pass)."""
    return next(step for step in compactor.steps(compactor.layers) if step.name == name)


def preset_run(name, conversation):
    """Replay the conversation through Compactor(policy=name), its summaries counted; a compaction in
    which only steps that run before every call (`at` 0) changed the history is counted apart."""
    box = {"every_call": 0, "reports": []}

    def begin(summarizer):
        compactor = box["compactor"] = counted(
            Compactor(policy=name, context_window=WINDOW, reserved_output=WINDOW // 4), summarizer)
        every = {step.name for step in compactor.steps(compactor.layers) if step.at == 0}

        def compact(history):
            out = compactor.compact(history)
            if out is not history:
                report = {step: b - a for step, b, a, _ in compactor.report}
                box["reports"].append(report)
                box["every_call"] += {step for step, freed in report.items() if freed > 0} <= every
            return out
        return compact
    return replay(conversation.messages, Strategy(name, begin), WINDOW, conversation.facts), box


def every_preset(conversation):
    """Part 1: the table of every preset on one conversation, then each preset's steps in order."""
    none = replay(conversation.messages, Strategy("none", lambda s: (lambda h: h)), WINDOW)
    kinds = ("constraint", "decision", "error")
    print(f"  {'preset':<18}{'sent':>6}  {'compactions':<21}summaries  " + "  ".join(f"{k}s" for k in kinds))
    runs = {name: preset_run(name, conversation) for name in PRESETS}
    for name, (run, box) in runs.items():
        kept = [f"{sum(run.kept[f.text] for f in conversation.facts if f.kind == k)} of "
                f"{sum(f.kind == k for f in conversation.facts)}" for k in kinds]
        done = f"{box['compactor'].state.compactions}" + f" ({box['every_call']} every call)" * bool(box["every_call"])
        print(f"  {name:<18}{run.requests / none.requests:>6.1%}  {done:<21}{run.summaries:>9}  "
              f"{kept[0]:>11}  {kept[1]:>9}  {kept[2]:>6}")
    for name, (_, box) in runs.items():
        compactor = box["compactor"]
        print(f"[steps] {name:<18} " + " · ".join(step.name for step in compactor.steps(compactor.layers)))
    return runs, none


def evo_agent():
    """Part 2: masking before every call, CompactHistory past 50,000 characters, and the focus line."""
    messages = [*start(), *reads(6)]
    plain, evo = Compactor(context_window=200_000), Compactor(policy="evo-agent", context_window=200_000)
    out = evo.compact(messages)
    print(f"[evo-agent] at {evo.budget.history(messages) / evo.budget.effective(messages):.0%} of the window the "
          f"default changes nothing ({plain.compact(messages) is messages}); evo-agent masks "
          f"{sum(content_text(m).startswith(PRUNED) for m in out)} of 6 results, the last 3 stay whole")
    large = [*start(), *reads(6, 3_000)]
    out = evo.compact(large)
    print(f"[evo-agent] 6 reads of {len(content_text(large[3])):,} characters, at "
          f"{evo.budget.history(large) / evo.budget.effective(large):.0%} of the window: the 3 left whole hold over "
          f"50,000, so compact history summarizes: {len(large)} → {len(out)} messages "
          f"({' · '.join(name for name, *_ in evo.report)})")
    small = Compactor(policy="evo-agent", context_window=8_000, reserved_output=500)
    out = small.compact([*start(), *reads(30)], focus="the parser module", level=1)
    summary = content_text(next(m for m in out if is_summary(m)))
    print(f"[evo-agent] the focus ends the summary, as in every policy: "
          f"{next(line for line in summary.splitlines() if 'Focus' in line)!r}")


def five_layer(reports):
    """Part 3: the batch's snip to 100 + 20 lines, cache first, and the light tier in part 1's run."""
    five = Compactor(policy="five-layer")
    batch = five.steps(five.layers)[1]
    log = "\n".join(f"line {i}" for i in range(3_000))
    lines = content_text(batch.run([*start("Why does the job fail?"), *show.step("c1", "bash", log, command="cat job.log"),
                                    *show.step("c2", "bash", "ok", command="true")], Pass())[3]).split("\n")
    print(f"[five-layer] {batch.name!r}: a 3,000-line log → {lines[0]!r} … {lines[99]!r}, {lines[100]!r}, "
          f"{lines[101]!r} … {lines[-1]!r}")
    freed = ", ".join(f"{r[batch.name]:,}" + " (not kept)" * (r[batch.name] < batch.frees)
                      for r in reports if batch.name in r)
    print(f"[five-layer] cache first: the batch freed {freed} tokens in part 1; one under "
          f"{batch.frees:,} (frees) is not kept, so the cached prefix changes once or not at all")
    light = [r for r in reports if "light" in r]
    kept = sum("summary" not in r for r in light)  # a light tier not kept hands over to the summary rung
    print(f"[five-layer] the light tier ran in {len(light)} compactions: kept in {kept} (no model call); "
          f"where it was not, the summary rung rebuilt")


def smart_eviction(conversation):
    """Part 4: multiplied importance, lossy from 75%, the margin, confidence labels, the grown tail."""
    routine = [m for i in range(8) for m in show.step(f"l{i}", "bash", "ok " * 300, command=f"ls dir{i}")]
    messages = [*start("比较方案A和方案B，然后实现。"), *routine[:8], say(DECISION), *routine[8:],
                {"role": "user", "content": "继续。"}]
    smart = Compactor(policy="smart-eviction", context_window=int(estimate_tokens(messages) / 0.9), reserved_output=0)
    evict = step_of(smart, "evict")
    weights = evict.run.keywords["weights"]  # the step's parameters, bound to it
    texts = [content_text(m) for m in evict.run(messages, Pass())]
    print(f"[smart-eviction] importance (role × (1 + recency) × 1.5 a kind): the decision "
          f"{importance(messages, (10, 11), 0.5, weights):.1f}, a routine ls {importance(messages, (2, 4), 0.5, weights):.1f}")
    print(f"[smart-eviction] evict: {len(messages)} → {len(texts)} messages, "
          f"{sum(t.startswith('[evicted]') for t in texts)} [evicted] notes; {DECISION!r} kept: {DECISION in texts}")
    talk = [*start(), *[m for i in range(12) for m in (say(f"Plan {i}: " + "step " * 150),
                                                       {"role": "user", "content": f"Fine, go on {i}."})]]
    window = int(estimate_tokens(talk) / 0.8)
    for label, c in (("zones default", Compactor(policy="zones", context_window=window, reserved_output=0)),
                     ("smart-eviction", Compactor(policy="smart-eviction", context_window=window, reserved_output=0,
                                                  margin=0.0))):
        c.compact(talk)  # talk only, nothing lossless to do, at 80% of the window
        print(f"[zones] at 80%: {label:<15} lossy from {step_of(c, 'snip').at:.0%}: ran "
              f"{', '.join(n for n, *_ in c.report if n in LOSSY) or 'no lossy step'}")
    effective = [c.budget.effective([]) for c in (Compactor(policy="smart-eviction", context_window=100_000,
                                                            reserved_output=0),
                                                  Compactor(context_window=100_000, reserved_output=0))]
    print(f"[margin] a 100,000-token window: smart-eviction plans with {effective[0]:,}, the default {effective[1]:,}")
    confidence = step_of(smart, "summary").run.keywords["confidence"]
    print(f"[confidence] {flag_unverified('- HAT123 departs at 10:40 from gate 7', 'HAT123 gate 7', confidence)}")
    smart = Compactor(policy="smart-eviction", context_window=WINDOW, reserved_output=WINDOW // 4)
    grown = step_of(smart, "summary").run.keywords["tail"]  # grown(20, 30), the evict step's tail too
    tails = {f"{task_complexity(h):.2f}": len(h) - grown(smart, h)[1] for h in (talk, conversation.messages)}
    print("[adaptive] the raw tail grown(20, 30) keeps, by the task's complexity: "
          + ", ".join(f"{n} messages at {c}" for c, n in tails.items()) + " (part 1's task)")


def echo_agent():
    """Part 5: placeholders that say what each tool returned, and compaction_stats() after a failure."""
    grep = "exit code 0\n" + "\n".join(f"src/m{i}.py:{i + 3}: # TODO: handle a missing value" for i in range(12))
    messages = [*start(), *show.step("g", "bash", grep, command="grep -rn TODO src"),
                *show.step("f", "read_file", "def load(item):\n    return item\n" * 60, path="src/app.py"), *reads(3)]
    mask = step_of(Compactor(policy="echo-agent", context_window=8_000, reserved_output=500), "mask")
    for m in mask.run(messages, Pass())[3:6:2]:
        print(f"[echo-agent] {content_text(m).splitlines()[0]}")

    def broken(messages, focus=None):
        raise RuntimeError("model down")
    echo = Compactor(policy="echo-agent", context_window=4_000, reserved_output=500, summarize=broken)
    echo.compact([*start(), *reads(10, 60)], level=1)
    print(f"[stats] {compaction_stats(echo.state, echo.guard)}")


def sawtooth_tutorial():
    """Part 6: the rolling summary that grades detail by age, over two compactions."""
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


def main():
    conversation = generate_conversation(TURNS, seed=2)
    show.banner(f"1. One {TURNS}-turn conversation through every preset (window {WINDOW:,})")
    runs, none = every_preset(conversation)
    show.banner("2. evo-agent (evo-agent's three layers): mask before every call, compact history, the focus")
    evo_agent()
    show.banner("3. five-layer (the five-layer ladder): snip 100/20, cache first, the light tier")
    five_layer(runs["five-layer"][1]["reports"])
    show.banner("4. smart-eviction (smart compression and eviction): multiplied importance, 75%, a margin")
    smart_eviction(conversation)
    show.banner("5. echo-agent (echo-agent's pipeline): tool-specific placeholders, compaction_stats()")
    echo_agent()
    show.banner("6. sawtooth-tutorial (the sawtooth tutorial): the graded rolling summary")
    sawtooth_tutorial()
    best = min(runs, key=lambda name: runs[name][0].requests)
    print(f"\n[lesson 16] done: {len(PRESETS)} presets on one {TURNS}-turn conversation, the fewest tokens sent by "
          f"{best} ({runs[best][0].requests / none.requests:.1%} of no compaction); {DECISION!r} survived eviction")


if __name__ == "__main__":
    main()
