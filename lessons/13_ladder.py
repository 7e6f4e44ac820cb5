"""Lesson 13 · The ladder and its fallbacks
Motto: climb only as high as you must; when a rung breaks, land on the one below.

The problem: each layer alone is either too weak (masking cannot shrink a huge newest output) or
too costly (a model summary on every turn). And the summarizer is a network call: it times out,
returns "Error: rate limit", or returns nothing, and that must never replace the history.

How it works: the Compactor runs the rungs cheapest first and stops as soon as the history is
back under the target; most compactions never reach the summarizer.

    reasoning → mask → snip → clear → dedupe → shorten → summary → last resort → ContextOverflowError
    free ─────────────────────────────────────────────► one model call ──► rebuild ──► give up, loudly

  The summary goes through a guard: a timeout, a check of the answer (empty, too long, shaped
  like an error), summarize_extractive as fallback, and a breaker: after `max_failures` (3)
  failures in a row it stops calling the summarizer for the next `cooldown` summaries (5; 3 here).
  The guard keeps only its settings: the failures, those in a row, the breaker and their times
  are the state's (guard.state, the CompactState every strategy keeps and /context reads).
  The last resort rebuilds the list from the system prompt, the summary with the user's words, and
  the latest turn; if even that does not fit, ContextOverflowError says what to change. The steps
  are data: STEPS maps each name to a function of the engine, the messages and the compaction's
  scratch (a Pass), then its parameters; a policy of POLICIES lists them in order, each a name or
  (name, {parameters}), and Compactor.steps turns them into Step objects (name, run, at, until,
  frees). compact(level=...) says how hard: 0 when due, 1 now, 2 as far as it goes (the last resort
  runs, then every long message but the user's is cut). One step alone is a policy of one step:
  Compactor(layers=("last resort",)).compact(messages, level=2).

  The five-layer ladder adds a light tier below the summary: Compactor(layers=(..., "light", "summary", ...)).
  It updates the session's rolling summary from the leaving turns with the extractive summarizer,
  no model call, and is kept only when that alone brings the history under the target; otherwise
  its summary is discarded and the full rebuild (the summary rung, one model call) runs:

    light: rolling summary + leaving turns ──► under the target? ── yes ──► kept, no model call
                                                                   └─ no ──► summary rung rebuilds

  compaction_stats(compactor.state, compactor.guard) says how it is doing, in the line /context
  prints for every strategy: compactions, tokens saved, when the summarizer failed, and a WARNING
  while the breaker is open and summaries are degraded.

What changed since lesson 12: the layers become one policy, with a plan for every failure.
Try it: set WINDOW to 16_000 (more summaries) or 48_000; give the SummaryGuard cooldown=1; set
  LIGHT_TARGETS to (0.5, 0.12).
Explains compact.py Part II ("The engine"): Compactor.compact, Compactor.steps, Step, Pass, CompactState,
  POLICIES; ("The last step"): last_resort, cut_everything, STEPS; ("The guard"): SummaryGuard,
  check_summary, compaction_stats; ("Refusals the engine reads"): ContextOverflowError; Part III
  ("The ladder's steps and policies"): light, the policy "layered". Part 1 replays the run with
  lessons/benchmark.py's replay and CountingSummarizer (through show.watch).
Run: python lessons/13_ladder.py
"""

import textwrap

import show
from benchmark import counted
from compact import (Compactor, ContextOverflowError, SummaryGuard, compaction_stats, estimate_tokens,
                     is_summary, summarize_extractive)
from conversations import generate_conversation

WINDOW = 32_000
LIGHT_TARGETS = (0.5, 0.1)  # part 5: a target the light tier reaches, and one it cannot


def flaky_summarizer():
    """Fails three times the way real summarizers do (an exception, an error text, nothing),
    then answers like a model would. It counts its calls in `.calls`."""
    failures = [ConnectionError("connection reset by peer"), "Error: rate limit", ""]

    def summarize(messages, focus=None):
        summarize.calls += 1
        if failures:
            failure = failures.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return failure
        return "## Progress\n- Fixing the failing login test (a stand-in for a model's summary)."
    summarize.calls = 0
    return summarize


def stand_in_model():
    """A model summarizer that answers at once and counts its calls in `.calls`."""
    def summarize(messages, focus=None):
        summarize.calls += 1
        return "## Progress\n- Fixing the failing login test (a stand-in for a model's summary)."
    summarize.calls = 0
    return summarize


def ladder_run():
    """Part 1: the layered ladder over a replayed 250-turn run; which steps each compaction needed."""
    rows = []  # (compaction, history before, history after, the steps it ran)

    def on_compaction(compactor, before, after):
        rows.append((compactor.state.compactions, before, after, list(compactor.report)))

    def make(summarizer):  # the benchmark's CountingSummarizer counts every call of the guard
        return counted(Compactor(policy="layered", context_window=WINDOW, reserved_output=WINDOW // 8), summarizer)
    compactor, run, summarizer = show.watch(generate_conversation(250, seed=3).messages, make, on_compaction)
    below = mask_only = cut_only = 0
    for n, before, after, report in rows:
        names = [name for name, *_ in report]
        steps = " · ".join(f"{name} -{b - a:,}" if a < b else f"{name} 0" for name, b, a, _ in report)
        print(f"  #{n:<2} {compactor.budget.history(before):>6,} → {compactor.budget.history(after):>6,} tok | {steps}")
        if "summary" not in names:  # the ladder stopped before the summary rung
            below += 1
            mask_only += names[-1] == "mask"
            cut_only += names == ["too large"]  # the rule every policy shares: one old output too large
    compactions = compactor.state.compactions
    print(f"[ladder] {below} of {compactions} compactions stopped below the summary rung "
          f"({mask_only} right after masking, {cut_only} by cutting one output too large) and called no "
          f"summarizer; {summarizer.calls} summarizer calls in all, over {len(run.per_turn)} model calls")
    return below, compactions


def breaker():
    """Part 2: a summarizer that fails three ways; the guard falls back, then its breaker opens."""
    flaky = flaky_summarizer()
    guard = SummaryGuard(flaky, summarize_extractive, max_failures=3, cooldown=3)
    middle = generate_conversation(20, seed=5).messages[2:30]
    offline = summarize_extractive(middle)
    for attempt in range(1, 8):
        calls = flaky.calls
        text = guard(middle)
        called = "called " if flaky.calls > calls else "skipped"
        used = "offline fallback" if text == offline else "its own summary"
        error = f"  last_error={guard.state.last_error!r}" if attempt <= 3 else ""
        print(f"  [guard] summary {attempt}: summarizer {called} → {used:<17}"
              f"breaker {'open' if guard.open else 'closed'}{error}")


def overflow():
    """Part 3: a pasted log no step may cut (no archive holds it), after 20 turns and as the first task."""
    huge = {"role": "user", "content": "Here is the log:\n" + "\n".join(  # with no archive, no word of it may go
        f"2024-05-14 worker {i} exited with status {i % 7}" for i in range(3_000))}
    system = {"role": "system", "content": "You are a coding agent."}
    raised = 0
    for name, messages in (("after 20 turns", generate_conversation(20, seed=1).messages + [huge]),
                           ("as the first task", [system, huge])):
        compactor = Compactor(policy="layered", context_window=16_000, reserved_output=2_000)
        try:
            out = compactor.compact(messages)
            print(f"[overflow] {name}: NOT raised; compact returned ~{estimate_tokens(out):,} tokens "
                  f"for {compactor.budget.effective(out):,} available")
        except ContextOverflowError as error:
            raised += 1
            print(f"[overflow] {name}: ContextOverflowError:")
            print(textwrap.fill(str(error), width=96, initial_indent="    ", subsequent_indent="    "))
    return raised


def one_step():
    """Part 4: a policy of one step, run as far as it goes."""
    messages = generate_conversation(20, seed=1).messages
    alone = Compactor(layers=("last resort",), context_window=16_000, reserved_output=2_000)
    out = alone.compact(messages, level=2)
    show.sizes("last resort", messages, out)
    print(f"[last resort] a policy of one step, run at level 2 (steps: {' · '.join(n for n, *_ in alone.report)}); "
          "it kept: " + " · ".join("summary" if is_summary(m) else m["role"] for m in out))
    return out


def light_tier():
    """Part 5: the light tier is kept only when its extractive update alone reaches the target."""
    messages = generate_conversation(90, seed=3).messages
    light_kept = 0
    for target in LIGHT_TARGETS:
        model = stand_in_model()
        compactor = Compactor(policy="layered", context_window=40_000, reserved_output=4_000, target=target, summarize=model,
                              layers=("reasoning", "light", "summary", "last resort"))
        compactor.compact(messages)
        goal = int(target * compactor.budget.effective(messages))
        names = [name for name, *_ in compactor.report]
        _, before, after, _ = compactor.report[names.index("light")]
        kept = "summary" not in names  # a light tier that was not kept hands over to the summary rung
        light_kept += kept
        done = (f"light {before:,} → {after:,} reaches it: kept" if kept else
                f"light would not reach it, so it left {before:,} as it was; the summary rung rebuilds")
        print(f"[light] target {target:.0%} = {goal:,} tok: {done}; model calls {model.calls}; steps: {' · '.join(names)}")
    return light_kept


def stats():
    """Part 6: compaction_stats() after each of three failures; the third opens the breaker."""
    def broken(messages, focus=None):
        raise ConnectionError("connection reset by peer")
    compactor = Compactor(policy="layered", context_window=16_000, reserved_output=2_000, summarize=broken)
    for n in range(1, 4):  # three forced compactions, each one reaches the summary rung
        compactor.compact(generate_conversation(20, seed=1).messages, level=1)
        print(f"[stats] after failure {n}: " + compaction_stats(compactor.state, compactor.guard).replace("\n", "\n  "))
    return compactor.guard.open


def main():
    show.banner(f"1. The ladder over a 250-turn run (window {WINDOW:,})")
    below, compactions = ladder_run()
    show.banner("2. A summarizer that fails: fallback, then the breaker")
    breaker()
    show.banner("3. When even the last resort cannot fit")
    raised = overflow()
    show.banner('4. One step alone, as far as it goes: Compactor(layers=("last resort",)), level 2')
    out = one_step()
    show.banner("5. The light tier (the five-layer ladder's): kept only if it alone reaches the target")
    light_kept = light_tier()
    show.banner("6. compaction_stats(): failure times, and a warning while degraded")
    is_open = stats()
    print(f"\n[lesson 13] done: {below} of {compactions} compactions needed no summarizer; "
          f"{raised} of 2 overflows raised ContextOverflowError; the last resort alone: {len(out)} messages; "
          f"light tier kept {light_kept} of {len(LIGHT_TARGETS)}; breaker open: {is_open}")


if __name__ == "__main__":
    main()
