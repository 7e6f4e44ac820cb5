"""Lesson 09 · The archive and the recall tool
Motto: compaction may forget; the disk may not.

The problem: every layer so far throws text away. A masked log or a summarized turn may hold
the one error line the agent needs twenty turns later, and then it is gone for good.

How it works: before a message leaves the context, it is appended to a JSONL file (owner-only
permissions, secrets masked, fsync'ed to disk). The summary names the file, and the `recall`
tool lets the model search it and read a hit back:

    messages ──compact──► [head][summary: "archived in session-….jsonl"][tail]
        └── what left ──► session-….jsonl ◄── recall {"query": "UnicodeDecodeError"} / {"query": "#12"}

Secrets are masked, code is not: mask_secrets replaces API keys (sk-…, ghp_…, AKIA…) and literal
values after a secret-like name (`"api_key": "…"`, `TOKEN=…`), but never an expression, so
`password = ReadOnlyPasswordHashField(` is archived as written. The agent archives under every
strategy: new_session(config, archive_dir=..., ws=ws) gives the sawtooth an archive too, and
sets ws.archive, the one the recall tool reads.

What changed since lesson 08: cutting is now reversible; nothing that leaves is lost.
Try it: search for a word that was never said; recall "#0"; add a line with `password=hunter2222`
  to a tool output and look for it in the archive.
Explains compact.py Part II ("How the engine ends: the archive"): Archive, mask_secrets, SECRET_TOKEN,
  SECRET_VALUE; ("The engine"): archived, Compactor(policy="layered", archive=...);
  tiny_agent.py Layer 1 ("bash"): run_tool; Layer 2 ("Tools"): AgentWorkspace(archive=...), recall;
  ("Sessions"): new_session(archive_dir=...).
Run: python lessons/09_archive_and_recall.py  (add --view page.html: the sawtooth run of part 5 drawn as
  the agent's --view draws a session, every compaction and the archived originals, in one file)
"""

import argparse
import json
import tempfile
from pathlib import Path

import show
import tiny_agent
from compact import Archive, Compactor, is_summary
from conversations import generate_conversation

KEY = "sk-live-1234567890abcdefXYZ"
CODE = ('class UserChangeForm(forms.ModelForm):\n    password = ReadOnlyPasswordHashField(\n'
        '        label=_("Password"),\n    )\n    token = request.GET.get("token")')


def with_secret(messages):
    """The same conversation where one early tool call printed an API key next to some code."""
    i = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    leaked = {**messages[i], "content": f"{messages[i]['content']}\nOPENAI_API_KEY={KEY}\n{CODE}"}
    return messages[:i] + [leaked] + messages[i + 1:]


def main():
    parser = argparse.ArgumentParser(description="Lesson 09: the archive and the recall tool")
    parser.add_argument("--view", metavar="PAGE", type=Path, help="write the page of part 5's sawtooth run here")
    args = parser.parse_args()
    conversation = generate_conversation(60, seed=2)
    error = next(f.text for f in conversation.facts if f.kind == "error" and "middle" in f.where)
    messages = with_secret(conversation.messages)
    with tempfile.TemporaryDirectory() as folder:
        archive = Archive.in_folder(Path(folder) / "archive")
        compactor = Compactor(policy="layered", context_window=16_000, reserved_output=2_000, archive=archive)
        show.banner("1. Compact, archiving what leaves")
        out = compactor.compact(messages)
        show.sizes("compact", messages, out)
        print("[compact] steps that removed tokens: "
              + ", ".join(name for name, before, after, _ in compactor.report if after < before))

        show.banner("2. The archive file")
        text = archive.path.read_text(encoding="utf-8")
        lines = text.splitlines()
        print(f"[archive] {archive.path.name} in {archive.path.parent.name}/")
        print(f"[archive] permissions {oct(archive.path.stat().st_mode & 0o777)}, {len(lines)} lines, "
              f"one JSON record per message as it left")
        print(f"[archive] line 1: {lines[0][:110]}…")
        print(f"[archive] the leaked key is in the file: {KEY[:18] in text}; "
              f"'[secret masked]' is: {'[secret masked]' in text}")
        for code in CODE.splitlines()[1:5:3]:
            print(f"[archive] code kept as written: {code.strip()!r}: {json.dumps(code)[1:-1] in text}")
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
        ws = tiny_agent.AgentWorkspace(Path(folder), archive=archive)  # the archive the recall tool reads
        for arguments in (json.dumps({"query": query}), json.dumps({"query": f"#{n}"})):
            answer = tiny_agent.run_tool(ws, "recall", arguments)
            print(f"[recall] {arguments} → {len(answer):,} chars: {' '.join(answer.split())[:80]}…")

        show.banner("5. The agent archives under the sawtooth too")
        show.make_project(Path(folder))
        config = tiny_agent.Config(strategy="sawtooth", threshold=16, keep_recent=4)
        session = tiny_agent.new_session(config, archive_dir=Path(folder) / "sawtooth", ws=ws)
        tiny_agent.run_agent(session, tiny_agent.DEMO_TASK, tiny_agent.DemoModel(window=4_000), ws, log=lambda line: None)
        kept = session.compaction.archive
        records = kept.records()
        print(f"[sawtooth] {session.compaction.compactions} compactions; {len(records)} messages archived in "
              f"{kept.path.parent.name}/{kept.path.name[:8]}…; the recall tool reads it: {ws.archive is kept}")
        first = kept.search("def load_cart", width=60).split("\n")[0]
        print(f"[sawtooth] recall 'def load_cart' → {' '.join(first.split())}")
        if args.view:  # the page reads the archive, so it is written before the folder goes
            tiny_agent.write_view(session, args.view.resolve())
    print(f"\n[lesson 09] done: {len(lines)} archived messages, {len(hits)} search hits for {query}; "
          f"the sawtooth archived {len(records)}")


if __name__ == "__main__":
    main()
