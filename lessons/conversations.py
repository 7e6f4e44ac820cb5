"""Synthetic agent conversations for studying context compaction.

Why this exists
---------------
A compaction strategy (truncating, summarising, dropping old tool outputs,
de-duplicating, ...) is judged by what it *keeps*. To measure that we need
conversations that look like real coding-agent transcripts -- long, dominated
by tool output, with parallel tool calls, repeated calls and the odd enormous
log -- in which we know exactly which important details were said, and where.

`generate_conversation(turns, seed)` builds such a transcript in OpenAI chat
format (plain dicts) and returns it with a list of planted `Fact`s: user
constraints, assistant decisions, error messages, file paths and the latest
next step. Each fact's `text` occurs verbatim exactly once in the whole
conversation (message contents plus tool-call arguments), so after compaction
a benchmark can ask "is this still in the context?" with a substring search.

Everything is driven by a single `random.Random(seed)`: the same
`(turns, seed)` always gives the same conversation, with no clock involved.

`load_trajectories(path)` reads recorded transcripts (JSONL, one object with a
"messages" list per line) so the same benchmark can also run on real data.

Try it:  python lessons/conversations.py 100
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path


# --------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Fact:
    """One planted detail that a good compaction should keep.

    kind:  constraint | decision | error | file_arg | file_output | next_step
    probe: how a benchmark asks about it: recall | decision | artifact | continuation
    text:  exact substring, present in exactly one message
    where: human-readable location, e.g. "turn 37 (message 84), tool output, middle"
    """

    kind: str
    probe: str
    text: str
    where: str


@dataclass
class Conversation:
    messages: list[dict]
    facts: list[Fact]


# --------------------------------------------------------------------------
# The fictional world: a small web service called "shopfront"
# --------------------------------------------------------------------------

SYSTEM_PROMPT = """\
You are a careful software engineering agent working in a git checkout at /workspace/shopfront.
shopfront is a small Python web service (carts, orders, sessions) with a pytest suite.

Rules:
- Read the relevant code before you change it. Prefer small, focused edits.
- Run the tests after every change and report failures honestly.
- Never invent file contents; use read_file or grep to look.
- Keep the user informed with short progress notes on long tasks.
- When you are done, give a short summary of what you changed and why.

Tools:
- read_file(path): return the full text of a file in the repository.
- write_file(path, content): create or overwrite a file with the given content.
- edit_file(path, old, new): replace the exact text `old` with `new` in a file.
- grep(pattern, path): search files under `path` for a regular expression.
- bash(command): run a shell command in the repository root; returns stdout and stderr.
- cache_read(key): read a value cached by earlier runs (test results, dependency locks, symbol
  indexes). Returns JSON, or null when the key is missing. Cheaper than recomputing.

Tool outputs can be long. Quote only the lines you need when you explain something."""

# (the user's request, the root cause the final answer reports)
TASKS = [
    ("tests/test_sessions.py::test_expired_session_is_rejected fails on CI but passes on my "
     "laptop. Please find the cause and fix it, then run the whole test suite.",
     "compared a naive datetime with an aware one, so it only failed on CI (TZ=UTC)"),
    ("Adding a coupon to a cart sometimes returns HTTP 500 instead of 400 "
     "(see tests/test_cart.py). Please find the bug, fix it and make the suite green.",
     "let a KeyError from coupon validation escape instead of returning HTTP 400"),
    ("The token refresh endpoint returns stale tokens after the TTL change. "
     "tests/test_tokens.py has a failing test that shows it. Please fix it.",
     "cached refreshed tokens under the old TTL, so clients got stale ones back"),
]

SOURCE_FILES = [
    "src/shopfront/app.py", "src/shopfront/routes.py", "src/shopfront/sessions.py",
    "src/shopfront/models.py", "src/shopfront/db.py", "src/shopfront/config.py",
    "src/shopfront/cart.py", "src/shopfront/auth/tokens.py",
    "src/shopfront/utils/validation.py", "src/shopfront/utils/clock.py",
]
TEST_FILES = [
    "tests/test_sessions.py", "tests/test_routes.py", "tests/test_cart.py",
    "tests/test_tokens.py",
]
TOP_LEVEL_FILES = ["pyproject.toml", "README.md", "Makefile", "deploy.sh", ".env.example"]

VERBS = ["load", "parse", "validate", "refresh", "build", "render", "fetch", "store",
         "expire", "normalize", "apply", "compute", "resolve", "merge", "serialize"]
NOUNS = ["session", "token", "cart", "order", "user", "invoice", "coupon", "price",
         "product", "payment", "receipt", "profile"]
DOC_PHRASES = ["and return a plain dict", "for the current request", "using the configured TTL",
               "without touching the database", "so callers never see naive datetimes",
               "and log anything that was dropped"]
CODE_LINES = ["return store.get(key)", "session = load_session(token)",
              "if now - created > ttl:", "row = conn.execute(query, params).fetchone()",
              "payload = json.loads(raw)", "total += item.quantity * item.price_cents"]
GUARD_LINES = ["    if now.tzinfo is None:\n        now = now.replace(tzinfo=timezone.utc)",
               "    log.debug(\"checking %s\", locals())",
               "    if not items:\n        return 0",
               "    # CI runs with TZ=UTC; never compare naive and aware datetimes."]

# The planted facts. Each seed picks a few; none of these strings is produced
# by the background generators, which is what keeps every fact unique.
CONSTRAINTS = [
    ("Do not modify deploy.sh.", "Ops owns that file and reviews it separately."),
    ("Never push to main.", "Open a branch and I will review the change."),
    ("Answer in Chinese.", "The reviewer on this ticket reads Chinese best."),
    ("Do not add new third-party dependencies.", "Security review takes weeks."),
    ("Keep the public signature of create_app() unchanged.", "Two other services import it."),
]
DECISIONS = [
    "Decision: use sqlite for the session store because the tests run offline.",
    "Decision: compare token expiry in UTC everywhere instead of local time.",
    "Decision: keep the 900-second session TTL and fix the clock comparison instead.",
    "Decision: mock the payment gateway in tests rather than calling the sandbox.",
    "Decision: move the retry logic into one http_client helper instead of every caller.",
]
HEAD_ERRORS = [
    "sqlite3.OperationalError: database is locked (store 'sessions-{n}.db')",
    "PermissionError: [Errno 13] Permission denied: '/var/run/shopfront/worker-{n}.pid'",
    "ModuleNotFoundError: No module named 'shopfront_ext_{n}'",
]
MIDDLE_ERRORS = [
    "ValueError: invalid session token 'tok-{n}'",
    "TimeoutError: payment gateway did not answer within 30s (attempt pay-{n})",
    "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position {n}",
]
TAIL_ERRORS = [
    "KeyError: 'refund_window_days' (profile prof-{n})",
    "RuntimeError: migration m{n}_add_session_index failed halfway",
    "AssertionError: expected 3 cart items, found 2 (cart c-{n})",
]
ARG_ONLY_PATHS = ["src/payments/refund_policy.py", "src/shopfront/jobs/expire_sessions.py",
                  "scripts/seed_demo_data.py", "src/shopfront/auth/token_rotation.py"]
OUTPUT_ONLY_PATHS = ["src/shopfront/legacy/coupon_rules_v2.py", "vendor/tzshim/offsets.py",
                     "src/shopfront/_compat/py38_dates.py"]
NEXT_STEPS = [
    ("Next step: run the migration test in tests/test_migrate.py.",
     "python -m pytest tests/test_migrate.py -q", "tests/test_migrate.py"),
    ("Next step: re-run tests/test_sessions.py with -p no:randomly to rule out test ordering.",
     "python -m pytest tests/test_sessions.py -p no:randomly -q", "tests/test_sessions.py"),
    ("Next step: add a regression test for expired tokens to tests/test_tokens.py and run it.",
     "python -m pytest tests/test_tokens.py -q", "tests/test_tokens.py"),
]

HUGE_MIN, HUGE_MAX = 20_000, 60_000
# Real agent transcripts are roughly 80% tool output. Huge outputs supply a fixed
# part of that; ordinary calls are steered toward this share of the remaining chars.
ORDINARY_TOOL_SHARE = 0.56
MIN_TURNS = 10  # room for every planted fact in its own turn


# --------------------------------------------------------------------------
# Python source that looks real enough (templates + varying names)
# --------------------------------------------------------------------------

MODULE_HEADER = '''"""{title} for the shopfront service."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

from shopfront.http import json_response, router

log = logging.getLogger(__name__)

DEFAULT_TTL = {ttl}
REQUIRED_FIELDS = ("id", "created_at")
'''

TEST_HEADER = '''"""Tests for {title}."""

import pytest

from shopfront.app import create_app


@pytest.fixture
def client():
    return create_app(testing=True).test_client()
'''

FUNCTION_TEMPLATES = [
    '''
def {name}({arg}: dict, *, strict: bool = False) -> dict:
    """{doc}"""
    if not {arg}:
        raise ValueError("{name}: empty {noun}")
    cleaned = {{k: v for k, v in {arg}.items() if v is not None}}
    missing = [key for key in REQUIRED_FIELDS if key not in cleaned]
    if strict and missing:
        raise KeyError(", ".join(missing))
    log.debug("{name} kept %d fields", len(cleaned))
    return cleaned
''',
    '''
def {name}({arg}, now: datetime | None = None) -> bool:
    """{doc}"""
    now = now or datetime.now(timezone.utc)
    created = {arg}.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    return now - created > timedelta(seconds=DEFAULT_TTL)
''',
    '''
def {name}(conn, {arg}_id: int) -> dict | None:
    """{doc}"""
    row = conn.execute(
        "SELECT * FROM {noun}s WHERE id = ?", ({arg}_id,)
    ).fetchone()
    if row is None:
        log.info("{noun} %s not found", {arg}_id)
        return None
    return dict(row)
''',
    '''
def {name}(items: list[dict]) -> int:
    """{doc}"""
    total = 0
    for item in items:
        quantity = int(item.get("quantity", 1))
        total += quantity * int(item["price_cents"])
    return max(total, 0)
''',
    '''
@router.{method}("/{noun}s/<int:{arg}_id>")
def {name}(request, {arg}_id: int):
    """{doc}"""
    {arg} = request.app.store.get("{noun}", {arg}_id)
    if {arg} is None:
        return json_response({{"error": "{noun} not found"}}, status=404)
    return json_response({arg}.to_dict())
''',
    '''
def {name}(fn, attempts: int = {n}):
    """{doc}"""
    last_error = None
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except ConnectionError as exc:
            last_error = exc
            log.warning("attempt %d/%d failed: %s", attempt, attempts, exc)
    raise RuntimeError("{name} gave up") from last_error
''',
]

TEST_TEMPLATE = '''
def test_{name}(client):
    resp = client.{method}("/{noun}s/{n}")
    assert resp.status_code == {status}
    body = resp.get_json()
    assert "{noun}" in body or body.get("error")
'''


def _function_name(rng: random.Random) -> str:
    return f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"


def _python_function(rng: random.Random, template: str | None = None) -> str:
    verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
    template = template or rng.choice(FUNCTION_TEMPLATES)
    return template.format(
        name=f"{verb}_{noun}", arg=noun, noun=noun, n=rng.randint(2, 9),
        method=rng.choice(["get", "post", "delete"]), status=rng.choice([200, 401, 404]),
        doc=f"{verb.capitalize()} the {noun} {rng.choice(DOC_PHRASES)}.",
    )


def _python_module(rng: random.Random, path: str, min_chars: int) -> str:
    """A module for `path`: header plus functions until it is at least `min_chars` long."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".py").removeprefix("test_")
    title = stem.replace("_", " ").title()
    is_test = path.startswith("tests/")
    if is_test:
        parts = [TEST_HEADER.format(title=title)]
    else:
        parts = [MODULE_HEADER.format(title=title, ttl=rng.choice([300, 900, 3600]))]
    size = len(parts[0])
    while size < min_chars:
        function = _python_function(rng, TEST_TEMPLATE if is_test else None)
        parts.append(function)
        size += len(function)
    return "\n".join(parts)


# --------------------------------------------------------------------------
# Tool outputs: pytest logs, tracebacks, server logs, shell output
# --------------------------------------------------------------------------

def _traceback(rng: random.Random, error_line: str) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for path in rng.sample(SOURCE_FILES, 3):
        lines.append(f'  File "/workspace/shopfront/{path}", line {rng.randint(10, 240)}, '
                     f"in {_function_name(rng)}")
        lines.append(f"    {rng.choice(CODE_LINES)}")
    lines.append(error_line)
    return lines


def _pytest_failure(rng: random.Random, test_path: str) -> list[str]:
    name = f"test_{_function_name(rng)}"
    got, expected = rng.choice([(500, 401), (500, 400), (200, 401), (404, 200)])
    source = rng.choice(SOURCE_FILES)
    return [
        "=" * 35 + " FAILURES " + "=" * 35,
        f"{'_' * 20} {name} {'_' * 20}", "",
        "client = <FlaskClient <Flask 'shopfront'>>", "",
        f"    def {name}(client):",
        f'        resp = client.get("/{rng.choice(NOUNS)}s/{rng.randint(1, 99)}")',
        f">       assert resp.status_code == {expected}",
        f"E       assert {got} == {expected}",
        f"E        +  where {got} = <Response {got}>.status_code", "",
        f"{test_path}:{rng.randint(12, 90)}: AssertionError",
        "-" * 29 + " Captured log call " + "-" * 30,
        f"ERROR    shopfront:{source.rsplit('/', 1)[-1]}:{rng.randint(20, 200)} "
        "can't compare offset-naive and offset-aware datetimes",
        "=" * 27 + " short test summary info " + "=" * 27,
        f"FAILED {test_path}::{name} - assert {got} == {expected}",
    ]


def _pytest_log(rng: random.Random, test_path: str, failing: bool) -> str:
    n_tests = rng.randint(4, 16)
    outcomes = ["."] * n_tests
    if failing:
        outcomes[rng.randrange(n_tests)] = "F"
    lines = ["=" * 29 + " test session starts " + "=" * 29,
             "platform linux -- Python 3.11.9, pytest-8.2.1, pluggy-1.5.0",
             "rootdir: /workspace/shopfront", "configfile: pyproject.toml",
             f"collected {n_tests} items", "",
             f"{test_path} {''.join(outcomes)}    [100%]", ""]
    if failing:
        lines += _pytest_failure(rng, test_path)
    passed = outcomes.count(".")
    summary = f"1 failed, {passed} passed" if failing else f"{passed} passed"
    lines.append(f"{'=' * 25} {summary} in {rng.uniform(0.2, 3.0):.2f}s {'=' * 25}")
    return "\n".join(lines)


LOG_TEMPLATES = [
    "INFO  shopfront.http GET /{noun}s/{n} 200 {ms}ms",
    "INFO  shopfront.http POST /{noun}s 201 {ms}ms",
    "DEBUG shopfront.cache miss for {noun}:{n}, loading from db",
    "DEBUG shopfront.db pool: {small} connections in use",
    "INFO  shopfront.worker heartbeat ok (queue depth {small})",
    "WARN  shopfront.db slow query on {noun}s took {ms}ms",
]


def _log_line(rng: random.Random, millis: int) -> str:
    # A fixed fake start time: timestamps must not depend on the real clock.
    seconds, ms = divmod(millis, 1000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    stamp = f"2024-05-14T{9 + hours % 15:02d}:{minute:02d}:{sec:02d}.{ms:03d}Z"
    message = rng.choice(LOG_TEMPLATES).format(
        noun=rng.choice(NOUNS), n=rng.randint(1, 9999), ms=rng.randint(2, 900),
        small=rng.randint(1, 12))
    return f"{stamp} {message}"


def _server_log(rng: random.Random, size: int, planted_error: str | None = None) -> str:
    """A long server log of about `size` chars, optionally with a traceback in the middle."""
    lines, total, millis = [], 0, 0
    while total < size:
        millis += rng.randint(5, 900)
        lines.append(_log_line(rng, millis))
        total += len(lines[-1]) + 1
    if planted_error:
        middle = len(lines) // 2 + rng.randint(-5, 5)
        lines[middle:middle] = _traceback(rng, planted_error)
    return "\n".join(lines)


def _ls_listing(rng: random.Random, directory: str) -> str:
    inside = [p if directory == "." else p.removeprefix(directory + "/")
              for p in SOURCE_FILES + TEST_FILES + TOP_LEVEL_FILES
              if directory == "." or p.startswith(directory + "/")]
    directories = {p.split("/")[0] for p in inside if "/" in p}
    lines = [f"total {rng.randint(20, 200)}"]
    for name in sorted({p.split("/")[0] for p in inside}):
        kind = "drwxr-xr-x" if name in directories else "-rw-r--r--"
        size, minute = rng.randint(90, 9000), rng.randint(0, 59)
        lines.append(f"{kind} 1 dev dev {size:>5} May 14 09:{minute:02d} {name}")
    return "\n".join(lines)


def _git_diff(rng: random.Random) -> str:
    chunks = []
    for path in rng.sample(SOURCE_FILES, rng.randint(1, 2)):
        start = rng.randint(10, 200)
        guard = rng.choice(GUARD_LINES).replace("\n", "\n+")
        chunks.append(
            f"diff --git a/{path} b/{path}\n"
            f"index {rng.getrandbits(28):07x}..{rng.getrandbits(28):07x} 100644\n"
            f"--- a/{path}\n+++ b/{path}\n"
            f"@@ -{start},4 +{start},6 @@ def {_function_name(rng)}(\n"
            f'     """{rng.choice(VERBS).capitalize()} the {rng.choice(NOUNS)}."""\n'
            f"-    {rng.choice(CODE_LINES)}\n+{guard}\n+    {rng.choice(CODE_LINES)}\n"
            f"     return result")
    return "\n".join(chunks)


def _git_log(rng: random.Random) -> str:
    subjects = ["Fix cart total rounding", "Add session TTL setting", "Bump pytest",
                "Refactor token refresh", "Log slow queries", "Add coupon validation",
                "Move clock helpers to utils", "Tidy routes"]
    return "\n".join(f"{rng.getrandbits(28):07x} {rng.choice(subjects)}"
                     for _ in range(rng.randint(5, 10)))


def _grep_hits(rng: random.Random, pattern_word: str, root: str) -> str:
    pool = [p for p in SOURCE_FILES + TEST_FILES if p.startswith(root) or root == "."]
    hits = []
    for _ in range(rng.randint(0, 9)):
        noun = rng.choice(NOUNS)
        code = rng.choice([f"def {pattern_word}_{noun}(",
                           f"    result = {pattern_word}_{noun}({noun}_id)",
                           f"from shopfront.{noun}s import {pattern_word}_{noun}"])
        hits.append(f"{rng.choice(pool)}:{rng.randint(1, 300)}:{code}")
    return "\n".join(sorted(hits)) or "(no matches)"


# --------------------------------------------------------------------------
# Background tool calls (the bulk of every conversation)
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Call:
    """One tool call and its result, before ids are assigned."""

    name: str
    arguments: str  # a JSON string, exactly as the OpenAI API sends it
    output: str


def _call(name: str, output: str, **arguments: str) -> _Call:
    return _Call(name, json.dumps(arguments), output)


@dataclass
class _Run:
    """Mutable state while one conversation is being generated."""

    rng: random.Random
    messages: list[dict] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # path -> content, so re-reads agree
    repeatable: list[_Call] = field(default_factory=list)  # earlier calls safe to repeat
    ordinary_tool_chars: int = 0  # tool outputs below HUGE_MIN
    other_chars: int = 0  # everything that is not a tool output

    def add_chars(self, message: dict) -> None:
        if message["role"] != "tool":
            self.other_chars += _chars(message)
        elif len(message["content"]) < HUGE_MIN:
            self.ordinary_tool_chars += len(message["content"])

    def ordinary_share(self) -> float:
        return self.ordinary_tool_chars / max(1, self.ordinary_tool_chars + self.other_chars)


def _read_file_call(run: _Run) -> _Call:
    path = run.rng.choice(SOURCE_FILES + TEST_FILES)
    if path not in run.files:
        run.files[path] = _python_module(run.rng, path, run.rng.randint(900, 2200))
    return _call("read_file", run.files[path], path=path)


def _grep_call(run: _Run) -> _Call:
    word = run.rng.choice(VERBS + NOUNS)
    root = run.rng.choice(["src/", "tests/", "."])
    return _call("grep", _grep_hits(run.rng, word, root), pattern=rf"\b{word}", path=root)


def _pytest_call(run: _Run) -> _Call:
    test_path = run.rng.choice(TEST_FILES)
    output = _pytest_log(run.rng, test_path, failing=run.rng.random() < 0.6)
    return _call("bash", output, command=f"python -m pytest {test_path} -x -q")


def _shell_call(run: _Run) -> _Call:
    rng = run.rng
    choice = rng.randrange(5)
    if choice == 0:
        directory = rng.choice([".", "src/shopfront", "tests"])
        return _call("bash", _ls_listing(rng, directory), command=f"ls -la {directory}")
    if choice == 1:
        return _call("bash", _git_diff(rng), command="git diff")
    if choice == 2:
        return _call("bash", _git_log(rng), command="git log --oneline -n 10")
    if choice == 3:
        changed = rng.sample(SOURCE_FILES + TEST_FILES, rng.randint(1, 4))
        return _call("bash", "\n".join(f" M {p}" for p in changed), command="git status --short")
    return _call("bash", f"0.{rng.randint(3, 9)}.{rng.randint(0, 20)}",
                 command='python -c "import shopfront; print(shopfront.__version__)"')


def _edit_call(run: _Run) -> _Call:
    """Replace a whole function: agents usually send generous context in `old`."""
    rng = run.rng
    path = rng.choice(SOURCE_FILES)
    old = _python_function(rng).strip("\n")
    lines = old.splitlines()
    lines.insert(min(3, len(lines)), rng.choice(GUARD_LINES))
    output = (f"Error: `old` text not found in {path}" if rng.random() < 0.08
              else f"Edited {path}: 1 replacement")
    return _call("edit_file", output, path=path, old=old, new="\n".join(lines))


def _write_call(run: _Run, path: str | None = None) -> _Call:
    path = path or run.rng.choice(TEST_FILES + SOURCE_FILES)
    content = _python_module(run.rng, path, run.rng.randint(1200, 2600))
    # The output deliberately omits the path (see the "file_arg" fact).
    return _call("write_file", f"Wrote {len(content)} bytes ({content.count(chr(10)) + 1} lines).",
                 path=path, content=content)


def _cache_call(run: _Run) -> _Call:
    rng = run.rng
    key = rng.choice(["pytest:lastfailed", "deps:lock", "symbols:src/shopfront", "ci:last_run"])
    if rng.random() < 0.25:
        return _call("cache_read", "null", key=key)
    value = {"key": key, "hit": True,
             "value": sorted({_function_name(rng) for _ in range(rng.randint(4, 14))})}
    return _call("cache_read", json.dumps(value, indent=2), key=key)


def _background_call(run: _Run, progress: float) -> _Call:
    """A random ordinary call; early turns explore, late turns edit and test."""
    rng = run.rng
    if run.repeatable and rng.random() < 0.08:
        return rng.choice(run.repeatable)  # an exact repeat, to exercise de-duplication
    makers = [_read_file_call, _grep_call, _pytest_call, _shell_call,
              _edit_call, _write_call, _cache_call]
    # If tool output is running ahead of the target share, favour calls where the
    # assistant writes (edits, new files); if behind, favour reading. This keeps
    # even short runs representative instead of leaving it to luck.
    write_bias = 3.0 if run.ordinary_share() > ORDINARY_TOOL_SHARE else 0.33
    weights = [28 - 14 * progress, 14 - 6 * progress, 6 + 14 * progress, 10,
               (14 + 12 * progress) * write_bias, (5 + 4 * progress) * write_bias, 3]
    maker = rng.choices(makers, weights)[0]
    call = maker(run)
    if maker in (_read_file_call, _grep_call, _pytest_call, _shell_call):
        run.repeatable.append(call)
    return call


# --------------------------------------------------------------------------
# Emitting messages
# --------------------------------------------------------------------------

def _call_id(rng: random.Random) -> str:
    return "call_" + format(rng.getrandbits(96), "024x")


def _emit_tool_turn(run: _Run, calls: list[_Call], content: str | None = None) -> None:
    """One assistant message with tool_calls, then one result per call, in the same order."""
    tool_calls = [{"id": _call_id(run.rng), "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    _append(run, {"role": "assistant", "content": content, "tool_calls": tool_calls})
    for tool_call, call in zip(tool_calls, calls):
        _append(run, {"role": "tool", "tool_call_id": tool_call["id"], "content": call.output})


def _append(run: _Run, message: dict) -> None:
    run.messages.append(message)
    run.add_chars(message)


def _say(run: _Run, role: str, text: str) -> None:
    _append(run, {"role": role, "content": text})


def _plant(run: _Run, kind: str, probe: str, text: str, turn: int, place: str,
           offset: int = 0) -> None:
    # Called just before the messages are appended, so len(messages) is the index of
    # the next one; `offset` 1 points at the tool result after a one-call assistant message.
    where = f"turn {turn} (message {len(run.messages) + offset}), {place}"
    run.facts.append(Fact(kind, probe, text, where))


def _preamble(rng: random.Random) -> str | None:
    """Most tool calls come without text; sometimes the model says what it is doing."""
    if rng.random() < 0.6:
        return None
    target = rng.choice([f"how {rng.choice(SOURCE_FILES)} handles {rng.choice(NOUNS)}s",
                         f"the {rng.choice(NOUNS)} fixtures in {rng.choice(TEST_FILES)}",
                         "what the last test run reported", "the recent git history"])
    reason = rng.choice([
        "", f" The failure mentions the {rng.choice(NOUNS)} lookup, so the bug is probably "
            "upstream of the route handler.",
        " The traceback shows a naive datetime reaching the comparison; I want to see where "
        "it is created before changing anything.",
        " If this is only a fixture problem the production code can stay as it is."])
    return f"I'll check {target}.{reason}"


def _progress_note(rng: random.Random, turn: int) -> str:
    noun, path, test = rng.choice(NOUNS), rng.choice(SOURCE_FILES), rng.choice(TEST_FILES)
    return rng.choice([
        f"Progress after {turn} steps: the {noun} check in {path} compares a naive and an "
        "aware datetime, which matches a failure that only shows up on CI.",
        f"Status: {rng.randint(20, 60)} tests pass, {rng.randint(1, 3)} still fail, all in "
        f"{test}. I am now following the {noun} code path.",
        f"Summary so far: the route handlers look fine; the problem is in how {noun}s are "
        f"loaded from the store in {path}.",
    ])


USER_FOLLOW_UPS = [
    "How is it going? Please keep the diff as small as you can.",
    "FYI CI runs with TZ=UTC, locally I use Europe/Berlin. Might be relevant.",
    "Can you also make sure the error returned to the client is readable?",
    "Thanks for the updates. Let me know if you get stuck.",
]


# --------------------------------------------------------------------------
# Planning: which turn carries which planted fact
# --------------------------------------------------------------------------

def _claim(events: dict[int, str], turn: int, kind: str, last: int) -> None:
    """Give `kind` the free turn nearest after `turn` (wrapping), within 1..last."""
    turn = min(max(turn, 1), last)
    while turn in events:
        turn = turn % last + 1
    events[turn] = kind


def _plan_tool_events(turns: int, rng: random.Random) -> dict[int, str]:
    """Turn -> special tool event. The last turn is kept free for the next step."""
    events: dict[int, str] = {}
    for kind, fraction in (("error_head", 0.2), ("file_output", 0.25), ("file_arg", 0.4),
                           ("error_middle", 0.5), ("error_tail", 0.8)):
        _claim(events, round(fraction * turns), kind, turns - 1)
    extra_huge = max(1, round(turns / 25)) - 1  # the middle-error log is huge as well
    for i in range(extra_huge):
        # One per equal slice of the run, so huge outputs are spread out.
        _claim(events, int((i + rng.random()) * turns / extra_huge) + 1, "huge", turns - 1)
    return events


def _huge_sizes(count: int, rng: random.Random) -> list[int]:
    # One size near the middle of each equal slice of 20k..60k: the sizes still vary,
    # but their total is stable, so even a 50-turn run has a predictable share.
    span = HUGE_MAX - HUGE_MIN
    sizes = [HUGE_MIN + int(span * (i + rng.uniform(0.4, 0.6)) / count) for i in range(count)]
    rng.shuffle(sizes)
    return sizes


def _plan_interjections(turns: int, rng: random.Random, constraints: list, decisions: list
                        ) -> dict[int, list[tuple]]:
    """Turn -> messages said before that turn's tool calls (user or assistant text)."""
    plan: dict[int, list[tuple]] = {}

    def add(turn: int, item: tuple) -> None:
        plan.setdefault(min(max(turn, 1), turns - 1), []).append(item)

    add(round(0.3 * turns), ("constraints", constraints[:1]))
    add(round(0.6 * turns), ("constraints", constraints[1:]))
    for i, text in enumerate(decisions):
        position = (i + 0.5 + rng.uniform(-0.2, 0.2)) / len(decisions)
        add(round(position * turns), ("decision", text))
    turn = rng.randint(15, 25)
    while turn < turns - 1:
        add(turn, ("note",))
        if rng.random() < 0.35:
            add(turn, ("follow_up",))
        turn += rng.randint(15, 25)
    return plan


# --------------------------------------------------------------------------
# Planting facts
# --------------------------------------------------------------------------

def _special_tool_turn(run: _Run, turn: int, kind: str, error_texts: dict,
                       huge_sizes: list[int], paths: dict) -> None:
    """Emit a turn whose single tool call carries a planted fact (or a huge output)."""
    rng = run.rng
    if kind == "error_head":
        text = error_texts["head"]
        body = [text, "  hint: run with --verbose for the full traceback",
                *(_log_line(rng, i * 700) for i in range(rng.randint(6, 14)))]
        call = _call("bash", "\n".join(body), command="python -m shopfront.cli migrate --dry-run")
        _plant(run, "error", "recall", text, turn, "tool output, head", offset=1)
    elif kind == "error_middle":
        text = error_texts["middle"]
        call = _call("bash", _server_log(rng, huge_sizes.pop(), text),
                     command="tail -n 3000 logs/server.log")
        _plant(run, "error", "recall", text, turn, "tool output, middle of a huge log", offset=1)
    elif kind == "error_tail":
        text = error_texts["tail"]
        body = [_log_line(rng, i * 450) for i in range(rng.randint(8, 20))]
        call = _call("bash", "\n".join(body + _traceback(rng, text)),
                     command="python -m shopfront.cli reindex --all")
        _plant(run, "error", "recall", text, turn, "tool output, tail", offset=1)
    elif kind == "file_output":
        listing = sorted(rng.sample(SOURCE_FILES, 5) + [paths["output"]])
        call = _call("bash", "\n".join(listing), command="find src vendor -name '*.py' -mtime -30")
        _plant(run, "file_output", "artifact", paths["output"], turn,
               "tool output (find listing)", offset=1)
    elif kind == "file_arg":
        call = _write_call(run, paths["arg"])
        _plant(run, "file_arg", "artifact", paths["arg"], turn, "write_file arguments")
    else:  # "huge": a long log or a big generated file, no fact inside
        size = huge_sizes.pop()
        if rng.random() < 0.5:
            call = _call("bash", _server_log(rng, size), command="cat logs/worker.log")
        else:
            path = "src/shopfront/fixtures/catalog_data.py"
            call = _call("read_file", _python_module(rng, path, size), path=path)
    _emit_tool_turn(run, [call], _preamble(rng))


def _interjection(run: _Run, turn: int, item: tuple) -> None:
    rng = run.rng
    if item[0] == "constraints":
        sentences = " ".join(f"{text} {reason}" for text, reason in item[1])
        for text, _ in item[1]:
            _plant(run, "constraint", "recall", text, turn, "user message")
        _say(run, "user", f"Quick interruption before you continue: {sentences}")
        _say(run, "assistant", "Understood, I will keep that in mind for the rest of the task.")
    elif item[0] == "decision":
        _plant(run, "decision", "decision", item[1], turn, "assistant note")
        _say(run, "assistant", f"{_progress_note(rng, turn)} {item[1]}")
    elif item[0] == "note":
        _say(run, "assistant", _progress_note(rng, turn))
    else:
        _say(run, "user", rng.choice(USER_FOLLOW_UPS))


def _finish(run: _Run, turn: int, next_step: tuple, cause: str, chinese: bool) -> None:
    """Last stated next step, the turn that carries it out, then the final answer."""
    rng = run.rng
    text, command, test_path = next_step
    _plant(run, "next_step", "continuation", text, turn, "assistant note")
    _say(run, "assistant", f"The fix is in and the targeted tests pass. {text}")
    _emit_tool_turn(run, [_call("bash", _pytest_log(rng, test_path, failing=False),
                                command=command)])
    passed, path = rng.randint(40, 120), rng.choice(SOURCE_FILES)
    if chinese:
        answer = (f"已完成。问题出在 {path}，我已修复并补充了回归测试。"
                  f"完整测试套件：{passed} 个通过，0 个失败。")
    else:
        answer = (f"Done. Root cause: {path} {cause}. I fixed it, added a regression test, "
                  f"and the full suite passes ({passed} passed, 0 failed).")
    _say(run, "assistant", answer)


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------

def _choose_facts(rng: random.Random) -> dict:
    """Pick this seed's planted texts; random numbers make error texts distinctive."""
    return {
        "constraints": rng.sample(CONSTRAINTS, rng.randint(2, 3)),
        "decisions": rng.sample(DECISIONS, rng.randint(3, 4)),
        "errors": {"head": rng.choice(HEAD_ERRORS).format(n=rng.randint(1000, 99999)),
                   "middle": rng.choice(MIDDLE_ERRORS).format(n=rng.randint(1000, 99999)),
                   "tail": rng.choice(TAIL_ERRORS).format(n=rng.randint(1000, 99999))},
        "paths": {"arg": rng.choice(ARG_ONLY_PATHS), "output": rng.choice(OUTPUT_ONLY_PATHS)},
        "next_step": rng.choice(NEXT_STEPS),
    }


def generate_conversation(turns: int, seed: int = 0) -> Conversation:
    """A deterministic synthetic agent run with `turns` tool-calling iterations."""
    if turns < MIN_TURNS:
        raise ValueError(f"turns must be at least {MIN_TURNS}, got {turns}")
    rng = random.Random(seed)
    run = _Run(rng)
    chosen = _choose_facts(rng)
    task, cause = rng.choice(TASKS)
    tool_events = _plan_tool_events(turns, rng)
    huge_sizes = _huge_sizes(list(tool_events.values()).count("huge") + 1, rng)
    interjections = _plan_interjections(turns, rng, chosen["constraints"], chosen["decisions"])

    _say(run, "system", SYSTEM_PROMPT)
    _say(run, "user", task)
    for turn in range(1, turns):
        for item in interjections.get(turn, []):
            _interjection(run, turn, item)
        if turn in tool_events:
            _special_tool_turn(run, turn, tool_events[turn], chosen["errors"],
                               huge_sizes, chosen["paths"])
            continue
        n_calls = rng.choices([1, 2, 3], [82, 12, 6])[0]
        calls = [_background_call(run, turn / turns) for _ in range(n_calls)]
        _emit_tool_turn(run, calls, _preamble(rng))
    chinese = any(text == "Answer in Chinese." for text, _ in chosen["constraints"])
    _finish(run, turns, chosen["next_step"], cause, chinese)
    return Conversation(run.messages, run.facts)


# --------------------------------------------------------------------------
# A thinking model's run: reasoning beside every answer
# --------------------------------------------------------------------------

# (what the user asks next, whether the agent needs tools for it)
THINKING_REQUESTS = [
    ("OK. Now add a regression test for that case and run the whole suite again.", True),
    ("Can you also check that the error returned to the client is readable?", True),
    ("Does the same problem exist anywhere else in src/shopfront? Please check.", True),
    ("Before we go on: explain in a few sentences why this only failed on CI.", False),
    ("Which of the fixes you considered is the safest, and why?", False),
    ("Write a short description of the change for the pull request.", False),
    ("Summarise what you found so far in three sentences.", False),
]
THINKING_ANSWERS = [
    "CI runs with TZ=UTC, so {path} compared a naive timestamp with an aware one only there; "
    "locally both were naive and the comparison happened to work.",
    "The safest fix is the one in {path}: it makes every timestamp aware where it is created, so no "
    "caller can compare a naive one again. The other options only moved the comparison.",
    "Fix: {path} now creates aware timestamps. Tests: a regression test for the expired session. "
    "No behaviour change for valid sessions.",
]


def _reasoning(rng: random.Random, chars: int) -> str:
    """A thinking model's scratch work (reasoning_content): restating, guessing, checking, planning."""
    parts, size = [], 0
    while size < chars:
        noun, verb = rng.choice(NOUNS), rng.choice(VERBS)
        path, test = rng.choice(SOURCE_FILES), rng.choice(TEST_FILES)
        part = rng.choice([
            f"The user wants this fixed without a large diff. The {noun} path goes through {path}, so "
            f"let me think about where {noun}s are created before I touch anything.",
            f"Hypothesis: {verb}_{noun} compares a naive datetime with an aware one. If that were true, "
            f"{test} would fail only when TZ=UTC, which matches CI. But I have not seen the code yet.",
            f"Wait, the fixture in {test} may build the {noun} itself. I should check whether the "
            "failure comes from the fixture or from production code before editing either.",
            f"Plan: read {path}, grep for {verb}_{noun}, then run {test} with -x to see the first "
            "failure only. If it passes, widen to the whole suite.",
            f"The last output did not mention {noun}s at all, so that line of thought was wrong. "
            f"Going back to {path}: the {verb} step is the only place that touches timestamps.",
        ])
        parts.append(part)
        size += len(part) + 1
    return " ".join(parts)


def generate_thinking_conversation(turns: int = 120, seed: int = 0, requests: int = 8) -> Conversation:
    """A thinking model's run (DeepSeek, Qwen): every assistant message carries `reasoning_content`,
    most often larger than its answer. The user asks `requests` things in turn: the task and the
    follow-ups that need tools share the `turns` tool-calling turns; the others (explain, compare,
    write a description) are answered at once, without a tool call. Deterministic for its
    arguments; it plants no facts."""
    if requests < 1 or turns < requests:
        raise ValueError(f"need 1 <= requests <= turns, got requests={requests}, turns={turns}")
    rng = random.Random(seed)
    run = _Run(rng)
    task, cause = rng.choice(TASKS)
    follow = rng.sample(THINKING_REQUESTS, min(requests - 1, len(THINKING_REQUESTS)))
    asks = [(task, True), *follow]
    work = sum(tools for _, tools in asks)
    _say(run, "system", SYSTEM_PROMPT)
    turn, done = 0, 0
    for ask, tools in asks:
        _say(run, "user", ask)
        path = rng.choice(SOURCE_FILES)
        if not tools:  # a quiet exchange: one answer, thought through first
            _append(run, {"role": "assistant", "content": rng.choice(THINKING_ANSWERS).format(path=path),
                          "reasoning_content": _reasoning(rng, rng.randint(1_500, 6_000))})
            continue
        done += 1
        for _ in range(turns * done // work - turns * (done - 1) // work):
            turn += 1
            start = len(run.messages)
            calls = [_background_call(run, turn / turns) for _ in range(rng.choices([1, 2], [85, 15])[0])]
            _emit_tool_turn(run, calls, _preamble(rng))
            run.messages[start]["reasoning_content"] = _reasoning(rng, rng.randint(600, 4_000))
        answer = (f"Done: {path} {cause}." if done == 1 else
                  f"Done: I checked {path} and ran {rng.choice(TEST_FILES)}; it passes now.")
        _append(run, {"role": "assistant", "content": answer,
                      "reasoning_content": _reasoning(rng, rng.randint(600, 2_000))})
    return Conversation(run.messages, [])


def load_trajectories(path: str | Path) -> list[list[dict]]:
    """Read a JSONL file of {"messages": [...]} objects and return the message lists."""
    path = Path(path)
    trajectories = []
    with path.open(encoding="utf-8") as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue  # tolerate blank lines, e.g. a trailing newline
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not valid JSON ({error.msg})") from None
            messages = record.get("messages") if isinstance(record, dict) else None
            if not isinstance(messages, list):
                raise ValueError(f'{path}:{line_number}: expected an object with a "messages" list')
            trajectories.append(messages)
    return trajectories


# --------------------------------------------------------------------------
# Command-line overview
# --------------------------------------------------------------------------

def _chars(message: dict) -> int:
    """Characters a message puts in the context: text plus tool-call names and arguments."""
    total = len(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        total += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return total


def _print_overview(conversation: Conversation) -> None:
    messages = conversation.messages
    by_role: dict[str, int] = {}
    for message in messages:
        by_role[message["role"]] = by_role.get(message["role"], 0) + _chars(message)
    total = sum(by_role.values())
    tool_outputs = [m["content"] for m in messages if m["role"] == "tool"]
    calls_per_message = [len(m["tool_calls"]) for m in messages if m.get("tool_calls")]
    print(f"messages: {len(messages)}   total chars: {total:,}")
    for role, chars in sorted(by_role.items(), key=lambda item: -item[1]):
        print(f"  {role:<10} {chars:>10,} chars  ({chars / total:.1%})")
    print(f"tool output share: {by_role.get('tool', 0) / total:.1%}")
    print(f"huge tool outputs (>= {HUGE_MIN:,} chars): "
          f"{sum(len(o) >= HUGE_MIN for o in tool_outputs)}")
    print(f"tool calls: {sum(calls_per_message)}   parallel-call messages: "
          f"{sum(n > 1 for n in calls_per_message)}")
    print("planted facts:")
    for fact in conversation.facts:
        print(f"  [{fact.kind}/{fact.probe}] {fact.where}: {fact.text}")


if __name__ == "__main__":
    turns_arg = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    seed_arg = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    _print_overview(generate_conversation(turns_arg, seed_arg))
