"""Lesson 02 · The sawtooth
Motto: summarize the middle, keep the head and the tail, and the history goes down again.

The problem: lesson 01's loop re-sends every message until the server refuses the request.

How it works: before every model call, compact_messages checks the length. Above `threshold`
messages it keeps the system prompt and the last `keep_recent` messages, and replaces everything
between them with one summary message:

    [system, task, call, r, call, r, r, ... call, r, r]         19 messages
    [system, [Context summary] …, call, r, r, call, r, r]        8 messages

The cut must not separate a tool result from the call that asked for it, so find_cut walks back
from len - keep_recent until it stands on a message that is not a tool result. At the next
compaction the summary is part of the middle, so the summary rolls forward instead of being lost.

A message count cannot see sizes: ten messages can hold one 8,000-token answer. So when the window
is known, compact_messages(..., max_tokens=...) is a token net under the count: over max_tokens it
compacts even below `threshold`, and cut_that_fits keeps fewer recent messages until they take at
most half of max_tokens, but never fewer than the newest tool-call group, which is never split.

What changed since lesson 01: strategy "none" became "sawtooth"; same model, window and files.
Try it: KEEP_RECENT = 3 ends each compaction at 5 messages; with 4 it is 8, because len - 4 lands on
a tool result and the cut walks back. THRESHOLD = 30: the server refuses, the loop compacts and retries.
Set NET to 6_000: the history fits under it, and the net leaves it alone.
Explains compact.py Part I (the sawtooth): find_cut, cut_that_fits ("Where to cut"), compact_messages
("The sawtooth"); tiny_agent.py: sawtooth, sawtooth_chart.
Run: python lessons/02_sawtooth.py
"""

import tempfile
from pathlib import Path

import show
from compact import (compact_messages, cut_that_fits, estimate_tokens, files_touched, find_cut, find_problems,
                     is_summary, model_configured, summarize_default)
from tiny_agent import DEMO_TASK, Config, DemoModel, Workspace, new_session, run, sawtooth_chart

WINDOW, THRESHOLD, KEEP_RECENT = 4_000, 16, 4
NET = 3_000  # max_tokens for the token net in part 3


def watched_summarizer(summaries: list[tuple[list[dict], str]]):
    """summarize_default, plus one line saying what each compaction summarized."""
    def summarize(middle, focus=None):
        earlier = sum(is_summary(m) for m in middle)
        summaries.append((middle, summarize_default(middle, focus)))
        print(f"[summary] compaction {len(summaries)}: {earlier} earlier summary + "
              f"{len(middle) - earlier} messages → {len(summaries[-1][1]):,} chars")
        return summaries[-1][1]
    return summarize


def parallel_calls_example() -> list[dict]:
    """A hand-made history: a long written answer, a new request, then three files read at once."""
    paths = ["cart.py", "orders.py", "users.py"]
    calls = [show.call(f"call_{n}", "read_file", path=path) for n, path in enumerate(paths, start=1)]
    analysis = " ".join(f"Order {1000 + i}: the cart rounds each line before tax, so the total is {i % 9 + 1} "
                        "cents off the invoice." for i in range(120))
    return [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Why does checkout fail?"},
            *show.step("call_0", "read_file", "def checkout(cart):\n    return pay(cart.total)\n", path="app.py"),
            {"role": "assistant", "content": analysis},
            {"role": "user", "content": "Now fix it in cart.py."},
            show.asks(*calls),
            *[show.result(c["id"], f"# {path}\n" + "def total(items):\n    return sum(items)\n" * 25)
              for c, path in zip(calls, paths)]]


def main() -> None:
    show.banner(f"1. The loop with strategy sawtooth: threshold {THRESHOLD}, keep_recent {KEEP_RECENT}")
    by = "the configured model" if model_configured() else "the offline summarizer (no model configured)"
    print(f"[summary] summaries by: {by}")
    summaries: list[tuple[list[dict], str]] = []
    compactions: list[str] = []

    def log(line: str) -> None:  # the loop's other lines are its tool calls, as in lesson 01
        if line.startswith("[compact]"):
            compactions.append(line)
            print(line)

    with tempfile.TemporaryDirectory(prefix="lesson02-") as folder:
        show.make_project(Path(folder))
        session = new_session(Config(strategy="sawtooth", threshold=THRESHOLD, keep_recent=KEEP_RECENT),
                              summarize=watched_summarizer(summaries))
        answer = run(session, DEMO_TASK, DemoModel(window=WINDOW), Workspace(Path(folder)), log=log)
    print(f"[answer] {answer}")
    print(sawtooth_chart(session.sent))

    show.banner("2. The summary rolls forward")
    middle, summary = summaries[-1]
    turns, read = sum(bool(m.get("tool_calls")) for m in middle), files_touched(middle)[0]
    print(f"[summary] the last middle held {sum(is_summary(m) for m in middle)} earlier summary and "
          f"{turns} new turns that read {len(read)} files;")
    print(f"[summary] the summary it produced has to carry what all {len(summaries)} compactions saw:")
    for line in [line for line in summary.splitlines() if line.strip()][:14]:
        print("          " + (line if len(line) <= 100 else line[:99] + "…"))

    show.banner("3. Where the cut goes: parallel calls, and the token net")
    messages = parallel_calls_example()
    show.show(messages)
    keep = 2
    naive, cut = len(messages) - keep, find_cut(messages, keep, head=1)
    print(f"[cut] keep_recent={keep}: the cut starts at {naive} = len - keep_recent, "
          f"a {messages[naive]['role']} result")
    print(f"[cut] find_cut walked back and ended at {cut}: the {messages[cut]['role']} message with "
          f"{len(messages[cut]['tool_calls'])} calls; the tail is {len(messages) - cut} messages, not {keep}")
    naive_problems = find_problems([messages[0], *messages[naive:]])
    cut_problems = find_problems([messages[0], *messages[cut:]])
    print(f"[cut] [system, *messages[{naive}:]] would be refused: {naive_problems[0]}")
    print(f"[cut] [system, *messages[{cut}:]] has {len(cut_problems)} problems")
    untouched = compact_messages(messages, summarize_default) is messages
    print(f"[net] {len(messages)} messages, ~{estimate_tokens(messages):,} tokens: below the threshold of 30, "
          f"so without max_tokens nothing happens: {untouched}")
    for net in (NET, 600):
        fit = cut_that_fits(messages, 6, 1, net)
        tail = estimate_tokens(messages[fit:]) - 3
        print(f"[net] max_tokens={net:,}: keep_recent=6 would keep from {find_cut(messages, 6, 1)}; cut_that_fits "
              f"keeps from {fit} ({messages[fit]['role']}), ~{tail:,} tokens"
              + (" (the newest group: never split)" if tail > net // 2 else f" ≤ half of {net:,}"))
    out = compact_messages(messages, summarize_default, max_tokens=NET)
    show.sizes("net", messages, out)
    refused = sum("refused" in line for line in compactions)
    print(f"[lesson 02] done: {len(session.sent)} iterations, {session.compactions} compactions, at most "
          f"{max(n for n, _ in session.sent)} messages sent, {refused} requests refused by the {WINDOW:,}-token "
          f"window; the net took ~{estimate_tokens(messages):,} → ~{estimate_tokens(out):,} tokens")


if __name__ == "__main__":
    main()
