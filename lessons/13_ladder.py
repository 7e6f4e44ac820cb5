"""Lesson 13 · The ladder and its fallbacks
Motto: climb only as high as you must; when a rung breaks, land on the one below.

The problem: each layer alone is either too weak (masking cannot shrink a huge newest output) or
too costly (a model summary on every turn). And the summarizer is a network call: it times out,
returns "Error: rate limit", or returns nothing, and that must never replace the history.

How it works: the Compactor runs the rungs cheapest first and stops as soon as the history is
back under the target; most compactions never reach the summarizer.

    mask → snip → clear → dedupe → shorten → summary → last resort → ContextOverflowError
    free ──────────────────────────────────► one model call ──► rebuild ──► give up, loudly

  The summary goes through a guard: a timeout, a check of the answer (empty, too long, shaped
  like an error), the offline summarizer as fallback, and a breaker: after `max_failures` (3)
  failures in a row it stops calling the summarizer for the next `cooldown` summaries (5; 3 here).

What changed since lesson 12: the layers become one policy, with a plan for every failure.
Try it: set WINDOW to 16_000 (more summaries) or 48_000; give the SummaryGuard cooldown=1.
Explains compact.py: Compactor.compact/steps/last_resort, SummaryGuard, check_summary,
  ContextOverflowError (section 6 "the ladder").
Run: python lessons/13_ladder.py
"""

import textwrap

import show
from compact import (Compactor, ContextOverflowError, SummaryGuard, estimate_tokens,
                     summarize_offline)
from conversations import generate_conversation

WINDOW = 32_000


class CountingSummarizer:
    """The offline summarizer, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, messages, focus=None):
        self.calls += 1
        return summarize_offline(messages, focus)


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


def replay(compactor, messages):
    """The agent loop without a model: compact before every assistant message, then append it."""
    context = []
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            out = compactor.compact(context)
            if out is not context:
                yield i, context, out
                context = list(out)
        context.append(message)


def main():
    show.banner(f"1. The ladder over a 250-turn run (window {WINDOW:,})")
    summarizer = CountingSummarizer()
    compactor = Compactor(context_window=WINDOW, reserved_output=WINDOW // 8, summarize=summarizer)
    below = below_calls = mask_only = calls_seen = 0
    for i, before, after in replay(compactor, generate_conversation(250, seed=3).messages):
        new_calls, calls_seen = summarizer.calls - calls_seen, summarizer.calls
        names = [name for name, *_ in compactor.report]
        steps = " · ".join(f"{name} -{b - a:,}" if a < b else f"{name} 0" for name, b, a, _ in compactor.report)
        print(f"  #{compactor.state.compactions:<2} msg {i:>3}: {compactor.budget.history(before):>6,} → "
              f"{compactor.budget.history(after):>6,} tok | {steps}")
        if "summary" not in names:  # the ladder stopped before the summary rung
            below += 1
            below_calls += new_calls
            mask_only += names == ["mask"]
    compactions = compactor.state.compactions
    print(f"[ladder] {below} of {compactions} compactions stopped below the summary rung "
          f"({mask_only} after masking alone) and called the summarizer {below_calls} times; "
          f"{summarizer.calls} summarizer calls in all")

    show.banner("2. A summarizer that fails: fallback, then the breaker")
    flaky = flaky_summarizer()
    guard = SummaryGuard(flaky, max_failures=3, cooldown=3)
    middle = generate_conversation(20, seed=5).messages[2:30]
    offline = summarize_offline(middle)
    for attempt in range(1, 8):
        calls = flaky.calls
        text = guard(middle)
        called = "called " if flaky.calls > calls else "skipped"
        used = "offline fallback" if text == offline else "its own summary"
        error = f"  last_error={guard.last_error!r}" if attempt <= 3 else ""
        print(f"  [guard] summary {attempt}: summarizer {called} → {used:<16} "
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
    print(f"\n[lesson 13] done: {below} of {compactions} compactions needed no summarizer; "
          f"{raised} of 2 overflows raised ContextOverflowError")


if __name__ == "__main__":
    main()
