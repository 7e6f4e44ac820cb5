"""The sawtooth (lesson 02): above `threshold` messages, compact_messages keeps the system prompt,
folds the middle into one summary message and keeps the recent tail whole. The model path of the
summary is in test_model_path.py; everything here is offline."""

from __future__ import annotations

import copy
import json

import pytest

from compact import compact_messages, find_problems, is_summary, parse_summary, summarize_offline

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
TASK = {"role": "user", "content": "Tidy up the helpers in src/ and keep the tests green."}
FILLER = "The module defines helpers for parsing dates, money and addresses, with tests beside it. " * 4
SUMMARY = "SUMMARY-TEXT: the agent read the helper modules one by one."


def call(call_id: str, name: str, **args) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def step(i: int, calls: int = 1, name: str = "read_file", output: str = FILLER) -> list[dict]:
    """One agent step: an assistant message with `calls` parallel tool calls, then their results."""
    ids = [f"call_{i}_{k}" for k in range(calls)]
    assistant = {"role": "assistant", "content": f"Step {i}: looking at more helpers.",
                 "tool_calls": [call(c, name, path=f"src/helpers_{i}_{k}.py") for k, c in enumerate(ids)]}
    return [assistant, *({"role": "tool", "tool_call_id": c, "content": f"[{c}] {output}"} for c in ids)]


def history(n: int, system: bool = True) -> list[dict]:
    """Exactly `n` messages: [system], the task, one-call steps, and a user nudge when n needs one."""
    messages = ([SYSTEM] if system else []) + [TASK]
    i = 0
    while len(messages) + 2 <= n:
        messages += step(i)
        i += 1
    if len(messages) < n:
        messages.append({"role": "user", "content": "Keep going, please."})
    return copy.deepcopy(messages)


class Recorder:
    """A summarizer that remembers every middle it was given and returns a fixed text."""

    def __init__(self):
        self.middles: list[list[dict]] = []

    def __call__(self, middle: list[dict]) -> str:
        self.middles.append(copy.deepcopy(middle))
        return SUMMARY


@pytest.mark.parametrize("n", [3, 29, 30])
def test_at_or_below_the_threshold_nothing_changes(n):
    messages, summarize = history(n), Recorder()
    assert compact_messages(messages, summarize) == history(n)
    assert summarize.middles == []


def test_one_message_over_the_threshold_is_compacted_to_system_summary_and_tail():
    messages, summarize = history(31), Recorder()
    out = compact_messages(messages, summarize)
    # the plain cut 31 - 6 = 25 lands on a tool result, so the tail starts at its call, 24
    assert messages[25]["role"] == "tool" and messages[24]["tool_calls"]
    assert out[0] == SYSTEM and is_summary(out[1]) and out[2:] == messages[24:]
    assert summarize.middles == [messages[1:24]]


def test_the_result_is_a_new_list_and_the_input_is_not_mutated():
    messages = history(40)
    before = copy.deepcopy(messages)
    out = compact_messages(messages, Recorder())
    assert out is not messages and len(out) < len(messages)
    assert messages == before


def test_the_system_prompt_is_kept_and_never_summarized():
    summarize = Recorder()
    out = compact_messages(history(40), summarize)
    assert out[0] == SYSTEM
    assert all(m.get("role") != "system" for m in summarize.middles[0])


def test_without_a_system_prompt_nothing_is_pinned_at_the_head():
    messages, summarize = history(40, system=False), Recorder()
    out = compact_messages(messages, summarize)
    assert is_summary(out[0])
    assert summarize.middles[0][0] == TASK
    assert summarize.middles[0] + out[1:] == messages


def parallel_history(calls: int) -> list[dict]:
    """System, task, 12 one-call steps, one step with `calls` parallel calls, then 2 more steps."""
    messages = [SYSTEM, TASK]
    for i in range(12):
        messages += step(i)
    return copy.deepcopy(messages + step(12, calls) + step(13) + step(14))


@pytest.mark.parametrize("calls, landing", [(1, 0), (3, 0), (3, 1), (3, 2)])
def test_the_cut_never_separates_tool_calls_from_their_results(calls, landing):
    """keep_recent is chosen so that the plain cut lands on result number `landing` of the group."""
    messages, summarize = parallel_history(calls), Recorder()
    group = next(i for i, m in enumerate(messages) if len(m.get("tool_calls") or []) == calls and i >= 26)
    keep_recent = len(messages) - (group + 1 + landing)
    out = compact_messages(messages, summarize, threshold=20, keep_recent=keep_recent)
    assert out[2:] == messages[group:]
    assert summarize.middles == [messages[1:group]]
    assert find_problems(out) == []


@pytest.mark.parametrize("system", [True, False])
def test_when_the_tail_is_one_tool_call_group_it_returns_unchanged(system):
    messages = ([SYSTEM] if system else []) + step(0, calls=35)
    summarize = Recorder()
    assert compact_messages(messages, summarize) == messages
    assert summarize.middles == []


def test_the_summary_message_frames_the_summary_as_reference_then_says_continue():
    summary = compact_messages(history(31), Recorder())[1]
    text = summary["content"]
    assert summary["role"] == "user"
    marks = [text.lower().find(x) for x in ("summar", "earlier turns", "reference material",
                                             "not new instructions", SUMMARY.lower(), "continue")]
    assert -1 not in marks and marks[1:] == sorted(marks[1:])
    assert "continue" in text.strip().split("\n")[-1].lower()


def test_the_earlier_summary_is_the_start_of_the_next_middle():
    summarize = Recorder()
    first = compact_messages(history(31), summarize)
    second = compact_messages(first + [m for i in range(40, 52) for m in step(i)], summarize)
    assert summarize.middles[1][0] == first[1]
    assert sum(is_summary(m) for m in second) == 1


ERROR = "ImportError: cannot import name 'parse_money' from 'src.helpers'"
CONSTRAINT = "Never edit anything under vendor/."


def rounds_of_work(rounds: int) -> tuple[list[dict], list[list[dict]]]:
    """A first stretch holding a constraint and an error, then `rounds` more stretches of plain
    reads, compacting with the offline summarizer after each; returns the end and every state."""
    messages = [SYSTEM, {"role": "user", "content": f"Fix the helpers. {CONSTRAINT}"}]
    messages += step(0, name="bash", output=f"Traceback (most recent call last):\n{ERROR}")
    states = []
    for r in range(rounds):
        messages = messages + [m for i in range(r * 20 + 1, r * 20 + 16) for m in step(i)]
        messages = compact_messages(messages, summarize_offline)
        states.append(messages)
    return messages, states


def test_offline_summaries_roll_forward_so_first_facts_survive_three_compactions():
    end, states = rounds_of_work(3)
    assert [len(s) for s in states] == [len(end)] * 3  # each round compacted down to the same size
    sections = parse_summary(next(m for m in end if is_summary(m))["content"])
    assert CONSTRAINT in sections["User constraints (verbatim)"]
    assert ERROR in sections["Errors seen"]
    in_tail = sum(len(m.get("tool_calls") or []) for m in end[2:])
    assert sections["Tools run"] == [f"bash ×1, read_file ×{45 - in_tail}"]  # counted once each


def test_without_a_summarizer_and_without_a_model_the_offline_summarizer_is_used():
    messages = history(40)
    out = compact_messages(messages)
    assert out == compact_messages(messages, summarize_offline)
    assert "## Goal" in out[1]["content"]


# A short, complete piece of work for the offline summarizer to read.
WORK = [
    SYSTEM,
    {"role": "user", "content": "Fix the failing import in src/app.py. Do not change the public API. "
                                "Always run the tests after an edit."},
    {"role": "assistant", "content": "I will read the module first.",
     "tool_calls": [call("c1", "read_file", path="src/app.py")]},
    {"role": "tool", "tool_call_id": "c1", "content": "from src.widgets import Widget\n\nAPP = Widget()"},
    {"role": "assistant", "content": None, "tool_calls": [call("c2", "bash", command="python -m pytest -q")]},
    {"role": "tool", "tool_call_id": "c2", "content": "E   ImportError: cannot import name 'Widget' from "
                                                     "'src.widgets'\n1 failed"},
    {"role": "assistant", "content": "The class was renamed to Gadget, so I will use the new name.",
     "tool_calls": [call("c3", "edit_file", path="src/app.py", old="Widget", new="Gadget")]},
    {"role": "tool", "tool_call_id": "c3", "content": "edited src/app.py"},
    {"role": "assistant", "content": None, "tool_calls": [call("c4", "bash", command="python -m pytest -q")]},
    {"role": "tool", "tool_call_id": "c4", "content": "3 passed in 0.12s"},
    {"role": "assistant", "content": "All tests pass now: the import uses Gadget."},
]


@pytest.mark.parametrize("section, expected", [
    ("Goal", WORK[1]["content"]),
    ("User constraints (verbatim)", "Do not change the public API."),
    ("User constraints (verbatim)", "Always run the tests after an edit."),
    ("Files changed", "src/app.py"),
    ("Errors seen", "ImportError: cannot import name 'Widget' from 'src.widgets'"),
    ("Tools run", "bash ×2, edit_file ×1, read_file ×1"),
    ("Progress", "All tests pass now: the import uses Gadget."),
])
def test_the_offline_summary_keeps(section, expected):
    sections = parse_summary(summarize_offline(WORK[1:]))
    assert any(expected in item for item in sections.get(section, [])), sections


def test_the_offline_summary_is_deterministic():
    assert summarize_offline(WORK[1:]) == summarize_offline(copy.deepcopy(WORK[1:])) == summarize_offline(WORK[1:])
