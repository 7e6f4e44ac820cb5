"""The one reader at the edge (tiny_agent.read_reply, and read_whole_reply for every shape a real server
sends): whatever a server sends with HTTP 200 becomes
a valid assistant message or one line naming what it sent, never a traceback and never a history
that breaks the next request. Shapes a real server sent on a bad day go through the real openai
client and HTTP (pytest-httpserver); Hypothesis feeds arbitrary JSON and reply shapes to the reader."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import compact
import tiny_agent
from conftest import chat_response

for _name, _examples in {"quick": 30, "thorough": 120}.items():  # the same profiles as test_properties.py
    settings.register_profile(_name, derandomize=True, database=None, deadline=None, max_examples=_examples,
                              phases=[Phase.explicit, Phase.generate], print_blob=False,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PROFILE = settings(settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick")))


def message(**fields) -> str:
    """A chat completion whose message is `fields`, as raw JSON text."""
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", **fields}}],
                       "usage": {"prompt_tokens": 12}})


def call(**fields) -> dict:
    return {"id": "c1", "type": "function", **fields}


DEEP = "[" * 100_000 + "]" * 100_000
BAD_DAY = {  # what a server sent -> a word the one line must hold
    "cut JSON": (message(content="hello")[:-7], "not a chat completion"),
    "function null": (message(tool_calls=[call(function=None)]), "not named functions"),
    "function name empty": (message(tool_calls=[call(function={"name": "", "arguments": "{}"})]), "not named functions"),
    "a choice without message": (json.dumps({"choices": [{"index": 0, "finish_reason": "stop"}]}),
                                 "not a chat completion"),
    "no choices": (json.dumps({"object": "chat.completion"}), "not a chat completion"),
    "tool_calls a number": (message(tool_calls=7), "not a list"),
    "arguments nested 100,000 deep": (message(tool_calls=[call(function={"name": "bash", "arguments": DEEP})]),
                                      "nested deeper"),
    "the reply nested 100,000 deep": (DEEP, "not a chat completion"),
    "HTML": ("<html><body>502 Bad Gateway</body></html>", "502 Bad Gateway"),
}


@pytest.mark.parametrize("sent, said", BAD_DAY.values(), ids=BAD_DAY.keys())
def test_a_reply_that_is_not_a_chat_completion_is_one_line_naming_what_was_sent(sent, said):
    with pytest.raises(tiny_agent.ServerReplyError) as raised:
        tiny_agent.read_whole_reply(sent)
    line = str(raised.value)
    assert said in line and "\n" not in line and len(line) < 300


GOOD_ENOUGH = {  # what a server sent -> the calls the agent keeps
    "tool_calls as an object": (message(tool_calls=call(function={"name": "bash", "arguments": '{"command": "ls"}'})),
                                [("c1", "bash", '{"command": "ls"}')]),
    "arguments as a JSON object": (message(tool_calls=[call(function={"name": "bash", "arguments": {"command": "ls"}})]),
                                   [("c1", "bash", '{"command": "ls"}')]),
    "arguments missing": (message(tool_calls=[call(function={"name": "bash"})]), [("c1", "bash", "{}")]),
}


@pytest.mark.parametrize("sent, calls", GOOD_ENOUGH.values(), ids=GOOD_ENOUGH.keys())
def test_a_reply_in_another_shape_becomes_calls_with_json_string_arguments(sent, calls):
    reply = tiny_agent.read_whole_reply(sent)
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in reply["tool_calls"]] == calls
    assert reply["usage"] == 12


def test_a_call_without_an_id_or_with_a_repeated_one_gets_a_local_id_never_null():
    reply = tiny_agent.read_whole_reply(message(content=None, tool_calls=[
        {"type": "function", "function": {"name": "bash", "arguments": "{}"}},
        call(function={"name": "bash", "arguments": "{}"}), call(function={"name": "bash", "arguments": "{}"})]))
    ids = [c["id"] for c in reply["tool_calls"]]
    assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == 3 and ids[1] == "c1"
    assert reply["content"] == ""


def test_content_parts_and_a_thinking_field_are_kept_as_text():
    reply = tiny_agent.read_whole_reply(json.dumps({"choices": [{"message": {
        "content": [{"type": "text", "text": "a"}, {"text": "b"}], "reasoning_content": "why", "refusal": None}}]}))
    assert reply == {"role": "assistant", "content": "ab", "reasoning_content": "why", "usage": None}


def test_a_call_without_an_id_through_http_is_answered_with_that_id_in_the_next_request(fake_openai, tmp_path):
    """The whole way: the openai client, the loop, the tool result, and the request after it."""
    no_id = chat_response(tool_calls=[("x", "bash", {"command": "echo hi"})])
    del no_id["choices"][0]["message"]["tool_calls"][0]["id"]
    replies = [no_id, chat_response("done")]
    server = fake_openai(lambda body: (200, replies.pop(0)))
    session = tiny_agent.new_session(tiny_agent.load_config())
    model = tiny_agent.openai_model(compact.make_client(), "m")  # Layer 1's reader makes the id up too
    assert tiny_agent.run(session, "go", model, tiny_agent.AgentWorkspace(tmp_path, sandbox=False), log=lambda _: None) == "done"
    sent = server.requests[1]["messages"]
    (asked,) = [c["id"] for m in sent for c in m.get("tool_calls") or []]
    assert asked and [m["tool_call_id"] for m in sent if m["role"] == "tool"] == [asked]


@pytest.mark.parametrize("sent", [BAD_DAY["cut JSON"][0], BAD_DAY["function null"][0]], ids=["cut JSON", "function null"])
def test_a_bad_reply_through_http_ends_the_turn_with_one_line_and_the_repl_goes_on(httpserver, monkeypatch, tmp_path,
                                                                                   capsys, sent):
    httpserver.expect_request("/v1/chat/completions").respond_with_data(sent, content_type="application/json")
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))
    config = tiny_agent.load_config()
    session = tiny_agent.new_session(config)
    lines = iter(["first question", "second question"])
    tiny_agent.repl(session, config, tiny_agent.server_model(config), tiny_agent.AgentWorkspace(tmp_path),
                    read=lambda prompt: next(lines, None))
    out = capsys.readouterr().out
    assert out.count("error: the server at") == 2 and "Traceback" not in out
    assert [m["role"] for m in session.messages] == ["system"]  # unanswered questions leave the history


# --- The property: any JSON, any reply shape -------------------------------------------------

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=20)
named = st.fixed_dictionaries(  # a function with a name, and arguments of any kind or none
    {"name": st.sampled_from(["bash", "read_file", ""]) | st.text(max_size=8)},
    optional={"arguments": json_values | json_values.map(json.dumps) | st.text(max_size=20) | st.just(DEEP)})
calls = st.fixed_dictionaries({"function": named | named | st.none() | json_values},
                              optional={"id": st.none() | st.sampled_from(["c1", "c2", ""]) | st.integers(),
                                        "type": json_values})
messages = st.fixed_dictionaries(
    {"tool_calls": st.lists(calls, min_size=1, max_size=3) | st.lists(calls, max_size=3) | calls | st.none() | json_values},
    optional={"content": st.none() | st.text() | json_values, "reasoning_content": json_values, "role": json_values})
damaged = st.fixed_dictionaries({}, optional={
    "choices": json_values | st.lists(st.fixed_dictionaries({}, optional={"message": messages | json_values}), max_size=2),
    "usage": json_values | st.fixed_dictionaries({"prompt_tokens": json_values})})
whole = st.fixed_dictionaries(  # a chat completion's skeleton, with anything in its message
    {"choices": st.lists(st.fixed_dictionaries({"message": messages}), min_size=1, max_size=2)},
    optional={"usage": st.fixed_dictionaries({"prompt_tokens": st.integers() | json_values})})
OUTCOMES: Counter = Counter()  # what the property met, checked by the test after it


@PROFILE
@example(reply={"choices": [{"message": {"tool_calls": [{"function": {"name": "bash", "arguments": DEEP}}]}}]},
         cut=None, as_text=True)
@example(reply={"choices": [{"message": {"tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": {"a": 1}}},
                                                        {"id": "c1", "function": {"name": "x"}}]}}]}, cut=None, as_text=False)
@example(reply={"choices": [{"message": {"tool_calls": [{"id": "c1", "function": {"name": "", "arguments": "{}"}}]}}]},
         cut=None, as_text=False)  # a call to no function: one line
@given(reply=whole | whole | damaged | json_values, cut=st.none() | st.none() | st.none() | st.integers(0, 400),
       as_text=st.booleans())
def test_no_reply_shape_gives_a_traceback_only_a_valid_message_or_one_line(reply, cut, as_text):
    """Both readers: Layer 1's (read_reply, which refuses what it does not read) and Layer 2's."""
    sent = json.dumps(reply)[:cut] if cut is not None else json.dumps(reply)
    try:
        got = (tiny_agent.read_whole_reply if as_text else tiny_agent.read_reply)(sent)
    except tiny_agent.ServerReplyError as error:
        assert "\n" not in str(error) and len(str(error)) < 300
        OUTCOMES["one line"] += 1
        return
    OUTCOMES["tool calls" if got.get("tool_calls") else "a message"] += 1
    assert got["role"] == "assistant" and isinstance(got["content"], str)
    assert got.get("usage") is None or type(got["usage"]) is int
    ids = [c["id"] for c in got.get("tool_calls", [])]
    assert all(isinstance(i, str) and i for i in ids) and (len(set(ids)) == len(ids) or not as_text)  # Layer 2 dedupes
    for c in got.get("tool_calls", []):
        assert isinstance(c["function"]["name"], str) and c["function"]["name"]  # a call names a function
        assert isinstance(c["function"]["arguments"], str)
        try:
            json.loads(c["function"]["arguments"])  # what run_tool does first: never a RecursionError
        except ValueError:
            pass
    compact.check_messages([got])
    tiny_agent.outgoing([{"role": "user", "content": "go"}, got])
    json.dumps(got)


def test_the_property_met_messages_tool_calls_and_one_line_errors():
    """A property that never met an outcome proves nothing. On another worker than the property (the
    suite runs on every core), this test runs the property itself first."""
    if not OUTCOMES:
        test_no_reply_shape_gives_a_traceback_only_a_valid_message_or_one_line()
    assert OUTCOMES["a message"] and OUTCOMES["tool calls"] and OUTCOMES["one line"], OUTCOMES
