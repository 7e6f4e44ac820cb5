"""Lesson 09 · The archive and the recall tool
Motto: compaction may forget; the disk may not.

The problem: every layer so far throws text away. A masked log or a summarized turn may hold
the one error line the agent needs twenty turns later, and then it is gone for good.

How it works: before a message leaves the context, the Compactor appends it to a JSONL file
(owner-only permissions, secrets masked, flushed to disk). The summary names the file, and the
`recall` tool lets the model search it and read a hit back:

    messages ──compact──► [head][summary: "archived in session-….jsonl"][tail]
        └── what left ──► session-….jsonl ◄── recall {"query": "UnicodeDecodeError"} / {"query": "#12"}

What changed since lesson 08: cutting is now reversible; nothing that leaves is lost.
Try it: search for a word that was never said; recall "#0"; add a line with `password=hunter22`
  to a tool output and look for it in the archive.
Explains compact.py: Archive, mask_secrets, Compactor(archive_dir=...) (section 6 "the ladder");
  tiny_agent.py: run_tool's `recall` branch.
Run: python lessons/09_archive_and_recall.py
"""

import json
import tempfile
from pathlib import Path

import show
import tiny_agent
from compact import Compactor, is_summary
from conversations import generate_conversation


def with_secret(messages):
    """The same conversation with an API key printed by one early tool call (it happens)."""
    i = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    leaked = {**messages[i], "content": messages[i]["content"] + "\nOPENAI_API_KEY=sk-live-1234567890abcdefXYZ"}
    return messages[:i] + [leaked] + messages[i + 1:]


def main():
    conversation = generate_conversation(60, seed=2)
    error = next(f.text for f in conversation.facts if f.kind == "error" and "middle" in f.where)
    messages = with_secret(conversation.messages)
    with tempfile.TemporaryDirectory() as folder:
        compactor = Compactor(context_window=16_000, reserved_output=2_000, archive_dir=folder)
        show.banner("1. Compact, archiving what leaves")
        out = compactor.compact(messages)
        show.sizes("compact", messages, out)
        print("[compact] steps that removed tokens: "
              + ", ".join(name for name, before, after, _ in compactor.report if after < before))

        show.banner("2. The archive file")
        archive = compactor.archive
        text = archive.path.read_text(encoding="utf-8")
        lines = text.splitlines()
        print(f"[archive] {archive.path}")
        print(f"[archive] permissions {oct(archive.path.stat().st_mode & 0o777)}, {len(lines)} lines, "
              f"one JSON record per message as it left")
        print(f"[archive] line 1: {lines[0][:110]}…")
        print(f"[archive] the leaked key is in the file: {'sk-live-1234567890' in text}; "
              f"'[secret masked]' is: {'[secret masked]' in text}")
        summary = next(m for m in out if is_summary(m))
        print("[summary] " + next(line for line in summary["content"].split("\n") if "archived" in line))

        show.banner("3. Search and read it back")
        query = error.split(":")[0]
        print(f"[search] {query!r} (planted in the middle of a huge log that was masked):")
        hits = archive.search(query, width=90).split("\n")
        for hit in hits:
            print(f"  {hit}")
        n = int(hits[-1].split()[0][1:])
        back = archive.read(n)
        print(f"[read] #{n}: {len(back):,} chars; the planted error is in what read returns: "
              f"{'yes' if error in back else 'NO (it was cut out)'}")

        show.banner("4. The same through the recall tool, as the model calls it")
        ws = tiny_agent.Workspace(Path(folder))
        for arguments in (json.dumps({"query": query}), json.dumps({"query": f"#{n}"})):
            answer = tiny_agent.run_tool(ws, "recall", arguments, archive)
            print(f"[recall] {arguments} → {len(answer):,} chars: {' '.join(answer.split())[:80]}…")
    print(f"\n[lesson 09] done: {len(lines)} archived messages, {len(hits)} search hits for {query}")


if __name__ == "__main__":
    main()
