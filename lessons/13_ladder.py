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
  like an error), summarize_structured as fallback, and a breaker: after `max_failures` (3)
  failures in a row it stops calling the summarizer for the next `cooldown` summaries (5; 3 here).
  The last resort rebuilds the list from the system prompt, the summary with the pins, and the
  latest turn; if even that does not fit, ContextOverflowError says what to change. Each step is
  a method that takes the messages and, from compact(), the compaction's scratch (a Pass); called
  alone, a fresh Compactor().last_resort(messages) makes its own.

What changed since lesson 12: the layers become one policy, with a plan for every failure.
Try it: set WINDOW to 16_000 (more summaries) or 48_000; give the SummaryGuard cooldown=1.
Explains compact.py Part II ("The guard", "The ladder"): Compactor.compact, Compactor.steps,
  Compactor.last_resort, Pass, SummaryGuard, check_summary, ContextOverflowError. Part 1 replays
  the run with lessons/benchmark.py's replay and CountingSummarizer (through show.watch).
Run: python lessons/13_ladder.py
"""

import textwrap

import show
from benchmark import counted
from compact import (Compactor, ContextOverflowError, SummaryGuard, estimate_tokens, is_summary,
                     summarize_structured)
from conversations import generate_conversation

WINDOW = 32_000


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


def main():
    show.banner(f"1. The ladder over a 250-turn run (window {WINDOW:,})")
    rows = []  # (compaction, history before, history after, the steps it ran)

    def on_compaction(compactor, before, after):
        rows.append((compactor.state.compactions, before, after, list(compactor.report)))

    def make(summarizer):  # the benchmark's CountingSummarizer counts every call of the guard
        return counted(Compactor(context_window=WINDOW, reserved_output=WINDOW // 8), summarizer)
    compactor, run, summarizer = show.watch(generate_conversation(250, seed=3).messages, make, on_compaction)
    below = mask_only = 0
    for n, before, after, report in rows:
        names = [name for name, *_ in report]
        steps = " · ".join(f"{name} -{b - a:,}" if a < b else f"{name} 0" for name, b, a, _ in report)
        print(f"  #{n:<2} {compactor.budget.history(before):>6,} → {compactor.budget.history(after):>6,} tok | {steps}")
        if "summary" not in names:  # the ladder stopped before the summary rung
            below += 1
            mask_only += names[-1] == "mask"
    compactions = compactor.state.compactions
    print(f"[ladder] {below} of {compactions} compactions stopped below the summary rung "
          f"({mask_only} right after masking) and called no summarizer; {summarizer.calls} summarizer "
          f"calls in all, over {len(run.per_turn)} model calls")

    show.banner("2. A summarizer that fails: fallback, then the breaker")
    flaky = flaky_summarizer()
    guard = SummaryGuard(flaky, max_failures=3, cooldown=3)
    middle = generate_conversation(20, seed=5).messages[2:30]
    offline = summarize_structured(middle)
    for attempt in range(1, 8):
        calls = flaky.calls
        text = guard(middle)
        called = "called " if flaky.calls > calls else "skipped"
        used = "offline fallback" if text == offline else "its own summary"
        error = f"  last_error={guard.last_error!r}" if attempt <= 3 else ""
        print(f"  [guard] summary {attempt}: summarizer {called} → {used:<17}"
              f"breaker {'open' if guard.open else 'closed'}{error}")

    show.banner("3. When even the last resort cannot fit")
    huge = {"role": "user", "content": "Here is the log:\n" + "\n".join(  # users paste; nothing snips them
        f"2024-05-14 worker {i} exited with status {i % 7}" for i in range(3_000))}
    system = {"role": "system", "content": "You are a coding agent."}
    raised = 0
    for name, messages in (("after 20 turns", generate_conversation(20, seed=1).messages + [huge]),
                           ("as the first task", [system, huge])):
        compactor = Compactor(context_window=16_000, reserved_output=2_000)
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
    print(f"[last resort] no compact() and no Pass given; it kept: "
          + " · ".join("summary" if is_summary(m) else m["role"] for m in out))
    print(f"\n[lesson 13] done: {below} of {compactions} compactions needed no summarizer; "
          f"{raised} of 2 overflows raised ContextOverflowError; last_resort alone: {len(out)} messages")


if __name__ == "__main__":
    main()
