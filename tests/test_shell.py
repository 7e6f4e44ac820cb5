"""The bash tool and the command line, through the real entry point: what bash may
reach inside bubblewrap and without it, that it never reads the terminal, that nothing it starts
outlives it; every user error ends in one line and exit code 1; the closing chart is in tokens.
The scripted servers listen on 127.0.0.1 only; the sandboxed shell has no network at all."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import threading
from pathlib import Path

import pytest
from conftest import chat_response
from test_repl import (Held, Script, agent_env, assert_one_line_error, run_agent, server, # noqa: F401
                       sleeper, sleeping, terminal, tool_call, wait_until, workspace)

import tiny_agent
from tiny_agent import AgentWorkspace, run_tool

HAS_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def path_without_bwrap(tmp_path_factory) -> str:
    """A PATH with every program of this one except bwrap, so the CLI runs bash unconfined."""
    folder = tmp_path_factory.mktemp("no-bwrap-bin")
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if os.path.isdir(directory):
            for entry in os.scandir(directory):
                target = folder / entry.name
                if entry.name != "bwrap" and not target.exists() and os.access(entry.path, os.X_OK):
                    target.symlink_to(entry.path)
    return str(folder)


@pytest.fixture(params=[pytest.param("bubblewrap", marks=needs_bwrap), "unconfined"])
def mode(request, path_without_bwrap) -> dict:
    """The child's extra environment for each shell mode."""
    return {} if request.param == "bubblewrap" else {"PATH": path_without_bwrap}


START_LINE = {True: "[shell] bash runs inside bubblewrap: the workspace is writable only by commands you allow, no network",
              False: "[shell] bash is NOT confined (install bubblewrap to confine it)"}


def run_command(server, tmp_path, workspace, command: str, env: dict | None = None, *options: str):
    """`python tiny_agent.py "run it"`, the scripted model calling bash with `command` once. Returns
    (the finished process, the tool result the second request carried)."""
    script = Script(server, [chat_response(tool_calls=[tool_call("call_1", "bash", command=command)]),
                             chat_response("DONE")])
    result = run_agent(["--workspace", str(workspace), *options, "run it"], agent_env(script.base_url, **(env or {})),
                       tmp_path / "cwd")
    assert result.returncode == 0 and "[answer] DONE" in result.stdout, (result.stdout[-2000:], result.stderr)
    tool = [m for m in script.turns[1]["messages"] if m["role"] == "tool"]
    return result, tool[-1]["content"]


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a zombie has stopped; it only waits to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# --- 4. The shell ----------------------------------------------------------------------------


def test_the_start_line_says_which_mode_bash_runs_in(server, tmp_path, workspace, mode):
    result, _ = run_command(server, tmp_path, workspace, "true", mode)
    confined = "PATH" not in mode
    assert result.stdout.splitlines()[0].startswith(START_LINE[confined])


def test_bash_gets_no_terminal_input_and_leaves_the_next_line_to_the_repl(server, terminal, mode):
    read = chat_response(tool_calls=[tool_call("call_read", "bash", command="read x; echo got=$x")])
    script = Script(server, [Held(read), chat_response("READ-DONE"), chat_response("NEXT-ANSWER")])
    t = terminal(script, "--yes", **mode)
    t.at_prompt()
    t.send("first question")
    script.wait_for_turns(1)
    t.send("NEXT-LINE")  # typed ahead while the model thinks, as people do
    script.release.set()
    t.expect("agent> READ-DONE")
    t.expect("agent> NEXT-ANSWER")
    result = [m for m in script.turns[1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert result == "exit code 0\ngot=\n"
    assert script.turns[2]["messages"][-1] == {"role": "user", "content": "NEXT-LINE"}
    t.at_prompt()
    t.send("/exit")
    assert t.wait() == 0


def test_a_command_that_starts_a_job_and_exits_returns_its_output_and_the_job_is_stopped(
        server, tmp_path, workspace, mode, sleeper):
    token = sleeper
    _, result = run_command(server, tmp_path, workspace, f"sleep {token} & echo $! > job.pid; echo started", mode,
                            "--yes")
    assert result == "exit code 0\nstarted\n"  # not the timeout's message: it did not wait for the job
    wait_until(lambda: not sleeping(token), "the background job was stopped")
    if "PATH" not in mode:
        return  # in bubblewrap the pid is the sandbox's own
    pid = int((workspace / "job.pid").read_text())  # unconfined: the pid is this machine's
    wait_until(lambda: not alive(pid), f"/proc/{pid} is gone")


def test_a_timed_out_command_is_stopped_with_its_children_through_the_cli(server, tmp_path, workspace, mode,
                                                                          sleeper):
    """BASH_TIMEOUT sets the shell's timeout (30 s by default)."""
    token = sleeper
    _, result = run_command(server, tmp_path, workspace, f"sleep {token} & echo $! > pid; wait",
                            {**mode, "BASH_TIMEOUT": "1"}, "--yes")
    assert result.startswith("error: the command ran longer than 1 s and was stopped")
    wait_until(lambda: not sleeping(token), "the timed-out command's child was stopped")
    if "PATH" in mode:  # unconfined: the pid is this machine's
        pid = int((workspace / "pid").read_text())
        wait_until(lambda: not alive(pid), f"/proc/{pid} is gone")


@pytest.mark.parametrize("sandbox", [pytest.param(True, marks=needs_bwrap), False])
def test_a_timed_out_command_is_stopped_with_its_children(tmp_path, sandbox, sleeper):
    token = sleeper
    ws = AgentWorkspace(tmp_path, approve=lambda question: "y", timeout=1, sandbox=sandbox)
    result = run_tool(ws, "bash", json.dumps({"command": f"sleep {token} & echo $! > pid; wait"}))
    assert result.startswith("error: the command ran longer than 1 s and was stopped")
    wait_until(lambda: not sleeping(token), "the timed-out command's child was stopped")
    if not sandbox:
        pid = int((tmp_path / "pid").read_text())
        wait_until(lambda: not alive(pid), f"/proc/{pid} is gone")


@pytest.mark.parametrize("ends", ["at the timeout", "by itself"])
@pytest.mark.parametrize("sandbox", [pytest.param(True, marks=needs_bwrap), False], ids=["bubblewrap", "unconfined"])
def test_a_process_that_left_the_group_with_setsid_is_stopped_too(tmp_path, sandbox, sleeper, ends):
    """`(setsid sleep … &)` leaves the command's process group and session; it is found by the
    marker in its environment and stopped all the same."""
    token = sleeper
    command = f"(setsid sleep {token} &); (setsid sh -c 'sleep {token}' &)" + ("; wait; sleep 30" if ends == "at the timeout" else "")
    ws = AgentWorkspace(tmp_path, approve=lambda question: "y", timeout=1, sandbox=sandbox)
    result = run_tool(ws, "bash", json.dumps({"command": command}))
    assert result.startswith("error: the command ran longer than 1 s" if ends == "at the timeout" else "exit code 0")
    assert sleeping(token) == []  # stopped before the tool returned: no wait


@pytest.fixture
def listener():
    """A socket on 127.0.0.1 that accepts and never answers; `accepted` counts its connections."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.1)
    accepted: list[socket.socket] = []
    done = threading.Event()

    def serve():
        while not done.is_set():
            try:
                accepted.append(sock.accept()[0])
            except (socket.timeout, OSError):
                continue
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1], accepted
    done.set()
    thread.join()
    for conn in accepted:
        conn.close()
    sock.close()


@needs_bwrap
def test_bubblewrap_confines_bash_to_the_workspace_without_network(server, tmp_path, workspace, listener):
    port, accepted = listener
    token = secrets.token_hex(8)
    (tmp_path / "outside.txt").write_text(f"SECRET-{token}")
    command = (f"cat ../outside.txt; cat {tmp_path}/outside.txt; echo escaped > ../escape.txt; "
               f"touch /etc/escape-{token}; echo escaped > {tmp_path}/escape2.txt; "
               f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo net=yes || echo net=no; "
               "echo inside > inside.txt && cat inside.txt")
    _, result = run_command(server, tmp_path, workspace, command, {}, "--yes")
    assert f"SECRET-{token}" not in result
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "escape2.txt").exists()
    assert not Path(f"/etc/escape-{token}").exists()
    assert "net=no" in result and accepted == []
    assert result.rstrip().endswith("inside") and (workspace / "inside.txt").read_text() == "inside\n"


# --- 5. One-line errors through the real command line -------------------------------------------


def cli(tmp_path, args: list[str], env: dict, dotenv: bytes | None = None):
    cwd = tmp_path / "cli-cwd"
    cwd.mkdir(exist_ok=True)
    if dotenv is not None:
        (cwd / ".env").write_bytes(dotenv)
        args = ["--env-file", str(cwd / ".env"), *args]
    return run_agent(args, env, cwd)


@pytest.mark.parametrize("url", ["http://[::1/v1", "http://127.0.0.1:8080:9/v1"])
def test_a_malformed_base_url(tmp_path, url):
    result = cli(tmp_path, ["a task"], agent_env(OPENAI_BASE_URL=url, OPENAI_API_KEY="sk-test"))
    assert_one_line_error(result, f"OPENAI_BASE_URL={url!r} is not a valid http:// or https:// URL")


@pytest.mark.parametrize("answer", ["{}", "html"])
def test_a_server_that_answers_200_with_no_chat_completion(tmp_path, server, answer):
    handler = server.expect_request("/v1/chat/completions", method="POST")
    if answer == "{}":
        handler.respond_with_json({})
    else:
        handler.respond_with_data("<html><body><h1>Welcome to nginx!</h1></body></html>", content_type="text/html")
    result = cli(tmp_path, ["a task"], agent_env(server.url_for("/v1")))
    assert_one_line_error(result, "did not answer like an OpenAI-compatible server")


def test_a_dotenv_that_is_not_utf8(tmp_path):
    result = cli(tmp_path, ["a task"], agent_env(), dotenv=b"MODEL=caf\xe9\n")
    assert_one_line_error(result, ".env is not UTF-8 text")


def test_a_context_window_that_is_not_an_ascii_number(tmp_path, listener):
    port, _ = listener
    result = cli(tmp_path, ["a task"], agent_env(f"http://127.0.0.1:{port}/v1", CONTEXT_WINDOW="²"))
    assert_one_line_error(result, "CONTEXT_WINDOW='²' must be a whole number")


def test_a_server_that_never_answers(tmp_path, workspace, listener):
    port, accepted = listener
    result = cli(tmp_path, ["--workspace", str(workspace), "a task"],
                 agent_env(f"http://127.0.0.1:{port}/v1", REQUEST_TIMEOUT="1"))
    assert_one_line_error(result, f"the server at http://127.0.0.1:{port}/v1 did not answer in 1 s")
    assert accepted  # it connected, and waited


def test_a_workspace_that_does_not_exist(tmp_path, listener):
    port, accepted = listener
    result = cli(tmp_path, ["--workspace", "/does/not/exist", "a task"], agent_env(f"http://127.0.0.1:{port}/v1"))
    assert_one_line_error(result, "--workspace /does/not/exist: no such folder")
    assert accepted == []


def test_a_workspace_that_does_not_exist_without_a_model(tmp_path):
    assert_one_line_error(cli(tmp_path, ["--workspace", "/does/not/exist"], agent_env()), "no such folder")


@pytest.mark.parametrize("args, expected", [
    (["--max-iterations", "0"], "--max-iterations 0: allow at least 1"),
    (["--max-iterations", "-3"], "--max-iterations -3: allow at least 1"),
    (["--keep-recent", "0"], "--keep-recent 0: keep at least 1 message"),
    (["--threshold", "-5", "--keep-recent", "100"], "--threshold -5 must be larger than --keep-recent 100"),
    # an option the chosen strategy does not use, with the strategies that do use it
    (["--keep-recent", "10", "--strategy", "layered"], "--keep-recent: --strategy layered does not use it "
                                                        "(the strategies that do: sawtooth, hybrid"),
    (["--threshold", "20", "--strategy", "hybrid"], "--threshold: --strategy hybrid does not use it"),
    (["--precise-tools", "bash", "--strategy", "none"], "--precise-tools: --strategy none does not use it"),
    (["--precise-tools", "bash,db_query"], "no tool named 'db_query'; the tools are bash, read_file"),
])
def test_an_option_that_cannot_work(tmp_path, args, expected):
    assert_one_line_error(cli(tmp_path, args, agent_env()), expected)


def test_an_option_the_resumed_sessions_strategy_does_not_use_is_an_error():
    """Resumed without --strategy, a session continues with the strategy it was saved with; a
    --keep-recent that strategy does not use is checked against it, not against the default."""
    args = tiny_agent.parse_args(["--keep-recent", "3", "--resume"])
    with pytest.raises(tiny_agent.ConfigError, match="--strategy layered does not use it"):
        tiny_agent.resumed_config(tiny_agent.Config(), {"strategy": "layered"}, args)
    assert tiny_agent.resumed_config(tiny_agent.Config(), {"strategy": "hybrid"}, args).strategy == "hybrid"
    # --threshold must pass --keep-recent only where the strategy has a threshold: hybrid keeps 30 alone
    assert tiny_agent.resumed_config(tiny_agent.Config(keep_recent=30), {"strategy": "hybrid"},
                                     tiny_agent.parse_args(["--keep-recent", "30", "--resume"])).keep_recent == 30
    with pytest.raises(tiny_agent.ConfigError, match="--threshold 30 must be larger than --keep-recent 30"):
        tiny_agent.resumed_config(tiny_agent.Config(keep_recent=30), {"strategy": "sawtooth"},
                                  tiny_agent.parse_args(["--keep-recent", "30", "--resume"]))


def test_strategy_none_on_the_demo_says_none_does_not_compact(tmp_path):
    result = cli(tmp_path, ["--strategy", "none"], agent_env())
    assert_one_line_error(result, "the strategy none does not compact: choose another")


def test_a_base_url_without_v1_against_a_server_that_404s(tmp_path, server):
    server.expect_request("/chat/completions", method="POST").respond_with_data(
        "<html><title>404 Not Found</title></html>", status=404, content_type="text/html")
    result = cli(tmp_path, ["a task"], agent_env(server.url_for("")))
    assert_one_line_error(result, "HTTP 404", "OPENAI_BASE_URL usually ends in /v1")


def test_help_shows_the_real_defaults(tmp_path):
    result = cli(tmp_path, ["--help"], agent_env())
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert f"(default: {tiny_agent.Config.max_iterations}; the demo: {tiny_agent.DEMO_ITERATIONS})" in text
    assert "(default: 50; the demo: 100)" in text
    assert "compact above this many messages (default: 30)" in text
    assert "messages kept whole (default: 6)" in text


# --- 6. The closing chart is in tokens for every strategy ----------------------------------------


@pytest.mark.parametrize("strategy", [s for s in tiny_agent.STRATEGIES if s != "none"])
def test_the_demos_closing_chart_is_drawn_in_tokens_per_request(tmp_path, strategy):
    result = cli(tmp_path, ["--strategy", strategy], agent_env())
    assert result.returncode == 0, result.stderr
    done = re.search(r"\[done\] (\d+) requests, \d+ compactions, at most (\d+) messages and ~([\d,]+) tokens sent "
                     rf"at once \({strategy}\)\.", result.stdout)
    assert done, result.stdout[-2000:]
    requests, most_messages, most_tokens = int(done[1]), int(done[2]), int(done[3].replace(",", ""))
    chart = result.stdout[:done.start()].rsplit("[answer]", 1)[1]
    assert f"tokens sent at each of {requests} requests; messages: " in chart
    labels = [int(n.replace(",", "")) for n in re.findall(r"^\s*([\d,]+) ┤", chart, re.M)]
    assert labels[0] == most_tokens and labels[0] != most_messages  # the top of the chart is tokens
    assert labels[1] == round(most_tokens / 2)
    bars = [line.split("│" if "│" in line else "┤", 1)[1] for line in chart.splitlines() if "│" in line or "┤" in line]
    assert all(len(bar) == requests for bar in bars)  # one column a request
