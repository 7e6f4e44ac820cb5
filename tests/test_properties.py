"""Property tests: hypothesis builds thousands of agent conversations, valid and damaged, and every
compactor must keep the same promises on all of them. Each test counts its own cases and checks
that they held the quirks and outcomes it is about (a property never met proves nothing). Run with
`-s` to see the counts. test_sawtooth.py has one plain example for each sawtooth promise."""

from __future__ import annotations

import copy
import json
import os
import random
from collections import Counter

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import compact
from conftest import sawtooth, compacting_policies

# Deterministic: the same examples every run, no example database, no per-example deadline. No
# shrinking either: shrinking a 60-message conversation can take minutes, so a failure prints the
# generated case as it is (add Phase.shrink to the phases here to get a smaller one locally).
# Two sizes: "quick" in the README's test command, "thorough" in CI's slow part
# (HYPOTHESIS_PROFILE=thorough python -m pytest tests/test_properties.py).
EXAMPLES = {"quick": 30, "thorough": 120}
for _name, _examples in EXAMPLES.items():
    settings.register_profile(_name, derandomize=True, database=None, deadline=None, max_examples=_examples,
                              phases=[Phase.explicit, Phase.generate], print_blob=False,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
RELIABILITY = settings(settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick")))

# --------------------------------------------------------------------------------------------
# Strategies: OpenAI-format agent conversations
# --------------------------------------------------------------------------------------------

WORDS = ("the cart order session returns value request handler test passed line import def class None "
         "True self config user payload total price item checkout retry cache 42 3.14 0x1f 200 404 "
         "src/shop/cart.py tests/test_cart.py 订单 测试 会话 ok").split()
ERROR_LINES = ("Traceback (most recent call last):", "AssertionError: expected 3 items, got 2",
               "E   KeyError: 'session_id'", "FAILED tests/test_cart.py::test_total - assert 41 == 42")
CONSTRAINTS = ("Never modify the migrations folder.", "Always run the tests before you commit.",
               "Do not add new dependencies.", "请用中文回答。")
DECISIONS = ("I decided to use a lock because two workers write the cart.", "The fix is to round once.",
             "Next I will run the tests again.")
TOOLS = ("read_file", "bash", "grep", "write_file", "edit_file", "cache_read")


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n))


def tool_output(rng: random.Random, lines: int) -> str:
    out = [words(rng, rng.randint(3, 14)) for _ in range(lines)]
    if lines > 2 and rng.random() < 0.4:
        out.insert(rng.randrange(lines), rng.choice(ERROR_LINES))
    return "\n".join(out)


def arguments(rng: random.Random, name: str, big: bool) -> str:
    path = rng.choice(("src/shop/cart.py", "src/shop/orders.py", "tests/test_cart.py", "README.md"))
    if name == "bash":
        return json.dumps({"command": rng.choice(("pytest -q", "ls src", "git diff", "python -m shop"))})
    if name == "grep":
        return json.dumps({"pattern": rng.choice(WORDS), "path": "src"})
    if name in ("write_file", "edit_file"):
        return json.dumps({"path": path, "content": tool_output(rng, 60 if big else 3)}, ensure_ascii=False)
    if name == "cache_read":
        return json.dumps({"key": f"k{rng.randint(0, 9)}"})
    return json.dumps({"path": path})


@st.composite
def conversations(draw) -> list[dict]:
    """A valid agent conversation: optional system prompt, user turns, plain assistant turns, and
    tool-call turns with 1-3 parallel calls whose results follow right after, in any order. Ids are
    sometimes reused by a later call, as GPT-4o does in the recorded tau-bench data."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    messages: list[dict] = []
    if draw(st.booleans()):
        size = draw(st.sampled_from((5, 40, 300, 1_200)))  # the largest leaves little of a small window
        messages.append({"role": "system", "content": "You are a coding agent. " + words(rng, size)})
    messages.append({"role": "user", "content": "Task: fix the cart total. " + words(rng, 12)})
    ids: list[str] = []
    for turn in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(("user", "text", "calls", "calls", "calls")))
        if kind == "user":
            extra = " " + draw(st.sampled_from(CONSTRAINTS)) if draw(st.booleans()) else ""
            pasted = "\n" + tool_output(rng, 100) if draw(st.integers(0, 9)) == 0 else ""  # a pasted log
            messages.append({"role": "user", "content": f"Request {turn}: {words(rng, 8)}.{extra}{pasted}"})
        elif kind == "text":
            messages.append({"role": "assistant", "content": draw(st.sampled_from(DECISIONS)) + " " + words(rng, 10)})
        else:
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                free = [i for i in ids if i not in {c["id"] for c in calls}]
                reuse = free and draw(st.integers(0, 4)) == 0
                call_id = draw(st.sampled_from(free)) if reuse else f"call_{len(ids)}"
                ids.append(call_id)
                name = draw(st.sampled_from(TOOLS))
                calls.append({"id": call_id, "type": "function", "function": {
                    "name": name, "arguments": arguments(rng, name, big=draw(st.integers(0, 5)) == 0)}})
            content = draw(st.sampled_from((None, "", "Let me look. " + words(rng, 6))))
            messages.append({"role": "assistant", "content": content, "tool_calls": calls})
            size = draw(st.sampled_from((1, 2, 5, 10, 20, 40, 80, 300)))
            results = [{"role": "tool", "tool_call_id": c["id"], "content": tool_output(rng, size)} for c in calls]
            messages += draw(st.permutations(results))
    return messages


@st.composite
def damaged_conversations(draw) -> list[dict]:
    """A conversation with what recorded data and buggy agents produce: a call whose result is
    missing, a result with no call before it (or a second result for one call), and system
    messages after the start."""
    messages = draw(conversations())
    for n in range(draw(st.integers(1, 3))):
        damage = draw(st.sampled_from(("missing result", "orphan result", "duplicate result", "extra system")))
        results = [i for i, m in enumerate(messages) if m["role"] == "tool"]
        if damage == "missing result" and results:
            del messages[draw(st.sampled_from(results))]
        elif damage == "duplicate result" and results:
            i = draw(st.sampled_from(results))
            messages.insert(i + 1, dict(messages[i]))
        elif damage == "extra system":
            at = draw(st.integers(1, len(messages)))
            messages.insert(at, {"role": "system", "content": f"Late system note {n}."})
        else:
            orphan = {"role": "tool", "tool_call_id": f"call_orphan_{n}", "content": "stray output"}
            messages.insert(draw(st.integers(0, len(messages))), orphan)
    if not compact.find_problems(messages):  # a later damage undid an earlier one (a duplicate whose original went)
        messages.append({"role": "tool", "tool_call_id": "call_orphan_last", "content": "stray output"})
    return messages


def squeezed_by_the_system_prompt() -> list[dict]:
    """A system prompt that leaves about 280 of a 4,000-token window: the latest turn fits there,
    the summary of the earlier turns does not (a large prompt on a small local model)."""
    rng = random.Random(1)
    messages = [{"role": "system", "content": "You are a coding agent. " + words(rng, 2_100)},
                {"role": "user", "content": "Task: fix the cart total. Never modify the migrations folder."}]
    for i in range(6):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/shop/m{i}.py"})}}
        messages += [{"role": "assistant", "content": "I decided to read it because the total is wrong.",
                      "tool_calls": [call]}, {"role": "tool", "tool_call_id": f"call_{i}", "content": tool_output(rng, 10)}]
    return messages + [{"role": "user", "content": "Request 9: now run the tests."}]


def pasted_past_the_window() -> list[dict]:
    """A valid conversation whose latest user message (a pasted log) alone is larger than a
    2,000-token window: no compaction can make it fit, so the Compactor must raise."""
    rng = random.Random(2)
    messages = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Task: fix the cart total."}]
    for i in range(4):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": "pytest -q"})}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"call_{i}", "content": tool_output(rng, 40)}]
    return messages + [{"role": "user", "content": "Here is the log:\n" + tool_output(rng, 400)}]


# --------------------------------------------------------------------------------------------
# What every compaction must keep
# --------------------------------------------------------------------------------------------


def assert_valid(messages: list[dict]) -> None:
    assert compact.find_problems(messages) == []
    assert compact.find_problems(messages, provider="anthropic") == []


def latest_user_text(messages: list[dict]) -> str | None:
    latest = next((m for m in reversed(messages) if m["role"] == "user"), None)
    return None if latest is None else latest["content"]


def latest_turn(messages: list[dict]) -> list[dict]:
    """The latest user message and the newest step (the last message, with its call if it is a
    result): what any compaction has to keep, so what may legitimately not fit."""
    start = len(messages) - 1
    while start > 0 and messages[start]["role"] == "tool":
        start -= 1
    user = [m for m in messages if m["role"] == "user"][-1:]
    return [m for m in user if not any(m is t for t in messages[start:])] + messages[start:]


def has_own_message(messages: list[dict], text: str) -> bool:
    return any(m["role"] == "user" and compact.content_text(m) == text for m in messages)


def check_compaction(before: list[dict], out: list[dict], valid_input: bool, summary_may_quote: bool) -> None:
    """What every compaction promises when it changed the list. Whether it had to change it is
    checked by check_sawtooth and check_compactor."""
    assert out is not before
    assert_valid(out)
    if before[0]["role"] == "system":
        assert out[0] == before[0], "the system prompt moved or changed"
    text = latest_user_text(before)
    in_summary = any(compact.is_summary(m) and text in compact.content_text(m) for m in out)
    # a request over the user's room (at most USER_TOKENS) stays its own message, cut to it by the one
    # cutter (whole in the archive): its head, and a marker that says so
    cut = any(m["role"] == "user" and not compact.is_generated(m) and compact.content_text(m).startswith(text[:40])
              and " cut: " in compact.content_text(m) for m in out)
    assert has_own_message(out, text) or (summary_may_quote and in_summary) or cut, "the latest user request was lost"
    if valid_input:
        assert compact.estimate_tokens(out) <= compact.estimate_tokens(before), "compaction grew the history"


def run_sawtooth(messages, threshold, keep_recent):
    return sawtooth(messages, compact.summarize_extractive, threshold=threshold, keep_recent=keep_recent)


def sawtooth_had_to_compact(messages: list[dict], threshold: int, keep_recent: int) -> bool:
    """The sawtooth's rule, restated: over the threshold, with a middle to summarize (the tail is not
    one tool-call group), and a summary message smaller than the middle it replaces."""
    if len(messages) <= threshold:
        return False
    head = compact.system_head(messages)
    cut = compact.find_cut(messages, keep_recent, head)
    if cut <= head:
        return False
    middle, tail = messages[head:cut], messages[cut:]
    latest = compact.user_requests(messages)[-1:]
    moved = [] if not latest or any(m is latest[0] for m in tail) else compact.cut_over(  # it stays a message
        latest, compact.USER_TOKENS, "the user's latest request is longer than its room; the archive holds it whole",
        lines=(compact.REQUEST_LINES, compact.REQUEST_LINES))
    summarized = [m for m in middle if not moved or m is not latest[0]]
    summary = compact.summary_message(compact.with_notes(
        compact.replaced_line(summarized, compact.CompactState()) + "\n" + compact.summarize_extractive(summarized), ""))
    ack = compact.message_tokens(compact.ACK) if (moved or tail)[0].get("role") == "user" else 0  # turns alternate
    after = compact.message_tokens(summary) + ack + sum(compact.message_tokens(m) for m in moved)
    return after < sum(compact.message_tokens(m) for m in middle)


def check_sawtooth(messages, threshold, keep_recent, valid_input, seen: Counter) -> None:
    before = copy.deepcopy(messages)
    out = run_sawtooth(messages, threshold, keep_recent)
    assert messages == before  # the input is not mutated
    assert run_sawtooth(messages, threshold, keep_recent) == out  # same input, same output
    must = sawtooth_had_to_compact(messages, threshold, keep_recent)
    if out is messages:
        seen["left the list as it was"] += 1
        assert not must, "over the threshold with a middle worth summarizing, yet nothing changed"
        return
    seen["compacted"] += 1
    assert must, "compacted although the rule did not ask for it"
    check_compaction(messages, out, valid_input, summary_may_quote=True)


def run_compactor(messages, **options):
    """A fresh Compactor each time; the overflow error is a result like any other."""
    force = options.pop("force")
    try:
        return compact.Compactor(**{"policy": "layered", "summarize": compact.summarize_extractive, **options}).compact(messages, level=int(force))
    except compact.ContextOverflowError as error:
        return error


def least_the_last_resort_keeps(messages: list[dict], budget: compact.Budget) -> int:
    """Tokens no compaction can go below: the latest turn, a summary message holding only the user's
    words (the task when its message left, and the pinned constraints, each within its share: the
    last resort never drops them), and the acknowledgement after it."""
    turn, requests = latest_turn(messages), compact.user_requests(messages)
    task = compact.content_text(requests[0]) if requests and not any(requests[0] is m for m in turn) else ""
    state = compact.CompactState(task=task, pinned=compact.find_constraints(messages))
    pins = compact.user_notes(state, turn, int(compact.PIN_SHARE * budget.effective(messages)), whole=False)
    framing = compact.message_tokens(compact.summary_message(compact.with_notes("", pins))) + compact.message_tokens(compact.ACK)
    return budget.history(latest_turn(messages)) + framing


def check_compactor(messages, options, valid_input, seen: Counter) -> None:
    before = copy.deepcopy(messages)
    out = run_compactor(messages, **options)
    assert messages == before
    again = run_compactor(messages, **options)
    budget = compact.Budget(options["context_window"], options["reserved_output"])
    if isinstance(out, compact.ContextOverflowError):
        seen["raised ContextOverflowError"] += 1
        assert isinstance(again, compact.ContextOverflowError) and str(again) == str(out)
        assert least_the_last_resort_keeps(messages, budget) > budget.effective(messages), out
        return
    assert again == out
    if out is messages:
        seen["left the list as it was"] += 1
        assert budget.history(messages) <= budget.effective(messages), "over the window, yet nothing changed"
        return
    seen["compacted"] += 1
    check_compaction(messages, out, valid_input, summary_may_quote=False)


# --------------------------------------------------------------------------------------------
# The properties
# --------------------------------------------------------------------------------------------

SAWTOOTH = {"threshold": st.integers(4, 12), "keep_recent": st.integers(1, 6)}
WINDOWS = st.fixed_dictionaries({"context_window": st.integers(2_000, 8_000),
                                 "reserved_output": st.integers(100, 1_000), "keep_recent": st.integers(1, 6)})
VALID_QUIRKS = {"system prompt", "parallel calls", "content None with calls", "text with calls", "plain assistant text",
                "reused call id", "ends with a tool result", "ends with a user message"}
DAMAGE = {"missing result", "orphan result", "late system message"}


def quirks(messages: list[dict]) -> set[str]:
    """The features of a generated list that the properties are meant to meet."""
    calls = [m for m in messages if m.get("tool_calls")]
    ids = [c["id"] for m in calls for c in m["tool_calls"]]
    problems = " ".join(compact.find_problems(messages))
    found = {"system prompt": messages[0]["role"] == "system",
             "parallel calls": any(len(m["tool_calls"]) > 1 for m in calls),
             "content None with calls": any(m["content"] is None for m in calls),
             "text with calls": any(m["content"] for m in calls),
             "plain assistant text": any(m["role"] == "assistant" and not m.get("tool_calls") for m in messages),
             "reused call id": len(ids) > len(set(ids)),
             "ends with a tool result": messages[-1]["role"] == "tool",
             "ends with a user message": messages[-1]["role"] == "user",
             "missing result": "has no result" in problems,
             "orphan result": "no matching call" in problems,
             "late system message": "system message after the start" in problems}
    return {name for name, present in found.items() if present}


def show(name: str, seen: Counter) -> None:
    """The counts, for the README (pytest -s shows them)."""
    print(f"\n[properties] {name}: " + ", ".join(f"{k} {n}" for k, n in sorted(seen.items())))


def test_generated_conversations_are_valid_and_hold_every_quirk():
    seen: Counter = Counter()

    @RELIABILITY
    @given(messages=conversations())
    def case(messages):
        seen["cases"] += 1
        seen.update(quirks(messages))
        assert_valid(messages)

    case()
    show("valid conversations", seen)
    assert VALID_QUIRKS <= set(seen), VALID_QUIRKS - set(seen)


def test_damaged_conversations_are_rejected_by_the_validator_and_hold_every_damage():
    seen: Counter = Counter()

    @RELIABILITY
    @given(messages=damaged_conversations())
    def case(messages):
        seen["cases"] += 1
        seen.update(quirks(messages))
        assert compact.find_problems(messages) != []

    case()
    show("damaged conversations", seen)
    assert DAMAGE <= set(seen), DAMAGE - set(seen)


def test_sawtooth_keeps_its_promises_on_valid_conversations():
    seen: Counter = Counter()

    @RELIABILITY
    @given(messages=conversations(), **SAWTOOTH)
    def case(messages, threshold, keep_recent):
        seen["cases"] += 1
        check_sawtooth(messages, threshold, keep_recent, valid_input=True, seen=seen)

    case()
    show("sawtooth, valid", seen)
    assert seen["compacted"] and seen["left the list as it was"]


def test_sawtooth_output_is_valid_for_damaged_conversations():
    seen: Counter = Counter()

    @RELIABILITY
    @given(messages=damaged_conversations(), **SAWTOOTH)
    def case(messages, threshold, keep_recent):
        seen["cases"] += 1
        check_sawtooth(messages, threshold, keep_recent, valid_input=False, seen=seen)

    case()
    show("sawtooth, damaged", seen)
    assert seen["compacted"]


def check_every_policy(messages: list[dict], options: dict, valid_input: bool, seen: Counter) -> None:
    """Every policy, triggered by size and forced, on the same conversation."""
    for policy in [p for p in compacting_policies() if p not in compact.PRESETS]:  # a preset is data on one of them
        for force in (False, True):
            check_compactor(messages, {**options, "policy": policy, "force": force}, valid_input, seen)


def test_compactor_keeps_its_promises_on_valid_conversations():
    """Every policy, triggered by size and forced, on the same conversation."""
    seen: Counter = Counter()

    @RELIABILITY
    @given(messages=conversations(), options=WINDOWS)
    @example(messages=squeezed_by_the_system_prompt(), options={"context_window": 4_000, "reserved_output": 500,
                                                                "keep_recent": 2})
    @example(messages=pasted_past_the_window(), options={"context_window": 2_000, "reserved_output": 200,
                                                         "keep_recent": 2})
    def case(messages, options):
        seen["cases"] += 1
        check_every_policy(messages, options, valid_input=True, seen=seen)

    case()
    show("Compactor, valid", seen)
    assert seen["compacted"] and seen["raised ContextOverflowError"] and seen["left the list as it was"]


def test_compactor_output_is_valid_for_damaged_conversations():
    seen: Counter = Counter()

    @RELIABILITY
    @given(messages=damaged_conversations(), options=WINDOWS)
    def case(messages, options):
        seen["cases"] += 1
        check_every_policy(messages, options, valid_input=False, seen=seen)

    case()
    show("Compactor, damaged", seen)
    assert seen["compacted"]


def test_repair_makes_any_list_valid_and_is_idempotent():
    seen: Counter = Counter()

    @RELIABILITY
    @given(messages=st.one_of(conversations(), damaged_conversations()))
    def case(messages):
        repaired = compact.repair(messages)
        seen["changed" if repaired != messages else "already valid"] += 1
        assert_valid(repaired)
        assert compact.repair(repaired) == repaired

    case()
    show("repair", seen)
    assert seen["changed"] and seen["already valid"]
