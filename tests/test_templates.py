"""What five real chat templates demand of a request (issue: "requests every chat template
accepts"), shown on plain OpenAI-format histories, and proof that the harness every scripted server
runs (conftest.chat_templates_accept_every_request) catches a request a template refuses."""

from __future__ import annotations

import json

import openai
import pytest
from werkzeug import Response

import chat_templates
import conftest
from chat_templates import NAMES, ChatTemplate, rejections, render, template
from conftest import chat_response

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def calls(*ids: str) -> dict:
    """An assistant message calling read_file once per id, with string content, as the agent sends it."""
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": f"{i}.txt"})}}
        for i in ids]}


def result(call_id: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": f"the text of {call_id}.txt"}


def refused(messages: list[dict], tools=None) -> dict[str, str]:
    """Template name -> the error it raises, for each template that refuses this history."""
    out = {}
    for name in NAMES:
        try:
            render(name, messages, tools)
        except Exception as error:
            out[name] = str(error)
    return out


# Ids are 9 characters, as a Mistral server mints them (its template refuses others: see below).
CASES = {
    "plain chat": ([SYSTEM, user("Hi"), assistant("Hello."), user("List the files.")], set()),
    "a tool loop": ([SYSTEM, user("Read a and b."), calls("call00001"), result("call00001"), calls("call00002"),
                     result("call00002"), assistant("a says A, b says B.")], set()),
    "a tool loop, waiting for the next step": ([SYSTEM, user("Read a."), calls("call00001"), result("call00001")], set()),
    "a summary, then the kept tail": ([SYSTEM, user("[summary] a was read"), calls("call00002"), result("call00002"),
                                       assistant("Done."), user("Now c.")], set()),
    "parallel calls, one after the other": ([SYSTEM, user("Read a and b."), calls("call00001"), result("call00001"),
                                             calls("call00002"), result("call00002"), assistant("Done.")], set()),
    # Llama 3.2 shows one call a message; Gemma 3 gets each result as a user message (llama.cpp's
    # polyfill), so two results are two users in a row.
    "parallel calls, two results in a row": ([SYSTEM, user("Read a and b."), calls("call00001", "call00002"),
                                              result("call00001"), result("call00002"), assistant("Done.")],
                                             {"gemma-3", "llama-3.2"}),
    "a summary user message, then a user message": ([SYSTEM, user("[summary] a was read"), user("Now c.")],
                                                    {"gemma-3", "mistral-nemo"}),
    "a user message retried after an error": ([SYSTEM, user("Read a."), user("Read a.")], {"gemma-3", "mistral-nemo"}),
    "two assistant messages in a row": ([SYSTEM, user("Hi"), assistant("Hello."), assistant("Anything else?"),
                                         user("No.")], {"gemma-3", "mistral-nemo"}),
    "a system message after the first": ([SYSTEM, user("Hi"), assistant("Hello."), {"role": "system", "content": "Note."},
                                          user("Go on.")], {"gemma-3", "mistral-nemo"}),
    "an assistant message first": ([SYSTEM, assistant("Hello."), user("Hi")], {"gemma-3", "mistral-nemo"}),
}


@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no tools", "tools"])
@pytest.mark.parametrize("case", CASES)
def test_what_each_template_refuses(case, tools):
    messages, refusing = CASES[case]
    errors = refused(messages, tools)
    assert set(errors) == refusing, errors
    for name in {"gemma-3", "mistral-nemo"} & refusing:
        assert "roles must alternate" in errors[name].lower(), errors[name]


def test_llama_refuses_parallel_calls_by_saying_so():
    [error] = [e for name, e in refused(CASES["parallel calls, two results in a row"][0]).items() if name == "llama-3.2"]
    assert error == "This model only supports single tool-calls at once!"


def test_mistral_refuses_tool_call_ids_that_are_not_9_characters_and_the_harness_maps_them():
    messages = [SYSTEM, user("Read a."), calls("call_1"), result("call_1"), assistant("Done.")]
    assert refused(messages) == {"mistral-nemo": "Tool call IDs should be alphanumeric strings with length 9!"}
    assert rejections({"messages": messages, "tools": TOOLS}) == []  # ids are the server's: served_ids maps them
    mapped = chat_templates.served_ids(messages)
    assert mapped[2]["tool_calls"][0]["id"] == mapped[3]["tool_call_id"] and len(mapped[3]["tool_call_id"]) == 9
    assert messages[3]["tool_call_id"] == "call_1"  # the history itself is untouched


def test_a_rejection_names_the_template_the_error_and_the_roles():
    body = {"messages": [SYSTEM, user("Read a and b."), calls("c1", "c2"), result("c1"), result("c2")], "tools": TOOLS}
    found = {e["template"]: e for e in rejections(body)}
    assert set(found) == {"gemma-3", "llama-3.2"}
    assert found["gemma-3"]["roles"] == "system user assistant(2 calls) tool tool"
    assert found["gemma-3"]["error"].startswith("TemplateError: Conversation roles must alternate")


# ---- the polyfills are llama.cpp's (minja's own tests) ---------------------------------------------

# google/minja tests/test-capabilities.cpp: what minja finds in these two templates
MINJA_CAPS = {
    "llama-3.2": dict(supports_system_role=True, supports_tools=True, supports_tool_calls=True,
                      supports_tool_responses=True, supports_parallel_tool_calls=False,
                      requires_object_arguments=True, requires_typed_content=False),
    "mistral-nemo": dict(supports_system_role=True, supports_tools=True, supports_tool_calls=True,
                         supports_tool_responses=True, supports_parallel_tool_calls=True,
                         requires_object_arguments=True, requires_typed_content=False),
}


@pytest.mark.parametrize("name", MINJA_CAPS)
def test_the_probes_find_what_minja_finds(name):
    caps = template(name).caps
    assert {k: getattr(caps, k) for k in MINJA_CAPS[name]} == MINJA_CAPS[name]


def test_gemma_3_and_smollm2_show_no_tools_so_they_are_polyfilled():
    for name in ("gemma-3", "smollm2"):
        caps = template(name).caps
        assert caps.supports_system_role and not (caps.supports_tools or caps.supports_tool_calls
                                                  or caps.supports_tool_responses), (name, caps)


# google/minja tests/test-polyfills.cpp: TEMPLATE_CHATML, TEMPLATE_CHATML_NO_SYSTEM and three goldens
CHATML = ("{%- for message in messages -%}\n"
          "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
          "{%- endfor -%}\n"
          "{%- if add_generation_prompt -%}\n"
          "  {{- '<|im_start|>assistant\n' -}}\n"
          "{%- endif -%}")
CHATML_NO_SYSTEM = ("{%- for message in messages -%}\n"
                    "  {%- if message.role == 'system' -%}\n"
                    "    {{- raise_exception('System role not supported') -}}\n"
                    "  {%- endif -%}\n"
                    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
                    "{%- endfor -%}\n"
                    "{%- if add_generation_prompt -%}\n"
                    "  {{- '<|im_start|>assistant\n' -}}\n"
                    "{%- endif -%}")
NEED_HELP = {"role": "user", "content": "I need help"}


def test_minja_golden_a_tool_call_becomes_json_content():
    call = {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
        "name": "special_function", "arguments": "{\"arg1\": 1}"}, "id": "123456789"}]}
    assert ChatTemplate(CHATML).apply([NEED_HELP, call]) == (
        "<|im_start|>user\nI need help<|im_end|>\n<|im_start|>assistant\n{\n  \"tool_calls\": [\n    {\n"
        "      \"name\": \"special_function\",\n      \"arguments\": {\n        \"arg1\": 1\n      },\n"
        "      \"id\": \"123456789\"\n    }\n  ]\n}<|im_end|>\n<|im_start|>assistant\n")


def test_minja_golden_a_tool_result_becomes_a_user_message():
    tool = {"role": "tool", "content": {"result": 123}, "tool_call_id": "123456789"}
    assert ChatTemplate(CHATML_NO_SYSTEM).apply([tool]) == (
        "<|im_start|>user\n{\n  \"tool_response\": {\n    \"content\": {\n      \"result\": 123\n    },\n"
        "    \"tool_call_id\": \"123456789\"\n  }\n}<|im_end|>\n<|im_start|>assistant\n")


def test_minja_golden_a_system_message_is_merged_into_the_user_message():
    chat = ChatTemplate(CHATML_NO_SYSTEM)
    messages = [{"role": "system", "content": "I am The System!"}, NEED_HELP]
    with pytest.raises(Exception, match="System role not supported"):
        chat.raw(messages)
    assert chat.apply(messages) == "<|im_start|>user\nI am The System!\nI need help<|im_end|>\n<|im_start|>assistant\n"


def test_gemma_3_renders_a_chat_in_its_published_format():
    assert render("gemma-3", [{"role": "system", "content": "You are a concise assistant."},
                              user("Answer with OK.")]) == (
        "<bos><start_of_turn>user\nYou are a concise assistant.\n\nAnswer with OK.<end_of_turn>\n"
        "<start_of_turn>model\n")


# ---- the harness catches what a template refuses -----------------------------------------------------

RETRIED = [SYSTEM, user("Read a."), user("Read a.")]


def test_fake_openai_records_a_refused_request_and_still_answers(fake_openai):
    server = fake_openai(lambda body: (200, chat_response("ok")))
    client = openai.OpenAI(max_retries=0)
    assert client.chat.completions.create(model="m", messages=RETRIED).choices[0].message.content == "ok"
    errors = list(server.template_errors)
    server.template_errors.clear()  # taken here, so this test's own teardown check passes
    assert {e["template"] for e in errors} == {"gemma-3", "mistral-nemo"}
    assert {e["roles"] for e in errors} == {"system user user"}
    report = conftest.refusal_report(errors)
    assert "gemma-3: TemplateError: Conversation roles must alternate" in report and "roles: system user user" in report


def test_a_tests_own_handler_is_checked_too(httpserver):
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(
        lambda request: Response(json.dumps(chat_response("ok")), content_type="application/json"))
    client = openai.OpenAI(base_url=httpserver.url_for("/v1"), api_key="sk-test", max_retries=0)
    client.chat.completions.create(model="m", messages=RETRIED)
    errors = list(conftest.STRAY)
    conftest.STRAY.clear()  # taken here, so this test's own teardown check passes
    assert {e["template"] for e in errors} == {"gemma-3", "mistral-nemo"}
