"""Small helpers shared by the lessons, so each lesson shows only its own idea: printing, hand-made
tool calls, and a Compactor watched through lessons/benchmark.py's replay.

Importing this module also puts the repository root on sys.path, so a lesson runs from a plain
clone (`python lessons/03_measuring_tokens.py`) even before `pip install -e .`. It imports Part II of
compact.py and Layer 2 of tiny_agent.py, so lesson 02, which reads with Part I and Layer 1 alone,
does without it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compact import content_text, estimate_tokens, message_tokens  # noqa: E402
from tiny_agent import ConfigError, strict_env  # noqa: E402

try:  # a lesson uses the model set in .env, like tiny_agent.py does
    strict_env()
except ConfigError as error:
    sys.exit(f"error: configuration: {error}")


def banner(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 72 - len(title)))


def one_line(message: dict, width: int = 70) -> str:
    """`assistant → read_file(src/app.py)` or `tool: first words…`, for a list view."""
    role = message.get("role", "?")
    calls = message.get("tool_calls") or []
    if calls:
        names = ", ".join(c["function"]["name"] for c in calls)
        text = f"→ {names}" + (f"  {content_text(message)}" if content_text(message) else "")
    else:
        text = content_text(message)
    text = " ".join(text.split())
    return f"{role:<9} {text[:width]}{'…' if len(text) > width else ''}"


def show(messages: list[dict], title: str = "", limit: int = 40) -> None:
    """Print a message list: one line a message with its size, then the totals."""
    if title:
        print(f"--- {title}")
    for i, m in enumerate(messages[:limit]):
        print(f"  {i:>3} {message_tokens(m):>6,} tok  {one_line(m)}")
    if len(messages) > limit:
        print(f"  … {len(messages) - limit} more")
    print(f"  total: {len(messages)} messages, ~{estimate_tokens(messages):,} tokens")


def sizes(label: str, before: list[dict], after: list[dict]) -> None:
    """`[label] 31 → 8 messages, ~12,300 → ~2,100 tokens (-83%)`."""
    b, a = estimate_tokens(before), estimate_tokens(after)
    print(f"[{label}] {len(before)} → {len(after)} messages, ~{b:,} → ~{a:,} tokens "
          f"({(a - b) / max(b, 1):+.0%})")


# --- Hand-made messages ----------------------------------------------------------------------


def call(call_id: str, name: str, **arguments) -> dict:
    """One tool call as a model writes it: the arguments are a JSON string."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def asks(*calls: dict, text: str = "", **extra) -> dict:
    """An assistant message that makes these calls (several: parallel calls)."""
    return {"role": "assistant", "content": text, **extra, "tool_calls": list(calls)}


def result(call_id: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def step(call_id: str, name: str, output: str, text: str = "", **arguments) -> list[dict]:
    """One turn of the loop: an assistant message with one call, and its result."""
    return [asks(call(call_id, name, **arguments), text=text), result(call_id, output)]


# --- Files for the loop to work on -----------------------------------------------------------

SHOP_FILES = ["cart", "orders", "users", "billing", "search", "mailer", "reports", "auth", "stock", "coupons"]


def make_project(folder: Path) -> None:
    """A few small Python modules for the agent to survey."""
    for name in SHOP_FILES:
        functions = "\n\n".join(
            f"def {verb}_{name}(item, limit=10):\n    \"\"\"{verb.title()} one {name} entry.\"\"\"\n"
            f"    # TODO: handle a missing {name}\n    return [item] * min(limit, {i + 3})\n"
            for i, verb in enumerate(["load", "save", "check", "render", "delete", "export", "merge"]))
        (folder / f"{name}.py").write_text(f'"""The {name} module of a small shop."""\n\n{functions}')


# --- A Compactor watched through the benchmark's replay --------------------------------------


def watch(messages: list[dict], make: Callable, on_compaction: Callable = lambda compactor, before, after: None):
    """Replay `messages` as the agent loop produced them (lessons/benchmark.replay), through the
    Compactor `make(summarizer)` builds; `on_compaction(compactor, before, after)` sees every
    compaction. Returns (compactor, run, summarizer): the benchmark's Run and CountingSummarizer."""
    from benchmark import Strategy, replay  # the benchmark owns the replay: lessons import it
    box: dict = {}

    def start(summarizer):
        compactor = make(summarizer)
        box.update(compactor=compactor, summarizer=summarizer)

        def compact(history):
            out = compactor.compact(history)
            if out is not history:
                on_compaction(compactor, history, out)
            return out
        return compact
    run = replay(messages, Strategy("lesson", start), window=sys.maxsize)  # no over-window count here
    return box["compactor"], run, box["summarizer"]
