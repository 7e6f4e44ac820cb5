"""A mutation check: break one promise at a time and see whether a test notices.

    python tests/mutate.py              # every mutant, two at a time (about 20-40 minutes)
    python tests/mutate.py snip fsync   # only the mutants whose name contains one of the words

Each mutant replaces one exact snippet of compact.py or tiny_agent.py in a copy of the project, then
runs the tests outside the property tests (tests/test_properties.py) and the live tests. A mutant is
caught when a test fails. A snippet that no longer matches the code is reported as stale: update it.
Not part of CI (too slow); its last result goes in the notes of the work that changed the tests.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, file, the exact code, what it becomes): each breaks one promise a test should hold.
MUTANTS = [
    ("find_cut walks back no more", "compact.py",
     'while cut > head and messages[cut].get("role") == "tool":', "while False:"),
    ("sawtooth output not repaired", "compact.py",
     "return repair(out)  # the tail may", "return out  # the tail may"),
    ("sawtooth growth guard removed", "compact.py",
     "if after >= estimate_tokens(kept):", "if False:"),
    ("latest request note dropped", "compact.py",
     'return with_notes(text, "The user\'s latest request, verbatim:\\n" + content_text(latest) if latest else "")',
     'return with_notes(text, "")'),
    ("repair leaves calls unanswered", "compact.py",
     "for c in _open_calls(out) if id(c) not in answered]", "for c in _open_calls(out) if False]"),
    ("snip keeps only 20 first error lines", "compact.py",
     "errors = errors if len(errors) <= 20 else errors[:5] + errors[-15:]", "errors = errors[:20]"),
    ("snip char cut keeps no error lines", "compact.py",
     'errors = "".join(line[:300] + "\\n" for line in text.split("\\n") if ERROR_LINE.search(line))',
     'errors = ""'),
    ("summaries drop the newest items first", "compact.py",
     'total -= text_tokens(items.pop(0)) + 2', 'total -= text_tokens(items.pop()) + 2'),
    ("structured summary keeps oldest items", "compact.py",
     "return items[-limit:] if limit else list(dict.fromkeys(items))",
     "return items[:limit] if limit else list(dict.fromkeys(items))"),
    ("mask placeholder drops error lines", "compact.py",
     'return "\\n".join([head, *error_lines(text)])', "return head"),
    ("mask touches the protected results", "compact.py",
     "if i in protected or call_name(call)", "if call_name(call)"),
    ("clear removed", "compact.py", "out[i] = _with_content(messages[i], CLEARED)", "pass"),
    ("dedupe removed", "compact.py", "if key in seen and fn.get", "if False and fn.get"),
    ("constraints not detected", "compact.py", "            if CONSTRAINT.search(s):", "            if False:"),
    ("archive search returns the oldest hits", "compact.py", "hits[-limit:]", "hits[:limit]"),
    ("archive read no longer snips", "compact.py",
     'm = {**m, "content": snip_text(m["content"], max_chars=max_chars)}', "pass"),
    ("archive append without fsync", "compact.py",
     "            os.fsync(f.fileno())\n\n    def records", "            pass\n\n    def records"),
    ("eviction note keeps only its first line", "compact.py",
     'return {"role": "user", "content": "\\n".join(filter(None, [line, render_summary(sections)]))}',
     'return {"role": "user", "content": line}'),
    ("a note of notes forgets what they carried", "compact.py",
     "carried = [parse_summary(content_text(m)) for m in gone if is_eviction_note(m)]",
     "carried = []"),
    ("what the last resort drops is not folded in", "compact.py",
     'self.state.summary = self.state.summary.rstrip() + "\\n\\n" + offline(fresh, run.focus)', "pass"),
    ("an eviction note has no budget", "compact.py",
     "sections = fit_summary(sections, budget, NOTE_SECTIONS)", "pass"),
    ("a tool output passes for an eviction note", "compact.py",
     'return message.get("role") == "user" and content_text(message).startswith(EVICTED)',
     "return content_text(message).startswith(EVICTED)"),
    ("every failing test is its own kind of error", "compact.py",
     'return _VARIES.sub("…", line)', 'return line'),
    ("summary lists take no share of the budget", "compact.py",
     "sections[title] = newest_within(reversed(sections[title]), int(share * budget),",
     "sections[title] = newest_within(reversed(sections[title]), 10 ** 9,"),
    ("last resort loses its short-note fallback", "compact.py",
     'self.state.summary = "(The summary of the earlier turns did not fit the window; see the archive.)"', "pass"),
    ("guard skips the drift check and backfill", "compact.py",
     "return backfill(flag_unverified(text, source_text(messages), self.confidence), messages)", "return text"),
    ("summarizer may run twice in a compaction", "compact.py",
     "if fresh and not run.summarized:", "if fresh:"),
    ("no-progress floor removed", "compact.py",
     "self.state.floor = int(budget.history(original) * GROWTH_BEFORE_RETRY)  # nothing helped", "pass"),
    ("zones lossy steps run below lossy_at", "compact.py",
     "if lossy and not force and not self._lossy_allowed(messages, out, run):", "if False:"),
    ("workspace accepts absolute paths", "tiny_agent.py",
     'if not isinstance(relative, str) or not relative or relative.startswith("/"):',
     "if not isinstance(relative, str) or not relative:"),
    ("bash reads the terminal", "tiny_agent.py", "stdin=subprocess.DEVNULL, stdout=subprocess.PIPE",
     "stdout=subprocess.PIPE"),
    ("bash leaves its children running", "tiny_agent.py", "os.killpg(proc.pid, signal.SIGKILL)", "pass"),
    ("orphans go to init, not to the agent", "tiny_agent.py", "if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0):",
     "if False:"),
    ("the checker takes a redirection for a word", "tiny_agent.py", 'PLAIN = r"[\\w.,:=+%@/-]"', 'PLAIN = r"[\\w.,:=+%@/<>-]"'),
    ("an unasked command may write in the sandbox", "tiny_agent.py", '"--bind" if writable else "--ro-bind"', '"--bind"'),
    ("assistant content sent as null", "tiny_agent.py",
     'm = {**m, "content": content_text(m)}', 'm = {**m, "content": m.get("content")}'),
    ("no tool_choice sent", "tiny_agent.py", 'tools=tools, tool_choice="auto"', "tools=tools"),
    ("a refused request is sent again", "tiny_agent.py",
     "refused.add(json.dumps(session.messages, sort_keys=True, default=str))", "pass"),
]
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--ignore=tests/live",
          "--ignore=tests/test_properties.py", "tests"]


def project_copy(into: Path) -> None:
    """The project as git sees it (tracked and untracked, not ignored), without the shared data."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split("\n")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)


def run_mutant(mutant: tuple[str, str, str, str]) -> tuple[str, str]:
    """('caught' | 'SURVIVED' | 'stale', name)."""
    name, file, old, new = mutant
    source = (ROOT / file).read_text(encoding="utf-8")
    if source.count(old) != 1:
        return "stale", name
    with tempfile.TemporaryDirectory(prefix="mutant-") as folder:
        project_copy(Path(folder))
        (Path(folder) / file).write_text(source.replace(old, new), encoding="utf-8")
        done = subprocess.run(PYTEST, cwd=folder, capture_output=True, text=True)
    return ("caught" if done.returncode != 0 else "SURVIVED"), name


def main(words: list[str]) -> int:
    chosen = [m for m in MUTANTS if not words or any(w in m[0] for w in words)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = []
        for verdict, name in pool.map(run_mutant, chosen):
            print(f"{verdict:<9} {name}", flush=True)
            results.append(verdict)
    print(f"\n{len(results)} mutants: {results.count('caught')} caught, {results.count('SURVIVED')} survived, "
          f"{results.count('stale')} stale")
    return 0 if results.count("caught") == len(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
