"""Lesson 05 · Placeholder masking
Motto: an old tool result is a receipt, not the goods.

The problem: most of an agent's history is tool output (files read, logs, test runs) that the
model needed once, several turns ago. A summary (lessons 02-04) costs a model call and loses
detail; most of the saving is available much more cheaply.

How it works: mask_old_tool_results replaces each old result with a placeholder that says what it
was and how to get it back. The call stays, so the history still says what was done:

    assistant → read_file(src/app.py)         assistant → read_file(src/app.py)
    tool: "App for the shopfront…" (1,700)  ─► tool: [pruned] read_file(src/app.py): 1,700 chars…

The placeholder depends on the tool: the size of a file read, the line count of a command (and the
match count of a grep), the paths the output named, and its first and last error lines, so what
a later step may need by name stays visible. The last `keep_last` results stay whole, and so does
the newest batch (results after the last assistant message): the model has not read those yet.
A result shorter than its note stays too.

What changed since lesson 04: the first cheap rung of Part III: no model, no summary, just string work.
Try it: set KEEP_LAST to 0 or 10; change SEED; re-run and compare the saving.
Explains compact.py Part III ("The cheap layers"): mask_old_tool_results, placeholder, error_lines,
newest_batch; Part II ("Messages as servers send them"): pair_tool_results, describe_call.
Run: python lessons/05_masking.py
"""

import textwrap

import show
from compact import PRUNED, content_text, estimate_tokens, mask_old_tool_results, pair_tool_results
from conversations import generate_conversation

SEED, KEEP_LAST = 5, 3


def new_batch() -> list[dict]:
    """The model just made two calls at once; their results are in, and it has not read them yet."""
    return [show.asks(show.call("call_new_1", "bash", command="pytest -q"),
                      show.call("call_new_2", "read_file", path="src/cart.py")),
            show.result("call_new_1", "3 failed, 41 passed in 2.31s\n" * 8),
            show.result("call_new_2", "def add_coupon(cart, code):\n" * 12)]


def main() -> None:
    messages = generate_conversation(12, seed=SEED).messages
    masked = mask_old_tool_results(messages, keep_last=KEEP_LAST)
    results = sorted(pair_tool_results(messages))

    show.banner(f"mask_old_tool_results, keep_last={KEEP_LAST}")
    for i in results:
        before, after = content_text(messages[i]), content_text(masked[i])
        if masked[i] is not messages[i]:
            print(f"[mask] #{i:<3} {len(before):>7,} chars → {len(after):>3}  {after.split(chr(10))[0][:72]}…")
        elif i in results[-KEEP_LAST:]:
            print(f"[kept] #{i:<3} {len(before):>7,} chars, whole: one of the last {KEEP_LAST} results")
        else:
            print(f"[kept] #{i:<3} {len(before):>7,} chars, whole: shorter than a placeholder {before[:30]!r}")
    first = next(i for i in results if masked[i] is not messages[i])
    print(f"[mask] #{first} before: {content_text(messages[first])[:70]!r}…")
    print(f"[mask] #{first} after:  {content_text(masked[first])}")
    asked = max(j for j in range(first) if messages[j].get("tool_calls"))
    print(f"[mask] the call that asked for it, #{asked}, is unchanged: {masked[asked] is messages[asked]}")
    richest = max((i for i in results if content_text(masked[i]).startswith(PRUNED)),
                  key=lambda i: content_text(masked[i]).count("\n"))
    print(f"[mask] #{richest} keeps the paths it named and its first and last error lines:")
    for row in content_text(masked[richest]).split("\n"):
        print(textwrap.fill(row, 100, initial_indent="         ", subsequent_indent="           "))
    show.sizes("mask", messages, masked)
    count = sum(masked[i] is not messages[i] for i in results)
    saved = (estimate_tokens(messages), estimate_tokens(masked))

    show.banner("The newest batch: results the model has not read yet")
    history = messages + new_batch()
    unseen = mask_old_tool_results(history, keep_last=0)
    for i in (len(history) - 2, len(history) - 1):
        print(f"[kept] #{i} {len(content_text(history[i])):,} chars, untouched even with keep_last=0: "
              f"{unseen[i] is history[i]}")
    older = sum(unseen[i] is not history[i] for i in pair_tool_results(history))
    print(f"[mask] keep_last=0 masked all {older} other results that were longer than their placeholder")
    print(f"[lesson 05] done: {count} of {len(results)} results masked, ~{saved[0]:,} → ~{saved[1]:,} "
          f"tokens; the last {KEEP_LAST} and the newest batch of 2 stayed whole")


if __name__ == "__main__":
    main()
