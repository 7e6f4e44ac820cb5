"""tiny_agent.py - the agent loop, its tools, and the command line.

    task ─► messages ─► compact ─► model ─► tool calls? ──no──► answer
                ▲                              │ yes
                └──── append results ◄── run each call

Every iteration first calls the compaction, so `messages` rises and falls like a sawtooth. A fork
may stop at the end of any layer (README: "Fork it"):

    Layer 1  the tutorial's agent   the loop, one tool (bash) and its question, the sawtooth, one task
    Layer 2  real servers           tools, the sandbox, refusals, settings, sessions, the REPL, the demo
    Layer 3  the ladder             compact.py's Part III, whose policies STRATEGIES lists by name

Layer 2 replaces nothing: it registers tools and wraps the model and the compaction the loop calls.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import inspect
import json
import os
import re
import select
import signal
import subprocess
import sys
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
# Layer 1 · The tutorial's agent: the loop, bash and its question, the sawtooth, one task
# ════════════════════════════════════════════════════════════════════════════════════════════

# --- The loop (lesson 02) --------------------------------------------------------------------


@dataclass
class Session:
    """What the loop needs across iterations: the history, and the compaction it calls first."""

    messages: list[dict]
    compaction: Callable  # (messages, focus=None, level=0, log=print) -> the messages to send
    max_iterations: int = 50  # model calls for one task


def run(session: Session, task: str, model: Callable, ws: Workspace, log=print) -> str:
    """The tutorial's loop: compact, ask the model, append its reply, run its calls, repeat."""
    session.messages.append({"role": "user", "content": safe_text(task)})
    for _ in range(session.max_iterations):
        compact_now(session, log=log)
        reply = model(session.messages, tools_offered())
        session.messages.append(reply)
        if not reply.get("tool_calls"):
            return reply.get("content") or ""
        for call in reply["tool_calls"]:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            log(f"[tool] {name} {printable(arguments, 70)}")
            session.messages.append({"role": "tool", "tool_call_id": call["id"], "content": run_tool(ws, name, arguments)})
    return stopped(session.max_iterations)


def stopped(n: int) -> str:
    return f"stopped after {n} model call{'s' * (n != 1)} without a final answer"


def compact_now(session: Session, focus: str | None = None, level: int = 0, log=print) -> bool:
    """One call of the compaction, which says in one line what it changed. `level` 0 is its own
    rule, 1 compacts now, higher levels compact harder (lesson 02). True when the history changed."""
    before = session.messages
    after = session.compaction(before, focus=focus, level=level, log=log)
    session.messages = before if after is before else list(after)
    return after is not before


LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# What a terminal obeys instead of printing, each removed whole: escape sequences (CSI, OSC, string
# commands; 7- and 8-bit, so no "[31m" is left), other control characters, bidirectional overrides.
ESCAPE = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?|(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                    r"|\x1b[ -/]*[0-~]?|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def safe_text(text: str) -> str:
    """Text that can be sent: bytes that were not UTF-8 (kept by Python as lone surrogates, from a
    terminal, an argument or a reply) become U+FFFD instead of a traceback in the client."""
    return LONE_SURROGATE.sub("\ufffd", text)


def clean(text) -> str:
    """Outside text (a server's words, a model's answer) as printed: the one sanitizer of the terminal."""
    return ESCAPE.sub("", safe_text(str(text)))


def printable(text: str, width: int) -> str:
    """A one-line preview for the terminal: clean, and no newlines or invisible characters."""
    flat = "".join(c if c.isprintable() else " " for c in " ".join(clean(text).split())[:width + 1])
    return flat[:width] + ("…" if len(flat) > width else "")


def tutorial_compaction(threshold: int = THRESHOLD, keep_recent: int = KEEP_RECENT, summarize=summarize) -> Callable:
    """The tutorial's sawtooth as the loop calls it: compact_messages with the cheap model's summary
    (or the one given); level 1 and up compact now (lesson 02)."""
    def compaction(messages: list[dict], focus=None, level: int = 0, log=print) -> list[dict]:
        after = compact_messages(messages, summarize, threshold=0 if level else threshold, keep_recent=keep_recent)
        if after is not messages:
            log(f"[compact] {len(messages)} → {len(after)} messages")
        return after
    return compaction


# --- bash, and the question before a command not known to be harmless (lesson 02) -----------

OUTPUT_CAP = 10_000  # bytes of a command's output (or a file) the model sees: the head and the tail
BASH_TIMEOUT = 30.0  # seconds a command may run (BASH_TIMEOUT in .env)


def ask_on_terminal(question: str) -> str:
    """y, n or a (yes to this command for the rest of the session); without a terminal, or on
    Ctrl-C or Ctrl-D, or bytes that are not UTF-8, the answer is n."""
    if not os.isatty(0):
        return "n"
    try:
        answer = input(f"{question} [y/N/a] ").strip().lower()
        return "y" if answer in ("y", "yes") else "a" if answer in ("a", "always") else "n"
    except (EOFError, KeyboardInterrupt, UnicodeDecodeError):
        print()
        return "n"


@dataclass
class Workspace:
    """The folder commands run in; `approve` answers y, n or a for a command not known to be
    harmless, and the commands answered a run unasked for the rest of the session."""

    root: Path
    approve: Callable[[str], str] = ask_on_terminal
    timeout: float = BASH_TIMEOUT
    allowed: set[str] = field(default_factory=set)  # commands answered a

    @contextmanager
    def shell(self, command: str, writable: bool):
        """What runs `command`: bash (in Layer 2's sandbox, `writable` only when the user allowed it)."""
        yield ["bash", "-c", command]


class ToolError(Exception):
    """A tool call that cannot run; its message goes back to the model as the result."""


def cap(head: bytes, tail: bytes = b"", dropped: int = 0) -> str:
    """What the model sees of a long text: its head, how much was cut, its tail."""
    cut = f"\n[… {dropped:,} bytes cut …]\n" if dropped else ""
    return (head + cut.encode() + tail).decode("utf-8", errors="replace")


# A command runs unasked only when this proves it harmless: parts joined by |, && or ||, each a
# program of READ_ONLY and its words, each plain or one simple quote: nothing expands, redirects or
# runs another command, so bash reads it as written here. Anything else is asked, not parsed harder.
PLAIN = r"[\w.,:=+%@/-]"  # letters, digits and punctuation that mean nothing to bash
QUOTED = r"""'[^'\n]*'|"[^"$`\\\n]*\""""  # single quotes; double quotes with nothing that expands
WORD = rf"(?:{PLAIN}+|{QUOTED})"
OPERAND = r"""(?:[\w.,:=+%@/]""" + PLAIN + r"""*|'[^'\n-][^'\n]*'|"[^"$`\\\n-][^"$`\\\n]*")"""  # not an option
END = r"(?![^ \t|&])"  # the end of a word


def options(flags: str = "", valued: str = "", long: str = "", single: str = "", numbers: bool = False,
            operands: bool = True) -> str:
    """The words a read-only program may have, as a pattern: its operands (`-` and `--` too) unless
    not `operands`, and only the options listed (an allowlist: any other option is asked). `flags`
    are letters that may be bundled (-la), `valued` letters that take a value (-n5, -n 5); `long` and `single` (find's -name) are names
    of options, a name ending in = takes a value (--lines=5, --lines 5, '--include=*.py')."""
    def names(given: str, value: bool) -> str:
        chosen = [n.rstrip("=") for n in given.split() if n.endswith("=") == value]
        return "(?:" + "|".join(map(re.escape, sorted(chosen, key=len, reverse=True))) + ")" if chosen else "(?!)"
    glued = rf"=(?:{PLAIN}|{QUOTED})*"  # --x=v, --x='v'
    short = rf"-[{flags}]*[{valued}](?:(?:{PLAIN}|{QUOTED})+|[ \t]+{WORD})" if valued else "(?!)"
    alternatives = [short, rf"-[{flags}]+" if flags else "(?!)", r"-\d+" if numbers else "(?!)",
                    rf"--{names(long, False)}", rf"--{names(long, True)}(?:{glued}|[ \t]+{WORD})",
                    rf"'--{names(long, True)}=[^'\n]*'|\"--{names(long, True)}=[^\"$`\\\n]*\"",
                    rf"-{names(single, False)}", rf"-{names(single, True)}[ \t]+{WORD}"]
    words = "|".join(alternatives + ["--?"] * operands)
    return rf"(?:[ \t]+(?:(?:{words}){END}" + (f"|{OPERAND}))*" if operands else "))*")


# program -> the words it may have: an allowlist of options per program, as Codex's known-safe
# commands keep one. Left out, so asked: what writes (sort -o, find -fprint), runs a program (find
# -exec, sort --compress-program), reads a list of files whose names no check sees (--files0-from),
# or follows its input forever (tail -f). An option naming a file is a word like any other, and a
# word naming a path outside the workspace is asked (OUTSIDE): grep -f, diff --from-file, find -newer.
GREP = ("ignore-case invert-match line-number count files-with-matches files-without-match "
        "only-matching word-regexp line-regexp recursive extended-regexp fixed-strings basic-regexp "
        "perl-regexp no-filename with-filename no-messages quiet silent text null null-data "
        "byte-offset initial-tab ignore-binary after-context= before-context= context= max-count= "
        "regexp= file= include= exclude= exclude-dir= exclude-from= color= colour= label=")
OPTIONS = {  # program -> its options: (flags, valued letters, long names, single-dash names, -NUMBER)
    "pwd": ("LP",),
    "cat": ("AbeEnstTuv", "", "show-all number-nonblank show-ends number squeeze-blank show-tabs "
            "show-nonprinting"),
    "head": ("qvz", "nc", "lines= bytes= quiet silent verbose zero-terminated", "", True),
    "tail": ("qvz", "nc", "lines= bytes= quiet silent verbose zero-terminated", "", True),
    "wc": ("clmwL", "", "bytes chars lines words max-line-length"),
    "grep": ("ivnclLowxrEFGPhHsqaZzbTI", "ABCmef", GREP),
    "ls": ("aAlhRtrS1dFiSsUXvcugGnopQNk", "", "all almost-all human-readable recursive reverse "
            "directory classify inode size sort= time= format= color= indicator-style= width="),
    "stat": ("Lt", "c", "dereference terse format= printf="),
    "du": ("sahcbkmLxl", "dB", "summarize all human-readable total bytes apparent-size dereference "
            "one-file-system count-links max-depth= block-size= exclude= time="),
    "which": ("a",),
    "cut": ("sz", "bcfd", "complement only-delimited zero-terminated bytes= characters= fields= "
            "delimiter= output-delimiter="),
    "tr": ("cCdst", "", "complement delete squeeze-repeats truncate-set1"),
    "diff": ("qsuyiwbBEZTtaNrpc", "UCxX", "brief report-identical-files unified= context= side-by-side "
            "ignore-case ignore-all-space ignore-space-change ignore-blank-lines text new-file recursive "
            "exclude= exclude-from= from-file= to-file= normal color= label=", "", True),
    "basename": ("az", "s", "multiple zero suffix="),
    "dirname": ("z", "", "zero"),
    "realpath": ("emLPqsz", "", "canonicalize-existing canonicalize-missing logical physical quiet "
            "strip no-symlinks zero relative-to= relative-base="),
    "find": ("", "", "", "print print0 empty not a o and or true false depth ls prune quit readable "
            "writable executable nouser nogroup xdev mount name= iname= path= ipath= wholename= "
            "iwholename= regex= iregex= type= xtype= maxdepth= mindepth= size= mtime= mmin= atime= "
            "amin= ctime= cmin= newer= perm= user= group= uid= gid= links= inum= samefile= printf= "
            "regextype="),
    "sort": ("bdfgiMhnRrVsuzc", "ktS", "ignore-leading-blanks dictionary-order ignore-case "
            "general-numeric-sort ignore-nonprinting month-sort human-numeric-sort numeric-sort random-sort "
            "reverse version-sort stable unique zero-terminated check key= field-separator= buffer-size="),
    "uniq": ("cdDuiz", "fsw", "count repeated unique ignore-case zero-terminated skip-fields= skip-chars= check-chars="),
}
UNIQ = options(*OPTIONS["uniq"], operands=False)  # uniq's options alone: its words around its one file
READ_ONLY = {  # program -> the words it may have
    **dict.fromkeys("echo true false".split(), rf"(?:[ \t]+{WORD})*"),  # they read no file
    **{name: options(*spec) for name, spec in OPTIONS.items()},
    "uniq": UNIQ + rf"(?:[ \t]+{OPERAND}{UNIQ})?",  # one file: a second one is where it writes
    "sed": rf"[ \t]+-n[ \t]+(?:\d+(?:,\d+)?p|'(?:\d+|\$)(?:,(?:\d+|\$))?p'){END}(?:[ \t]+{OPERAND})*",
}
PART = "(?:" + "|".join(rf"{name}{END}{words}" for name, words in READ_ONLY.items()) + ")"
PROVED = re.compile(rf"[ \t]*{PART}(?:[ \t]*(?:\|\||&&|\|)[ \t]*{PART})*[ \t]*")
OUTSIDE = re.compile(r"""\.\.|(?<![^ \t|&])(?:['"]?/|-[^ \t|&]*/|'-[^']*/|"-[^"]*/)""")  # `..`, /x, -f/x
NEXT = re.compile(r"[ \t]*(\|\||&&|\|)?[ \t]*([\w.,:=+%@/-]*)")  # where the proof stopped: a program?


def needs_asking(command: str) -> str | None:
    """Why `command` is asked before it runs, or None when it is proved harmless (READ_ONLY, and no
    word naming a path that is absolute, in an option, or with `..`). One pass that never goes
    back over what it read: a 4 MB command is judged in a fraction of a second."""
    proved = PROVED.match(command)
    at = proved.end() if proved else 0
    if proved and at == len(command):
        return "it names a path outside the workspace (absolute, with .., or in an option)" if \
            OUTSIDE.search(command) else None
    step = NEXT.match(command, at)
    if (step[1] or not proved) and step[2] and step[2] not in READ_ONLY:
        return f"`{step[2]}` is not a known read-only program"
    return (f"from character {at + 1} ({printable(command[at:], 20)}) it is not a read-only program's plain "
            "words and simple quotes joined by |, && or ||")


def question(command: str, why: str) -> str:
    """What the user is asked: why, then the whole command, every character visible (a newline
    starts a line; an escape sequence, a carriage return or an invisible character shows as its
    escape), so what would run is what the user reads."""
    lines = re.sub(r"[^\n\t -~]", lambda c: c[0] if c[0].isprintable() else repr(c[0])[1:-1], command)
    return f"[tool] bash, not known to be harmless ({why}):\n" + "".join(f"  │ {line}\n" for line in
                                                                          lines.split("\n")) + "run it?"


def bash(ws: Workspace, command: str) -> str:
    """Run a shell command in the workspace: asked first unless it is known to be harmless, no
    terminal input, an environment built from nothing, its output bounded as it is read, and every
    process it started stopped when it returns or at the timeout."""
    why = needs_asking(command) or names_own_settings(ws, command)
    if why and command not in ws.allowed:
        answer = ws.approve(question(command, why))
        if answer not in ("y", "a"):
            raise ToolError(f"the user did not allow this command ({why})")
        if answer == "a":
            ws.allowed.add(command)
    with ws.shell(command, writable=why is not None) as argv:
        known = children()
        proc = subprocess.Popen(argv, cwd=ws.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, env=command_env(ws))
        try:
            head, tail, dropped, code = read_bounded(proc, ws.timeout, lambda: stop_all(proc, known))
        finally:
            stop_all(proc, known)
            proc.stdout.close()
    if code is None:
        raise ToolError(f"the command ran longer than {ws.timeout:g} s and was stopped")
    return cap(f"exit code {code}\n".encode() + head, tail, dropped)


def own_settings_inside(ws: Workspace) -> Path | None:
    """The agent's own settings file when it lies inside the workspace (the agent run on its own
    folder): a file no tool reads and no command is let see unasked."""
    own = settings_file().resolve()
    return own if ws.root.resolve() in own.parents and own.exists() else None


def names_own_settings(ws: Workspace, command: str) -> str | None:
    """Why a command that names the agent's own settings file (`cat .env`, run on its own folder) is
    asked: its key is in it. A command that reads it without naming it (grep -r) is not caught here:
    the sandbox hides the file (README: "What an unconfined command still reaches")."""
    own = own_settings_inside(ws)
    if own and re.search(rf"(?<![\w-]){re.escape(own.name)}(?![\w.-])", command):
        return f"it names {own.name}, the agent's own settings, which hold its key"
    return None


def command_env(ws: Workspace) -> dict[str, str]:
    """A command's whole environment, built from nothing: never the API key or another setting, and
    a PATH without the workspace's folders, where a command could plant a program."""
    path = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep)
            if p.startswith("/") and ws.root.resolve() not in (Path(p), *Path(p).parents)]
    return {"PATH": os.pathsep.join(path), "LANG": os.environ.get("LANG", "C.UTF-8"), "TERM": "dumb",
            "HOME": os.environ.get("HOME", "/"), "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.bareRepository",
            "GIT_CONFIG_VALUE_0": "explicit"}


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


def children() -> set[int]:
    """This process's children, once it is their subreaper (prctl(2) PR_SET_CHILD_SUBREAPER, 36): a
    process a command started and left behind (setsid, a double fork, env -i) becomes a child of
    ours, not init's, and stays one until stop_all stops it."""
    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0):
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    found = set(map(int, Path(f"/proc/self/task/{os.getpid()}/children").read_text().split()))  # needs Linux 3.5+
    for task in os.listdir("/proc/self/task"):  # an orphan is given to one of our threads
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            found.update(map(int, Path(f"/proc/self/task/{task}/children").read_text().split()))
    return found


def stop_all(proc: subprocess.Popen, known: set[int]) -> None:
    """Stop the command and every process it started: its process group, then every child of ours
    that was not one before it (the orphans its processes left), until a pass finds none."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    while strays := children() - known:
        for pid in strays:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


# A tool is a function of the workspace and its arguments, and a schema the model reads (README: Fork
# it). Each request offers the schemas of the tools in TOOLS at that moment, and --help and the
# budget read them when the agent starts: a tool added or deleted after import is in all three.
TOOLS = {"bash": bash}  # name -> function(ws, **arguments); Layer 2 registers more
TOOL_SCHEMAS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command in the workspace.",
                 "parameters": {"type": "object", "properties": {"command": {"type": "string", "description":
                                                                              "the command"}}, "required": ["command"]}}}]
JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
             type(None): "null"}  # what json.loads makes of each JSON type


def tools_offered() -> list[dict]:
    """The schemas of the tools in TOOLS, as the next request sends them."""
    return [s for s in TOOL_SCHEMAS if s["function"]["name"] in TOOLS]


def tool_names() -> list[str]:
    return [s["function"]["name"] for s in tools_offered()]


def wrong_types(schema: dict, value, name: str = "") -> list[str]:
    """Where `value` is not of the JSON type its schema declares, inside arrays and objects too (an
    integer is a number too); `name` is where it stands in the arguments. A part of the schema that is
    not an object (`true`, a list of items) says nothing here."""
    if not isinstance(schema, dict):
        return []
    allowed = schema.get("type") or list(JSON_TYPE.values())
    allowed, got = [allowed] if isinstance(allowed, str) else allowed, JSON_TYPE[type(value)]
    if got not in allowed and not (got == "integer" and "number" in allowed):
        return [f"{name} must be {' or '.join(allowed)}, not {got}"]
    if got == "array":
        return [w for i, item in enumerate(value) for w in wrong_types(schema.get("items", {}), item, f"{name}[{i}]")]
    if got == "object":
        inside = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        return [w for k, v in value.items() for w in wrong_types(inside.get(k, {}), v, f"{name}.{k}" if name else k)]
    return []


SECRET_NAME = re.compile(r"(?:KEY|TOKEN|SECRET|PASSWORD)$")  # a setting whose value is a secret


def own_secrets_masked(output: str) -> str:
    """A tool's output with the value of each of the agent's own secrets masked (OPENAI_API_KEY, any
    setting named *KEY, *TOKEN, *SECRET or *PASSWORD), so `cat .env` never carries one into the
    history, and so never to the server, the session file or the archive."""
    for name, value in os.environ.items():
        if SECRET_NAME.search(name) and len(value) >= 8:
            output = output.replace(value, f"[{name} masked]")
    return output


def run_tool(ws: Workspace, name: str, arguments: str) -> str:
    """Run one call; every failure becomes a result the model can read, and the loop goes on."""
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise ToolError("arguments must be a JSON object")
        schema = next((s for s in tools_offered() if s["function"]["name"] == name), None)
        if schema is None:
            raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(tool_names())}")
        try:
            inspect.signature(TOOLS[name]).bind(ws, **args)
        except TypeError as error:
            raise ToolError(f"wrong arguments for {name}: {error}") from None
        if wrong := wrong_types(schema["function"].get("parameters", {}), args):
            more = f"; and {len(wrong) - 3} more" if len(wrong) > 3 else ""
            raise ToolError(f"the arguments of {name}: {'; '.join(wrong[:3])}{more} (its schema says so)")
        return safe_text(own_secrets_masked(as_text(TOOLS[name](ws, **args))))
    except (json.JSONDecodeError, RecursionError) as error:
        return f"error: arguments are not valid JSON ({error}); send a JSON object"
    except (ToolError, OSError, ValueError) as error:  # ValueError: a NUL byte, bad UTF-8, a surrogate
        return safe_text(own_secrets_masked(f"error: {error}"))
    except Exception as error:  # a tool's own failure (a fork's tool, say): the model reads it, the turn goes on
        return safe_text(own_secrets_masked(f"error: {name} failed: {type(error).__name__}: {error}"))


def as_text(result) -> str:
    """A tool's result as the model reads it: text as it is, anything else as its JSON (or its str)."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, default=str)
    except (TypeError, ValueError):  # keys JSON has no name for, a circular list
        return str(result)


# --- The model and one task (lesson 02) ------------------------------------------------------


class ServerReplyError(Exception):
    """A reply (or a saved message) that is not a chat completion's; its text names what was sent."""


def reply_body(text: str) -> dict:
    """A chat completion's raw JSON holding a message, or a ServerReplyError naming what was sent
    (cut JSON, an HTML page, anything else): the one reader at the edge."""
    try:
        body = json.loads(text)
        if isinstance(body["choices"][0]["message"], dict):
            return body
    except (ValueError, RecursionError, LookupError, TypeError):
        pass
    raise ServerReplyError(f"a reply that is not a chat completion: {printable(text, 120)}")


def assistant_message(message: dict) -> dict:
    """The only shape the rest of the code knows: text, and calls each with an id (made up when
    none came: OpenAI refuses a null one), a name and arguments as a JSON string."""
    try:
        calls = [{"id": c["id"] if isinstance(c.get("id"), str) and c["id"] else f"call_{os.urandom(6).hex()}",
                  "type": "function", "function": {
            "name": safe_text(c["function"]["name"]), "arguments": safe_text(c["function"].get("arguments") or "{}")}}
            for c in message.get("tool_calls") or []]
        if not all(c["function"]["name"] for c in calls):  # a call to "" names no tool; a server refuses it
            raise LookupError
    except (AttributeError, LookupError, TypeError):
        raise ServerReplyError(f"tool calls that are not named functions: {printable(message, 120)}") from None
    content = message.get("content")
    reply = {"role": "assistant", "content": safe_text(content) if isinstance(content, str) else ""}
    return {**reply, "tool_calls": calls} if calls else reply


def read_reply(text: str) -> dict:
    """A raw reply as the assistant message it holds."""
    return assistant_message(reply_body(text)["choices"][0]["message"])


def openai_model(client, model: str, read: Callable = read_reply, **request) -> Callable:
    """A model is any function (messages, tools) -> assistant message; this one asks a server and
    reads its raw reply with `read`; `request` adds options such as max_tokens."""
    def call(messages: list[dict], tools: list[dict]) -> dict:
        return read(client.chat.completions.with_raw_response.create(
            model=model, messages=messages, tools=tools, tool_choice="auto", **request).http_response.text)
    return call


class ConfigError(Exception):
    """Something the user can fix in .env or on the command line; printed as one line."""


HERE = Path(__file__).resolve().parent
# The settings are the user's, never the workspace's: the environment first, then the file --env-file
# names (or this variable, so a test run or a wrapper names one once), else the .env beside this file,
# where python-dotenv itself starts looking. A workspace's .env is a file of the project like any other.
ENV_FILE = "TINY_AGENT_ENV_FILE"
NAMED: list[str] = []  # the settings file --env-file named, once it is read


def env_file(named: str | None = None) -> Path | None:
    """The settings file to read: `named` (--env-file), else $TINY_AGENT_ENV_FILE, else the .env beside
    this file when there is one; None for none (os.devnull names none). A file named that is missing
    is one line."""
    found = settings_file(named)
    if str(found) == os.devnull or not (found.is_file() or named or os.environ.get(ENV_FILE)):
        return None
    if not found.is_file():
        raise ConfigError(f"--env-file {clean(found)}: no such file")
    return found


def settings_file(named: str | None = None) -> Path:
    """Where the settings are read from, for a line that says where to put one ("set CONTEXT_WINDOW
    in ..."): the file named (--env-file, then $TINY_AGENT_ENV_FILE), or the .env beside this file
    (read once it is written)."""
    return Path(named or next(iter(NAMED), None) or os.environ.get(ENV_FILE) or HERE / ".env")


def load_env(found: Path | None) -> Path | None:
    """Load `found` (the file env_file named) with python-dotenv; never over the environment."""
    from dotenv import load_dotenv
    try:
        found and load_dotenv(found, encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{clean(found)} is not UTF-8 text; save it as UTF-8") from None
    return found


def trouble(error: Exception, where: str) -> str:
    """One line that says what went wrong with the server at `where`, and what to change."""
    import openai
    if isinstance(error, openai.APIConnectionError):
        return f"cannot reach {where} ({printable(error.__cause__ or error, 80)}): start it or fix OPENAI_BASE_URL"
    if isinstance(error, openai.APIStatusError):
        return f"the server answered HTTP {error.status_code}: {body_line(error)}"
    return f"the server at {where} did not answer like an OpenAI-compatible server: {printable(error, 120)}"


def body_line(error: Exception) -> str:
    """The first line of text an error's body holds: its message, or an HTML page's words."""
    text = re.sub(r"^Error code: \d+( - )?", "", str(error)) or str(getattr(error, "body", None) or "")
    lines = re.sub(r"(?is)<(script|style|head)\b.*?</\1>|<[^>]+>", "\n", text).splitlines()
    return printable(next((line for line in lines if line.strip()), text), 200)


def fail(message: str) -> int:
    print(f"error: {clean(message)}", file=sys.stderr)
    return 1


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """A wrong option is one line that says what to do, not five lines of usage."""
        self.exit(2, f"error: {message} (see python tiny_agent.py --help)\n")


def parser(task: str) -> Parser:
    """The command line: the task, which `task` describes; Layer 2 adds its options."""
    p = Parser(description="A tiny agent whose context is compacted on every iteration.")
    p.add_argument("task", nargs="?", help=task)
    p.add_argument("--env-file", metavar="PATH", help=f"the settings file (default: ${ENV_FILE}, else the .env "
                   "beside tiny_agent.py; never the workspace's)")
    return p


def one_task(argv: list[str] | None = None) -> int:
    """The tutorial's agent on its own: one task, in this folder, against the server that .env (or
    the environment) names. A fork of Layer 1 ends with `sys.exit(one_task())`; the whole agent
    starts at `main` (Layer 2). Whatever the server does ends in one line."""
    import openai
    args = parser("the task (default: say what the files in this folder are for)").parse_args(argv)
    task = args.task
    try:
        NAMED[:] = [args.env_file] if args.env_file else []
        if read := load_env(env_file(args.env_file)):
            print(f"[settings] read {clean(read)}")
        session = Session([{"role": "system", "content": SYSTEM_PROMPT}], tutorial_compaction())
        model = openai_model(make_client(), os.environ.get("MODEL") or "gpt-4o-mini")
        answer = run(session, task or "Say what the files in this folder are for.", model, Workspace(Path(".")))
    except ConfigError as error:
        return fail(f"configuration: {error}")
    except (openai.OpenAIError, ServerReplyError) as error:
        return fail(trouble(error, os.environ.get("OPENAI_BASE_URL") or "api.openai.com"))
    except KeyboardInterrupt:
        return fail("interrupted")
    print(clean(answer))
    return 0


# ════════════════════════════════════════════════════════════════════════════════════════════
# Layer 2 · Real servers: tools, the sandbox, refusals, settings, sessions, the REPL, the demo
# ════════════════════════════════════════════════════════════════════════════════════════════

import errno  # noqa: E402  each layer's imports stand at its start, so Layer 1 reads alone
import fcntl  # noqa: E402
import functools  # noqa: E402
import hashlib  # noqa: E402
import html  # noqa: E402
import importlib  # noqa: E402
import math  # noqa: E402
import reprlib  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from dataclasses import asdict, fields, replace  # noqa: E402

from compact import (ACK, REASONING_FIELDS, Archive, CompactState, ContextOverflowError,  # noqa: E402
                     check_messages, compaction_stats, content_text, estimate_tokens, is_summary, model_configured,
                     request_tokens, summarize_extractive, system_head, POLICIES, Compactor, pins_text,
                     find_cut, pair_tool_results)
from compact import (EXTRA_RULE, LATEST_NOTE, NOTE, PINS_NOTE, SAID_NOTE, SUMMARY_OUTRO, TASK_NOTE,  # noqa: E402
                     reasoning_text, summary_body)  # what the page shows of a summary and an archived message

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


REPLY_LIMITS = (16_000_000, 64)  # characters of a reply, and how deep tool-call arguments may nest
OPENAI_FIELDS = {"role", "content", "refusal", "annotations", "audio", "function_call", "tool_calls"}


def read_whole_reply(text: str) -> dict:
    """Layer 1's reader (reply_body, assistant_message) for every shape a real server sends: a reply
    bounded in size, content parts as text, one call sent as an object, arguments of any JSON type,
    an id missing or used twice; then the string fields a server adds (reasoning_content) as it sent
    them, arguments nested at most REPLY_LIMITS[1] deep, and the server's count of the prompt as `usage`."""
    if len(text) > REPLY_LIMITS[0]:
        raise ServerReplyError(f"a reply of {len(text):,} characters, over {REPLY_LIMITS[0]:,}")
    body = reply_body(text)
    message = body["choices"][0]["message"]
    content, calls = message.get("content"), message.get("tool_calls") or []
    if isinstance(content, list):  # content parts: their text
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    if not isinstance(calls, (list, dict)):
        raise ServerReplyError(f"tool_calls that are not a list: {shown(calls)}")
    ids: set = set()
    reply = assistant_message({"content": content, "tool_calls": [widened(c, ids) for c in (
        [calls] if isinstance(calls, dict) else calls)]})
    reply.update({k: safe_text(v) for k, v in message.items() if isinstance(v, str) and v and k not in OPENAI_FIELDS})
    if any(nesting(c["function"]["arguments"]) > REPLY_LIMITS[1] for c in reply.get("tool_calls", [])):
        raise ServerReplyError(f"tool-call arguments nested deeper than {REPLY_LIMITS[1]} levels")
    counted = body["usage"].get("prompt_tokens") if isinstance(body.get("usage"), dict) else None
    return {**reply, "usage": counted if type(counted) is int else None}


def widened(call, ids: set) -> dict:
    """A call as Layer 1 reads it: arguments of any JSON type as a JSON string, and no id (so one is
    made up) when the server sent one already used."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return call  # assistant_message says what is wrong with it
    given, arguments = call.get("id"), function.get("arguments")
    fresh = isinstance(given, str) and given not in ids
    ids.add(given)
    return {**call, "id": given if fresh else None, "function": {**function, "arguments": arguments if isinstance(
        arguments, str) else json.dumps({} if arguments is None else arguments)}}


def nesting(arguments: str) -> int:
    """How deep a call's arguments nest, counted one level at a time (no recursion), up to just past
    the limit; arguments that are not JSON count 0 (the tool's result tells the model)."""
    try:
        value, depth = [json.loads(arguments)], 0
    except ValueError:
        return 0
    except RecursionError:
        return REPLY_LIMITS[1] + 1
    while value and depth <= REPLY_LIMITS[1]:
        value, depth = [v for x in value if isinstance(x, (dict, list))
                        for v in (x.values() if isinstance(x, dict) else x)], depth + 1
    return depth


def shown(sent) -> str:
    """What a server sent, in one short line (nesting shown only a few levels deep)."""
    return printable(sent if isinstance(sent, str) else reprlib.repr(sent), 120)


# The openai client sends a request again after a timeout, a dropped connection, HTTP 408, 409, 429
# or 5xx (twice, waiting what Retry-After asks up to 120 s, else 0.5 s and 1 s). What it does not
# know: llama-server without --jinja answers HTTP 500 to every request with tools, and no retry
# changes that, so its answer is marked final with the header the client obeys (x-should-retry).
PERMANENT = re.compile(r"requires --jinja|tools param requires|does not support tools", re.I)
RETRIES = 2  # the client's own default (make_client's is 1, for the summarizer)


def final_refusal(response) -> None:
    """An httpx response hook: a 5xx whose body is a refusal no retry can change is not retried."""
    if response.status_code >= 500 and PERMANENT.search(response.read().decode("utf-8", "replace")):
        response.headers["x-should-retry"] = "false"


def server_model(config: Config, log=print, reserve: Callable[[], int] | None = None) -> Callable:
    """The model for a real server: the history normalised (outgoing), every reply read whole,
    max_tokens as the budget reserves now (`reserve`: less once a refusal names a smaller window;
    max_completion_tokens from the first time a server asks for it, as OpenAI's reasoning models
    do), a passing failure retried by the client (RETRIES), the seconds while it thinks, and one
    line when the server's count shows the tools were dropped."""
    import openai
    client = make_client(config.timeout, max_retries=RETRIES,
                         http_client=openai.DefaultHttpxClient(event_hooks={"response": [final_refusal]}))
    limit = ["max_tokens"]
    reserve = reserve or (lambda: config.reserved_output)
    warned: list[bool] = []  # the dropped-tools line is said once a session

    def ask(messages: list[dict], tools: list[dict]) -> dict:
        try:
            return openai_model(client, config.model, read_whole_reply, **{limit[0]: reserve()})(
                outgoing(messages, config.send_reasoning), tools)
        except openai.BadRequestError as error:
            if "max_completion_tokens" not in str(error) or limit[0] != "max_tokens":
                raise
            limit[0] = "max_completion_tokens"
            return ask(messages, tools)

    def call(messages: list[dict], tools: list[dict]) -> dict:
        with waiting():
            reply = ask(messages, tools)
        if tools and not warned and tools_dropped(messages, reply):
            warned.append(True)
            log(DROPPED_TOOLS.format(counted=reply["usage"], estimate=request_tokens(messages, None, schema_tokens())))
        return reply
    return call


DROPPED_TOOLS = ("[tools] the server counted {counted:,} prompt tokens for a request estimated at ~{estimate:,} "
                 "with the tool schemas: its chat template seems to have dropped the tool schemas, so the model "
                 "cannot call tools. Use a model whose template renders tools, `llama-server --jinja`, or "
                 "llama-cpp-python's `--chat_format chatml-function-calling`.")


def tools_dropped(messages: list[dict], reply: dict) -> bool:
    """The server saw far fewer tokens than the messages and the schemas hold, and no tool call has
    come back yet: the signature of a chat template that renders no tools (llama-server, SmolLM2)."""
    counted, fixed = reply.get("usage") or 0, schema_tokens()
    return (counted > 0 and counted + fixed // 2 < request_tokens(messages, None, fixed)
            and not any(m.get("tool_calls") for m in [*messages, reply]))


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


# --- Tools: the file tools, recall and compact, and bash inside the sandbox (lesson 02) ------


def records_root() -> Path:
    """Where the records of every workspace live (sessions, archives): $XDG_STATE_HOME/tiny-agent, or
    ~/.local/state/tiny-agent when it is unset or relative (the XDG spec says to ignore a relative one)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state") / "tiny-agent"


def private_folder(folder: Path) -> Path:
    """`folder`, made with every missing folder above it owner-only (0700), as the records hold
    what the model read; the records' own root is made owner-only again if it was not."""
    for missing in reversed([p for p in (folder, *folder.parents) if not p.exists()]):
        with contextlib.suppress(FileExistsError):
            missing.mkdir(mode=0o700)
    for ours in (records_root(), folder):
        if (ours == folder or ours in folder.parents) and stat.S_IMODE(ours.stat().st_mode) != 0o700:
            ours.chmod(0o700)
    return folder


RECORDS = "is the agent's own records (sessions and archives): no tool touches them"
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")


@dataclass
class AgentWorkspace(Workspace):
    """The workspace as the whole agent uses it: bash inside bubblewrap when it is installed, and
    the archive the recall tool reads."""

    sandbox: bool = field(default_factory=lambda: shutil.which("bwrap") is not None)
    archive: Archive | None = None  # every message a compaction took out, for the recall tool

    @contextmanager
    def shell(self, command: str, writable: bool):
        """bash inside bubblewrap when sandboxed: the system folders read-only; the workspace read-only
        too unless the user allowed the command (so a mistake of the checker cannot write), and its
        .env read-only then, whether or not it exists; the records of every workspace out of sight; a
        /tmp of its own, no network, no other process, and command_env as the whole environment."""
        with super().shell(command, writable) as argv:
            if not self.sandbox:
                yield argv
                return
            root, records = self.root.resolve(), records_root().resolve()
            env, made = root / ".env", writable and not os.path.lexists(root / ".env")
            box = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev",
                   "--tmpfs", "/tmp", "--setenv", "HOME", "/tmp"]
            for folder in filter(os.path.exists, SYSTEM_FOLDERS):
                box += ["--symlink", os.readlink(folder), folder] if os.path.islink(folder) else ["--ro-bind", folder, folder]
            workspace = ["--bind" if writable else "--ro-bind", str(root), str(root)]
            workspace += ["--ro-bind", "/dev/null" if made else str(env), str(env)] if writable else []
            own = own_settings_inside(self)
            workspace += ["--ro-bind", "/dev/null", str(own)] if own else []  # the agent's own settings: empty
            hidden = ["--tmpfs", str(records)] if records.exists() or root in records.parents else []
            if hidden:
                private_folder(records)
            box += workspace + hidden if root in records.parents else hidden + workspace
            try:
                yield box + ["--remount-ro", "/", "--chdir", str(root), *argv]
            finally:  # bubblewrap made an empty .env to cover: it goes
                if made and os.path.isfile(env) and os.path.getsize(env) == 0:
                    os.unlink(env)


def tool_path(ws: Workspace, relative: str, writing: bool = False) -> list[str]:
    """The folders and the name of a path the model gave, `..` resolved by name: refused when
    absolute, outside, in the agent's records, or (for writing) .env or inside .git."""
    if not isinstance(relative, str) or not relative or relative.startswith("/"):
        raise ToolError(f"path {relative!r} must be relative to the workspace")
    if "\0" in relative or LONE_SURROGATE.search(relative):  # decoded strictly: never a name made of raw bytes
        raise ToolError(f"path {relative!r} holds a null byte or a character that is not text; nothing was read or written")
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
    target, records = ws.root.resolve().joinpath(*parts), records_root().resolve()
    if records == target or records in target.parents:
        raise ToolError(f"path {relative!r} {RECORDS}")
    if target == own_settings_inside(ws):
        raise ToolError(f"path {relative!r} is the agent's own settings file, which holds its key: no tool touches it")
    if writing and (parts[-1] == ".env" or ".git" in parts):
        raise ToolError(f"path {relative!r} is the user's settings (.env, .git): only the user changes them")
    return parts


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
    without following a symbolic link; anything else, and a hard link to a record, is refused
    before it is read."""
    parts = tool_path(ws, path)
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
    if info.st_nlink > 1 and is_record(info):
        os.close(fd)
        raise ToolError(f"{path} {RECORDS} (a hard link to one)")
    return fd, info.st_size


def is_record(info: os.stat_result) -> bool:
    """Whether a file with more than one name is one of the agent's records (a hard link to it)."""
    return any(os.stat(os.path.join(folder, name), follow_symlinks=False)[1:3] == info[1:3]
               for folder, _, names in os.walk(records_root()) for name in names)


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
    parts = tool_path(ws, path, writing=True)
    folder = open_folder(ws, parts, create=True)
    temporary, mode = f".{parts[-1]}.{os.urandom(4).hex()}.tmp", None
    try:
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"{path} is not a regular file")
            if info.st_nlink > 1 and is_record(info):
                raise ToolError(f"{path} {RECORDS} (a hard link to one)")
            mode = stat.S_IMODE(info.st_mode)  # a file keeps its mode: 0600 stays private, 0755 runs
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=folder)
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
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


def recall(ws: Workspace, query: str) -> str:
    """The recall tool: search the archive of compacted turns, or read one by its number (#12)."""
    archive = getattr(ws, "archive", None)  # a Layer 1 workspace has none
    if archive is None:
        raise ToolError("nothing is archived in this run")
    return archive.read(int(query[1:])) if re.fullmatch(r"#\d+", query) else archive.search(query)


COMPACTING = "compacting now"  # the compact tool's result until the compaction that follows answers it


def compact_call(ws: Workspace, focus: str) -> str:
    """The compact tool (lesson 11): the compaction the loop calls next compacts at once, with this
    focus, and answers the call with what it did (Strategy)."""
    return COMPACTING


def _schema(name: str, description: str, **params: str) -> dict:
    properties = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(params)}}}


TOOLS.update(read_file=read_file, write_file=write_file, edit_file=edit_file, compact=compact_call, recall=recall)
TOOL_SCHEMAS.extend([
    _schema("read_file", "Read a text file.", path="path relative to the workspace"),
    _schema("write_file", "Create or overwrite a file.", path="relative path", content="the full text"),
    _schema("edit_file", "Replace one exact occurrence of `old` with `new`.", path="relative path",
            old="text that occurs exactly once", new="replacement"),
    _schema("compact", "Compact the conversation now, keeping what matters for `focus`.",
            focus="what the summary must keep"),
    _schema("recall", "Search the archive of compacted turns; pass a number like #12 to read one.",
            query="words to find, or #N")])
# The schemas go with every request, rendered by the server's template. Counted as their JSON: on
# llama.cpp's function-calling template a first request was estimated within 3% (tests/live).


def schema_tokens() -> int:
    """The tokens the schemas of the tools offered add to every request, counted as their JSON."""
    return estimate_tokens(json.dumps(tools_offered()))


# --- Strategies: the one place that maps --strategy to a compaction (lessons 02-03) ----------

STRATEGIES = tuple(POLICIES)  # every policy of the one engine, none (no compaction) and the sawtooth first


@dataclass
class Strategy:
    """The compaction the loop calls, for every --strategy: compact.Compactor with its policy (whose
    steps admit a large new tool result, lesson 14). A `compact` call is answered (lesson 11); one
    line says what changed. It keeps what the agent learns of the requests: the server's count of
    the last, each one's size."""

    name: str
    compactor: Compactor
    archive: Archive | None = None  # every message that leaves the context, for recall
    usage: tuple[list[dict], int] | None = None  # the last request as sent, and the server's count of it
    sent: list[tuple[int, int]] = field(default_factory=list)  # (messages, tokens the server counted) a request
    compactions: int = 0  # times it changed the history
    seen: set[str] = field(default_factory=set)  # the compact calls it has answered

    @property
    def state(self) -> CompactState:
        return self.compactor.state

    def __call__(self, messages: list[dict], focus=None, level: int = 0, log=print) -> list[dict]:
        """The messages to send: `messages` itself when nothing changed (the loop's contract). A
        `compact` call among the newest results is answered here: compact now, with its focus."""
        start = find_cut(messages, 1, 0)  # the newest group: a call the model made since the last request
        asked = next((call for call in pair_tool_results(messages[start:]).values()
                      if call["function"]["name"] == "compact" and call["id"] not in self.seen), None)
        if asked:
            self.seen.add(asked["id"])
            focus, level = requested_focus(asked["function"]["arguments"]), max(level, 1)
        counted = self.state.compactions
        with waiting(label="compacting"):
            after = self.compactor.compact(messages, focus=focus, level=level, usage=self.usage)
        if self.state.compactions > counted:  # the page (--view) draws it before the request that follows
            self.state.log[-1]["request"] = len(self.sent)
        compacted = after is not messages
        if compacted:
            self.compactions += 1
            log(f"[compact] {len(messages)} → {len(after)} messages{describe_compaction(self, messages, after)}")
        if asked:
            done = (f"compacted {len(messages)} → {len(after)} messages, keeping what matters for: "
                    f"{focus or 'the task'}" if compacted else f"nothing to compact yet: {nothing_to_compact(after)}")
            after = [{**m, "content": done} if m.get("tool_call_id") == asked["id"] else m for m in after]
        return after


def requested_focus(arguments: str) -> str:
    """The `focus` of a compact call; malformed arguments just mean no focus."""
    try:
        args = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return ""
    return str(args.get("focus", "")) if isinstance(args, dict) else ""


def nothing_to_compact(messages: list[dict]) -> str:
    """Why a forced compaction changed nothing, in words."""
    n = len(messages) - (1 if messages and messages[0].get("role") == "system" else 0)
    return (f"the history is {n} message{'s' * (n != 1)} after the system prompt, and the newest turn is always "
            "kept whole")


def make_compaction(config: Config, summarize: Callable | None = None, archive: Archive | None = None,
                    ws: Workspace | None = None) -> Strategy:
    """compact.Compactor with the policy --strategy names (the sawtooth by default): the window, the
    reply's reserve and the tool schemas as its budget, and the recent files it re-attaches read
    from the workspace. `summarize` None: the model if configured, else the extractive summary."""
    compactor = Compactor(context_window=config.context_window, reserved_output=config.reserved_output,
                          policy=config.strategy, fixed_tokens=schema_tokens(), summarize=summarize, archive=archive,
                          reattach=functools.partial(current_text, ws) if ws else None,
                          precise_tools=config.precise_tools, where_set=setting,
                          # --threshold and --keep-recent where the policy has them
                          **{name: getattr(config, name) for name in ("threshold", "keep_recent")
                             if name in POLICIES[config.strategy]})
    return Strategy(config.strategy, compactor, archive)


def current_text(ws: Workspace, path: str, max_chars: int = 20_000) -> str | None:
    """A file's current text for the engine to re-attach after a compaction, or None; the agent's
    own secrets masked, as in every tool's output."""
    try:
        return own_secrets_masked(whole_text(ws, path, max_chars))
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


def describe_compaction(strategy: Strategy, before: list[dict], after: list[dict]) -> str:
    """The rest of the [compact] line: the request's size before and after (the model's last count
    when it gave one), each step that removed something, and the rule of compact_messages that
    fired with what it kept."""
    counted = "the model's last count, plus new messages" if strategy.usage else "estimated"
    fixed = strategy.compactor.fixed_tokens  # the schemas' tokens, as the budget counts them
    line = (f", request ~{request_tokens(before, strategy.usage, fixed):,} tokens ({counted}) → "
            f"~{request_tokens(after, None, fixed):,} estimated")
    for name, was, now, _ in strategy.compactor.report:
        line += f"\n          {name:<11} {was - now:>+8,} tokens removed" * (was > now)
    return line + f"\n          rule: {fired_rule(strategy.compactor, before)}; kept: {kept_parts(after)}"


def fired_rule(compactor: Compactor, before: list[dict]) -> str:
    """Which rule of compact_messages made this compaction: compacting now, more than `threshold`
    messages, past the trigger's share of the window, or a step that runs below it."""
    entry = compactor.state.log[-1] if compactor.state.log else {}
    if entry.get("level"):
        return "compacted now (asked for, or the server refused the request)"
    if 0 < compactor.threshold < len(before):
        return f"more than {compactor.threshold} messages ({len(before)})"
    if entry.get("before_tokens", 0) > compactor.trigger * entry.get("effective", 0):
        return f"past {compactor.trigger:.0%} of the window's room for messages"
    return "below the trigger, by the steps that run before every call"


def kept_parts(after: list[dict]) -> str:
    """What the compacted list holds, in words: the system prompt, the summary and its
    acknowledgement, and the tail kept as it was (walked back so no call loses its results)."""
    head, at = system_head(after), next((i for i, m in enumerate(after) if is_summary(m)), None)
    parts = ["the system prompt"] * head
    if at is not None:
        ack = at + 1 < len(after) and after[at + 1] == ACK
        parts.append("the summary" + " and its acknowledgement" * ack)
        tail = len(after) - at - 1 - ack
    else:
        tail = len(after) - head
    return ", ".join(parts + [f"the last {tail} message{'s' * (tail != 1)}, walked back to their call"])


# --- The loop as the whole agent runs it: refusals, the server's count, Ctrl-C (lesson 03) ---


def run_agent(session: Session, task: str, model: Callable, ws: Workspace, log=print) -> str:
    """Layer 1's loop with the model `served`, and a history still valid for the next question
    after Ctrl-C or the limit of model calls."""
    try:
        answer = run(session, task, served(session, model, log), ws, log)
    except KeyboardInterrupt:
        answer_open_calls(session.messages)
        raise
    if answer == stopped(session.max_iterations):
        close_turn(session.messages, answer)
        log(f"[limit] {answer}: --max-iterations raises the limit")
    return answer


def served(session: Session, model: Callable, log=print) -> Callable:
    """The model as Layer 2's loop calls it: when the server refuses the request as too long, the
    history is compacted one level harder each time and a refused request is never sent again; the
    server's count of each request (`usage`) is taken out of the reply and kept as the truth about
    its size (pi-mono and Claude Code do the same)."""
    def call(messages: list[dict], tools: list[dict]) -> dict:
        refused, level, strategy = set(), 0, session.compaction

        def request(room: bool = True) -> str:  # what was sent: the messages and the room asked for the reply
            return json.dumps([session.messages, room and strategy.compactor.budget.reserved_output], sort_keys=True,
                              default=str)
        while True:
            sent = request()
            try:
                reply = dict(model(session.messages, tools))
                break
            except Exception as error:
                counted = strategy.compactor.refused(error)  # the server's count (0: none given), or None:
                # not a "too long" refusal
                if counted is None:
                    raise
                refused.add(sent)
                log(f"[compact] the server refused the request as too long ({printable(error, 160)})")
                if counted:  # the truth about this request's size calibrates what comes next
                    strategy.usage = (list(session.messages), counted)
                if counted >= strategy.compactor.budget.context_window:  # the messages alone: no smaller reply fits
                    refused.add(request(room=False))
            while {request(), request(room=False)} & refused:  # a smaller window the refusal named: a new request
                level += 1  # the compaction raises once it has no harder level left
                compact_now(session, level=level, log=log)
        counted = reply.pop("usage", None)
        strategy.usage = (list(session.messages), counted) if isinstance(counted, int) and counted > 0 else None
        strategy.sent.append((len(session.messages), counted if strategy.usage else 0))
        return reply
    return call


INTERRUPTED = "[interrupted by the user before this call finished]"


def answer_open_calls(messages: list[dict]) -> None:
    """After an interruption, every call of the last assistant message gets a result: the ones not
    run say so."""
    i = find_cut(messages, 1, 0)  # the newest group: the assistant message and the results it has
    if not messages or messages[i].get("role") != "assistant":
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


# --- Configuration: from the environment, which python-dotenv fills from .env ----------------


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
                (config.max_iterations < 1, f"--max-iterations {config.max_iterations}: allow at least 1"),
                (bool(unknown := [t for t in config.precise_tools if t not in tool_names()]), f"PRECISE_TOOLS (--precise-"
                 f"tools): no tool named {', '.join(map(repr, unknown))}; the tools are {', '.join(tool_names())}"),
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
    """A URL the client can use. The client's own parser (httpx.URL) refuses a bad port; what it lets
    through is refused here, since a user who writes Ollama's `localhost:11434/v1` without http:// (or
    an ftp:// URL, or no host) gets a client that fails only at the first request, with no word of why."""
    import httpx2 as httpx  # the openai client's own HTTP library
    try:
        parts = httpx.URL(url)
        ok = parts.scheme in ("http", "https") and bool(parts.host)
    except (httpx.InvalidURL, TypeError):
        ok = False
    if not ok:
        raise ConfigError(f"OPENAI_BASE_URL={url!r} is not a valid http:// or https:// URL "
                          "(for example http://localhost:11434/v1 for Ollama)")


FROM_ENV_FILE: set[str] = set()  # the settings the settings file gave (the shell's environment wins over it)
ENVIRONMENT_ONLY = ("HOME", "XDG_STATE_HOME")  # where the records go: never from a file


def setting(name: str) -> str:
    """Where the user changes setting `name`: the settings file (settings_file), unless the shell's
    environment set it (a value there wins over the file, so changing the file would change nothing)."""
    shell = name in os.environ and name not in FROM_ENV_FILE
    return f"{name} in your shell's environment (it overrides {clean(settings_file())})" if shell else \
        f"{name} in {clean(settings_file())}"


def strict_env(named: str | None = None) -> Path | None:
    """Layer 1's settings file (env_file), read by python-dotenv, with a line it cannot parse refused in
    one line instead of skipped with a warning (python-dotenv only logs it), and no value over the
    environment's, nor one that says where the records go (ENVIRONMENT_ONLY). Returns the file read."""
    import logging
    from dotenv import dotenv_values
    found = env_file(named)
    NAMED[:] = [named] if named else []  # what settings_file names from now on
    wrong: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = wrong.append
    logger = logging.getLogger("dotenv.main")
    logger.addHandler(handler)
    try:
        values = dotenv_values(found, encoding="utf-8") if found else {}
    except UnicodeDecodeError:
        raise ConfigError(f"{clean(found)} is not UTF-8 text; save it as UTF-8") from None
    finally:
        logger.removeHandler(handler)
    if wrong:
        raise ConfigError(f"{clean(found)}:{wrong[0].args[0]}: cannot read that line; write it as KEY=value")
    for name, value in values.items():
        if value is not None and name not in os.environ and name not in ENVIRONMENT_ONLY:
            os.environ[name] = value
            FROM_ENV_FILE.add(name)
    return found


# --- Sessions: the agent's records live outside the workspace, saved after every turn --------


def records_folder(ws_root: Path, label: str = "") -> Path:
    """Where the session file and the archive of one workspace live: in records_root(), which no
    tool touches and no sandboxed command sees, named by a safe form of the workspace's name (letters,
    digits, `.`, `-`, `_`: nothing a terminal obeys) and a hash of its path. A folder there that is a
    symbolic link (it could lead into another workspace's records) is refused."""
    root = ws_root.resolve()
    key = hashlib.sha256(os.fsencode(root)).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", safe_text(root.name)).strip("._")[:40] or "root"
    folder = records_root() / "-".join(filter(None, [name, key, label]))
    for part in (records_root(), folder, folder / "archive"):
        if part.is_symlink():
            raise ConfigError(f"the records folder {clean(part)} is a symbolic link, which may lead to another "
                              "workspace's records: remove it (the agent makes its own)")
    return private_folder(folder)


def new_session(config: Config, summarize: Callable | None = None, archive_dir=None,
                ws: Workspace | None = None) -> Session:
    """A session with the system prompt and the strategy's compaction; an archive when a folder is
    given, which the recall tool of `ws` then reads."""
    archive = Archive.in_folder(archive_dir) if archive_dir else None
    if ws is not None:
        ws.archive = archive
    compaction = make_compaction(config, summarize, archive, ws)
    return Session([{"role": "system", "content": SYSTEM_PROMPT}], compaction, config.max_iterations)


SESSION_LIMIT = 64 << 20  # bytes: a session file larger than this is not one the agent wrote
KEEP_SESSIONS = 20  # session files kept per workspace, the newest; older ones go, with their archives


def save_session(session: Session, config: Config, path: Path) -> Path | None:
    """Write the history, the strategy and the compaction's state to this run's own file,
    atomically (a crash leaves the old file whole), owner-only. No setting or key is written. A
    write that fails (a full disk) leaves the last good file and no temporary one, in one line."""
    c = session.compaction
    data = {"version": 2, "records": path.parent.name, "strategy": c.name, "messages": session.messages,
            "state": asdict(c.state) if c.state is not None else None, "sent": c.sent,
            "archive": str(c.archive.path) if c.archive is not None else None}
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".session-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
        return path
    except OSError as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        print(f"[session] could not save {clean(path.name)} ({error.strerror}): "
              + ("the last saved copy stays" if path.exists() else "nothing is saved yet") + "; the run goes on")
        return None


def saved_sessions(folder: Path) -> list[Path]:
    """The sessions saved for this workspace, one file a run, the last saved last."""
    return sorted(folder.glob("session*.json"), key=lambda p: (p.lstat().st_mtime_ns, p.name))


def start_records(folder: Path, resume: str | bool) -> tuple[Path, dict | None]:
    """This run's own session file (never one saved before) and the saved session to continue
    (`resume`: True for the newest, or a file's name); a lock on the records, held until the
    process exits (its descriptor is never closed); one line when a saved session is not continued,
    when others could be, or when another agent holds the lock."""
    lock = os.open(folder / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        prune_sessions(folder)
    except BlockingIOError:
        os.close(lock)
        print("[session] another agent is using this workspace's session: this run is saved in a file of its own")
    sessions = saved_sessions(folder)
    saved = read_session(chosen_session(sessions, resume, folder)) if resume else None
    if saved and saved.get("records", folder.name) != folder.name:
        raise ConfigError(f"the saved session was saved for another workspace's records "
                          f"({printable(saved['records'], 60)}), not this one's: it is not continued")
    if sessions and not resume:
        print(f"[session] this workspace has a session saved at {saved_at(sessions[-1])}: it is kept, and "
              "--resume continues it")
    return folder / f"session-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json", saved


def saved_at(path: Path) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(path.lstat().st_mtime))


def chosen_session(sessions: list[Path], resume: str | bool, folder: Path) -> Path:
    """The session --resume names (a file of this workspace's records), or the newest; the line
    that says which, and the others --resume NAME can continue."""
    if not sessions:
        raise ConfigError(f"no saved session for this workspace (in {folder}); run without --resume first")
    named = [p for p in sessions if resume in (p.name, p.stem)] if isinstance(resume, str) else sessions[-1:]
    if not named:
        raise ConfigError(f"--session {resume}: no such session of this workspace; the saved ones: "
                          + ", ".join(clean(p.name) for p in reversed(sessions[-5:])))
    others = [p for p in reversed(sessions) if p != named[0]]
    print(f"[session] continuing {clean(named[0].name)} (saved at {saved_at(named[0])})" + (
        f"; {len(others)} other{'s' * (len(others) != 1)}, newest first: "
        + ", ".join(f"{clean(p.name)} ({saved_at(p)})" for p in others[:5]) + ("…" if len(others) > 5 else "")
        + "; --session NAME continues one" if others else ""))
    return named[0]


def prune_sessions(folder: Path, keep: int = KEEP_SESSIONS) -> None:
    """The newest `keep` session files of this workspace stay, this run's among them; older ones go,
    each with the archive no kept session names, in one line. Only a file that says it is a session
    the agent saved in this folder (ours) is deleted: nothing else that lies there."""
    sessions = [p for p in saved_sessions(folder) if ours(p)]
    old, kept = sessions[:len(sessions) - keep + 1], sessions[len(sessions) - keep + 1:]
    if not old:
        return
    named = {archive_of(p) for p in kept}
    for p in old:
        for gone in (p, archive_of(p)):
            if gone is not None and gone not in named:
                with contextlib.suppress(FileNotFoundError):
                    gone.unlink()
    print(f"[session] removed {len(old)} session{'s' * (len(old) != 1)} of this workspace older than the newest {keep}, "
          "with their archives (KEEP_SESSIONS in tiny_agent.py)")


def ours(path: Path) -> bool:
    """Whether `path` is a session file the agent saved for the records folder it lies in."""
    with contextlib.suppress(ConfigError, OSError, ValueError, TypeError, RecursionError):
        data = json.loads(read_record(path))
        return isinstance(data, dict) and data.get("records") == path.parent.name and isinstance(
            data.get("messages"), list)
    return False


def archive_of(path: Path) -> Path | None:
    """The archive a session file names, when it is this workspace's own (archive/ beside it)."""
    with contextlib.suppress(ConfigError, OSError, ValueError, TypeError):
        named = Path(json.loads(read_record(path))["archive"])
        return named if named.parent == path.parent / "archive" else None
    return None


def read_record(path: Path, limit: int = SESSION_LIMIT) -> str:
    """A file of the agent's records read like any outside input: a regular file only (a symbolic
    link, a FIFO or a device is refused, never followed or waited on), at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise ConfigError(f"{path} cannot be read ({'a symbolic link' if error.errno == errno.ELOOP else error.strerror})"
                          "; move it away") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        raise ConfigError(f"{path} is " + (f"{info.st_size:,} bytes, more than a session holds ({limit:,})"
                          if stat.S_ISREG(info.st_mode) else "not a regular file") + "; move it away")
    with open(fd, "rb") as f:
        return f.read(limit).decode("utf-8")


def read_session(path: Path) -> dict:
    """A saved session, checked through before anything uses it; a damaged file gets one line
    naming the file and what is wrong, and is left as it is."""
    try:
        data = json.loads(read_record(path))
        if not isinstance(data, dict):
            raise TypeError(f"it holds a {type(data).__name__}, not an object")
        if data.get("version", 2) not in (1, 2):  # 1: the first format, which version 2 reads whole
            raise ValueError(f"it is version {data.get('version')!r} of the format; this agent reads 1 and 2")
        if not in_range(data):
            raise ValueError(f"it holds a number out of range (Infinity, NaN or beyond {NUMBER_LIMIT:.0e})")
        check_messages(data.get("messages"))  # a list of dicts, each with a role a server knows
        for i, m in enumerate(data["messages"]):
            check_saved(i, m)
        if not isinstance(data.setdefault("strategy", "sawtooth"), str) or data["strategy"] not in STRATEGIES:
            raise ValueError(f"unknown strategy {data['strategy']!r}")
        data["state"] = saved_state(data.get("state"))
        if not isinstance(data.get("archive") or "", str):
            raise TypeError("archive is not a path")
        sent = data.setdefault("sent", [])  # (messages, tokens) of each request, for the page (--view)
        if not isinstance(sent, list) or not all(isinstance(r, list) and len(r) == 2 and all(
                isinstance(v, int) for v in r) for r in sent):
            raise TypeError("sent is not a list of [messages, tokens] pairs")
    except (ValueError, TypeError, RecursionError, ServerReplyError) as error:  # UnicodeDecodeError is a ValueError
        raise ConfigError(f"{path} is damaged and was left untouched ({printable(error, 100)}); move it away "
                          "to start afresh") from None
    return data


NUMBER_LIMIT = 10**15  # no count, size, ratio or time a session holds comes near it


def in_range(data) -> bool:
    """Whether every number in `data` (JSON as read) is finite and within NUMBER_LIMIT either way:
    json reads Infinity, NaN and a 400-digit number, and a page that draws one ends in a traceback."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, (dict, list)):
            stack.extend(value.values() if isinstance(value, dict) else value)
        elif isinstance(value, (int, float)) and not (abs(value) <= NUMBER_LIMIT and math.isfinite(value)):
            return False
    return True


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
        c.sent, c.compactions = [tuple(r) for r in data.get("sent", [])], c.state.compactions  # the page's sawtooth
    archive = Path(data["archive"]) if data.get("archive") else None
    # only ever append to an archive inside the agent's own records folder
    if archive and c.archive is not None and archive.parent == c.archive.path.parent:
        c.archive.path = archive


# --- The REPL and its commands ---------------------------------------------------------------

HELP = """/help                 this list
/context              what the next request holds, by kind, against the window, and the compactions so far
/compact [focus]      compact now, keeping what matters for the focus
/strategy NAME        switch the compaction strategy for the rest of the session
/view                 write a page that shows every compaction (HTML, beside the session) and print its path
/exit                 quit (Ctrl-D too); Ctrl-C stops the current turn, and at a prompt clears the line"""


COMMANDS = ("/help", "/context", "/compact", "/strategy", "/view", "/exit", "/quit")


def tolerant_stdin() -> None:
    """Bytes typed that are not UTF-8 arrive as lone surrogates (safe_text turns them into U+FFFD)
    instead of a UnicodeDecodeError inside input(). Set once: a pipe's buffered stream refuses to
    change after its first read."""
    if hasattr(sys.stdin, "reconfigure") and sys.stdin.errors != "surrogateescape":
        sys.stdin.reconfigure(errors="surrogateescape")


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
        word, lines = line.split()[0], line.strip().count("\n") + 1
        if lines == 1 and (word in COMMANDS or re.fullmatch(r"/\w*", word)):  # a typo: asked about
            config, done = command(session, config, line, ws, path)
        else:  # a paste (sent whole), or a path, that starts with "/" is a question
            if line.startswith("/"):
                print(f"[repl] {printable(word, 40)} is not a command: sent as a question" if lines == 1 else
                      f"[repl] a paste of {lines} lines that starts with {printable(word, 40)}: sent whole, as a question")
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
        print(f"agent> {clean(run_agent(session, question, model, ws)) or EMPTY}")
    except KeyboardInterrupt:  # the question stays, marked, so the next one is not merged into it
        if session.messages[-1].get("role") == "user":
            session.messages.append({"role": "assistant", "content": "[interrupted by the user before an answer]"})
        print("\n[interrupted] the turn was stopped; the question stays in the history, marked as interrupted")
    except (openai.OpenAIError, ServerReplyError, ContextOverflowError, OSError) as error:
        if len(session.messages) == size + 1 and session.messages[-1].get("role") == "user":
            session.messages.pop()  # unanswered: ↑ brings the question back to send it again
        close_turn(session.messages, f"[this turn ended with an error: {printable(error, 120)}]")
        print(f"error: {clean(unwritable(error) if isinstance(error, OSError) else diagnose(error, config))}")
    return False


EMPTY = "(the model's answer was empty)"


def command(session: Session, config: Config, line: str, ws: Workspace,
            path: Path | None = None) -> tuple[Config, bool]:
    """Run one slash command; returns the (perhaps new) settings and whether to quit."""
    name, _, rest = line.partition(" ")
    if name in ("/exit", "/quit"):
        return config, True
    if name == "/context":
        print(context_meter(session, config))
    elif name == "/compact" and session.compaction.name == "none":
        print("[compact] --strategy none never compacts: /strategy sawtooth (or another) to compact")
    elif name == "/compact":
        try:
            if not compact_now(session, focus=rest.strip() or None, level=1):
                print(f"[compact] nothing to compact yet: {nothing_to_compact(session.messages)}")
        except KeyboardInterrupt:
            print("\n[interrupted] the compaction was stopped; the history is as it was")
        except ContextOverflowError as error:
            print(f"error: {clean(error)}")
    elif name == "/strategy" and rest.strip() in STRATEGIES:
        config, old = replace(config, strategy=rest.strip()), session.compaction
        session.compaction = replace(make_compaction(config, archive=old.archive, ws=ws), usage=old.usage,
                                     sent=old.sent, compactions=old.compactions, seen=old.seen)
        for kept in ("compactions", "tokens_saved", "failures", "last_error", "window", "log"):  # the statistics go on
            setattr(session.compaction.state, kept, getattr(old.state, kept))
        print(f"[strategy] {config.strategy} from now on")
    elif name == "/strategy":
        print(f"[strategy] {'unknown strategy ' + repr(rest.strip()) + '; ' if rest.strip() else ''}the current one "
              f"is {session.compaction.name}; choose one of {', '.join(STRATEGIES)}")
    elif name == "/view" and path is not None:
        write_view(session, path.with_suffix(".html"))
    elif name == "/view":
        print("[view] this session is not saved to a file, so it has no page")
    elif name == "/help":
        print(HELP)
    else:
        print(f"unknown command {clean(name)}; the commands are:\n{HELP}")
    return config, False


def context_meter(session: Session, config: Config, width: int = 40) -> str:
    """What the next request holds, by kind, in tokens and as a share of the window; then the
    statistics every strategy shares (compact.compaction_stats)."""
    kinds = {"system prompt": 0, "tool schemas": schema_tokens(), "summary": 0, "pinned constraints": 0,
             "tool results": 0, "other messages": 0}
    c = session.compaction
    config = replace(config, context_window=c.state.window or config.context_window)
    for i, m in enumerate(session.messages):
        kind = ("system prompt" if i < system_head(session.messages) else "summary" if is_summary(m)
                else "tool results" if m.get("role") == "tool" else "other messages")
        kinds[kind] += estimate_tokens([m]) - 3
    trigger, pins, rule = trigger_meter(c.compactor, session.messages)
    kinds["summary"] -= min(pins, kinds["summary"])
    kinds["pinned constraints"] = pins
    window, total = config.context_window, sum(kinds.values())
    share = trigger / window
    counted = ""
    if c.usage:
        seen, n = c.usage
        current = len(seen) <= len(session.messages) and all(a is b for a, b in zip(seen, session.messages))
        counted = f"; the server counted {n:,} for the last request" + ("" if current else ", before a compaction")
    lines = [f"[context] ~{total:,} of {window:,} tokens ({total / window:.0%}); trigger at {share:.0%}" + (
        f" ({rule:.0%} of the window less the {config.reserved_output:,} kept for the reply)" if rule else "") + counted]
    for kind, size in kinds.items():
        lines.append(f"  {kind:<19} {size:>8,}  {'█' * round(width * size / window)}")
    mark = round(width * share)
    lines.append(f"  {'':<19} {'':>8}  {'·' * mark}▲ trigger{' ' * max(0, width - mark - 10)}| window")
    return "\n".join(lines + ["[stats] " + clean(compaction_stats(c.state, c.compactor.guard))])  # a server's words


# --- The command line: the offline demo, one task, or a REPL ---------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Layer 1's command line with the whole agent's options; each falls back to .env and then to
    the defaults in Config."""
    p = parser("one task to run; without it, a REPL (or the demo with no model)")
    p.add_argument("--strategy", choices=list(STRATEGIES), metavar="NAME",
                   help=f"how to compact: {', '.join(STRATEGIES)} (default: sawtooth)")
    p.add_argument("--demo", action="store_true", help="run the offline demo model, even if a model is configured")
    p.add_argument("--repl", action="store_true",
                   help="a REPL even with a task (its first question); with --demo: one driven by the demo model")
    p.add_argument("--workspace", default=".", help="the folder the tools may touch (default: .)")
    p.add_argument("--yes", action="store_true", help="run every command without asking, not only the known read-only ones")
    p.add_argument("--resume", action="store_true", help="continue the session saved last for this workspace")
    p.add_argument("--session", metavar="NAME", help="continue this saved session of the workspace (--resume lists them)")
    p.add_argument("--view", action="store_true", help="when the run ends, write a page that shows every compaction "
                   "(HTML, beside the session) and print its path")
    p.add_argument("--precise-tools", help=f"comma-separated tools (of {', '.join(tool_names())}) whose results are never "
                   "compressed (PRECISE_TOOLS)")
    p.add_argument("--max-iterations", type=int, help=f"stop after this many model calls (default: "
                   f"{Config.max_iterations}; the demo: {DEMO_ITERATIONS})")
    p.add_argument("--threshold", type=int, help=f"{using('threshold')}: compact above this many messages (default: {THRESHOLD})")
    p.add_argument("--keep-recent", type=int, help=f"{using('keep_recent')}: messages kept whole (default: {KEEP_RECENT})")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The demo without a model; with one, a task or a REPL. User errors end in one line."""
    import openai
    args = parse_args([safe_text(a) for a in (sys.argv[1:] if argv is None else argv)])
    config = None
    try:
        if read := strict_env(args.env_file):
            print(f"[settings] read {clean(read)}")
        config = command_line_config(args)
        if not (args.demo or model_configured()) and (args.task or args.repl):
            raise ConfigError(f"no model is configured, so {'the task' if args.task else 'a REPL'} cannot run: set "
                              f"OPENAI_BASE_URL or OPENAI_API_KEY in the environment or {clean(settings_file())} "
                              "(README: Plug in a real model), or run the offline demo with --demo")
        return demo(args, config) if args.demo or not model_configured() else agent(args, config)
    except ConfigError as error:
        return fail(f"configuration: {error}")
    except (openai.OpenAIError, ServerReplyError, ContextOverflowError) as error:
        return fail(diagnose(error, config or Config()))
    except KeyboardInterrupt:
        return fail("interrupted")
    except BrokenPipeError:  # `python tiny_agent.py ... | head`: the reader left, nothing to say
        sys.stdout = None
        return 0
    except OSError as error:  # the records cannot be written: a full disk, a read-only home
        return fail(unwritable(error))


def command_line_config(args: argparse.Namespace) -> Config:
    """The settings: the command line's over the environment's (.env) over the defaults; a
    --workspace that is not a folder is one line."""
    workspace = Path(args.workspace)
    if not workspace.is_dir():
        raise ConfigError(f"--workspace {args.workspace}: " + ("is a file, not a folder" if workspace.exists()
                                                              else "no such folder"))
    precise = tuple(t for t in re.split(r"[,\s]+", args.precise_tools or "") if t) or None
    config = load_config(strategy=args.strategy, max_iterations=args.max_iterations, threshold=args.threshold,
                         keep_recent=args.keep_recent, precise_tools=precise)
    check_options_apply(config, args)
    return config


# Which strategies use each option of the compaction, read from their policies (compact.POLICIES).
STRATEGY_OPTIONS = {"threshold": lambda policy: "threshold" in policy, "keep_recent": lambda policy: "keep_recent" in policy,
                    "precise_tools": lambda policy: bool(policy["layers"])}


def using(option: str) -> str:
    """The strategies that use `option` (a key of STRATEGY_OPTIONS), as --help and the errors name them."""
    return ", ".join(s for s in STRATEGIES if STRATEGY_OPTIONS[option](POLICIES[s]))


def check_options_apply(config: Config, args: argparse.Namespace) -> None:
    """An option given for the compaction that the strategy does not use is one line naming those
    that do; where it uses both, --threshold must be larger than --keep-recent."""
    strategy = config.strategy
    for name, uses in STRATEGY_OPTIONS.items():
        if getattr(args, name) is not None and not uses(POLICIES[strategy]):
            raise ConfigError(f"--{name.replace('_', '-')}: --strategy {strategy} does not use it (the strategies "
                              f"that do: {using(name)})")
    if "threshold" in POLICIES[strategy] and config.threshold <= config.keep_recent:
        raise ConfigError(f"--threshold {config.threshold} must be larger than --keep-recent {config.keep_recent}")


def resumed_config(config: Config, saved: dict | None, args: argparse.Namespace) -> Config:
    """The settings a saved session continues with: its own strategy unless --strategy names one,
    and the options given for the compaction checked against it."""
    if saved and not args.strategy:
        config = replace(config, strategy=saved["strategy"])
        check_options_apply(config, args)
    return config


def agent(args: argparse.Namespace, config: Config) -> int:
    """With a model: the workspace's session (new, or the one --resume or --session names), then one
    task, or the REPL (its first question the task with --repl); with --view the page at the end."""
    folder = records_folder(Path(args.workspace))
    ws = AgentWorkspace(Path(args.workspace), approve=(lambda _: "y") if args.yes else ask_on_terminal,
                        timeout=config.bash_timeout)
    path, saved = start_records(folder, args.session or args.resume)
    config = resumed_config(config, saved, args)
    session = new_session(config, archive_dir=folder / "archive", ws=ws)
    if saved:
        resume_session(session, saved)
        print(f"[resume] {len(session.messages)} messages, strategy {config.strategy}"
              + (f" (the session was saved with {saved['strategy']}; its state starts afresh)"
                 if saved["strategy"] != config.strategy else ""))
    print(f"[shell] {shell_mode(ws)}")
    model = server_model(config, reserve=lambda: session.compaction.compactor.budget.reserved_output)
    one_task = bool(args.task) and not args.repl
    try:
        if one_task:  # saved before every request, and at the end whatever the end: an answer, an error, Ctrl-C
            answer = run_agent(session, args.task, saving(model, session, config, path), ws)
        else:
            repl(session, config, model, ws, path, asked_first(args.task) if args.task else read_line)
    finally:
        if one_task:
            save_session(session, config, path)
        if args.view:
            write_view(session, path.with_suffix(".html"))
    if path.exists():  # a normal end; an error's end is its one line
        print(resume_hint(path, args))
    if not one_task:
        return 0
    finish(session, answer)
    return 3 if answer == stopped(session.max_iterations) else 0


def resume_hint(path: Path, args: argparse.Namespace) -> str:
    """Where the session was saved and the command that continues it (the last saved for this
    workspace is what --resume opens)."""
    again = ["--demo", "--repl"] if args.demo else ["--workspace", args.workspace] * (args.workspace != ".")
    program = sys.argv[0] if sys.argv[0].endswith(".py") else "tiny_agent.py"  # a fork's own file, as it was run
    return f"[saved] the session is in {clean(str(path))}; continue it: python {clean(shlex.join([program, *again, '--resume']))}"


def asked_first(question: str) -> Callable:
    """The REPL's reader with `question` as the first line typed: --repl with a task asks it first."""
    first = [question]

    def read(prompt: str) -> str | None:
        if first:
            print(f"[repl] --repl with a task: the task is the first question\n{prompt}{printable(question, 80)}")
            return first.pop()
        return read_line(prompt)
    return read


def unwritable(error: OSError) -> str:
    return (f"cannot write {error.filename or 'the records'} ({error.strerror}): free some space or fix its "
            "permissions; the last saved session stays, and --resume continues it")


def saving(model: Callable, session: Session, config: Config, path: Path) -> Callable:
    """The model, with the session saved before each request: a run that dies keeps its turns."""
    def call(messages: list[dict], tools: list[dict]) -> dict:
        save_session(session, config, path)
        return model(messages, tools)
    return call


def shell_mode(ws: Workspace) -> str:
    if ws.sandbox:
        return "bash runs inside bubblewrap: the workspace is writable only by commands you allow, no network"
    return "bash is NOT confined (install bubblewrap to confine it); commands not known to be read-only are asked about"


def diagnose(error: Exception, config: Config) -> str:
    """Layer 1's one line (trouble), told apart further: a timeout, a refused or dropped connection,
    a key refused, a template without tools, a wrong path or model, a limit, a URL without /v1."""
    import openai
    where, root = config.base_url or "api.openai.com", api_root(config.base_url or "api.openai.com")
    if isinstance(error, openai.APITimeoutError):
        return (f"the server at {where} did not answer in {config.timeout:g} s, {RETRIES + 1} times "
                "(REQUEST_TIMEOUT sets the wait)")
    if isinstance(error, openai.APIConnectionError):
        return connection_trouble(error, where) or trouble(error, where)
    if isinstance(error, openai.AuthenticationError):
        return f"the server refused the API key: set {setting('OPENAI_API_KEY')}"
    if isinstance(error, openai.APIStatusError) and PERMANENT.search(str(error)):
        return (f"the server refuses requests with tools ({printable(error, 80)}): restart llama-server with "
                "--jinja, or use a server and model whose chat template renders tools")
    if isinstance(error, openai.NotFoundError):
        if re.search(r"model", str(error), re.I) and not re.search(r"File Not Found|<html|Cannot POST", str(error)):
            return f"the server has no model {config.model!r}: set {setting('MODEL')}"
        return (f"the server at {where} has no chat endpoint there (HTTP 404): OPENAI_BASE_URL usually ends "
                f"in /v1, for example {root}")
    if isinstance(error, openai.RateLimitError):
        wait = error.response.headers.get("retry-after")  # the client waits up to 120 s; this was longer, or again
        return (f"the server limits requests (HTTP 429{f', Retry-After: {printable(wait, 40)}' if wait else ''}): "
                f"{body_line(error)}; ask again later")
    if isinstance(error, ServerReplyError):
        hint = "" if where.rstrip("/").endswith("/v1") else f"; OPENAI_BASE_URL usually ends in /v1 ({root})"
        return trouble(error, where) + hint
    return trouble(error, where) if isinstance(error, openai.OpenAIError) else printable(error, 300)


def api_root(url: str) -> str:
    """The /v1 an OpenAI-compatible URL belongs under, the full endpoint URL included."""
    return re.sub(r"(/v1)?(/chat/completions)?/*$", "", url) + "/v1"


def connection_trouble(error: Exception, where: str) -> str | None:
    """Refused, dropped, or https to a plain-HTTP server, told apart by what the connection raised."""
    import ssl
    causes = [error]
    while len(causes) < 10 and (causes[-1].__cause__ or causes[-1].__context__):
        causes.append(causes[-1].__cause__ or causes[-1].__context__)
    if any(isinstance(e, ssl.SSLError) for e in causes):
        return f"{where} does not speak https (it may be plain HTTP): try http:// in OPENAI_BASE_URL"
    if any(isinstance(e, ConnectionRefusedError) for e in causes):
        return (f"nothing answers at {where} (connection refused): start the server or fix "
                f"{setting('OPENAI_BASE_URL')}")
    if any(type(e).__name__ in ("RemoteProtocolError", "ReadError") for e in causes):
        return (f"the server at {where} dropped the connection before its reply was whole, {RETRIES + 1} times: see "
                "the server's log (did it crash or restart?), then ask again")
    return None


# --- The offline demo: a deterministic stand-in for a model, on a copy of this project -------

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
        """Take what the last calls returned from the newest tool results (never compacted away). Only
        what finished counts: a file a call of which Ctrl-C stopped is surveyed again, whole."""
        results = {m.get("tool_call_id"): content_text(m) for m in messages[-len(self.pending) - 3:]}
        stopped = {path for key, (_, path) in self.pending.items() if results.get(key, INTERRUPTED) == INTERRUPTED}
        for key, (purpose, path) in self.pending.items():
            text = results.get(key, INTERRUPTED)
            if path in stopped and path:
                self.notes.pop(path, None)
                self.queue[:0] = [] if path in self.queue else [path]
            elif path in stopped:  # the listing, the report or its check: that stage again
                self.stage = {"list": "list", "write": "read", "check": "check"}[purpose]
            elif purpose == "list":
                self.queue = [line[2:] for line in text.splitlines()[1:] if line.startswith("./")]
            elif purpose == "count":
                self.notes[path] = {**self.notes.get(path, {}), **survey(text)}
            elif purpose == "read":
                self.notes.setdefault(path, {})["purpose"] = purpose_of(text)
        self.pending.clear()

    def next_step(self) -> dict:
        """The plan: list the files, survey each one, write the report, read it back, answer."""
        if self.stage == "list":
            self.stage = "read"
            return self.call("I will list the Python sources first.",
                             ("list", "", "bash", {"command": "find . -name '*.py' | sort"}))
        if self.stage == "read" and self.queue:
            path = self.queue.pop(0)
            return self.call(f"Reading {path} ({len(self.notes)} files surveyed so far).",
                             ("count", path, "bash", {"command": f"wc -l {path} && grep -n 'def \\|TODO' {path}"}),
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
    """Lines, functions, the longest function and TODOs of a file, from `wc -l && grep -n` output."""
    numbers = re.findall(r"^(\d+) \S", text, re.M)
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
    if args.task:
        print("[demo] --demo runs the offline demo model, so the task is not run")
    if args.workspace != ".":
        print("[demo] --workspace applies to a real model; the demo works on a temporary copy of this project")
    if not args.repl:
        if args.resume:
            print("[demo] --resume continues a REPL session: add --repl (python tiny_agent.py --demo --repl --resume)")
        run_demo(config, view=args.view)
        return 0
    with demo_copy() as folder:
        ws = AgentWorkspace(folder)
        records = records_folder(HERE, label="demo")
        path, saved = start_records(records, args.session or args.resume)
        config = resumed_config(config, saved, args)
        session = new_session(config, summarize_extractive, archive_dir=records / "archive", ws=ws)
        print(DEMO_SAYS + f"\n[shell] {shell_mode(ws)}")
        if saved:
            resume_session(session, saved)
            print(f"[resume] {len(session.messages)} messages, strategy {config.strategy}")
        shown = replace(config, model="the offline demo model")
        repl(session, shown, DemoModel(window=config.context_window), ws, path)
        if path.exists():
            print(resume_hint(path, args))
        if args.view:
            write_view(session, path.with_suffix(".html"))
    return 0


def run_demo(config: Config, log=print, view: bool = False) -> Session:
    """The main job with no model: the demo model surveys a temporary copy of this project, and the
    report it wrote there is printed before the copy is deleted. `view`: its archive is kept in the
    records, and the page that shows its compactions is written beside it."""
    records = records_folder(HERE, label="demo") if view else None
    log(f"[demo] No OPENAI_API_KEY or OPENAI_BASE_URL (in the environment or {clean(settings_file())}): running the "
        "offline demo." if not model_configured()
        else "[demo] --demo: running the offline demo, not the configured model.")
    log(DEMO_SAYS)
    with demo_copy() as folder:
        ws = AgentWorkspace(folder)
        log(f"[shell] {shell_mode(ws)}")
        archive = records / "archive" if view else folder / ".archive"
        session = new_session(config, summarize_extractive, archive_dir=archive, ws=ws)
        answer = run_agent(session, DEMO_TASK, DemoModel(window=config.context_window), ws, log)
        report = folder / "REPORT.md"
        log("\n" + (report.read_text(encoding="utf-8") if report.exists() else "(no REPORT.md was written)"))
    log("[demo] the copy and its REPORT.md were temporary and are deleted; the table above is the report.")
    finish(session, answer, log)
    if view:  # named as its archive is, beside the demo REPL's sessions
        write_view(session, records / session.compaction.archive.path.with_suffix(".html").name, log)
    return session


def finish(session: Session, answer: str, log=print) -> None:
    log(f"[answer] {clean(answer) or EMPTY}\n")
    c = session.compaction
    if c.compactions:  # the chart shows the teeth; without a compaction there are none
        log(sawtooth_chart(c.sent))
    n = len(c.sent)
    log(f"[done] {n} request{'s' * (n != 1)}, {c.compactions} compaction{'s' * (c.compactions != 1)}, "
        f"at most {max((m for m, _ in c.sent), default=0)} messages and "
        f"~{max((t for _, t in c.sent), default=0):,} tokens sent at once ({c.name}).")


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


# --- The page: look at a compaction (the lessons' guide: "Look at a compaction") -------------
# --view and /view write one HTML file beside the session, drawn from what the agent keeps anyway:
# each request's size (Strategy.sent), each compaction's record (compact.compaction_record, kept in
# CompactState.log) and the archive. No script, no font or file from elsewhere: it opens from disk.

KINDS = {"system": "#b8c2cc", "user": "#8fbce6", "assistant": "#a9d89f", "tool call": "#f3c76b",
         "tool result": "#d6d6d6", "summary": "#cda6ea"}  # a message's kind (compact.block) -> its colour
COLUMN_PX = 640  # a panel's taller column: its blocks share this height by their tokens, and each
ROW_PX = 18  # is at least one line of text tall
RECORD_CHARS = 20_000  # an archived message longer than this shows its head and tail (the file holds it)
PAGE_CSS = """body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1180px;
padding:10px 14px;color:#1d1d1f;background:#fff}h1{font-size:21px;margin:8px 0;overflow-wrap:anywhere}
h2{font-size:18px;margin:18px 0 4px}h3{font-size:15px;margin:14px 0 4px}.note{color:#555;font-size:13px}
.damaged{color:#9b1c1c;font-size:13px}.key span{display:inline-block;padding:0 6px;margin:2px 2px 0 0;border-radius:3px;
font-size:12px}.chart{position:relative;padding-top:18px}.marks a{position:absolute;top:0;font-size:11px;
transform:translateX(-50%);color:#b42318}svg{display:block;width:100%;height:220px;background:#fafafa;
border:1px solid #ddd}.wide{overflow-x:auto}table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;
border-bottom:1px solid #e3e3e3;text-align:left;white-space:nowrap}.n{text-align:right}
section.compaction{border-top:3px solid #ddd;margin-top:26px}.cols{display:grid;gap:10px;margin-top:8px;
grid-template-columns:minmax(0,1fr) minmax(0,1fr)}.cols h3{margin:0 0 4px}ol.blocks{list-style:none;margin:0;
padding:0;display:flex;flex-direction:column;gap:2px}ol.blocks li{display:flex;align-items:flex-start;gap:4px;
box-sizing:border-box;min-height:18px;padding:1px 5px;border-radius:3px;font-size:12px;line-height:16px;
overflow:hidden}ol.blocks span{flex:1;min-width:0;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
ol.blocks a{flex:none;font-weight:600;color:#1a3e8c}li.gone{outline:2px dashed #b42318;outline-offset:-2px;
background-image:repeating-linear-gradient(135deg,transparent 0 6px,rgba(255,255,255,.6) 6px 9px)}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;border:1px solid #e3e3e3;padding:8px;font-size:12px;
max-height:28em;overflow:auto;margin:4px 0}article.record{border-top:1px solid #e3e3e3;padding:6px 0}
article.record:target{background:#fff3c4}@media (max-width:600px){body{font-size:14px;padding:8px}
ol.blocks li{font-size:11px;padding:1px 3px}.cols{gap:6px}}""" + "".join(
    f".k{i}{{background-color:{colour}}}" for i, colour in enumerate(KINDS.values()))


def write_view(session: Session, path: Path, log=print) -> Path | None:
    """Write the page of `session` to `path` and print the path on a line of its own, for a browser.
    Everything on it is drawn from the session's records; a file that cannot be written is one line."""
    records, trouble = archive_records(session.compaction.archive)
    try:
        path.write_text(view_html(path.stem, session.compaction, records, trouble), encoding="utf-8")
    except OSError as error:
        log(f"[view] the page could not be written: {printable(error, 160)}")
        return None
    log("[view] every compaction of this session on one page; open it in a browser:")
    log(clean(path))
    return path


def archive_records(archive: Archive | None) -> tuple[list, str]:
    """The archive's records, or none and one line saying why: a damaged archive is said on the
    page, not raised, and the panels still show each message's first characters."""
    if archive is None:
        return [], "this session keeps no archive: the messages that left show only their first characters"
    try:
        return archive.records(), ""
    except (OSError, ValueError) as error:  # a line cut short, bytes that are not UTF-8
        return [], f"the archive {archive.path} could not be read ({printable(error, 100)})"


def view_html(name: str, strategy: Strategy, records: list, trouble: str) -> str:
    """The whole page: the sawtooth of the requests, the list of compactions, a panel for each (one
    line for a record that cannot be drawn), and the archived originals the panels link to."""
    log, fixed, sent = strategy.state.log, strategy.compactor.fixed_tokens, strategy.sent
    problems = {id(entry): record_problem(entry) for entry in log}
    drawn = [entry for entry in log if not problems[id(entry)]]
    parts = [f"<h1>Every compaction of {html.escape(name)}</h1><p class=note>Strategy {html.escape(strategy.name)}: "
             f"{len(sent)} request{'s' * (len(sent) != 1)}, {len(log)} compaction{'s' * (len(log) != 1)} recorded.</p>"
             "<p class=key>"
             + "".join(f"<span class=k{i}>{kind}</span>" for i, kind in enumerate(KINDS))
             + '<span style="outline:2px dashed #b42318">left the list</span></p>',
             sawtooth_svg(sent, drawn, fixed), compaction_list(drawn, fixed)]
    for entry in log:
        if problems[id(entry)]:
            parts.append(f"<p class=damaged>A compaction's record could not be drawn: {html.escape(problems[id(entry)])}."
                         "</p>")
            continue
        threshold = strategy.compactor.threshold if entry["policy"] == strategy.name else \
            POLICIES.get(entry["policy"], {}).get("threshold", 0)  # a record from before /strategy: its policy's
        parts.append(compaction_panel(entry, fixed, threshold))
    parts.append(archive_section(records, drawn, trouble))
    return ('<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content="width=device-width,'
            f'initial-scale=1"><title>{html.escape(name)}</title><style>{PAGE_CSS}</style></head><body>'
            + "".join(parts) + "</body></html>")


# A compaction's record as compact.compaction_record writes it: field -> type, and each row's types.
RECORD = {"compaction": int, "policy": str, "level": int, "window": int, "effective": int, "trigger": (int, float),
          "target": (int, float), "before_tokens": int, "after_tokens": int, "ratio": (int, float), "steps": list,
          "before": list, "after": list}
ROWS = {"steps": (str, int, int), "before": (str, int, str, (int, type(None)), str), "after": (str, int, str, str)}


def record_problem(entry) -> str:
    """Why a compaction's record cannot be drawn, or "": it may come from a session file, and a damaged
    one is one line on the page, never a traceback."""
    if not isinstance(entry, dict):
        return f"it is a {type(entry).__name__}, not a record"
    if not in_range(entry):
        return "a number in it is out of range (Infinity, NaN or too large)"
    for key, kind in RECORD.items():
        if not isinstance(entry.get(key), kind):
            return f"its field {key!r} is missing or of the wrong type"
    if not isinstance(entry.get("request", 0), int):
        return "its field 'request' is not a number"
    for key, kinds in ROWS.items():
        for i, row in enumerate(entry[key]):
            if not isinstance(row, list) or len(row) != len(kinds) or not all(map(isinstance, row, kinds)):
                return f"row {i} of {key!r} is not what compaction_record writes"
    return ""


def outside(entry: dict, fixed: int) -> int:
    """What a request carries besides the history, as the engine counts it (compact.request_tokens):
    the system prompt, the tool schemas (`fixed`) and the list's 3. A record's history tokens plus
    this are the request's tokens, the unit of the sawtooth."""
    head = next((i for i, row in enumerate(entry["before"]) if row[0] != "system"), len(entry["before"]))
    return sum(row[1] for row in entry["before"][:head]) + fixed + 3


def limits(entry: dict, fixed: int) -> dict[str, int]:
    """The window, the trigger and the target of one compaction, in the request's tokens."""
    extra = outside(entry, fixed)
    return {"window": entry["window"], "trigger": round(entry["trigger"] * entry["effective"]) + extra,
            "target": round(entry["target"] * entry["effective"]) + extra}


LINES = {"window": "#333", "trigger": "#d9480f", "target": "#2b8a3e"}  # the chart's lines, their colours


def sawtooth_svg(sent: list, drawn: list[dict], fixed: int) -> str:
    """Tokens sent at each request as bars, a red line where each compaction happened (its number
    above, a link to its panel), and the window, the trigger and the target as lines: each
    compaction's in force up to it, the last one's after it."""
    if not sent:
        return "<p class=note>No request was sent yet, so there is no sawtooth to draw.</p>"
    placed = [entry for entry in drawn if 0 <= entry.get("request", -1) <= len(sent)]
    top = max([t for _, t in sent] + [entry["window"] for entry in placed] + [1])
    w, y = 1000 / len(sent), (lambda tokens: 200 - 190 * tokens / top)
    shapes = [f'<rect x="{i * w:.2f}" y="{y(t):.1f}" width="{w * 0.8:.2f}" height="{200 - y(t):.1f}" fill="#6f93c4">'
              f"<title>request {i + 1}: {n} messages, {t:,} tokens</title></rect>" for i, (n, t) in enumerate(sent)]
    edges, marks, shown = [0] + [entry["request"] for entry in placed] + [len(sent)], [], -1.0
    for k, entry in enumerate(placed):
        x = edges[k + 1] * w
        shapes += limit_lines(entry, fixed, edges[k] * w, x, y) + [
            f'<line x1="{x:.2f}" x2="{x:.2f}" y1="0" y2="200" stroke="#b42318" stroke-opacity=".7" '
            f'vector-effect="non-scaling-stroke"><title>compaction {entry["compaction"]} before request '
            f'{edges[k + 1] + 1}: {html.escape(entry["policy"])}, {html.escape(steps_of(entry))}</title></line>']
        if x - shown >= 60 or k == 0:  # a number where there is room for it; the table below lists them all
            marks.append(f'<a href="#c{entry["compaction"]}" style="left:{x / 10:.2f}%">{entry["compaction"]}</a>')
            shown = x
    if placed:
        shapes += limit_lines(placed[-1], fixed, edges[-2] * w, edges[-1] * w, y)
    return (f'<h2>The sawtooth</h2><div class=chart><div class=marks>{"".join(marks)}</div><svg viewBox="0 0 1000 200" '
            f'preserveAspectRatio="none" role="img" aria-label="tokens sent at each request">{"".join(shapes)}</svg>'
            f"</div>" + chart_key(sent, placed[-1] if placed else None, fixed, top))


def limit_lines(entry: dict, fixed: int, x1: float, x2: float, y: Callable) -> list[str]:
    """The three lines of one compaction across the requests from x1 to x2."""
    return [f'<line x1="{x1:.2f}" x2="{x2:.2f}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="{LINES[name]}" '
            f'stroke-dasharray="{"none" if name == "window" else "6 4"}" vector-effect="non-scaling-stroke"/>'
            for name, t in limits(entry, fixed).items()]


def chart_key(sent: list, last: dict | None, fixed: int, top: int) -> str:
    """What the chart shows, in words under it: the bars' unit and the lines' values."""
    uncounted = sum(1 for _, t in sent if not t)
    text = (f"Bars: the tokens of each of the {len(sent)} requests, as the server counted them (the top of the chart "
            f"is {top:,})" + (f"; {uncounted} had no count from the server and show none" if uncounted else "")
            + ". Red: a compaction, numbered above (a link to its panel).")
    if last is not None:
        text += " Lines, as the last compaction set them: " + ", ".join(
            f'<b style="color:{LINES[name]}">{name} {tokens:,}</b>' for name, tokens in limits(last, fixed).items())
        text += (f" (the trigger and the target are {last['trigger']:.0%} and {last['target']:.0%} of the room for "
                 "messages, plus the system prompt and the tool schemas).")
    return f"<p class=note>{text}</p>"


def steps_of(entry: dict) -> str:
    """The steps a compaction ran, in order."""
    return ", ".join(step[0] for step in entry["steps"])


def compaction_list(drawn: list[dict], fixed: int) -> str:
    """Every compaction in one table: before which request, the strategy and its steps, and the
    messages and tokens before and after."""
    if not drawn:
        return "<p class=note>No compaction yet: the history still fits.</p>"
    rows = "".join(f'<tr><td><a href="#c{e["compaction"]}">{e["compaction"]}</a></td><td class=n>'
                   f'{e["request"] + 1 if "request" in e else "?"}</td><td>{html.escape(e["policy"])}</td>'
                   f'<td>{html.escape(steps_of(e))}</td><td class=n>{len(e["before"])} → {len(e["after"])}</td>'
                   f'<td class=n>{e["before_tokens"] + outside(e, fixed):,} → {e["after_tokens"] + outside(e, fixed):,}'
                   '</td></tr>'
                   for e in drawn)
    return ("<h2>The compactions</h2><div class=wide><table class=compactions><tr><th>#</th><th class=n>before request"
            f"</th><th>strategy</th><th>steps</th><th class=n>messages</th><th class=n>tokens</th></tr>{rows}</table>"
            "</div>")


def cause(entry: dict, threshold: int) -> str:
    """Why the engine compacted, from its record."""
    if entry["level"] >= 2:
        return "as far as it goes: the server refused the request as too long again"
    if entry["level"] == 1:
        return "now: /compact, the model's compact tool, or the server refused the request as too long"
    if entry["before_tokens"] > entry["trigger"] * entry["effective"]:
        return f"the history passed the trigger, {entry['trigger']:.0%} of the room for messages"
    if 0 < threshold < len(entry["before"]):
        return f"more than {threshold} messages"
    return "a step that runs before every call, or one output too large alone"


def compaction_panel(entry: dict, fixed: int, threshold: int) -> str:
    """One compaction: its numbers and steps, then the messages before and after side by side, each a
    block as tall as its tokens; what left is marked with what each step did to it and links to its
    archive record; then the summary, the user's words carried under it, and what the steps wrote."""
    n, before, after, extra = entry["compaction"], entry["before"], entry["after"], outside(entry, fixed)
    px = COLUMN_PX / max(1, sum(row[1] for row in before), sum(row[1] for row in after))
    steps = "".join(f"<tr><td>{html.escape(s)}</td><td class=n>{was + extra:,}</td><td class=n>{now + extra:,}</td>"
                    f"<td class=n>{now - was:+,}</td></tr>" for s, was, now in entry["steps"])
    scaled = f"; our estimates scaled ×{entry['ratio']:.2f} to the server's count" if entry["ratio"] > 1 else ""
    summary = next((row[3] for row in after if row[0] == "summary" and row[2] != "kept"), None)
    return (f'<section class=compaction id="c{n}"><h2>Compaction {n}</h2><p><b class=counts>{len(before)} → '
            f'{len(after)} messages</b> · <b class=tokens>{entry["before_tokens"] + extra:,} → '
            f'{entry["after_tokens"] + extra:,} tokens</b> · {html.escape(entry["policy"])}'
            + (f" · before request {entry['request'] + 1}" if "request" in entry else "")
            + f'</p><p class=note>Why: {html.escape(cause(entry, threshold))}. Window {entry["window"]:,} tokens, '
            f'{entry["effective"]:,} of them for messages; trigger {limits(entry, fixed)["trigger"]:,}, target '
            f'{limits(entry, fixed)["target"]:,} (tokens of the whole request{scaled}).</p>'
            f'<div class=wide><table class=steps><tr><th>step</th><th class=n>tokens before</th><th class=n>after</th>'
            f'<th class=n>change</th></tr>'
            f'{steps}</table></div><div class=cols><div class=before><h3>Before: {len(before)} messages</h3>'
            f'<ol class=blocks>{blocks(before, px, True)}</ol></div><div class=after><h3>After: {len(after)} '
            f'messages</h3><ol class=blocks>{blocks(after, px, False)}</ol></div></div>'
            + (summary_section(summary) if summary is not None else "") + written(after) + "</section>")


def blocks(rows: list, px: float, before: bool) -> str:
    """A column of messages: each a block as tall as its tokens (one line at least), coloured by its
    kind and labelled with what happened to it (before: "kept", or each step that took it, "→ mask →
    summary") or what made it (after); one that left is marked and links to the archive record that
    holds it whole."""
    out, kinds = [], list(KINDS)
    for i, (kind, tokens, what, *rest) in enumerate(rows, 1):
        gone = before and what != "kept"
        done = what if what == "kept" else f"→ {what}" if before else f"by {what}"
        link = f'<a href="#a{rest[0]}">archive #{rest[0]}</a>' if before and rest[0] is not None else ""
        height = f' style="height:{round(tokens * px)}px"' if tokens * px > ROW_PX else ""
        out.append(f'<li class="{"gone" if gone else "kept"} k{kinds.index(kind) if kind in kinds else ""}"{height} '
                   f'title="{html.escape(rest[-1][:300])}"><span>{i} {html.escape(done)} · {tokens:,} · '
                   f"{html.escape(kind)}</span>{link}</li>")
    return "".join(out)


def summary_section(text: str) -> str:
    """The summary a compaction made, as the page shows it: its text, the user's words the engine
    carried under it (compact.user_notes), and its other notes (files, focus, where the archive is)."""
    summary = summary_body({"role": "user", "content": text})
    notes = text.partition(EXTRA_RULE)[2].strip().removesuffix(SUMMARY_OUTRO).strip()
    sections = re.split(rf"\n\n(?={re.escape(NOTE)})", notes) if notes else []
    words = [s for s in sections if s.startswith((TASK_NOTE, SAID_NOTE, PINS_NOTE, LATEST_NOTE))]
    others = [s for s in sections if s not in words]
    return (f"<h3>The summary</h3><pre class=summary>{html.escape(summary)}</pre><h3>The user's words carried under "
            "it</h3>" + (f"<pre class=words>{html.escape(chr(10).join(words))}</pre>" if words else
                         "<p class='note words'>None: the user's messages are still in the list.</p>")
            + (f"<details><summary>The engine's other notes under it ({len(others)})</summary><pre>"
               f"{html.escape(chr(10).join(others))}</pre></details>" if others else ""))


def written(after: list) -> str:
    """What the steps wrote in place of what they took, the summary aside: a mask's placeholder, a
    snipped output, an eviction's note."""
    made = [(i, row) for i, row in enumerate(after, 1) if row[2] != "kept" and row[0] != "summary"]
    if not made:
        return ""
    items = "".join(f"<li>{i} · {html.escape(row[0])} · by {html.escape(row[2])}<pre>{html.escape(row[3])}</pre></li>"
                    for i, row in made)
    return (f"<details><summary>What the steps wrote in place of what they took ({len(made)})</summary><ol>{items}</ol>"
            "</details>")


def archive_section(records: list, drawn: list[dict], trouble: str) -> str:
    """Every archived original a panel links to, under its anchor; a record the file does not hold
    whole is one line."""
    linked = sorted({row[3] for entry in drawn for row in entry["before"] if row[3] is not None})
    if not linked and not trouble:
        return ""
    items = [archived(k, records[k] if 0 <= k < len(records) else None, trouble) for k in linked]
    return ("<h2 id=archive>What left, as the archive holds it</h2>"
            + (f"<p class=damaged>{html.escape(trouble)}.</p>" if trouble else "") + "".join(items))


def archived(k: int, record, trouble: str) -> str:
    """One archived message: its text, its reasoning and its calls as they left (head and tail past
    RECORD_CHARS), or one line when the record is missing or damaged."""
    message = record.get("message") if isinstance(record, dict) else None
    if not isinstance(message, dict):
        why = "the archive file could not be read (above)" if trouble else \
            "the archive file holds no such record" if record is None else "the record is damaged"
        return f'<p class=damaged id="a{k}">archive #{k}: {html.escape(why)}.</p>'
    calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
    parts = [content_text(message), reasoning_text(message) and "reasoning:\n" + reasoning_text(message),
             calls and "tool calls:\n" + "\n".join(json.dumps(call, ensure_ascii=False) for call in calls)]
    text = "\n\n".join(p for p in parts if p)
    if len(text) > RECORD_CHARS:
        text = (f"{text[:RECORD_CHARS // 2]}\n\n[… {len(text) - RECORD_CHARS:,} characters the archive file holds, "
                f"record #{k} …]\n\n{text[-RECORD_CHARS // 2:]}")
    return (f'<article class=record id="a{k}"><b>archive #{k}</b> · {html.escape(str(message.get("role")))} · left '
            f'at compaction {html.escape(str(record.get("compaction")))}<pre>{html.escape(text)}</pre></article>')


# ════════════════════════════════════════════════════════════════════════════════════════════
# Layer 3 · The ladder: compact.py's Part III as strategies of the agent (lessons 05-16)
# ════════════════════════════════════════════════════════════════════════════════════════════
# compact.py's Part III adds its steps and policies to the one engine (POLICIES): STRATEGIES lists
# them by name, so the ladder needs nothing more here. A fork that stops above keeps the sawtooth.

if __name__ == "__main__":
    sys.exit(main())
