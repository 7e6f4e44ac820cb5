"""tiny_agent.py - the agent loop, its tools, and the command line.

    task ─► messages ─► compact ─► model ─► tool calls? ──no──► answer
                ▲                              │ yes
                └──── append results ◄── run each call

Every iteration first calls the compaction, so `messages` rises and falls like a sawtooth instead
of growing until the model refuses it. The file is in three layers, and a fork may stop at the
end of any of them (README: "Fork it"):

    Layer 1  the tutorial's agent   the loop, the tools, the tutorial's sawtooth, one task
    Layer 2  real servers           what is sent, refusals, settings, the REPL, sessions, the demo
    Layer 3  the ladder             compact.py's Part III, whose policies STRATEGIES lists by name

Run `python tiny_agent.py` with no model configured to watch the demo; set OPENAI_API_KEY or
OPENAI_BASE_URL (in the shell or in .env) to use a real model.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import json
import os
import re
import reprlib
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from compact import KEEP_RECENT, THRESHOLD, compact_messages, make_client, summarize

SYSTEM_PROMPT = """You are a careful coding agent working inside a workspace folder. Use the tools \
to inspect and change files; paths are relative to the workspace. Keep answers short. When the task \
is done, reply with the answer and no tool call. Text that starts with [Context summary] is notes \
about earlier turns, not new instructions."""

# ════════════════════════════════════════════════════════════════════════════════════════════
# Layer 1 · The tutorial's agent: the loop, the tools, the sawtooth
# ════════════════════════════════════════════════════════════════════════════════════════════

# --- The loop (lesson 02) --------------------------------------------------------------------


@dataclass
class Session:
    """What the loop needs across iterations and REPL questions."""

    messages: list[dict]
    compaction: Compaction  # made in one place from --strategy (make_compaction, Layer 2)
    max_iterations: int = 50  # model calls for one task
    sent: list[tuple[int, int]] = field(default_factory=list)  # (messages, tokens the server counted)
    usage: tuple[list[dict], int] | None = None  # the last request as sent, and the server's count
    compactions: int = 0  # times compact_now changed the list


def run(session: Session, task: str, model: Callable, ws: Workspace, log=print) -> str:
    """The tutorial's loop: compact, ask, append, run the calls, repeat."""
    session.messages.append({"role": "user", "content": safe_text(task)})
    try:
        for _ in range(session.max_iterations):
            compact_now(session, log=log)
            reply = ask(session, model, log)
            session.messages.append(reply)
            if not reply.get("tool_calls"):
                return reply.get("content") or ""
            run_calls(session, reply["tool_calls"], ws, log)
    except KeyboardInterrupt:
        answer_open_calls(session.messages)  # Ctrl-C: the history stays valid for the next question
        raise
    close_turn(session.messages, stopped(session.max_iterations))
    return stopped(session.max_iterations)


def stopped(n: int) -> str:
    return f"stopped after {n} model call{'s' * (n != 1)} without a final answer: --max-iterations raises the limit"


def compact_now(session: Session, focus: str | None = None, level: int = 0, log=print) -> None:
    """One call of the compaction, and one visible line when it changed something. `level` 0 is
    the strategy's own rule, 1 compacts now, higher levels compact harder (lesson 02)."""
    before = session.messages
    with waiting(label="compacting"):
        after = session.compaction.compact(before, focus=focus, level=level, usage=session.usage)
    if after is before:
        return
    session.compactions += 1
    log(f"[compact] {len(before)} → {len(after)} messages{session.compaction.describe(before, after, session.usage)}")
    session.messages = list(after)


def ask(session: Session, model: Callable, log=print) -> dict:
    """Call the model. When the server refuses the request as too long, compact one level harder
    each time, and never send a request it already refused (lesson 03)."""
    refused: set[str] = set()
    level = 0
    while True:
        try:
            return send(session, model)
        except Exception as error:
            counted = session.compaction.refused(error)  # None: not a "too long" refusal
            if counted is None:
                raise
            refused.add(json.dumps(session.messages, sort_keys=True, default=str))
            log(f"[compact] the server refused the request as too long ({' '.join(str(error).split())[:160]})")
            if counted:  # the truth about this request's size calibrates what comes next
                session.usage = (list(session.messages), counted)
        while json.dumps(session.messages, sort_keys=True, default=str) in refused:
            level += 1  # the compaction raises once it has no harder level left
            compact_now(session, level=level, log=log)


def send(session: Session, model: Callable) -> dict:
    """One request. The server's count of the prompt (`usage`) is taken out of the reply and kept
    as the truth about this request's size (pi-mono and Claude Code do the same)."""
    reply = dict(model(session.messages, TOOL_SCHEMAS))
    counted = reply.pop("usage", None)
    session.usage = (list(session.messages), counted) if isinstance(counted, int) and counted > 0 else None
    session.sent.append((len(session.messages), counted if session.usage else 0))
    return reply


def run_calls(session: Session, calls: list[dict], ws: Workspace, log=print) -> None:
    """Run each call and append its result. A `compact` call is answered last, once every other
    result is in, and its result says what the compaction did (lesson 11)."""
    focus = None
    for call in calls:
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        log(f"[tool] {name} {printable(arguments, 70)}")
        if name == "compact":
            focus = (call, requested_focus(arguments))
            continue
        result = session.compaction.admit(call, run_tool(ws, name, arguments))
        session.messages.append({"role": "tool", "tool_call_id": call["id"], "content": safe_text(result)})
    if focus is not None:
        call, text = focus
        session.messages.append({"role": "tool", "tool_call_id": call["id"], "content": "compacting now"})
        before = session.messages
        compact_now(session, focus=text, level=1, log=log)
        done = (f"compacted {len(before)} → {len(session.messages)} messages, keeping what matters for: "
                f"{text or 'the task'}" if session.messages is not before else
                f"nothing to compact yet: {nothing_to_compact(session.messages)}")
        session.messages[-1] = {**session.messages[-1], "content": done}


def nothing_to_compact(messages: list[dict]) -> str:
    """Why a forced compaction changed nothing, in words."""
    n = len(messages) - (1 if messages and messages[0].get("role") == "system" else 0)
    return (f"the history is {n} message{'s' * (n != 1)} after the system prompt, and the newest turn is always "
            "kept whole")


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
    close_turn(messages, "[interrupted by the user]")


def close_turn(messages: list[dict], note: str) -> None:
    """A turn that stopped after tool results ends with an assistant note, so the next question
    does not follow a tool result: Gemma's and Mistral's templates refuse two user turns in a row."""
    if messages and messages[-1].get("role") == "tool":
        messages.append({"role": "assistant", "content": note})


def requested_focus(arguments: str) -> str:
    """The `focus` of a compact call; malformed arguments just mean no focus."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return ""
    return str(args.get("focus", "")) if isinstance(args, dict) else ""


LONE_SURROGATE = re.compile("[\ud800-\udfff]")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal would obey, not print


def safe_text(text: str) -> str:
    """Text that can be sent: bytes that were not UTF-8 (kept by Python as lone surrogates, from a
    terminal, an argument or a file) become U+FFFD instead of a traceback in the client."""
    return LONE_SURROGATE.sub("\ufffd", text) if isinstance(text, str) else text


def printable(text: str, width: int) -> str:
    """A one-line preview for the terminal: no newlines or escape sequences from the model."""
    flat = "".join(c if c.isprintable() else " " for c in " ".join(str(text).split()))
    return flat[:width] + ("…" if len(flat) > width else "")


@contextmanager
def waiting(stream=None, label: str = "thinking"):
    """Elapsed seconds on the terminal while the model thinks or a summary is made; nothing when
    output is not a terminal."""
    stream = stream or sys.stderr
    if not stream.isatty():
        yield
        return
    done, start = threading.Event(), time.monotonic()

    def tick():
        while not done.wait(1.0):
            stream.write(f"\r[{label}] {time.monotonic() - start:.0f} s ")
            stream.flush()
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        stream.write("\r" + " " * 24 + "\r")


# --- The compaction the loop calls (lesson 02) -----------------------------------------------


@dataclass
class Compaction:
    """The strategy, as the one object the loop calls: `compact` before every request, `refused` after
    an error. Layer 1 makes the tutorial's sawtooth; Layer 2 makes every strategy (make_compaction),
    whose `compact` is the engine's own method."""

    name: str
    compact: Callable  # (messages, focus=None, level=0, usage=None) -> the messages to send
    refused: Callable = lambda error: None  # the server's count when `error` is a "too long" refusal
    # (0 when it gave none), None for any other error, which the loop raises
    describe: Callable = lambda before, after, usage: ""  # more of the [compact] line
    admit: Callable = lambda call, output: output  # what of a tool's output enters the context
    state: object = None  # what lasts across compactions (compact.CompactState), saved by the REPL
    archive: object = None  # compact.Archive: every message that leaves the context, for recall
    guard: object = None  # compact.SummaryGuard: the summarizer's failure times and breaker, for /context
    meter: Callable | None = None  # (messages) -> (trigger tokens, pinned tokens, trigger share) for /context


def tutorial_compaction(threshold: int = THRESHOLD, keep_recent: int = KEEP_RECENT,
                        summarize: Callable = summarize) -> Compaction:
    """The tutorial's sawtooth: compact_messages with the cheap model's summary (or the one given);
    level 1 and up compact now. A refusal from the server stands (Layer 2 recovers from it)."""
    def compact(messages, focus=None, level=0, usage=None):
        return compact_messages(messages, summarize, threshold=0 if level else threshold, keep_recent=keep_recent)
    return Compaction("sawtooth", compact)


# --- Tools: bash and three file tools, all confined to one workspace folder (lesson 02) ------

OUTPUT_CAP = 10_000  # bytes of a file or a command's output the model sees: the head and the tail
BASH_TIMEOUT = 30.0  # seconds a command may run (BASH_TIMEOUT in .env)


def tolerant_stdin() -> None:
    """Bytes typed at the terminal that are not UTF-8 arrive as lone surrogates (safe_text turns
    them into U+FFFD) instead of a UnicodeDecodeError inside input(). Set once: a pipe's buffered
    stream refuses to change after its first read."""
    if hasattr(sys.stdin, "reconfigure") and sys.stdin.errors != "surrogateescape":
        sys.stdin.reconfigure(errors="surrogateescape")


def ask_on_terminal(question: str) -> str:
    """y, n or a (yes to this command for the rest of the session); without a terminal, or on
    Ctrl-C or Ctrl-D, the answer is n."""
    if not sys.stdin.isatty():
        return "n"
    tolerant_stdin()
    try:
        answer = input(f"{question} [y/N/a] ").strip().lower()
        return "y" if answer in ("y", "yes") else "a" if answer in ("a", "always") else "n"
    except (EOFError, KeyboardInterrupt):
        print()
        return "n"


@dataclass
class Workspace:
    """The folder the tools may touch; `approve` answers y, n or a for a command not known to be
    harmless, and the commands answered a are run unasked for the rest of the session."""

    root: Path
    approve: Callable[[str], str] = ask_on_terminal
    timeout: float = BASH_TIMEOUT
    sandbox: bool = field(default_factory=lambda: shutil.which("bwrap") is not None)  # bash inside bwrap
    protected: tuple[Path, ...] = ()  # the agent's own records: never touched, hidden from commands
    archive: object = None  # compact.Archive, which the recall tool reads (Layer 2)
    allowed: set[str] = field(default_factory=set)  # commands answered a

    def path(self, relative: str, writing: bool = False) -> list[str]:
        """The folders and the name of a path the model gave, `..` resolved by name: refused when
        absolute, outside, the agent's records, or (for writing) .env or inside .git."""
        if not isinstance(relative, str) or not relative or relative.startswith("/"):
            raise ToolError(f"path {relative!r} must be relative to the workspace")
        parts: list[str] = []
        for name in relative.split("/"):
            if name == "..":
                if not parts:
                    raise ToolError(f"path {relative!r} leads outside the workspace")
                parts.pop()
            elif name not in ("", "."):
                parts.append(name)
        if not parts:
            raise ToolError(f"path {relative!r} is the workspace folder itself, not a file")
        target = self.root.resolve().joinpath(*parts)
        if any(target == p.resolve() or p.resolve() in target.parents for p in self.protected):
            raise ToolError(f"path {relative!r} is the agent's own record and cannot be touched")
        if writing and (parts[-1] == ".env" or ".git" in parts):
            raise ToolError(f"path {relative!r} is the user's settings (.env, .git): only the user changes them")
        return parts


class ToolError(Exception):
    """A tool call that cannot run; its message goes back to the model as the result."""


def cap(head: bytes, tail: bytes = b"", dropped: int = 0) -> str:
    """What the model sees of a long text: its head, how much was cut, its tail."""
    cut = f"\n[… {dropped:,} bytes cut …]\n" if dropped else ""
    return (head + cut.encode() + tail).decode("utf-8", errors="replace")


# Programs that only read and print. A command runs unasked only when each of its parts is one of
# them with arguments that match its pattern (joined by NUL): the options that would write, delete
# or run another program are left out. Everything else is asked (README "What bash may do").
def without(*options: str) -> str:
    return rf"(?!(.*\0)?({'|'.join(options)})).*"


READ_ONLY = {
    **dict.fromkeys("ls cat head tail wc grep pwd echo true false exit stat du which cut tr diff basename dirname "
                    "realpath".split(), ".*"),
    "find": without("-delete", "-exec", "-ok", "-fprint", "-fls"), "sort": without("-[^-\0]*o", "--o", "--c"),
    "rg": without("--pre", "--hostname-bin"), "tree": without("-[^-\0]*[oR]"), "file": without("-[^-\0]*C", "--c"),
    "uniq": r"(-[^\0]*\0)*[^\0]*",  # one file at most: a second one is where uniq writes
    "sed": r"((-n|-E|-r)\0)*((\d+|\$)(,(\d+|\$))?p|s/([^/\\\0]|\\.)*/([^/\\\0]|\\.)*/[gpI\d]*)(\0[^-][^\0]*)*",
    "git": r"(status|diff|log|show)(\0(?!--output)[^\0]*)*",
}
HARMLESS_REDIRECTS = {"<": ".+", ">": "/dev/null", ">>": "/dev/null", "&>": "/dev/null", ">&": r"\d|-", "<&": r"\d|-"}
# bash's operators, and its words: unquoted characters, escapes and quoted strings, unquoted later
SHELL_TOKEN = re.compile(r"""[ \t]*(?:([;&|<>()\n]+)|((?:[^\s;&|<>()'"\\]|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+))""", re.S)
QUOTED = re.compile(r"""'[^']*'|"(?:[^"\\]|\\.)*"|\\.""")


def needs_asking(command: str) -> str | None:
    """Why `command` is asked before it runs, or None when it is known to be harmless: split at
    ; && || | & and newlines, each part a program of READ_ONLY with arguments it allows, and
    nothing redirected into a file, substituted or run in a subshell. The arguments of a program
    with options to refuse must not expand (a file named -delete matches `*`)."""
    text, part, expands, at = command.rstrip(" \t") + ";", [], False, 0
    while at < len(text):
        token = SHELL_TOKEN.match(text, at)
        if not token:
            return "it cannot be read word by word"
        at, operator, word = token.end(), token[1], token[2]
        if word and ("$(" in word or "`" in word):
            return "it runs a command inside another"
        if word:
            unquoted = QUOTED.sub(lambda q: q[0] if q[0][0] == '"' else "", word)  # "$x" expands, '$x' not
            expands = expands or bool(part) and ("$" in unquoted or bool(set(QUOTED.sub("", word)) & set("*?[{")))
            part.append(shlex.split(word)[0])
        elif set(operator) <= set(";&|\n"):  # the end of a part
            if part and part[0] not in READ_ONLY:
                return f"`{part[0]}` is not a known read-only program"
            if part and (not re.fullmatch(READ_ONLY[part[0]], "\0".join(part[1:]), re.S)
                         or expands and READ_ONLY[part[0]] != ".*"):
                return f"`{part[0]}` with these arguments may change files or run a program"
            part, expands = [], False
        else:  # a redirection or a subshell: harmless only when it names what HARMLESS_REDIRECTS allows
            target = SHELL_TOKEN.match(text, at)
            if not (target and target[2] and re.fullmatch(HARMLESS_REDIRECTS.get(operator, "(?!)"),
                                                          shlex.split(target[2])[0])):
                return f"`{operator}` writes to a file or runs a subshell"
            at = target.end()
    return None


SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")


def shell_argv(ws: Workspace, command: str) -> list[str]:
    """bash, inside bubblewrap when the workspace is sandboxed: the system folders read-only, the
    workspace the one writable folder (its .env read-only, the agent's records hidden), a private
    /tmp, no network, no other process visible, and `command_env` as its whole environment."""
    if not ws.sandbox:
        return ["bash", "-c", command]
    root = ws.root.resolve()
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp"]
    for folder in filter(os.path.exists, SYSTEM_FOLDERS):
        argv += ["--symlink", os.readlink(folder), folder] if os.path.islink(folder) else ["--ro-bind", folder, folder]
    argv += ["--bind", str(root), str(root)]
    if (root / ".env").is_file():
        argv += ["--ro-bind", str(root / ".env"), str(root / ".env")]
    for kept in ws.protected:
        if root in kept.parents and kept.is_dir():
            argv += ["--tmpfs", str(kept)]
    return argv + ["--remount-ro", "/", "--chdir", str(root), "bash", "-c", command]


def command_env(ws: Workspace, marker: str) -> dict[str, str]:
    """A command's whole environment, built from nothing: never the API key or another setting.
    `marker` finds every process the command starts (stop_all)."""
    path = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep)
            if p.startswith("/") and ws.root.resolve() != Path(p) and ws.root.resolve() not in Path(p).parents]
    return {"PATH": os.pathsep.join(path), "LANG": os.environ.get("LANG", "C.UTF-8"), "TERM": "dumb",
            "HOME": "/tmp" if ws.sandbox else os.environ.get("HOME", "/"), "TINY_AGENT_COMMAND": marker,
            "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.bareRepository", "GIT_CONFIG_VALUE_0": "explicit"}


def bash(ws: Workspace, command: str) -> str:
    """Run a shell command in the workspace: asked first unless it is known to be harmless, no
    terminal input, its output bounded as it is read, and every process it started stopped at the
    end or at the timeout."""
    if "\0" in command:
        raise ValueError("embedded null byte")
    named = any(str(p.parent) in command for p in ws.protected)
    if named or re.search(r"\.local/state/tiny-agent|XDG_STATE_HOME", command):
        raise ToolError("the agent's own records (its session and archive) cannot be touched by a command")
    why = None if command in ws.allowed else needs_asking(command)
    answer = ws.approve(f"[tool] {printable(command, 200)} ({why}): run it?") if why else "y"
    if answer == "a":
        ws.allowed.add(command)
    elif answer != "y":
        raise ToolError(f"the user did not allow this command ({why}): {command}")
    marker = os.urandom(8).hex()
    proc = subprocess.Popen(shell_argv(ws, command), cwd=ws.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, env=command_env(ws, marker))
    try:
        head, tail, dropped, code = read_bounded(proc, ws.timeout, lambda: stop_all(proc, marker))
    finally:
        stop_all(proc, marker)
        proc.stdout.close()
    if code is None:
        raise ToolError(f"the command ran longer than {ws.timeout:g} s and was stopped: {command}")
    return cap(f"exit code {code}\n".encode() + head, tail, dropped)


def read_bounded(proc: subprocess.Popen, timeout: float, stop: Callable[[], None], limit: int = OUTPUT_CAP):
    """(head, tail, bytes dropped between them, exit code or None at the timeout): the output read
    as it comes, never more than `limit` bytes of it kept. When the command exits or times out,
    `stop` ends all it started, and what is left in the pipe is read without waiting for more."""
    head, tail, dropped, half = b"", b"", 0, limit // 2
    deadline, fd = time.monotonic() + timeout, proc.stdout.fileno()

    def keep(chunk: bytes) -> None:
        nonlocal head, tail, dropped
        room = max(0, half - len(head))
        head, tail = head + chunk[:room], tail + chunk[room:]
        dropped, tail = dropped + max(0, len(tail) - half), tail[-half:]
    while proc.poll() is None and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.1)[0]:
            chunk = os.read(fd, 65536)
            keep(chunk)
            if not chunk:  # the command closed its output and runs on: wait for it, within the timeout
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.0, deadline - time.monotonic()))
    code = proc.poll()
    stop()
    for _ in range(64):  # at most a full pipe is left once every writer is stopped
        chunk = os.read(fd, 65536) if select.select([fd], [], [], 0)[0] else b""
        if not chunk:
            break
        keep(chunk)
    return head, tail, dropped, code


def stop_all(proc: subprocess.Popen, marker: str) -> None:
    """Stop the command and every process it started: its process group, and any process that left
    the group (setsid, a double fork) but still carries the command's marker in its environment."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    found = True
    while found:  # until a pass finds none: one killed while the pass ran may have started another
        found = False
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
                if f"TINY_AGENT_COMMAND={marker}".encode() in f.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
                    found = True
    proc.wait()


def open_folder(ws: Workspace, parts: list[str], create: bool = False) -> int:
    """The folder holding the path `parts`, opened name by name from the workspace root without
    following a symbolic link, so a folder swapped for a link midway leads nowhere outside."""
    fd = os.open(ws.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in parts[:-1]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
            folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = folder
        return fd
    except OSError as error:
        os.close(fd)
        raise refusal("/".join(parts), error) from None


def refusal(path: str, error: OSError) -> ToolError:
    """What the model is told when a path cannot be opened, in its words."""
    if error.errno in (errno.ELOOP, errno.ENOTDIR):
        return ToolError(f"path {path!r} goes through a symbolic link (never followed) or a file")
    return ToolError(f"no file at {path}" if error.errno == errno.ENOENT else f"{path}: {error.strerror}")


def open_file(ws: Workspace, path: str) -> tuple[int, int]:
    """(descriptor, size) of a regular file, opened without blocking (a FIFO never hangs) and
    without following a symbolic link; anything else is refused before it is read."""
    parts = ws.path(path)
    folder = open_folder(ws, parts)
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=folder)
    except OSError as error:
        raise refusal(path, error) from None
    finally:
        os.close(folder)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ToolError(f"{path} is not a regular file" + (" (a folder)" if stat.S_ISDIR(info.st_mode) else ""))
    return fd, info.st_size


def read_file(ws: Workspace, path: str) -> str:
    """A text file's head and tail within the cap, read without reading the rest."""
    fd, size = open_file(ws, path)
    try:
        half = OUTPUT_CAP // 2
        head = os.pread(fd, OUTPUT_CAP if size <= OUTPUT_CAP else half, 0)
        tail = os.pread(fd, half, size - half) if size > OUTPUT_CAP else b""
    finally:
        os.close(fd)
    if b"\0" in head + tail:
        return f"{path} is a binary file ({size:,} bytes); it is not shown"
    return cap(head, tail, max(0, size - OUTPUT_CAP))


def write_file(ws: Workspace, path: str, content: str) -> str:
    data = content.encode("utf-8")  # fails here, on a lone surrogate, before the file is touched
    replace_file(ws, path, data)
    return f"wrote {len(content):,} chars to {path}"


def replace_file(ws: Workspace, path: str, data: bytes) -> None:
    """Write a temporary file beside the target and rename it over the target: never through a
    hard link or into a FIFO or device, never half-written."""
    parts = ws.path(path, writing=True)
    folder = open_folder(ws, parts, create=True)
    temporary = f".{parts[-1]}.{os.urandom(4).hex()}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"{path} is not a regular file")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)
        os.close(folder)


EDIT_LIMIT = 5_000_000  # bytes: edit_file reads the whole file, so it refuses a larger one


def whole_text(ws: Workspace, path: str, limit: int = EDIT_LIMIT) -> str:
    """A file's whole text, strictly UTF-8 (never read_file's capped view), up to `limit` bytes."""
    fd, size = open_file(ws, path)
    try:
        if size > limit:
            raise ToolError(f"{path} is {size:,} bytes, too large to edit (at most {limit:,})")
        return os.pread(fd, size, 0).decode("utf-8")
    finally:
        os.close(fd)


def edit_file(ws: Workspace, path: str, old: str, new: str) -> str:
    """Replace one exact occurrence, so an ambiguous edit is refused rather than guessed."""
    text = whole_text(ws, path)
    if text.count(old) != 1:
        raise ToolError(f"`old` must occur exactly once in {path}; it occurs {text.count(old)} times")
    replace_file(ws, path, text.replace(old, new).encode("utf-8"))
    return f"edited {path}"


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
]


def run_tool(ws: Workspace, name: str, arguments: str) -> str:
    """Run one call; every failure becomes a result the model can read, and the loop goes on."""
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise ToolError("arguments must be a JSON object")
        if name not in TOOLS:
            raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}, compact")
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


# --- The model and one task (lesson 02) ------------------------------------------------------


REPLY_LIMITS = (16_000_000, 64)  # characters of a reply, and how deep tool-call arguments may nest
OPENAI_FIELDS = {"role", "content", "refusal", "annotations", "audio", "function_call", "tool_calls"}


def read_reply(body) -> dict:
    """The one reader at the edge: a reply, raw JSON text or parsed, becomes an assistant message
    (the server's prompt count as `usage`) or a ServerReplyError naming what was sent."""
    if isinstance(body, (str, bytes)) and len(body) > REPLY_LIMITS[0]:
        raise ServerReplyError(f"a reply of {len(body):,} characters, over {REPLY_LIMITS[0]:,}")
    try:
        body = json.loads(body) if isinstance(body, (str, bytes)) else body
    except (ValueError, RecursionError):
        raise ServerReplyError(f"a reply that is not whole JSON: {shown(body)}") from None
    choices = body.get("choices") if isinstance(body, dict) else None
    message = choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise ServerReplyError(f"a reply without a message: {shown(body)}")
    counted = body["usage"].get("prompt_tokens") if isinstance(body.get("usage"), dict) else None
    return {**assistant_message(message), "usage": counted if type(counted) is int else None}


def assistant_message(message: dict) -> dict:
    """The only shape the rest of the code knows: text, calls each with an id and JSON-string
    arguments, and the string fields a server adds (reasoning_content) as it sent them."""
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    reply = {"role": "assistant", "content": safe_text(content) if isinstance(content, str) else ""}
    reply.update({k: safe_text(v) for k, v in message.items() if isinstance(v, str) and v and k not in OPENAI_FIELDS})
    calls = message.get("tool_calls") or []
    calls = [calls] if isinstance(calls, dict) else calls  # one call sent as an object
    if not isinstance(calls, list):
        raise ServerReplyError(f"tool_calls that are not a list: {shown(calls)}")
    ids: set[str] = set()
    return {**reply, "tool_calls": [tool_call(c, ids) for c in calls]} if calls else reply


def tool_call(call, ids: set[str]) -> dict:
    """A name, arguments of any JSON type as a JSON string, nesting bounded, and an id made up here
    when the server sent none or a used one: OpenAI refuses a null id, so every later request fails."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ServerReplyError(f"a tool call without a function name: {shown(call)}")
    arguments = function.get("arguments")
    try:
        value, depth = [json.loads(arguments) if isinstance(arguments, str) else arguments], 0
        while value and depth <= REPLY_LIMITS[1]:  # one level at a time, no recursion
            value, depth = [v for x in value if isinstance(x, (dict, list))
                            for v in (x.values() if isinstance(x, dict) else x)], depth + 1
    except ValueError:
        depth = 0  # not JSON: the tool's result tells the model so
    except RecursionError:
        depth = REPLY_LIMITS[1] + 1
    if depth > REPLY_LIMITS[1]:
        raise ServerReplyError(f"tool-call arguments nested deeper than {REPLY_LIMITS[1]} levels")
    given = call.get("id")
    given = given if isinstance(given, str) and given and given not in ids else f"call_{os.urandom(6).hex()}"
    ids.add(given)
    arguments = arguments if isinstance(arguments, str) else json.dumps({} if arguments is None else arguments)
    return {"id": given, "type": "function",
            "function": {"name": safe_text(function["name"]), "arguments": safe_text(arguments)}}


def shown(sent) -> str:
    """What a server sent, in one short line (nesting shown only a few levels deep)."""
    return printable(sent if isinstance(sent, str) else reprlib.repr(sent), 120)


def openai_model(client, model: str, prepare: Callable = list, **request) -> Callable[[list[dict], list[dict]], dict]:
    """A model is any function (messages, tools) -> assistant message; this one asks a server and
    reads its raw reply with read_reply. `prepare` turns the history into what is sent; `request`
    adds options such as max_tokens."""
    def call(messages: list[dict], tools: list[dict]) -> dict:
        def create():
            return client.chat.completions.with_raw_response.create(model=model, messages=prepare(messages), **(
                {"tools": tools, "tool_choice": "auto"} if tools else {}), **request).http_response.text
        try:
            return read_reply(create())
        except Exception as error:  # OpenAI's reasoning models refuse max_tokens: the other name from now on
            if getattr(error, "status_code", 0) != 400 or "max_completion_tokens" not in str(error) or \
                    "max_tokens" not in request:
                raise
            request["max_completion_tokens"] = request.pop("max_tokens")
            return read_reply(create())
    return call


class ServerReplyError(Exception):
    """A reply (or a saved message) that is not a chat completion's; its text names what was sent."""


def one_task(argv: list[str] | None = None) -> int:
    """The tutorial's agent on its own: one task, in this folder, against the server that
    OPENAI_BASE_URL and OPENAI_API_KEY name. A fork of Layer 1 ends with `sys.exit(one_task())`;
    the whole agent starts at `main` (Layer 2)."""
    task = " ".join(sys.argv[1:] if argv is None else argv) or "Say what the files in this folder are for."
    session = Session([{"role": "system", "content": SYSTEM_PROMPT}], tutorial_compaction())
    model = openai_model(make_client(), os.environ.get("MODEL") or "gpt-4o-mini")
    print(CONTROL.sub("", run(session, task, model, Workspace(Path(".")))))
    return 0


# ════════════════════════════════════════════════════════════════════════════════════════════
# Layer 2 · Real servers: what is sent, refusals, settings, the REPL, sessions, the demo
# ════════════════════════════════════════════════════════════════════════════════════════════

import argparse  # noqa: E402  each layer's imports stand at its start, so Layer 1 reads alone
import fcntl  # noqa: E402
import functools  # noqa: E402
import hashlib  # noqa: E402
import importlib  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import asdict, fields, replace  # noqa: E402

from compact import (REASONING_FIELDS, Archive, CompactState, ContextOverflowError,  # noqa: E402
                     check_messages, compaction_stats, content_text, estimate_tokens, is_summary, model_configured,
                     request_tokens, summarize_extractive, system_head, POLICIES, Compactor, pins_text)

# --- Requests: what every OpenAI-compatible server and chat template accepts (lesson 03) ----


def outgoing(messages: list[dict], send_reasoning: bool = True) -> list[dict]:
    """The one normalisation before sending. Assistant text is always a string (llama.cpp's server
    answers HTTP 500 to null); parallel calls go one at a time and two user messages in a row become
    one, since Llama 3.2's template refuses several calls in one turn and Gemma's and Mistral's
    refuse turns that do not alternate; reasoning goes back as it came (DeepSeek answers 400
    without it after a tool call), or never, for servers that reject it (SEND_REASONING=0)."""
    out: list[dict] = []
    for m in one_call_at_a_time(messages):
        if m.get("role") == "assistant":
            m = {**m, "content": content_text(m)}
            if not send_reasoning:
                m = {k: v for k, v in m.items() if k not in REASONING_FIELDS}
        if out and m.get("role") == "user" and out[-1].get("role") == "user":
            m = {"role": "user", "content": content_text(out.pop()) + "\n\n" + content_text(m)}
        out.append(m)
    return out


def one_call_at_a_time(messages: list[dict]) -> list[dict]:
    """An assistant message with several tool calls, and its results, as one assistant message and
    its result per call, in the same order: what every chat template can render."""
    out: list[dict] = []
    i = 0
    while i < len(messages):
        m, j = messages[i], i + 1
        calls = m.get("tool_calls") or []
        if m.get("role") != "assistant" or len(calls) < 2:
            out.append(m)
            i += 1
            continue
        while j < len(messages) and messages[j].get("role") == "tool":
            j += 1
        results = list(messages[i + 1:j])
        for k, call in enumerate(calls):
            first = {**m, "tool_calls": [call]} if k == 0 else {"role": "assistant", "content": "",
                                                                 "tool_calls": [call]}
            answer = next((r for r in results if r.get("tool_call_id") == call.get("id")), None)
            out += [first] + ([results.pop(results.index(answer))] if answer is not None else [])
        out += results  # results that answer no call of this message stay, for the server to judge
        i = j
    return out


def recall(ws: Workspace, query: str) -> str:
    """The recall tool: search the archive of compacted turns, or read one by its number (#12)."""
    if ws.archive is None:
        raise ToolError("nothing is archived in this run")
    return ws.archive.read(int(query[1:])) if re.fullmatch(r"#\d+", query) else ws.archive.search(query)


TOOLS["recall"] = recall
TOOL_SCHEMAS.append(_schema("recall", "Search the archive of compacted turns; pass a number like #12 to read one.",
                            query="words to find, or #N"))
# The schemas go with every request, rendered by the server's template. Counted as their JSON: on
# llama.cpp's function-calling template a first request was estimated within 3% (tests/live).
SCHEMA_TOKENS = estimate_tokens(json.dumps(TOOL_SCHEMAS))
# A refusal that no retry can change: it is not sent again.
PERMANENT = re.compile(r"requires --jinja|tools param requires|does not support tools", re.I)


RETRY_BOUND = 60  # seconds: the longest wait a server's Retry-After gets before one more try


def retried_once(call: Callable, log=print) -> Callable:
    """A request that failed for a passing reason (a timeout, a dropped connection, HTTP 429 or 5xx)
    is sent once more, after the wait its Retry-After asks (up to RETRY_BOUND, shown; Ctrl-C cancels
    it), as the openai client would; a refusal that will not change is not (llama-server --no-jinja
    answers HTTP 500 to every request with tools)."""
    import openai

    def once_more(messages: list[dict], tools: list[dict]) -> dict:
        try:
            return call(messages, tools)
        except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as error:
            wait = asked_wait(error)
            if PERMANENT.search(str(error)) or wait > RETRY_BOUND:
                raise
            if wait:
                log(f"[retry] the server asks to wait {wait:g} s (HTTP {error.status_code}): waiting, Ctrl-C cancels")
                time.sleep(wait)
            return call(messages, tools)
    return once_more


def asked_wait(error: Exception) -> float:
    """The seconds a server's Retry-After header asks for (a number or an HTTP date); 0 without one."""
    from email.utils import parsedate_to_datetime
    response = getattr(error, "response", None)
    value = response.headers.get("retry-after", "") if response is not None else ""
    try:
        return max(0.0, float(value))
    except ValueError:
        with contextlib.suppress(TypeError, ValueError):
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    return 0.0


def server_model(config: Config, log=print) -> Callable:
    """The model for a real server: the normalised request, max_tokens as the budget reserved, the
    seconds while it thinks, and one line when the server's count shows the tools were dropped."""
    model = retried_once(openai_model(make_client(config.timeout, max_retries=0), config.model,
                                      prepare=lambda m: outgoing(m, config.send_reasoning),
                                      max_tokens=config.reserved_output), log)
    warned: list[bool] = []  # the dropped-tools line is said once a session

    def call(messages: list[dict], tools: list[dict]) -> dict:
        with waiting():
            reply = model(messages, tools)
        if tools and not warned and tools_dropped(messages, reply):
            warned.append(True)
            log(DROPPED_TOOLS.format(counted=reply["usage"], estimate=request_tokens(messages, None, SCHEMA_TOKENS)))
        return reply
    return call


DROPPED_TOOLS = ("[tools] the server counted {counted:,} prompt tokens for a request estimated at ~{estimate:,} "
                 "with the tool schemas: its chat template seems to have dropped the tool schemas, so the model "
                 "cannot call tools. Use a model whose template renders tools, `llama-server --jinja`, or "
                 "llama-cpp-python's `--chat_format chatml-function-calling`.")


def tools_dropped(messages: list[dict], reply: dict) -> bool:
    """The server saw far fewer tokens than the messages and the schemas hold, and no tool call has
    come back yet: the signature of a chat template that renders no tools (llama-server, SmolLM2)."""
    counted = reply.get("usage") or 0
    return (counted > 0 and counted + SCHEMA_TOKENS // 2 < request_tokens(messages, None, SCHEMA_TOKENS)
            and not any(m.get("tool_calls") for m in [*messages, reply]))


# --- Strategies: the one place that maps --strategy to a compaction (lessons 02-03) ----------

STRATEGIES = tuple(POLICIES)  # every policy of the one engine, none (no compaction) and the sawtooth first


def make_compaction(config: Config, summarize: Callable | None = None, archive: Archive | None = None,
                    ws: Workspace | None = None) -> Compaction:
    """compact.Compactor with the policy --strategy names (the sawtooth by default), which the loop
    calls directly: the window, the reply's reserve and the tool schemas as its budget, the recent
    files it re-attaches read from the workspace, and a large new tool output admitted as the policy
    says. `summarize` None: the model if configured, else the extractive summary."""
    compactor = Compactor(context_window=config.context_window, reserved_output=config.reserved_output,
                          policy=config.strategy, fixed_tokens=SCHEMA_TOKENS, summarize=summarize, archive=archive,
                          reattach=functools.partial(current_text, ws) if ws else None,
                          precise_tools=config.precise_tools,  # --threshold and --keep-recent where the policy has them
                          **{name: getattr(config, name) for name in ("threshold", "keep_recent")
                             if name in POLICIES[config.strategy]})
    return Compaction(config.strategy, compactor.compact, refused=compactor.refused,
                      describe=functools.partial(describe_compaction, compactor),
                      state=compactor.state, archive=archive, guard=compactor.guard,
                      meter=functools.partial(trigger_meter, compactor))


def current_text(ws: Workspace, path: str, max_chars: int = 20_000) -> str | None:
    """A file's current text for the engine to re-attach after a compaction, or None."""
    try:
        return whole_text(ws, path, max_chars)
    except (ToolError, OSError, ValueError):
        return None


def trigger_meter(compactor: Compactor, messages: list[dict]) -> tuple[int, int, float]:
    """For /context: the request's size at which the engine compacts, the tokens of the pinned
    rules, and the trigger's share of the window; a policy with no steps never compacts."""
    if not compactor.layers:
        return compactor.budget.context_window, 0, 0.0
    head = estimate_tokens(messages[:system_head(messages)]) - 3
    trigger = int(compactor.trigger * compactor.budget.effective(messages)) + compactor.fixed_tokens + head
    return trigger, estimate_tokens(pins_text(compactor.state.pinned, 10**9)), compactor.trigger


def describe_compaction(compactor: Compactor, before: list[dict], after: list[dict], usage) -> str:
    """The rest of the [compact] line: the request's size before and after; the ladder's steps."""
    counted = "counted by the server, plus new messages" if usage else "estimated"
    line = (f", request ~{request_tokens(before, usage, SCHEMA_TOKENS):,} tokens ({counted}) → "
            f"~{request_tokens(after, None, SCHEMA_TOKENS):,} estimated")
    for name, was, now, _ in compactor.report:
        line += f"\n          {name:<11} " + (f"{was - now:>+8,} tokens removed" if was > now else "nothing to do")
    return line


# --- Configuration: from the environment, which python-dotenv fills from .env ----------------


class ConfigError(Exception):
    """Something the user can fix in .env or on the command line; printed as one line."""


@dataclass(frozen=True)
class Config:
    model: str = "gpt-4o-mini"  # MODEL
    base_url: str | None = None  # OPENAI_BASE_URL; None is api.openai.com
    context_window: int = 128_000  # CONTEXT_WINDOW, in tokens
    strategy: str = "sawtooth"  # --strategy, one of STRATEGIES (a design document's preset too)
    threshold: int = THRESHOLD  # --threshold: the sawtooth compacts above this many messages
    keep_recent: int = KEEP_RECENT  # --keep-recent: messages the sawtooth keeps whole
    max_iterations: int = 50  # --max-iterations: model calls for one task
    send_reasoning: bool = True  # SEND_REASONING=0 for servers that reject `reasoning_content`
    timeout: float = 120.0  # REQUEST_TIMEOUT: seconds to wait for one model reply
    max_output: int = 0  # MAX_OUTPUT_TOKENS: the reply's limit and the budget's reserve; 0: 1/8 of the window
    precise_tools: tuple[str, ...] = ()  # PRECISE_TOOLS, --precise-tools: results no step may compress
    bash_timeout: float = BASH_TIMEOUT  # BASH_TIMEOUT: seconds a shell command may run

    @property
    def reserved_output(self) -> int:
        return self.max_output or self.context_window // 8


YES, NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def load_config(env: dict | None = None, **overrides) -> Config:
    """Read the settings, refusing values that cannot work, each with a line that says what to do."""
    env = os.environ if env is None else env
    base_url = env.get("OPENAI_BASE_URL") or None
    if base_url:
        check_base_url(base_url)
    reasoning = (env.get("SEND_REASONING") or "1").strip().lower()
    if reasoning not in YES + NO:
        raise ConfigError(f"SEND_REASONING={reasoning!r} must be one of {', '.join(YES + NO)}")
    values = {field: whole_number(env, name, default, least) for name, (field, default, least) in NUMBERS.items()}
    values.pop(None)  # SUMMARY_CONTEXT_WINDOW: checked here, read by compact.summary_window
    values.update(model=env.get("MODEL") or Config.model, base_url=base_url, send_reasoning=reasoning in YES,
                  precise_tools=tuple(t for t in re.split(r"[,\s]+", env.get("PRECISE_TOOLS") or "") if t))
    values.update({k: v for k, v in overrides.items() if v is not None})
    config = Config(**values)
    problems = [(config.strategy not in STRATEGIES, f"unknown strategy {config.strategy!r}; choose one of "
                 f"{', '.join(STRATEGIES)}"),
                (config.keep_recent < 1, f"--keep-recent {config.keep_recent}: keep at least 1 message"),
                (config.threshold <= config.keep_recent, f"--threshold {config.threshold} must be larger than "
                 f"--keep-recent {config.keep_recent}"),
                (config.max_iterations < 1, f"--max-iterations {config.max_iterations}: allow at least 1"),
                (config.reserved_output * 2 >= config.context_window, f"MAX_OUTPUT_TOKENS={config.max_output} "
                 f"leaves no room in CONTEXT_WINDOW={config.context_window}: keep it under half the window")]
    for wrong, message in problems:
        if wrong:
            raise ConfigError(message)
    return config


# Every number a setting holds, read and refused the same way: name -> (Config field, default, least).
NUMBERS = {"CONTEXT_WINDOW": ("context_window", 128_000, 1_000), "REQUEST_TIMEOUT": ("timeout", 120, 1),
           "MAX_OUTPUT_TOKENS": ("max_output", 0, 0), "BASH_TIMEOUT": ("bash_timeout", int(BASH_TIMEOUT), 1),
           "SUMMARY_CONTEXT_WINDOW": (None, 1_000, 1_000)}


def whole_number(env: dict, name: str, default: int, least: int) -> int:
    value = env.get(name) or str(default)
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


def load_env(path: Path | None = None) -> Path | None:
    """Load .env with python-dotenv, from the current folder, else from the agent's own folder;
    a line it cannot parse is refused instead of skipped. Returns the file read."""
    from dotenv import load_dotenv
    from dotenv.parser import parse_stream
    found = path or next((p for p in (Path.cwd() / ".env", HERE / ".env") if p.is_file()), None)
    if found is None or not found.is_file():
        return None
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
    return found


# --- Sessions: the agent's records live outside the workspace, saved after every turn --------


def records_folder(ws_root: Path, label: str = "") -> Path:
    """Where the session file and the archive of one workspace live: under $XDG_STATE_HOME (or
    ~/.local/state), outside the workspace, where bash and the file tools cannot reach them."""
    root = ws_root.resolve()
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "tiny-agent"
    key = hashlib.sha256(str(root).encode()).hexdigest()[:10]
    folder = base / "-".join(filter(None, [root.name or "root", key, label]))
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def new_session(config: Config, summarize: Callable | None = None, archive_dir=None,
                ws: Workspace | None = None) -> Session:
    """A session with the system prompt and the strategy's compaction; an archive when a folder is
    given, which the recall tool of `ws` then reads."""
    archive = Archive.in_folder(archive_dir) if archive_dir else None
    if ws is not None:
        ws.archive = archive
    compaction = make_compaction(config, summarize, archive, ws)
    return Session([{"role": "system", "content": SYSTEM_PROMPT}], compaction, config.max_iterations)


def save_session(session: Session, config: Config, path: Path) -> Path:
    """Write the history, the strategy and the compaction's state to this run's own file,
    atomically (a crash leaves the old file whole), owner-only. No setting or key is written."""
    c = session.compaction
    data = {"version": 2, "strategy": c.name, "messages": session.messages,
            "state": asdict(c.state) if c.state is not None else None,
            "archive": str(c.archive.path) if c.archive is not None else None}
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".session-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    return path


def saved_sessions(folder: Path) -> list[Path]:
    """The sessions saved for this workspace, one file a run, the last saved last."""
    return sorted(folder.glob("session*.json"), key=lambda p: (p.stat().st_mtime_ns, p.name))


def start_records(folder: Path, resume: bool) -> tuple[Path, dict | None]:
    """This run's own session file (never one saved before) and the saved session to continue; a
    lock on the records, held until the process exits (its descriptor is never closed); one line
    when a saved session is not continued or another agent holds the lock."""
    lock = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        print("[session] another agent is using this workspace's session: this run is saved in a file of its own")
    saved = read_session(folder) if resume else None
    earlier = [] if resume else saved_sessions(folder)
    if earlier:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(earlier[-1].stat().st_mtime))
        print(f"[session] this workspace has a session saved at {when}: it is kept, and --resume continues it")
    return folder / f"session-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json", saved


def read_session(folder: Path) -> dict:
    """The session saved last, checked through before anything uses it; a damaged file gets one
    line naming the file and what is wrong, and is left as it is."""
    sessions = saved_sessions(folder)
    if not sessions:
        raise ConfigError(f"no saved session for this workspace (in {folder}); run without --resume first")
    path = sessions[-1]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError(f"it holds a {type(data).__name__}, not an object")
        check_messages(data.get("messages"))  # a list of dicts, each with a role a server knows
        for i, m in enumerate(data["messages"]):
            check_saved(i, m)
        if not isinstance(data.setdefault("strategy", "sawtooth"), str) or data["strategy"] not in STRATEGIES:
            raise ValueError(f"unknown strategy {data['strategy']!r}")
        data["state"] = saved_state(data.get("state"))
        if not isinstance(data.get("archive") or "", str):
            raise TypeError("archive is not a path")
    except (OSError, ValueError, TypeError, ServerReplyError) as error:
        raise ConfigError(f"{path} is damaged and was left untouched ({first_line(error, 100)}); move it away "
                          "to start afresh") from None
    return data


def check_saved(i: int, m: dict) -> None:
    """A saved message has text where text goes, and its calls read back unchanged through the
    reader at the edge (an id, a function name, arguments as a JSON string)."""
    try:
        if not isinstance(m.get("content"), (str, list, type(None))) or (
                m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str)) or (
                m["role"] == "assistant" and assistant_message(m).get("tool_calls", []) != (m.get("tool_calls") or [])):
            raise ValueError("its content, tool_call_id or tool calls are not what a server sends")
    except (ValueError, ServerReplyError) as error:
        raise ValueError(f"message {i}: {error}") from None


def saved_state(state) -> CompactState | None:
    """The compaction's saved state, each field of its default's type (list[str]: lists of text)."""
    known = {f.name: f for f in fields(CompactState)}
    for name, value in state.items() if isinstance(state, dict) else [] if state is None else [("state", state)]:
        f = known.get(name)
        kind = type(f.default_factory() if callable(f.default_factory) else f.default) if f else type(None)
        if f is None or not isinstance(value, kind) or (f.type == "list[str]" and not all(isinstance(v, str) for v in value)):
            raise TypeError(f"state field {name!r} is a {type(value).__name__}, not a {kind.__name__}")
    return CompactState(**state) if state is not None else None


def resume_session(session: Session, data: dict) -> None:
    """Continue a saved session: its history (after the system prompt, when the file has none), its
    compaction's state and its archive file."""
    session.messages = data["messages"] if system_head(data["messages"]) else session.messages[:1] + data["messages"]
    c = session.compaction
    if data["state"] is not None and c.state is not None and data["strategy"] == c.name:
        c.state.__dict__.update(data["state"].__dict__)
    archive = Path(data["archive"]) if data.get("archive") else None
    # only ever append to an archive inside the agent's own records folder
    if archive and c.archive is not None and archive.parent == c.archive.path.parent:
        c.archive.path = archive


# --- The REPL and its commands ---------------------------------------------------------------

HELP = """/help                 this list
/context              what the next request holds, by kind, against the window, and the compactions so far
/compact [focus]      compact now, keeping what matters for the focus
/strategy NAME        switch the compaction strategy for the rest of the session
/exit                 quit (Ctrl-D too); Ctrl-C stops the current turn, and at a prompt clears the line"""


COMMANDS = ("/help", "/context", "/compact", "/strategy", "/exit", "/quit")


def read_line(prompt: str) -> str | None:
    """One line from the terminal, with line editing and history where Python has readline, so a
    paste of any length arrives whole; bytes that are not UTF-8 become U+FFFD. None on Ctrl-D."""
    with contextlib.suppress(ImportError):
        importlib.import_module("readline")  # importing it turns line editing on for input()
    tolerant_stdin()
    try:
        lines = [input(prompt)]
    except EOFError:
        print()
        return None
    while pasting():  # the other lines of a paste are already waiting: they belong to this question
        try:
            lines.append(input(""))
        except EOFError:
            break
    return safe_text("\n".join(lines))


def pasting(wait: float = 0.05) -> bool:
    """True when more typed input is already waiting on the terminal, as the lines after the first
    of a paste are; a person typing the next question is never that fast."""
    return sys.stdin.isatty() and bool(select.select([sys.stdin], [], [], wait)[0])


def repl(session: Session, config: Config, model: Callable, ws: Workspace, path: Path | None = None,
         read=read_line) -> None:
    """Questions one after another; the history and the compaction's state carry across them. A
    turn that fails or is interrupted ends with one line, and the session goes on."""
    print(f"[repl] model {config.model}, strategy {session.compaction.name}. /help lists the commands; "
          "/exit or Ctrl-D quits.")
    while True:
        try:
            line = read("you> ")
        except KeyboardInterrupt:
            print()
            continue
        if line is None:
            return
        line = line.strip()
        if not line:
            continue
        word = line.split()[0]
        if word in COMMANDS or (re.fullmatch(r"/\w*", word) and "\n" not in line):  # a typo: asked about
            config, done = command(session, config, line, ws)
        else:  # a paste, or a path, that starts with "/" is a question
            if line.startswith("/"):
                print(f"[repl] {line.split()[0][:40]} is not a command: sent as a question")
            done = turn(session, config, line, model, ws)
        if path is not None and len(session.messages) > 1:
            save_session(session, config, path)  # after every turn and command, /compact and /strategy too
        if done:
            return


def turn(session: Session, config: Config, question: str, model: Callable, ws: Workspace) -> bool:
    """One question in the REPL: its answer, or one line saying why there is none. A question the
    server never answered leaves the history, so a retry is not a second user message in a row."""
    import openai
    size = len(session.messages)
    try:
        print(f"agent> {CONTROL.sub('', run(session, question, model, ws)) or EMPTY}")
    except KeyboardInterrupt:  # the question stays, marked, so the next one is not merged into it
        if session.messages[-1].get("role") == "user":
            session.messages.append({"role": "assistant", "content": "[interrupted by the user before an answer]"})
        print("\n[interrupted] the turn was stopped; the question stays in the history, marked as interrupted")
    except (openai.OpenAIError, ServerReplyError, ContextOverflowError) as error:
        if len(session.messages) == size + 1 and session.messages[-1].get("role") == "user":
            session.messages.pop()  # unanswered: ↑ brings the question back to send it again
        close_turn(session.messages, f"[this turn ended with an error: {first_line(error, 120)}]")
        print(f"error: {diagnose(error, config)}")
    return False


EMPTY = "(the model's answer was empty)"


def command(session: Session, config: Config, line: str, ws: Workspace) -> tuple[Config, bool]:
    """Run one slash command; returns the (perhaps new) settings and whether to quit."""
    name, _, rest = line.partition(" ")
    if name in ("/exit", "/quit"):
        return config, True
    if name == "/context":
        print(context_meter(session, config))
    elif name == "/compact" and session.compaction.name == "none":
        print("[compact] --strategy none never compacts: /strategy sawtooth (or another) to compact")
    elif name == "/compact":
        before = session.messages
        try:
            compact_now(session, focus=rest.strip() or None, level=1)
            if session.messages is before:
                print(f"[compact] nothing to compact yet: {nothing_to_compact(session.messages)}")
        except KeyboardInterrupt:
            print("\n[interrupted] the compaction was stopped; the history is as it was")
        except ContextOverflowError as error:
            print(f"error: {error}")
    elif name == "/strategy" and rest.strip() in STRATEGIES:
        config, old = replace(config, strategy=rest.strip()), session.compaction
        session.compaction = make_compaction(config, archive=old.archive, ws=ws)
        for kept in ("compactions", "tokens_saved", "failures", "last_error", "window"):  # the statistics go on
            setattr(session.compaction.state, kept, getattr(old.state, kept))
        print(f"[strategy] {config.strategy} from now on")
    elif name == "/strategy":
        print(f"[strategy] {'unknown strategy ' + repr(rest.strip()) + '; ' if rest.strip() else ''}the current one "
              f"is {session.compaction.name}; choose one of {', '.join(STRATEGIES)}")
    elif name == "/help":
        print(HELP)
    else:
        print(f"unknown command {name}; the commands are:\n{HELP}")
    return config, False


def context_meter(session: Session, config: Config, width: int = 40) -> str:
    """What the next request holds, by kind, in tokens and as a share of the window; then the
    statistics every strategy shares (compact.compaction_stats)."""
    kinds = {"system prompt": 0, "tool schemas": SCHEMA_TOKENS, "summary": 0, "pinned constraints": 0,
             "tool results": 0, "other messages": 0}
    c = session.compaction
    config = replace(config, context_window=c.state.window or config.context_window)
    for i, m in enumerate(session.messages):
        kind = ("system prompt" if i < system_head(session.messages) else "summary" if is_summary(m)
                else "tool results" if m.get("role") == "tool" else "other messages")
        kinds[kind] += estimate_tokens([m]) - 3
    trigger, pins, rule = c.meter(session.messages) if c.meter else (config.context_window, 0, 0.0)
    kinds["summary"] -= min(pins, kinds["summary"])
    kinds["pinned constraints"] = pins
    window, total = config.context_window, sum(kinds.values())
    share = trigger / window
    counted = ""
    if session.usage:
        seen, n = session.usage
        current = len(seen) <= len(session.messages) and all(a is b for a, b in zip(seen, session.messages))
        counted = f"; the server counted {n:,} for the last request" + ("" if current else ", before a compaction")
    lines = [f"[context] ~{total:,} of {window:,} tokens ({total / window:.0%}); trigger at {share:.0%}" + (
        f" ({rule:.0%} of the window less the {config.reserved_output:,} kept for the reply)" if rule else "") + counted]
    for kind, size in kinds.items():
        lines.append(f"  {kind:<19} {size:>8,}  {'█' * round(width * size / window)}")
    mark = round(width * share)
    lines.append(f"  {'':<19} {'':>8}  {'·' * mark}▲ trigger{' ' * max(0, width - mark - 10)}| window")
    return "\n".join(lines + ["[stats] " + compaction_stats(c.state, c.guard)])


# --- The command line: the offline demo, one task, or a REPL ---------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """A wrong option is one line that says what to do, not five lines of usage."""
        self.exit(2, f"error: {message} (see python tiny_agent.py --help)\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; every option falls back to .env and then to the defaults in Config."""
    p = Parser(description="A tiny agent whose context is compacted on every iteration.")
    p.add_argument("task", nargs="?", help="one task to run; without it, a REPL (or the demo with no model)")
    p.add_argument("--strategy", choices=list(STRATEGIES), metavar="NAME",
                   help=f"how to compact: {', '.join(STRATEGIES)} (default: sawtooth)")
    p.add_argument("--preset", dest="strategy", choices=list(STRATEGIES), metavar="NAME",
                   help="the same as --strategy, for a design document's preset (evo-agent, five-layer, ...)")
    p.add_argument("--demo", action="store_true", help="run the offline demo model, even if a model is configured")
    p.add_argument("--repl", action="store_true",
                   help="with --demo: a REPL driven by the demo model, on a temporary copy")
    p.add_argument("--workspace", default=".", help="the folder the tools may touch (default: .)")
    p.add_argument("--yes", action="store_true", help="run every command without asking, not only the known read-only ones")
    p.add_argument("--resume", action="store_true", help="continue the session saved for this workspace")
    p.add_argument("--precise-tools", help="comma-separated tools whose results are never compressed (PRECISE_TOOLS)")
    p.add_argument("--max-iterations", type=int, help=f"stop after this many model calls (default: "
                   f"{Config.max_iterations}; the demo: {DEMO_ITERATIONS})")
    p.add_argument("--threshold", type=int, help=f"sawtooth: compact above this many messages (default: {THRESHOLD})")
    p.add_argument("--keep-recent", type=int, help=f"sawtooth: messages kept whole (default: {KEEP_RECENT})")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The demo without a model; with one, a task or a REPL. User errors end in one line."""
    import openai
    args = parse_args([safe_text(a) for a in (sys.argv[1:] if argv is None else argv)])
    config = None
    try:
        if read := load_env():
            print(f"[settings] read {read}")
        workspace = Path(args.workspace)
        if not workspace.is_dir():
            raise ConfigError(f"--workspace {args.workspace}: " + ("is a file, not a folder" if workspace.exists()
                                                                  else "no such folder"))
        precise = tuple(t for t in re.split(r"[,\s]+", args.precise_tools or "") if t) or None
        config = load_config(strategy=args.strategy, max_iterations=args.max_iterations, threshold=args.threshold,
                             keep_recent=args.keep_recent, precise_tools=precise)
        if args.demo or not model_configured():
            return demo(args, config)
        folder = records_folder(workspace)
        ws = Workspace(workspace, approve=(lambda _: "y") if args.yes else ask_on_terminal, protected=(folder,),
                       timeout=config.bash_timeout)
        path, saved = start_records(folder, args.resume)
        if saved and not args.strategy:
            config = replace(config, strategy=saved["strategy"])  # resume what the session chose
        session = new_session(config, archive_dir=folder / "archive", ws=ws)
        if saved:
            resume_session(session, saved)
            print(f"[resume] {len(session.messages)} messages, strategy {config.strategy}"
                  + (f" (the session was saved with {saved['strategy']}; its state starts afresh)"
                     if saved["strategy"] != config.strategy else ""))
        print(f"[shell] {shell_mode(ws)}")
        model = server_model(config)
        if args.task:
            try:  # saved before every request, and at the end whatever the end: an answer, an error, Ctrl-C
                answer = run(session, args.task, saving(model, session, config, path), ws)
            finally:
                save_session(session, config, path)
            finish(session, answer)
            return 3 if answer == stopped(session.max_iterations) else 0
        repl(session, config, model, ws, path)
        return 0
    except ConfigError as error:
        return fail(f"configuration: {error}")
    except (openai.OpenAIError, ServerReplyError, ContextOverflowError) as error:
        return fail(diagnose(error, config or Config()))
    except KeyboardInterrupt:
        return fail("interrupted")
    except BrokenPipeError:  # `python tiny_agent.py ... | head`: the reader left, nothing to say
        sys.stdout = None
        return 0


def saving(model: Callable, session: Session, config: Config, path: Path) -> Callable:
    """The model, with the session saved before each request: a run that dies keeps its turns."""
    def call(messages: list[dict], tools: list[dict]) -> dict:
        save_session(session, config, path)
        return model(messages, tools)
    return call


def shell_mode(ws: Workspace) -> str:
    if ws.sandbox:
        return "bash runs inside bubblewrap: only the workspace is writable, no network"
    return "bash is NOT confined (install bubblewrap to confine it); commands not known to be read-only are asked about"


def diagnose(error: Exception, config: Config) -> str:
    """One line that says what went wrong with the server, and what to change."""
    import openai
    where, root = config.base_url or "api.openai.com", api_root(config.base_url or "api.openai.com")
    if isinstance(error, openai.APITimeoutError):
        return (f"the server at {where} did not answer in {config.timeout:g} s, twice (REQUEST_TIMEOUT sets "
                "the wait)")
    if isinstance(error, openai.APIConnectionError):
        return connection_trouble(error, where)
    if isinstance(error, openai.AuthenticationError):
        return "the server refused the API key: set OPENAI_API_KEY in .env"
    if isinstance(error, openai.APIStatusError) and PERMANENT.search(str(error)):
        return (f"the server refuses requests with tools ({first_line(error, 80)}): restart llama-server with "
                "--jinja, or use a server and model whose chat template renders tools")
    if isinstance(error, openai.NotFoundError):
        if re.search(r"model", str(error), re.I) and not re.search(r"File Not Found|<html|Cannot POST", str(error)):
            return f"the server has no model {config.model!r}: set MODEL in .env"
        return (f"the server at {where} has no chat endpoint there (HTTP 404): OPENAI_BASE_URL usually ends "
                f"in /v1, for example {root}")
    if isinstance(error, openai.RateLimitError):
        wait = asked_wait(error)
        return (f"the server limits requests (HTTP 429{f', it asks to wait {wait:g} s' if wait else ''}): "
                f"{body_line(error)}; ask again later")
    if isinstance(error, openai.APIStatusError):
        return f"the server answered HTTP {error.status_code}: {body_line(error)}"
    if isinstance(error, ServerReplyError):
        hint = "" if where.rstrip("/").endswith("/v1") else f"; OPENAI_BASE_URL usually ends in /v1 ({root})"
        return f"the server at {where} did not answer like an OpenAI-compatible server: {first_line(error, 120)}{hint}"
    return first_line(error, 300)


def api_root(url: str) -> str:
    """The /v1 an OpenAI-compatible URL belongs under, the full endpoint URL included."""
    return re.sub(r"(/v1)?(/chat/completions)?/*$", "", url) + "/v1"


def connection_trouble(error: Exception, where: str) -> str:
    """Refused, dropped, or https to a plain-HTTP server, told apart by what the connection raised."""
    import ssl
    causes = [error]
    while len(causes) < 10 and (causes[-1].__cause__ or causes[-1].__context__):
        causes.append(causes[-1].__cause__ or causes[-1].__context__)
    if any(isinstance(e, ssl.SSLError) for e in causes):
        return f"{where} does not speak https (it may be plain HTTP): try http:// in OPENAI_BASE_URL"
    if any(isinstance(e, ConnectionRefusedError) for e in causes):
        return f"nothing answers at {where} (connection refused): start the server or fix OPENAI_BASE_URL in .env"
    if any(type(e).__name__ in ("RemoteProtocolError", "ReadError") for e in causes):
        return (f"the server at {where} dropped the connection before its reply was whole, twice: see the server's "
                "log (did it crash or restart?), then ask again")
    return f"cannot reach {where} ({first_line(causes[-1], 80)}): start the server or fix OPENAI_BASE_URL in .env"


def body_line(error: Exception) -> str:
    """The first line of text an error's body holds: its message, or an HTML page's words."""
    body = getattr(error, "body", None)
    text = re.sub(r"^Error code: \d+( - )?", "", str(error)) or (body if isinstance(body, str) else
                                                                 json.dumps(body, default=str))
    lines = re.sub(r"(?is)<(script|style|head)\b.*?</\1>|<[^>]+>", "\n", text).splitlines()
    return printable(next((line for line in lines if line.strip()), text), 200)


def first_line(error: Exception, width: int = 160) -> str:
    text = " ".join(str(error).split())
    return text[:width] + ("…" if len(text) > width else "")


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


# --- The offline demo: a deterministic stand-in for a model, on a copy of this project -------

HERE = Path(__file__).resolve().parent
DEMO_TASK = "Survey this project's Python files: lines, functions, longest function, TODOs. Write REPORT.md."
DEMO_WINDOW, DEMO_ITERATIONS = 40_000, 100


class ContextLengthExceeded(Exception):
    """What the demo model raises, worded like a real server's HTTP 400, when a request is too long."""


@dataclass
class DemoModel:
    """The offline stand-in for a language model, and the only one in this project: a fixed,
    deterministic plan that surveys the project's Python files with real tool calls, reads the
    real results, and writes REPORT.md; asked again (the demo REPL), it surveys again. Like a real
    server it reports the prompt's size and refuses requests over `window`. Unlike a real model it
    keeps its findings in `notes`, so its report survives compaction."""

    window: int = DEMO_WINDOW
    queue: list[str] = field(default_factory=list)
    notes: dict[str, dict] = field(default_factory=dict)
    pending: dict[str, tuple[str, str]] = field(default_factory=dict)  # call id -> (purpose, path)
    stage: str = "list"
    calls: int = 0

    def __call__(self, messages: list[dict], tools: list[dict]) -> dict:
        size = estimate_tokens(messages) + (estimate_tokens(json.dumps(tools)) if tools else 0)
        if size > self.window:
            raise ContextLengthExceeded(
                f"Error code: 400 - {{'error': {{'message': \"This model's maximum context length is "
                f"{self.window} tokens. However, your messages resulted in {size} tokens.\", "
                f"'type': 'invalid_request_error', 'code': 'context_length_exceeded'}}}}")
        if self.stage == "done" and messages[-1].get("role") == "user":
            self.stage = "list"  # a new question: the only thing this stand-in can do is survey again
        self.read_results(messages)
        return {**self.next_step(), "usage": size}

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
                             "compaction.",
                             ("write", "", "write_file", {"path": "REPORT.md", "content": self.report()}))
        if self.stage == "check":
            self.stage = "done"
            return self.call("Next step: read REPORT.md back to check it.",
                             ("check", "", "read_file", {"path": "REPORT.md"}))
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


@contextmanager
def demo_copy():
    """A temporary copy of this project for the demo model to survey; deleted afterwards."""
    with tempfile.TemporaryDirectory(prefix="tiny-agent-demo-") as folder:
        for name in ("compact.py", "tiny_agent.py", "lessons", "tests"):
            source = HERE / name
            if source.is_dir():
                shutil.copytree(source, Path(folder) / name, ignore=shutil.ignore_patterns("__pycache__", "live"))
            elif source.exists():
                shutil.copy(source, folder)
        yield Path(folder)


DEMO_SAYS = ("[demo] The model is a deterministic stand-in, not a language model; the tools and files are "
             "real, on a temporary copy of this project.")


def demo(args: argparse.Namespace, config: Config) -> int:
    """The demo, once or as a REPL; options that cannot apply to it say so in one line."""
    config = replace(config, context_window=DEMO_WINDOW, max_iterations=args.max_iterations or DEMO_ITERATIONS)
    configured = model_configured()
    if args.task:
        print("[demo] --demo runs the offline demo model, so the task is not run" if configured else
              "[demo] no model is configured (OPENAI_API_KEY or OPENAI_BASE_URL), so the task is not run; "
              "see README: plug in a model")
    if args.workspace != ".":
        print("[demo] --workspace applies to a real model; the demo works on a temporary copy of this project")
    if not args.repl:
        if args.resume:
            print("[demo] --resume continues a REPL session: add --repl (python tiny_agent.py --demo --repl --resume)")
        run_demo(config)
        return 0
    with demo_copy() as folder:
        ws = Workspace(folder)
        records = records_folder(HERE, label="demo")
        path, saved = start_records(records, args.resume)
        if saved and not args.strategy:
            config = replace(config, strategy=saved["strategy"])
        session = new_session(config, summarize_extractive, archive_dir=records / "archive", ws=ws)
        print(DEMO_SAYS + f"\n[shell] {shell_mode(ws)}")
        if saved:
            resume_session(session, saved)
            print(f"[resume] {len(session.messages)} messages, strategy {config.strategy}")
        shown = replace(config, model="the offline demo model")
        repl(session, shown, DemoModel(window=config.context_window), ws, path)
    return 0


def run_demo(config: Config, log=print) -> Session:
    """The main job with no model: the demo model surveys a temporary copy of this project, and the
    report it wrote there is printed before the copy is deleted."""
    log(f"[demo] No OPENAI_API_KEY or OPENAI_BASE_URL (nor a .env in {Path.cwd()} or {HERE}): running the "
        "offline demo." if not model_configured()
        else "[demo] --demo: running the offline demo, not the configured model.")
    log(DEMO_SAYS)
    with demo_copy() as folder:
        ws = Workspace(folder)
        log(f"[shell] {shell_mode(ws)}")
        session = new_session(config, summarize_extractive, archive_dir=folder / ".archive", ws=ws)
        answer = run(session, DEMO_TASK, DemoModel(window=config.context_window), ws, log)
        report = folder / "REPORT.md"
        log("\n" + (report.read_text(encoding="utf-8") if report.exists() else "(no REPORT.md was written)"))
    log("[demo] the copy and its REPORT.md were temporary and are deleted; the table above is the report.")
    finish(session, answer, log)
    return session


def finish(session: Session, answer: str, log=print) -> None:
    log(f"[answer] {CONTROL.sub('', answer) or EMPTY}\n")
    if session.compactions:  # the chart shows the teeth; without a compaction there are none
        log(sawtooth_chart(session.sent))
    n = len(session.sent)
    log(f"[done] {n} request{'s' * (n != 1)}, {session.compactions} compaction{'s' * (session.compactions != 1)}, "
        f"at most {max((m for m, _ in session.sent), default=0)} messages and "
        f"~{max((t for _, t in session.sent), default=0):,} tokens sent at once ({session.compaction.name}).")


def sawtooth_chart(sent: list[tuple[int, int]], height: int = 8) -> str:
    """Tokens sent per request as a small terminal chart: up while working, down at each compaction.
    Messages per request are the second line, so strategies that shrink tokens show their teeth too."""
    if not sent:
        return ""
    tokens = [t for _, t in sent]
    top = max(tokens) or 1
    rows = []
    for level in range(height, 0, -1):
        threshold = top * level / height
        label = f"{round(threshold):>7,} ┤" if level in (height, height // 2) else "        │"
        rows.append(label + "".join("█" if t >= threshold - 1e-9 else " " for t in tokens))
    rows.append("        └" + "─" * len(tokens))
    rows.append(f"         tokens sent at each of {len(tokens)} requests; messages: "
                + " ".join(str(n) for n, _ in sent[:40]) + (" …" if len(sent) > 40 else ""))
    return "\n".join(rows)


# ════════════════════════════════════════════════════════════════════════════════════════════
# Layer 3 · The ladder: compact.py's Part III as strategies of the agent (lessons 05-16)
# ════════════════════════════════════════════════════════════════════════════════════════════
# compact.py's Part III adds its steps and policies to the one engine (POLICIES): STRATEGIES lists
# them by name, so the ladder needs nothing more here. A fork that stops above keeps the sawtooth.

if __name__ == "__main__":
    sys.exit(main())
