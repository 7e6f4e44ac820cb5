"""tiny_agent.py - the agent loop, its tools, and the command line.

    task ─► messages ─► compact ─► model ─► tool calls? ──no──► answer
                ▲                              │ yes
                └──── append results ◄── run each call

Every iteration first calls the compactor, so `messages` rises and falls like a sawtooth instead of
growing until the model refuses it. Run `python tiny_agent.py` with no model configured to watch
the offline demo; set OPENAI_API_KEY or OPENAI_BASE_URL (in the shell or in .env) to use a real one.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from compact import (Compactor, ContextOverflowError, compact_messages, content_text, estimate_tokens,
                     make_client, model_configured, summarize_default)

HERE = Path(__file__).resolve().parent
SYSTEM_PROMPT = """You are a careful coding agent working inside a workspace folder. Use the tools \
to inspect and change files; paths are relative to the workspace. Keep answers short. When the task \
is done, reply with the answer and no tool call. Messages that start with [Context summary] are \
notes about earlier turns, not new instructions."""

# --------------------------------------------------------------------------------------------
# Configuration: from the environment, which python-dotenv fills from .env
# --------------------------------------------------------------------------------------------


class ConfigError(Exception):
    """Something the user can fix in .env or on the command line; printed as one line."""


@dataclass(frozen=True)
class Config:
    model: str = "gpt-4o-mini"
    base_url: str | None = None
    context_window: int = 128_000
    strategy: str = "sawtooth"
    threshold: int = 30
    keep_recent: int = 6
    max_iterations: int = 50


STRATEGIES = ("sawtooth", "layered", "hybrid", "zones", "none")


def load_config(env: dict | None = None, **overrides) -> Config:
    """Read MODEL, OPENAI_BASE_URL and CONTEXT_WINDOW, refusing values that cannot work."""
    env = os.environ if env is None else env
    base_url = env.get("OPENAI_BASE_URL") or None
    if base_url and not re.match(r"https?://", base_url):
        raise ConfigError(f"OPENAI_BASE_URL={base_url!r} must start with http:// or https:// "
                          "(for example http://localhost:11434/v1 for Ollama)")
    window = env.get("CONTEXT_WINDOW", "128000")
    if not window.isdigit() or int(window) < 1_000:
        raise ConfigError(f"CONTEXT_WINDOW={window!r} must be a whole number of tokens, at least 1000")
    values = {"model": env.get("MODEL") or "gpt-4o-mini", "base_url": base_url, "context_window": int(window)}
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values.get("strategy", "sawtooth") not in STRATEGIES:
        raise ConfigError(f"unknown strategy {values['strategy']!r}; choose one of {', '.join(STRATEGIES)}")
    return Config(**values)


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
    timeout: float = 30.0

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


def bash(ws: Workspace, command: str) -> str:
    """Run a shell command in the workspace, with a timeout and a capped output."""
    if DANGEROUS.search(command) and not ws.approve(command):
        raise ToolError(f"refused a dangerous command: {command} (rerun the agent with --yes to allow it)")
    try:
        done = subprocess.run(command, shell=True, cwd=ws.root, capture_output=True, text=True,
                              timeout=ws.timeout, errors="replace")
    except subprocess.TimeoutExpired:
        raise ToolError(f"the command ran longer than {ws.timeout:g} s and was stopped: {command}")
    return cap(f"exit code {done.returncode}\n{done.stdout}{done.stderr}")


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


def run_tool(ws: Workspace, name: str, arguments: str, archive=None) -> str:
    """Run one call; every failure becomes a result the model can read, and the loop goes on."""
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise ToolError("arguments must be a JSON object")
        if name == "recall":
            if archive is None:
                raise ToolError("nothing is archived in this run (use --strategy layered)")
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
# Models: a real one through the `openai` client, or the offline demo
# --------------------------------------------------------------------------------------------


class ContextLengthExceeded(Exception):
    """What the demo model raises, worded like a real server's HTTP 400, when a request is too long."""


def is_context_overflow(error: Exception) -> bool:
    """True for a server's "context too long" refusal, whatever its exact wording."""
    text = f"{getattr(error, 'code', '')} {error}"
    return bool(re.search(r"context_length_exceeded|maximum context length|context window|too many tokens"
                          r"|prompt is too long", text, re.I))


def assistant_message(message) -> dict:
    """The `openai` reply as a plain dict, the only shape the rest of the code knows."""
    reply = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        reply["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.function.name, "arguments": c.function.arguments}} for c in message.tool_calls]
    return reply


def openai_model(client, model: str) -> Callable[[list[dict], list[dict]], dict]:
    """A model is any function (messages, tools) -> assistant message; this one asks a server."""
    def call(messages: list[dict], tools: list[dict]) -> dict:
        response = client.chat.completions.create(model=model, messages=messages, tools=tools)
        return assistant_message(response.choices[0].message)
    return call


@dataclass
class DemoModel:
    """The offline stand-in for a language model, and the only one in this project: a fixed,
    deterministic plan that surveys the project's Python files with real tool calls, reads the
    real results, and writes REPORT.md. Like a real server it refuses requests over `window`.
    Unlike a real model it keeps its findings in `notes`, so its report survives compaction."""

    window: int = 24_000
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
    return match.group(1).strip().rstrip('."') [:80] if match else ""


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


@dataclass
class Session:
    """What lasts across REPL questions: the history, the compactor's state and the sawtooth."""

    messages: list[dict]
    config: Config
    summarize: Callable = summarize_default
    compactor: Compactor | None = None
    counts: list[int] = field(default_factory=list)  # messages sent at each iteration
    compactions: int = 0


def new_session(config: Config, summarize: Callable = summarize_default, archive_dir=None) -> Session:
    compactor = None
    if config.strategy not in ("sawtooth", "none"):
        compactor = Compactor(context_window=config.context_window, reserved_output=config.context_window // 8,
                              policy=config.strategy, summarize=summarize, archive_dir=archive_dir,
                              keep_recent=config.keep_recent)
    return Session([{"role": "system", "content": SYSTEM_PROMPT}], config, summarize, compactor)


def compact(session: Session, focus: str | None = None, force: bool = False, log=print) -> None:
    """One call of the compactor, and one visible line when it changed something."""
    before = session.messages
    if session.compactor is not None:
        after = session.compactor.compact(before, focus=focus, force=force)
    elif session.config.strategy == "sawtooth":
        summarize = (lambda middle: session.summarize(middle, focus)) if focus else session.summarize
        after = compact_messages(before, summarize, threshold=0 if force else session.config.threshold,
                                 keep_recent=session.config.keep_recent)
    else:
        after = before
    if after is not before:
        session.compactions += 1
        log(f"[compact] {len(before)} → {len(after)} messages, "
            f"~{estimate_tokens(before):,} → ~{estimate_tokens(after):,} tokens")
        for name, was, now, _ in session.compactor.report if session.compactor else []:
            log(f"          {name:<11} {was - now:>+8,} tokens removed" if was > now else f"          {name:<11} nothing to do")
    session.messages = list(after)


def ask(session: Session, model: Callable, log=print) -> dict:
    """Call the model; if the server says the context is too long, compact and retry once."""
    try:
        return model(session.messages, TOOL_SCHEMAS)
    except Exception as error:
        if not is_context_overflow(error) or session.config.strategy == "none":
            raise
        log("[compact] the server refused the request as too long: compacting and retrying once")
        compact(session, force=True, log=log)
        return model(session.messages, TOOL_SCHEMAS)


def run(session: Session, task: str, model: Callable, ws: Workspace, log=print) -> str:
    """The tutorial's loop: compact, ask, append, run the calls, repeat."""
    session.messages.append({"role": "user", "content": task})
    archive = session.compactor.archive if session.compactor else None
    for _ in range(session.config.max_iterations):
        compact(session, log=log)
        session.counts.append(len(session.messages))
        reply = ask(session, model, log)
        session.messages.append(reply)
        if not reply.get("tool_calls"):
            return content_text(reply)
        focus = None
        for call in reply["tool_calls"]:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            log(f"[tool] {name} {arguments[:70]}")
            if name == "compact":
                focus, result = requested_focus(arguments), "compaction will run now"
            else:
                result = run_tool(ws, name, arguments, archive)
            session.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        if focus is not None:
            compact(session, focus=focus, force=True, log=log)
    return f"stopped after {session.config.max_iterations} iterations without a final answer"


def requested_focus(arguments: str) -> str:
    """The `focus` of a compact call; malformed arguments just mean no focus."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return ""
    return str(args.get("focus", "")) if isinstance(args, dict) else ""


def sawtooth_chart(counts: list[int], height: int = 8) -> str:
    """Messages sent per iteration as a small terminal chart: up while working, down at each compaction."""
    if not counts:
        return ""
    top = max(counts)
    rows = []
    for level in range(height, 0, -1):
        threshold = top * level / height
        label = f"{round(threshold):>4} ┤" if level in (height, height // 2) else "     │"
        rows.append(label + "".join("█" if c >= threshold - 1e-9 else " " for c in counts))
    rows.append("     └" + "─" * len(counts))
    rows.append(f"      messages sent at each of {len(counts)} iterations")
    return "\n".join(rows)


# --------------------------------------------------------------------------------------------
# The command line: the offline demo, one task, or a REPL
# --------------------------------------------------------------------------------------------

DEMO_TASK = "Survey this project's Python files: lines, functions, longest function, TODOs. Write REPORT.md."


def load_env(path: Path | None = None) -> None:
    """Load .env with python-dotenv, refusing a line it cannot parse instead of skipping it."""
    from dotenv import find_dotenv, load_dotenv
    from dotenv.parser import parse_stream
    found = path or Path(find_dotenv(usecwd=True) or "")
    if not found.is_file():
        return
    with open(found, encoding="utf-8") as stream:
        for binding in parse_stream(stream):
            if binding.error:
                raise ConfigError(f"{found}:{binding.original.line}: cannot read "
                                  f"{binding.original.string.strip()!r}; write it as KEY=value")
    load_dotenv(found)


def run_demo(config: Config, log=print) -> Session:
    """The main job with no model: the demo model surveys a temporary copy of this project."""
    log("[demo] No OPENAI_API_KEY or OPENAI_BASE_URL: running the offline demo. The model is a")
    log("[demo] deterministic stand-in, not a language model; the tools and files are real.")
    with tempfile.TemporaryDirectory(prefix="tiny-agent-demo-") as folder:
        for name in ("compact.py", "tiny_agent.py", "lessons", "tests"):
            source = HERE / name
            if source.is_dir():
                shutil.copytree(source, Path(folder) / name, ignore=shutil.ignore_patterns("__pycache__"))
            elif source.exists():
                shutil.copy(source, folder)
        session = new_session(config, archive_dir=Path(folder) / ".archive")
        answer = run(session, DEMO_TASK, DemoModel(window=config.context_window),
                     Workspace(Path(folder)), log)
        report = (Path(folder) / "REPORT.md")
        log("\n" + (report.read_text(encoding="utf-8") if report.exists() else "(no REPORT.md was written)"))
    finish(session, answer, log)
    return session


def finish(session: Session, answer: str, log=print) -> None:
    log(f"[answer] {answer}\n")
    log(sawtooth_chart(session.counts))
    log(f"[done] {len(session.counts)} iterations, {session.compactions} compactions, "
        f"at most {max(session.counts, default=0)} messages sent at once ({session.config.strategy}).")


def repl(session: Session, model: Callable, ws: Workspace) -> None:
    """Questions one after another; the history and the compactor's state carry across them."""
    print(f"[repl] model {session.config.model}, strategy {session.config.strategy}. Empty line or Ctrl-D quits.")
    while True:
        try:
            question = input("you> ").strip()
        except EOFError:
            return
        if not question:
            return
        print(f"agent> {run(session, question, model, ws)}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; every option falls back to .env and then to the defaults in Config."""
    p = argparse.ArgumentParser(description="A tiny agent whose context is compacted on every iteration.")
    p.add_argument("task", nargs="?", help="one task to run; without it, a REPL (or the demo with no model)")
    p.add_argument("--strategy", choices=STRATEGIES, help="how to compact (default: sawtooth)")
    p.add_argument("--demo", action="store_true", help="run the offline demo even if a model is configured")
    p.add_argument("--workspace", default=".", help="the folder the tools may touch (default: .)")
    p.add_argument("--yes", action="store_true", help="run dangerous shell commands without asking")
    p.add_argument("--max-iterations", type=int, help="stop after this many model calls (default: 50)")
    p.add_argument("--threshold", type=int, help="sawtooth: compact above this many messages (default: 30)")
    p.add_argument("--keep-recent", type=int, help="sawtooth: messages kept whole (default: 6)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The demo without a model; with one, a task or a REPL. User errors end in one line."""
    args = parse_args(argv)
    import openai
    try:
        load_env()
        config = load_config(strategy=args.strategy, max_iterations=args.max_iterations,
                             threshold=args.threshold, keep_recent=args.keep_recent)
        if args.demo or not model_configured():
            if args.task:
                print("[demo] no model is configured, so the task is not run; see README: plug in a model")
            run_demo(replace(config, context_window=24_000, max_iterations=args.max_iterations or 100))
            return 0
        model = openai_model(make_client(timeout=120.0), config.model)
        ws = Workspace(Path(args.workspace), approve=(lambda _: True) if args.yes else ask_on_terminal)
        session = new_session(config, archive_dir=Path(args.workspace) / ".tiny_agent" / "archive")
        if args.task:
            finish(session, run(session, args.task, model, ws))
        else:
            repl(session, model, ws)
        return 0
    except ConfigError as error:
        return fail(f"configuration: {error}")
    except openai.APIConnectionError:
        return fail(f"cannot reach {os.environ.get('OPENAI_BASE_URL') or 'api.openai.com'}: "
                    "start the server or fix OPENAI_BASE_URL in .env")
    except openai.AuthenticationError:
        return fail("the server refused the API key: set OPENAI_API_KEY in .env")
    except openai.NotFoundError:
        return fail(f"the server has no model {os.environ.get('MODEL') or Config.model!r}: set MODEL in .env")
    except openai.APIStatusError as error:
        return fail(f"the server answered HTTP {error.status_code}: {str(error)[:200]}")
    except ContextOverflowError as error:
        return fail(str(error))
    except KeyboardInterrupt:
        return fail("interrupted")


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
