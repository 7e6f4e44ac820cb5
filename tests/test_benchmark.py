"""The measuring lesson (15): lessons/benchmark.py replays conversations through every strategy.
These tests check what a reader relies on when reading its table, on a small generated run (and on
a few recorded runs when ../shared/trajectories is there); no wall-clock time is asserted. One test
runs the default benchmark once and fails when the tables of lesson 15 in lessons/README.md, or the
summary line of README.md's "## Measured", differ from it; another does the same for the recorded
runs when they are there."""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import benchmark
import compact
from compact import (PRESETS, Compactor, content_text, estimate_tokens, find_constraints, find_problems, mask_old_tool_results,
                     reasoning_text, summarize_extractive)
from conftest import MODEL_VARIABLES, TRAJECTORIES, call, cpu_seconds, lesson_command, load_trajectories, offline_env
from test_lessons_first import BENCHMARK_RATIO
from conversations import generate_conversation, generate_thinking_conversation

ROOT = Path(__file__).resolve().parent.parent
SMALL = dict(turns=(30,), seeds=(0,), window=8_000)  # a window small enough that every strategy acts
SMALL_ARGS = ["--turns", "30", "--seeds", "0", "--window", "8000"]


def offline_run(**kwargs) -> dict:
    """run_benchmark in this process with no model configured (a module fixture runs before the
    autouse `offline` one, so it clears the model variables itself)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in MODEL_VARIABLES:
            patch.delenv(name, raising=False)
        return benchmark.run_benchmark(**kwargs)


@pytest.fixture(scope="module")
def small():
    """The small run, without the timings (the lesson's own runs below print and check those)."""
    return offline_run(**SMALL, timing=False)


@pytest.fixture(scope="module")
def rows(small):
    return small["generated"]["30"]["strategies"]


def run_lesson(*args: str, lesson: str = "15_benchmark.py") -> subprocess.CompletedProcess:
    return subprocess.run(lesson_command(lesson, *args), cwd=ROOT, env=offline_env(),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # runs the whole default benchmark: CI's slow part
def test_the_benchmark_takes_at_most_45_times_lesson_01():
    """Lesson 15 as a reader runs it, in CPU time against lesson 01's in the same run.
    Lesson 01 is mostly Python's start-up and the tokenizer's load, whose time varies from run to
    run (0.54-1.04 s measured on two cores): the reference is the median of three runs."""
    benchmark_run = run_lesson()
    assert benchmark_run.returncode == 0, benchmark_run.stderr[-2000:]
    spent = cpu_seconds(benchmark_run.stderr)
    reference = sorted(cpu_seconds(run_lesson(lesson="01_the_wall.py").stderr) for _ in range(3))[1]
    assert spent <= BENCHMARK_RATIO * reference, f"lesson 15: {spent:.1f} s of CPU, lesson 01 {reference:.1f} s"


def test_every_strategy_of_the_issue_is_in_the_table(rows):
    assert list(rows) == ["none", "window 20", "mask 10", "sawtooth 30/6", "layered", "hybrid", "zones", *PRESETS]


def test_every_preset_is_replayed_with_no_invalid_list_and_compacts(rows):
    """Each compact.PRESETS entry, built by Compactor(policy=name), beside the strategies."""
    for name in PRESETS:
        assert rows[name]["from_compact_py"] and rows[name]["invalid"] == {"openai": 0, "anthropic": 0}, name
        assert rows[name]["tokens_ratio"] < 1.0 and 0.0 <= rows[name]["next_ids"] <= 1.0, name
        assert set(rows[name]["retention"]) == set(rows["layered"]["retention"]), name


def test_a_preset_is_its_design_documents_compactor_with_the_ladders_summaries_counted():
    history = generate_conversation(60, seed=1).messages
    calls = {}
    for name, settings in PRESETS.items():
        summarizer = benchmark.CountingSummarizer()
        compact = benchmark.preset(name, 8_000).start(summarizer)
        compactor, guard = compact.compactor, summarizer.summarize
        assert all(getattr(compactor, key) == value for key, value in settings.items()), name
        assert compactor.guard is summarizer and guard.summarize is guard.offline, name  # graded when the preset is
        out = compact(history)
        assert out is not history and find_problems(out) == [], name
        calls[name] = summarizer.calls
    assert calls["sawtooth-tutorial"] > 0  # its rolling summary ran, and the counting summarizer saw it


def test_the_five_layer_light_tier_runs_through_the_counting_summarizer():
    """The light tier calls compactor.guard.offline, and counted() puts the CountingSummarizer there:
    it hands on the guard's extractive summarizer, uncounted (the tier calls no model)."""
    strategy, steps = benchmark.preset("five-layer", 8_000), []
    start = strategy.start

    def watched(summarizer):
        compact = start(summarizer)
        assert summarizer.offline is compact.compactor.guard.summarize.offline

        def run(history):
            out = compact(history)
            steps.extend(name for name, *_ in compact.compactor.report)
            return out
        return run
    strategy.start = watched
    run = benchmark.replay(generate_conversation(60, seed=2).messages, strategy, 8_000)
    assert "light" in steps and run.summaries == steps.count("summary")


# --- Cache first ----------------------------------------------------------------------


def test_the_cache_section_holds_the_ladder_with_and_without_batching_and_masking_every_call(small):
    cache = small["cache"]
    rows = cache["strategies"]
    assert list(rows) == ["none", "layered", *(f"cache-first {n:,}" for n in benchmark.CACHE_MIN_TOKENS),
                          "mask every call", "mask every call, cache-first 2,000"]
    assert cache["turns"] == 30 and rows["layered"] == small["generated"]["30"]["strategies"]["layered"]
    for name, row in rows.items():
        assert 0.0 < row["cache_hit"] < 1.0 and row["cost_ratio"] <= 1.0, name
        assert row["invalid"] == {"openai": 0, "anthropic": 0}, name
    assert benchmark.check_targets(small)  # the cache rows count in "no invalid list"


@pytest.mark.slow  # re-measures the benchmark: CI's slow part
def test_cache_first_batching_changes_where_the_prefix_breaks(default_run):
    """What the default run measures (README.md says it in words from the same figures): batching
    raises the cache-hit share of masking before every call, which masking before every call had
    lowered below masking at the trigger; for the ladder at the trigger it moves it by under a point
    at 250 turns (one compaction changes the prefix once, batched or not, and a refused batch falls
    through to the summary, which rewrites from the head)."""
    hit = {name: row["cache_hit"] for name, row in default_run["cache"]["strategies"].items()}
    assert hit["mask every call"] < hit["layered"]
    assert hit["mask every call, cache-first 2,000"] > hit["mask every call"]
    assert all(abs(hit[f"cache-first {n:,}"] - hit["layered"]) < 0.01 for n in benchmark.CACHE_MIN_TOKENS)
    cost = {name: row["cost_ratio"] for name, row in default_run["cache"]["strategies"].items()}
    assert cost["mask every call, cache-first 2,000"] < cost["mask every call"]


def test_no_compaction_is_the_reference_for_every_ratio(rows):
    assert (rows["none"]["tokens_ratio"], rows["none"]["peak_ratio"], rows["none"]["cost_ratio"]) == (1.0, 1.0, 1.0)
    assert rows["none"]["summary_tokens"] == 0


def test_every_compacting_strategy_sends_fewer_tokens_than_none(rows):
    assert all(row["tokens_ratio"] < 1.0 for name, row in rows.items() if name != "none")


def test_summarizer_calls_are_counted_in_the_tokens(rows):
    for name in ("sawtooth 30/6", "hybrid"):
        assert rows[name]["summaries"] > 0 and rows[name]["summary_tokens"] > 0


def test_compact_py_strategies_send_no_list_a_provider_would_refuse(rows):
    for name, row in rows.items():
        if row["from_compact_py"]:
            assert row["invalid"] == {"openai": 0, "anthropic": 0}, name


def test_the_naive_window_breaks_anthropics_first_turn_rule(rows):
    """The baseline keeps system + last N, so it often starts with an assistant message."""
    assert rows["window 20"]["invalid"]["anthropic"] > 0


def test_retention_is_a_share_and_none_keeps_every_fact(rows):
    for row in rows.values():
        assert set(row["retention"]) == {"recall", "artifact", "continuation", "decision", "constraints", "errors"}
        assert all(0.0 <= value <= 1.0 for value in row["retention"].values())
    assert set(rows["none"]["retention"].values()) == {1.0}


def test_targets_are_pass_fail_lines_about_the_longest_run(small, rows):
    targets = benchmark.check_targets(small)
    for passed, text in targets:  # a verdict, or None only for what this run did not measure or cannot judge
        assert isinstance(passed, bool) or (passed is None and ("not run (pass --trajectories)" in text
                                                                or "(not judged: " in text)), text
    assert all(" at 30 turns" in text for _, text in targets if " turns" in text)
    verdicts = {text.split(":")[0]: passed for passed, text in targets}
    assert verdicts["layered at 30 turns sends at most 20% of none's tokens"] == (rows["layered"]["tokens_ratio"] <= 0.2)
    assert not any("run takes" in text for _, text in targets)  # wall-clock time is reported, never judged


@pytest.mark.parametrize("last", [1, 3, 20])
def test_sliding_window_never_starts_with_a_tool_result(last):
    messages = generate_conversation(12, seed=1).messages
    model_calls = [end for end, m in enumerate(messages) if m["role"] == "assistant"]
    for end in model_calls:
        window = benchmark.sliding_window(messages[:end], last)
        assert window[0]["role"] == "system"
        assert len(window) == 1 or window[1]["role"] != "tool"
        assert find_problems(window) == []


def test_masking_an_old_result_ends_the_cached_prefix_there():
    messages = generate_conversation(12, seed=1).messages
    masked = mask_old_tool_results(messages, keep_last=1)
    first_change = next(i for i, (a, b) in enumerate(zip(messages, masked)) if a is not b)
    assert benchmark.common_prefix_tokens(messages, messages) == estimate_tokens(messages)
    assert benchmark.common_prefix_tokens(messages, masked) == estimate_tokens(messages[:first_change])


@pytest.mark.parametrize("growth, exponent", [(lambda t: 1_000 * t, 2.0), (lambda t: 5_000, 1.0)])
def test_growth_exponent_is_2_for_a_growing_history_and_1_for_a_bounded_one(growth, exponent):
    per_turn = [growth(t) for t in range(1, 301)]
    assert benchmark.growth_exponent(per_turn) == pytest.approx(exponent, abs=0.05)


def test_a_fact_counts_as_kept_in_tool_call_arguments_and_in_a_summary():
    path = "src/payments/refund_policy.py"
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": json.dumps({"path": path})}}]}
    summary = {"role": "user", "content": "[Context summary] ...\n## Errors seen\n- KeyError: 'x'"}
    assert benchmark.contains([call], path) and benchmark.contains([summary], "KeyError: 'x'")
    assert not benchmark.contains([summary], path)


def test_the_counting_summarizer_adds_the_request_and_the_answer():
    middle = generate_conversation(12, seed=2).messages[1:20]
    counting = benchmark.CountingSummarizer()
    text = counting(middle)
    assert counting.calls == 1
    assert counting.output_tokens == estimate_tokens(text)
    assert counting.input_tokens > estimate_tokens(text)  # the request holds the whole transcript


def test_a_constraint_naming_a_file_is_pinned_verbatim():
    """Found by the benchmark: the sawtooth lost "Do not modify deploy.sh." (seed 2, 250 turns)
    because compact.sentences cut at the dot inside the file name. compact._SENTENCE now keeps a dot
    followed by a word character; this keeps it fixed."""
    said = {"role": "user", "content": "Before you go on: Do not modify deploy.sh. Ops owns that file."}
    assert any("Do not modify deploy.sh." in c for c in find_constraints([said]))


@pytest.fixture(scope="module")
def lesson_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """One small run of the lesson with every output: its tables, the chart's PNG and the JSON file
    (the timings take most of a run, so the tests below share one)."""
    folder = tmp_path_factory.mktemp("lesson_15")
    png, data = folder / "tokens.png", folder / "results.json"
    return run_lesson(*SMALL_ARGS, "--plot", str(png), "--json", str(data)), png, data


def test_the_lesson_prints_its_tables_chart_and_targets_and_draws_the_png(lesson_run):
    result, png, _ = lesson_run
    assert result.returncode == 0, result.stderr
    for marker in ("[setup] window 8,000 tokens", "kept at the end", "next ids  values   words",
                   "Tokens sent at each turn", "=== Cache first", "cache-first 2,000", "mask every call", *PRESETS,
                   "[reasoning] layered:", "below trigger", "growing by one message a call", "=== Targets", "PASS  ",
                   "[time] this run took",
                   "(generated ", "reported, not judged)", "[lesson 15] done:"):
        assert marker in result.stdout, marker
    if importlib.util.find_spec("matplotlib") is None:  # one run does both: the lesson takes seconds
        assert 'pip install -e ".[plot]"' in result.stdout
    else:
        assert f"[plot] saved {png}" in result.stdout
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_lesson_json_output_holds_every_figure_its_targets_judge(lesson_run):
    result, _, saved = lesson_run
    assert result.returncode == 0, result.stderr
    data = json.loads(saved.read_text(encoding="utf-8"))
    assert data["window"] == 8_000 and set(data["generated"]) == {"30"}
    printed = [(t["passed"], t["target"]) for t in data["targets"]]
    assert printed == benchmark.check_targets(data)  # the JSON alone gives the same verdicts
    assert all(isinstance(passed, bool) or "not run" in text or "not judged" in text for passed, text in printed)
    assert set(data["seconds"]) >= {"generated", "total"} and "recorded" not in data["seconds"]
    for passed, text in printed:  # the run's text says the same verdicts
        assert f"{'SKIP' if passed is None else 'PASS' if passed else 'FAIL'}  {text}" in result.stdout


def test_bare_json_prints_the_json_alone(small, monkeypatch, capsys):
    module = lesson_module()
    monkeypatch.setattr(module, "run_benchmark", lambda *args, **kwargs: copy.deepcopy(small))
    module.main([*SMALL_ARGS, "--json"])
    data = json.loads(capsys.readouterr().out)  # nothing but the JSON
    assert set(data["generated"]) == {"30"} and data["targets"]


def lesson_module():
    spec = importlib.util.spec_from_file_location("lesson_15", ROOT / "lessons" / "15_benchmark.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_matplotlib_the_plot_option_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    lesson = lesson_module()
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    lesson.plot({"none": [1, 2, 3]}, 8_000, str(tmp_path / "tokens.png"))
    assert 'pip install -e ".[plot]"' in capsys.readouterr().out
    assert not (tmp_path / "tokens.png").exists()


@pytest.mark.parametrize("filename", ["tau_bench_airline_gpt4o.jsonl", "mini_swe_agent_gemini3pro_swebv.jsonl"])
def test_recorded_runs_replay_with_no_invalid_list(filename):
    recorded = load_trajectories(filename)[:3]
    rows, _ = benchmark.compare([(messages, []) for messages in recorded], window=8_000)
    assert rows["none"]["tokens_ratio"] == 1.0 and set(PRESETS) < set(rows)
    for name, row in rows.items():
        assert "retention" not in row  # recorded runs plant no facts
        if row["from_compact_py"]:
            assert row["invalid"] == {"openai": 0, "anthropic": 0}, name


# --- Next-step identifiers ------------------------------------------------------------


def test_identifiers_come_from_the_argument_values_never_the_keys():
    message = {"role": "assistant", "content": None, "tool_calls": [
        call("c1", "update_reservation", reservation_id="ZFA04Y", passengers=[{"name": "sara_doe_496"}],
             amount=12345, refund=True),
        call("c2", "read_file", path="src/app.py")]}
    assert benchmark.call_identifiers(message) == ["ZFA04Y", "sara_doe_496", "12345", "src/app.py"]


def test_whole_values_are_every_string_and_number_of_three_characters_or_more():
    message = {"role": "assistant", "content": None, "tool_calls": [
        call("c1", "update_reservation", reservation_id="ZFA04Y", passengers=[{"name": "sara_doe_496"}],
             amount=12345, refund=True, cabin="economy class", seats=2, note="ok"),
        call("c2", "bash", command="cd /testbed && python reproduce.py")]}
    assert benchmark.call_values(message) == ["ZFA04Y", "sara_doe_496", "12345", "economy class",
                                              "cd /testbed && python reproduce.py"]


def test_marked_words_split_at_punctuation_but_dot_slash_underscore_dash_and_at():
    message = {"role": "assistant", "content": None, "tool_calls": [
        call("c1", "bash", command="sed -n '10,20p' src/foo.py && grep -rn \"def foo_bar(\" ./pkg"),
        call("c2", "send", to="sara@example.com", text="Flight HAT123 at 10:30, a 1.5kg bag; see os.path.join.")]}
    assert benchmark.call_words(message) == ["src/foo.py", "foo_bar", "./pkg", "sara@example.com", "HAT123",
                                             "1.5kg", "os.path.join"]


def test_the_definitions_owe_nothing_to_compact_identifier_but_the_first():
    """"values" and "words" are the benchmark's own: they disagree with compact.IDENTIFIER where it
    cuts a name short or drops a number, so a compactor tuned to IDENTIFIER is not graded by it alone."""
    assert list(benchmark.NEXT_STEP) == ["identifiers", "values", "words"]
    assert all(d.items.__module__ == "benchmark" and d.sentence for d in benchmark.NEXT_STEP.values())
    message = {"role": "assistant", "content": None, "tool_calls": [
        call("c1", "python", code="x = os.path.join(root, name)  # 1.5kg, 300 ms, 2.75")]}
    found = {name: d.items(message) for name, d in benchmark.NEXT_STEP.items()}
    assert "1.5kg" not in found["identifiers"] and "1.5kg" in found["words"]  # IDENTIFIER cuts it to 5kg
    assert "2.75" not in found["identifiers"] and "2.75" in found["words"]
    assert found["values"] == ["x = os.path.join(root, name)  # 1.5kg, 300 ms, 2.75"]


def test_an_identifier_counts_only_when_it_appeared_earlier_and_is_kept_only_when_sent():
    messages = [{"role": "system", "content": "You book flights."},
                {"role": "user", "content": "Change reservation ZFA04Y for user sara_doe_496."},
                {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_user", user_id="sara_doe_496")]},
                {"role": "tool", "tool_call_id": "c1", "content": "user sara_doe_496: reservations ZFA04Y, K1PQ9X"},
                {"role": "assistant", "content": None,
                 "tool_calls": [call("c2", "get_reservation", reservation_id="K1PQ9X", note="NEW123")]},
                {"role": "tool", "tool_call_id": "c2", "content": "ok"}]
    forget = benchmark.Strategy("forget", lambda s: (lambda h: [h[0], h[1]] if len(h) > 3 else h),
                                feeds_back=False)
    none = benchmark.replay(messages, benchmark.strategies(8_000)[0], 8_000)
    run = benchmark.replay(messages, forget, 8_000)
    # request 1: sara_doe_496 (in the user's message); request 2: K1PQ9X (a tool output); NEW123 is new
    assert (none.next_ids, none.next_ids_kept) == (2, 2)
    assert (run.next_ids, run.next_ids_kept, run.lost) == (2, 1, [(2, "K1PQ9X")])
    # the same by the other definitions: whole values (sara_doe_496, K1PQ9X) and marked words (the same two)
    assert none.next_step == {"identifiers": [2, 2], "values": [2, 2], "words": [2, 2]}
    assert run.next_step == {"identifiers": [2, 1], "values": [2, 1], "words": [2, 1]}


def test_next_step_identifiers_are_a_share_beside_the_tokens(rows):
    assert rows["none"]["next_ids"] == 1.0 and rows["none"]["next_ids_n"] > 0
    assert all(0.0 <= row["next_ids"] <= 1.0 and row["next_ids_n"] == rows["none"]["next_ids_n"]
               for row in rows.values())
    for name in benchmark.NEXT_STEP:  # every definition: a share, of the same items for every strategy
        assert rows["none"]["next_step"][name] == 1.0 and rows["none"]["next_step_n"][name] > 0, name
        assert all(0.0 <= row["next_step"][name] <= 1.0 and row["next_step_n"] == rows["none"]["next_step_n"]
                   for row in rows.values()), name


def test_the_worst_case_is_the_lowest_share_over_every_definition_and_window():
    def rows(**shares):
        return {"layered": {"next_step": {"identifiers": 0.99, "values": 0.97, "words": 0.98, **shares}}}
    pooled = {"32000": rows(words=0.95), "16000": rows(values=0.95), "64000": rows(identifiers=None)}
    assert benchmark.worst_case(pooled, "layered") == (0.95, "values", 16_000)  # a tie: the smaller window
    assert benchmark.worst_cell(benchmark.worst_case(pooled, "layered")) == "95.0% (values, 16k)"
    assert benchmark.worst_case({"16000": rows(identifiers=None, values=None, words=None)}, "layered") is None


def test_recorded_targets_are_skipped_without_the_recorded_runs(small):
    lines = benchmark.recorded_targets(small)
    assert lines and all(passed is None and "not run (pass --trajectories)" in text for passed, text in lines)


@pytest.mark.slow  # re-measures the benchmark: CI's slow part
def test_generated_targets_name_every_strategy_of_compact_py_and_judge_only_the_default_run(small, default_run):
    ours = [name for name, row in small["generated"]["30"]["strategies"].items() if row["from_compact_py"]]
    assert set(benchmark.GENERATED_TOKENS_TODAY) == set(ours)
    for results, judged in ((small, False), (default_run, True)):
        lines = benchmark.generated_targets(results)
        assert [text.split(" at ")[0] for _, text in lines] == ours
        assert all((passed is not None) == judged for passed, _ in lines)
    for passed, text in benchmark.generated_targets(default_run):
        row = default_run["generated"]["250"]["strategies"][text.split(" at ")[0]]
        kept = min(row["retention"][key] for key in benchmark.RETAINED.values())
        today = benchmark.GENERATED_TOKENS_TODAY[text.split(" at ")[0]]
        assert passed == (kept >= 0.95 and row["tokens_ratio"] <= today + 0.02), text


# --- The reasoning rung on a thinking model's history ---------------------------------


def test_the_thinking_conversation_carries_reasoning_larger_than_the_answers():
    conversation = generate_thinking_conversation(24, seed=1, requests=3)
    assert conversation.messages == generate_thinking_conversation(24, seed=1, requests=3).messages
    messages = conversation.messages
    assistants = [m for m in messages if m["role"] == "assistant"]
    assert sum(m["role"] == "user" for m in messages) == 3 and sum(bool(m.get("tool_calls")) for m in assistants) == 24
    assert all(reasoning_text(m) for m in assistants)
    assert sum(len(reasoning_text(m)) > len(content_text(m)) for m in assistants) > 0.9 * len(assistants)
    assert find_problems(messages) == [] and find_problems(messages, "anthropic") == []


def test_every_ladder_policy_is_measured_with_and_without_its_reasoning_rung(small):
    rows = small["reasoning"]["strategies"]
    assert list(rows) == ["none", "layered", "layered no rung", "hybrid", "hybrid no rung", "zones", "zones no rung"]
    assert rows["none"]["reasoning"] > 0 and 0 < small["reasoning"]["reasoning_share"] < 1


def test_skipping_the_reasoning_rung_never_runs_it():
    history = generate_thinking_conversation(40, seed=0).messages
    reports = []
    for skip in ((), ("reasoning",)):
        compact = benchmark.ladder("layered", 8_000, skip=skip).start(benchmark.CountingSummarizer())
        compact(history)
        reports.append([name for name, *_ in compact.compactor.report])
    assert reports[0][0] == "reasoning" and reports[1] and "reasoning" not in reports[1]


# --- Linearity, a printed number ------------------------------------------------------


def test_linearity_reports_an_exponent_and_the_rungs_that_ran():
    messages = generate_conversation(30, seed=0).messages
    result = benchmark.linearity(messages, sizes=(150, 300))
    assert result["messages"] == [150, 300] and len(result["seconds"]) == 2
    steps = [name for name in result["rungs"] if name != "too large"]  # a cut that precedes every step
    assert math.isfinite(result["exponent"]) and steps[0] == "reasoning" and "summary" in steps


def test_a_long_history_is_valid_and_about_the_size_asked():
    messages = generate_conversation(30, seed=0).messages
    history = benchmark.long_history(messages, 500)
    assert 480 <= len(history) <= 500 and find_problems(history) == []


def test_a_compaction_sums_each_list_it_holds_once(monkeypatch):
    """A compaction's time stays linear when each list it holds (the input, each rung's
    result, the repaired output) is summed once; the checks between the rungs read that count, where
    they summed the whole history again (24 counts of every message, for 7 rungs)."""
    messages = benchmark.long_history(generate_conversation(30, seed=0).messages, 2_000)
    window, counted, count = benchmark.window_for(messages, 10.0), [], compact.message_tokens
    monkeypatch.setattr(compact, "message_tokens", lambda m: counted.append(None) or count(m))
    compactor = Compactor(context_window=window, reserved_output=window // 4, policy="layered",
                          summarize=summarize_extractive)
    compactor.compact(messages)
    assert "summary" in [name for name, *_ in compactor.report]  # every rung ran
    assert len(counted) <= (len(compactor.report) + 2) * len(messages)


# --- The check below the trigger, on a history growing by one ----------------------------


def test_the_check_below_the_trigger_is_timed_on_a_history_one_message_longer_at_every_call(monkeypatch):
    """The growing row times compact as the agent's loop calls it: after one call that summed the
    history, each timed call gets a list one message longer than the last, ending at n messages."""
    seen = []

    class Watched(Compactor):
        def compact(self, messages, *args, **kwargs):
            seen.append(len(messages))
            return super().compact(messages, *args, **kwargs)
    monkeypatch.setattr(benchmark, "Compactor", Watched)
    row = benchmark.growing(generate_conversation(12, seed=1).messages, n=80, number=2, repeat=3)
    assert row["messages"] == 80 and row["below_trigger"] > 0
    assert seen == list(range(74, 81))  # 80 - 2 × 3 summed once, then 75, 76, ..., 80


@pytest.mark.parametrize("ratio, passed", [(0.05, True), (0.1, True), (0.2, False)])
def test_the_growing_target_is_at_most_a_tenth_of_json_dumps(small, ratio, passed):
    results = {**small, "growing": {"messages": 1_000, "tokens": 1, "below_trigger": ratio}}
    verdict, text = next(t for t in benchmark.check_targets(results) if "growing by one" in t[1])
    assert verdict is passed and text.endswith(f"at 1,000 messages: {ratio:.2f}×")


# --- The figures come from a run: the guide's tables, README.md's summary line ------------


def test_guide_blocks_replace_only_the_text_between_their_markers():
    text = "# T\n\n## 15 · Measuring\n\nintro\n\n## 16 · Next\nrest\n"
    once = benchmark.write_readme(text, {"generated": "figures 1"})
    assert benchmark.readme_section(once, "generated") == "figures 1"
    assert once.index("figures 1") < once.index("## 16 · Next")  # at the end of lesson 15's section
    twice = benchmark.write_readme(once, {"generated": "figures 2"})
    assert benchmark.readme_section(twice, "generated") == "figures 2"
    assert twice.replace("figures 2", "figures 1") == once and twice.endswith("## 16 · Next\nrest\n")


def old_readme() -> str:
    blocks = {b: f"{benchmark.BEGIN.format(block=b, args=benchmark.README_BLOCKS[b])}\n{b} figures\n"
                 f"{benchmark.END.format(block=b)}" for b in ("generated", "recorded")}
    return (f"# T\n\n## Measured\n\nIntro.\n\n{blocks['generated']}\n\n{blocks['recorded']}\n\n"
            "## Reliability\nrest\n")


def test_the_summary_line_takes_the_place_of_the_readmes_old_figures():
    once = benchmark.write_summary(old_readme(), "the line")
    assert benchmark.readme_section(once, "summary") == "the line"
    assert benchmark.readme_section(once, "generated") is None and benchmark.readme_section(once, "recorded") is None
    assert "figures" not in once and once.startswith("# T\n\n## Measured\n\nIntro.\n\n<!-- BEGIN summary")
    assert once.endswith("<!-- END summary -->\n\n## Reliability\nrest\n")
    assert benchmark.write_summary(once, "the line") == once
    assert benchmark.readme_section(benchmark.write_summary(once, "another"), "summary") == "another"


def test_the_summary_line_keeps_the_half_this_run_did_not_measure(small):
    recorded = "On 230 recorded runs, of what the next tool call needs, the worst case kept is 1%."
    line = benchmark.summary_line(small, f"Measured (x): old generated half. {recorded}")
    generated, kept = benchmark.split_summary(line)
    assert kept == recorded and generated == benchmark.summary_parts(small)[0] and "\n" not in line
    assert benchmark.split_summary(benchmark.summary_line(small)) == (generated, None)


def test_the_readme_option_refuses_a_run_that_is_not_the_default():
    files = [ROOT / "README.md", ROOT / "lessons" / "README.md"]
    before = [path.read_text(encoding="utf-8") for path in files]
    result = run_lesson(*SMALL_ARGS, "--readme")
    assert result.returncode != 0 and "--readme" in result.stderr and "--turns" in result.stderr
    assert [path.read_text(encoding="utf-8") for path in files] == before


def drift(path: str, block: str, fresh: str, written: str | None = None) -> str:
    if written is None:
        written = benchmark.readme_section((ROOT / path).read_text(encoding="utf-8"), block)
    assert written is not None, f"{path} has lost the markers of its {block} block"
    return "\n".join(difflib.unified_diff(written.split("\n"), fresh.split("\n"), path, "a fresh run", lineterm=""))


def summary_half(index: int) -> str | None:
    line = benchmark.readme_section((ROOT / "README.md").read_text(encoding="utf-8"), "summary")
    assert line is not None, "README.md has lost the markers of its summary line"
    return benchmark.split_summary(line)[index] or ""


@pytest.fixture(scope="module")
def default_run():
    pytest.importorskip("bpe_openai", reason="the figures are counted with the exact tokenizer")
    return offline_run(timing=False)  # the default run; timings are never in the guide or the README


@pytest.mark.slow  # re-measures the benchmark: CI's slow part
def test_every_strategy_keeps_what_issue_20_asks_at_250_generated_turns(default_run):
    missed = [text for passed, text in benchmark.generated_targets(default_run) if not passed]
    assert not missed, "\n".join(missed)


@pytest.mark.slow  # re-measures the benchmark: CI's slow part
def test_the_guide_figures_are_those_of_a_fresh_default_run(default_run):
    diff = drift("lessons/README.md", "generated", benchmark.guide_blocks(default_run)["generated"])
    assert not diff, "lessons/README.md drifted; run: python lessons/15_benchmark.py --readme\n" + diff


@pytest.mark.slow  # re-measures the benchmark: CI's slow part
def test_the_readme_summary_is_that_of_a_fresh_default_run(default_run):
    diff = drift("README.md", "summary", benchmark.summary_parts(default_run)[0], summary_half(0))
    assert not diff, "README.md's summary line drifted; run: python lessons/15_benchmark.py --readme\n" + diff


@pytest.mark.slow  # re-measures the benchmark: CI's slow part
def test_the_recorded_figures_are_those_of_a_fresh_run():
    pytest.importorskip("bpe_openai", reason="the figures are counted with the exact tokenizer")
    files = [TRAJECTORIES / name for name in benchmark.RECORDED_FILES]
    if not all(path.exists() for path in files):
        pytest.skip(f"{TRAJECTORIES} is not here (it is shared data beside the checkout)")
    with pytest.MonkeyPatch.context() as patch:
        for name in MODEL_VARIABLES:
            patch.delenv(name, raising=False)
        recorded = benchmark.run_recorded(files)
    missed = [text for passed, text in benchmark.recorded_targets(recorded) if not passed]
    assert not missed, "the targets on the recorded runs:\n" + "\n".join(missed)
    how = "run: python lessons/15_benchmark.py --readme --trajectories ../shared/trajectories/*.jsonl\n"
    diff = drift("lessons/README.md", "recorded", benchmark.recorded_block(recorded))
    assert not diff, "lessons/README.md drifted; " + how + diff
    diff = drift("README.md", "summary", benchmark.summary_parts(recorded)[1], summary_half(1))
    assert not diff, "README.md's summary line drifted; " + how + diff


@pytest.mark.parametrize("arguments, said", [
    (["--turns", "5"], "argument --turns: 5 is out of range: from 10"),
    (["--window", "100"], "argument --window: 100 is out of range: from 8,000"),
    (["--cached-rate", "5"], "argument --cached-rate: 5 is out of range: from 0.0 to 1.0"),
    (["--limit", "-1"], "argument --limit: -1 is out of range: from 1"),
    (["--turns", "ten"], "argument --turns: 'ten' is not a int"),
    (["--trajectories", "missing.jsonl"], "--trajectories missing.jsonl: No such file or directory"),
    (["--trajectories", "bad.jsonl"], "--trajectories bad.jsonl: bad.jsonl:2: not valid JSON"),
])
def test_the_benchmark_lesson_refuses_an_input_it_cannot_use_in_one_line(tmp_path, arguments, said):
    """It ended in tracebacks on --turns 5, a missing file, a bad JSON line, and took --window
    100, --cached-rate 5, --limit -1."""
    (tmp_path / "bad.jsonl").write_text('{"messages": []}\nnot json\n', encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "lessons" / "15_benchmark.py"), *arguments], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=offline_env())
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and said in done.stderr, done.stderr


def test_a_recorded_run_whose_next_calls_name_nothing_seen_before_is_not_measured_not_a_traceback(tmp_path):
    run = [{"role": "user", "content": "hi"},
           {"role": "assistant", "content": "", "tool_calls": [
               {"id": "a", "type": "function", "function": {"name": "x", "arguments": '{"q": "NEW1"}'}}]},
           {"role": "tool", "tool_call_id": "a", "content": "ok"}]
    (tmp_path / "new.jsonl").write_text(json.dumps({"messages": run}) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "lessons" / "15_benchmark.py"), "--trajectories", "new.jsonl",
                           "--turns", "10", "--seeds", "0"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=offline_env())
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2_000:]
    assert "not measured (no next tool call used anything seen before)" in done.stdout
