"""The REPL and its saved session, driven as a person drives them: `python tiny_agent.py`
in a pseudo-terminal, real SIGINTs sent to its process group, and a scripted OpenAI-compatible
server on 127.0.0.1 whose recorded request bodies show what the agent really sent. The helpers here
(Terminal, Script, agent_env, the `server` fixture) are shared with test_shell.py and test_terminal.py.
The agent keeps its records (the session file, the archive) under $XDG_STATE_HOME, outside the
workspace: every test here points XDG_STATE_HOME at a folder of its own (`state`)."""

from __future__ import annotations

import codecs
import json
import os
import re
import shlex
import secrets
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import compact
import pytest
from conftest import ROOT, FakeOpenAI, chat_response, options_for
from pytest_httpserver import HTTPServer

AGENT = ROOT / "tiny_agent.py"
KEY = "sk-test-" + "k3y" * 8  # the API key the child gets; it must never be written to disk
DEADLINE = 60.0  # seconds to wait for an expected output or exit: a bound, never an assertion
SETTINGS = ("MODEL", "SUMMARY_MODEL", "CONTEXT_WINDOW", "SUMMARY_CONTEXT_WINDOW", "REQUEST_TIMEOUT",
            "MAX_OUTPUT_TOKENS", "SEND_REASONING")


def agent_env(base_url: str | None = None, **extra: str) -> dict:
    """The child's environment: no model or proxy setting inherited; a model on `base_url`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OPENAI_") and k not in SETTINGS and "proxy" not in k.lower()}
    env.update(PYTHONIOENCODING="utf-8", PYTHONUNBUFFERED="1", NO_PROXY="*", MODEL="test-model",
               REQUEST_TIMEOUT="60")
    if base_url:
        env.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY=KEY)
    return {**env, **extra}


def records(workspace: Path) -> Path:
    """The agent's records folder for `workspace`: under $XDG_STATE_HOME, never inside the workspace."""
    import tiny_agent
    folder = tiny_agent.records_folder(workspace)
    assert Path(os.environ["XDG_STATE_HOME"]) in folder.parents and workspace.resolve() not in folder.parents
    return folder


def latest(folder: Path) -> Path:
    """The session file saved last in a records folder (each run keeps its own)."""
    import tiny_agent
    return tiny_agent.saved_sessions(folder)[-1]


@pytest.fixture
def server():
    """A threaded HTTP server of our own on 127.0.0.1 (a held request must not block the next)."""
    s = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    s.scripts = []
    s.start()
    yield s
    for script in s.scripts:
        script.release.set()  # a held answer goes out, so its thread ends
    s.clear()
    if s.is_running():
        s.stop()


class Held:
    """A scripted step whose answer waits until the test calls script.release.set()."""

    def __init__(self, payload: dict):
        self.payload = payload


HOLD = Held(chat_response("this answer comes too late"))


SUMMARY = "## Goal\nthe earlier turns, summarized"


class Script:
    """The agent's requests (they carry tools) get the next step: a body, (status, body) or Held.
    Summary requests (no tools) are kept apart and get a short summary."""

    def __init__(self, server: HTTPServer, steps=(), summary: str | list[str] = SUMMARY):
        self.steps, self.summary = list(steps), summary  # a list: one summary a request, the last repeated
        self.turns: list[dict] = []
        self.summaries: list[dict] = []
        self.release = threading.Event()
        self.changed = threading.Condition()
        self.base_url = FakeOpenAI(server, self.reply).base_url
        server.scripts.append(self)

    def reply(self, body: dict):
        with self.changed:
            (self.turns if "tools" in body else self.summaries).append(body)
            self.changed.notify_all()
            if "tools" not in body:
                summary = self.summary if isinstance(self.summary, str) else \
                    self.summary[min(len(self.summaries), len(self.summary)) - 1]
                return 200, chat_response(summary)
            step = self.steps.pop(0) if self.steps else chat_response("(the script has no more replies)")
        if isinstance(step, Held):
            self.release.wait(DEADLINE)
            step = step.payload
        return step if isinstance(step, tuple) else (200, step)

    def wait_for_turns(self, n: int) -> dict:
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.turns) >= n, DEADLINE):
                pytest.fail(f"the agent sent {len(self.turns)} requests, not {n}")
            return self.turns[n - 1]


def tool_call(call_id: str, name: str, **args) -> tuple:
    return (call_id, name, args)


def messages_of(body: dict) -> list[dict]:
    return body["messages"]


def texts(body: dict) -> list[str]:
    return [m.get("content") or "" for m in messages_of(body)]


def assert_valid(messages: list[dict]) -> None:
    """What every server accepts: known roles, content a string, each call answered right after it
    and each result answering a call."""
    pending: set[str] = set()
    for i, m in enumerate(messages):
        assert m["role"] in ("system", "user", "assistant", "tool"), m
        assert isinstance(m.get("content"), str), f"message {i} content is not a string: {m}"
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, f"message {i} answers no pending call: {m}"
            pending.discard(m["tool_call_id"])
            continue
        assert not pending, f"calls {pending} have no result before message {i}"
        pending = {c["id"] for c in m.get("tool_calls") or []}
    assert not pending, f"calls {pending} have no result"


class Terminal:
    """`python tiny_agent.py ARGS` on a pseudo-terminal in its own session and process group."""

    def __init__(self, args: list[str], env: dict, cwd: Path):
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen([sys.executable, str(AGENT), *args], stdin=slave, stdout=slave,
                                     stderr=slave, cwd=cwd, env=env, start_new_session=True)
        os.close(slave)
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.seen, self.mark, self.closed = "", 0, False

    def _read(self, until: float) -> None:
        ready, _, _ = select.select([self.master], [], [], max(0.0, until - time.monotonic()))
        if not ready:
            return
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the terminal has exited
            data = b""
        self.closed = self.closed or not data
        self.seen += self.decoder.decode(data)

    def expect(self, text: str, regex: bool = False, timeout: float = DEADLINE) -> re.Match:
        """Wait for `text` after what was already matched; the match moves the mark past it."""
        pattern, until = re.compile(text if regex else re.escape(text)), time.monotonic() + timeout
        while True:
            found = pattern.search(self.seen, self.mark)
            if found:
                self.mark = found.end()
                return found
            if self.closed or time.monotonic() > until:
                pytest.fail(f"waited for {text!r}; the terminal shows:\n{self.seen[-3000:]}")
            self._read(until)

    def since(self, start: int) -> str:
        return self.seen[start:self.mark]

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def at_prompt(self) -> None:
        """Wait for the prompt, unless the last match already ended with it."""
        if not self.seen[:self.mark].endswith("you> "):
            self.expect("you> ")

    def ask(self, line: str) -> str:
        """Type a line at the prompt; return what the REPL printed up to its next prompt."""
        self.at_prompt()
        start = self.mark
        self.send(line)
        self.expect("you> ")
        return self.seen[start:self.mark]

    def reading(self) -> bool:
        """True when the child's main thread waits for its standard input: in read(0, …) (plain
        input(): a SIGINT sent between the prompt and that read is only seen after the next line)
        or, with readline, in select/pselect6 on fd 0 alone (nfds 1)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/syscall").read_text().split()
        except OSError:
            return False
        if len(fields) < 2:
            return False
        read = fields[0] in ("0", "63") and fields[1] == "0x0"  # read(0, …): x86-64, arm64
        waits = fields[0] in ("23", "270", "72") and fields[1] == "0x1"  # select, pselect6 (x86-64), pselect6 (arm64)
        return read or waits

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the whole foreground process group, as the terminal sends it."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def wait(self, timeout: float = DEADLINE) -> int:
        until = time.monotonic() + timeout
        while not self.closed and time.monotonic() < until:
            self._read(until)
        return self.proc.wait(max(0.1, until - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def workspace(tmp_path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "cwd").mkdir()  # the child's cwd: no .env anywhere above it
    return ws


@pytest.fixture
def terminal(tmp_path, workspace):
    """start(script, *args, **env) -> a Terminal running the REPL on `workspace`."""
    started: list[Terminal] = []

    def start(script: Script | None, *args: str, **env: str) -> Terminal:
        t = Terminal(["--workspace", str(workspace), *args], agent_env(script and script.base_url, **env),
                     tmp_path / "cwd")
        started.append(t)
        return t
    yield start
    for t in started:
        t.close()


def quit_cleanly(t: Terminal) -> None:
    t.at_prompt()
    t.send("/exit")
    assert t.wait() == 0
    assert "Traceback" not in t.seen


# --- 1. The REPL keeps the session -----------------------------------------------------------


def test_ctrl_c_while_the_model_thinks_keeps_the_session(server, terminal):
    script = Script(server, [chat_response("FIRST-ANSWER"), HOLD, chat_response("THIRD-ANSWER")])
    t = terminal(script)
    assert "agent> FIRST-ANSWER" in t.ask("first question")
    t.at_prompt()
    t.send("second question")
    script.wait_for_turns(2)  # the server holds the answer: the model is "thinking"
    t.interrupt()
    t.expect("[interrupted] the turn was stopped; the question stays in the history, marked as interrupted")
    script.release.set()
    assert "agent> THIRD-ANSWER" in t.ask("third question")
    third = messages_of(script.turns[2])
    # the interrupted question stays in the history, marked, never merged into the next one
    assert [m["content"] for m in third if m["role"] in ("user", "assistant")] == [
        "first question", "FIRST-ANSWER", "second question", "[interrupted by the user before an answer]",
        "third question"]
    assert_valid(third)
    quit_cleanly(t)


def sleeping(token: str) -> list[int]:
    """Pids of live processes whose command line is `sleep <token>` (inside a sandbox or not)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == b"sleep\0" + token.encode() + b"\0" \
                    and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.fixture
def sleeper():
    """An argument for `sleep` that no other process has, and longer than any wait here, so a
    process that is gone was stopped; whatever a failing test left running is killed after it."""
    token = f"600.{secrets.randbelow(10**9):09d}"
    yield token
    for pid in sleeping(token):
        os.kill(pid, signal.SIGKILL)


def wait_until(condition, what: str, timeout: float = DEADLINE) -> None:
    until = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > until:
            pytest.fail(f"still not true after {timeout:g} s: {what}")
        time.sleep(0.05)


def test_ctrl_c_during_a_tool_call_stops_bash_and_answers_every_call(server, terminal, workspace, sleeper):
    token = sleeper  # a long `sleep`, told apart from every other one
    calls = chat_response(tool_calls=[tool_call("call_sleep", "bash", command=f"sleep {token}"),
                                      tool_call("call_next", "write_file", path="never.txt", content="x")])
    script = Script(server, [chat_response("FIRST-ANSWER"), calls, chat_response("THIRD-ANSWER")])
    t = terminal(script, "--yes")  # `sleep` is not a read-only program: it would be asked
    t.ask("first question")
    t.at_prompt()
    t.send("second question")
    t.expect("[tool] bash")
    wait_until(lambda: sleeping(token), "the bash tool started `sleep`")
    t.interrupt()
    t.expect("[interrupted]")
    wait_until(lambda: not sleeping(token), "`sleep` was stopped with its turn")
    assert "agent> THIRD-ANSWER" in t.ask("third question")
    third = messages_of(script.turns[2])
    assert_valid(third)
    results = {m["tool_call_id"]: m["content"] for m in third if m["role"] == "tool"}
    assert set(results) == {"call_sleep", "call_next"}
    assert all("interrupted" in text for text in results.values()), results
    assert "FIRST-ANSWER" in texts(script.turns[2])
    assert not (workspace / "never.txt").exists()  # the call after the interrupted one never ran
    quit_cleanly(t)


def test_ctrl_c_at_the_prompt_only_gives_a_new_prompt(server, terminal):
    script = Script(server, [chat_response("AN-ANSWER")])
    t = terminal(script)
    t.at_prompt()
    wait_until(t.reading, "the REPL waits for a line")
    t.interrupt()
    t.expect("you> ")
    assert "agent> AN-ANSWER" in t.ask("a question")
    quit_cleanly(t)


@pytest.mark.parametrize("failure", ["HTTP 500", "server stopped"])
def test_a_server_error_ends_the_turn_with_one_line_not_the_session(server, terminal, failure):
    broken = (500, {"error": {"message": "boom", "type": "server_error"}})
    steps = [chat_response("FIRST-ANSWER")] + ([broken] * 3 if failure == "HTTP 500" else [])  # the client's 2 retries
    script = Script(server, steps + [chat_response("THIRD-ANSWER")])
    t = terminal(script)
    t.ask("first question")
    if failure == "server stopped":
        server.stop()
    shown = t.ask("second question")
    lines = [line for line in shown.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in shown, shown
    expected = "the server answered HTTP 500: boom" if failure == "HTTP 500" else "nothing answers at"
    assert expected in errors[0]
    if failure == "server stopped":
        server.start()  # the same address again
    assert "agent> THIRD-ANSWER" in t.ask("third question")
    assert "FIRST-ANSWER" in texts(script.turns[-1])
    quit_cleanly(t)


def test_an_empty_line_does_nothing_and_exit_quits(server, terminal):
    script = Script(server, [chat_response("AN-ANSWER")])
    t = terminal(script)
    t.at_prompt()
    start = t.mark
    t.send("")  # each after its prompt, as a person types (lines sent at once are one paste)
    t.expect("you> ")
    t.send("   ")
    t.expect("you> ")
    assert script.turns == [] and "agent>" not in t.since(start)
    quit_cleanly(t)
    assert script.turns == []


def test_ctrl_d_quits_and_prints_a_newline(server, terminal):
    t = terminal(Script(server))
    t.at_prompt()
    start = t.mark
    os.write(t.master, b"\x04")  # Ctrl-D at the start of a line: end of input
    assert t.wait() == 0
    assert t.seen[start:].replace("\r", "") == "\n"


# --- 2. Slash commands -----------------------------------------------------------------------


def test_help_lists_the_commands(server, terminal):
    t = terminal(Script(server))
    shown = t.ask("/help")
    for name in ("/help", "/context", "/compact [focus]", "/strategy NAME", "/exit"):
        assert name in shown
    quit_cleanly(t)


KINDS = ("system prompt", "tool schemas", "summary", "pinned constraints", "tool results", "other messages")


def test_context_shows_tokens_by_kind_the_trigger_the_window_and_the_servers_count(server, terminal):
    answer = chat_response("FIRST-ANSWER")
    answer["usage"]["prompt_tokens"] = 4321
    script = Script(server, [answer])
    t = terminal(script, CONTEXT_WINDOW="16000")
    before = t.ask("/context")
    assert re.search(r"\[context\] ~[\d,]+ of 16,000 tokens \(\d+%\); trigger at \d+%", before), before
    assert "trigger at 62% (70% of the window less the 2,000 kept for the reply)" in before  # the README's 70%
    for kind in KINDS:
        assert re.search(rf"^\s*{kind}\s+[\d,]+ ", before, re.M), kind
    assert "▲ trigger" in before and "| window" in before
    assert "server counted" not in before
    t.ask("a question")
    assert "the server counted 4,321 for the last request" in t.ask("/context")
    quit_cleanly(t)


def test_the_trigger_context_shows_is_where_compaction_starts(server, terminal):
    """/context said the history was under the trigger, and the next question compacted it: the
    mark is drawn at 70% of the window, but the sawtooth starts at 70% of the window less the
    reserved output (61% by default)."""
    from tiny_agent import SYSTEM_PROMPT, schema_tokens
    from compact import estimate_tokens
    window = 4000
    words = 1
    while schema_tokens() + estimate_tokens([{"role": "system", "content": SYSTEM_PROMPT},
                                           {"role": "user", "content": "first question"},
                                           {"role": "assistant", "content": "word " * words}]) < 0.66 * window:
        words += 10
    long = chat_response("word " * words)
    del long["usage"]  # no count from the server: both sides estimate
    script = Script(server, [long, chat_response("SECOND-ANSWER")])
    t = terminal(script, "--keep-recent", "1", CONTEXT_WINDOW=str(window))
    t.ask("first question")
    meter = t.ask("/context")
    share, trigger = map(int, re.search(r"\((\d+)%\); trigger at (\d+)%", meter).groups())
    turn = t.ask("second question")
    assert ("[compact]" in turn) == (share > trigger), (meter, turn)
    quit_cleanly(t)


def answers(n: int) -> list[dict]:
    """Answers long enough that a summary of them is shorter than they are."""
    return [chat_response(f"ANSWER-{i} " + "The parser reads the tokens one by one and checks each. " * 30)
            for i in range(n)]


def long_enough(t: Terminal, n: int = 4) -> None:
    for i in range(n):
        assert f"agent> ANSWER-{i}" in t.ask(f"question {i} about the parser")


@pytest.mark.parametrize("strategy", ["sawtooth", "hybrid", "layered"])
def test_compact_with_a_focus_reaches_the_summarizer(server, terminal, strategy):
    script = Script(server, answers(4) + [chat_response("AFTER")])
    t = terminal(script, "--strategy", strategy, *options_for(strategy, keep_recent=2), SUMMARY_MODEL="summary-model")
    long_enough(t)
    shown = t.ask("/compact the parser bug in line 42")
    assert re.search(r"\[compact\] 9 → \d+ messages", shown), shown
    assert script.summaries, "no summary request reached the server"
    request = script.summaries[-1]
    assert request["model"] == "summary-model" and "tools" not in request
    assert "Focus the summary on: the parser bug in line 42" in request["messages"][-1]["content"]
    assert "agent> AFTER" in t.ask("and now?")
    after = messages_of(script.turns[-1])
    assert_valid(after)
    assert len(after) < 11
    # the summary is a user message of its own under every strategy: the first request left with the
    # middle, and the compaction's state quotes it
    assert after[1]["role"] == "user" and after[1]["content"].startswith("[Context summary]"), after[1]
    assert after[2] == {"role": "assistant", "content": compact.ACK["content"]}  # the tail starts with a user message
    quit_cleanly(t)


def test_compact_that_rewrites_the_summary_in_place_does_not_say_nothing_was_compacted(server, terminal):
    long_summary = "## Goal\n" + "The user asked about the parser, and the tokens were read one by one. " * 20
    script = Script(server, answers(4) + [chat_response("AFTER")], summary=[long_summary, "## Goal\nparser"])
    t = terminal(script, "--keep-recent", "2")
    long_enough(t)
    assert "[compact] 9 → 5 messages" in t.ask("/compact")  # system, summary, ACK, the last two kept
    shown = t.ask("/compact the parser")  # the middle is the summary alone: it is rewritten, shorter
    assert "[compact] 5 → 5 messages" in shown
    assert "nothing to compact yet" not in shown, shown
    quit_cleanly(t)


@pytest.mark.parametrize("strategy", ["sawtooth", "layered"])
def test_context_times_the_summarizers_failures_and_warns_while_summaries_are_degraded(server, terminal, strategy):
    """The statistics are the same for every strategy. A summary model that answers with
    an error message fails three compactions in a row; /context then says when, and that summaries
    are degraded while the breaker is open."""
    script = Script(server, answers(8), summary="Error: the summary model is overloaded")
    t = terminal(script, "--strategy", strategy, *options_for(strategy, keep_recent=2))
    long_enough(t)
    for n in range(3):  # two more questions between compactions, so each has turns to summarize
        for i in (4 + 2 * n - 2, 4 + 2 * n - 1) if n else ():
            assert f"agent> ANSWER-{i}" in t.ask(f"question {i} about the parser")
        assert "[compact] the summarizer failed (SummaryFailure" in t.ask("/compact")
    stats = t.ask("/context").replace("\r", "")
    clock = r"\d\d:\d\d:\d\d"
    assert len(script.summaries) == 3, script.summaries  # one call a compaction, none once the breaker opened
    assert re.search(rf"\n\[stats\] compactions: 3, tokens saved: [\d,]+; summarizer failures: 3, the last at "
                     rf"{clock} \(SummaryFailure: the summary looks like an error message", stats), stats
    assert re.search(rf"\nWARNING: summaries are degraded: the summarizer failed 3 times in a row \(at {clock}, "
                     rf"{clock}, {clock}\); the next 5 compactions use the extractive summary\n", stats), stats
    quit_cleanly(t)


def test_compact_with_too_little_history_says_so(server, terminal):
    script = Script(server, [chat_response("ANSWER-0")])
    t = terminal(script)
    t.ask("question 0")
    assert "[compact] nothing to compact yet" in t.ask("/compact")
    assert not script.summaries
    quit_cleanly(t)


def test_strategy_switches_for_the_rest_of_the_session(server, terminal, workspace):
    script = Script(server, answers(5))
    t = terminal(script, "--keep-recent", "2")
    long_enough(t)
    import tiny_agent
    assert "[compact] 9 →" in t.ask("/compact")
    before = re.search(r"\[stats\] compactions: (\d+),", t.ask("/context"))[1]
    choices = t.ask("/strategy fastest")  # a design document's preset is a strategy name too
    assert (f"[strategy] unknown strategy 'fastest'; the current one is sawtooth; choose one of "
            f"{', '.join(tiny_agent.STRATEGIES)}\r\n") in choices, choices
    assert set(tiny_agent.STRATEGIES) >= {"sawtooth", "layered", "hybrid", "zones", "none", *compact.PRESETS}
    assert "[strategy] none from now on" in t.ask("/strategy none")
    assert f"[stats] compactions: {before}," in t.ask("/context") and int(before) >= 1  # the statistics go on
    assert "[compact] --strategy none never compacts" in t.ask("/compact")  # even when asked
    assert "[strategy] layered from now on" in t.ask("/strategy layered")
    assert "agent> ANSWER-4" in t.ask("one more")
    saved = json.loads(latest(records(workspace)).read_text())
    assert saved["strategy"] == "layered" and saved["state"] is not None  # the ladder's state is saved
    assert not (workspace / ".tiny_agent").exists()
    quit_cleanly(t)


# --- 3. Resume -------------------------------------------------------------------------------


def test_the_session_is_saved_privately_without_the_key(server, terminal, workspace):
    t = terminal(Script(server, [chat_response("FIRST-ANSWER")]))
    t.ask("my question")
    quit_cleanly(t)
    folder = records(workspace)
    saved = latest(folder)
    assert list(workspace.iterdir()) == []  # nothing of the agent's own is written into the workspace
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [m["content"] for m in json.loads(saved.read_text())["messages"][1:]] == ["my question", "FIRST-ANSWER"]
    for path in folder.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path


def test_resume_continues_the_same_history(server, terminal):
    script = Script(server, [chat_response("FIRST-ANSWER"), chat_response("SECOND-ANSWER"),
                             chat_response("THIRD-ANSWER")])
    t = terminal(script)
    t.ask("first question")
    t.ask("second question")
    quit_cleanly(t)
    again = terminal(script, "--resume")
    assert "agent> THIRD-ANSWER" in again.ask("third question")
    sent = messages_of(script.turns[2])
    assert [m["content"] for m in sent[1:]] == ["first question", "FIRST-ANSWER", "second question",
                                                "SECOND-ANSWER", "third question"]
    assert_valid(sent)
    quit_cleanly(again)


def test_a_compaction_by_hand_is_kept_by_resume(server, terminal):
    script = Script(server, answers(4) + [chat_response("AFTER-RESUME")])
    t = terminal(script, "--keep-recent", "2")
    long_enough(t)
    assert "[compact] 9 → 5 messages" in t.ask("/compact")  # system, summary, ACK, the last two kept
    quit_cleanly(t)
    again = terminal(script, "--resume", "--keep-recent", "2")
    assert "agent> AFTER-RESUME" in again.ask("go on")
    sent = messages_of(script.turns[-1])
    assert len(sent) == 6 and sent[1]["content"].startswith("[Context summary]"), [m["content"][:40] for m in sent]
    assert sent[2] == {"role": "assistant", "content": compact.ACK["content"]}
    assert [m["content"] for m in sent[3:]] == ["question 3 about the parser", sent[4]["content"], "go on"]
    assert sent[4]["content"].startswith("ANSWER-3 ")
    quit_cleanly(again)


def test_resume_after_an_interrupted_tool_call_sends_a_valid_history(server, terminal, sleeper):
    token = sleeper
    calls = chat_response(tool_calls=[tool_call("call_wait", "bash", command=f"sleep {token}")])
    script = Script(server, [calls, chat_response("AFTER-RESUME")])
    t = terminal(script, "--yes")
    t.at_prompt()
    t.send("start something long")
    wait_until(lambda: sleeping(token), "the bash tool started `sleep`")
    t.interrupt()
    t.expect("[interrupted]")
    quit_cleanly(t)
    again = terminal(script, "--resume")
    assert "agent> AFTER-RESUME" in again.ask("go on")
    assert_valid(messages_of(script.turns[1]))
    quit_cleanly(again)


def run_agent(args: list[str], env: dict, cwd: Path, timeout: float = DEADLINE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(AGENT), *args], env=env, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def assert_one_line_error(result: subprocess.CompletedProcess, *expected: str) -> str:
    """Exit code 1, no traceback, and one line on stderr: `error: ...` holding each expected text."""
    assert result.returncode == 1, (result.stdout[-2000:], result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
DAMAGED = {
    "not JSON": b"{this is not json",
    "cut short": json.dumps({"version": 1, "messages": MESSAGES}).encode()[:-7],
    "not UTF-8": b'{"version": 1, "messages": [{"role": "user", "content": "caf\xe9"}]}',
    "a list": b"[1, 2, 3]",
    "no messages": b'{"version": 1}',
    "messages not a list": b'{"version": 1, "messages": "hello"}',
    "a message without a role": json.dumps({"messages": [{"content": "x"}]}).encode(),
}
# Damage that parses as JSON and passes the role check, but breaks what is built from it.
DAMAGED_INSIDE = {
    "state is not a CompactState": {"strategy": "hybrid", "messages": MESSAGES, "state": {"bogus": 1}},
    "state is a string": {"strategy": "hybrid", "messages": MESSAGES, "state": "x"},
    "archive is a number": {"strategy": "hybrid", "messages": MESSAGES, "state": None, "archive": 5},
    "a message with an unknown role": {"strategy": "hybrid", "messages": [{"role": "wizard", "content": "x"}]},
    "tool_calls as a string": {"messages": [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": "bash"}]},
    "a call without an id": {"messages": [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "bash", "arguments": "{}"}}]}]},
    "a tool result without its call's id": {"messages": [*MESSAGES, {"role": "tool", "content": "x"}]},
    "an unknown strategy": {"strategy": "bogus", "messages": MESSAGES},
    "a strategy given as a number": {"strategy": 5, "messages": MESSAGES},
    "a state with wrong types": {"strategy": "sawtooth", "messages": MESSAGES, "state": {"compactions": "3"}},
    "pinned constraints that are not text": {"strategy": "hybrid", "messages": MESSAGES, "state": {"pinned": [1]}},
}
WHAT = {"not JSON": "Expecting", "a list": "not an object", "no messages": "must be a list",
        "tool_calls as a string": "message 2", "a call without an id": "message 2", "an unknown strategy": "'bogus'",
        "a strategy given as a number": "unknown strategy 5", "a state with wrong types": "'compactions' is a str",
        "pinned constraints that are not text": "'pinned'"}
@pytest.mark.parametrize("damage", [
    *[pytest.param(DAMAGED[name], id=name) for name in DAMAGED],
    *[pytest.param(json.dumps({"version": 1, **DAMAGED_INSIDE[name]}).encode(), id=name) for name in DAMAGED_INSIDE]])
def test_a_damaged_session_file_gets_one_line_and_is_left_untouched(server, tmp_path, workspace, damage, request):
    script = Script(server)
    folder = records(workspace)
    (folder / "session.json").write_bytes(damage)
    result = run_agent(["--workspace", str(workspace), "--strategy", "hybrid", "--resume", "go on"],
                       agent_env(script.base_url), tmp_path / "cwd")
    line = assert_one_line_error(result, "session.json is damaged and was left untouched", "move it away")
    assert WHAT.get(request.node.callspec.id, "") in line  # names what is wrong
    assert (folder / "session.json").read_bytes() == damage
    assert script.turns == []


def test_a_session_file_that_is_a_folder_gets_one_line_and_is_left_there(server, tmp_path, workspace):
    script = Script(server)
    (records(workspace) / "session.json").mkdir()
    result = run_agent(["--workspace", str(workspace), "--resume", "go on"], agent_env(script.base_url), tmp_path / "cwd")
    assert_one_line_error(result, "session.json is not a regular file", "move it away")
    assert (records(workspace) / "session.json").is_dir() and script.turns == []


def test_a_saved_session_without_messages_resumes_with_the_system_prompt(server, tmp_path, workspace):
    script = Script(server, [chat_response("ANSWER")])
    (records(workspace) / "session.json").write_text(json.dumps({"version": 2, "strategy": "sawtooth", "messages": []}))
    result = run_agent(["--workspace", str(workspace), "--resume", "go on"], agent_env(script.base_url), tmp_path / "cwd")
    assert result.returncode == 0 and "ANSWER" in result.stdout, result.stderr
    assert [m["role"] for m in messages_of(script.turns[0])] == ["system", "user"]


def test_resume_without_a_saved_session_says_so(server, tmp_path, workspace):
    result = run_agent(["--workspace", str(workspace), "--resume", "go on"], agent_env(Script(server).base_url),
                       tmp_path / "cwd")
    assert_one_line_error(result, "no saved session", "run without --resume first")


# --- No start, error, interruption or second agent loses a session ----------------


def contents(folder: Path) -> dict[str, list]:
    """Each saved session file of a records folder: the contents of its messages after the system prompt."""
    import tiny_agent
    return {p.name: [m.get("content") for m in json.loads(p.read_text())["messages"][1:]]
            for p in tiny_agent.saved_sessions(folder)}


def test_a_new_session_keeps_the_saved_one_the_start_says_so_and_resume_takes_the_latest(server, tmp_path, workspace):
    script = Script(server, [chat_response("FIRST-ANSWER"), chat_response("SECOND-ANSWER"),
                             chat_response("THIRD-ANSWER")])
    args, env = ["--workspace", str(workspace)], agent_env(script.base_url)
    first = run_agent(args + ["first task"], env, tmp_path / "cwd")
    assert first.returncode == 0 and "[session]" not in first.stdout
    kept = contents(records(workspace))
    second = run_agent(args + ["second task"], env, tmp_path / "cwd")
    assert second.returncode == 0
    [line] = [line for line in second.stdout.splitlines() if line.startswith("[session]")]
    assert re.fullmatch(r"\[session\] this workspace has a session saved at [\d-]+ [\d:]+: it is kept, and "
                        r"--resume continues it", line)
    saved = contents(records(workspace))
    assert len(saved) == 2 and all(saved[name] == kept[name] for name in kept)  # the first is as it was
    third = run_agent(args + ["--resume", "third task"], env, tmp_path / "cwd")
    assert third.returncode == 0 and "[resume] 3 messages" in third.stdout
    assert [m["content"] for m in messages_of(script.turns[2])[1:]] == ["second task", "SECOND-ANSWER", "third task"]


def test_the_end_of_a_task_says_where_the_session_was_saved_and_the_command_it_names_continues_it(
        server, tmp_path, workspace):
    script = Script(server, [chat_response("FIRST-ANSWER"), chat_response("SECOND-ANSWER")])
    env = agent_env(script.base_url)
    first = run_agent(["--workspace", str(workspace), "first task"], env, tmp_path / "cwd")
    [line] = [line for line in first.stdout.splitlines() if line.startswith("[saved]")]
    [name] = contents(records(workspace))
    said = re.fullmatch(r"\[saved\] the session is in (.+); continue it: python (.+)", line)
    assert said and Path(said[1]).name == name and Path(said[1]).is_file(), line
    program, *again = shlex.split(said[2])
    assert program == str(AGENT)  # the file as it was run
    again = run_agent([*again, "second task"], env, tmp_path / "cwd")
    assert again.returncode == 0 and "[resume] 3 messages" in again.stdout, again.stdout + again.stderr
    assert [m["content"] for m in messages_of(script.turns[1])[1:]] == ["first task", "FIRST-ANSWER", "second task"]


def test_a_one_task_run_that_ends_on_a_server_error_is_saved(server, tmp_path, workspace):
    failing = (500, {"error": {"message": "the server fell over"}})
    script = Script(server, [chat_response(tool_calls=[tool_call("call_1", "bash", command="echo worked")]),
                             *[failing] * 3])  # sent three times: the client's two retries
    result = run_agent(["--workspace", str(workspace), "the task"], agent_env(script.base_url), tmp_path / "cwd")
    assert_one_line_error(result, "HTTP 500")
    [saved] = contents(records(workspace)).values()
    assert saved[0] == "the task" and "exit code 0\nworked\n" in saved


def test_a_one_task_run_interrupted_by_ctrl_c_is_saved(server, tmp_path, workspace):
    script = Script(server, [chat_response(tool_calls=[tool_call("call_1", "bash", command="echo worked")]), HOLD])
    agent = subprocess.Popen([sys.executable, str(AGENT), "--workspace", str(workspace), "the task"],
                             env=agent_env(script.base_url), cwd=tmp_path / "cwd", stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        script.wait_for_turns(2)  # the agent waits for its second answer, with one tool result in hand
        agent.send_signal(signal.SIGINT)
        out, err = agent.communicate(timeout=DEADLINE)
    finally:
        agent.kill()
        script.release.set()
    assert agent.returncode == 1 and err.strip() == "error: interrupted", err
    [saved] = contents(records(workspace)).values()
    assert saved[0] == "the task" and "exit code 0\nworked\n" in saved


def test_a_second_agent_is_told_the_session_is_in_use_and_its_work_is_saved_apart(server, terminal, tmp_path,
                                                                                  workspace):
    script = Script(server, [chat_response("REPL-ANSWER"), chat_response("TASK-ANSWER")])
    t = terminal(script)
    assert "agent> REPL-ANSWER" in t.ask("in the repl")
    second = run_agent(["--workspace", str(workspace), "a task"], agent_env(script.base_url), tmp_path / "cwd")
    assert second.returncode == 0 and "[answer] TASK-ANSWER" in second.stdout
    assert "[session] another agent is using this workspace's session: this run is saved in a file of its own" \
        in second.stdout.splitlines()
    quit_cleanly(t)
    assert sorted(contents(records(workspace)).values()) == [["a task", "TASK-ANSWER"],
                                                             ["in the repl", "REPL-ANSWER"]]


# --- A finding that needs no terminal: the calls are answered only inside run_calls' try -------


def test_a_ctrl_c_while_the_tool_line_is_printed_still_answers_every_call(tmp_path):
    import tiny_agent
    from tiny_agent import Config, AgentWorkspace, new_session

    def model(messages, tools):
        if messages[-1]["role"] == "user" and messages[-1]["content"] == "first":
            return {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "true"}'}}]}
        return {"role": "assistant", "content": "fine"}

    def log(line):
        if line.startswith("[tool]"):
            raise KeyboardInterrupt  # the user's Ctrl-C arrives while this line is written
    session = new_session(Config())
    with pytest.raises(KeyboardInterrupt):
        tiny_agent.run_agent(session, "first", model, AgentWorkspace(tmp_path, sandbox=False), log)
    # what the REPL's turn() leaves before the next question
    assert_valid(session.messages + [{"role": "user", "content": "second"}])


# --- Questions from a pipe, as from a terminal -------------------------------------


def piped(args: list[str], text: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(AGENT), *args], env=env, cwd=cwd, input=text, capture_output=True,
                          text=True, timeout=DEADLINE)


def test_questions_piped_into_the_repl_are_answered_one_a_line(server, tmp_path, workspace):
    script = Script(server, [chat_response("FIRST-ANSWER"), chat_response("SECOND-ANSWER")])
    result = piped(["--workspace", str(workspace)], "hello\nsecond\n", agent_env(script.base_url), tmp_path / "cwd")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "agent> FIRST-ANSWER" in result.stdout and "agent> SECOND-ANSWER" in result.stdout
    assert [m["content"] for m in messages_of(script.turns[1])[1:]] == ["hello", "FIRST-ANSWER", "second"]


def test_questions_piped_into_the_demo_repl_are_answered_one_a_line(tmp_path, workspace):
    result = piped(["--demo", "--repl"], "hello\nsecond\n", agent_env(), tmp_path / "cwd")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.count("agent> [demo model] Surveyed") == 2


def test_a_line_that_starts_with_a_slash_but_is_no_command_is_a_question(server, terminal):
    script = Script(server, [chat_response("ABOUT-THE-PATH")])
    t = terminal(script)
    shown = t.ask("/usr/bin/python3 says: No module named foo")
    assert "[repl] /usr/bin/python3 is not a command: sent as a question" in shown and "agent> ABOUT-THE-PATH" in shown
    assert messages_of(script.turns[0])[-1]["content"] == "/usr/bin/python3 says: No module named foo"
    assert "unknown command /hlep" in t.ask("/hlep") and len(script.turns) == 1  # a one-word typo is asked about
    t.send("/tmp/build.log:3: error: x\nwhat does this mean?")  # a paste: its first line is no command
    t.expect("[repl] a paste of 2 lines that starts with /tmp/build.log:3:: sent whole, as a question")
    t.expect("agent> ")
    assert messages_of(script.turns[1])[-1]["content"] == "/tmp/build.log:3: error: x\nwhat does this mean?"
    quit_cleanly(t)


@pytest.mark.parametrize("paste", ["/compact\nplease keep the logs", "/help me\nsecond line", "/exit\nand more"])
def test_a_paste_of_several_lines_is_a_question_even_when_it_starts_with_a_command(server, terminal, paste):
    """Only one line can be a command; a paste is sent whole, and says so."""
    script = Script(server, [chat_response("ABOUT-THE-PASTE")])
    t = terminal(script)
    t.send(paste)
    t.expect(f"[repl] a paste of 2 lines that starts with {paste.split()[0]}: sent whole, as a question")
    t.expect("agent> ABOUT-THE-PASTE")
    assert messages_of(script.turns[0])[-1]["content"] == paste
    quit_cleanly(t)


def test_an_empty_answer_says_so_and_escape_sequences_do_not_reach_the_terminal(server, terminal):
    script = Script(server, [chat_response(""), chat_response("\x1b[2J\x1b]0;pwned\x07RED\x1b[0m")])
    t = terminal(script)
    assert "agent> (the model's answer was empty)" in t.ask("first")
    shown = t.ask("second")
    assert "agent> RED\r\n" in shown and "\x1b" not in shown.split("agent> ")[-1]  # no "[2J]0;pwned[0m" left
    quit_cleanly(t)


def test_a_one_request_task_prints_no_chart_and_the_iteration_limit_exits_non_zero(server, tmp_path, workspace):
    script = Script(server, [chat_response("DONE"), chat_response(tool_calls=[tool_call("c1", "bash", command="true")])])
    done = run_agent(["--workspace", str(workspace), "a task"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 0 and "[answer] DONE" in done.stdout and "┤" not in done.stdout, done.stdout
    limited = run_agent(["--workspace", str(workspace), "--max-iterations", "1", "a task"], agent_env(script.base_url),
                        tmp_path / "cwd")
    assert limited.returncode == 3 and "--max-iterations raises the limit" in limited.stdout
