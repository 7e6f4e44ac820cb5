"""Issue 37: whatever arrives (a path, a server's text, a session file, a full disk, a paste, a
secret, a window, a 429), the agent answers in one line and loses nothing. Each test drives the
agent from outside: its command line through a pipe or a pseudo-terminal, against a scripted
OpenAI-compatible server on 127.0.0.1, on a prepared folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FakeOpenAI, chat_response
from test_repl import (AGENT, DEADLINE, Script, agent_env, assert_one_line_error, messages_of,  # noqa: F401
                       quit_cleanly, records, run_agent, server, state, terminal, tool_call, workspace)


def session_files(state: Path) -> list[Path]:
    return sorted(state.rglob("session-*.json"))


def leftovers(state: Path) -> list[Path]:
    """Temporary files a save left behind."""
    return sorted(p for p in state.rglob(".session-*"))


# --- 1. Every name that reaches the disk or the terminal is made safe at one place --------------

STRANGE_PATHS = ["x\udcff.txt", "a\0b.txt", "dir\udc80/y.txt"]  # a JSON escape of a lone surrogate, a NUL


@pytest.mark.parametrize("path", STRANGE_PATHS)
def test_a_path_that_is_not_text_is_one_error_result_and_nothing_is_written(server, tmp_path, workspace, state,
                                                                            path):
    """read_file, write_file and edit_file each answer one error result; no file appears, the run
    ends with its answer, and the session file is whole, with no temporary file left behind."""
    calls = [tool_call("c1", "write_file", path=path, content="hi"), tool_call("c2", "read_file", path=path),
             tool_call("c3", "edit_file", path=path, old="a", new="b")]
    script = Script(server, [chat_response(tool_calls=calls), chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "write it"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 0 and "[answer] DONE" in done.stdout and "Traceback" not in done.stderr, done.stderr
    results = [m["content"] for m in messages_of(script.turns[1]) if m["role"] == "tool"]
    assert len(results) == 3 and all(r.startswith("error: path ") and "not text" in r for r in results), results
    assert list(workspace.rglob("*")) == []
    saved = json.loads(session_files(state)[-1].read_text(encoding="utf-8"))
    assert [m["role"] for m in saved["messages"]][-3:] == ["tool", "tool", "assistant"]
    assert leftovers(state) == []


def test_the_repl_goes_on_after_a_path_that_is_not_text(server, terminal, workspace, state):
    script = Script(server, [chat_response(tool_calls=[tool_call("c1", "write_file", path="x\udcff.txt", content="hi")]),
                             chat_response("FIRST"), chat_response("SECOND")])
    t = terminal(script)
    assert "agent> FIRST" in t.ask("write it")
    assert "agent> SECOND" in t.ask("and now?")
    quit_cleanly(t)
    assert list(workspace.rglob("*")) == [] and leftovers(state) == []


SCREEN = "\x1b[2J\x1b[H\x1b]0;pwned\x07"  # clears the screen, homes the cursor, sets the window's title


def no_escapes(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\x9b\u202e") and "[2J" not in text and "0;pwned" not in text


@pytest.mark.parametrize("status", [400, 500])
def test_a_servers_error_text_reaches_the_terminal_clean(server, tmp_path, workspace, status):
    """An HTTP error body that would clear the screen and set the title: the one line says what the
    server said, without the sequences (nor what is left of them once ESC is gone)."""
    body = {"error": {"message": f"{SCREEN}bad things\x1b[31m happened\x1b[0m \u202eevil", "type": "x"}}
    script = Script(server, [(status, body)] * 3)
    done = run_agent(["--workspace", str(workspace), "hi"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 1 and "bad things happened evil" in done.stderr
    assert no_escapes(done.stdout + done.stderr), done.stderr


def test_the_summarizers_failure_and_the_answer_reach_the_terminal_clean(server, tmp_path, workspace):
    """The summary model answers HTTP 500 with sequences; the agent's answer holds some too: the
    terminal shows neither, and the answer's text is all there."""
    steps = [chat_response(tool_calls=[tool_call(f"c{i}", "bash", command="true")]) for i in range(20)]
    steps.append(chat_response(f"{SCREEN}The \x1b[1manswer\x1b[0m \u202ereversed"))

    def reply(body: dict):
        if "tools" not in body:  # the summary model
            return 500, {"error": {"message": f"{SCREEN}summarizer down"}}
        return 200, steps.pop(0)
    base = FakeOpenAI(server, reply).base_url
    done = run_agent(["--workspace", str(workspace), "--threshold", "8", "hi"], agent_env(base), tmp_path / "cwd")
    assert done.returncode == 0 and "[compact] the summarizer failed (InternalServerError, HTTP 500)" in done.stderr
    assert "[answer] The answer reversed" in done.stdout
    assert no_escapes(done.stdout + done.stderr)


# --- 2. Session files are read like any outside input, and written without loss ------------------

PLANTED = {"version": 2, "strategy": "sawtooth", "messages": [{"role": "user", "content": "PLANTED-HISTORY"}]}


def plant(folder: Path, kind: str, tmp_path: Path) -> Path:
    """A session file of `kind` in the records folder, as the newest one."""
    path = folder / "session-29991231-235959-1.json"
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    if kind == "nested 200,000 deep":
        path.write_text("[" * 200_000)
    elif kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a symbolic link to a FIFO":
        os.mkfifo(outside / "fifo")
        path.symlink_to(outside / "fifo")
    elif kind == "a symbolic link to JSON outside":
        (outside / "planted.json").write_text(json.dumps(PLANTED))
        path.symlink_to(outside / "planted.json")
    elif kind == "larger than a session":
        with open(path, "wb") as f:
            f.truncate(65 << 20)  # sparse: 65 MB that take no room
    elif kind == "version 99":
        path.write_text(json.dumps({**PLANTED, "version": 99}))
    return path


@pytest.mark.parametrize("kind", ["nested 200,000 deep", "a FIFO", "a symbolic link to a FIFO",
                                  "a symbolic link to JSON outside", "larger than a session", "version 99"])
def test_a_session_file_is_read_like_outside_input(server, tmp_path, workspace, kind):
    """--resume on each: one line naming the file, nothing sent, the file left as it was."""
    folder = records(workspace)
    path = plant(folder, kind, tmp_path)
    before = os.lstat(path)
    script = Script(server, [chat_response("ANSWER")])
    done = run_agent(["--workspace", str(workspace), "--resume", "go on"], agent_env(script.base_url), tmp_path / "cwd")
    assert_one_line_error(done, path.name, "move it away")
    assert script.turns == [] and os.lstat(path).st_mtime_ns == before.st_mtime_ns


def test_every_records_folder_is_owner_only_from_the_root_down(server, tmp_path, workspace, monkeypatch):
    """A state folder that does not exist yet: every folder the agent makes is 0700; a records root
    an older version made 0755 is made 0700 again."""
    base = tmp_path / "fresh" / "state"
    script = Script(server, [chat_response("A"), chat_response("B")])
    done = run_agent(["--workspace", str(workspace), "hi"], agent_env(script.base_url, XDG_STATE_HOME=str(base)),
                     tmp_path / "cwd")
    assert done.returncode == 0, done.stderr
    made = [tmp_path / "fresh", base, base / "tiny-agent", *[p for p in (base / "tiny-agent").rglob("*") if p.is_dir()]]
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in made} == {str(p): "0o700" for p in made}
    (base / "tiny-agent").chmod(0o755)
    run_agent(["--workspace", str(workspace), "hi"], agent_env(script.base_url, XDG_STATE_HOME=str(base)),
              tmp_path / "cwd")
    assert (base / "tiny-agent").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("mode", [0o600, 0o755, 0o640])
def test_the_file_tools_keep_a_files_mode(server, tmp_path, workspace, mode):
    (workspace / "f.sh").write_text("echo old\n")
    (workspace / "f.sh").chmod(mode)
    calls = [tool_call("c1", "edit_file", path="f.sh", old="old", new="new"),
             tool_call("c2", "write_file", path="g.txt", content="fresh")]
    script = Script(server, [chat_response(tool_calls=calls), chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "edit"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 0 and (workspace / "f.sh").read_text() == "echo new\n", done.stderr
    assert (workspace / "f.sh").stat().st_mode & 0o777 == mode
    assert (workspace / "g.txt").stat().st_mode & 0o777 == 0o666 & ~current_umask()


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_size_limit(limit: int):
    """For the child: writes past `limit` bytes fail (EFBIG), as a full disk makes them fail."""
    import resource
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_save_that_fails_keeps_the_last_good_file_and_the_run_goes_on(server, tmp_path, workspace, state):
    """The session outgrows what the disk takes: each failed save is one line, the last good file
    stays whole and parses, no temporary file is left, and the run ends with its answer."""
    (workspace / "big.txt").write_text("".join(f"line {i} of the log\n" for i in range(500)))
    calls = [chat_response(tool_calls=[tool_call(f"c{i}", "bash", command="cat big.txt")]) for i in range(8)]
    script = Script(server, [*calls, chat_response("DONE")])
    done = subprocess.run([sys.executable, str(AGENT), "--workspace", str(workspace), "read it"], cwd=tmp_path / "cwd",
                          env=agent_env(script.base_url), capture_output=True, text=True, timeout=DEADLINE,
                          stdin=subprocess.DEVNULL, preexec_fn=file_size_limit(40_000))
    assert done.returncode == 0 and "[answer] DONE" in done.stdout and "Traceback" not in done.stderr, done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("[session] could not save")]
    assert failed and all("(File too large): the last saved copy stays; the run goes on" in f for f in failed)
    saved = json.loads(session_files(state)[-1].read_text(encoding="utf-8"))
    assert saved["messages"][1]["content"] == "read it" and leftovers(state) == []


def test_the_repl_resumed_goes_on_when_saves_fail(server, tmp_path, workspace, state):
    script = Script(server, [chat_response("FIRST")])
    assert run_agent(["--workspace", str(workspace), "first"], agent_env(script.base_url), tmp_path / "cwd").returncode == 0
    big = "x" * 30_000
    script.steps += [chat_response(big), chat_response("SECOND"), chat_response("THIRD")]
    done = subprocess.run([sys.executable, str(AGENT), "--workspace", str(workspace), "--resume"], cwd=tmp_path / "cwd",
                          env=agent_env(script.base_url), capture_output=True, text=True, timeout=DEADLINE,
                          input="one\ntwo\nthree\n", preexec_fn=file_size_limit(20_000))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "agent> SECOND" in done.stdout and "agent> THIRD" in done.stdout
    assert "could not save" in done.stdout and leftovers(state) == []


def test_resume_names_the_file_and_the_others_and_session_picks_one(server, tmp_path, workspace, state):
    script = Script(server, [chat_response("A1"), chat_response("A2"), chat_response("A3"), chat_response("A4")])
    for task in ("first", "second"):
        assert run_agent(["--workspace", str(workspace), task], agent_env(script.base_url),
                         tmp_path / "cwd").returncode == 0
    first, second = session_files(state)[0], session_files(state)[-1]
    os.utime(first, (1, 1))  # the first run's file is the older one, whatever the clock's resolution
    done = run_agent(["--workspace", str(workspace), "--resume", "go on"], agent_env(script.base_url), tmp_path / "cwd")
    assert f"[session] continuing {second.name}" in done.stdout and f"1 other, newest first: {first.name}" in done.stdout
    assert [m["content"] for m in messages_of(script.turns[-1])][1:3] == ["second", "A2"]
    done = run_agent(["--workspace", str(workspace), "--session", first.name, "go on"], agent_env(script.base_url),
                     tmp_path / "cwd")
    assert f"[session] continuing {first.name}" in done.stdout
    assert [m["content"] for m in messages_of(script.turns[-1])][1:3] == ["first", "A1"]
    wrong = run_agent(["--workspace", str(workspace), "--session", "nope.json", "go on"], agent_env(script.base_url),
                      tmp_path / "cwd")
    assert_one_line_error(wrong, "--session nope.json: no such session of this workspace; the saved ones: ")


def test_the_newest_twenty_sessions_of_a_workspace_are_kept_with_their_archives(server, tmp_path, workspace, state):
    folder = records(workspace)
    (folder / "archive").mkdir(mode=0o700, exist_ok=True)
    for k in range(25):
        archive = folder / "archive" / f"session-old{k:02}.jsonl"
        archive.write_text("{}\n")
        path = folder / f"session-old{k:02}.json"
        path.write_text(json.dumps({**PLANTED, "archive": str(archive)}))
        os.utime(path, (k + 1, k + 1))
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "hi"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 0
    assert ("[session] removed 6 sessions of this workspace older than the newest 20, with their archives "
            "(KEEP_SESSIONS in tiny_agent.py)") in done.stdout
    kept = sorted(p.name for p in folder.glob("session-old*.json"))
    assert kept == [f"session-old{k:02}.json" for k in range(6, 25)] and len(session_files(state)) == 20
    assert sorted(p.name for p in (folder / "archive").glob("session-old*")) == [f"session-old{k:02}.jsonl"
                                                                               for k in range(6, 25)]
