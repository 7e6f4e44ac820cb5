"""The agent against real servers as people run them (conftest.py: which URL each server needs):
llama-cpp-python, llama.cpp's own llama-server with SmolLM2's template (it drops the tool schemas),
llama-server --no-jinja (it answers 500 to any request with tools) and Gemma 3 270M (its template
refuses two user turns in a row). RESPONSES.md records what each server answers.

Like test_live.py, the agent runs as `python tiny_agent.py "<task>"` in a scratch workspace under the
test's tmp folder, never with --yes, stdin closed. Only plumbing is checked: how a run ends, and the
lines the agent prints; never what a 135M model answers."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .conftest import live_server
from .test_live import TASK, agent, finished, workspace  # noqa: F401 (workspace: a fixture)

STRATEGIES = ["sawtooth", "layered", "hybrid", "zones", "none"]
# what only an exception that reached the top would print (a recovered refusal may quote the
# openai error, "Error code: 400 - ...", in its [compact] line)
UNRECOVERED = ("Traceback", "BadRequestError", "InternalServerError", "APIStatusError", "APIConnectionError")
# a 31 KB task: the user's own message alone is larger than a 2,048-token window
NOTES = " ".join(f"Note {n}: the meeting in room {100 + n} moved to the afternoon." for n in range(520))
BIG_TASK = f"{TASK} My notes: {NOTES}"
assert 30_000 < len(BIG_TASK.encode()) < 32_000


def ending(done) -> str:
    """'ok' (finished: exit 0, or 3 at the iteration limit; no error line) or 'error' (one `error:`
    line, the last one on stderr); anything else fails the test that asks, with the output's tail."""
    output = done.stdout + done.stderr
    assert not [word for word in UNRECOVERED if word in output], output[-3_000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    last = ([line for line in done.stderr.splitlines() if line.strip()] or [""])[-1]
    if finished(done) and not errors:  # an answer, or the iteration limit a tiny model reaches
        return "ok"
    assert len(errors) == 1 and last == errors[0], f"exit {done.returncode}\n{output[-3_000:]}"
    return "error"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_ends_cleanly(workspace, smollm2_server, strategy):
    if smollm2_server.calls_tools and strategy != "none":  # saves ~6 min of CI's live budget
        pytest.skip("test_live.py runs this strategy on llama-cpp-python, with stricter checks")
    done = agent(workspace, smollm2_server.url, smollm2_server.model, TASK, "--strategy", strategy,
                 "--max-iterations", "16")
    ending(done)  # where the model calls tools, test_live.py also asserts a [compact] line


def test_llama_server_with_smollm2s_own_template_says_once_that_it_dropped_the_tools(workspace):
    """Its template renders no tools (RESPONSES.md): the agent says so, in exactly one line."""
    server = live_server("llama-server")
    done = agent(workspace, server.url, server.model, TASK, "--max-iterations", "4")
    ending(done)
    output = done.stdout + done.stderr
    said = [line for line in output.splitlines() if "dropped the tool schemas" in line]
    assert len(said) == 1, output[-3_000:]


class CountingProxy:
    """A forwarder on 127.0.0.1 that keeps every chat request body it passes on to `target`: the test
    sees whether the agent sent the same request twice. Status and body go back unchanged."""

    def __init__(self, target: str):
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.endswith("/chat/completions"):
                    bodies.append(data)
                self.relay(urllib.request.Request(target + self.path.removeprefix("/v1"), data=data,
                                                  headers={"Content-Type": "application/json"}))

            def do_GET(self):  # noqa: N802
                self.relay(urllib.request.Request(target + self.path.removeprefix("/v1")))

            def relay(self, request):
                try:
                    with urllib.request.urlopen(request, timeout=120) as answer:
                        status, body = answer.status, answer.read()
                except urllib.error.HTTPError as error:
                    status, body = error.code, error.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_llama_server_without_jinja_ends_at_once_with_one_line_that_names_the_flag(workspace):
    """--no-jinja answers any request with tools HTTP 500 "tools param requires --jinja flag": the
    agent must not retry it (it would get the same 500) but end with one line that says what to do."""
    server = live_server("llama-server-nojinja")
    proxy = CountingProxy(server.url.removesuffix("/v1"))
    try:
        start = time.monotonic()
        done = agent(workspace, proxy.url, server.model, TASK, "--max-iterations", "4")
        took = time.monotonic() - start
    finally:
        proxy.close()
    assert ending(done) == "error", (done.stdout + done.stderr)[-3_000:]
    last = [line for line in done.stderr.splitlines() if line.strip()][-1]
    assert "--jinja" in last, last
    assert len(proxy.bodies) == len(set(proxy.bodies)), f"the same request was sent {len(proxy.bodies)} times"
    assert took < 30, f"{took:.0f}s"


@pytest.mark.parametrize("name", ["llama-cpp-python", "llama-server"])
def test_a_31_kb_task_in_a_2048_token_window_ends_the_same_under_every_strategy(tmp_path, name):
    """The task alone does not fit: the agent cuts the user's own message to fit, says so
    ("[cut] your message ..."), archives the whole of it, and every strategy ends the same way."""
    server = live_server(name)
    endings, outputs = {}, {}
    for strategy in STRATEGIES:
        workspace = tmp_path / strategy
        workspace.mkdir()
        (workspace / "notes_1.txt").write_text("note 1: the meeting moved to room 101.\n")
        # one request: the rule governs what the first request sends; later turns are the model's own
        done = agent(workspace, server.url, server.model, BIG_TASK, "--strategy", strategy,
                     "--max-iterations", "1", CONTEXT_WINDOW="2048")
        output = done.stdout + done.stderr
        endings[strategy] = ending(done)
        outputs[strategy] = output[-1_500:]
        assert any(line.startswith("[cut] your message") for line in output.splitlines()), \
            f"{strategy}:\n{output[-3_000:]}"
        records = tmp_path / "records" / "tiny-agent"  # the agent's records live outside the workspace
        archived = "".join(p.read_text(encoding="utf-8") for p in records.glob(f"{strategy}-*/archive/*.jsonl"))
        assert "Note 519: the meeting in room 619" in archived, strategy  # the whole message is archived
    assert len(set(endings.values())) == 1, (endings, outputs)


def test_gemma_3_runs_to_the_end_without_a_template_error(workspace):
    """Gemma 3's template refuses two user turns in a row and a `tool` turn after the assistant's
    (HTTP 400 "Conversation roles must alternate ...", RESPONSES.md). Three runs that make the agent's
    history awkward: a plain task, a task too long for the window (cut, compacted), and a second task
    on the saved session (--resume) after it."""
    server = live_server("llama-server-gemma")
    runs = [(TASK,), (BIG_TASK,), ("Now say which room note 1 names.", "--resume")]
    for task, *more in runs:
        done = agent(workspace, server.url, server.model, task, *more, "--max-iterations", "4")
        output = done.stdout + done.stderr
        assert "Conversation roles must alternate" not in output, output[-3_000:]
        assert ending(done) == "ok", output[-3_000:]
