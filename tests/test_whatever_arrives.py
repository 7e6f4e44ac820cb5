"""Whatever arrives (a path, a server's text, a session file, a full disk, a paste, a
secret, a window, a 429), the agent answers in one line and loses nothing. Each test drives the
agent from outside: its command line through a pipe or a pseudo-terminal, against a scripted
OpenAI-compatible server on 127.0.0.1, on a prepared folder."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FakeOpenAI, chat_response, counted
from test_repl import (AGENT, DEADLINE, KEY, Script, agent_env, assert_one_line_error, messages_of,  # noqa: F401
                       quit_cleanly, records, run_agent, server, terminal, tool_call, workspace)


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
    """Only files that say they are this workspace's sessions are pruned: one saved for another
    workspace's records, and one that is no session, stay however old they are."""
    folder = records(workspace)
    (folder / "archive").mkdir(mode=0o700, exist_ok=True)
    strangers = {folder / "session-a-foreign.json": json.dumps({**PLANTED, "records": "other-0123456789"}),
                 folder / "session-a-notes.json": "not a session"}
    for path, text in strangers.items():
        path.write_text(text)
        os.utime(path, (0, 0))
    for k in range(25):
        archive = folder / "archive" / f"session-old{k:02}.jsonl"
        archive.write_text("{}\n")
        path = folder / f"session-old{k:02}.json"
        path.write_text(json.dumps({**PLANTED, "records": folder.name, "archive": str(archive)}))
        os.utime(path, (k + 1, k + 1))
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "hi"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 0
    assert ("[session] removed 6 sessions of this workspace older than the newest 20, with their archives "
            "(KEEP_SESSIONS in tiny_agent.py)") in done.stdout
    kept = sorted(p.name for p in folder.glob("session-old*.json"))
    assert kept == [f"session-old{k:02}.json" for k in range(6, 25)] and len(session_files(state)) == 22
    assert {path: path.read_text() for path in strangers} == strangers
    assert sorted(p.name for p in (folder / "archive").glob("session-old*")) == [f"session-old{k:02}.jsonl"
                                                                               for k in range(6, 25)]


# --- 5. The agent's own secrets never reach the disk, nor the server --------------------------

def test_the_agents_own_keys_are_masked_in_every_tool_output(server, tmp_path, workspace, state):
    """`cat .env` and `read_file .env` show the key: the history the server receives, the session
    file and the archive hold the mask, never the value; another secret setting is masked too."""
    token = "ghp_" + "t0ken" * 6
    (workspace / ".env").write_text(f"OPENAI_API_KEY={KEY}\nGITHUB_TOKEN={token}\nMODEL=test-model\n")
    reads = [chat_response(tool_calls=[tool_call(f"c{i}", "bash", command="cat .env") if i % 2 else
                                       tool_call(f"c{i}", "read_file", path=".env")]) for i in range(14)]
    script = Script(server, [*reads, chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "--threshold", "10", "read the settings"],
                     agent_env(script.base_url, GITHUB_TOKEN=token), tmp_path / "cwd")
    assert done.returncode == 0 and "[compact]" in done.stdout, done.stderr
    sent = json.dumps(script.turns + script.summaries)
    assert "[OPENAI_API_KEY masked]" in sent and "[GITHUB_TOKEN masked]" in sent
    assert KEY not in sent and token not in sent, sent[max(0, sent.find(KEY) - 300):sent.find(KEY) + 50]
    written = [p for p in state.rglob("*") if p.is_file()]
    assert any(p.suffix == ".jsonl" for p in written)  # the archive was written
    assert not [p for p in written if KEY.encode() in p.read_bytes() or token.encode() in p.read_bytes()]


# --- 7. The window a refusal names governs the whole request, max_tokens included ----------------

def test_a_refusal_that_names_a_smaller_window_lowers_max_tokens_too(server, tmp_path, workspace):
    """CONTEXT_WINDOW unset (128,000, so max_tokens 16,000); the server holds 4,096 and refuses a
    request whose messages and max_tokens together pass it, as OpenAI does: the agent sends again
    within 4,096, max_tokens included, and ends with the answer."""
    bodies = []

    def reply(body: dict):
        bodies.append(body)
        asked = body.get("max_tokens") or body.get("max_completion_tokens")
        prompt = counted(body)
        if prompt + asked > 4_096:
            return 400, {"error": {"message": f"This model's maximum context length is 4096 tokens. However, you "
                                              f"requested {prompt + asked} tokens ({prompt} in the messages, {asked} "
                                              "in the completion). Please reduce the length of the messages or "
                                              "completion.", "type": "invalid_request_error",
                                   "code": "context_length_exceeded"}}
        return 200, chat_response("FITS")
    base = FakeOpenAI(server, reply).base_url
    settings = tmp_path / "mine.env"
    settings.write_text("SEND_REASONING=1\n")
    done = run_agent(["--workspace", str(workspace), "--env-file", str(settings), "hello"], agent_env(base), tmp_path / "cwd")
    assert done.returncode == 0 and "[answer] FITS" in done.stdout, done.stdout + done.stderr
    # the hint names the file the settings are read from, not the workspace's .env
    assert (f"[settings] the server's window is 4,096 tokens, not CONTEXT_WINDOW=128,000: compacting for 4,096 from "
            f"now on; set CONTEXT_WINDOW in {settings} to 4096 for the next run") in done.stdout, done.stdout
    assert bodies[0]["max_tokens"] == 16_000 and counted(bodies[-1]) + bodies[-1]["max_tokens"] <= 4_096


# --- 8. The latest request is never labelled as reference material ------------------------------

def test_a_latest_request_longer_than_its_room_stays_the_last_user_message_cut_and_archived(server, tmp_path,
                                                                                            workspace, state):
    """A question of ~2,000 tokens (over the user's room of 1,000) after enough turns to compact: the
    request sent next ends with that question, cut by the one cutter (its head and tail, the
    archive holding it whole), after the summary and its acknowledgement; the summary does not
    quote it as reference material."""
    long = " ".join(f"point{i} of the question;" for i in range(400)) + " WHICH-FUNCTION-ROUNDS?"
    (workspace / "notes.txt").write_text("".join(f"line {k} of the notes\n" for k in range(300)))
    steps = [chat_response(tool_calls=[tool_call(f"c{i}", "read_file", path="notes.txt")]) for i in range(16)]
    script = Script(server, [chat_response("FIRST"), *steps, chat_response("SECOND")])
    done = subprocess.run([sys.executable, str(AGENT), "--workspace", str(workspace)], cwd=tmp_path / "cwd",
                          env=agent_env(script.base_url), capture_output=True, text=True,
                          input=f"start\n{long}\n", timeout=DEADLINE)
    assert done.returncode == 0 and "agent> SECOND" in done.stdout, done.stdout + done.stderr
    sent = messages_of(script.turns[-1])
    summary = next(i for i, m in enumerate(sent) if str(m.get("content", "")).startswith("[Context summary]"))
    users = [m for m in sent[summary + 1:] if m["role"] == "user"]
    assert sent[summary + 1]["role"] == "assistant" and users, [m["role"] for m in sent]  # the acknowledgement
    last = users[-1]["content"]
    assert last.startswith("point0 of the question;") and last.endswith("WHICH-FUNCTION-ROUNDS?") and len(last) < len(long)
    assert "point0 of the question" not in sent[summary]["content"]
    archived = "".join(p.read_text() for p in state.rglob("*.jsonl"))
    assert json.dumps(long)[1:-1] in archived


# --- 9. 429: waited out by the openai client, as the server's Retry-After asks -------------------

def test_429_is_waited_out_while_retry_after_stays_within_the_bound(server, tmp_path, workspace):
    """Retry-After: 1 twice, then the answer comes (the bound on a wait, the cap on tries and a
    Retry-After given as a date: tests/test_model_path.py, with the waits recorded, not slept)."""
    def limited(times: int):
        sent = []

        def reply(body: dict):
            sent.append(body)
            if len(sent) <= times:
                return 429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"Retry-After": "1"}
            return 200, chat_response("PATIENT")
        return FakeOpenAI(server, reply).base_url, sent
    base, sent = limited(2)
    done = run_agent(["--workspace", str(workspace), "hello"], agent_env(base), tmp_path / "cwd")
    assert done.returncode == 0 and "[answer] PATIENT" in done.stdout, done.stdout + done.stderr
    assert len(sent) == 3 and "error" not in done.stdout + done.stderr


# --- 10. The tests leave nothing outside their temporary folders ---------------------------------

def test_a_slice_of_the_suite_leaves_home_and_xdg_state_home_empty(tmp_path):
    """HOME and XDG_STATE_HOME pointed at one empty folder, a slice of the suite that runs the agent
    in this process and as a program (sessions, archives, the REPL, a lesson): the folder stays
    empty (conftest points HOME at a folder of its own, and each test's XDG_STATE_HOME at its own)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home)}
    pick = ["tests/test_model_path.py", "tests/test_repl.py", "-k", "main_reports or refused_dropped or "
            "retry_after_is_waited or piped_into_the_repl or one_task_run_that_ends or resume_continues"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *pick],
                          cwd=Path(__file__).resolve().parent.parent, env=env, capture_output=True, text=True,
                          timeout=DEADLINE)
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []


# --- 11. The demo counts only what finished --------------------------------------------------

def test_the_demo_after_ctrl_c_counts_only_what_finished(tmp_path):
    """Ctrl-C as the demo's first survey command is shown (the README invites it), then "go on": the
    answer's files and lines are those of the project the demo copies, every file counted once and
    whole (a survey that Ctrl-C stopped is run again, not counted as a file of 0 lines)."""
    from test_repl import Terminal
    root = AGENT.parent
    files = [p for name in ("compact.py", "tiny_agent.py", "lessons", "tests")
             for p in ([root / name] if name.endswith(".py") else sorted((root / name).rglob("*.py")))
             if "__pycache__" not in p.parts and "live" not in p.relative_to(root).parts]
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    (tmp_path / "cwd").mkdir()
    t = Terminal(["--demo", "--repl"], agent_env(), tmp_path / "cwd")
    try:
        t.at_prompt()
        t.send("survey the project")
        t.expect('[tool] bash {"command": "wc -l ')
        t.interrupt()
        t.expect("[interrupted]")
        answer = t.ask("go on")
        found = re.search(r"Surveyed (\d+) Python files, ([\d,]+) lines in all", answer)
        assert found, answer[-2000:]
        assert (int(found[1]), int(found[2].replace(",", ""))) == (len(files), lines)
        quit_cleanly(t)
    finally:
        t.close()


# --- 12. The smaller things, each from outside ---------------------------------------------------

def test_the_demos_first_line_names_the_settings_file_it_would_read(tmp_path):
    settings = tmp_path / "settings.env"
    settings.write_text("")
    done = subprocess.run([sys.executable, str(AGENT), "--demo", "--env-file", str(settings)], cwd=AGENT.parent,
                          env=agent_env(), capture_output=True, text=True, timeout=DEADLINE)
    first = done.stdout.splitlines()[1]
    assert done.returncode == 0 and first == (f"[demo] No OPENAI_API_KEY or OPENAI_BASE_URL (in the environment or "
                                              f"{settings}): running the offline demo."), done.stdout


@pytest.mark.parametrize("where", ["shell", "the settings file"])
def test_a_hint_names_where_the_value_came_from(tmp_path, where):
    """A refused OPENAI_BASE_URL set in the shell: the line says to fix it in the shell's environment
    (changing the settings file would change nothing); set in the file --env-file names: that file."""
    url = "http://127.0.0.1:9/v1"  # the discard port: nothing answers
    cwd, settings = tmp_path / "cwd", tmp_path / "settings.env"
    cwd.mkdir()
    env = {k: v for k, v in agent_env().items() if k != "MODEL"}
    if where == "shell":
        env.update(OPENAI_BASE_URL=url)
        settings.write_text("")
    else:
        settings.write_text(f"OPENAI_BASE_URL={url}\n")
    done = subprocess.run([sys.executable, str(AGENT), "--env-file", str(settings), "hello"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=DEADLINE)
    line = done.stderr.strip()
    assert done.returncode == 1 and len(line.splitlines()) == 1, done.stdout + done.stderr
    assert (f"fix OPENAI_BASE_URL in your shell's environment (it overrides {settings})" in line) == (
        where == "shell"), line
    assert (f"fix OPENAI_BASE_URL in {settings}" in line) == (where != "shell"), line


def test_the_repl_says_how_to_choose_a_strategy_in_its_own_words(server, tmp_path, workspace):
    """/strategy none, then a history the server refuses as too long: the line names no command-line
    option (the REPL's way is /strategy)."""
    def reply(body: dict):
        if counted(body) > 4_000:
            return 400, {"error": {"message": "This model's maximum context length is 4000 tokens.",
                                   "type": "invalid_request_error", "code": "context_length_exceeded"}}
        return 200, chat_response("ANSWER")
    base = FakeOpenAI(server, reply).base_url
    questions = "".join(f"question {k}: " + "word " * 900 + "\n" for k in range(6))
    done = subprocess.run([sys.executable, str(AGENT), "--workspace", str(workspace)], cwd=tmp_path / "cwd",
                          env=agent_env(base, CONTEXT_WINDOW="4000"), capture_output=True, text=True,
                          input=f"/strategy none\n{questions}", timeout=DEADLINE)
    errors = [line for line in done.stdout.splitlines() if "error:" in line]
    assert done.returncode == 0 and errors, done.stdout[-2000:] + done.stderr
    assert "the strategy none does not compact: choose another" in errors[-1] and "--strategy" not in errors[-1]


def test_repl_with_a_task_asks_it_first_and_goes_on(server, tmp_path, workspace):
    script = Script(server, [chat_response("FIRST ANSWER"), chat_response("SECOND ANSWER")])
    done = subprocess.run([sys.executable, str(AGENT), "--workspace", str(workspace), "--repl", "the task"],
                          cwd=tmp_path / "cwd", env=agent_env(script.base_url), capture_output=True, text=True,
                          input="the next question\n", timeout=DEADLINE)
    assert done.returncode == 0 and "[repl] --repl with a task: the task is the first question" in done.stdout
    assert "agent> FIRST ANSWER" in done.stdout and "agent> SECOND ANSWER" in done.stdout, done.stdout
    assert [m["content"] for m in messages_of(script.turns[-1]) if m["role"] == "user"] == ["the task",
                                                                                          "the next question"]


def test_a_second_name_for_strategy_is_one_line(tmp_path):
    """One way to say each thing: --preset is not an option (a preset is a --strategy name)."""
    done = subprocess.run([sys.executable, str(AGENT), "--preset", "zones", "--demo"],
                          cwd=tmp_path, env=agent_env(), capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: unrecognized arguments: --preset (see python tiny_agent.py --help)"]


def test_copy_2s_help_names_no_strategy_it_rejects(tmp_path):
    """The README's copy 2 (both files cut above their third part): every name its --help shows
    is one it accepts."""
    from test_fork import fork
    folder = fork(tmp_path, 2)
    shown = subprocess.run([sys.executable, "tiny_agent.py", "--help"], cwd=folder, env=agent_env(),
                           capture_output=True, text=True, timeout=DEADLINE).stdout
    named = set(re.findall(r"\b(?:sawtooth|none|layered|hybrid|zones|evo-agent|five-layer|smart-eviction|echo-agent|"
                           r"sawtooth-tutorial)\b", shown))
    for name in named:
        tried = subprocess.run([sys.executable, "tiny_agent.py", "--strategy", name, "--demo"], cwd=folder,
                               env=agent_env(), capture_output=True, text=True, timeout=DEADLINE)
        assert "invalid choice" not in tried.stderr, (name, tried.stderr)
    assert named == {"none", "sawtooth"}, named
