"""Each design document's ladder as its document describes it (compact.PRESETS), and each behaviour
the documents add, shown on a small input: the seed's way next to the project's default."""

from __future__ import annotations

import pytest
from test_layers import assistant, system, tool_turn, user

import compact
import tiny_agent
from compact import Compactor, content_text, summarize_extractive


def grow(n: int, size: int = 400) -> list[dict]:
    """n read_file turns, each output `size` words long."""
    out = []
    for i in range(n):
        out += tool_turn(f"c{i}", "read_file", " ".join(f"word{i}" for _ in range(size)), path=f"src/m{i}.py")
    return out


def test_every_preset_builds_and_says_which_steps_it_runs():
    for name in compact.PRESETS:
        c = Compactor(policy=name)
        steps = [step.name for step in c.steps(c.layers)]
        assert "reasoning" in steps and steps[-1] == "last resort", (name, steps)
    with pytest.raises(ValueError, match="unknown policy"):
        Compactor(policy="nine-layer")


def test_evo_agent_masks_old_results_before_every_call_even_below_the_trigger():
    messages = [system(), user("Survey the code."), *grow(6)]
    default = Compactor(policy="layered", context_window=200_000)
    evo = Compactor(policy="evo-agent", context_window=200_000)
    assert default.compact(messages) is messages  # far below the trigger: nothing happens
    out = evo.compact(messages)
    masked = [m for m in out if content_text(m).startswith(compact.PRUNED)]
    assert len(masked) == 3 and content_text(out[-1]) == content_text(messages[-1])  # the last 3 stay whole


def test_evo_agent_appends_the_focus_to_the_summary():
    messages = [system(), user("Survey the code."), *grow(30)]
    out = Compactor(policy="evo-agent", context_window=8_000, reserved_output=500).compact(
        messages, focus="the parser module", level=1)
    summary = next(m for m in out if compact.is_summary(m))
    assert "Focus of this compaction: the parser module" in content_text(summary)


def test_five_layer_snips_a_3000_line_log_to_100_head_and_20_tail_lines():
    log = "\n".join(f"line {i}" for i in range(3_000))
    messages = [system(), user("Why does the job fail?"), *tool_turn("c1", "bash", log, command="cat job.log"),
                assistant("Looking further."), *tool_turn("c2", "bash", "ok", command="true")]
    five = Compactor(policy="five-layer")
    [snip] = five.steps(five.layers[1][1]["steps"][:1])  # its batch's first step, with the document's numbers
    out = snip.run(messages, compact.Pass())
    lines = content_text(out[3]).split("\n")
    assert lines[:100] == [f"line {i}" for i in range(100)] and lines[100].startswith("[… 2,880 lines cut")
    assert lines[101:] == [f"line {i}" for i in range(2_980, 3_000)]


def test_cache_first_keeps_a_batch_only_when_it_frees_enough_tokens():
    messages = [system(), user("Survey the code."), *grow(12, size=150), user("Go on.")]
    window = int(compact.estimate_tokens(messages) / 0.8)
    batched = Compactor(policy="layered", context_window=window, reserved_output=0, layers=(
        ("batch", {"frees": 10**6, "steps": ("mask", "clear", "dedupe")}), "summary"), summarize=summarize_extractive)
    out = batched.compact(messages)
    names = [name for name, *_ in batched.report]
    assert names[0] == "batch mask+clear+dedupe" and batched.report[0][2] < batched.report[0][1]  # it freed some,
    assert not any(content_text(m).startswith(compact.PRUNED) for m in out)  # but too little: not kept
    one_by_one = Compactor(policy="layered", context_window=window, reserved_output=0, layers=("mask", "clear", "dedupe", "summary"),
                           summarize=summarize_extractive)
    assert [n for n, *_ in one_by_one.report] == [] and one_by_one.compact(messages) is not messages
    assert one_by_one.report[0][0] == "mask"


def chinese_decision_history() -> list[dict]:
    routine = [m for i in range(8) for m in tool_turn(f"r{i}", "bash", "ok " * 300, command=f"ls dir{i}")]
    return [system(), user("比较方案A和方案B，然后实现。"), *routine[:8], assistant("最终结论：选择方案B，因为它更简单。"),
            *routine[8:], user("继续。")]


def test_smart_eviction_keeps_the_chinese_decision_line_while_routine_output_goes():
    messages = chinese_decision_history()
    c = Compactor(policy="smart-eviction", context_window=int(compact.estimate_tokens(messages) / 0.9),
                            reserved_output=0, summarize=summarize_extractive)
    out = compact.evict(c, messages, compact.Pass(), compact.Weights(multiply=True))
    assert "最终结论：选择方案B，因为它更简单。" in [content_text(m) for m in out]
    assert len(out) < len(messages) and any(content_text(m).startswith("[evicted]") for m in out)
    weights = dict(s for s in c.layers if isinstance(s, tuple))["evict"]["weights"]  # the preset's, as data
    assert (weights.user, weights.assistant, weights.call, weights.tool) == (3.0, 2.0, 2.0, 0.5)  # 002's roles
    score = compact.importance(messages, (10, 11), 0.5, weights)
    assert score == pytest.approx(1.5 * compact.importance(messages, (2, 4), 0.5, weights))  # a decision: ×1.5


def test_smart_eviction_runs_lossy_steps_from_75_percent_where_the_default_zones_stop():
    talk = [m for i in range(12) for m in (assistant(f"Plan {i}: " + "step " * 150), user(f"Fine, go on {i}."))]
    messages = [system(), user("Survey the code."), *talk]  # nothing a lossless step can shrink
    window = int(compact.estimate_tokens(messages) / 0.8)  # the history sits at 80% of the window
    lossy = {"snip", "shorten", "evict", "summary", "last resort"}
    default = Compactor(policy="zones", context_window=window, reserved_output=0, summarize=summarize_extractive)
    seed = Compactor(policy="smart-eviction", context_window=window, reserved_output=0, margin=0.0,
                               summarize=summarize_extractive)
    default.compact(messages), seed.compact(messages)
    assert not lossy & {n for n, *_ in default.report} and lossy & {n for n, *_ in seed.report}


def test_smart_eviction_holds_back_a_ten_percent_margin_on_estimates():
    budget = Compactor(policy="smart-eviction", context_window=100_000, reserved_output=0).budget
    assert budget.effective([]) == 90_000 and Compactor(policy="layered", context_window=100_000, reserved_output=0).budget.effective([]) == 100_000


def test_confidence_labels_say_how_many_facts_of_a_line_were_found():
    labelled = compact.flag_unverified("- HAT123 departs at 10:40 from gate 7", "HAT123 gate 7", confidence=True)
    assert labelled.endswith("(confidence: 2 of 3 facts found) (unverified)")
    assert compact.flag_unverified("- HAT123 departs at 10:40", "HAT123").endswith("10:40 (unverified)")


def test_the_kept_window_grows_with_the_tasks_complexity():
    simple = [system(), user("Go."), *grow(2, size=60), *[m for i in range(30) for m in (
        assistant(f"Thinking about step {i}."), user("Go on."))]]
    errors = [m for i in range(12) for m in tool_turn(f"e{i}", "bash", f"E{i}Error: failure kind {chr(65 + i)}",
                                                        command=f"pytest tests/t{i}.py")]
    complex_ = [*simple, *errors]
    engine, tail = Compactor(policy="smart-eviction", context_window=64_000, reserved_output=0), compact.grown(20, 30)
    assert compact.task_complexity(simple) < compact.task_complexity(complex_) == 1.0
    kept = [len(messages) - tail(engine, messages)[1] for messages in (simple, complex_)]
    assert 20 <= kept[0] < kept[1] == 30  # 002: a window of 20 to 30 messages, growing with the task


def test_stats_time_the_failures_and_warn_while_summaries_are_degraded():
    def broken(messages, focus=None):
        raise RuntimeError("model down")
    c = Compactor(policy="layered", context_window=4_000, reserved_output=500, summarize=broken)
    messages = [system(), user("Go."), *grow(10, size=60)]
    assert "WARNING" not in compact.compaction_stats(c.state, c.guard)
    for _ in range(3):
        messages = c.compact([*messages, *grow(4, size=60), user("Go on.")], level=1)
    stats = compact.compaction_stats(c.state, c.guard)
    assert "summarizer failures: 3, the last at" in stats and "model down" in stats
    assert "WARNING: summaries are degraded" in stats


def test_the_graded_rolling_summary_keeps_the_oldest_progress_in_one_line():
    first = summarize_extractive([user("Fix the login bug."), assistant("I read auth.py. The token check is wrong."),
                                  assistant("Decided: compare with <= instead of <.")])
    later = [compact.summary_message(first), assistant("Now running the tests."), *tool_turn(
        "t", "bash", "FAILED tests/test_auth.py::test_expiry", command="pytest")]
    graded = compact.parse_summary(summarize_extractive(later, graded=True))
    flat = compact.parse_summary(summarize_extractive(later))
    assert graded[compact.EARLIER] == ["I read auth.py.; Decided: compare with <= instead of <."]  # first sentences
    assert graded["Decisions"] == ["Decided: compare with <= instead of <."]  # decisions stay entries
    assert graded["Progress"] == ["Now running the tests."]
    assert "I read auth.py. The token check is wrong." in flat["Progress"]  # one level of detail


def test_the_sawtooth_tutorial_preset_rolls_a_graded_summary():
    c = Compactor(policy="sawtooth-tutorial", context_window=3_000, reserved_output=200)
    messages = [system(), user("Survey the code.")]
    for n in range(20):
        messages = c.compact([*messages, assistant(f"Step {n} done. Next file."), *grow(2, size=80)])
    assert c.state.compactions >= 2 and compact.EARLIER in compact.parse_summary(c.state.summary)


def test_the_light_tier_reuses_the_rolling_summary_without_a_model_call_when_that_is_enough():
    calls = []

    def model(messages, focus=None):
        calls.append(focus)
        return "## Goal\n- Survey the code."
    messages = [system(), user("Survey the code."), *grow(12, size=80), user("Go on.")]
    window = int(compact.estimate_tokens(messages) / 0.75)
    c = Compactor(policy="layered", context_window=window, reserved_output=0, summarize=model, layers=("light", "summary"))
    c.compact(messages)
    assert [n for n, *_ in c.report] == ["light"] and calls == []
    tight = Compactor(policy="layered", context_window=window, reserved_output=0, summarize=model, layers=("light", "summary"),
                      target=0.01)
    tight.compact(messages)
    assert [n for n, *_ in tight.report] == ["light", "summary"] and len(calls) == 1
    header, body = tight.state.summary.split("\n", 1)
    assert body.startswith("## Goal\n- Survey the code.")  # the rebuild's, not the light one's
    assert header.startswith("(Compaction 1 replaced 19 messages,") and "turns 1-9" in header  # the light tier's
    # turns were not counted, since its summary was not kept


def test_the_agent_runs_a_preset_from_the_command_line(capsys, monkeypatch, tmp_path):
    # a preset is a strategy name: `--strategy echo-agent`; there is no second option for it
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert tiny_agent.parse_args(["--strategy", "echo-agent"]).strategy == "echo-agent"
    assert tiny_agent.main(["--strategy", "echo-agent", "--max-iterations", "20"]) == 0
    out = capsys.readouterr().out
    assert "(echo-agent)." in out and "[compact]" in out
    with pytest.raises(SystemExit) as wrong:
        tiny_agent.main(["--strategy", "nine-layer"])
    assert wrong.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "'nine-layer'" in err, err


def test_evo_agent_compacts_the_whole_history_once_it_still_holds_50000_characters():
    """000 evo-agent, 第二层: 微压缩之后 ... 如果仍然超过 50,000 字符，就触发全量压缩, whatever the window."""
    talk = [m for i in range(30) for m in (assistant(f"Plan {i}: " + "step " * 400), user(f"Fine, go on {i}."))]
    big = [system(), user("Survey the code."), *grow(40, size=400), *talk]  # what masking leaves: ~60,000 characters
    small = [system(), user("Survey the code."), *grow(40, size=400), *talk[:10]]  # the outputs: masked first
    for messages, summarized in ((big, True), (small, False)):
        evo = Compactor(policy="evo-agent", context_window=1_000_000, summarize=summarize_extractive)
        out = evo.compact(messages)
        assert any(compact.is_summary(m) for m in out) == summarized
        assert "compact history" in [name for name, *_ in evo.report]
    assert Compactor(policy="layered", context_window=1_000_000).compact(big) is big  # far below the token trigger


def test_echo_agents_pruner_protects_its_token_budget_tail_not_the_last_three_results():
    """003 echo-agent, 工具剪枝: 先按 tail budget 找到受保护的尾部消息; 尾部之外的旧工具结果 become placeholders."""
    messages = [system(), user("Survey the code."), *grow(20, size=120), user("Go on.")]
    window = int(compact.estimate_tokens(messages) / 0.8)
    echo = Compactor(policy="echo-agent", context_window=window, reserved_output=0)
    [mask] = [step for step in echo.steps(echo.layers) if step.name == "mask"]
    out = mask.run(messages, compact.Pass())
    tail = compact.boundaries(echo, messages)[1]
    whole = [i for i, m in enumerate(out) if m.get("role") == "tool" and not content_text(m).startswith(compact.PRUNED)]
    assert whole == [i for i, m in enumerate(messages) if m.get("role") == "tool" and i >= tail] and len(whole) > 3
    layered = compact.mask_old_tool_results(messages)  # the default pruner keeps the last 3 results
    assert sum(m.get("role") == "tool" and not content_text(m).startswith(compact.PRUNED) for m in layered) == 3


def test_zones_admit_a_large_output_that_came_since_the_last_call_even_with_a_question_after_it():
    """Found by the lessons: admission looked only at the newest group, so a large output followed by
    the user's next question entered whole."""
    zones = Compactor(policy="zones")
    messages = zones.compact([system(), user("Read the log.")])
    big = "row: value value value value\n" * 2_000
    grown = [*messages, *tool_turn("c1", "bash", big, command="cat app.log"), user("What does it say?")]
    out = zones.compact(grown)
    assert compact.text_tokens(content_text(out[3])) <= 2_000 < compact.text_tokens(big)  # admitted as it entered
    assert out[-1] is grown[-1] and zones.compact(out) is out  # and only once
