"""Each idea of compact.py once. For every shared piece, every caller is shown to use it
(a call count or an identity, never a grep), and a setting a person gives is never replaced by a
policy's."""

from __future__ import annotations

import dataclasses

import pytest

import compact
from compact import Compactor, Pass
from conftest import call


def turn(k: int, output: str, name: str = "bash", **args) -> list[dict]:
    return [{"role": "assistant", "content": None, "tool_calls": [call(f"c{k}", name, **(args or {"command": f"ls {k}"}))]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": output}]


def history(n: int = 30, size: int = 80) -> list[dict]:
    out = [{"role": "system", "content": "s"}, {"role": "user", "content": "Survey the notes. Never touch vendor/."}]
    for k in range(n):
        out += turn(k, f"note {k}: " + "words " * size, "read_file", path=f"notes/{k}.txt")
    return out


def counting(monkeypatch, name: str, owner=compact) -> list:
    """Replace `owner.name` by a wrapper that records each call's arguments."""
    calls, real = [], getattr(owner, name)

    def wrapper(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, wrapper)
    return calls


# --- Settings a person gives win (item 3) ---------------------------------------------------


GIVEN = {"context_window": 9_000, "reserved_output": 1_000, "trigger": 0.42, "target": 0.21, "threshold": 17,
         "keep_recent": 3, "tail_share": 0.33, "margin": 0.05, "summary_tokens": 777, "layers": ("summary",),
         "fixed_tokens": 55, "precise_tools": ("db",)}


@pytest.mark.parametrize("policy", list(compact.POLICIES))
def test_every_setting_given_explicitly_is_kept_under_every_policy(policy):
    fields = {f.name for f in dataclasses.fields(Compactor) if f.init}
    assert set(GIVEN) | {"policy", "summarize", "archive", "reattach", "where_set", "state"} == fields  # every field, tried
    for name, value in GIVEN.items():
        assert getattr(Compactor(policy=policy, **{name: value}), name) == value, (policy, name)
    for name, value in {**compact.DEFAULTS, **compact.POLICIES[policy]}.items():  # left out: the policy's
        assert getattr(Compactor(policy=policy), name) == value, (policy, name)
    assert Compactor(policy="zones", trigger=0.7).trigger == 0.7  # the case: it was 0.6


def test_no_field_of_the_engine_serves_one_preset_only():
    """Part III owns the ladder: what one preset needs is a step or a step's parameter there."""
    gone = {"tail_growth", "tail_from_user", "admit_tokens", "lossy_at", "lossy_resume", "every_call",
            "cache_min_tokens", "confidence", "graded"}
    assert not gone & {f.name for f in dataclasses.fields(Compactor)}
    assert not gone & {key for policy in compact.POLICIES.values() for key in policy}


# --- One walker of tool-call groups (item 1) ------------------------------------------------


def test_every_step_that_needs_a_tool_call_group_asks_part_one_find_cut(monkeypatch):
    messages = [*history(4), {"role": "user", "content": "go on"}, *turn(9, "x")]
    engine = Compactor(policy="layered", precise_tools=("read_file",), keep_recent=3)
    for ask in (lambda: compact.groups(messages),
                lambda: compact.pair_tool_results(messages),  # results paired with their calls
                lambda: compact.boundaries(engine, messages),  # the cut and the tail, by messages
                lambda: compact.boundaries(Compactor(policy="layered"), messages),  # the tail, by tokens
                lambda: compact.precise_messages(messages, ("read_file",)),  # precise results
                lambda: compact.newest_batch(messages),  # the newest batch
                lambda: compact.repair(messages[:-1])):  # open calls answered
        calls = counting(monkeypatch, "find_cut")
        ask()
        assert calls, ask
        monkeypatch.undo()


# --- One cutter, the argument shortener beside it (item 1) ----------------------------------


def test_every_place_that_cuts_a_message_uses_the_one_cutter(monkeypatch, tmp_path):
    whys = []
    real = compact.cut_text
    monkeypatch.setattr(compact, "cut_text", lambda text, tokens, why="", lines=(40, 40), matters=None:
                        whys.append(why) or real(text, tokens, why, lines, matters))
    huge = "\n".join(f"row {i}: value value value" for i in range(3_000))
    archive = compact.Archive(tmp_path / "a.jsonl")
    old = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}, *turn(1, huge),
           {"role": "assistant", "content": "read it"}, {"role": "user", "content": "go on"}]
    Compactor(context_window=60_000, reserved_output=0, archive=archive).compact(old)  # the rule: old output
    pasted = [{"role": "system", "content": "s"}, {"role": "user", "content": huge}]
    Compactor(context_window=8_000, reserved_output=0, archive=archive).compact(pasted)  # the rule: user message
    engine = Compactor(policy="layered", context_window=60_000, reserved_output=0)
    compact.snip(engine, [*history(2), *turn(5, huge), {"role": "assistant", "content": "ok"}], Pass())  # snip
    small = Compactor(policy="layered", context_window=4_000, reserved_output=500, layers=("last resort",),
                      summarize=compact.summarize_extractive)
    small.compact([*history(3), *turn(8, huge)], level=2)  # the last resort, as far as it goes
    assert any("would not fit the window; the archive holds it whole" in w for w in whys)
    assert any(w.startswith("this output alone was ~") for w in whys)
    assert "" in whys  # snip's cut of an old output
    assert "what the last resort keeps of one output" in whys and "cut to fit the window" in whys


def test_every_place_that_shortens_arguments_uses_the_one_shortener(monkeypatch):
    calls = counting(monkeypatch, "shorten_arguments")
    long = [{"role": "system", "content": "s"}, {"role": "user", "content": "write"},
            *[m for k in range(5) for m in turn(k, "ok", "write_file", path=f"f{k}", content="x" * 2_000)]]
    compact.STEPS["shorten"](Compactor(), long, Pass())
    compact.cut_everything(long)
    Compactor(policy="layered", context_window=4_000, reserved_output=500, layers=("last resort",),
              summarize=compact.summarize_extractive).compact(long, level=2)
    assert len(calls) >= 3


# --- One validator (item 1) -----------------------------------------------------------------


def test_the_engine_ends_in_the_one_validator_and_find_problems_is_its_list_of_fixes(monkeypatch):
    calls = counting(monkeypatch, "repair")
    out = Compactor(policy="layered", context_window=4_000, reserved_output=500,
                    summarize=compact.summarize_extractive).compact(history(30))
    assert calls and calls[-1][0][0] is not None and compact.find_problems(out) == []
    broken = [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "gone", "content": "orphan"}]
    before = len(calls)
    assert compact.find_problems(broken) == ["message 1: a tool result with no matching call just before it"]
    assert len(calls) == before + 1  # find_problems asked the validator


# --- One summary format (item 1) ------------------------------------------------------------


def test_the_model_is_asked_for_the_sections_the_offline_summary_writes():
    asked = [line[3:].split(" - ")[0] for line in compact.SECTIONS_PROMPT.splitlines() if line.startswith("## ")]
    assert asked == list(compact.SECTIONS)
    written = compact.parse_summary(compact.summarize_extractive(history(10)[1:], focus="notes"))
    assert written and set(written) <= set(compact.SECTIONS)


def test_a_model_summary_keeps_its_own_headings_and_gets_the_facts_it_dropped_under_them():
    middle = [{"role": "user", "content": "Fix it."}, *turn(1, "KeyError: 'total'", "edit_file", path="src/a.py",
                                                            old="a", new="b")]
    merged = compact.backfill("## Decisions\n- edit a.py\n\n## Errors seen\n- none yet", middle)
    sections = compact.parse_summary(merged)
    assert sections["Errors seen"] == ["none yet", "KeyError: 'total'"] and sections["Files changed"] == ["src/a.py"]
    assert list(sections)[:2] == ["Decisions", "Errors seen"]  # no second format: the same headings


# --- One channel for the user's words (item 1) ----------------------------------------------


@pytest.mark.parametrize("policy", ["sawtooth", "layered", "zones"])
def test_the_users_words_are_carried_by_the_state_and_rendered_in_one_place(monkeypatch, policy):
    carried, rendered = counting(monkeypatch, "carry_user_words"), counting(monkeypatch, "user_notes")
    engine = Compactor(policy=policy, context_window=4_000, reserved_output=500, summarize=compact.summarize_extractive)
    out = engine.compact([*history(30), {"role": "user", "content": "Go on."}], level=1)
    assert carried and rendered and engine.state.task.startswith("Survey the notes")
    assert engine.state.pinned == ["Never touch vendor/."]
    summary = compact.content_text(next(m for m in out if compact.is_summary(m)))
    body, notes = summary.split(compact.EXTRA_RULE)
    assert "Never touch vendor/." in notes and "Never touch vendor/." not in body  # once, below the summary


# --- One failure record (item 1) -------------------------------------------------------------


def test_the_guard_keeps_no_record_of_its_own():
    engine = Compactor(summarize=lambda m, focus=None: 1 / 0)
    assert engine.guard.state is engine.state
    state_fields = {f.name for f in dataclasses.fields(compact.SummaryGuard)}
    assert not {"failures", "skip", "last_error", "failed_at"} & state_fields
    engine.compact(history(30), level=1)
    assert engine.state.failures == 1 and engine.state.failed_at and "ZeroDivisionError" in engine.state.last_error


# --- One place scales the estimate to the server's count (item 1) ---------------------------


def test_the_engine_scales_estimates_only_through_request_tokens(monkeypatch):
    calls = counting(monkeypatch, "request_tokens")
    messages = history(10)
    engine = Compactor(policy="layered", context_window=10_000, reserved_output=0)
    assert engine.compact(messages) is messages  # by our estimate, far below the trigger
    assert engine.compact(messages, usage=(messages, 8 * compact.estimate_tokens(messages))) is not messages
    assert len(calls) == 2 and all(c[0][3] is engine.tally for c in calls)  # the engine's one measure of the history


# --- One archive point (item 1) -------------------------------------------------------------


def test_the_archive_is_written_only_through_the_one_archive_point(monkeypatch, tmp_path):
    inside, outside = [], []
    real_point, real_append = compact.archived, compact.Archive.append

    def point(*args):
        inside.append(True)
        try:
            return real_point(*args)
        finally:
            inside.pop()

    def append(self, messages, compaction):
        outside.append(not inside)
        return real_append(self, messages, compaction)
    monkeypatch.setattr(compact, "archived", point)
    monkeypatch.setattr(compact.Archive, "append", append)
    for policy in ("sawtooth", "layered", "zones", "evo-agent", "five-layer", "smart-eviction"):
        archive = compact.Archive(tmp_path / f"{policy}.jsonl")
        Compactor(policy=policy, context_window=4_000, reserved_output=500, archive=archive,
                  summarize=compact.summarize_extractive).compact(history(30), level=2)
        assert archive.records(), policy
    assert outside and not any(outside)


# --- One token memo, one file tracker (item 1) ----------------------------------------------


def test_the_history_is_summed_once_and_then_only_what_is_new(monkeypatch):
    engine, messages = Compactor(policy="layered", context_window=10**9), history(30)
    engine.compact(messages)
    counted = counting(monkeypatch, "message_tokens")

    def history_counted() -> int:  # the system prompt, one message, is measured apart at every call
        return sum(1 for args, _ in counted if args[0]["role"] != "system")
    assert engine.compact(messages) is messages and not history_counted()  # nothing new: nothing counted
    grown = [*messages, {"role": "user", "content": "and now?"}]
    assert engine.compact(grown) is grown and history_counted() == 1  # one new message: one count


def test_every_reader_of_the_files_a_task_touched_asks_the_one_tracker(monkeypatch):
    calls = counting(monkeypatch, "files_touched")
    messages = history(6)
    compact.note_files(compact.CompactState(), messages)  # the recent files
    compact.summarize_extractive(messages[1:])  # the summary's Files sections
    compact.task_complexity(messages)  # a task's complexity (smart eviction's window)
    assert len(calls) == 3


def test_the_one_cutter_keeps_the_users_rules_from_the_part_it_cuts(tmp_path):
    """A pasted message too large for the window, its rules in the middle (recorded run 67 of the SWE
    runs lost them): the cut keeps its head and tail and every line that is a rule; a tool output
    cut the same way keeps its error lines, not a line that merely says "must"."""
    rows = [f"row {i}: value value value" for i in range(3_000)]
    rows[1_500] = "- DO NOT MODIFY: tests or configuration files."
    rows[1_700] = "Commands must be in a single bash block."
    pasted = [{"role": "system", "content": "s"}, {"role": "user", "content": "\n".join(rows)}]
    out = Compactor(context_window=8_000, reserved_output=0, archive=compact.Archive(tmp_path / "a.jsonl")).compact(pasted)
    cut = out[-1]["content"]
    assert "lines cut" in cut and rows[0] in cut and rows[-1] in cut
    assert rows[1_500] in cut and rows[1_700] in cut
    output = compact.cut_text("\n".join(rows), 500)
    assert rows[1_700] not in output and " cut …]" in output


def test_a_message_too_large_is_cut_to_the_room_as_the_server_counts_it(tmp_path):
    """The window is the server's count; our estimate of a text may be half of it (a tiny model's
    tokenizer: the live refusal test ran out of room after its cut). The rule that cuts a message too
    large measures the room in our estimate's units: the cut message takes at most half the room
    as the server counts it."""
    engine = Compactor(context_window=4_000, reserved_output=0, archive=compact.Archive(tmp_path / "a.jsonl"))
    text = " ".join(f"note {k} moved." for k in range(300))
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": text}]
    estimated = compact.estimate_tokens(messages)
    assert estimated < engine.budget.effective(messages) // 2  # whole, by our estimate alone
    out = engine.compact(messages, usage=(messages, 2 * estimated))  # the server counts twice as many
    kept = compact.text_tokens(compact.content_text(out[-1]))
    assert "chars cut" in out[-1]["content"] and 2 * kept <= engine.budget.effective(out) // 2
