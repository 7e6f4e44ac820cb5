"""Failure injection: the summarizer raises, hangs, answers nothing, too much, or an error message,
or the model server answers 429/500. Compaction must still fit the window, archive every message
before it leaves, keep the failure's text out of the context, and stop calling a summarizer that
keeps failing (the breaker). A summarizer that answers but badly is checked and backfilled, a message
without a role is refused, and a history no step can shrink is not summarized again and again. Run
with `-s` to see how many failures were injected."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

import compact
from conftest import sawtooth, tallied, compacting_policies
from conversations import generate_conversation

HISTORY = generate_conversation(30, seed=7).messages  # about 25k tokens: over the trigger of WINDOW after the cut of outputs too large
WINDOW = {"context_window": 16_000, "reserved_output": 1_000}
GOOD_SUMMARY = "## Goal\n- fix the failing cart total test\n\n## Progress\n- reproduced the failure"


report_injected, injected = tallied("failures", "failures injected")


class FailingSummarizer:
    """A summarizer that fails in one way while `failing` is set, and counts its calls (in `injected`
    too when it fails). A hanging one waits on `release`, which the test sets at the end so no thread
    outlives it. `given` is the last call's (messages, focus)."""

    def __init__(self, kind: str, injected: Counter):
        self.kind, self.calls, self.failing, self.release = kind, 0, True, threading.Event()
        self.injected, self.given = injected, None

    def __call__(self, messages, focus=None):
        self.calls += 1
        self.given = (list(messages), focus)
        if not self.failing:
            return GOOD_SUMMARY
        self.injected[self.kind] += 1
        if self.kind == "raises":
            raise RuntimeError("summarizer crashed: connection reset by peer")
        if self.kind == "hangs":  # what the model's client raises when the server does not answer in time
            raise TimeoutError("the summary model did not answer within the client's timeout; arrives too late")
        return {"empty": "", "None": None, "huge": "word " * 50_000,
                "rate limit text": "Error: rate limit exceeded",
                "server error text": "Internal Server Error"}[self.kind]


KINDS = ("raises", "hangs", "empty", "None", "huge", "rate limit text", "server error text")
LEAKS = {"raises": "connection reset", "hangs": "arrives too late", "huge": "word word word",
         "rate limit text": "rate limit exceeded", "server error text": "Internal Server Error"}


@pytest.fixture
def failing(injected):
    """FailingSummarizer(kind), released when the test ends."""
    made = []

    def make(kind):
        made.append(FailingSummarizer(kind, injected))
        return made[-1]
    yield make
    for summarizer in made:
        summarizer.release.set()


def compactor(tmp_path, summarize, policy="hybrid") -> compact.Compactor:
    c = compact.Compactor(policy=policy, summarize=summarize, archive=compact.Archive.in_folder(tmp_path / "archive"),
                          **WINDOW)
    return c


def assert_fits_and_archived(c: compact.Compactor, before: list[dict], out: list[dict]) -> None:
    """The result fits the window and is valid, and every message that left it is in the archive."""
    assert out is not before
    assert c.budget.history(out) <= c.budget.effective(out)
    assert compact.find_problems(out) == []
    kept = {id(m) for m in out}
    archived = [record["message"] for record in c.archive.records()]
    left = [m for m in before if id(m) not in kept]
    assert left and [m for m in left if compact.mask_secrets(m) not in archived] == []


def context_text(messages: list[dict]) -> str:
    return json.dumps(messages, ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# One failure: the compaction still happens, with the offline summary
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy, force", [("hybrid", False), ("layered", True)])
@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_summarizer_still_leaves_a_history_that_fits(tmp_path, failing, kind, policy, force):
    summarizer = failing(kind)
    c = compactor(tmp_path, summarizer, policy)
    out = c.compact(HISTORY, level=int(force))
    assert summarizer.calls >= 1
    assert c.guard.state.last_error  # the failure was seen, and the offline summary took over
    assert_fits_and_archived(c, HISTORY, out)
    summary = next(m for m in out if compact.is_summary(m))
    assert "## Tools run" in compact.content_text(summary)  # the structured offline summary
    # the structured offline summary of exactly what the failing summarizer was given took over
    assert compact.summary_body(summary) == compact.summarize_extractive(summarizer.given[0])  # no focus asked
    assert c.guard.state.last_error not in context_text(out)
    if kind in LEAKS:
        assert LEAKS[kind] not in context_text(out)


# --------------------------------------------------------------------------------------------
# The breaker: three failures in a row, then `cooldown` compactions without the summarizer
# --------------------------------------------------------------------------------------------


def compact_until_the_breaker_opens(c: compact.Compactor) -> None:
    for _ in range(c.guard.max_failures):  # a compaction may call the summarizer more than once
        assert_fits_and_archived(c, HISTORY, c.compact(HISTORY, level=1))
        if c.guard.open:
            return
    pytest.fail(f"the breaker is still closed after {c.guard.max_failures} failing compactions")


@pytest.mark.parametrize("kind", KINDS)
def test_the_breaker_opens_after_three_failures_and_closes_after_the_cooldown(tmp_path, failing, kind):
    summarizer = failing(kind)
    c = compactor(tmp_path, summarizer)
    compact_until_the_breaker_opens(c)
    assert summarizer.calls == 3  # three failures in a row, and no call after the third
    for _ in range(c.guard.cooldown):
        assert_fits_and_archived(c, HISTORY, c.compact(HISTORY, level=1))
    assert summarizer.calls == 3, "the summarizer was called during the cooldown"
    summarizer.failing = False  # the summarizer recovered: the next compaction uses it again
    out = c.compact(HISTORY, level=1)
    assert summarizer.calls > 3 and not c.guard.open
    assert "reproduced the failure" in context_text(out)


def test_a_success_resets_the_failure_count(tmp_path, failing):
    summarizer = failing("raises")
    c = compactor(tmp_path, summarizer)
    for failing_now in (True, True, False, True, True):
        summarizer.failing = failing_now
        c.compact(HISTORY)  # not forced: one summary per compaction
    assert summarizer.calls == 5 and not c.guard.open


# --------------------------------------------------------------------------------------------
# A summarizer that answers, but badly: the guard checks its claims and backfills what it dropped
# --------------------------------------------------------------------------------------------

CART_WORK = [
    {"role": "user", "content": "Fix order HAT123: the cart total in src/cart.py is wrong."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "src/cart.py:42: in total\nKeyError: 'cart_total'\n1 failed"},
    {"role": "assistant", "content": "The total reads a missing key."},
]


def test_the_guard_marks_a_model_summary_claim_its_source_does_not_back_up():
    guard = compact.SummaryGuard(lambda messages, focus=None:
                                 "## Progress\n- src/cart.py fails at line 42\n- patched src/ghost.py at line 4242")
    lines = guard(CART_WORK).split("\n")
    assert "- src/cart.py fails at line 42" in lines  # its facts are in the messages
    assert f"- patched src/ghost.py at line 4242 {compact.UNVERIFIED}" in lines
    assert guard.state.last_error == ""


def test_the_guard_backfills_identifiers_and_errors_a_weak_model_summary_dropped():
    guard = compact.SummaryGuard(lambda messages, focus=None: "## Progress\n- looked into the cart")
    text = guard(CART_WORK)
    assert text.startswith("## Progress\n- looked into the cart\n")  # the model's summary comes first
    assert "KeyError: 'cart_total'" in text and "HAT123" in text  # the user's words are the state's (test_user_words)
    assert compact.parse_summary(text)["Errors seen"] == ["KeyError: 'cart_total'"]  # under the model's own headings
    assert guard.state.last_error == ""


# --------------------------------------------------------------------------------------------
# The model server fails: the real openai client against a local server answering 429 or 500
# --------------------------------------------------------------------------------------------

SERVER_ERRORS = {429: {"error": {"message": "Rate limit reached for gpt-4o-mini", "type": "requests",
                                 "code": "rate_limit_exceeded"}},
                 500: {"error": {"message": "The server had an error while processing your request",
                                 "type": "server_error"}}}


@pytest.mark.parametrize("summarize", [None, compact.summarize_with_model],
                         ids=["summarize_default", "summarize_with_model"])
@pytest.mark.parametrize("status", sorted(SERVER_ERRORS))
def test_a_failing_model_server_still_leaves_a_history_that_fits(tmp_path, fake_openai, injected, status, summarize):
    server = fake_openai(lambda body: (status, SERVER_ERRORS[status]))
    c = compact.Compactor(policy="hybrid", summarize=summarize, archive=compact.Archive.in_folder(tmp_path / "archive"),
                          **WINDOW)
    out = c.compact(HISTORY)
    injected[f"server {status}"] += len(server.requests)
    assert server.requests  # the real client did reach the server (and retried)
    assert_fits_and_archived(c, HISTORY, out)
    assert SERVER_ERRORS[status]["error"]["message"] not in context_text(out)
    assert "## Tools run" in context_text(out)  # the offline summary took over


def test_the_breaker_stops_calling_a_failing_model_server(tmp_path, fake_openai, injected):
    server = fake_openai(lambda body: (429, SERVER_ERRORS[429]))
    c = compact.Compactor(policy="hybrid", summarize=compact.summarize_with_model,
                          archive=compact.Archive.in_folder(tmp_path / "archive"), **WINDOW)
    compact_until_the_breaker_opens(c)
    assert "RateLimitError" in c.guard.state.last_error
    sent = len(server.requests)
    injected["server 429"] += sent
    for _ in range(c.guard.cooldown):
        assert_fits_and_archived(c, HISTORY, c.compact(HISTORY, level=1))
    assert len(server.requests) == sent


# --------------------------------------------------------------------------------------------
# Termination: compaction ends, and does not repeat itself on its own output
# --------------------------------------------------------------------------------------------


def finishes(fn):
    """fn()'s result or raised error; fails the test if fn is still running after a minute."""
    box = {}
    worker = threading.Thread(target=lambda: box.update(result=_outcome(fn)), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "compaction did not finish"
    return box["result"]


def _outcome(fn):
    try:
        return fn()
    except compact.ContextOverflowError as error:
        return error


def big_system_prompt(tokens: int) -> dict:
    return {"role": "system", "content": "Follow the house style guide. " + "rule " * tokens}


STUBBORN = {  # histories compaction can barely shrink: the system prompt or the latest request is huge
    "system prompt fills the window": [big_system_prompt(15_500), *HISTORY[1:]],
    "system prompt leaves little room": [big_system_prompt(12_000), *HISTORY[1:]],
    "latest request takes most of the rest": [big_system_prompt(8_000), *HISTORY[1:],
                                              {"role": "user", "content": "Apply this patch: " + "patch line " * 2_700}],
    "ordinary history": HISTORY,
}


@pytest.mark.parametrize("policy", compacting_policies())
@pytest.mark.parametrize("history", list(STUBBORN.values()), ids=list(STUBBORN))
def test_compaction_terminates_and_does_not_repeat_on_its_own_output(tmp_path, policy, history):
    c = compact.Compactor(policy=policy, summarize=compact.summarize_extractive, **WINDOW)
    out = finishes(lambda: c.compact(history))
    if isinstance(out, compact.ContextOverflowError):
        return  # allowed: even the last resort could not fit (tests/test_properties.py checks when)
    assert c.budget.history(out) <= c.budget.effective(out)
    assert finishes(lambda: c.compact(out)) is out


def test_the_stubborn_histories_take_every_branch():
    """The test above accepts ContextOverflowError; make sure it also sees a history left over the
    trigger (the next call must not compact it again) and an ordinary one."""
    compactors = {name: compact.Compactor(policy="layered", summarize=compact.summarize_extractive, **WINDOW) for name in STUBBORN}
    outcomes = {name: _outcome(lambda: compactors[name].compact(h)) for name, h in STUBBORN.items()}
    assert isinstance(outcomes["system prompt fills the window"], compact.ContextOverflowError)
    stuck = compactors["latest request takes most of the rest"]
    assert stuck.budget.over(outcomes["latest request takes most of the rest"], stuck.trigger)
    assert isinstance(outcomes["ordinary history"], list)


def test_when_no_step_helps_the_summarizer_is_not_called_again_on_the_same_history():
    """A huge latest request that fits but is over the trigger: compaction cannot shrink it, so the
    next compaction of the same history returns at once instead of summarizing again."""
    calls = []

    def summarize(messages, focus=None):
        calls.append(list(messages))
        return compact.summarize_extractive(messages, focus)

    c = compact.Compactor(policy="layered", summarize=summarize, **WINDOW)
    start = [HISTORY[0], HISTORY[1], {"role": "assistant", "content": "On it."}]
    words = int(0.85 * c.budget.effective(start) * 1_000 / compact.estimate_tokens("patch line " * 1_000))
    messages = [*start, {"role": "user", "content": "Apply this patch: " + "patch line " * words}]
    assert c.budget.over(messages, c.trigger) and c.budget.history(messages) <= c.budget.effective(messages)
    assert c.compact(messages) is messages and len(calls) == 1  # tried once: nothing got smaller
    assert c.compact(messages) is messages and len(calls) == 1  # not again on the same history
    assert c.state.compactions == 0


# --------------------------------------------------------------------------------------------
# A message without a role: refused loudly, never dropped in silence
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [{"content": "a message with no role"}, {"role": "boss", "content": "obey"},
                                 "not even a dict"], ids=["no role", "unknown role", "not a dict"])
def test_a_message_without_a_valid_role_is_refused_naming_its_index(bad):
    messages = [*HISTORY[:3], bad, *HISTORY[3:5]]  # short: far below any trigger
    for policy in compacting_policies():
        with pytest.raises(ValueError, match=r"^message 3 has no valid role"):
            compact.Compactor(policy=policy).compact(messages)
    with pytest.raises(ValueError, match=r"^message 3 has no valid role"):
        sawtooth(messages)
    assert compact.find_problems(messages)[0].startswith("message 3 has no valid role (one of system, user, assistant, tool)")
