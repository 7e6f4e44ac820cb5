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

What changed since lesson 01: strategy "none" became "sawtooth"; same model, window and files.
Try it: KEEP_RECENT = 3 ends each compaction at 5 messages; with 4 it is 8, because len - 4 lands on
a tool result and the cut walks back. THRESHOLD = 30: the server refuses, the loop compacts and retries.
Explains compact.py: find_cut, compact_messages (section 4 "the sawtooth"); tiny_agent.sawtooth_chart.
Run: python lessons/02_sawtooth.py
"""

import json
import tempfile
from pathlib import Path

import show
from compact import (files_touched, find_cut, find_problems, is_summary, model_configured,
                     summarize_default)
from tiny_agent import DEMO_TASK, Config, DemoModel, Workspace, new_session, run, sawtooth_chart

WINDOW, THRESHOLD, KEEP_RECENT = 4_000, 16, 4


def watched_summarizer(summaries: list[tuple[list[dict], str]]):
    """summarize_default, plus one line saying what each compaction summarized."""
    def summarize(middle):
        earlier = sum(is_summary(m) for m in middle)
        summaries.append((middle, summarize_default(middle)))
        print(f"[summary] compaction {len(summaries)}: {earlier} earlier summary + "
              f"{len(middle) - earlier} messages → {len(summaries[-1][1]):,} chars")
        return summaries[-1][1]
    return summarize


def read_call(n: int, path: str) -> dict:
    arguments = json.dumps({"path": path})
    return {"id": f"call_{n}", "type": "function", "function": {"name": "read_file", "arguments": arguments}}


def parallel_calls_example() -> list[dict]:
    """A hand-made history whose last turn read three files at once (parallel calls)."""
    paths = ["cart.py", "orders.py", "users.py"]
    calls = [read_call(n, path) for n, path in enumerate(paths, start=1)]
    results = [{"role": "tool", "tool_call_id": call["id"], "content": f"# {path}\n..."}
               for call, path in zip(calls, paths)]
    return [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Why does checkout fail?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [read_call(0, "app.py")]},
            {"role": "tool", "tool_call_id": "call_0", "content": "def checkout(): ..."},
            {"role": "assistant", "content": None, "tool_calls": calls},
            *results]


def main() -> None:
    show.banner(f"The loop with strategy sawtooth: threshold {THRESHOLD}, keep_recent {KEEP_RECENT}")
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
    print(sawtooth_chart(session.counts))

    show.banner("The summary rolls forward")
    middle, summary = summaries[-1]
    turns, read = sum(bool(m.get("tool_calls")) for m in middle), files_touched(middle)[0]
    print(f"[summary] the last middle held {sum(is_summary(m) for m in middle)} earlier summary and "
          f"{turns} new turns that read {len(read)} files;")
    print(f"[summary] the summary it produced has to carry what all {len(summaries)} compactions saw:")
    for line in [line for line in summary.splitlines() if line.strip()][:20]:
        print("          " + line)

    show.banner("Where the cut goes when a turn made parallel calls")
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
    refused = sum("refused" in line for line in compactions)
    print(f"[lesson 02] done: {len(session.counts)} iterations, {session.compactions} compactions, at most "
          f"{max(session.counts)} messages sent, {refused} requests refused by the {WINDOW:,}-token window")


if __name__ == "__main__":
    main()
