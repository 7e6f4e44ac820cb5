"""What the summaries say is true ("Files changed" only from the paths of write and edit
calls), and one validator: a forced compaction always returns a valid list, orphans archived."""

from __future__ import annotations

import re

import compact
from conftest import call, sawtooth, compacting_policies
import pytest

NAMED = [f"src/module_{k}.py" for k in range(45)]  # what the report's text names
REPORT = "# Survey\n" + "\n".join(f"- {path}: 12 functions" for path in NAMED)


def surveyed() -> list[dict]:
    """A task that reads two files, writes a report naming 45 files, and edits one."""
    return [{"role": "system", "content": "s"}, {"role": "user", "content": "Survey the project; write REPORT.md."},
            {"role": "assistant", "content": None, "tool_calls": [call("c1", "read_file", path="Makefile")]},
            {"role": "tool", "tool_call_id": "c1", "content": "all:\n\tpython -m pytest"},
            {"role": "assistant", "content": None, "tool_calls": [call("c2", "read_file", path="src/app.py")]},
            {"role": "tool", "tool_call_id": "c2", "content": "def main(): pass"},
            {"role": "assistant", "content": None, "tool_calls": [call("c3", "write_file", path="REPORT.md",
                                                                        content=REPORT)]},
            {"role": "tool", "tool_call_id": "c3", "content": f"wrote {len(REPORT)} characters to REPORT.md"},
            {"role": "assistant", "content": None, "tool_calls": [call("c4", "edit_file", path="src/app.py",
                                                                        old="pass", new="return 0 # see src/other.py")]},
            {"role": "tool", "tool_call_id": "c4", "content": "edited src/app.py"},
            {"role": "assistant", "content": "Done."}]


SUMMARIZERS = {"extractive": compact.summarize_extractive,
               "eviction note": lambda m, focus=None: compact.content_text(compact.eviction_note(m))}


def test_the_sawtooth_and_the_ladder_summarize_the_same_middle_into_the_same_sections(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):  # no model: each strategy's own offline summary
        monkeypatch.delenv(name, raising=False)
    middle = [*surveyed()[1:], {"role": "user", "content": "Now run the tests. Never touch vendor/."},
              {"role": "assistant", "content": "I decided to run them because the edit is done.",
               "tool_calls": [call("c5", "bash", command="python -m pytest -q")]},
              {"role": "tool", "tool_call_id": "c5", "content": "FAILED tests/test_app.py::test_main - KeyError: 'x'"}]
    sawtooths = compact.SummaryGuard()(middle)
    ladders = compact.Compactor(context_window=8_000, reserved_output=1_000).guard(middle)
    assert list(compact.parse_summary(sawtooths)) == list(compact.parse_summary(ladders))
    assert sawtooths == ladders and "## Files changed\n- REPORT.md\n- src/app.py" in sawtooths
    assert "Survey the project" not in sawtooths  # the user's words are the state's, rendered below a summary


@pytest.mark.parametrize("summarize", SUMMARIZERS.values(), ids=SUMMARIZERS)
def test_files_changed_come_only_from_the_paths_of_write_and_edit_calls(summarize):
    sections = compact.parse_summary(summarize(surveyed()))
    assert sorted(sections["Files changed"]) == ["REPORT.md", "src/app.py"]
    listed = "\n".join(x for title, items in sections.items() if title.startswith("Files") for x in items)
    assert not any(path in listed for path in NAMED)  # named in the report's text, never touched


def test_the_files_a_call_touched_are_its_path_argument_a_makefile_too():
    assert compact.files_touched(surveyed()) == {"Makefile": False, "REPORT.md": True, "src/app.py": True}
    state = compact.CompactState()
    compact.note_files(state, surveyed())
    assert state.recent_files == ["Makefile", "REPORT.md", "src/app.py"]


ORPHANED = [{"role": "system", "content": "s"}, {"role": "user", "content": "Fix it."},
            {"role": "tool", "tool_call_id": "gone", "content": "an orphan result: its call left long ago"},
            {"role": "assistant", "content": "Looking."}, {"role": "user", "content": "Go on."}]


def forced(name: str, archive: compact.Archive):
    if name == "sawtooth":
        return lambda m: sawtooth(m, compact.summarize_extractive, force=True, archive=archive)
    build = (lambda n, **k: compact.Compactor(policy=n, **k))
    return lambda m: build(name, archive=archive, summarize=compact.summarize_extractive).compact(m, level=1)


@pytest.mark.parametrize("name", compacting_policies())
@pytest.mark.parametrize("messages", [ORPHANED, ORPHANED[:3]], ids=["with a middle", "nothing else"])
def test_a_forced_compaction_of_a_list_with_an_orphan_result_returns_a_valid_list(tmp_path, name, messages):
    archive = compact.Archive(tmp_path / "archive.jsonl")
    out = forced(name, archive)(messages)
    assert compact.find_problems(out) == []
    assert out[0] == messages[0]
    archived = [r["message"] for r in archive.records()]
    assert messages[2] in archived  # the orphan left the list: the archive holds it


def test_the_validator_returns_a_valid_list_itself():
    valid = ORPHANED[:2] + ORPHANED[3:]
    assert compact.repair(valid) is valid
    assert compact.repair(ORPHANED) == valid


# --- Speed, as ratios measured in one run (item 8) -------------------------------------------


def test_mask_secrets_is_linear_on_one_long_word():
    import benchmark
    assert benchmark.linear_ratios(20_000)["checks"]["mask_secrets"]["hex"] <= 10  # it was ~1,000× at this size


def test_a_messages_tokens_are_counted_once(monkeypatch):
    """The one token memo: a text is counted once (the counter is not run again for it), whatever
    message holds it; a new text is counted anew."""
    counted = []
    monkeypatch.setattr(compact, "_EXACT", [None])  # the heuristic counter, so its calls can be seen
    heuristic = compact.heuristic_tokens
    monkeypatch.setattr(compact, "heuristic_tokens", lambda text: counted.append(text) or heuristic(text))
    message = {"role": "assistant", "content": "reading it " + "x" * 300,
               "tool_calls": [call("c1", "read_file", path="a.py")]}
    first = compact.message_tokens(message)
    calls = len(counted)
    assert compact.message_tokens(message) == first and len(counted) == calls  # the second time: memoized
    assert compact.message_tokens(dict(message)) == first and len(counted) == calls  # another dict, the same texts
    changed = {**message, "content": "reading it again " + "y" * 300}  # new content is counted anew
    assert compact.message_tokens(changed) > first and len(counted) == calls + 1


def test_when_precise_results_alone_pass_the_window_no_step_runs():
    messages = surveyed()
    big = [{**m, "content": m["content"] * 2_000} if m.get("tool_call_id") == "c1" else m for m in messages]
    ladder = compact.Compactor(policy="layered", context_window=4_000, reserved_output=500, precise_tools=("read_file",))
    with pytest.raises(compact.ContextOverflowError, match=r"precise tools \(read_file\)"):
        ladder.compact(big)
    assert ladder.report == []  # failed before running every step on a history no step may shrink


def test_lesson_02_runs_the_agents_own_tutorial_entry_with_its_summarizer():
    """Item 6: the lesson calls tiny_agent.tutorial_compaction with its own summarizer, not a copy of it."""
    import ast
    from conftest import ROOT
    tree = ast.parse((ROOT / "lessons" / "02_sawtooth.py").read_text(encoding="utf-8"))
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "tutorial_compaction" in called and "compact_messages" not in called


# --- One guard for every strategy (items 2, 5) -----------------------------------------------


def long_task(n: int = 40) -> list[dict]:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Read every note."}]
    for k in range(n):
        messages += [{"role": "assistant", "content": None, "tool_calls": [call(f"c{k}", "read_file", path=f"n{k}.txt")]},
                     {"role": "tool", "tool_call_id": f"c{k}", "content": f"note {k}: " + "words " * 80}]
    return messages


@pytest.mark.parametrize("strategy", ["sawtooth", "layered"])
def test_every_strategy_waits_after_three_failures_in_a_row_and_counts_them(strategy, capsys):
    import tiny_agent
    calls = []

    def broken(messages, focus=None):
        calls.append(1)
        raise ConnectionError("the summary model is down")
    config = tiny_agent.load_config({}, strategy=strategy)
    made = tiny_agent.make_compaction(config, broken)
    for _ in range(6):  # six compactions, each forced
        out = made(long_task(), level=1)
        assert compact.find_problems(out) == [] and out is not None
    assert len(calls) == 3  # then the breaker waits, as the ladder always did
    assert made.state.failures == 3 and "ConnectionError" in made.state.last_error
    assert capsys.readouterr().err.count("[compact] the summarizer failed") == 3


# ---- one engine, its policies and presets as data (items 2, 3) -----------------------------


def test_every_strategy_runs_the_one_engine_whose_default_policy_is_the_sawtooth():
    import tiny_agent
    assert compact.Compactor().policy == "sawtooth" and compact.Compactor().layers[:2] == ("reasoning", "summary")
    assert tiny_agent.STRATEGIES == tuple(compact.POLICIES) and tiny_agent.STRATEGIES[:2] == ("none", "sawtooth")
    for name in tiny_agent.STRATEGIES:  # item 6: every strategy is the one engine with its policy
        made = tiny_agent.make_compaction(tiny_agent.load_config({}, strategy=name))
        assert type(made.compactor) is compact.Compactor and made.compactor.policy == name and made.name == name


def test_each_policy_and_preset_is_data_on_the_engines_fields_and_steps():
    fields = {f.name for f in __import__("dataclasses").fields(compact.Compactor) if f.init}
    for name, settings in compact.POLICIES.items():
        assert set(settings) <= fields, (name, set(settings) - fields)
        steps = [s if isinstance(s, str) else s[0] for s in settings["layers"] + settings.get("every_call", ())]
        assert set(steps) <= set(compact.STEPS), name
    engine = __import__("inspect").getsource(compact.Compactor)
    assert not re.search(r"(==|!=|\bin)\s*\(?\s*[\"'](" + "|".join(map(re.escape, compact.POLICIES)) + ")", engine)  # no
    # branch compares with a policy's name: what differs is in POLICIES


def test_the_default_sawtooth_keeps_the_recent_files_and_the_latest_request_as_the_ladder_does():
    messages = surveyed() + [{"role": "user", "content": "Now list what changed."}] + [
        m for k in range(5, 25) for m in (
            {"role": "assistant", "content": None, "tool_calls": [call(f"r{k}", "bash", command=f"ls dir{k}")]},
            {"role": "tool", "tool_call_id": f"r{k}", "content": f"file_{k}.txt"})]
    for policy in ("sawtooth", "layered"):
        out = compact.Compactor(policy=policy, summarize=compact.summarize_extractive).compact(messages, level=1)
        summary = compact.content_text(next(m for m in out if compact.is_summary(m)))
        assert "Recently used files (reopen them if you need their content): Makefile, REPORT.md, src/app.py" in summary
        assert {"role": "user", "content": "Now list what changed."} in out, policy  # verbatim, as a message
        assert compact.find_problems(out) == []


# --- compact_messages is the engine: from outside, under every strategy ------------------------

SPY = """import atexit, json, runpy, sys
root, report, sys.argv = sys.argv[1], sys.argv[2], sys.argv[3:]  # then tiny_agent.py's own command line
sys.path.insert(0, root)
import compact
real, calls, depth = compact.compact_messages, [], [0]
def spy(messages, *args, **kwargs):
    depth[0] += 1
    try:
        out = real(messages, *args, **kwargs)
    finally:
        depth[0] -= 1
    if depth[0] == 0:  # a call of the loop's, not the light tier's own inside one
        calls.append({"given": len(messages), "out": [[m["role"], str(m.get("content"))] for m in out]})
    return out
compact.compact_messages = spy  # before tiny_agent.py is imported
atexit.register(lambda: open(report, "w").write(json.dumps(calls)))
runpy.run_path(sys.argv[0], run_name="__main__")
"""
READS = 45  # requests the scripted server answers with a tool call before its answer


@pytest.mark.parametrize("strategy", compact.POLICIES)
def test_the_cli_compacts_only_through_calls_of_compact_messages_under_every_strategy(strategy, fake_openai, tmp_path):
    import json
    import subprocess
    import sys
    from conftest import ROOT, chat_response
    (tmp_path / "notes.txt").write_text("".join(f"line {n}: the cart total is off by {n} cents\n" for n in range(150)))
    def reply(body: dict) -> tuple[int, dict]:
        if "tools" not in body:  # the summary model, on the same server
            return 200, chat_response("## Progress\n- read notes.txt several times")
        n = sum("tools" in b for b in server.requests)
        return 200, chat_response("done" if n > READS else None,
                                  None if n > READS else [(f"c{n}", "read_file", {"path": "notes.txt"})])
    server = fake_openai(reply)
    env = {**__import__("os").environ, "CONTEXT_WINDOW": "16000", "PYTHONPATH": ""}
    report = tmp_path / "calls.json"
    done = subprocess.run([sys.executable, "-c", SPY, str(ROOT), str(report), str(ROOT / "tiny_agent.py"),
                           "--strategy", strategy, "--max-iterations", str(READS + 5), "Read notes.txt again and again."],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    calls, requests = json.loads(report.read_text()), [b for b in server.requests if "tools" in b]
    assert len(requests) == READS + 1 and len(calls) == len(requests), strategy  # one call before every request
    for body, made in zip(requests, calls):  # and the request is what it returned
        assert [m["role"] for m in body["messages"]] == [role for role, _ in made["out"]], strategy
    summaries = [b for b in requests if any(compact.SUMMARY_TAG in str(m.get("content")) for m in b["messages"])]
    made = {text for c in calls for role, text in c["out"] if compact.SUMMARY_TAG in text}
    if strategy != "none":
        assert summaries and "[compact]" in done.stdout, strategy  # the run compacted
    for body in summaries:  # every compaction the server sees is the output of one call
        assert {str(m["content"]) for m in body["messages"] if compact.SUMMARY_TAG in str(m.get("content"))} <= made


# --- The guard's promises, each its own test ---------------------------------------------------

MIDDLE = [{"role": "user", "content": "Fix the cart total."},
          {"role": "assistant", "content": None, "tool_calls": [call("c1", "read_file", path="src/cart.py")]},
          {"role": "tool", "tool_call_id": "c1", "content": "def total(items):\n    return sum(items) + 1"}]


def guarded(answer: str, max_tokens: int = 200) -> tuple[str, compact.SummaryGuard]:
    guard = compact.SummaryGuard(lambda messages, focus=None: answer, compact.summarize_extractive,
                                 max_tokens=max_tokens)
    return guard(MIDDLE), guard


def test_the_guard_keeps_a_summary_within_its_budget_and_refuses_one_ten_times_over_it():
    within = "## Progress\n- the cart total adds one too many: " + "src/cart.py " * 10
    kept, guard = guarded(within)
    assert within.strip() in kept and guard.state.failures == 0 and not guard.stood_in
    huge = "## Progress\n" + "- the cart total was read again\n" * 2_000
    assert compact.text_tokens(huge) >= 10 * 200
    text, guard = guarded(huge)
    assert "read again" not in text and guard.state.failures == 1 and "over its 200" in guard.state.last_error
    assert text == compact.summarize_extractive(MIDDLE)  # the offline summary stood in: no history lost


@pytest.mark.parametrize("answer", ["Sorry, I cannot summarize this conversation.", "sorry - the request failed"])
def test_the_guard_refuses_a_summary_that_opens_with_an_apology(answer):
    text, guard = guarded(answer)
    assert "orry" not in text and guard.state.failures == 1 and "error message" in guard.state.last_error
    engine = compact.Compactor(summarize=lambda messages, focus=None: answer)  # and so the engine's summary
    history = [{"role": "system", "content": "s"}, *[m for k in range(12) for m in (
        {"role": "assistant", "content": None, "tool_calls": [call(f"c{k}", "read_file", path=f"src/m{k}.py")]},
        {"role": "tool", "tool_call_id": f"c{k}", "content": f"def f{k}(): pass\n" * 60})], {"role": "user", "content": "Now."}]
    out = engine.compact(history, level=1)
    assert out is not history and not any("orry" in compact.content_text(m) for m in out)
    assert engine.state.failures == 1
