"""The agent's side: tools confined to a workspace, every failure turned into a result the model
can read, the offline demo, the demo model, the REPL and the sawtooth chart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import compact
import tiny_agent
from conftest import chat_response
from compact import is_context_overflow
from tiny_agent import (OUTPUT_CAP, TOOL_SCHEMAS, Config, ContextLengthExceeded, DemoModel, AgentWorkspace,
                        new_session, openai_model, repl, run_tool, sawtooth_chart)


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    """The agent's records (records_folder) go under this test's own XDG_STATE_HOME."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def ws(tmp_path) -> AgentWorkspace:
    """A workspace with two files, that fails the test if it is asked to approve anything."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("alpha beta\n")
    (root / "twice.txt").write_text("x = 1\nx = 1\n")

    def approve(command):
        raise AssertionError(f"asked to approve {command!r}")
    return AgentWorkspace(root, approve=approve)


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def tool(ws: AgentWorkspace, name: str, **args) -> str:
    return run_tool(ws, name, json.dumps(args))


def test_file_tools_write_read_and_edit_inside_the_workspace(ws):
    assert tool(ws, "write_file", path="src/new.py", content="VALUE = 1\n") == "wrote 10 chars to src/new.py"
    assert tool(ws, "edit_file", path="src/new.py", old="VALUE = 1", new="VALUE = 2") == "edited src/new.py"
    assert tool(ws, "read_file", path="src/new.py") == "VALUE = 2\n"
    assert tool(ws, "bash", command="cat notes.txt") == "exit code 0\nalpha beta\n"
    assert tool(ws, "bash", command="grep -c gamma notes.txt") == "exit code 1\n0\n"


@pytest.mark.parametrize("name, arguments, expected", [
    ("read_file", '{"path": "missing.txt"}', "no file at missing.txt"),
    ("edit_file", '{"path": "twice.txt", "old": "x = 1", "new": "x = 2"}', "occurs 2 times"),
    ("edit_file", '{"path": "twice.txt", "old": "y = 1", "new": "x = 2"}', "occurs 0 times"),
    ("read_file", '{"file": "notes.txt"}', "wrong arguments for read_file"),
    ("write_file", '{"path": "notes.txt"}', "wrong arguments for write_file"),
    ("write_file", '{"path": "notes.txt", "content": ["a", "b"]}', "the arguments of write_file: content must be string, not array"),
    ("read_file", '{"path": 5}', "path must be string, not integer"),
    ("bash", '{"command": ["rm", "notes.txt"]}', "command must be string, not array"),
    ("read_file", '{"path": "notes.txt"', "not valid JSON"),
    ("read_file", '["notes.txt"]', "must be a JSON object"),
    ("deploy", '{"target": "prod"}', "unknown tool 'deploy'"),
    ("recall", '{"query": "notes"}', "nothing is archived"),
    ("read_file", '{"path": "notes\\u0000.txt"}', "null byte"),
    ("write_file", '{"path": "notes.txt", "content": "\\ud800"}', "surrogates not allowed"),
    ("edit_file", '{"path": "notes.txt", "old": "alpha", "new": "\\ud800"}', "surrogates not allowed"),
])
def test_a_failing_call_becomes_an_error_result_and_changes_nothing(ws, name, arguments, expected):
    before = files(ws.root)
    result = run_tool(ws, name, arguments)
    assert result.startswith("error: ") and expected in result
    assert files(ws.root) == before


def test_edit_file_changes_only_the_old_text_even_in_a_file_longer_than_the_output_cap(ws):
    text = "MARKER = 1\n" + "".join(f"line {i}\n" for i in range(3_000)) + "END\n"
    (ws.root / "long.py").write_text(text)
    assert tool(ws, "edit_file", path="long.py", old="MARKER = 1", new="MARKER = 2") == "edited long.py"
    assert (ws.root / "long.py").read_text() == text.replace("MARKER = 1", "MARKER = 2")


def test_edit_file_never_rewrites_bytes_it_could_not_decode(ws):
    before = b"caf\xe9 = 1\nname = 2\n"  # Latin-1, not UTF-8
    (ws.root / "legacy.py").write_bytes(before)
    result = tool(ws, "edit_file", path="legacy.py", old="name", new="title")
    after = (ws.root / "legacy.py").read_bytes()
    assert after == before.replace(b"name", b"title") or (result.startswith("error: ") and after == before)


@pytest.fixture
def outside(tmp_path) -> Path:
    """A secret beside the workspace, and two symlinks inside the workspace that lead to it."""
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOP SECRET")
    (tmp_path / "ws" / "out").symlink_to(secret.parent, target_is_directory=True)
    (tmp_path / "ws" / "secret-link.txt").symlink_to(secret)
    return secret


@pytest.mark.parametrize("path", ["../outside/secret.txt", "ABSOLUTE", "out/secret.txt", "secret-link.txt"])
@pytest.mark.parametrize("name", ["read_file", "write_file", "edit_file"])
def test_the_workspace_refuses_paths_that_lead_outside(ws, outside, name, path):
    path = str(outside) if path == "ABSOLUTE" else path
    result = tool(ws, name, path=path, **({"content": "pwned"} if name == "write_file" else {}),
                  **({"old": "TOP SECRET", "new": "pwned"} if name == "edit_file" else {}))
    assert result.startswith("error: ") and "TOP SECRET" not in result
    assert outside.read_text() == "TOP SECRET"


def test_the_workspace_refuses_an_absolute_path_even_inside_it(ws):
    inside = ws.root.resolve() / "notes.txt"
    assert inside.is_file()
    with pytest.raises(tiny_agent.ToolError, match="must be relative to the workspace"):
        tiny_agent.tool_path(ws, str(inside))
    assert tiny_agent.tool_path(ws, "notes.txt") == ["notes.txt"]  # the same file, named relative to the workspace, is fine
    result = tool(ws, "read_file", path=str(inside))
    assert result.startswith("error: ") and "alpha beta" not in result


def test_a_command_over_the_timeout_is_stopped(ws):
    ws.timeout, ws.allowed = 0.2, {"sleep 5"}
    assert tool(ws, "bash", command="sleep 5") == "error: the command ran longer than 0.2 s and was stopped"


@pytest.mark.parametrize("name", ["bash", "read_file"])
def test_long_output_is_capped_keeping_head_and_tail(ws, name):
    (ws.root / "big.txt").write_text("HEAD" + "x" * 50_000 + "TAIL")
    result = tool(ws, name, **({"command": "cat big.txt"} if name == "bash" else {"path": "big.txt"}))
    assert len(result) < OUTPUT_CAP + 100 and "[… 40,008 bytes cut …]" in result  # 50,008 bytes, 10,000 kept
    assert "HEAD" in result and result.endswith("TAIL")


# A command runs unasked only when it is known to be harmless (tiny_agent.needs_asking);
# everything else is asked, and a no leaves the workspace as it was. The question shows the whole
# command, one line of it a line, and the reason says where the proof stopped.
NOT_PROVED = "it is not a read-only program's plain words and simple quotes joined by |, && or ||"


@pytest.mark.parametrize("command, why", [
    ("sudo true; echo ran > ran.txt", "`sudo` is not a known read-only program"),
    ("rm -rf / ; echo ran > ran.txt", "`rm` is not a known read-only program"),
    ("cat notes.txt && rm -f notes.txt && echo ran > ran.txt", "`rm` is not a known read-only program"),
    ("echo rm -rf / > ran.txt", f"from character 15 (> ran.txt) {NOT_PROVED}"),
    ("echo ok; echo ran > ran.txt", f"from character 8 (; echo ran > ran.txt) {NOT_PROVED}"),
    ("cat /etc/hostname", "it names a path outside the workspace (absolute, with .., or in an option)"),
])
def test_a_command_not_known_to_be_harmless_is_refused_without_approval(tmp_path, command, why):
    asked = []
    ws = AgentWorkspace(tmp_path, approve=lambda c: asked.append(c) or "n")
    (tmp_path / "notes.txt").write_text("kept\n")
    assert tool(ws, "bash", command=command) == f"error: the user did not allow this command ({why})"
    assert asked == [f"[tool] bash, not known to be harmless ({why}):\n  │ {command}\nrun it?"]
    assert not (tmp_path / "ran.txt").exists() and (tmp_path / "notes.txt").read_text() == "kept\n"


@pytest.mark.parametrize("command", ["echo sudo", "echo rm -rf x | cat", "grep -c kept notes.txt && echo 'rm -rf x'"])
def test_a_dangerous_word_as_an_argument_of_a_read_only_program_is_not_asked_about(tmp_path, command):
    asked = []
    ws = AgentWorkspace(tmp_path, approve=lambda c: asked.append(c) or "n")
    (tmp_path / "notes.txt").write_text("kept\n")
    assert tool(ws, "bash", command=command).startswith("exit code 0\n") and asked == []


def test_a_command_runs_when_approved(tmp_path):
    asked = []
    ws = AgentWorkspace(tmp_path, approve=lambda c: asked.append(c) or "y")
    (tmp_path / "old.txt").write_text("old\n")
    assert tool(ws, "bash", command="rm old.txt && echo removed > ran.txt") == "exit code 0\n"
    assert asked == ["[tool] bash, not known to be harmless (`rm` is not a known read-only program):\n"
                     "  │ rm old.txt && echo removed > ran.txt\nrun it?"]
    assert not (tmp_path / "old.txt").exists() and (tmp_path / "ran.txt").read_text() == "removed\n"
    assert tool(ws, "bash", command="cat old.txt\0") == "error: embedded null byte"  # asked, then refused by Popen


def test_the_offline_demo_compacts_draws_the_chart_and_leaves_the_repo_alone(capsys, tmp_path):
    assert tiny_agent.main(["--demo"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("[demo]")
    assert sum(line.startswith("[compact]") for line in lines) >= 2
    assert "# Survey of the Python sources" in out and "| compact.py |" in out
    assert "tokens sent at each of" in out and "[done]" in out
    assert not (tiny_agent.HERE / "REPORT.md").exists() and not (tmp_path / "REPORT.md").exists()


def test_the_demo_model_refuses_a_request_over_its_window_like_a_server():
    model = DemoModel(window=1_000)
    with pytest.raises(ContextLengthExceeded) as refused:
        model([{"role": "user", "content": "word " * 5_000}], TOOL_SCHEMAS)
    assert is_context_overflow(refused.value)
    assert model([{"role": "user", "content": "Survey the project."}], TOOL_SCHEMAS)["tool_calls"]


@pytest.mark.parametrize("error, overflow", [
    (ContextLengthExceeded("This model's maximum context length is 8192 tokens."), True),
    (RuntimeError("prompt is too long: 210000 tokens > 200000 maximum"), True),
    (RuntimeError("Error code: 400 - context_length_exceeded"), True),
    (RuntimeError("Error code: 429 - rate limit reached"), False),
    (ConnectionError("connection refused"), False),
])
def test_is_context_overflow_recognises_only_too_long_refusals(error, overflow):
    assert is_context_overflow(error) is overflow


def scripted_input(items: list):
    """A read() for the REPL that answers from a list; an exception class in it is raised instead."""
    queue = iter(items)

    def answer(prompt=""):
        item = next(queue)
        if isinstance(item, type):
            raise item
        return item
    return answer


# changed with the redesign: an empty line no longer quits the REPL (it is skipped); /exit or Ctrl-D do.
# repl() takes the settings, and read() returns None on Ctrl-D (read_line catches the EOFError)
@pytest.mark.parametrize("quit_with", ["/exit", None])
def test_the_repl_keeps_the_history_across_questions(fake_openai, capsys, tmp_path, quit_with):
    answers = iter(["Paris.", "About two million people."])
    server = fake_openai(lambda body: (200, chat_response(next(answers))))
    read = scripted_input(["What is the capital of France?", "", "How many people live there?", quit_with])
    config = Config()
    session = new_session(config)
    repl(session, config, openai_model(compact.make_client(), "test-model"), AgentWorkspace(tmp_path), read=read)
    second = server.requests[1]["messages"]
    assert [m["content"] for m in second[1:]] == ["What is the capital of France?", "Paris.",
                                                   "How many people live there?"]
    out = capsys.readouterr().out
    assert "agent> Paris." in out and "agent> About two million people." in out
    assert len(server.requests) == 2


def test_the_sawtooth_chart_draws_one_bottom_aligned_column_per_request():
    # changed with the redesign: the chart takes (messages, tokens) per request and its columns are
    # tokens; the message counts are listed below it
    tokens = [400, 800, 1_200, 1_600, 600, 1_000, 1_400, 500]
    messages = [9, 9, 3, 9, 9, 3, 9, 9]  # not the shape of the tokens: the columns must follow the tokens
    lines = sawtooth_chart(list(zip(messages, tokens)), height=8).split("\n")
    assert len(lines) == 8 + 2
    assert lines[0].startswith("  1,600 ┤") and lines[4].startswith("    800 ┤")
    assert lines[8] == "        └" + "─" * len(tokens)
    assert lines[9].strip() == "tokens sent at each of 8 requests; messages: 9 9 3 9 9 3 9 9"
    columns = ["".join(row[9 + j] for row in lines[:8]) for j in range(len(tokens))]
    assert columns == [" " * (8 - t // 200) + "█" * (t // 200) for t in tokens]  # each row is 1,600 / 8 = 200


def test_the_sawtooth_chart_of_nothing_is_empty():
    assert sawtooth_chart([]) == ""


def test_read_line_turns_ctrl_d_into_none_and_bad_bytes_into_replacement_characters(monkeypatch, capsys):
    lines = iter(["fix \udcff this", EOFError])

    def fake_input(prompt=""):
        item = next(lines)
        if isinstance(item, type):
            raise item
        return item
    monkeypatch.setattr("builtins.input", fake_input)
    assert tiny_agent.read_line("you> ") == "fix \ufffd this"
    assert tiny_agent.read_line("you> ") is None
    assert capsys.readouterr().out == "\n"  # Ctrl-D ends the prompt's line
