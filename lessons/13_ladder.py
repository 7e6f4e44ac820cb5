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
  The last resort rebuilds the list from the system prompt, the summary with the pins, and the
  latest turn; if even that does not fit, ContextOverflowError says what to change. The steps are
  data: STEPS maps each name to a function of the engine, the messages and, from compact(), the
  compaction's scratch (a Pass), then its parameters; a policy of POLICIES lists them in order.
  Called alone, a fresh Compactor().last_resort(messages) makes its own Pass.

  Seed 001 adds a light tier below the summary: Compactor(layers=(..., "light", "summary", ...)).
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
Explains compact.py Part II ("The one engine every strategy runs"): Compactor.compact,
  Compactor.steps, Compactor.last_resort, STEPS, POLICIES, Pass; Part III ("The ladder's steps and
  policies"): the "light" step, the policy "layered"; Part II ("The guard"): SummaryGuard,
  check_summary, compaction_stats; ("Refusals"): ContextOverflowError. Part 1 replays the run with
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
        return "## Goal\n- Fix the failing login test (a stand-in for a model's summary)."
    summarize.calls = 0
    return summarize


def stand_in_model():
    """A model summarizer that answers at once and counts its calls in `.calls`."""
    def summarize(messages, focus=None):
        summarize.calls += 1
        return "## Goal\n- Fix the failing login test (a stand-in for a model's summary)."
    summarize.calls = 0
    return summarize


def main():
    show.banner(f"1. The ladder over a 250-turn run (window {WINDOW:,})")
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
          f"summarizer; {summarizer.calls} summarizer "
          f"calls in all, over {len(run.per_turn)} model calls")

    show.banner("2. A summarizer that fails: fallback, then the breaker")
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

    show.banner("3. When even the last resort cannot fit")
    huge = {"role": "user", "content": "Here is the log:\n" + "\n".join(  # users paste; nothing snips them
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

    show.banner("4. One rung alone: a fresh Compactor().last_resort(messages)")
    messages = generate_conversation(20, seed=1).messages
    out = Compactor(context_window=16_000, reserved_output=2_000).last_resort(messages)
    show.sizes("last resort", messages, out)
    print("[last resort] no compact() and no Pass given; it kept: "
          + " · ".join("summary" if is_summary(m) else m["role"] for m in out))

    show.banner("5. The light tier (seed 001): kept only if it alone reaches the target")
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
        print(f"[light] target {target:.0%} = {goal:,} tok: light {before:,} → {after:,} "
              f"{'reaches it: kept' if kept else 'is over it: discarded, the summary rung rebuilds'}; "
              f"model calls {model.calls}; steps: {' · '.join(names)}")

    show.banner("6. compaction_stats(): failure times, and a warning while degraded")

    def broken(messages, focus=None):
        raise ConnectionError("connection reset by peer")
    compactor = Compactor(policy="layered", context_window=16_000, reserved_output=2_000, summarize=broken)
    for n in range(1, 4):  # three forced compactions, each one reaches the summary rung
        compactor.compact(generate_conversation(20, seed=1).messages, level=1)
        print(f"[stats] after failure {n}: " + compaction_stats(compactor.state, compactor.guard).replace("\n", "\n  "))
    print(f"\n[lesson 13] done: {below} of {compactions} compactions needed no summarizer; "
          f"{raised} of 2 overflows raised ContextOverflowError; last_resort alone: {len(out)} messages; "
          f"light tier kept {light_kept} of {len(LIGHT_TARGETS)}; breaker open: {compactor.guard.open}")


if __name__ == "__main__":
    main()
