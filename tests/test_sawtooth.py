"""The sawtooth (lesson 02): above `threshold` messages, compact_messages keeps the system prompt,
folds the middle into one summary message and keeps the recent tail whole. Each promise has one
plain example here; test_properties.py checks the same promises on generated conversations. The
model path of the summary is in test_model_path.py; everything here is offline."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import sawtooth
from compact import (KEEP_RECENT, THRESHOLD, ACK, LOST_RESULT, find_cut, find_problems, is_summary,
                     parse_summary, summarize_extractive, summary_body)

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
    """A summarizer that remembers every middle (and focus) it was given and returns a fixed text."""

    def __init__(self, text: str = SUMMARY):
        self.text = text
        self.middles: list[list[dict]] = []
        self.focuses: list[str | None] = []

    def __call__(self, middle: list[dict], focus: str | None) -> str:  # called as (middle, focus)
        self.middles.append(copy.deepcopy(middle))
        self.focuses.append(focus)
        return self.text


def pins_the_tutorials_numbers(why: str) -> None:
    """One line for a fork that changed compact.py's THRESHOLD or KEEP_RECENT: which test holds the tutorial's."""
    assert (THRESHOLD, KEEP_RECENT) == (30, 6), \
        f"pins the tutorial's THRESHOLD = 30 and KEEP_RECENT = 6 (compact.py has {THRESHOLD} and {KEEP_RECENT}): {why}"


@pytest.mark.parametrize("n", [3, THRESHOLD - 1, THRESHOLD])
def test_at_or_below_the_threshold_nothing_changes(n):
    messages, summarize = history(n), Recorder()
    assert sawtooth(messages, summarize) is messages
    assert messages == history(n)
    assert summarize.middles == []


def test_one_message_over_the_threshold_is_compacted_to_system_summary_and_tail():
    pins_the_tutorials_numbers("the indexes below are the tutorial's walk-back, 31 - 6 = 25 to 24")
    messages, summarize = history(31), Recorder()
    out = sawtooth(messages, summarize)
    # the plain cut 31 - 6 = 25 lands on a tool result, so the tail starts at its call, 24
    assert messages[25]["role"] == "tool" and messages[24]["tool_calls"]
    assert out[0] == SYSTEM and is_summary(out[1]) and out[2:] == messages[24:]
    assert summarize.middles == [messages[1:24]]


def test_the_summarizer_is_called_with_the_middle_and_the_focus():
    summarize = Recorder()
    sawtooth(history(31), summarize, focus="the money helpers")
    sawtooth(history(31), summarize)
    assert summarize.focuses == ["the money helpers", "Keep going, please."]  # the latest request by default


def test_the_result_is_a_new_list_and_the_input_is_not_mutated():
    messages = history(40)
    before = copy.deepcopy(messages)
    out = sawtooth(messages, Recorder())
    assert out is not messages and len(out) < len(messages)
    assert messages == before


def test_the_system_prompt_is_kept_and_never_summarized():
    summarize = Recorder()
    out = sawtooth(history(40), summarize)
    assert out[0] == SYSTEM
    assert all(m.get("role") != "system" for m in summarize.middles[0])


def test_without_a_system_prompt_nothing_is_pinned_at_the_head():
    messages, summarize = history(40, system=False), Recorder()
    out = sawtooth(messages, summarize)
    assert is_summary(out[0])
    assert summarize.middles[0][0] == TASK
    assert summarize.middles[0] + out[1:] == messages


def test_above_max_tokens_it_compacts_even_below_the_message_threshold():
    messages, summarize = history(20), Recorder()
    assert sawtooth(messages, summarize) is messages  # 20 messages: under the threshold
    out = sawtooth(messages, summarize, max_tokens=1_000)
    assert is_summary(out[1]) and len(out) < len(messages)


# ---- the output is repaired -----------------------------------------------------------------


def test_a_stray_system_message_in_the_kept_tail_becomes_a_user_note():
    messages = history(40)
    messages.insert(38, {"role": "system", "content": "You are now in plan mode."})  # between two steps
    out = sawtooth(messages, Recorder())
    assert {"role": "user", "content": "[system note] You are now in plan mode."} in out
    assert [m["role"] for m in out].count("system") == 1
    assert find_problems(out) == []


def test_an_unanswered_call_in_the_kept_tail_gets_a_result():
    messages = history(40)
    messages[-1:] = [{"role": "assistant", "content": None,
                      "tool_calls": [call("a", "bash", command="ls"), call("b", "bash", command="pwd")]},
                     {"role": "tool", "tool_call_id": "a", "content": "src tests"},
                     {"role": "user", "content": "and?"}]
    out = sawtooth(messages, Recorder())
    assert out[-3:] == [{"role": "tool", "tool_call_id": "a", "content": "src tests"},
                        {"role": "tool", "tool_call_id": "b", "content": LOST_RESULT},
                        {"role": "user", "content": "and?"}]
    assert find_problems(out) == []


# ---- the growth guard -----------------------------------------------------------------------


def test_a_summary_longer_than_what_it_replaces_returns_the_input_unchanged():
    messages, summarize = history(31), Recorder("word " * 3_900)  # within the guard's 4,000 tokens, over the middle
    assert sawtooth(messages, summarize) is messages
    assert len(summarize.middles) == 1  # the summarizer ran: the guard, not the threshold, said no


# ---- the latest request ---------------------------------------------------------------------


def test_a_latest_request_in_the_summarized_middle_stays_verbatim_at_the_start_of_the_tail():
    pins_the_tutorials_numbers("the request must fall in the middle and the tail be the last 6")
    request = {"role": "user", "content": "Also rename parse_money to parse_amount, and keep the old name as an alias."}
    messages = history(20) + [request] + [m for i in range(50, 60) for m in step(i)]
    summarize = Recorder()
    out = sawtooth(messages, summarize)  # SUMMARY does not mention the request
    assert is_summary(out[1]) and out[2] == ACK and out[3] == request and out[4:] == messages[-6:]
    assert all(request not in middle for middle in summarize.middles)


def test_a_latest_request_in_the_kept_tail_is_not_quoted_again():
    messages = history(40) + [{"role": "user", "content": "Now run the tests."}]
    out = sawtooth(messages, Recorder())
    assert is_summary(out[1]) and out[-1] == {"role": "user", "content": "Now run the tests."}
    assert "latest request" not in out[1]["content"]


# ---- where to cut ---------------------------------------------------------------------------


def parallel_history(calls: int, system: bool = True) -> list[dict]:
    """[System], task, 12 one-call steps, one step with `calls` parallel calls, then 2 more steps."""
    messages = ([SYSTEM] if system else []) + [TASK]
    for i in range(12):
        messages += step(i)
    return copy.deepcopy(messages + step(12, calls) + step(13) + step(14))


@pytest.mark.parametrize("system", [True, False])
@pytest.mark.parametrize("calls, landing", [(1, 0), (3, 0), (3, 1), (3, 2), (26, 0), (26, 13), (26, 25)])
def test_the_cut_never_separates_tool_calls_from_their_results(calls, landing, system):
    """keep_recent is chosen so that the plain cut lands on result number `landing` of the group."""
    messages, summarize = parallel_history(calls, system), Recorder()
    head = 1 if system else 0
    group = next(i for i, m in enumerate(messages) if len(m.get("tool_calls") or []) == calls and i >= 24 + head)
    keep_recent = len(messages) - (group + 1 + landing)
    assert find_cut(messages, keep_recent, head) == group
    out = sawtooth(messages, summarize, threshold=20, keep_recent=keep_recent)
    assert out[head + 1:head + 3] == [ACK, TASK] and out[head + 3:] == messages[group:]  # the task is the
    assert summarize.middles == [messages[head + 1:group]]  # latest request: it stays, before the tail
    assert find_problems(out) == []


@pytest.mark.parametrize("system", [True, False])
def test_when_the_tail_is_one_tool_call_group_it_returns_unchanged(system):
    messages = ([SYSTEM] if system else []) + step(0, calls=35)
    summarize = Recorder()
    assert sawtooth(messages, summarize) is messages
    assert summarize.middles == []


def test_keep_recent_one_keeps_the_last_message():
    messages = history(40) + [{"role": "user", "content": "Now run the tests."}]
    assert find_cut(messages, 0, 1) == len(messages) - 1
    out = sawtooth(messages, Recorder(), keep_recent=1)
    # the summary is a user message, so an acknowledgement keeps user and assistant turns alternating
    assert out == [SYSTEM, out[1], ACK, messages[-1]] and is_summary(out[1])


# ---- what is refused ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [5, 40])  # below and above the threshold
def test_a_message_without_a_role_raises_a_value_error_naming_its_index(n):
    messages = history(n)
    messages[3] = {"content": "who said this?"}
    with pytest.raises(ValueError, match=r"\bmessage 3\b"):
        sawtooth(messages, Recorder())


@pytest.mark.parametrize("value", [tuple(history(40)), {"messages": history(40)}, "x" * 40, None])
def test_a_value_that_is_not_a_list_raises_a_type_error(value):
    with pytest.raises(TypeError, match="must be a list"):
        sawtooth(value, Recorder())


# ---- the summary message and the rolling summary ---------------------------------------------


def test_the_summary_message_frames_the_summary_as_reference_then_says_continue():
    summary = sawtooth(history(31), Recorder())[1]
    text = summary["content"]
    assert summary["role"] == "user"
    marks = [text.lower().find(x) for x in ("summar", "earlier turns", "reference material",
                                             "not new instructions", SUMMARY.lower(), "continue")]
    assert -1 not in marks and marks[1:] == sorted(marks[1:])
    assert "continue" in text.strip().split("\n")[-1].lower()


def test_the_earlier_summary_is_the_start_of_the_next_middle():
    summarize = Recorder()
    first = sawtooth(history(31), summarize)
    second = sawtooth(first + [m for i in range(40, 52) for m in step(i)], summarize)
    assert summarize.middles[1][0] == first[1]
    assert sum(is_summary(m) for m in second) == 1


def quiet_reads(start: int, n: int) -> list[dict]:
    """n read_file steps with no assistant text, no identifier and no error: no summary item."""
    return [m for i in range(start, start + n) for m in (
        {"role": "assistant", "content": None, "tool_calls": [call(f"q{i}", "read_file", path="README")]},
        {"role": "tool", "tool_call_id": f"q{i}", "content": "nothing new in there, " * 40})]


def test_rolling_twice_the_second_summary_contains_what_the_first_one_said():
    messages = [SYSTEM, {"role": "user", "content": "Fix parse_money in src/money.py for ticket HAT-1234."},
                *step(0, name="bash", output="FAILED tests/test_money.py::test_round - assert 0.1 == 0.10000001"),
                {"role": "assistant", "content": "The fix is to round once, in parse_money."},
                {"role": "user", "content": "Also keep parse_amount as an alias."},
                *quiet_reads(0, 4)]
    first = sawtooth(messages, summarize_extractive, threshold=8, keep_recent=2)
    said = parse_summary(summary_body(first[1]))
    assert said["Errors seen"] and said["Identifiers"]
    second = sawtooth(first + quiet_reads(10, 6), summarize_extractive, threshold=8, keep_recent=2)
    assert sum(is_summary(m) for m in second) == 1 and second[1] is not first[1]
    body = summary_body(second[1])
    for title, items in said.items():
        for item in items if title != "Tools run" else []:  # a count, which the second summary updates
            for part in item.split(", ") if title == "Identifiers" else [item]:
                assert part in body, (title, part)


ERROR = "ImportError: cannot import name 'parse_money' from 'src.helpers'"
CONSTRAINT = "Never edit anything under vendor/."


def rounds_of_work(rounds: int, summarize) -> tuple[list[dict], list[list[dict]]]:
    """A first stretch holding a constraint and an error, then `rounds` more stretches of plain
    reads, compacting after each; returns the end and every state."""
    messages = [SYSTEM, {"role": "user", "content": f"Fix the helpers. {CONSTRAINT}"}]
    messages += step(0, name="bash", output=f"Traceback (most recent call last):\n{ERROR}")
    states = []
    for r in range(rounds):
        messages = messages + [m for i in range(r * 20 + 1, r * 20 + 16) for m in step(i)]
        messages = sawtooth(messages, summarize)
        states.append(messages)
    return messages, states


def test_offline_summaries_roll_forward_so_first_facts_survive_three_compactions():
    end, states = rounds_of_work(3, summarize_extractive)
    assert [len(s) for s in states] == [len(end)] * 3  # each round compacted down to the same size
    sections = parse_summary(summary_body(next(m for m in end if is_summary(m))))
    assert end[3] == {"role": "user", "content": f"Fix the helpers. {CONSTRAINT}"}  # the latest request stays
    assert ERROR in sections["Errors seen"]


def test_structured_summaries_roll_forward_so_first_facts_survive_three_compactions():
    end, states = rounds_of_work(3, summarize_extractive)
    assert [len(s) for s in states] == [len(end)] * 3
    sections = parse_summary(summary_body(next(m for m in end if is_summary(m))))
    assert end[3] == {"role": "user", "content": f"Fix the helpers. {CONSTRAINT}"}  # the latest request stays
    assert ERROR in sections["Errors seen"]
    in_tail = sum(len(m.get("tool_calls") or []) for m in end[2:])
    assert sections["Tools run"] == [f"bash ×1, read_file ×{45 - in_tail}"]  # counted once each


def test_without_a_summarizer_and_without_a_model_the_offline_summarizer_is_used():
    # the one extractive summarizer, the ladder's too
    pins_the_tutorials_numbers("the header's counts are those of the tutorial's cut of 40 messages")
    messages = history(40)
    out = sawtooth(messages)
    assert out == sawtooth(messages, summarize_extractive)
    assert "\n(Compaction 1 replaced 32 messages, ~1,763 tokens, turns 1-16.)\n" in out[1]["content"]  # the header
    assert summary_body(out[1]) == summarize_extractive(messages[2:34])  # an extractive summary needs no focus


# ---- summarize_extractive: the sawtooth's extractive summary --------------------------------------

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
    {"role": "user", "content": "Use the new class name, Gadget."},
    {"role": "assistant", "content": "The class was renamed to Gadget, so I will use the new name.",
     "tool_calls": [call("c3", "edit_file", path="src/app.py", old="Widget", new="Gadget")]},
    {"role": "tool", "tool_call_id": "c3", "content": "edited src/app.py"},
    {"role": "assistant", "content": None, "tool_calls": [call("c4", "bash", command="python -m pytest -q")]},
    {"role": "tool", "tool_call_id": "c4", "content": "3 passed in 0.12s"},
    {"role": "assistant", "content": "All tests pass now: the import uses Gadget."},
]


@pytest.mark.parametrize("section, expected", [
    ("Decisions", "The class was renamed to Gadget, so I will use the new name."),
    ("Identifiers", "src.widgets"),  # src/app.py is shown whole by the calls' arguments, so not listed twice
    ("Errors seen", "E   ImportError: cannot import name 'Widget' from 'src.widgets'"),
    ("Progress", "All tests pass now: the import uses Gadget."),
    ("Relevant to the focus", "The class was renamed to Gadget"),
    ("Files changed", "src/app.py"),
    ("Calls (arguments verbatim)", "python -m pytest -q"),
])
def test_the_offline_summary_keeps(section, expected):
    sections = parse_summary(summarize_extractive(WORK[1:], focus="the Gadget rename"))
    assert list(sections) == ["Decisions", "Files changed", "Errors seen", "Identifiers", "Calls (arguments verbatim)",
                              "Tools run", "Progress", "Relevant to the focus"]  # the user's words are the state's
    assert any(expected in item for item in sections[section]), sections


def test_the_offline_summary_is_deterministic():
    assert summarize_extractive(WORK[1:]) == summarize_extractive(copy.deepcopy(WORK[1:])) == summarize_extractive(WORK[1:])
