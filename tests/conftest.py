"""Shared test set-up: no network beyond loopback, no model configured unless a test starts one,
and a real OpenAI-compatible HTTP server on 127.0.0.1 for the model path. Every chat request a
scripted server receives is also rendered through five real chat templates (chat_templates.py):
a request one of them refuses fails the test at teardown, as a strict server would refuse it."""

from __future__ import annotations

import atexit
import fcntl
import ipaddress
import os
import resource
import signal
import json
import shutil
import socket
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

import chat_templates

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "lessons")]
TRAJECTORIES = ROOT.parent / "shared" / "trajectories"

# A folder whose bpe_openai.py raises ImportError: first on a program's PYTHONPATH, it makes the
# agent count tokens as `pip install -e .` (no `tokens` extra) does. The lessons run without it: their
# guides' set-up includes the extra.
DEFAULT_INSTALL = str(ROOT / "tests" / "default_install")
# What a test adds to a program's environment to run the agent with the `tokens` extra instead: for a
# test that compares the agent's token counts with its own, counted exactly in this process.
TOKENS_EXTRA = {"PYTHONPATH": ""}
MODEL_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MODEL", "SUMMARY_MODEL", "CONTEXT_WINDOW")

# Nothing a test runs writes outside its temporary folders: HOME is a folder made for this run (the
# `state` fixture gives each test its own XDG_STATE_HOME), so ~/.local/state, ~/.cache and the like
# of the person running the tests stay untouched (tests/test_whatever_arrives.py checks it).
HOME = tempfile.mkdtemp(prefix="tiny-agent-tests-home-")
os.environ["HOME"] = HOME
atexit.register(shutil.rmtree, HOME, True)


def pytest_configure(config) -> None:
    """Started in the background by a shell without job control, the run would inherit SIGINT
    ignored, and so would every agent it starts, which the tests of Ctrl-C then cannot interrupt:
    Ctrl-C is given back its default first. Under mutmut a mutant may loop for ever, appending
    (groups' `while end >= head` did, to 20 GB before its CPU limit): the process running a
    mutant's tests is held to 4 GB of memory, so such a mutant stops there (MemoryError, or its CPU
    limit) and the machine keeps the rest."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))


def pytest_collection_modifyitems(config, items) -> None:
    """Under mutmut (MUTANT_UNDER_TEST names a mutant), tests/test_mutants.py runs first: its tests
    aim at the mechanisms' mutants and take milliseconds, so a mutant they kill dies before the
    minute the other tests that call its function would take (mutmut stops at the first failure)."""
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        items.sort(key=lambda item: item.path.name != "test_mutants.py")


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch) -> Path:
    """$XDG_STATE_HOME for this test alone, in this process and in every child (agent_env copies
    the environment), so no test reads or writes the real ~/.local/state."""
    folder = tmp_path / "state"
    folder.mkdir(exist_ok=True)
    monkeypatch.setenv("XDG_STATE_HOME", str(folder))
    return folder


_connect = socket.socket.connect
_getaddrinfo = socket.getaddrinfo


def _loopback(host) -> bool:
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _guarded_connect(sock, address):
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
        raise ConnectionRefusedError(f"tests may not reach {address[0]}: only loopback is allowed")
    return _connect(sock, address)


def _guarded_getaddrinfo(host, *args, **kwargs):
    if not _loopback(host):
        raise socket.gaierror(f"tests may not resolve {host}: only loopback is allowed")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _guarded_connect
socket.getaddrinfo = _guarded_getaddrinfo


# The agent reads its settings from the .env beside tiny_agent.py, where a user keeps theirs: every agent
# the tests start, in this process or as a program (each copies this environment), reads no file at
# all instead, so the user's .env stays where it is and no test reads it (test_settings checks it).
os.environ["TINY_AGENT_ENV_FILE"] = os.devnull


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` starts two workers a core: most tests wait on a program they started (a terminal, a
    server, a timeout), and the other worker of the pair uses the core meanwhile. Measured on two
    cores: 2 workers 165 s, 4 workers 141 s, 6 workers 169 s."""
    return 2 * len(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """Every test starts with no model configured and in an empty folder, so no .env is read. An
    agent it starts as a program runs as the default install does (DEFAULT_INSTALL)."""
    for name in MODEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", DEFAULT_INSTALL)
    monkeypatch.chdir(tmp_path)


def call(call_id: str, name: str, **args) -> dict:
    """One tool call as a server sends it: the one way the tests write a call."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def result(call_id: str, text: str) -> dict:
    """The result of the call `call_id`."""
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def chat_response(content=None, tool_calls=None, model="test-model") -> dict:
    """A chat.completions response body, as an OpenAI-compatible server sends it."""
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [{"id": cid, "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}
                                 for cid, name, args in tool_calls]
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class FakeOpenAI:
    """A scripted OpenAI-compatible server: `reply(body) -> (status, json[, headers])` answers each request,
    and every request body is kept in `requests` for the test to inspect. Each body is rendered
    through the five chat templates too; what they refuse goes to `template_errors` (template,
    error, roles) and fails the test at teardown, while the scripted reply still goes out, so the
    test's own assertions run first."""

    def __init__(self, httpserver, reply):
        from werkzeug import Response
        self.requests: list[dict] = []
        self.template_errors: list[dict] = []
        self.base_url = httpserver.url_for("/v1")
        SERVERS.append(self)

        def handle(request):
            body = json.loads(request.data)
            self.requests.append(body)
            request.environ[CHECKED] = True
            self.template_errors += chat_templates.rejections(body)
            status, payload, *headers = reply(body)
            if isinstance(payload, dict) and (payload.get("usage") or {}).get("prompt_tokens") == 1:
                payload = {**payload, "usage": {**payload["usage"], "prompt_tokens": counted(body)}}
            return Response(json.dumps(payload), status=status, content_type="application/json",
                            headers=headers[0] if headers else None)

        httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handle)


def counted(body: dict) -> int:
    """The prompt's size as a server reports it in `usage` (chat_response's placeholder 1 is replaced
    by this): our estimate of the messages and the tool schemas."""
    import compact
    return compact.estimate_tokens(body.get("messages") or []) + compact.estimate_tokens(json.dumps(body.get("tools") or []))


SERVERS: list[FakeOpenAI] = []  # every FakeOpenAI of the running test (test_repl's Script makes its own)
STRAY: list[dict] = []  # refusals of chat requests a test's own handler answered (test_thinking, test_refusals)
CHECKED = "chat_templates.checked"  # set on a request FakeOpenAI has rendered, so it is not rendered twice


def refusal_report(errors: list[dict]) -> str:
    """One paragraph per (template, error): how many requests, and the first one's role sequence."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in errors:
        groups.setdefault((e["template"], e["error"]), []).append(e)
    lines = [f"chat templates refused {len(errors)} rendering(s) of requests the agent sent "
             "(a server with that template answers an error):"]
    for (name, error), found in groups.items():
        lines += [f"  {name}: {error} ({len(found)} request{'s' * (len(found) > 1)})", f"    roles: {found[0]['roles']}"]
    return "\n".join(lines)


@pytest.fixture(autouse=True)
def chat_templates_accept_every_request(monkeypatch):
    """Fail the test at teardown when any chat request a scripted server received in it, through
    FakeOpenAI or a test's own handler on a pytest-httpserver server, would be refused by one of
    the five chat templates."""
    SERVERS.clear()
    STRAY.clear()
    dispatch = HTTPServer.dispatch

    def rendering_dispatch(server, request):
        response = dispatch(server, request)
        if request.method == "POST" and request.path.endswith("/chat/completions") and not request.environ.get(CHECKED):
            try:
                body = json.loads(request.get_data())
            except ValueError:
                return response
            STRAY.extend(chat_templates.rejections(body))
        return response

    monkeypatch.setattr(HTTPServer, "dispatch", rendering_dispatch)
    yield
    errors = [e for server in SERVERS for e in server.template_errors] + STRAY
    SERVERS.clear()
    STRAY.clear()
    if errors:
        pytest.fail(refusal_report(errors), pytrace=False)


@pytest.fixture
def fake_openai(httpserver, monkeypatch, chat_templates_accept_every_request):
    """Start a fake server with a reply function, and point the environment at it. Its requests are
    checked against the chat templates at teardown (chat_templates_accept_every_request)."""
    def start(reply) -> FakeOpenAI:
        server = FakeOpenAI(httpserver, reply)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        return server
    return start


def load_trajectories(name: str, every: int = 1) -> list[list[dict]]:
    """Recorded conversations from ../shared/trajectories (every `every`-th one), or a clean skip
    when they are absent."""
    path = TRAJECTORIES / name
    if not path.exists():
        pytest.skip(f"{path} is not here (it is shared data beside the checkout)")
    runs = [json.loads(line)["messages"] for line in path.read_text(encoding="utf-8").splitlines() if line]
    return runs[::every]


# A test that replays the recorded runs takes this parameter: the README's test command replays
# every 10th run (the same promise, a tenth of the time), and CI's slow part replays them all.
SAMPLE = 10
RECORDED = pytest.mark.parametrize("every", [pytest.param(SAMPLE, id="every-10th"),
                                             pytest.param(1, id="all", marks=pytest.mark.slow)])




# Runs a lesson as `python lessons/NN_x.py` would, then prints the CPU seconds it and its children
# used as the last line of stderr: a lesson's speed is compared with lesson 01's in the same run
# (a ratio of CPU time, which other work on the machine barely moves), never with a clock.
TIMED = """import atexit, os, resource, runpy, sys
def cpu():
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    print(f"[cpu] {sum(u.ru_utime + u.ru_stime for u in used):.3f}", file=sys.stderr)
atexit.register(cpu)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def lesson_command(lesson: str, *args: str) -> list[str]:
    """The command that runs lessons/`lesson` with `args` and reports its CPU time (TIMED)."""
    return [sys.executable, "-c", TIMED, f"lessons/{lesson}", *args]


def cpu_seconds(stderr: str) -> float:
    """The CPU time a lesson run by lesson_command reported."""
    return float(stderr.rstrip().rsplit("[cpu] ", 1)[1])


MADE: dict[str, str] = {}  # once_per_run's data as JSON, in a run without workers


def once_per_run(name: str, produce):
    """What produce() returns (JSON data), made once per test run however many pytest-xdist workers
    ask: the first makes it under a lock and writes it where the others read it."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:  # one process (-n 0): made once in it
        if name not in MADE:
            MADE[name] = json.dumps(produce())
        return json.loads(MADE[name])
    folder = Path(tempfile.gettempdir()) / f"tiny-agent-tests-{run}"
    folder.mkdir(exist_ok=True)
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = folder / f"{name}.json"
        if not made.exists():
            made.write_text(json.dumps(produce()), encoding="utf-8")
        return json.loads(made.read_text(encoding="utf-8"))


def offline_env(**extra: str) -> dict:
    """The environment for a lesson run as a subprocess with no model: the model variables are
    present but empty, so a developer's .env (which never overrides) cannot switch a model on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_") and k != "PYTHONPATH"}
    return {**env, **{name: "" for name in MODEL_VARIABLES}, "PYTHONIOENCODING": "utf-8", **extra}


def tallied(label: str, what: str):
    """(report, per_test) fixtures for a file that counts what its tests delivered (failures injected,
    attacks tried): each test gets its own Counter, must deliver at least one, and the file prints
    the totals at its end (use -s). No module-level counter decides whether a test passes."""
    total: Counter = Counter()

    @pytest.fixture(scope="module", autouse=True)
    def report():
        yield
        if total:
            print(f"\n[{label}] {sum(total.values())} {what}: "
                  + ", ".join(f"{kind} {n}" for kind, n in sorted(total.items())))

    @pytest.fixture
    def per_test():
        counts: Counter = Counter()
        yield counts
        total.update(counts)
        assert counts, f"this test delivered no {what.split()[0]}"
    return report, per_test


def sawtooth(messages, summarize=None, *, threshold=None, keep_recent=None, max_tokens=None, tokens=None,
             focus=None, force=False, state=None, archive=None, precise_tools=()):
    """The engine's default policy in one call, as the tests state its rule: compact above
    `threshold` messages, or once the messages pass `max_tokens` (the trigger's share of a window
    with no reply reserved); `tokens` is the request's size as a server counted it."""
    import compact
    compact.check_messages(messages)
    system = sum(compact.message_tokens(m) for m in messages[:compact.system_head(messages)])
    window = int(max_tokens / 0.7) + system + 1 if max_tokens else 10**9
    engine = compact.Compactor(context_window=window, reserved_output=0, summarize=summarize, archive=archive,
                               threshold=compact.THRESHOLD if threshold is None else threshold,
                               keep_recent=compact.KEEP_RECENT if keep_recent is None else keep_recent,
                               precise_tools=precise_tools, state=compact.CompactState() if state is None else state)
    return engine.compact(messages, focus=focus, level=int(force), usage=(messages, tokens) if tokens else None)


def compacting_policies() -> list[str]:
    """Every policy of the engine that compacts: "none" has no steps, it sends the history as it grows."""
    import compact
    return [name for name, policy in compact.POLICIES.items() if policy["layers"]]


def options_for(strategy: str, **values: int) -> list[str]:
    """The compaction options among `values` (threshold=12, keep_recent=4) that `strategy` uses, as
    command-line words (an option the strategy does not use is an error)."""
    import compact
    policy = compact.POLICIES[strategy]
    return [word for name, value in values.items() if name in policy for word in (f"--{name.replace('_', '-')}", str(value))]
