"""The ladder (Part II of compact.py): the Compactor's boundaries, archive, pins, policies and state,
then the whole ladder replayed like an agent loop over real recorded conversations."""

from __future__ import annotations

import json
import math

import pytest
from conftest import RECORDED, load_trajectories, compacting_policies
from test_layers import assistant, call, log_output, reads, result, system, tool_turn, user

import compact
from compact import (
    PRESETS, Archive, Compactor, ContextOverflowError, content_text, eviction_note, find_constraints,
    find_problems, is_generated, is_summary, mask_secrets, message_tokens, near_duplicate_key, summarize_extractive,
    user_requests,
)

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def window_for(messages, share, reserved=1_000) -> int:
    """A context window in which the history of `messages` fills `share` of the effective window."""
    system_tokens = sum(message_tokens(m) for m in messages if m["role"] == "system")
    history = sum(message_tokens(m) for m in messages if m["role"] != "system")
    return math.ceil(history / share) + reserved + system_tokens


def compactor_for(messages, share, **options) -> Compactor:
    """A compactor whose window the history of `messages` fills to `share`."""
    options = {"summarize": summarize_extractive, "policy": "layered", **options}
    return Compactor(context_window=window_for(messages, share), reserved_output=1_000, **options)


def chat(rounds, start=0) -> list[dict]:
    """Plain talk, no tools: only a summary can shrink it."""
    out = []
    for k in range(start, start + rounds):
        out += [user(f"Question {k}: what about part {k} of the design? " + "Some detail. " * 150),
                assistant(f"Answer {k}: part {k} works like this. " + "More explanation. " * 150)]
    return out


def task() -> list[dict]:
    return [system(), user("Refactor the modules in src/ and keep the tests green.")]


def recorder(calls):
    """A summarizer that records each call, then summarizes offline."""
    def summarize(messages, focus=None):
        calls.append(list(messages))
        return summarize_extractive(messages, focus)
    return summarize


def step_names(compactor) -> list[str]:
    return [name for name, *_ in compactor.report]


def summary_of(messages) -> dict:
    return next(m for m in messages if is_summary(m))


def archived(compactor) -> list[str]:
    """The archive's messages, each as canonical JSON, so they compare by content."""
    return [json.dumps(r["message"], sort_keys=True) for r in compactor.archive.records()]


def as_archived(message) -> str:
    return json.dumps(mask_secrets(message), sort_keys=True)


# --------------------------------------------------------------------------------------------
# 7. Boundaries
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, head", [
    (task(), 1),
    ([user("Refactor src/.")], 0),
    ([system(), compact.summary_message("## Goal\n- earlier work")], 1),
])
def test_the_head_is_the_system_prompt_the_task_is_carried_by_the_state(start, head):
    messages = [*start, *reads(6), user("Next one.")]
    assert compact.boundaries(compactor_for(messages, 0.9), messages)[0] == head


def parallel_history(batches=6) -> list[dict]:
    """Batches of parallel calls whose results differ in size, so a tail budget lands anywhere."""
    out = task()
    for b in range(batches):
        calls = [call(f"b{b}p{k}", "read_file", path=f"src/m{b}_{k}.py") for k in range(4)]
        out += [assistant(f"Reading batch {b}.", *calls),
                *[result(c["id"], log_output(c["id"], lines=5 + 17 * k)) for k, c in enumerate(calls)]]
    return out


@pytest.mark.parametrize("policy", compacting_policies())
def test_the_tail_never_starts_with_a_tool_result(policy):
    messages = parallel_history()
    compactor = compactor_for(messages, 0.9, policy=policy)
    for n in range(3, len(messages) + 1):
        head, tail = compact.boundaries(compactor, messages[:n])
        assert head <= tail <= n
        assert tail == n or messages[tail]["role"] != "tool", f"prefix of {n} messages"


@pytest.mark.parametrize("policy", compacting_policies())
def test_the_newest_group_is_in_the_tail_even_when_bigger_than_the_tail_budget(policy):
    messages = [*task(), *reads(3), *tool_turn("big", "bash", log_output("huge", lines=3_000), command="pytest")]
    compactor = compactor_for(messages, 0.9, policy=policy, keep_recent=1)
    assert compact.boundaries(compactor, messages)[1] <= len(messages) - 2


# --------------------------------------------------------------------------------------------
# 8. Archive
# --------------------------------------------------------------------------------------------


def summarized_history() -> list[dict]:
    return [*task(), *chat(12), user("Now write the changelog.")]


@pytest.mark.parametrize("answers", [True, False], ids=["summarizer answers", "summarizer raises"])
def test_messages_are_archived_before_the_summarizer_sees_them(tmp_path, answers):
    """If the summarizer (or the process) dies, what it was given is already on disk."""
    messages = summarized_history()
    unarchived = []

    def summarize(middle, focus=None):
        unarchived.append([m for m in middle if as_archived(m) not in archived(compactor)])
        if not answers:
            raise RuntimeError("summarizer crashed")
        return summarize_extractive(middle, focus)

    compactor = compactor_for(messages, 0.9, summarize=summarize, archive=Archive.in_folder(tmp_path))
    out = compactor.compact(messages)
    assert unarchived == [[]]  # called once, with every message it was given already archived
    gone = [m for m in messages if not any(m is k for k in out)]
    assert gone and {as_archived(m) for m in gone} <= set(archived(compactor))
    assert not compactor.budget.over(out, compactor.target) and find_problems(out) == []


def test_the_summary_names_the_archive_and_search_and_read_find_messages(tmp_path):
    messages = summarized_history()
    compactor = compactor_for(messages, 0.9, archive=Archive.in_folder(tmp_path))
    out = compactor.compact(messages)
    path = compactor.archive.path
    assert path.parent == tmp_path and str(path) in content_text(summary_of(out))
    hits = Archive(path).search("Answer 3")
    assert hits.startswith("#") and "part 3 works like this" in hits
    number = int(hits.split()[0][1:])
    assert json.loads(Archive(path).read(number))["content"].startswith("Answer 3:")


def test_archive_search_returns_the_newest_hits_not_the_oldest(tmp_path):
    archive = Archive(tmp_path / "session.jsonl")
    archive.append([user(f"needle {k} in the haystack") for k in range(8)], compaction=1)
    archive.append([user("no match here")], compaction=2)
    hits = archive.search("needle", limit=3).split("\n")
    assert [h.split()[0] for h in hits] == ["#5", "#6", "#7"]
    assert "needle 7" in hits[-1]


def test_archive_read_snips_long_content_and_keeps_its_error_lines(tmp_path):
    archive = Archive(tmp_path / "session.jsonl")
    lines = [f"line {i}: ordinary output" for i in range(2_000)]
    lines[1_000] = "KeyError: 'cart_total'"
    archive.append([result("c1", "\n".join(lines))], compaction=1)
    shown = json.loads(archive.read(0, max_chars=2_000))["content"]
    assert len(shown) < 2_500 and len("\n".join(lines)) > 40_000  # about max_chars, with the cut marker
    assert "cut …]" in shown and "KeyError: 'cart_total'" in shown
    assert shown.startswith("line 0:") and shown.endswith("line 1999: ordinary output")


# --------------------------------------------------------------------------------------------
# 10. Pinned constraints / 14. State across compactions
# --------------------------------------------------------------------------------------------

RULES = "Do not modify deploy.sh. 不要修改 deploy.sh。 Always answer in Chinese."


def grow(compactor, messages, new) -> list[dict]:
    """Append `new`, then compact, as an agent loop does before each model call."""
    return compactor.compact([*messages, *new])


def test_pinned_constraints_survive_five_compactions_verbatim():
    messages = [*task(), assistant("On it."), user(RULES)]
    compactor = Compactor(policy="layered", context_window=12_000, reserved_output=1_000, summarize=summarize_extractive)
    wanted = find_constraints([user(RULES)])
    k = 0
    while compactor.state.compactions < 5:
        messages = grow(compactor, messages, chat(2, start=k))
        k += 2
        assert k < 200, "the compactor never compacted five times"
        in_user = [c for c in wanted if any(c in content_text(m) for m in messages
                                            if m["role"] == "user" and not is_generated(m))]
        if len(in_user) < len(wanted):
            assert compactor.state.pinned[:len(wanted)] == wanted
            assert all(c in content_text(summary_of(messages)) for c in wanted)
    assert not any(RULES in content_text(m) for m in messages if not is_generated(m))  # they left


def test_near_duplicate_constraints_are_pinned_once_in_their_newest_wording():
    said = ["Please always provide EXACTLY ONE action in triple backticks, found 3 actions.",
            "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."]
    messages = [*task(), *chat(2), user(said[0]), *chat(2, start=2), user(said[1]), *chat(8, start=4), user("Go on.")]
    compactor = compactor_for(messages, 0.9)
    out = compactor.compact(messages)
    assert not any(s in content_text(m) for s in said for m in user_requests(out))  # both left the list
    assert compactor.state.pinned == [said[1]]
    summary = summary_of(out)
    assert "User constraints" not in compact.summary_body(summary)  # no summary section repeats the state's pins
    assert content_text(summary).split(compact.EXTRA_RULE)[1].count("EXACTLY ONE action") == 1  # the pins



def test_constraints_that_differ_in_a_name_are_both_pinned():
    said = ["Do not touch src/module_02.py.", "Do not touch src/module_07.py."]
    assert compact.pin([], said) == said and compact.find_constraints([user(" ".join(said))]) == said


def test_compact_state_lasts_across_compactions():
    compactor = Compactor(policy="layered", context_window=5_000, reserved_output=1_000, summarize=summarize_extractive)
    messages, changed, saved = task(), 0, 0
    for k in range(12):
        grown = [*messages, *reads(1, start=k), user(f"Next {k}. " * 60)]
        messages = compactor.compact(grown)
        changed += messages is not grown
        saved += compactor.budget.history(grown) - compactor.budget.history(messages)
    state = compactor.state
    assert state.compactions == changed >= 3
    assert state.tokens_saved == saved
    assert compact.summary_body(summary_of(messages)) == compact.REPLACED.sub("", state.summary, count=1).strip()
    calls_left = [k for k in range(12) if not any(m.get("tool_call_id") == f"c{k}" for m in messages)]
    assert len(calls_left) > 5
    assert state.recent_files == [f"src/mod{k}.py" for k in range(12)][-5:]  # noted at every call, left or not


# --------------------------------------------------------------------------------------------
# 13. The hybrid policy
# --------------------------------------------------------------------------------------------


def test_hybrid_keeps_the_last_messages_raw_and_a_rolling_summary():
    messages = summarized_history()
    compactor = compactor_for(messages, 0.9, policy="hybrid", keep_recent=6)
    out = compactor.compact(messages)
    assert out[0] == messages[0] and is_summary(out[1])  # the task is the latest request: kept after the summary
    assert all(a is b for a, b in zip(out[-6:], messages[-6:]))
    assert step_names(compactor) == ["reasoning", "summary"]
    later = compactor.compact([*out, *chat(12, start=50), user("And the release notes.")])
    assert [m for m in later if is_summary(m)] == [summary_of(later)]  # one summary, rolled forward
    notes = content_text(summary_of(later)).split(compact.EXTRA_RULE)[1]  # the user's words, as the state carries them
    assert f"{compact.TASK_NOTE}\n```\nRefactor the modules" in notes and f"{compact.SAID_NOTE}\n" in notes
    assert any(line.startswith("- Question 5") for line in notes.split(compact.SAID_NOTE)[1].split("\n"))


# --------------------------------------------------------------------------------------------
# 16. The ladder
# --------------------------------------------------------------------------------------------


def test_below_the_trigger_compact_returns_the_same_list():
    messages = [*task(), *reads(3), user("Next.")]
    compactor = compactor_for(messages, 0.6)
    assert compactor.compact(messages) is messages
    assert compactor.state.compactions == 0


def test_the_first_rung_drops_old_reasoning_and_nothing_else_when_that_is_enough():
    thinking = "Let me think about the refactor step by step. " * 400
    messages = [*task()]
    for k in range(4):
        messages += [{**assistant(f"Step {k} done."), "reasoning_content": thinking}, user(f"Now step {k + 1}.")]
    calls = []
    compactor = compactor_for(messages, 0.8, summarize=recorder(calls))
    out = compactor.compact(messages)
    assert step_names(compactor) == ["reasoning"] and calls == []
    assert [m.get("reasoning_content") for m in out if m["role"] == "assistant"] == [None, None, None, None]
    assert [content_text(m) for m in out] == [content_text(m) for m in messages]  # every word stays


def test_a_history_masking_fixes_never_calls_the_summarizer():
    messages = [*task(), *reads(10), assistant("All read."), user("Now refactor mod9.")]
    calls = []
    compactor = compactor_for(messages, 0.8, summarize=recorder(calls))
    out = compactor.compact(messages)
    assert step_names(compactor) == ["reasoning", "mask"]
    assert calls == []
    assert not compactor.budget.over(out, compactor.target) and find_problems(out) == []


def test_layers_run_cheapest_first_and_stop_as_soon_as_it_fits():
    messages = summarized_history()
    calls = []
    compactor = compactor_for(messages, 0.9, summarize=recorder(calls))
    out = compactor.compact(messages)
    assert step_names(compactor) == ["reasoning", "mask", "snip", "clear", "dedupe", "shorten", "summary"]
    assert len(calls) == 1
    assert not compactor.budget.over(out, compactor.target)
    assert find_problems(out) == [] and find_problems(out, provider="anthropic") == []


@pytest.mark.parametrize("before", [[], chat(10)], ids=["alone", "after a long history"])
def test_context_overflow_when_even_the_last_resort_cannot_fit(before):
    """One giant latest user message: the last resort never cuts what the user wrote."""
    messages = [*task(), *before, assistant("Ready."), user("Please review this: " + "word " * 20_000)]
    compactor = Compactor(policy="layered", context_window=8_000, reserved_output=1_000, summarize=summarize_extractive)
    with pytest.raises(ContextOverflowError):
        compactor.compact(messages)
    assert "last resort" in step_names(compactor)


def test_the_last_resort_falls_back_to_a_short_note_when_the_summary_does_not_fit_keeping_the_pins():
    rule = "Never edit deploy.sh by hand."
    messages = [*task(), user(rule), *chat(3), user("Go on.")]

    def long_summary(middle, focus=None):  # within the guard's 4,000 tokens, over the whole window
        return "## Progress\n" + "\n".join(f"- step {k} went fine" for k in range(400))

    compactor = Compactor(policy="layered", context_window=3_000, reserved_output=500, summarize=long_summary,
                          layers=("last resort",))
    out = compactor.compact(messages, level=2)  # the last resort alone, as far as it goes
    body = compact.summary_body(summary_of(out))
    assert body.startswith("(The summary of the earlier turns did not fit the window") and "step 399" not in body
    assert rule in content_text(summary_of(out)) and compactor.state.pinned == [rule]
    assert out[-1] is messages[-1]  # the latest turn stays
    assert compactor.budget.history(out) <= compactor.budget.effective(out)


def test_an_eviction_note_keeps_the_first_and_last_error_lines():
    output = "\n".join(["collecting tests", "ERROR first: ImportError in conftest", *["ok"] * 50,
                         "KeyError: 'cart_total'", "FAILED tests/test_cart.py::test_total - assert 3 == 4"])
    note = content_text(eviction_note([*tool_turn("c1", "bash", output, command="pytest -q")]))
    assert note.startswith("[evicted] 2 messages: bash(pytest -q)")
    assert "ERROR first: ImportError in conftest" in note
    assert "KeyError: 'cart_total'" in note and "FAILED tests/test_cart.py::test_total" in note
    assert "collecting tests" not in note


# --------------------------------------------------------------------------------------------
# Forced compaction (the compact tool, /compact): the focus reaches the summary
# --------------------------------------------------------------------------------------------

FOCUS = "keep everything about part 7 and src/mod3.py"


def forty_two() -> list[dict]:
    messages = [*task(), *reads(10), *chat(10)]
    assert len(messages) == 42
    return messages


def focus_spy(focuses):
    def summarize(messages, focus=None):
        focuses.append(focus)
        return summarize_extractive(messages, focus)
    return summarize


@pytest.mark.parametrize("policy", ["layered", "hybrid"])
def test_a_forced_compaction_at_low_usage_summarizes_without_the_last_resort(policy):
    messages = forty_two()
    focuses = []
    compactor = compactor_for(messages, 0.25, policy=policy, summarize=focus_spy(focuses))
    out = compactor.compact(messages, focus=FOCUS, level=1)
    assert "summary" in step_names(compactor) and "last resort" not in step_names(compactor)
    kept = [m for m in out if any(m is k for k in messages[2:])]
    assert len(kept) > 2  # more than the last turn (the latest question and its answer)
    assert focuses == [FOCUS]
    assert find_problems(out) == []


@pytest.mark.parametrize("policy", compacting_policies())
def test_the_focus_of_a_forced_compaction_reaches_the_summarizer(policy):
    messages = forty_two()
    focuses = []
    compactor = compactor_for(messages, 0.25, policy=policy, summarize=focus_spy(focuses))
    out = compactor.compact(messages, focus=FOCUS, level=1)
    assert focuses == [FOCUS] and is_summary(summary_of(out))


def test_under_zones_a_forced_compaction_at_low_usage_still_compacts():
    messages = forty_two()
    compactor = compactor_for(messages, 0.25, policy="zones")
    out = compactor.compact(messages, level=1)
    assert out is not messages and compactor.state.compactions == 1
    assert compactor.budget.history(out) < compactor.budget.history(messages)
    assert find_problems(out) == []


# --------------------------------------------------------------------------------------------
# Done when: the ladder, driven like an agent loop over real conversations
# --------------------------------------------------------------------------------------------

# tau-bench runs are short (at most ~10k tokens): at 32k they would never compact, so they replay
# in the smallest round window that still holds every single message (largest 2.9k + 1.25k system).
REPLAYS = [("tau_bench_airline_gpt4o.jsonl", 6_000, 1_000),
           ("mini_swe_agent_gemini3pro_swebv.jsonl", 32_000, 4_000)]


def replay(conversation, compactor):
    """Append messages one by one; compact when the model would be called next. Yields
    (messages so far, the compacted list) after each compaction."""
    messages, seen = [], []
    for i, m in enumerate(conversation):
        messages.append(m)
        seen.append(m)
        if i + 1 == len(conversation) or conversation[i + 1]["role"] == "assistant":
            messages = compactor.compact(messages)
            yield seen, messages


class Promises:
    """What every compacted list must keep, checked incrementally as a replay goes on."""

    def __init__(self, compactor):
        self.compactor, self.rules, self.read, self.gone = compactor, [], 0, set()
        self.archive: set[str] = set()

    def broken(self, seen, out) -> list[str]:
        budget, state = self.compactor.budget, self.compactor.state
        bad = [f"invalid for {p}: {find_problems(out, p)[:2]}" for p in ("openai", "anthropic")
               if find_problems(out, p)]
        if budget.history(out) > budget.effective(out):
            bad.append(f"history {budget.history(out)} over {budget.effective(out)}")
        self.rules += [r for r in find_constraints(seen[self.read:]) if r not in self.rules]
        self.read = len(seen)
        raw_user = "\n".join(content_text(m) for m in out if m["role"] == "user" and not is_generated(m))
        summary = next((content_text(m) for m in out if is_summary(m)), "")
        # near-duplicates ("... found 3 actions." / "... found 2 actions.") are one constraint, pinned once
        said = {near_duplicate_key(c) for c in find_constraints(out)}  # still there in the user's words
        pinned = {near_duplicate_key(p) for p in state.pinned if p in summary}  # verbatim in the summary's pins
        bad += [f"lost constraint {r!r}" for r in self.rules
                if r not in raw_user and near_duplicate_key(r) not in said | pinned]
        kept = {id(m) for m in out}
        leaving = [i for i, m in enumerate(seen) if id(m) not in kept and i not in self.gone]
        if leaving:  # an original message that left never comes back, so each is checked once
            self.archive.update(archived(self.compactor))
            bad += [f"message {i} left unarchived" for i in leaving if as_archived(seen[i]) not in self.archive]
            self.gone.update(leaving)
        return bad


@RECORDED
@pytest.mark.parametrize("policy", [p for p in compacting_policies() if p not in PRESETS])  # a preset is data on one of them
@pytest.mark.parametrize("filename, window, reserved", REPLAYS, ids=["tau-bench", "swe-bench"])
def test_replayed_real_conversations_stay_valid_inside_the_window_pinned_and_archived(
        filename, window, reserved, policy, tmp_path, every):
    failures, compacted = [], 0
    for n, conversation in enumerate(load_trajectories(filename, every)):
        compactor = Compactor(context_window=window, reserved_output=reserved, policy=policy,
                              summarize=summarize_extractive, archive=Archive.in_folder(tmp_path / str(n)))
        promises = Promises(compactor)
        for seen, out in replay(conversation, compactor):
            failures += [f"run {n}, after {len(seen)} messages: {b}" for b in promises.broken(seen, out)]
        compacted += compactor.state.compactions > 0
    assert failures == [], f"{len(failures)} broken promises, first: {failures[:5]}"
    assert compacted >= 20 // every  # the window is small enough that the ladder really ran, often


@RECORDED
def test_on_the_recorded_swe_runs_in_a_16k_window_layered_loses_no_constraint_and_archives_what_leaves(tmp_path, every):
    """Every constraint the user gave stays, in the list or in the summary's pins, and the
    archive holds every message that left, equal to the original after mask_secrets."""
    failures, compacted = [], 0
    for n, conversation in enumerate(load_trajectories("mini_swe_agent_gemini3pro_swebv.jsonl", every)):
        compactor = Compactor(context_window=16_000, reserved_output=2_000, policy="layered",
                              summarize=summarize_extractive, archive=Archive.in_folder(tmp_path / str(n)))
        promises = Promises(compactor)
        for seen, out in replay(conversation, compactor):
            failures += [f"run {n}, after {len(seen)} messages: {b}" for b in promises.broken(seen, out)]
        compacted += bool(promises.gone)  # messages left this run, so its archive was checked
    assert failures == [], f"{len(failures)} broken promises, first: {failures[:5]}"
    assert compacted >= 90 // every
