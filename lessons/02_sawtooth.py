"""Lesson 02 · The sawtooth
Motto: summarize the middle, keep the head and the tail, and the history goes down again.

The problem: lesson 01's loop re-sends every message until the server refuses the request.

How it works: the tutorial's compactMessages, as compact.py Part I writes it. Before every model
call the loop (tiny_agent.run) calls the compaction. Above THRESHOLD messages (the tutorial's 30), compact_messages
keeps the system prompt and the last KEEP_RECENT (the tutorial's 6), and replaces everything between them with
one summary message:

    [system, task, call, r, r, r, call, r, r, r, ..., call, r, r, r]        34 messages
    [system, [Context summary] …, call, r, r, r, call, r, r, r]            10 messages

The cut must not separate a tool result from the call that asked for it, so find_cut starts at
len - 6 and walks back while it stands on a tool result. Here every turn is one assistant message
with three calls and their three results, so the cut walks back two messages and the tail is 8,
not 6. summarize(middle) is one request to a cheap model: no tools, temperature 0.1, the middle as
JSON. summary_message(summary) puts the answer in a USER message labelled as reference material.
At the next compaction that summary is part of the middle, so it rolls forward.

This lesson imports only Part I of compact.py and Layer 1 of tiny_agent.py, so a fork that stops
there runs it. The model is a stand-in written here (a script that reads files with the agent's one
tool, bash), and with no model configured so is the summarizer: a few lines that list what the middle
did. The loop calls tiny_agent.tutorial_compaction(ABOVE, KEEP, summarizer), the agent's own entry.

What changed since lesson 01: strategy "none" became the tutorial's sawtooth: the loop compacts
before every call.
Try it: KEEP = 8 keeps exactly 8 (len - 8 is an assistant message, nothing to walk back); ABOVE = 14
compacts every 2 turns; set OPENAI_API_KEY (or OPENAI_BASE_URL) and compact.summarize writes the
summaries.
Explains compact.py Part I ("The tutorial's sawtooth"): THRESHOLD, KEEP_RECENT, find_cut,
summary_message, summarize, compact_messages; tiny_agent.py Layer 1 ("The loop", "bash"): run,
compact_now, Session, tutorial_compaction, Workspace.
Run: python lessons/02_sawtooth.py
"""

import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # compact.py and tiny_agent.py

from compact import KEEP_RECENT, SUMMARY_TAG, THRESHOLD, find_cut, summarize, summary_message  # noqa: E402
from tiny_agent import SYSTEM_PROMPT, ConfigError, Session, Workspace, env_file, load_env, run, tutorial_compaction  # noqa: E402

try:  # a model set in the agent's settings writes the summaries, read as Layer 1 reads them (never the cwd's .env)
    load_env(env_file())
except ConfigError as error:
    sys.exit(f"error: configuration: {error}")

ABOVE = THRESHOLD  # compact above this many messages: the tutorial's 30
KEEP = KEEP_RECENT  # and keep this many of the newest: the tutorial's 6
FILES = ["cart", "orders", "users", "billing", "search", "mailer", "reports", "auth", "stock", "coupons",
         "shipping", "returns", "reviews", "invoices", "payments", "sessions", "catalog", "prices", "taxes", "alerts"]
TASK = "Look at every Python file here: lines, TODOs, what it does. Then say how many files you looked at."
NAMES = [("COMPACT_THRESHOLD, KEEP_RECENT", "THRESHOLD, KEEP_RECENT"), ("cutIndex and its while loop", "find_cut"),
         ("summarize(oldHistory)", "summarize(middle)"), ('the "[上下文摘要]" message', "summary_message(summary)"),
         ("compactMessages(messages)", "compact_messages(messages)"),
         ("messages = await compactMessages(messages) in agentLoop", "compact_now(session) in tiny_agent.run")]


def banner(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 72 - len(title)))


def model_configured() -> bool:
    """A real model writes the summaries when the user set a key or a server, as in tiny_agent."""
    return bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


def stand_in_summary(middle: list[dict]) -> str:
    """THE LESSON'S STAND-IN for compact.summarize, used when no model is configured: not a model,
    a few lines of Python. It carries an earlier summary forward and adds the files read since."""
    task, files = "", []
    for m in middle:
        text = m.get("content") or ""
        if m["role"] == "user" and text.startswith(SUMMARY_TAG):  # the summary rolls forward
            task = text.split("- Task: ")[-1].split("\n")[0]
            files += text.split("- Files read: ")[-1].split("\n")[0].split(", ")
        elif m["role"] == "user":
            task = text
        files += [json.loads(c["function"]["arguments"])["command"][4:] for c in m.get("tool_calls") or []
                  if json.loads(c["function"]["arguments"])["command"].startswith("cat ")]
    return f"- Task: {task}\n- Files read: {', '.join(files)}\n- Progress: {len(files)} files looked at so far."


def summarizer(summaries: list[tuple[list[dict], str]]):
    """compact.summarize when a model is configured, else the stand-in; each summary is kept to show."""
    def summarize_middle(middle: list[dict]) -> str:
        text = stand_in_summary(middle)
        if model_configured():
            try:
                text = summarize(middle)
            except Exception as error:  # Part I has no fallback: Part II's SummaryGuard is one
                print(f"[summary] compact.summarize failed ({type(error).__name__}); the stand-in wrote this one")
        summaries.append((middle, text))
        return text
    return summarize_middle


def call(call_id: str, name: str, **arguments) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def stand_in_model(counts: list[int]):
    """THE LESSON'S STAND-IN for a language model: a script, not a model. Each turn it looks at one
    file with three calls at once, as models often do; then it answers from what it can still see:
    the summary and the recent messages. It counts the messages of each request it is sent."""
    queue = [f"{name}.py" for name in FILES]

    def model(messages: list[dict], tools: list[dict]) -> dict:
        counts.append(len(messages))
        if queue:
            path, n = queue.pop(0), len(FILES) - len(queue)
            return {"role": "assistant", "content": f"Looking at {path}.", "tool_calls": [
                call(f"call_{n}a", "bash", command=f"wc -l {path}"), call(f"call_{n}b", "bash", command=f"grep -c TODO {path}"),
                call(f"call_{n}c", "bash", command=f"cat {path}")]}
        summary = next((m["content"] for m in messages if m["content"].startswith(SUMMARY_TAG)), "")
        recent = {json.loads(c["function"]["arguments"])["command"][4:] for m in messages for c in m.get("tool_calls") or []}
        named = [f for f in FILES if f"{f}.py" in summary]
        seen = [f for f in FILES if f in named or f"{f}.py" in recent]
        return {"role": "assistant", "content": f"[stand-in] I looked at {len(seen)} of the {len(FILES)} files: "
                f"{len(named)} are named in the summary, {len(seen) - len(named)} in the recent messages."}
    return model


def make_project(folder: Path) -> None:
    for i, name in enumerate(FILES):
        functions = "".join(f"def {verb}_{name}(item):\n    return [item] * {i + 2}\n\n" for verb in ("load", "save"))
        (folder / f"{name}.py").write_text(f'"""The {name} module of a small shop."""\n\n{functions}# TODO: tests\n')


def chart(counts: list[int], height: int = 8) -> str:
    """Messages sent with each request, as the tutorial draws them: up while working, down at each compaction."""
    top, rows = max(counts), []
    for level in range(height, 0, -1):
        edge = top * level / height
        label = f"{round(edge):>4} ┤" if level in (height, height // 2) else "     │"
        rows.append(label + "".join("██" if n >= edge - 1e-9 else "  " for n in counts))
    return "\n".join(rows + ["     └" + "──" * len(counts)])


def main() -> None:
    banner(f"1. The loop, compacting above {ABOVE} messages and keeping the last {KEEP}")
    by = "compact.summarize, the cheap model" if model_configured() else \
        "the lesson's stand-in (no model configured; set OPENAI_API_KEY or OPENAI_BASE_URL for compact.summarize)"
    print(f"[summary] summaries by: {by}")
    print(f"[rule] above {ABOVE} messages, send [system prompt, a summary of the middle, the last {KEEP}]")
    print("[stand-in] The model is a fixed Python script, not a language model; the loop and the tools are real.")
    summaries: list[tuple[list[dict], str]] = []
    befores: list[list[dict]] = []
    compactions: list[str] = []
    compaction = tutorial_compaction(ABOVE, KEEP, summarizer(summaries))  # the agent's entry, the lesson's summarizer
    counts: list[int] = []  # the messages of each request

    def watched(messages: list[dict], **options) -> list[dict]:  # what the loop calls, each input kept to show
        befores.append(messages)
        return compaction(messages, **options)

    def log(line: str) -> None:  # the loop's other lines are its tool calls
        if line.startswith("[compact]"):
            compactions.append(line)
            before = befores[-1]
            naive, cut = len(before) - KEEP, find_cut(before, KEEP, head=1)
            role = before[naive]["role"]
            print(f"{line}: len - {KEEP} = {naive} is {'an' if role[0] in 'aeiou' else 'a'} {role} message; find_cut "
                  f"stopped at {cut}, so {len(before) - cut} are kept")

    with tempfile.TemporaryDirectory(prefix="lesson02-") as folder:
        make_project(Path(folder))
        session = Session([{"role": "system", "content": SYSTEM_PROMPT}], watched)
        answer = run(session, TASK, stand_in_model(counts), Workspace(Path(folder)), log=log)
    print(f"[answer] {answer}")

    banner("2. The cut walks back over tool results")
    walked = [b for b in befores if len(b) > ABOVE and find_cut(b, KEEP, head=1) < len(b) - KEEP]
    if not walked:
        print(f"[cut] len - {KEEP} stood on an assistant message at every compaction: nothing to walk back "
              f"(len - {KEEP} fell on the first message of a turn each time)")
    before = walked[0] if walked else befores[-1]
    naive, cut = len(before) - KEEP, find_cut(before, KEEP, head=1)
    for i in range(cut - 2, naive + 2) if walked else ():
        m = before[i]
        what = "→ " + ", ".join(c["function"]["name"] for c in m["tool_calls"]) if m.get("tool_calls") else \
            f"result of {m.get('tool_call_id')}"
        mark = "  ◄ find_cut stops here: the tail starts" if i == cut else f"  ◄ len - {KEEP}" if i == naive else ""
        print(f"  #{i:<3} {m['role']:<9} {what}{mark}")
    if walked:
        print(f"[cut] a tail from #{naive} would start with the result of {before[naive]['tool_call_id']}, whose call "
              f"(#{cut}) went into the summary;")
        print("[cut] a server refuses a tool result that follows no call (HTTP 400), so the group stays together.")

    banner("3. The summary message, and how it rolls forward")
    middle, text = summaries[-1]
    earlier = sum(m["role"] == "user" and (m.get("content") or "").startswith(SUMMARY_TAG) for m in middle)
    print(f"[summary] {len(summaries)} compactions; the last middle held {earlier} earlier summary + "
          f"{len(middle) - earlier} messages: the summary rolls forward")
    message = summary_message(text)
    print(f"[label] summary_message(summary): role={message['role']!r}, content:")
    for row in message["content"].splitlines():
        print(textwrap.fill(row, 100, initial_indent="    ", subsequent_indent="    ") if row else "")
    print('[label] the tutorial\'s: role "user", "[上下文摘要]\\n以下是之前对话的要点，原始细节已省略：…继续处理剩余任务。"')
    print("[label] user, not system: old notes must not become rules; the label says they are reference material.")

    banner("4. The sawtooth, and the tutorial's names")
    print(f"[chart] messages sent with each of the {len(counts)} requests (never above {ABOVE}: at {ABOVE + 4} the loop "
          "compacts first):")
    print(chart(counts))
    print(f"      messages: {' '.join(map(str, counts))}")
    for ts, py in NAMES:
        print(f"[names] {ts} → {py}")
    print(f"[lesson 02] done: {len(counts)} requests, {len(compactions)} compactions, at most {max(counts)} messages "
          f"sent (threshold {ABOVE}, keep_recent {KEEP}); {answer.removeprefix('[stand-in] ')}")


if __name__ == "__main__":
    main()
