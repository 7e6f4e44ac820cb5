"""Design-document rules, each as its document says, in the preset that document
names, and in every strategy when the rule is about every compaction. Each test names its passage."""

from __future__ import annotations

import copy

import pytest

from test_layers import assistant, system, tool_turn, user

import compact
from compact import Compactor, content_text, is_summary
from conftest import sawtooth

RULE = "Do not modify the deploy script, look at the possible causes first."
DRIFTED = "- The user asked to modify the deploy script."


def drifting(messages, focus=None):
    """A summary model that reverses the user's rule (echo-agent's own example of drift)."""
    return "## Progress\n" + DRIFTED + "\n- Read the logs."


def history(n: int = 12) -> list[dict]:
    out = [system(), user("Find out why the deploy fails.")]
    for i in range(n):
        out += tool_turn(f"c{i}", "bash", f"log line {i} " * 60, command=f"tail -n 60 log{i}.txt")
        out += [user(RULE)] if i == 1 else []
    return out + [user("What did you find?")]


def summary_text(out: list[dict]) -> str:
    return content_text(next(m for m in out if is_summary(m)))


def test_drift_check_flags_a_summary_that_reverses_the_users_rule():
    """003 echo-agent, 语义漂移: the user said "do not modify the deploy script", a summary that says the
    user asked to modify it is drift. The check is every compaction's: the guard, the sawtooth, every ladder."""
    flagged = compact.flag_unverified(DRIFTED, RULE)
    assert flagged.endswith(compact.UNVERIFIED) and "Do not modify the deploy script" in flagged
    assert compact.flag_unverified("- 用户要求修改部署脚本", "暂时不要修改部署脚本，先看看可能原因").endswith(compact.UNVERIFIED)
    kept = "- The user said not to modify the deploy script.\n- Do not modify the deploy script."
    assert compact.flag_unverified(kept, RULE) == kept  # the rule stated with its negation is no drift
    messages = history()
    frozen = copy.deepcopy(messages)
    outs = [sawtooth(messages, drifting, threshold=10)]
    outs += [Compactor(policy=name, context_window=4_000, reserved_output=500, summarize=drifting).compact(
        messages, level=1) for name in ("echo-agent", "five-layer")]
    outs.append(Compactor(policy="layered", context_window=4_000, reserved_output=500, summarize=drifting).compact(messages, level=1))
    for out in outs:
        line = next(x for x in summary_text(out).split("\n") if x.startswith(DRIFTED))
        assert line.endswith(compact.UNVERIFIED), line
    assert messages == frozen
    assert summary_text(sawtooth(messages, drifting, threshold=10)) == summary_text(outs[0])  # deterministic


def broken(messages, focus=None):
    raise RuntimeError("upstream 503: secret-body-text")


def test_a_summarizer_failure_is_said_in_the_summary_never_passed_off_as_a_summary():
    """003 echo-agent, 摘要与归档: when the summary model fails the compaction still happens (was_compressed
    with summary_text None); the summary that stands in says the model failed, in every strategy."""
    messages = history()
    frozen = copy.deepcopy(messages)
    guard = compact.SummaryGuard(broken, max_failures=1, cooldown=2)
    made = {"sawtooth": sawtooth(messages, guard, threshold=10),
            "sawtooth, breaker open": sawtooth(messages, guard, threshold=10)}
    made["layered"] = Compactor(policy="layered", context_window=4_000, reserved_output=500, summarize=broken).compact(messages, level=1)
    for name in ("echo-agent", "evo-agent"):  # five-layer's light tier calls no model: nothing can fail
        made[name] = Compactor(policy=name, context_window=4_000, reserved_output=500, summarize=broken).compact(
            messages, level=1)
    made["last resort"] = Compactor(policy="layered", context_window=4_000, reserved_output=500, summarize=broken).compact(
        messages, level=2)  # as far as it goes: the last resort too
    for name, out in made.items():
        text = summary_text(out)
        assert "summary model failed" in text or "summary model is paused" in text, (name, text[:300])
        assert "secret-body-text" not in text, name  # the error itself stays out of the context
    assert "summary model is paused" in summary_text(made["sawtooth, breaker open"])
    fine = summary_text(sawtooth(messages, lambda m, f=None: "## Progress\n- Read the logs.", threshold=10))
    assert "summary model" not in fine  # a summary the model wrote says nothing of the kind
    assert messages == frozen


def test_a_masked_file_read_says_its_size_in_chars_and_lines():
    """003 echo-agent, 工具剪枝: "[pruned] read_file: read file (12345 chars, 300 lines)"."""
    text = "\n".join(f"line {i}: " + "x" * 30 for i in range(300))
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'}}
    note = compact.placeholder(call, text)
    assert note.startswith(f"{compact.PRUNED} read_file(src/app.py): {len(text):,} chars, 300 lines of the file")


def test_one_old_output_too_large_is_cut_below_the_trigger_in_every_strategy(tmp_path):
    """001 five-layer, 五层对比: Snip Compact's trigger is 单条消息过大, one message too large, whatever the
    history weighs. A 30,000-token output the model has read is cut; the archive holds it whole."""
    import tiny_agent
    huge = "\n".join(f"row {i}: " + "value " * 12 for i in range(1_700))
    assert 28_000 < compact.text_tokens(huge) < 34_000
    messages = [system(), user("Find the slow query."), *tool_turn("c1", "read_file", huge, path="dump.sql"),
                assistant("The dump is large; next I check the index."), user("Go on.")]
    unseen = [system(), user("Find the slow query."), *tool_turn("c1", "read_file", huge, path="dump.sql")]
    frozen = copy.deepcopy(messages)
    for strategy in ("sawtooth", "layered", "hybrid", "zones", *compact.PRESETS):
        archive = compact.Archive(tmp_path / f"{strategy}.jsonl")
        made = tiny_agent.make_compaction(tiny_agent.Config(strategy=strategy), compact.summarize_extractive, archive)
        out = made.compactor.compact(messages)
        text = content_text(out[3])
        assert "this output alone was ~" in text and compact.text_tokens(text) < 8_000, strategy
        assert len(out) == len(messages) and out[4] is messages[4]  # nothing else changed
        assert any(r["message"]["content"] == huge for r in archive.records()), strategy
        if "admit" in compact.step_names(made.compactor.layers):  # zones admit a new output over 2,000 tokens
            admitted = content_text(made.compactor.compact(unseen)[3])
            assert compact.text_tokens(admitted) <= 2_000 and admitted.startswith("row 0: "), strategy
        else:
            assert made.compactor.compact(unseen) is unseen  # the model has not read it yet: it stays whole
        assert made.compactor.compact(out) is out  # once cut, never cut again
    assert messages == frozen


def test_a_history_over_the_trigger_only_by_one_old_output_is_cut_and_nothing_more():
    """The cut comes first and the trigger is judged on what it left: no mask nor summary runs that
    the cut alone made unneeded, and the cut alone counts as a compaction."""
    huge = "\n".join(f"row {i}: " + "value " * 12 for i in range(650))
    messages = [system(), user("Find the slow query."), *tool_turn("c1", "read_file", huge, path="dump.sql"),
                assistant("Read it."), *[m for k in range(32) for m in tool_turn(f"r{k}", "bash", "ok " * 300,
                                                                                   command=f"ls {k}")], user("Go on.")]
    c = Compactor(policy="layered", context_window=20_000, reserved_output=0, summarize=compact.summarize_extractive)
    assert c.budget.over(messages, c.trigger) and c.budget.over(c.compact(messages), c.target)  # the cut alone
    c = Compactor(policy="layered", context_window=20_000, reserved_output=0, summarize=compact.summarize_extractive)
    out = c.compact(messages)  # leaves it between the target and the trigger
    assert [name for name, *_ in c.report] == ["too large"] and len(out) == len(messages)
    assert not c.budget.over(out, c.trigger) and c.state.compactions == 1


def test_clearing_an_intermediate_tool_clears_its_whole_record():
    """001 five-layer, 第三层 Micro Compact: [tool_use: cache_write, params: {...}, result: "ok"] becomes
    [tool cleared]: the call's parameters go with its result; its id and name keep the pair valid."""
    messages = [user("Warm the cache."), *tool_turn("k1", "cache_write", "ok", key="users", value="x" * 400),
                *tool_turn("k2", "cache_read", "value-123 " * 30, key="users"),
                *tool_turn("k3", "read_file", "print('hi')", path="app.py"), assistant("Cached and read.")]
    frozen = copy.deepcopy(messages)
    out = compact.clear_tool_results(messages)
    for i in (1, 3):
        call = out[i]["tool_calls"][0]
        assert call["function"]["arguments"] == "{}" and call["id"] == messages[i]["tool_calls"][0]["id"]
    assert content_text(out[4]) == compact.CLEARED and out[2]["content"] == "ok"  # "ok" is shorter than the tag
    assert out[5] is messages[5] and out[6] is messages[6]  # read_file is not intermediate
    assert compact.find_problems(out) == [] and messages == frozen
    assert compact.clear_tool_results(out) == out  # cleared once
    five = Compactor(policy="five-layer")
    engine = Compactor(policy="layered", layers=("clear",))
    cleared = {step.name: step.run for step in engine.steps(engine.layers)}["clear"](messages, compact.Pass())
    assert cleared == out and "clear" in compact.step_names(five.layers)


def test_echo_agents_pruner_shortens_long_call_arguments():
    """003 echo-agent, 工具剪枝: 剪枝器还会截断过长的 tool call arguments: the pruner cuts long arguments too,
    before any summary."""
    body = "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(400))
    messages = [system(), user("Write the helpers, then test them.")]
    for i in range(8):
        messages += tool_turn(f"w{i}", "write_file", f"wrote {len(body):,} chars", path=f"src/h{i}.py", content=body)
    messages += [assistant("All written."), user("Now run the tests.")]
    frozen = copy.deepcopy(messages)
    echo = Compactor(policy="echo-agent", context_window=46_000, reserved_output=1_000, summarize=drifting)
    assert "shorten" in [step.name for step in echo.steps(echo.layers)]
    out = echo.compact(messages)
    assert not any(is_summary(m) for m in out)  # the pruner alone was enough: no summary
    written = [c for m in out for c in m.get("tool_calls") or []]
    assert len(written) == 8 and sum(len(c["function"]["arguments"]) < len(body) // 4 for c in written) >= 5
    assert compact.find_problems(out) == [] and messages == frozen


def test_echo_agent_always_follows_its_summary_with_an_acknowledgement():
    """003 echo-agent, 消息重组: the summary goes in as a user message, then 系统再插入一条 assistant 确认, always.
    Its tail starts at a user message, so the pair never breaks the turns' alternation."""
    import chat_templates
    messages = [system(), user("Find out why the deploy fails.")]
    for i in range(14):
        messages += tool_turn(f"c{i}", "bash", f"log line {i} " * 60, command=f"tail log{i}.txt")
        messages += [user("Now check the staging config too.")] if i == 9 else []
    frozen = copy.deepcopy(messages)
    small = dict(context_window=6_000, reserved_output=500)
    default = Compactor(policy="layered", **small).compact(messages, level=1)
    at = next(i for i, m in enumerate(default) if is_summary(m))
    assert default[at + 1]["role"] == "assistant" and default[at + 1] is not compact.ACK  # the case the rule is about
    for out in (Compactor(policy="echo-agent", **small).compact(messages, level=1),
                Compactor(policy="echo-agent", **small).compact(messages, level=2)):
        at = next(i for i, m in enumerate(out) if is_summary(m))
        assert out[at + 1] == compact.ACK and out[at + 2]["role"] == "user", [m["role"] for m in out]
        assert content_text(out[at + 2]) == "Now check the staging config too."  # the latest request, verbatim
        assert compact.find_problems(out) == []
        refused = {r["template"] for r in chat_templates.rejections({"messages": out})}
        assert refused <= {r["template"] for r in chat_templates.rejections({"messages": default})}  # none new
    assert messages == frozen


@pytest.mark.parametrize("rule, summary", [
    ("Do not modify deploy.sh yet.", "- Modify deploy.sh to fix the 502"),  # the case: "yet" is filler
    ("Please don't modify deploy.sh.", "- Modified deploy.sh and restarted the service"),  # another form of the verb
    ("You must not change the public API.", "- Changed the public API as planned"),
    ("不要修改部署脚本，先看日志。", "- 修改部署脚本以修复 502"),
])
def test_drift_is_caught_when_the_summary_states_the_forbidden_action_in_other_words(rule, summary):
    """003 echo-agent, 语义漂移: "暂时不要修改部署脚本" summarized as "用户要求修改部署脚本" reverses the rule."""
    flagged = compact.flag_unverified(summary, rule)
    assert flagged.endswith(compact.UNVERIFIED) and "the turns say" in flagged
    assert "the turns say" not in compact.flag_unverified("- Do not " + summary[2:].lower(), rule)  # kept as said
