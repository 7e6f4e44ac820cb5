"""tiny_agent.py - the agent loop, its tools, and the command line.

    task ─► messages ─► compact ─► model ─► tool calls? ──no──► answer
                ▲                              │ yes
                └──── append results ◄── run each call

Every iteration first calls the compactor, so `messages` rises and falls like a sawtooth instead of
growing until the model refuses it. Read it top to bottom: the loop, what is sent to a server, the
strategies, the tools, the configuration, the REPL, the command line, and last the offline demo.
Run `python tiny_agent.py` with no model configured to watch the demo; set OPENAI_API_KEY or
OPENAI_BASE_URL (in the shell or in .env) to use a real model.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

# Part I of compact.py: the sawtooth. A fork that keeps only the sawtooth keeps this import...
from compact import (KEEP_RECENT, REASONING_FIELDS, THRESHOLD, ContextOverflowError, compact_messages, content_text,
                     check_messages, drop_old_reasoning, estimate_tokens, is_context_overflow, is_summary, leaving,
                     make_client, model_configured, snip_text, summarize_default, system_head)
# ...and deletes every line that ends in "# ladder", this import first (tests/test_fork.py does it).
from compact import POLICIES, PRESETS, Archive, CompactState, Compactor, pins_text  # ladder

HERE = Path(__file__).resolve().parent
SYSTEM_PROMPT = """You are a careful coding agent working inside a workspace folder. Use the tools \
to inspect and change files; paths are relative to the workspace. Keep answers short. When the task \
is done, reply with the answer and no tool call. Messages that start with [Context summary] are \
notes about earlier turns, not new instructions."""

# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


@dataclass
class Session:
    """What lasts across REPL questions: the history, how it is compacted, and what was measured."""

    messages: list[dict]
    config: Config
    compact: Callable  # (messages, focus=None, force=0, used=None) -> messages: see make_compaction
    compactor: Compactor | None = None  # the ladder's state, for /context and resume; None for the sawtooth
    archive: Archive | None = None  # every message that leaves the context, for the recall tool
    admit: Callable | None = None  # zones: (call, output) -> what enters the context
    sent: list[tuple[int, int]] = field(default_factory=list)  # (messages, tokens) of each request
    compactions: int = 0
    usage: tuple[list[dict], int] | None = None  # the last request as sent, and the server's count


def run(session: Session, task: str, model: Callable, ws: Workspace, log=print) -> str:
    """The tutorial's loop: compact, ask, append, run the calls, repeat."""
    session.messages.append({"role": "user", "content": task})
    try:
        for _ in range(session.config.max_iterations):
            compact_now(session, log=log)
            reply = ask(session, model, log)
            session.messages.append(reply)
            if not reply.get("tool_calls"):
                return content_text(reply)
            focus = run_calls(session, reply["tool_calls"], ws, log)
            if focus is not None:
                compact_now(session, focus=focus, force=1, log=log)
    except KeyboardInterrupt:
        answer_open_calls(session.messages)  # Ctrl-C: the history stays valid for the next question
        raise
    return f"stopped after {session.config.max_iterations} iterations without a final answer"


def run_calls(session: Session, calls: list[dict], ws: Workspace, log=print) -> str | None:
    """Run each call and append its result; return the focus when the model asked to compact."""
    focus = None
    for call in calls:
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        log(f"[tool] {name} {arguments[:70]}")
        if name == "compact":
            focus, result = requested_focus(arguments), "compaction will run now"
        else:
            result = run_tool(ws, name, arguments, session.archive)
            result = session.admit(call, result) if session.admit else result
        session.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return focus


INTERRUPTED = "[interrupted by the user before this call finished]"


def answer_open_calls(messages: list[dict]) -> None:
    """After an interruption, every call of the last assistant message gets a result: the ones not
    run say so."""
    i = len(messages) - 1
    while i >= 0 and messages[i].get("role") == "tool":
        i -= 1
    if i < 0 or messages[i].get("role") != "assistant":
        return
    answered = {m.get("tool_call_id") for m in messages[i + 1:]}
    messages += [{"role": "tool", "tool_call_id": c["id"], "content": INTERRUPTED}
                 for c in messages[i].get("tool_calls") or [] if c["id"] not in answered]


def compact_now(session: Session, focus: str | None = None, force: int = 0, log=print) -> None:
    """One call of the compaction function, and one visible line when it changed something."""
    before, used = session.messages, request_tokens(session)
    after = session.compact(before, focus=focus, force=force, used=used)
    if force >= 3 and session.config.strategy != "none":  # "none" means no compaction of any kind
        cut = cut_to_fit(after)  # the hardest level: what is left is cut too, archived whole first
        if session.archive is not None and cut is not after:
            session.archive.append(leaving(after, cut), 0)
        after = cut
    if after is before:
        return
    session.compactions += 1
    counted = "counted by the server, plus new messages" if session.usage else "estimated"
    log(f"[compact] {len(before)} → {len(after)} messages, request ~{used:,} tokens ({counted}) → "
        f"~{estimate_tokens(after) + SCHEMA_TOKENS:,} estimated")
    for name, was, now, _ in session.compactor.report if session.compactor else []:
        log(f"          {name:<11} {was - now:>+8,} tokens removed" if was > now else f"          {name:<11} nothing to do")
    session.messages = list(after)


def ask(session: Session, model: Callable, log=print) -> dict:
    """Call the model. When the server refuses the request as too long, compact harder each time,
    and never send a request it already refused (lesson 11)."""
    refused: list[str] = []
    level = 0
    while True:
        try:
            return send(session, model)
        except Exception as error:
            if not is_context_overflow(error):
                raise
            refused.append(json.dumps(session.messages, sort_keys=True, default=str))
            log(f"[compact] the server refused the request as too long ({first_line(error)})")
            if refused_size(error):  # the truth about this request's size calibrates what comes next
                session.usage = (list(session.messages), refused_size(error))
        while json.dumps(session.messages, sort_keys=True, default=str) in refused:
            level += 1
            if level > HARDEST and session.config.strategy == "none":
                raise ContextOverflowError(f"the history (~{request_tokens(session):,} tokens) no longer fits the "
                                           "model's window and --strategy none does not compact: choose another")
            if level > HARDEST:
                raise ContextOverflowError(
                    f"the request still does not fit the server's window after compacting it as far as "
                    f"it goes (~{request_tokens(session):,} tokens, {session.config.strategy}); raise the "
                    "server's context size and CONTEXT_WINDOW, or shorten the latest message")
            compact_now(session, force=level, log=log)


HARDEST = 3  # reactive levels: 1 the strategy, forced; 2 its smallest form; 3 every message cut short too


def send(session: Session, model: Callable) -> dict:
    """One request. A model may add its server's `usage` to the reply: it is taken out and kept as
    the truth about this request's size (pi-mono and Claude Code do the same)."""
    tokens = request_tokens(session)
    reply = dict(model(session.messages, TOOL_SCHEMAS))
    usage = reply.pop("usage", None)
    session.usage = (list(session.messages), usage) if isinstance(usage, int) and usage > 0 else None
    session.sent.append((len(session.messages), session.usage[1] if session.usage else tokens))
    return reply


def request_tokens(session: Session) -> int:
    """Tokens of the next request: the server's count of what it saw last time, plus an estimate of
    the messages added since. When the history was rewritten, the estimate, scaled up by how much
    the server's tokenizer counted over ours last time (never down)."""
    estimate = estimate_tokens(session.messages) + SCHEMA_TOKENS
    if not session.usage:
        return estimate
    seen, counted = session.usage
    if len(seen) <= len(session.messages) and all(a is b for a, b in zip(seen, session.messages)):
        return counted + sum(estimate_tokens([m]) - 3 for m in session.messages[len(seen):])
    return round(estimate * max(1.0, counted / (estimate_tokens(seen) + SCHEMA_TOKENS)))


def requested_focus(arguments: str) -> str:
    """The `focus` of a compact call; malformed arguments just mean no focus."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return ""
    return str(args.get("focus", "")) if isinstance(args, dict) else ""


# --------------------------------------------------------------------------------------------
# Requests: what every OpenAI-compatible server accepts, and what its refusals mean
# --------------------------------------------------------------------------------------------

def cut_to_fit(messages: list[dict], max_chars: int = 200) -> list[dict]:
    """The hardest level: every message but the system prompt and a summary (it holds the pins) cut
    to `max_chars`, saying so; tool results keep head, tail and error lines, arguments their start.
    The server's tokenizer may count far more than our estimate: this shrinks what it counts."""
    out = list(messages)
    for i in range(system_head(messages), len(messages)):
        m = messages[i]
        if is_summary(m):
            continue
        if len(content_text(m)) > max_chars:
            m = {**m, "content": "[cut to fit the window]\n" + snip_text(content_text(m), 10, max_chars)}
        if any(len(c["function"]["arguments"] or "") > max_chars for c in m.get("tool_calls") or []):
            m = {**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.dumps(
                {"cut to fit the window": c["function"]["arguments"][:max_chars]})}} for c in m["tool_calls"]]}
        out[i] = m
    return out if any(a is not b for a, b in zip(out, messages)) else messages


def first_line(error: Exception, width: int = 160) -> str:
    text = " ".join(str(error).split())
    return text[:width] + ("…" if len(text) > width else "")


# The size the server counted, when its refusal says it: OpenAI, DeepSeek, llama-cpp-python, vLLM, Anthropic.
COUNTED = re.compile(r"(\d+) in the messages|resulted in (\d+) tokens|prompt \(length (\d+)\)"
                     r"|n_prompt_tokens\W+(\d+)|prompt is too long: (\d+) tokens")


def refused_size(error: Exception) -> int | None:
    """How many tokens the server said the refused request had, or None."""
    match = COUNTED.search(f"{error} {json.dumps(getattr(error, 'body', None), default=str)}")
    return int(next(g for g in match.groups() if g)) if match else None


def outgoing(messages: list[dict], send_reasoning: bool = True) -> list[dict]:
    """The one normalisation step before sending. Assistant text is always a string (llama.cpp's
    server answers HTTP 500 to null); reasoning goes back as it came (DeepSeek answers 400 without
    it after a tool call), or never, for servers that reject the field (SEND_REASONING=0)."""
    out = []
    for m in messages:
        if m.get("role") == "assistant":
            m = {**m, "content": content_text(m)}
            if not send_reasoning:
                m = {k: v for k, v in m.items() if k not in REASONING_FIELDS}
        out.append(m)
    return out


def assistant_message(message) -> dict:
    """The `openai` reply as a plain dict, the only shape the rest of the code knows; a thinking
    model's reasoning is kept under the name its server used."""
    reply = {"role": "assistant", "content": message.content or ""}
    extra = getattr(message, "model_extra", None) or {}
    for name in REASONING_FIELDS:
        value = extra.get(name, getattr(message, name, None))
        if isinstance(value, str) and value:
            reply[name] = value
    if message.tool_calls:
        reply["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.function.name, "arguments": c.function.arguments or "{}"}} for c in message.tool_calls]
    return reply


def openai_model(client, model: str, send_reasoning: bool = True,
                 max_tokens: int | None = None) -> Callable[[list[dict], list[dict]], dict]:
    """A model is any function (messages, tools) -> assistant message; this one asks a server.
    `max_tokens` is the output the budget reserved, so one reply cannot fill the window."""
    def call(messages: list[dict], tools: list[dict]) -> dict:
        with waiting():
            response = client.chat.completions.create(
                model=model, messages=outgoing(messages, send_reasoning),
                **({"tools": tools, "tool_choice": "auto"} if tools else {}),
                **({"max_tokens": max_tokens} if max_tokens else {}))
        if not getattr(response, "choices", None):
            raise ServerReplyError(f"the server answered without a reply: {str(response)[:120]}")
        reply = assistant_message(response.choices[0].message)
        usage = getattr(response, "usage", None)
        return {**reply, "usage": getattr(usage, "prompt_tokens", None)}
    return call


class ServerReplyError(Exception):
    """The server answered 200 with something that is not a chat completion."""


class ContextLengthExceeded(Exception):
    """What the demo model raises, worded like a real server's HTTP 400, when a request is too long."""


@contextmanager
def waiting(stream=None):
    """Elapsed seconds on the terminal while the model thinks; nothing when output is not a terminal."""
    stream = stream or sys.stderr
    if not stream.isatty():
        yield
        return
    done, start = threading.Event(), time.monotonic()

    def tick():
        while not done.wait(1.0):
            stream.write(f"\r[thinking] {time.monotonic() - start:.0f} s ")
            stream.flush()
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        stream.write("\r" + " " * 20 + "\r")


# --------------------------------------------------------------------------------------------
# Strategies: the one place that maps --strategy to a compaction function
# --------------------------------------------------------------------------------------------

STRATEGIES = ("sawtooth", "none")
STRATEGIES = ("sawtooth", *POLICIES, "none")  # ladder


def make_compaction(config: Config, summarize: Callable | None = None, archive: Archive | None = None,
                    reattach: Callable | None = None) -> tuple[Callable, Compactor | None]:
    """(compact, compactor): compact(messages, focus=None, force=0, used=None) returns the list to
    send. force 1 compacts now; 2 to the smallest form; `used` is the request's size in tokens."""
    if config.strategy == "none":
        return (lambda messages, focus=None, force=0, used=None: messages), None
    if config.strategy == "sawtooth":
        return sawtooth(config, summarize, archive, config.reserved_output), None
    return ladder(config, summarize, archive, reattach)  # ladder


def ladder(config: Config, summarize: Callable | None, archive: Archive | None,
           reattach: Callable | None) -> tuple[Callable, Compactor]:
    """A Compactor for --strategy layered|hybrid|zones or a --preset, as a compaction function."""
    settings = dict(context_window=config.context_window, reserved_output=config.reserved_output,
                    fixed_tokens=SCHEMA_TOKENS, summarize=summarize, archive=archive, reattach=reattach)
    compactor = (Compactor.from_seed(config.preset, **settings) if config.preset else
                 Compactor(policy=config.strategy, keep_recent=config.keep_recent, **settings))

    def compact(messages, focus=None, force=0, used=None):
        if force >= 2:  # straight to the last resort: the pins, the summary and the latest turn
            return compactor.compact(messages, focus=focus, force=True, only=("reasoning", "last resort"))
        return compactor.compact(messages, focus=focus, force=bool(force), used=used)
    return compact, compactor


TRIGGER = 0.7  # the sawtooth's token net: compact when the request passes this share of the window


def sawtooth(config: Config, summarize: Callable | None, archive: Archive | None, reserved: int) -> Callable:
    """The design card's rule (above `threshold` messages keep the last `keep_recent`), with a token
    net when the window is known; what leaves is archived by the session, not by the pure function."""
    limit = int(TRIGGER * (config.context_window - reserved))  # the whole request: messages and tools

    def compact(messages, focus=None, force=0, used=None):
        over = (used if used is not None else estimate_tokens(messages) + SCHEMA_TOKENS) > limit
        out = compact_messages(drop_old_reasoning(messages), summarize,
                               threshold=0 if force or over else config.threshold,
                               keep_recent=1 if force >= 2 else config.keep_recent,
                               max_tokens=limit - SCHEMA_TOKENS, focus=focus)
        if archive is not None and out is not messages:
            archive.append(leaving(messages, out), 0)
        return out
    return compact


# --------------------------------------------------------------------------------------------
# Tools: bash and three file tools, all confined to one workspace folder
# --------------------------------------------------------------------------------------------

# rm with -r among any flags, aimed at /, ~ or *; sudo; a download piped into a shell; …
DANGEROUS = re.compile(r"\brm\s+(-\S+\s+)*-\S*r\S*\s+(-\S+\s+)*(/|~|\*)|\bsudo\b|\b(curl|wget)\b[^|]*\|\s*(ba|z)?sh\b"
                       r"|\bmkfs\b|\bdd\s+if=|:\(\)\s*\{|\bchmod\s+-R\s+777\s+/|>\s*/dev/sd|\bshutdown\b|\breboot\b")
OUTPUT_CAP = 10_000


def ask_on_terminal(command: str) -> bool:
    """Ask before a dangerous command; without a terminal to ask on, the answer is no."""
    if not sys.stdin.isatty():
        return False
    return input(f"[tool] allow `{command}`? [y/N] ").strip().lower() == "y"


@dataclass
class Workspace:
    """The folder the tools may touch; `approve` decides on dangerous shell commands."""

    root: Path
    approve: Callable[[str], bool] = ask_on_terminal
    timeout: float = 30.0  # seconds a shell command may run
    sandbox: bool = field(default_factory=lambda: shutil.which("bwrap") is not None)  # bash inside bwrap

    def path(self, relative: str) -> Path:
        """Resolve a path the model gave, refusing absolute paths, `..` and symlinks that lead out."""
        if not isinstance(relative, str) or not relative or Path(relative).is_absolute():
            raise ToolError(f"path {relative!r} must be relative to the workspace")
        root = self.root.resolve()
        resolved = (root / relative).resolve()
        if resolved != root and root not in resolved.parents:
            raise ToolError(f"path {relative!r} leads outside the workspace")
        return resolved


class ToolError(Exception):
    """A tool call that cannot run; its message goes back to the model as the result."""


def cap(text: str, limit: int = OUTPUT_CAP) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - limit:,} chars cut …]\n{text[-half:]}"


SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")


def shell_argv(ws: Workspace, command: str) -> list[str]:
    """bash, inside bubblewrap when the workspace is sandboxed: the system folders read-only, the
    workspace the one writable folder, no network, no other process visible."""
    if not ws.sandbox:
        return ["bash", "-c", command]
    root = str(ws.root.resolve())
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            argv += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            argv += ["--ro-bind", folder, folder]
    return argv + ["--bind", root, root, "--chdir", root, "--setenv", "HOME", root, "bash", "-c", command]


def bash(ws: Workspace, command: str) -> str:
    """Run a shell command in the workspace: no terminal input, its own process group (all of it is
    stopped at the timeout or when it ends), a capped output."""
    if DANGEROUS.search(command) and not ws.approve(command):
        raise ToolError(f"refused a dangerous command: {command} (rerun the agent with --yes to allow it)")
    if "\0" in command:
        raise ValueError("embedded null byte")
    with tempfile.TemporaryFile() as output:
        proc = subprocess.Popen(shell_argv(ws, command), cwd=ws.root, stdin=subprocess.DEVNULL, stdout=output,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=ws.timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            stop_group(proc)
        output.seek(0)
        text = output.read().decode("utf-8", errors="replace")
    if code is None:
        raise ToolError(f"the command ran longer than {ws.timeout:g} s and was stopped: {command}")
    return cap(f"exit code {code}\n{text}")


def stop_group(proc: subprocess.Popen) -> None:
    """Stop the command and everything it started, background jobs included."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def read_file(ws: Workspace, path: str) -> str:
    target = ws.path(path)
    if not target.is_file():
        raise ToolError(f"no file at {path}")
    return cap(target.read_text(encoding="utf-8", errors="replace"))


def write_file(ws: Workspace, path: str, content: str) -> str:
    target = ws.path(path)
    data = content.encode("utf-8")  # fails here, on a lone surrogate, before the file is touched
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return f"wrote {len(content):,} chars to {path}"


def edit_file(ws: Workspace, path: str, old: str, new: str) -> str:
    """Replace one exact occurrence, so an ambiguous edit is refused rather than guessed."""
    target = ws.path(path)
    if not target.is_file():
        raise ToolError(f"no file at {path}")
    text = target.read_text(encoding="utf-8")  # the whole file, strictly: never read_file's capped view
    if text.count(old) != 1:
        raise ToolError(f"`old` must occur exactly once in {path}; it occurs {text.count(old)} times")
    target.write_bytes(text.replace(old, new).encode("utf-8"))
    return f"edited {path}"


def current_text(ws: Workspace, path: str, max_chars: int = 20_000) -> str | None:
    """A file's current text for the ladder to re-attach after a compaction, or None."""
    try:
        target = ws.path(path)
        return target.read_text(encoding="utf-8") if target.is_file() and target.stat().st_size <= max_chars else None
    except (ToolError, OSError, ValueError):
        return None


def _schema(name: str, description: str, **params: str) -> dict:
    properties = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(params)}}}


TOOLS = {"bash": bash, "read_file": read_file, "write_file": write_file, "edit_file": edit_file}
TOOL_SCHEMAS = [
    _schema("bash", "Run a shell command in the workspace.", command="the command"),
    _schema("read_file", "Read a text file.", path="path relative to the workspace"),
    _schema("write_file", "Create or overwrite a file.", path="relative path", content="the full text"),
    _schema("edit_file", "Replace one exact occurrence of `old` with `new`.", path="relative path",
            old="text that occurs exactly once", new="replacement"),
    _schema("compact", "Compact the conversation now, keeping what matters for `focus`.",
            focus="what the summary must keep"),
    _schema("recall", "Search the archive of compacted turns; pass a number like #12 to read one.",
            query="words to find, or #N"),
]
# The schemas go with every request, rendered by the server's template. Counted as their JSON: on
# llama.cpp's function-calling template a first request was estimated within 3% (tests/live).
SCHEMA_TOKENS = estimate_tokens(json.dumps(TOOL_SCHEMAS))


def run_tool(ws: Workspace, name: str, arguments: str, archive: Archive | None = None) -> str:
    """Run one call; every failure becomes a result the model can read, and the loop goes on."""
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise ToolError("arguments must be a JSON object")
        if name == "recall":
            if archive is None:
                raise ToolError("nothing is archived in this run")
            query = str(args.get("query", ""))
            return archive.read(int(query[1:])) if re.fullmatch(r"#\d+", query) else archive.search(query)
        if name not in TOOLS:
            raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}, compact, recall")
        check_arguments(TOOLS[name], ws, args)
        return TOOLS[name](ws, **args)
    except json.JSONDecodeError as error:
        return f"error: arguments are not valid JSON ({error}); send a JSON object"
    except (ToolError, OSError, ValueError) as error:  # ValueError: a NUL byte, bad UTF-8, a surrogate
        return f"error: {error}"


def check_arguments(tool: Callable, ws: Workspace, args: dict) -> None:
    """Refuse missing, unknown or non-string arguments before the tool runs."""
    try:
        inspect.signature(tool).bind(ws, **args)
    except TypeError as error:
        raise ToolError(f"wrong arguments for {tool.__name__}: {error}") from None
    wrong = [k for k, v in args.items() if not isinstance(v, str)]
    if wrong:
        raise ToolError(f"arguments {', '.join(wrong)} of {tool.__name__} must be strings")


# --------------------------------------------------------------------------------------------
# Configuration: from the environment, which python-dotenv fills from .env
# --------------------------------------------------------------------------------------------


class ConfigError(Exception):
    """Something the user can fix in .env or on the command line; printed as one line."""


@dataclass(frozen=True)
class Config:
    model: str = "gpt-4o-mini"  # MODEL
    base_url: str | None = None  # OPENAI_BASE_URL; None is api.openai.com
    context_window: int = 128_000  # CONTEXT_WINDOW, in tokens
    strategy: str = "sawtooth"  # --strategy, one of STRATEGIES
    preset: str | None = None  # --preset: a design document's ladder (compact.PRESETS); its policy wins
    threshold: int = THRESHOLD  # --threshold: the sawtooth compacts above this many messages
    keep_recent: int = KEEP_RECENT  # --keep-recent: messages the sawtooth keeps whole
    max_iterations: int = 50  # --max-iterations: model calls for one task
    send_reasoning: bool = True  # SEND_REASONING=0 for servers that reject `reasoning_content`
    timeout: float = 120.0  # REQUEST_TIMEOUT: seconds to wait for one model reply
    max_output: int = 0  # MAX_OUTPUT_TOKENS: the reply's limit and the budget's reserve; 0: 1/8 of the window

    @property
    def reserved_output(self) -> int:
        return self.max_output or self.context_window // 8


def load_config(env: dict | None = None, **overrides) -> Config:
    """Read the settings, refusing values that cannot work, each with a line that says what to do."""
    env = os.environ if env is None else env
    base_url = env.get("OPENAI_BASE_URL") or None
    if base_url:
        check_base_url(base_url)
    values = {"model": env.get("MODEL") or Config.model, "base_url": base_url,
              "context_window": whole_number(env, "CONTEXT_WINDOW", "128000", 1_000),
              "timeout": float(whole_number(env, "REQUEST_TIMEOUT", "120", 1)),
              "max_output": whole_number(env, "MAX_OUTPUT_TOKENS", "0", 0),
              "send_reasoning": env.get("SEND_REASONING", "1").strip().lower() not in ("0", "false", "no")}
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values.get("preset"):  # ladder
        values["strategy"] = preset_policy(values["preset"])  # ladder
    config = Config(**values)
    problems = [(config.strategy not in STRATEGIES, f"unknown strategy {config.strategy!r}; choose one of "
                 f"{', '.join(STRATEGIES)}"),
                (config.keep_recent < 1, f"--keep-recent {config.keep_recent}: keep at least 1 message"),
                (config.threshold <= config.keep_recent, f"--threshold {config.threshold} must be larger than "
                 f"--keep-recent {config.keep_recent}"),
                (config.max_iterations < 1, f"--max-iterations {config.max_iterations}: allow at least 1")]
    for wrong, message in problems:
        if wrong:
            raise ConfigError(message)
    return config


def preset_policy(name: str) -> str:
    """The policy a design document's preset runs, or a one-line error for an unknown name."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name].get("policy", "layered")


def whole_number(env: dict, name: str, default: str, least: int) -> int:
    value = env.get(name) or default
    if not (value.isascii() and value.isdigit()) or int(value) < least:
        raise ConfigError(f"{name}={value!r} must be a whole number, at least {least}")
    return int(value)


def check_base_url(url: str) -> None:
    """A URL the client can use: http(s), a host, a numeric port."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url)
        parts.port  # raises on "host:8080:9" or "host:abc"
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"OPENAI_BASE_URL={url!r} is not a valid http:// or https:// URL "
                          "(for example http://localhost:11434/v1 for Ollama)")


def load_env(path: Path | None = None) -> None:
    """Load .env with python-dotenv, refusing a line it cannot parse instead of skipping it."""
    from dotenv import find_dotenv, load_dotenv
    from dotenv.parser import parse_stream
    found = path or Path(find_dotenv(usecwd=True) or "")
    if not found.is_file():
        return
    try:
        with open(found, encoding="utf-8") as stream:
            bindings = list(parse_stream(stream))
    except UnicodeDecodeError:
        raise ConfigError(f"{found} is not UTF-8 text; save it as UTF-8") from None
    for binding in bindings:
        if binding.error:
            raise ConfigError(f"{found}:{binding.original.line}: cannot read "
                              f"{binding.original.string.strip()!r}; write it as KEY=value")
    load_dotenv(found, encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Sessions: made, saved after every turn, resumed
# --------------------------------------------------------------------------------------------


def new_session(config: Config, summarize: Callable | None = None, archive_dir=None,
                ws: Workspace | None = None) -> Session:
    """A session with the system prompt, an archive when a folder is given, and the strategy's
    compaction function; the ladder re-attaches recent files from the workspace."""
    archive = None  # the sawtooth alone keeps no archive
    archive = Archive.in_folder(archive_dir) if archive_dir else None  # ladder
    reattach = (lambda path: current_text(ws, path)) if ws else None
    compact, compactor = make_compaction(config, summarize or summarize_default, archive, reattach)
    admit = compactor.admit_tool_result if compactor and config.strategy == "zones" else None
    return Session([{"role": "system", "content": SYSTEM_PROMPT}], config, compact, compactor, archive, admit)


def session_folder(ws_root: Path) -> Path:
    folder = ws_root / ".tiny_agent"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def save_session(session: Session, folder: Path) -> Path:
    """Write the history and the compactor's state atomically (a crash leaves the old file whole),
    owner-only. No setting or key is written, only what the conversation holds."""
    path = folder / "session.json"
    data = {"version": 1, "strategy": session.config.strategy, "messages": session.messages,
            "state": asdict(session.compactor.state) if session.compactor else None,
            "archive": str(session.archive.path) if session.archive else None}
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".session-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    return path


def resume_session(session: Session, folder: Path) -> None:
    """Continue the saved history; a damaged file gets one line and is left as it is."""
    path = folder / "session.json"
    if not path.exists():
        raise ConfigError(f"no saved session in {folder}; run without --resume first")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        messages, state, archive = data["messages"], data.get("state"), data.get("archive")
        check_messages(messages)  # a list of dicts, each with a role a server knows
        state = CompactState(**state) if state else None  # ladder
        archive = Path(archive) if archive else None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ConfigError(f"{path} is damaged and was left untouched; move it away to start afresh") from None
    session.messages = messages
    if session.compactor is not None and state and data.get("strategy") == session.config.strategy:
        session.compactor.state = state
    # the tools may write in the workspace: an archive is only ever appended to inside the agent's folder
    if archive and session.archive is not None and archive.parent == session.archive.path.parent:
        session.archive.path = archive


# --------------------------------------------------------------------------------------------
# The REPL and its commands
# --------------------------------------------------------------------------------------------

HELP = """/help                 this list
/context              what the next request holds, by kind, against the window
/compact [focus]      compact now, keeping what matters for the focus
/strategy NAME        switch the compaction strategy for the rest of the session
/exit                 quit (Ctrl-D too); Ctrl-C stops the current turn"""


def repl(session: Session, model: Callable, ws: Workspace, folder: Path | None = None, read=input) -> None:
    """Questions one after another; the history and the compactor's state carry across them. A
    turn that fails or is interrupted ends with one line, and the session goes on."""
    print(f"[repl] model {session.config.model}, strategy {session.config.strategy}. /help lists the "
          "commands; /exit or Ctrl-D quits.")
    while True:
        try:
            line = read("you> ").strip()
        except EOFError:
            print()
            return
        except KeyboardInterrupt:
            print()
            continue
        if not line:
            continue
        if line.startswith("/"):
            done = command(session, line, ws) == "exit"
            if folder is not None and len(session.messages) > 1:
                save_session(session, folder)  # /compact and /strategy last too
            if done:
                return
            continue
        turn(session, line, model, ws)
        if folder is not None:
            save_session(session, folder)


def turn(session: Session, question: str, model: Callable, ws: Workspace) -> None:
    """One question in the REPL: its answer, or one line saying why there is none."""
    import openai
    try:
        print(f"agent> {run(session, question, model, ws)}")
    except KeyboardInterrupt:
        print("\n[interrupted] the turn was stopped; the history is kept")
    except (openai.OpenAIError, ServerReplyError, ContextOverflowError) as error:
        print(f"error: {diagnose(error, session.config)}")


def command(session: Session, line: str, ws: Workspace) -> str | None:
    """Run one slash command; returns "exit" for /exit."""
    name, _, rest = line.partition(" ")
    if name in ("/exit", "/quit"):
        return "exit"
    if name == "/context":
        print(context_meter(session))
    elif name == "/compact":
        before = session.messages
        compact_now(session, focus=rest.strip() or None, force=1)
        if session.messages is before:
            print("[compact] nothing to compact yet")
    elif name == "/strategy" and rest.strip() in STRATEGIES:
        config = replace(session.config, strategy=rest.strip())
        fresh = new_session(config, archive_dir=session.archive.path.parent if session.archive else None, ws=ws)
        session.config, session.compact, session.compactor, session.admit = (
            config, fresh.compact, fresh.compactor, fresh.admit)
        print(f"[strategy] {config.strategy} from now on")
    elif name == "/strategy":
        print(f"choose one of {', '.join(STRATEGIES)}")
    else:
        print(HELP)
    return None


def context_meter(session: Session, width: int = 40) -> str:
    """What the next request holds, by kind, in tokens and as a share of the window."""
    kinds = {"system prompt": 0, "tool schemas": SCHEMA_TOKENS, "summary": 0, "pinned constraints": 0,
             "tool results": 0, "other messages": 0}
    pins = estimate_tokens(pins_text(session.compactor.state.pinned, 10**9)) if session.compactor else 0
    for i, m in enumerate(session.messages):
        size = estimate_tokens([m]) - 3
        kind = ("system prompt" if i < system_head(session.messages) else "summary" if is_summary(m)
                else "tool results" if m.get("role") == "tool" else "other messages")
        kinds[kind] += size
    kinds["summary"] -= min(pins, kinds["summary"])
    kinds["pinned constraints"] = pins
    window, total = session.config.context_window, sum(kinds.values())
    share = trigger_tokens(session) / window
    lines = [f"[context] ~{total:,} of {window:,} tokens ({total / window:.0%}); trigger at {share:.0%}"
             + (f"; the server counted {session.usage[1]:,} for the last request" if session.usage else "")]
    for kind, size in kinds.items():
        lines.append(f"  {kind:<19} {size:>8,}  {'█' * round(width * size / window)}")
    mark = round(width * share)
    lines.append(f"  {'':<19} {'':>8}  {'·' * mark}▲ trigger{' ' * max(0, width - mark - 10)}| window")
    return "\n".join(lines)


def trigger_tokens(session: Session) -> int:
    """The size of request at which the session's strategy compacts, in tokens."""
    config, c = session.config, session.compactor
    if config.strategy == "none":
        return config.context_window
    if c is None:
        return int(TRIGGER * (config.context_window - config.reserved_output))
    start = c.lossless_at if c.policy == "zones" else c.trigger
    head = estimate_tokens(session.messages[:system_head(session.messages)]) - 3
    return int(start * c.budget.effective(session.messages)) + c.fixed_tokens + head


# --------------------------------------------------------------------------------------------
# The command line: the offline demo, one task, or a REPL
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; every option falls back to .env and then to the defaults in Config."""
    p = argparse.ArgumentParser(description="A tiny agent whose context is compacted on every iteration.")
    p.add_argument("task", nargs="?", help="one task to run; without it, a REPL (or the demo with no model)")
    p.add_argument("--strategy", choices=STRATEGIES, help="how to compact (default: sawtooth)")
    p.set_defaults(preset=None)
    p.add_argument("--preset", choices=list(PRESETS), help="a design document's ladder, with its numbers")  # ladder
    p.add_argument("--demo", action="store_true", help="run the offline demo even if a model is configured")
    p.add_argument("--workspace", default=".", help="the folder the tools may touch (default: .)")
    p.add_argument("--yes", action="store_true", help="run dangerous shell commands without asking")
    p.add_argument("--resume", action="store_true", help="continue the session saved in WORKSPACE/.tiny_agent")
    p.add_argument("--max-iterations", type=int, help=f"stop after this many model calls (default: "
                   f"{Config.max_iterations}; the demo: {DEMO_ITERATIONS})")
    p.add_argument("--threshold", type=int, help=f"sawtooth: compact above this many messages (default: {THRESHOLD})")
    p.add_argument("--keep-recent", type=int, help=f"sawtooth: messages kept whole (default: {KEEP_RECENT})")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The demo without a model; with one, a task or a REPL. User errors end in one line."""
    args = parse_args(argv)
    import openai
    config = None
    try:
        load_env()
        if not Path(args.workspace).is_dir():
            raise ConfigError(f"--workspace {args.workspace}: no such folder")
        config = load_config(strategy=args.strategy, preset=args.preset, max_iterations=args.max_iterations,
                             threshold=args.threshold, keep_recent=args.keep_recent)
        if args.demo or not model_configured():
            if args.task:
                print("[demo] no model is configured, so the task is not run; see README: plug in a model")
            run_demo(replace(config, context_window=DEMO_WINDOW, max_iterations=args.max_iterations or DEMO_ITERATIONS))
            return 0
        ws = Workspace(Path(args.workspace), approve=(lambda _: True) if args.yes else ask_on_terminal)
        model = openai_model(make_client(timeout=config.timeout), config.model, config.send_reasoning,
                             config.reserved_output)
        folder = session_folder(ws.root)
        session = new_session(config, archive_dir=folder / "archive", ws=ws)
        if args.resume:
            resume_session(session, folder)
        print(f"[shell] {'bash runs inside bubblewrap: only the workspace is writable, no network' if ws.sandbox else 'bash is NOT confined (install bubblewrap to confine it); dangerous commands are asked about'}")
        if args.task:
            answer = run(session, args.task, model, ws)
            save_session(session, folder)
            finish(session, answer)
        else:
            repl(session, model, ws, folder)
        return 0
    except ConfigError as error:
        return fail(f"configuration: {error}")
    except (openai.OpenAIError, ServerReplyError, ContextOverflowError) as error:
        return fail(diagnose(error, config or Config()))
    except KeyboardInterrupt:
        return fail("interrupted")


def diagnose(error: Exception, config: Config) -> str:
    """One line that says what went wrong with the server, and what to change."""
    import openai
    where = config.base_url or "api.openai.com"
    if isinstance(error, openai.APITimeoutError):
        return (f"the server at {where} did not answer in {config.timeout:g} s, twice (REQUEST_TIMEOUT sets "
                "the wait)")
    if isinstance(error, openai.APIConnectionError):
        return f"cannot reach {where}: start the server or fix OPENAI_BASE_URL in .env"
    if isinstance(error, openai.AuthenticationError):
        return "the server refused the API key: set OPENAI_API_KEY in .env"
    if isinstance(error, openai.NotFoundError):
        if re.search(r"model", str(error), re.I) and not re.search(r"File Not Found|<html|Cannot POST", str(error)):
            return f"the server has no model {config.model!r}: set MODEL in .env"
        return (f"the server at {where} has no chat endpoint there (HTTP 404): OPENAI_BASE_URL usually ends "
                f"in /v1, for example {where.rstrip('/')}/v1")
    if isinstance(error, openai.APIStatusError):
        return f"the server answered HTTP {error.status_code}: {first_line(error, 200)}"
    if isinstance(error, openai.APIResponseValidationError) or isinstance(error, ServerReplyError):
        return f"the server at {where} did not answer like an OpenAI-compatible server: {first_line(error, 120)}"
    return first_line(error, 300)


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


# --------------------------------------------------------------------------------------------
# The offline demo: a deterministic stand-in for a model, on a copy of this project
# --------------------------------------------------------------------------------------------

DEMO_TASK = "Survey this project's Python files: lines, functions, longest function, TODOs. Write REPORT.md."
DEMO_WINDOW, DEMO_ITERATIONS = 40_000, 100


@dataclass
class DemoModel:
    """The offline stand-in for a language model, and the only one in this project: a fixed,
    deterministic plan that surveys the project's Python files with real tool calls, reads the
    real results, and writes REPORT.md. Like a real server it refuses requests over `window`.
    Unlike a real model it keeps its findings in `notes`, so its report survives compaction."""

    window: int = DEMO_WINDOW
    queue: list[str] = field(default_factory=list)
    notes: dict[str, dict] = field(default_factory=dict)
    pending: dict[str, tuple[str, str]] = field(default_factory=dict)  # call id -> (purpose, path)
    stage: str = "list"
    calls: int = 0

    def __call__(self, messages: list[dict], tools: list[dict]) -> dict:
        size = estimate_tokens(messages)
        if size > self.window:
            raise ContextLengthExceeded(
                f"Error code: 400 - {{'error': {{'message': \"This model's maximum context length is "
                f"{self.window} tokens. However, your messages resulted in {size} tokens.\", "
                f"'type': 'invalid_request_error', 'code': 'context_length_exceeded'}}}}")
        self.read_results(messages)
        return self.next_step()

    def read_results(self, messages: list[dict]) -> None:
        """Take what the last calls returned from the newest tool results (never compacted away)."""
        for m in messages[-len(self.pending) - 1:] if self.pending else []:
            purpose, path = self.pending.pop(m.get("tool_call_id"), (None, None))
            text = content_text(m)
            if purpose == "list":
                self.queue = [line[2:] for line in text.splitlines()[1:] if line.startswith("./")]
            elif purpose == "count":
                self.notes[path] = {**self.notes.get(path, {}), **survey(text)}
            elif purpose == "read":
                self.notes.setdefault(path, {})["purpose"] = purpose_of(text)

    def next_step(self) -> dict:
        """The plan: list the files, survey each one, write the report, read it back, answer."""
        if self.stage == "list":
            self.stage = "read"
            return self.call("I will list the Python sources first.",
                             ("list", "", "bash", {"command": "find . -name '*.py' | sort"}))
        if self.stage == "read" and self.queue:
            path = self.queue.pop(0)
            return self.call(f"Reading {path} ({len(self.notes)} files surveyed so far).",
                             ("count", path, "bash", {"command": f"wc -l < {path}; grep -n 'def \\|TODO' {path}"}),
                             ("read", path, "read_file", {"path": path}))
        if self.stage == "read":
            self.stage = "check"
            return self.call("All files read. Decision: write REPORT.md because a file survives "
                             "compaction.", ("write", "", "write_file", {"path": "REPORT.md", "content": self.report()}))
        if self.stage == "check":
            self.stage = "done"
            return self.call("Next step: read REPORT.md back to check it.", ("check", "", "read_file", {"path": "REPORT.md"}))
        biggest = max(self.notes, key=lambda p: self.notes[p].get("lines", 0), default="nothing")
        return {"role": "assistant", "content": f"[demo model] Surveyed {len(self.notes)} Python files, "
                f"{sum(n.get('lines', 0) for n in self.notes.values()):,} lines in all; the largest is "
                f"{biggest}. The table is in REPORT.md."}

    def call(self, text: str, *steps: tuple[str, str, str, dict]) -> dict:
        """An assistant message with one tool call per step (several steps: parallel calls)."""
        calls = []
        for purpose, path, name, args in steps:
            self.calls += 1
            call_id = f"call_demo_{self.calls:03d}"
            self.pending[call_id] = (purpose, path)
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": json.dumps(args)}})
        return {"role": "assistant", "content": f"[demo model] {text}", "tool_calls": calls}

    def report(self) -> str:
        rows = [f"| {p} | {n.get('lines', 0)} | {n.get('functions', 0)} | {n.get('longest', '-')} | "
                f"{n.get('todos', 0)} | {n.get('purpose', '')} |" for p, n in sorted(self.notes.items())]
        return ("# Survey of the Python sources\n\n| file | lines | functions | longest function | TODOs | "
                "purpose |\n|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


def survey(text: str) -> dict:
    """Lines, functions, the longest function and TODOs of a file, from `wc -l; grep -n` output."""
    numbers = re.findall(r"^(\d+)\s*$", text, re.M)
    lines = int(numbers[0]) if numbers else 0
    starts = [(int(n), name) for n, name in re.findall(r"^(\d+):\s*def (\w+)", text, re.M)]
    ends = [n for n, _ in starts[1:]] + [lines + 1]
    longest = max(((end - n, name) for (n, name), end in zip(starts, ends)), default=(0, "-"))
    todos = len(re.findall(r"^\d+:.*TODO", text, re.M))
    return {"lines": lines, "functions": len(starts), "longest": f"{longest[1]} ({longest[0]} lines)", "todos": todos}


def purpose_of(text: str) -> str:
    """The first line of a module's docstring."""
    match = re.search(r'^\s*(?:"""|\'\'\')\s*(.+)', text)
    return match.group(1).strip().rstrip('."')[:80] if match else ""


def run_demo(config: Config, log=print) -> Session:
    """The main job with no model: the demo model surveys a temporary copy of this project, and the
    report it wrote there is printed before the copy is deleted."""
    log("[demo] No OPENAI_API_KEY or OPENAI_BASE_URL: running the offline demo. The model is a")
    log("[demo] deterministic stand-in, not a language model; the tools and files are real.")
    with tempfile.TemporaryDirectory(prefix="tiny-agent-demo-") as folder:
        for name in ("compact.py", "tiny_agent.py", "lessons", "tests"):
            source = HERE / name
            if source.is_dir():
                shutil.copytree(source, Path(folder) / name, ignore=shutil.ignore_patterns("__pycache__", "live"))
            elif source.exists():
                shutil.copy(source, folder)
        ws = Workspace(Path(folder))
        session = new_session(config, archive_dir=Path(folder) / ".archive", ws=ws)
        answer = run(session, DEMO_TASK, DemoModel(window=config.context_window), ws, log)
        report = Path(folder) / "REPORT.md"
        log("\n" + (report.read_text(encoding="utf-8") if report.exists() else "(no REPORT.md was written)"))
    log("[demo] the copy and its REPORT.md were temporary and are deleted; the table above is the report.")
    finish(session, answer, log)
    return session


def finish(session: Session, answer: str, log=print) -> None:
    log(f"[answer] {answer}\n")
    log(sawtooth_chart(session.sent))
    log(f"[done] {len(session.sent)} requests, {session.compactions} compactions, at most "
        f"{max((n for n, _ in session.sent), default=0)} messages and "
        f"~{max((t for _, t in session.sent), default=0):,} tokens sent at once ({session.config.strategy}).")


def sawtooth_chart(sent: list[tuple[int, int]], height: int = 8) -> str:
    """Tokens sent per request as a small terminal chart: up while working, down at each compaction.
    Messages per request are the second line, so strategies that shrink tokens show their teeth too."""
    if not sent:
        return ""
    tokens = [t for _, t in sent]
    top = max(tokens)
    rows = []
    for level in range(height, 0, -1):
        threshold = top * level / height
        label = f"{round(threshold):>7,} ┤" if level in (height, height // 2) else "        │"
        rows.append(label + "".join("█" if t >= threshold - 1e-9 else " " for t in tokens))
    rows.append("        └" + "─" * len(tokens))
    rows.append(f"         tokens sent at each of {len(tokens)} requests; messages: "
                + " ".join(str(n) for n, _ in sent[:40]) + (" …" if len(sent) > 40 else ""))
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
