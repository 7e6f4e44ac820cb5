"""Every server family's "context too long" refusal is recognised, as the real `openai` client
raises it from the real HTTP status and body; other errors are not taken for one.

The bodies are those the servers send (llama-cpp-python's was captured from a live server here;
the others are quoted from the servers' sources and issue threads)."""

from __future__ import annotations

import json

import openai
import pytest
from werkzeug import Response

from compact import is_context_overflow


def error(message: str, kind: str = "invalid_request_error", code=None, **extra) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code, **extra}}


REFUSALS = {
    "llama-cpp-python (captured)": (400, error(
        "This model's maximum context length is 2048 tokens. However, you requested 5010 tokens (5010 in the "
        "messages, None in the completion). Please reduce the length of the messages or completion.",
        code="context_length_exceeded")),
    "llama.cpp llama-server": (400, error(
        "the request exceeds the available context size, try increasing it", "exceed_context_size_error",
        n_prompt_tokens=5010, n_ctx=4096)),
    "llama.cpp llama-server, older": (400, {"error": {"code": 400, "message": "input is too large to process. "
                                                      "increase the physical batch size", "type": "server_error"}}),
    "OpenAI": (400, error("This model's maximum context length is 128000 tokens. However, your messages resulted "
                          "in 130412 tokens. Please reduce the length of the messages.", code="context_length_exceeded")),
    "DeepSeek": (400, error("This model's maximum context length is 65536 tokens. However, you requested 70011 "
                            "tokens (70011 in the messages, 0 in the completion). Please reduce the length of the "
                            "messages or completion.", code="invalid_request_error")),
    "vLLM": (400, error("The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make "
                        "sure that `max_model_len` is no smaller than the number of text tokens.", "BadRequestError")),
    "vLLM, older": (400, error("This model's maximum context length is 4096 tokens. However, you requested 5000 "
                               "tokens in the messages, Please reduce the length of the messages.", "BadRequestError")),
    "DashScope (Qwen)": (400, error("Range of input length should be [1, 30720]", "invalid_request_error",
                                    code="invalid_parameter_error")),
    "Anthropic-compatible": (400, {"type": "error", "error": {"type": "invalid_request_error",
                                                              "message": "prompt is too long: 210345 tokens > 200000 maximum"}}),
    "LM Studio": (400, {"error": "Trying to keep the first 5012 tokens when context the overflows. However, the "
                                 "model is loaded with context length of only 4096 tokens, which is not enough. Try "
                                 "to load the model with a larger context length, or provide a shorter input"}),
}
NOT_REFUSALS = {
    "bad content": (400, error("Invalid type for 'messages[2].content': expected a string, but got null.")),
    "rate limit": (429, error("Rate limit reached for requests", "requests", code="rate_limit_exceeded")),
    "llama-cpp-python null content (captured)": (500, error(
        "1 validation error: {'type': 'string_type', 'loc': ('body', 'messages', 2, "
        "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}",
        "internal_server_error")),
    "reasoning missing (DeepSeek)": (400, error("The `reasoning_content` in the thinking mode must be passed back "
                                                "to the API.")),
}


def raised(httpserver, status: int, body: dict) -> Exception:
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_response(
        Response(json.dumps(body), status=status, content_type="application/json"))
    client = openai.OpenAI(base_url=httpserver.url_for("/v1"), api_key="sk-test", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return caught.value


@pytest.mark.parametrize("server", REFUSALS)
def test_a_context_refusal_is_recognised(httpserver, server):
    assert is_context_overflow(raised(httpserver, *REFUSALS[server]))


@pytest.mark.parametrize("server", NOT_REFUSALS)
def test_other_errors_are_not_taken_for_a_context_refusal(httpserver, server):
    assert not is_context_overflow(raised(httpserver, *NOT_REFUSALS[server]))


def test_a_server_whose_tokenizer_counts_far_more_is_met_by_cutting_and_nothing_is_lost(fake_openai, tmp_path):
    """Our estimate says the history fits; the server counts 1 token a character and refuses. The
    agent compacts harder at each refusal, never re-sends a refused request, and at the hardest
    level cuts the messages short, archiving them whole first."""
    import tiny_agent
    from conftest import chat_response
    garbage = "tcl.A2+LKV17YZT-NjI3RwBhGJg6UuPnkC_" * 100  # 3,400 chars a tokenizer may count one by one
    sent = []

    def reply(body):
        size = len(json.dumps(body["messages"]))
        sent.append(json.dumps(body["messages"], sort_keys=True))
        if size > 2_000:
            return 400, error(f"This model's maximum context length is 2000 tokens. However, you requested {size} "
                              f"tokens ({size} in the messages, None in the completion).", code="context_length_exceeded")
        if len(sent) == 1 or not any(m["role"] == "tool" for m in body["messages"]):
            return 200, chat_response(tool_calls=[("c1", "bash", {"command": garbage})])
        return 200, chat_response("done")
    fake_openai(reply)
    config = tiny_agent.load_config({"CONTEXT_WINDOW": "64000"})
    session = tiny_agent.new_session(config, archive_dir=tmp_path / "archive",
                                     summarize=lambda messages, focus=None: "## Task\n- go")
    ws = tiny_agent.AgentWorkspace(tmp_path, approve=lambda command: False, sandbox=False)
    model = tiny_agent.openai_model(tiny_agent.make_client(), "m")
    log = []
    assert tiny_agent.run_agent(session, "go", model, ws, log=log.append) == "done"
    assert len(sent) == len(set(sent))  # no refused request was sent twice
    assert any("cut to fit the window" in json.dumps(m) for m in session.messages)
    archived = [r["message"] for r in session.compaction.archive.records()]  # the archive is the compaction's
    assert any(garbage in json.dumps(m) for m in archived)  # the whole message, before it was cut


def test_assistant_text_goes_out_as_a_string_never_null_and_tools_with_tool_choice(fake_openai):
    """llama-cpp-python's server answers HTTP 500 to `"content": null`, and without tool_choice it
    leaves the tools out of the prompt: every request carries a string and "auto". Changed with the
    redesign: openai_model sends what `prepare` makes of the history; the agent's model for a real
    server (server_model) prepares it with outgoing()."""
    import tiny_agent
    from conftest import chat_response
    server = fake_openai(lambda body: (200, chat_response("ok")))
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "done"}]
    reply = tiny_agent.server_model(tiny_agent.load_config(), log=lambda line: None)(history, tiny_agent.TOOL_SCHEMAS)
    sent = server.requests[0]
    assert sent["messages"][2]["content"] == "" and sent["tool_choice"] == "auto" and sent["tools"]
    assert reply["content"] == "ok" and history[2]["content"] is None  # the history itself is untouched


# Four more wordings, each server's own text with its source.
FOUR_WORDINGS = {  # server -> (status, body, the size the refusal names)
    # google-gemini/gemini-cli #4118, #11507, #6678: Gemini's OpenAI-compatible endpoint
    "Gemini (OpenAI-compatible)": (400, [{"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                                   "The input token count (132478) exceeds the maximum number of tokens allowed "
                                   "(131072)."}}], 132478),
    # huggingface/text-generation-inference #628; huggingface/chat-ui #340
    "TGI, inputs + max_new_tokens": (422, {"error": "Input validation error: `inputs` tokens + `max_new_tokens` must "
                                           "be <= 2048. Given: 1244 `inputs` tokens and 1000 `max_new_tokens`",
                                           "error_type": "validation"}, 1244),
    # huggingface/text-generation-inference #695; h2oai/h2ogpt #373
    "TGI, inputs alone": (422, {"error": "Input validation error: `inputs` must have less than 1024 tokens. "
                                "Given: 1168", "error_type": "validation"}, 1168),
    # Groq's message as a proxy passes it on, without its code (letta-ai/letta #1963, OpenHands #1902)
    "Groq, the message without its body": (400, {"error": {"message": "Please reduce the length of the messages or "
                                                           "completion."}}, None),
}


@pytest.mark.parametrize("server", FOUR_WORDINGS)
def test_four_more_wordings_are_recognised_with_their_size(httpserver, server):
    import compact
    status, body, size = FOUR_WORDINGS[server]
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_response(
        Response(json.dumps(body), status=status, content_type="application/json"))
    client = openai.OpenAI(base_url=httpserver.url_for("/v1"), api_key="sk-test", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert is_context_overflow(caught.value) and compact.refused_size(caught.value) == size


# The window each refusal names (None: it names none), which then becomes the window compacted for.
WINDOWS = {"llama-cpp-python (captured)": 2048, "llama.cpp llama-server": 4096, "llama.cpp llama-server, older": None,
           "OpenAI": 128_000, "DeepSeek": 65536, "vLLM": 4096, "vLLM, older": 4096, "DashScope (Qwen)": 30720,
           "Anthropic-compatible": 200_000, "LM Studio": 4096, "Gemini (OpenAI-compatible)": 131072,
           "TGI, inputs + max_new_tokens": 2048, "TGI, inputs alone": 1024, "Groq, the message without its body": None}


@pytest.mark.parametrize("server", WINDOWS)
def test_the_window_a_refusal_names_is_read(httpserver, server):
    import compact
    status, body, *_ = REFUSALS.get(server) or FOUR_WORDINGS[server]
    assert compact.window_said(raised(httpserver, status, body)) == WINDOWS[server]
    assert set(WINDOWS) == set(REFUSALS) | set(FOUR_WORDINGS)


def test_a_server_with_a_smaller_window_than_configured_is_compacted_for_and_the_setting_suggested_once(
        fake_openai, tmp_path, capsys):
    """CONTEXT_WINDOW is the 128,000 default; the server holds 4,000 tokens and says so when it
    refuses. The first refusal makes 4,000 the window every compaction aims for, so the refusals
    stop, and one line says to set CONTEXT_WINDOW=4000."""
    import tiny_agent
    from conftest import chat_response
    refusals, requests = [], []
    (tmp_path / "notes.txt").write_text("a line of notes that the model reads again and again\n" * 40)

    def reply(body):
        requests.append(body)
        size = len(json.dumps(body["messages"])) // 3  # this server's count: a token every 3 characters
        if size > 4_000:
            refusals.append(len(requests))
            return 400, error(f"This model's maximum context length is 4000 tokens. However, you requested {size} "
                              f"tokens ({size} in the messages, None in the completion).", code="context_length_exceeded")
        if len(requests) > 40:
            return 200, chat_response("done")
        return 200, chat_response(tool_calls=[(f"c{len(requests)}", "read_file", {"path": "notes.txt"})])
    fake_openai(reply)
    config = tiny_agent.load_config({})
    assert config.context_window == 128_000
    log: list[str] = []
    session = tiny_agent.new_session(config, archive_dir=tmp_path / "archive",
                                     summarize=lambda messages, focus=None: "## Task\n- read the notes")
    ws = tiny_agent.AgentWorkspace(tmp_path, approve=lambda command: "n", sandbox=False)
    model = tiny_agent.openai_model(tiny_agent.make_client(), "m")
    assert tiny_agent.run_agent(session, "read the notes forty times", model, ws, log=log.append) == "done"
    told = [line for line in capsys.readouterr().out.splitlines() if "set CONTEXT_WINDOW in " in line and "to 4000 for the next run" in line]
    assert len(told) == 1 and "the server's window is 4,000 tokens" in told[0], log
    assert len(refusals) <= 2, refusals  # before: refused again every few requests
    assert session.compaction.state.window == 4000
