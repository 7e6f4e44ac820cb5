"""A tool is a function: the README's "Add a tool, remove one" block, run as a fork would run it, from
outside, against a scripted server. Its arguments arrive as the JSON types its schema declares, a
call whose types do not match gets one line back, and everything derived from the tools (the list
the model sees, the schemas' tokens in the budget, --help) is read when it is used."""

import json
import os
import re
import subprocess
import sys

import pytest

import compact
import tiny_agent
from conftest import ROOT, chat_response


def fork_file(tmp_path):
    """The README's block, written where a fork would keep it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(# my_agent\.py.*?)```", readme, re.S)
    assert block, "README: the Fork it block that adds a tool"
    path = tmp_path / "my_agent.py"
    path.write_text(block[1], encoding="utf-8")
    return path


def run_fork(path, *args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(path), *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)


def tools_sent(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def test_the_readmes_added_tool_runs_with_its_declared_types_and_the_removed_one_is_gone(fake_openai, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    calls = [("c1", "count_lines", {"path": "notes.txt", "at_least": 5}),
             ("c2", "count_lines", {"path": "notes.txt", "at_least": "5"}),
             ("c3", "recall", {"query": "notes"})]
    server = fake_openai(lambda body: (200, chat_response(tool_calls=calls) if len(server.requests) == 1
                                       else chat_response("notes.txt has 3 lines")))
    done = run_fork(fork_file(tmp_path), "--workspace", str(workspace), "how long is notes.txt?", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "notes.txt has 3 lines" in done.stdout
    first, second = server.requests
    assert "count_lines" in tools_sent(first) and "recall" not in tools_sent(first), tools_sent(first)
    results = {m["tool_call_id"]: m["content"] for m in second["messages"] if m["role"] == "tool"}
    assert results["c1"] == "3 lines, fewer than 5"  # the integer arrived as an int
    assert results["c2"].startswith("error: ") and "at_least must be integer, not string" in results["c2"]
    assert results["c3"].startswith("error: unknown tool 'recall'")


def test_help_and_precise_tools_know_the_tools_the_fork_has(tmp_path):
    fork = fork_file(tmp_path)
    shown = run_fork(fork, "--help", cwd=tmp_path)
    assert shown.returncode == 0 and "count_lines" in shown.stdout, shown.stdout
    assert "recall" not in " ".join(shown.stdout.split()).split("--precise-tools")[-1].split("whose")[0]
    refused = run_fork(fork, "--precise-tools", "recall", "--demo", cwd=tmp_path)
    assert refused.returncode == 1 and "no tool named 'recall'" in refused.stderr, refused.stderr


def test_a_tool_added_after_import_is_counted_in_the_budget_and_offered(monkeypatch):
    schema = {"type": "function", "function": {"name": "lookup", "description": "Look a word up in a long glossary.",
              "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}
    before = tiny_agent.make_compaction(tiny_agent.Config()).compactor.fixed_tokens
    monkeypatch.setitem(tiny_agent.TOOLS, "lookup", lambda ws, word: word)
    monkeypatch.setattr(tiny_agent, "TOOL_SCHEMAS", [*tiny_agent.TOOL_SCHEMAS, schema])
    after = tiny_agent.make_compaction(tiny_agent.Config()).compactor.fixed_tokens
    assert after == compact.estimate_tokens(json.dumps(tiny_agent.tools_offered())) > before
    assert tiny_agent.tools_offered()[-1] is schema


@pytest.mark.parametrize("declared, value, fits", [
    ("integer", 5, True), ("integer", True, False), ("integer", 5.5, False), ("number", 5, True),
    ("number", 5.5, True), ("boolean", True, True), ("boolean", 1, False), ("array", ["a"], True),
    ("object", {}, True), ("string", 5, False), (["string", "null"], None, True), ("null", 0, False),
])
def test_an_argument_fits_only_the_json_type_its_schema_declares(declared, value, fits):
    schema = {"type": "object", "properties": {"x": {"type": declared}}}
    assert (tiny_agent.wrong_types(schema, {"x": value}) == []) == fits


def test_the_items_of_an_array_and_the_fields_of_an_object_are_checked_too():
    schema = {"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}},
                                               "where": {"type": "object", "properties": {"line": {"type": "integer"}}}}}
    assert tiny_agent.wrong_types(schema, {"paths": ["a", 1], "where": {"line": "3"}}) == [
        "paths[1] must be string, not integer", "where.line must be integer, not string"]
    assert tiny_agent.wrong_types(schema, {"paths": ["a"], "where": {"line": 3, "other": None}}) == []


def test_a_tool_that_fails_or_returns_no_text_costs_the_turn_nothing(monkeypatch, tmp_path):
    """A fork's tool with a bug of its own: the model reads one line of error, and the loop goes on; a
    tool that returns a number or a list is sent as its JSON."""
    def divide(ws, n: int) -> str:
        return str(10 / (n - 1))
    schema = {"type": "function", "function": {"name": "divide", "description": "10 / (n - 1)",
              "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
    monkeypatch.setitem(tiny_agent.TOOLS, "divide", divide)
    monkeypatch.setattr(tiny_agent, "TOOL_SCHEMAS", [*tiny_agent.TOOL_SCHEMAS, schema])
    ws = tiny_agent.Workspace(tmp_path)
    assert tiny_agent.run_tool(ws, "divide", '{"n": 3}') == "5.0"
    assert tiny_agent.run_tool(ws, "divide", '{"n": 1}') == "error: divide failed: ZeroDivisionError: division by zero"
    monkeypatch.setitem(tiny_agent.TOOLS, "divide", lambda ws, n: [n, {"half": n / 2}])
    assert tiny_agent.run_tool(ws, "divide", '{"n": 3}') == '[3, {"half": 1.5}]'


def add_tool(monkeypatch, name, function, parameters=None):
    """A tool added as a fork adds one; `parameters` None: its schema leaves them out."""
    schema = {"type": "function", "function": {"name": name, "description": name,
                                               **({"parameters": parameters} if parameters is not None else {})}}
    monkeypatch.setitem(tiny_agent.TOOLS, name, function)
    monkeypatch.setattr(tiny_agent, "TOOL_SCHEMAS", [*tiny_agent.TOOL_SCHEMAS, schema])


def test_what_a_tools_failure_says_is_masked_like_its_output(monkeypatch, tmp_path):
    monkeypatch.setenv("MY_API_KEY", "sk-supersecret123")

    def fetch(ws, url: str) -> str:
        raise RuntimeError(f"401 for {url}?key=sk-supersecret123")
    add_tool(monkeypatch, "fetch", fetch, {"type": "object", "properties": {"url": {"type": "string"}}})
    said = tiny_agent.run_tool(tiny_agent.Workspace(tmp_path), "fetch", '{"url": "x"}')
    assert said == "error: fetch failed: RuntimeError: 401 for x?key=[MY_API_KEY masked]"


def test_odd_schemas_and_results_are_no_tools_failure(monkeypatch, tmp_path):
    ws = tiny_agent.Workspace(tmp_path)
    add_tool(monkeypatch, "now", lambda ws: {(1, 2): 3})  # no parameters: a tool of no arguments
    assert tiny_agent.run_tool(ws, "now", "{}") == "{(1, 2): 3}"  # not JSON: its str
    add_tool(monkeypatch, "odd", lambda ws, x, y: "ran", {"type": "object", "properties": {"x": True, "y": {
        "type": "array", "items": [{"type": "string"}]}}})
    assert tiny_agent.run_tool(ws, "odd", '{"x": 1, "y": [2]}') == "ran"  # what is no object says nothing
    add_tool(monkeypatch, "many", lambda ws, xs: "ran", {"type": "object", "properties": {
        "xs": {"type": "array", "items": {"type": "integer"}}}})
    said = tiny_agent.run_tool(ws, "many", json.dumps({"xs": ["a"] * 10_000}))
    assert said == ("error: the arguments of many: xs[0] must be integer, not string; xs[1] must be integer, not "
                    "string; xs[2] must be integer, not string; and 9997 more (its schema says so)")
    monkeypatch.setitem(tiny_agent.TOOLS, "unlisted", lambda ws: "x")  # in TOOLS, but no schema: not offered
    assert tiny_agent.run_tool(ws, "unlisted", "{}").startswith("error: unknown tool 'unlisted'; the tools are bash")
    assert "unlisted" not in tiny_agent.run_tool(ws, "unlisted", "{}").split("the tools are")[1]
