"""Thinking models (DeepSeek, Qwen3, vLLM with a reasoning parser): the reasoning stays with its turn
while the server needs it, and is compacted away after.

The server here is a scripted OpenAI-compatible one on 127.0.0.1 that enforces DeepSeek's documented
rule: between two user messages, if the model made tool calls, every assistant message of that
stretch must come back with its `reasoning_content`, or the API answers HTTP 400."""

from __future__ import annotations

import json

import pytest
from werkzeug import Response

import compact
import tiny_agent
from compact import REASONING_FIELDS, drop_old_reasoning, message_tokens, transcript_lines

RULE = "The `reasoning_content` in the thinking mode must be passed back to the API."
THOUGHT = ("Let me think about which file to read next. The user asked for every note, so I keep a list of "
           "what I have read and what is left, and I check each answer against the room numbers. ") * 6


def broken_rule(messages: list[dict]) -> str | None:
    """DeepSeek's rule, as its API checks it: in every exchange (from a user message to the next)
    that made a tool call, each assistant message carries its reasoning. The reason for a 400, or None."""
    users = [i for i, m in enumerate(messages) if m["role"] == "user"] + [len(messages)]
    for start, end in zip(users, users[1:]):
        exchange = [(i, m) for i, m in enumerate(messages[start + 1:end], start + 1) if m["role"] == "assistant"]
        if any(m.get("tool_calls") for _, m in exchange):
            for i, m in exchange:
                if not compact.reasoning_text(m):
                    return f"Missing `reasoning_content` field in the assistant message at message index {i}. {RULE}"
    return None


@pytest.fixture
def thinking_server(httpserver, monkeypatch):
    """A thinking model that reads notes_1 … notes_10 one call at a time, then answers. It keeps
    every request body, and refuses any request that breaks the rule, as DeepSeek does."""
    requests, refused = [], []

    def handle(request):
        body = json.loads(request.data)
        requests.append(body)
        reason = broken_rule(body["messages"])
        if reason:
            refused.append(reason)
            return Response(json.dumps({"error": {"message": reason, "type": "invalid_request_error"}}), status=400,
                            content_type="application/json")
        step = sum(1 for r in requests if "tools" in r and not broken_rule(r["messages"]))
        message = {"role": "assistant", "content": "", "reasoning_content": f"Step {step}. {THOUGHT}"}
        if "tools" not in body:  # the summarizer's request: it thinks too, and answers in text
            message["content"] = "## Goal\n- Read notes_1.txt to notes_10.txt and tell the rooms."
        elif step <= 10:
            message["tool_calls"] = [{"id": f"call_{step}", "type": "function", "function": {
                "name": "read_file", "arguments": json.dumps({"path": f"notes_{step}.txt"})}}]
        else:
            message["content"] = "All ten notes are read: the meetings moved to rooms 101-110."
        usage = {"prompt_tokens": compact.estimate_tokens(body["messages"]), "completion_tokens": 9, "total_tokens": 0}
        return Response(json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "deepseek-chat",
                                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                    "usage": usage}), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handle)
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("MODEL", "deepseek-chat")
    return requests, refused


@pytest.mark.parametrize("strategy", ["sawtooth", "layered", "hybrid", "zones"])
def test_a_thinking_model_finishes_ten_tool_calls_through_compactions_without_a_400(
        thinking_server, tmp_path, monkeypatch, capsys, strategy):
    requests, refused = thinking_server
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the agent's records, outside the workspace
    for n in range(1, 11):
        (tmp_path / f"notes_{n}.txt").write_text(f"note {n}: the meeting moved to room {100 + n}.\n" * 40)
    monkeypatch.setenv("CONTEXT_WINDOW", "4000")
    code = tiny_agent.main(["--workspace", str(tmp_path), "--strategy", strategy, "--max-iterations", "20",
                            "Read notes_1.txt to notes_10.txt and tell me the rooms."])
    out = capsys.readouterr().out
    assert code == 0 and refused == []
    assert "rooms 101-110" in out  # the final answer came, after all ten calls
    assert out.count("[tool] read_file") == 10 and "[compact]" in out
    sent = [m for r in requests for m in r["messages"] if m["role"] == "assistant"]
    assert any(m.get("reasoning_content") for m in sent)  # reasoning did go back while it was needed


def test_the_rule_server_refuses_a_tool_turn_without_its_reasoning_even_after_a_later_question():
    """The fixture's rule itself: it must be able to fail."""
    turn = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                                                                  "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    later = [{"role": "assistant", "content": "done", "reasoning_content": "all done"},
             {"role": "user", "content": "next question"}]
    assert RULE in broken_rule(turn) and RULE in broken_rule(turn + later)
    assert broken_rule([*turn[:1], {**turn[1], "reasoning_content": "why"}, turn[2], *later]) is None


def test_replies_keep_their_reasoning_and_requests_send_it_back_unless_told_not_to():
    reply = {"role": "assistant", "content": None, "reasoning_content": "thinking..."}  # the server's extra field
    kept = tiny_agent.read_whole_reply(json.dumps({"choices": [{"message": reply}]}))
    assert kept == {"role": "assistant", "content": "", "reasoning_content": "thinking...", "usage": None}
    assert tiny_agent.outgoing([kept])[0]["reasoning_content"] == "thinking..."
    assert "reasoning_content" not in tiny_agent.outgoing([kept], send_reasoning=False)[0]
    assert tiny_agent.load_config({"SEND_REASONING": "0"}).send_reasoning is False


def history_with_reasoning() -> list[dict]:
    """A chat exchange that thought but called no tool, then an exchange with tool calls."""
    def turn(n, field="reasoning_content"):
        return [{"role": "assistant", "content": "", field: f"thought {n} " + THOUGHT,
                 "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": f"c{n}", "content": f"output {n}"}]
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "an answer, no tool", "reasoning": "thought 0 " + THOUGHT},
            {"role": "user", "content": "second"}, *turn(1), *turn(2),
            {"role": "assistant", "content": "done", "reasoning_content": "checked both outputs"},
            {"role": "user", "content": "third"}, *turn(3)]


def test_the_reasoning_rung_removes_only_reasoning_the_server_ignores():
    messages = history_with_reasoning()
    out = drop_old_reasoning(messages)
    assert not any(k in out[2] for k in REASONING_FIELDS) and out[2]["content"] == "an answer, no tool"
    assert out[3:] == messages[3:] and all(a is b for a, b in zip(out[3:], messages[3:]))  # tool exchanges keep it
    assert broken_rule(messages) is None and broken_rule(out) is None
    assert compact.estimate_tokens(out) < compact.estimate_tokens(messages)
    assert drop_old_reasoning(out) is out  # nothing left to remove: the same list


def test_the_budget_counts_reasoning_and_the_transcript_shows_only_a_marker():
    message = history_with_reasoning()[4]
    assert message_tokens(message) > message_tokens({**message, "reasoning_content": ""}) + 100
    lines = [line for line, _ in transcript_lines(history_with_reasoning())]
    assert "[assistant reasoning: 1,0" in "\n".join(lines) and THOUGHT not in "\n".join(lines)


def test_the_ladder_archives_the_reasoning_it_removes(tmp_path):
    archive = compact.Archive.in_folder(tmp_path)
    messages = history_with_reasoning()
    c = compact.Compactor(policy="layered", context_window=1_600, reserved_output=100, archive=archive,
                          summarize=compact.summarize_extractive)
    out = c.compact(messages, level=1)
    assert c.report[0][0] == "reasoning" and broken_rule(out) is None
    archived = [r["message"] for r in archive.records()]
    assert messages[2] in archived  # the original, reasoning and all
    assert all(compact.reasoning_text(m) for m in out if m.get("tool_calls"))  # tool turns kept theirs
