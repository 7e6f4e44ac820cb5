"""The model path, end to end: the real `openai` client talking HTTP to a scripted
OpenAI-compatible server on 127.0.0.1 (conftest.fake_openai), for the summary and for the loop."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import pytest

import compact
import tiny_agent
from compact import (ACK, CompactState, estimate_tokens, replaced_line, find_problems, is_summary, summarize_extractive,
                     summarize_with_model)
from conftest import DEFAULT_INSTALL, call, chat_response, sawtooth
from tiny_agent import Config, AgentWorkspace, new_session

SYSTEM = {"role": "system", "content": tiny_agent.SYSTEM_PROMPT}
MODEL_SUMMARY = "## Goal\n- write the notes\n## Progress\n- MODEL-SUMMARY: several notes are written"
# The window it names is the configured one (Config's 128,000), so a refusal changes no setting here
OVERFLOW = {"error": {"message": "This model's maximum context length is 128000 tokens. However, your "
                                 "messages resulted in 130000 tokens.", "type": "invalid_request_error",
                      "param": "messages", "code": "context_length_exceeded"}}


def work(steps: int) -> list[dict]:
    """System, a task, then `steps` read_file calls with their (longish) results."""
    messages = [SYSTEM, {"role": "user", "content": "Read the notes and tell me what they say."}]
    for i in range(steps):
        messages += [{"role": "assistant", "content": None, "tool_calls": [call(f"c{i}", "read_file", path=f"notes/{i}.txt")]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": f"note {i}: " + "lorem ipsum dolor " * 30}]
    return messages


HELD: list[socket.socket] = []  # bound and never listening, for the rest of the run


def closed_port() -> int:
    """A loopback port that refuses every connection. Its socket stays bound, so no server another
    test starts (pytest-xdist runs several at once) can be given the same port and answer instead."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    HELD.append(s)
    return s.getsockname()[1]


def summaries(body: dict) -> tuple[int, dict]:
    return 200, chat_response(MODEL_SUMMARY)


# ---- the summary request -------------------------------------------------------------------


@pytest.mark.parametrize("env, model", [(None, "gpt-4o-mini"), ("cheap-summarizer", "cheap-summarizer")])
def test_the_summary_request_has_no_tools_a_low_temperature_and_the_summary_model(
        fake_openai, monkeypatch, env, model):
    server = fake_openai(summaries)
    if env:
        monkeypatch.setenv("SUMMARY_MODEL", env)
    out = sawtooth(work(20))  # summarize=None: a model is configured, so the model summarizes
    [body] = server.requests
    assert "tools" not in body and body["temperature"] == 0.1 and body["model"] == model
    assert "MODEL-SUMMARY" in out[1]["content"]


def summary_prompt(fake_openai, messages: list[dict]) -> str:
    """Summarize through the fake server and return the one user message the summarizer got."""
    server = fake_openai(summaries)
    summarize_with_model(messages)
    [body] = server.requests
    system, user = body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    return user["content"]


def test_the_summarizer_reads_a_tagged_transcript_not_chat_roles(fake_openai):
    text = summary_prompt(fake_openai, work(2)[1:])
    assert "[user] Read the notes and tell me what they say." in text
    assert "[assistant, turn 1 → read_file(notes/0.txt)]" in text  # turns are numbered now
    assert "[assistant, turn 2 → read_file(notes/1.txt)]" in text
    assert "[tool read_file] note 0: lorem ipsum" in text
    assert '"role"' not in text and "tool_call_id" not in text


def test_a_long_tool_output_reaches_the_summarizer_as_head_and_tail(fake_openai):
    output = "\n".join(f"log line {i:04d}" for i in range(500))
    messages = [{"role": "user", "content": "Run the build."},
                {"role": "assistant", "content": None, "tool_calls": [call("b", "bash", command="make")]},
                {"role": "tool", "tool_call_id": "b", "content": output}]
    text = summary_prompt(fake_openai, messages)
    assert "log line 0000" in text and "log line 0499" in text and "log line 0250" not in text


def test_a_transcript_over_the_summary_window_is_read_in_pieces_oldest_first(fake_openai):
    # changed with the redesign: an over-window transcript is no longer cut to its newest turns; it is
    # read in pieces, each answer folded into the next request, and every piece holds the task
    # (TURN-000) and the latest request (TURN-058)
    server = fake_openai(summaries)
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"TURN-{i:03d} " + "words " * 200}
                for i in range(60)]
    summary = summarize_with_model(messages, window=4_000)
    assert summary == MODEL_SUMMARY
    prompts = [body["messages"][1]["content"] for body in server.requests]
    assert len(prompts) > 1 and all(body["max_tokens"] == 1_000 for body in server.requests)  # window // 4
    assert all("TURN-000" in p and "TURN-058" in p for p in prompts)
    assert "<previous_summary>" not in prompts[0]
    assert all(f"<previous_summary>\n{MODEL_SUMMARY}\n</previous_summary>" in p for p in prompts[1:])
    firsts = [min(int(t) for t in re.findall(r"TURN-(\d+)", p) if t not in ("000", "058")) for p in prompts]
    assert firsts == sorted(firsts)  # oldest first
    seen = {t for p in prompts for t in re.findall(r"TURN-\d+", p)}
    assert seen == {f"TURN-{i:03d}" for i in range(60)}  # no turn is left out


# ---- summarize=None: the model when configured, the offline summarizer otherwise ---------------


def server_error(fake_openai, monkeypatch):
    fake_openai(lambda body: (500, {"error": {"message": "internal error", "type": "server_error"}}))


def unreachable(fake_openai, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


@pytest.mark.parametrize("failure", [server_error, unreachable])
def test_when_the_summary_model_fails_the_offline_summarizer_takes_over(fake_openai, monkeypatch, capsys, failure):
    messages = work(20)  # 42 messages: the tail is the last 6, from index 36; the task is the latest request
    failure(fake_openai, monkeypatch)
    header = replaced_line(messages[2:36], CompactState(), "the summary model failed")  # the summary says so
    out = sawtooth(messages)
    assert out[0] == SYSTEM and out[2:] == [ACK, messages[1], *messages[36:]]  # the request stays whole
    assert header + "\n" + summarize_extractive(messages[2:36]) + "\n" in out[1]["content"]
    assert "[compact] the summarizer failed" in capsys.readouterr().err


# ---- the loop against the server ---------------------------------------------------------------


def reply_with(calls: list[tuple[str, str, dict | str]]) -> dict:
    """A response carrying these tool calls; arguments given as a str are sent raw (bad JSON)."""
    body = chat_response("Working on it.", [(cid, name, a if isinstance(a, dict) else {}) for cid, name, a in calls])
    for sent, (_, _, a) in zip(body["choices"][0]["message"]["tool_calls"], calls):
        if isinstance(a, str):
            sent["function"]["arguments"] = a
    return body


def script(iterations: int) -> list[dict]:
    """What the fake model answers, one entry per loop request: tool calls, then a final answer."""
    replies = []
    for i in range(iterations):
        if i == 5:
            calls = [(f"w{i}", "write_file", {"path": "notes/pair-a.txt", "content": "A"}),
                     (f"r{i}", "read_file", {"path": "notes/0.txt"})]
        elif i == 9:
            calls = [(f"bad{i}", "read_file", '{"path": "notes/1.txt"')]
        elif i == 13:
            calls = [(f"unknown{i}", "deploy_to_prod", {"target": "everything"})]
        elif i % 3 == 0:
            calls = [(f"w{i}", "write_file", {"path": f"notes/{i}.txt", "content": f"note {i}\n" + "text " * 80})]
        elif i % 3 == 1:
            calls = [(f"r{i}", "read_file", {"path": f"notes/{i - 1}.txt"})]
        else:
            calls = [(f"b{i}", "bash", {"command": "ls notes | wc -l"})]
        replies.append(reply_with(calls))
    return replies + [chat_response("All notes are written.")]


class ScriptedServer:
    """The loop's requests (they carry tools) get the next scripted reply; `refuse` lists which of
    them are answered with a context-length error first; summary requests get MODEL_SUMMARY."""

    def __init__(self, fake_openai, replies: list[dict], refuse: tuple[int, ...] = ()):
        self.replies, self.refuse = list(replies), set(refuse)
        self.loop: list[dict] = []
        self.summaries: list[dict] = []
        self.server = fake_openai(self.answer)

    def answer(self, body: dict) -> tuple[int, dict]:
        if "tools" not in body:
            self.summaries.append(body)
            return summaries(body)
        self.loop.append(body)
        if len(self.loop) - 1 in self.refuse:
            return 400, OVERFLOW
        return 200, self.replies.pop(0)


def run_loop(fake_openai, tmp_path, replies, config=Config(), refuse=()):
    fake = ScriptedServer(fake_openai, replies, refuse)
    session, log = new_session(config), []
    model = tiny_agent.server_model(config, log=log.append)  # what the agent sends
    answer = tiny_agent.run_agent(session, "Write the notes.", model, AgentWorkspace(tmp_path), log=log.append)
    return fake, session, answer, log


def tool_result(fake: ScriptedServer, call_id: str) -> str:
    """The result the loop sent back for one call, found in the requests that followed it."""
    return next(m["content"] for body in fake.loop for m in body["messages"] if m.get("tool_call_id") == call_id)


@pytest.fixture
def long_run(fake_openai, tmp_path):
    return run_loop(fake_openai, tmp_path, script(25), Config(threshold=16, keep_recent=6))


def test_the_loop_rises_and_falls_like_a_sawtooth(long_run):
    fake, session, answer, _ = long_run
    counts = [n for n, _ in session.compaction.sent]  # messages of each request
    assert answer == "All notes are written." and len(counts) == 26
    drops = sum(after < before for before, after in zip(counts, counts[1:]))
    assert session.compaction.compactions >= 3 and drops == session.compaction.compactions
    assert max(counts) <= 16
    assert len(fake.summaries) == session.compaction.compactions


def test_every_request_of_the_loop_is_valid_and_starts_with_the_system_prompt(long_run):
    fake, _, _, _ = long_run
    assert len(fake.loop) == 26
    for body in fake.loop:
        assert body["messages"][0] == SYSTEM
        assert find_problems(body["messages"]) == []
    assert any(is_summary(m) for m in fake.loop[-1]["messages"])


def test_each_summary_after_the_first_updates_the_previous_one(long_run):
    prompts = [body["messages"][1]["content"] for body in long_run[0].summaries]
    assert "<previous_summary>" not in prompts[0]
    assert all("<previous_summary>" in p and "MODEL-SUMMARY" in p for p in prompts[1:])


def test_the_loop_really_runs_the_calls_including_a_parallel_pair(long_run, tmp_path):
    fake = long_run[0]
    written = {f"{i}.txt" for i in (0, 3, 6, 12, 15, 18, 21, 24)}  # 9 was the call with bad JSON
    assert {p.name for p in (tmp_path / "notes").iterdir()} == written | {"pair-a.txt"}
    assert (tmp_path / "notes" / "24.txt").read_text().startswith("note 24\n")
    assert tool_result(fake, "w5") == "wrote 1 chars to notes/pair-a.txt"
    assert tool_result(fake, "r5").startswith("note 0\ntext")


def test_bad_json_and_an_unknown_tool_become_error_results_and_the_loop_goes_on(long_run):
    fake, _, answer, _ = long_run
    assert tool_result(fake, "bad9").startswith("error: arguments are not valid JSON")
    assert tool_result(fake, "unknown13").startswith("error: unknown tool 'deploy_to_prod'")
    assert answer == "All notes are written."


@pytest.mark.parametrize("arguments, focus", [
    ('{"focus": "the notes in notes/3.txt"}', "Focus the summary on: the notes in notes/3.txt"),
    ('{"focus": "the notes', None),  # malformed arguments just mean no focus
    ('["the notes"]', None),
])
def test_the_compact_tool_compacts_at_once_and_the_loop_goes_on(fake_openai, tmp_path, arguments, focus):
    compact_call = reply_with([("k", "compact", arguments)])
    fake, session, answer, _ = run_loop(fake_openai, tmp_path, script(8)[:-1] + [compact_call, chat_response("Done.")])
    assert answer == "Done." and session.compaction.compactions == 1
    kept = "the notes in notes/3.txt" if focus else "the task"  # the tool says what the compaction did
    assert tool_result(fake, "k") == f"compacted 21 → 10 messages, keeping what matters for: {kept}"  # the
    # system prompt, the summary and its acknowledgement, the request, the last 6
    prompt = fake.summaries[0]["messages"][1]["content"]
    assert focus in prompt if focus else "Focus the summary on: " in prompt  # when none is asked: the latest request
    last = fake.loop[-1]["messages"]
    assert any(is_summary(m) for m in last) and find_problems(last) == []


def test_a_context_length_refusal_compacts_and_retries_once(fake_openai, tmp_path):
    fake, session, answer, log = run_loop(fake_openai, tmp_path, script(10), refuse=(8,))
    assert answer == "All notes are written."
    refused, retried = fake.loop[8], fake.loop[9]
    assert len(retried["messages"]) < len(refused["messages"]) and session.compaction.compactions == 1
    assert retried["messages"][0] == SYSTEM and find_problems(retried["messages"]) == []
    assert any("refused the request as too long" in line for line in log)


def test_a_second_refusal_in_a_row_compacts_harder_and_never_resends_a_refused_request(fake_openai, tmp_path):
    # changed with the redesign: a second refusal is no longer raised; served() escalates (levels 1, 2, 3)
    fake, session, answer, log = run_loop(fake_openai, tmp_path, script(10), refuse=(8, 9))
    assert answer == "All notes are written." and session.compaction.compactions == 2
    sent = [body["messages"] for body in fake.loop]
    assert estimate_tokens(sent[10]) < estimate_tokens(sent[9]) < estimate_tokens(sent[8])
    assert sent[9] != sent[8] and sent[10] not in (sent[8], sent[9])
    assert sum("refused the request as too long" in line for line in log) == 2


def test_a_request_refused_at_every_level_raises_context_overflow(fake_openai, tmp_path):
    fake = ScriptedServer(fake_openai, script(10), refuse=tuple(range(8, 40)))
    model = tiny_agent.server_model(Config(), log=[].append)  # what the agent sends
    with pytest.raises(compact.ContextOverflowError, match="after compacting it as far as it goes"):
        tiny_agent.run_agent(new_session(Config()), "Write the notes.", model, AgentWorkspace(tmp_path), log=[].append)
    refused = [json.dumps(body["messages"]) for body in fake.loop[8:]]
    assert 1 < len(refused) <= 3  # it compacted harder after each refusal (now, then as far as it goes)...
    assert len(set(refused)) == len(refused)  # ...and never sent the same request twice


# ---- the command line: a problem is one line, not a traceback ------------------------------------


def closed_server(tmp_path, monkeypatch, fake_openai):
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")


def missing_model(tmp_path, monkeypatch, fake_openai):
    fake_openai(lambda body: (404, {"error": {"message": "The model `gpt-4o-mini` does not exist",
                                              "type": "invalid_request_error", "code": "model_not_found"}}))


def malformed_env(tmp_path, monkeypatch, fake_openai):
    (tmp_path / ".env").write_text("OPENAI_API_KEY sk-missing-its-equals-sign\n")
    monkeypatch.setenv("TINY_AGENT_ENV_FILE", str(tmp_path / ".env"))


def bad_window(tmp_path, monkeypatch, fake_openai):
    monkeypatch.setenv("CONTEXT_WINDOW", "abc")


def bad_summary_window(tmp_path, monkeypatch, fake_openai):
    monkeypatch.setenv("SUMMARY_CONTEXT_WINDOW", "xyz")


def ftp_url(tmp_path, monkeypatch, fake_openai):
    monkeypatch.setenv("OPENAI_BASE_URL", "ftp://x")


@pytest.mark.parametrize("problem, expected", [
    (closed_server, "nothing answers at http://127.0.0.1:"),
    (missing_model, "no model 'gpt-4o-mini'"),
    (malformed_env, ".env:1: cannot read"),
    (bad_window, "CONTEXT_WINDOW='abc'"),
    (bad_summary_window, "SUMMARY_CONTEXT_WINDOW='xyz' must be a whole number, at least 1000"),
    (ftp_url, "OPENAI_BASE_URL='ftp://x' is not a valid http:// or https:// URL"),  # reworded with the redesign
])
def test_main_reports_a_problem_in_one_line(tmp_path, monkeypatch, fake_openai, capsys, problem, expected):
    problem(tmp_path, monkeypatch, fake_openai)
    code = tiny_agent.main(["Write hello.txt.", "--workspace", str(tmp_path)])
    out, err = capsys.readouterr()
    # new with the redesign: before a task runs, one status line says whether bash is sandboxed
    lines = [line for line in (out + err).strip().splitlines() if not line.startswith("[shell] ")]
    assert code != 0
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]
    assert "Traceback" not in out + err


# ---- HTTP trouble told apart, Retry-After honoured, the body's words shown -------------


def raw_server(answer: bytes | None) -> int:
    """A loopback port whose server reads a request, then sends `answer` (None: nothing) and closes."""
    import threading
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve():
        while True:
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.sendall(answer or b"")
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


CUT = b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"choi'  # headers, then half a body
NOT_TLS = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize("url, expected", [
    (lambda: f"http://127.0.0.1:{closed_port()}/v1", "nothing answers at http://127.0.0.1:"),
    (lambda: f"http://127.0.0.1:{raw_server(None)}/v1", "dropped the connection before its reply was whole"),
    (lambda: f"http://127.0.0.1:{raw_server(CUT)}/v1", "dropped the connection"),
    (lambda: f"https://127.0.0.1:{raw_server(NOT_TLS)}/v1", "does not speak https (it may be plain HTTP): try http://"),
], ids=["refused", "dropped", "dropped mid-reply", "https to plain HTTP"])
def test_refused_dropped_and_tls_to_plain_http_are_told_apart(tmp_path, monkeypatch, capsys, url, expected):
    monkeypatch.setenv("OPENAI_BASE_URL", url())
    code = tiny_agent.main(["Write hello.txt.", "--workspace", str(tmp_path)])
    out, err = capsys.readouterr()
    lines = [line for line in (out + err).strip().splitlines() if not line.startswith("[shell] ")]
    assert code == 1 and len(lines) == 1 and expected in lines[0], out + err


def scripted_http(httpserver, *answers):
    """Each request to /v1/chat/completions gets the next (status, body text, headers)."""
    from werkzeug import Response
    left = list(answers)

    def handle(request):
        status, text, headers = left.pop(0)
        return Response(text, status=status, headers=headers, content_type="application/json")
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(handle)
    return httpserver.url_for("/v1")


def ask_once(monkeypatch, base_url, log, waits, sleep=None):
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    monkeypatch.setattr(tiny_agent.time, "sleep", sleep or waits.append)
    config = tiny_agent.load_config()
    return tiny_agent.server_model(config, log=log.append)([{"role": "user", "content": "hi"}], [])


def test_retry_after_is_waited_out_then_the_request_is_sent_again(httpserver, monkeypatch):
    url = scripted_http(httpserver, (429, '{"error": {"message": "slow down"}}', {"Retry-After": "2"}),
                        (200, json.dumps(chat_response("late but here")), {}))
    log, waits = [], []
    assert ask_once(monkeypatch, url, log, waits)["content"] == "late but here"
    assert waits == [2.0] and len(httpserver.log) == 2


def test_a_retry_after_given_as_an_http_date_is_waited_until_that_time(httpserver, monkeypatch):
    """Retry-After may be a date (RFC 9110): the wait is the seconds until it, not 0 and not the backoff."""
    from email.utils import formatdate
    now = 1_800_000_000.0
    monkeypatch.setattr(time, "time", lambda: now)  # the clock stands still: the wait is exact
    url = scripted_http(httpserver, (503, "{}", {"Retry-After": formatdate(now + 30, usegmt=True)}),
                        (200, json.dumps(chat_response("after the date")), {}))
    log, waits = [], []
    assert ask_once(monkeypatch, url, log, waits)["content"] == "after the date"
    assert waits == [30.0]


def test_a_retry_after_over_the_bound_is_not_waited_and_the_line_says_how_long(httpserver, monkeypatch, capsys):
    url = scripted_http(httpserver, (429, '{"error": {"message": "quota"}}', {"Retry-After": "3600"}))
    log, waits = [], []
    with pytest.raises(Exception) as raised:
        ask_once(monkeypatch, url, log, waits)
    assert waits == [] and len(httpserver.log) == 1
    line = tiny_agent.diagnose(raised.value, tiny_agent.load_config())
    assert line == "the server limits requests (HTTP 429, Retry-After: 3600): quota; ask again later"


def test_a_request_is_sent_at_most_retries_times_more(httpserver, monkeypatch):
    """Retry-After: 25 each time: two waits, then the 429 goes up as one line; Retry-After: 0 (no
    wait asked) gets the client's short backoff, and the same cap on tries."""
    slow = (429, '{"error": {"message": "busy"}}', {"Retry-After": "25"})
    url = scripted_http(httpserver, slow, slow, slow, (200, json.dumps(chat_response("never")), {}))
    log, waits = [], []
    with pytest.raises(Exception) as raised:
        ask_once(monkeypatch, url, log, waits)
    assert waits == [25.0, 25.0] and len(httpserver.log) == 1 + tiny_agent.RETRIES
    assert tiny_agent.diagnose(raised.value, tiny_agent.load_config()).endswith("busy; ask again later")
    httpserver.clear()
    now = (429, '{"error": {"message": "busy"}}', {"Retry-After": "0"})
    url = scripted_http(httpserver, *[now] * (tiny_agent.RETRIES + 2))
    waits = []
    with pytest.raises(Exception):
        ask_once(monkeypatch, url, [], waits)
    assert len(httpserver.log) == 1 + tiny_agent.RETRIES and all(0 < w <= 1 for w in waits), waits


def test_a_refusal_no_retry_changes_is_sent_once(httpserver, monkeypatch):
    """llama-server without --jinja answers HTTP 500 to every request with tools: not sent again."""
    refusal = '{"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}'
    url = scripted_http(httpserver, (500, refusal, {}), (200, json.dumps(chat_response("no")), {}))
    with pytest.raises(Exception) as raised:
        ask_once(monkeypatch, url, [], [])
    assert len(httpserver.log) == 1
    assert "restart llama-server with --jinja" in tiny_agent.diagnose(raised.value, tiny_agent.load_config())


def test_ctrl_c_cancels_the_wait_and_nothing_more_is_sent(httpserver, monkeypatch):
    url = scripted_http(httpserver, (503, "{}", {"Retry-After": "5"}), (200, json.dumps(chat_response("no")), {}))

    def interrupted(seconds):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        ask_once(monkeypatch, url, [], [], sleep=interrupted)
    assert len(httpserver.log) == 1


def test_a_5xx_with_an_html_body_shows_its_first_line_of_text(httpserver, monkeypatch):
    page = "<html><head><title>x</title><style>p {}</style></head><body>\n<h1>502 Bad Gateway</h1><hr>nginx</body></html>"
    url = scripted_http(httpserver, *[(502, page, {})] * (1 + tiny_agent.RETRIES))
    with pytest.raises(Exception) as raised:
        ask_once(monkeypatch, url, [], [])
    assert tiny_agent.diagnose(raised.value, tiny_agent.load_config()) == "the server answered HTTP 502: 502 Bad Gateway"


@pytest.mark.parametrize("given", ["/v1/chat/completions", "/v1/chat/completions/", "/v1", ""])
def test_the_endpoint_url_is_corrected_to_its_v1(given):
    assert tiny_agent.api_root("http://host:8080" + given) == "http://host:8080/v1"


@pytest.mark.parametrize("called", [False, True], ids=["no tool call yet", "after a tool call"])
def test_the_dropped_tools_line_only_while_no_tool_call_has_come_back(fake_openai, called):
    few = {**chat_response("a guess"), "usage": {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21}}
    fake_openai(lambda body: (200, few))
    history = [SYSTEM, {"role": "user", "content": "list the files"}]
    if called:
        history += [{"role": "assistant", "content": "", "tool_calls": [call("c1", "bash", command="ls")]},
                    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]
    log = []
    tiny_agent.server_model(tiny_agent.load_config(), log=log.append)(history, tiny_agent.TOOL_SCHEMAS)
    assert [line.startswith("[tools] the server counted 20 prompt tokens") for line in log] == ([] if called else [True])


def test_a_server_that_asks_for_max_completion_tokens_gets_it_from_then_on(fake_openai):
    unsupported = {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                             "'max_completion_tokens' instead.", "type": "invalid_request_error",
                             "param": "max_tokens", "code": "unsupported_parameter"}}
    server = fake_openai(lambda body: (400, unsupported) if "max_tokens" in body else (200, chat_response("ok")))
    model = tiny_agent.server_model(tiny_agent.load_config(), log=lambda line: None)
    for question in ("one", "two"):
        assert model([SYSTEM, {"role": "user", "content": question}], tiny_agent.TOOL_SCHEMAS)["content"] == "ok"
    assert ["max_tokens" in body for body in server.requests] == [True, False, False]
    assert server.requests[1]["max_completion_tokens"] == server.requests[2]["max_completion_tokens"] == 16_000


def test_settings_come_from_the_env_file_named_else_the_agents_own_never_the_workspaces(fake_openai, tmp_path):
    """A hostile workspace (and the folder the agent runs in) ships a .env naming its own server and
    moving the records: neither is read. The .env beside tiny_agent.py is, and --env-file PATH over it."""
    import shutil
    import subprocess
    import sys
    server = fake_openai(lambda body: (200, chat_response(f"model {body['model']}")))
    agent, here, named = tmp_path / "agent", tmp_path / "here", tmp_path / "named.env"
    for folder in (agent, here):
        folder.mkdir()
    for name in ("tiny_agent.py", "compact.py"):
        shutil.copy(Path(tiny_agent.__file__).parent / name, agent)
    (agent / ".env").write_text(f"OPENAI_BASE_URL={server.base_url}\nMODEL=from-the-agent\n")
    named.write_text(f"OPENAI_BASE_URL={server.base_url}\nMODEL=from-the-named-file\n")
    (here / ".env").write_text(f"OPENAI_BASE_URL=http://127.0.0.1:9/v1\nMODEL=from-the-workspace\n"
                               f"XDG_STATE_HOME={here}\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "NO_PROXY": "*",
           "PYTHONPATH": ":".join([DEFAULT_INSTALL, *sys.path])}
    for options, model, read in (([], "from-the-agent", agent / ".env"),
                                 (["--env-file", str(named)], "from-the-named-file", named)):
        done = subprocess.run([sys.executable, str(agent / "tiny_agent.py"), *options, "--yes", "hi"], cwd=here,
                              env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert f"[settings] read {read}" in done.stdout and f"model {model}" in done.stdout, done.stdout + done.stderr
        assert "from-the-workspace" not in done.stdout and not (here / "tiny-agent").exists()
    (agent / ".env").write_text(f"OPENAI_BASE_URL={server.base_url}\nXDG_STATE_HOME={here}\n")
    done = subprocess.run([sys.executable, str(agent / "tiny_agent.py"), "--yes", "hi"], cwd=here, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and not (here / "tiny-agent").exists() and (tmp_path / "state" / "tiny-agent").is_dir()
    missing = subprocess.run([sys.executable, str(agent / "tiny_agent.py"), "--env-file", str(tmp_path / "nope"), "hi"],
                             cwd=here, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert missing.returncode == 1 and missing.stderr.strip().splitlines() == [
        f"error: configuration: --env-file {tmp_path / 'nope'}: no such file"], missing.stderr


def test_on_another_server_the_summary_model_is_model_unless_summary_model_is_set(fake_openai, monkeypatch):
    server = fake_openai(summaries)
    monkeypatch.setenv("MODEL", "local-model")  # OPENAI_BASE_URL names the scripted server, not OpenAI
    sawtooth(work(20))
    assert [body["model"] for body in server.requests] == ["local-model"]


def test_a_summary_model_the_server_does_not_have_says_once_to_set_summary_model(fake_openai, capsys):
    fake_openai(lambda body: (404, {"error": {"message": "The model `gpt-4o-mini` does not exist",
                                              "type": "invalid_request_error", "code": "model_not_found"}}))
    state = CompactState()
    for _ in range(2):
        sawtooth(work(20), state=state, force=True)
    err = capsys.readouterr().err
    assert err.count("set SUMMARY_MODEL") == 1 and state.failures == 2, err
