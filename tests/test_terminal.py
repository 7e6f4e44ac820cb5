"""A terminal session nobody loses, driven as a person drives it: `python tiny_agent.py`
on a pseudo-terminal (test_repl.Terminal), keys and Ctrl-C/Ctrl-D as the terminal sends them, and a
scripted OpenAI-compatible server on 127.0.0.1 whose recorded request bodies show what the agent
really sent. What must reach stderr as one line, or a pipe, runs the same entry point without a
terminal. Every test keeps the agent's records under its own XDG_STATE_HOME (test_repl.state)."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TOKENS_EXTRA, chat_response, options_for
from test_repl import (AGENT, DEADLINE, SUMMARY, Script, Terminal, agent_env, answers,  # noqa: F401
                       assert_one_line_error, assert_valid, latest, long_enough, messages_of, quit_cleanly, records,
                       run_agent, server, terminal, tool_call, wait_until, workspace)
from test_shell import START_LINE, mode, path_without_bwrap  # noqa: F401

import compact
import tiny_agent

BROKEN = (500, {"error": {"message": "boom", "type": "server_error"}})


@pytest.fixture
def tty(tmp_path):
    """start(args, env) -> a Terminal running `python tiny_agent.py ARGS` with no --workspace added."""
    started: list[Terminal] = []
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)

    def start(args: list, env: dict) -> Terminal:
        t = Terminal(args, env, cwd)
        started.append(t)
        return t
    yield start
    for t in started:
        t.close()


def line_of(t: Terminal, start: str) -> str:
    """The whole line of the terminal's output that begins with `start` (waited for)."""
    found = t.expect(re.escape(start) + r"[^\r\n]*\r\n", regex=True)
    return found[0][:-2]


def paste(t: Terminal, data: bytes) -> None:
    """Write `data` to the terminal as a paste arrives, reading the echo meanwhile so neither side
    blocks. When the program turned bracketed paste on (readline does), the paste is bracketed, as
    a terminal emulator sends it."""
    if "\x1b[?2004h" in t.seen:
        data = b"\x1b[200~" + data + b"\x1b[201~"
    view, until = memoryview(data), time.monotonic() + DEADLINE
    os.set_blocking(t.master, False)
    try:
        while view:
            if time.monotonic() > until:
                pytest.fail(f"the terminal took {len(data) - len(view):,} of {len(data):,} bytes; it shows:\n"
                            f"{t.seen[-2000:]}")
            readable, writable, _ = select.select([t.master], [t.master], [], 1.0)
            if readable:
                t._read(time.monotonic())
            if writable:
                try:
                    view = view[os.write(t.master, view[:4096]):]
                except BlockingIOError:
                    pass
    finally:
        os.set_blocking(t.master, True)


def tool_results(body: dict) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages_of(body) if m["role"] == "tool"}


def roles(body: dict) -> list[str]:
    return [m["role"] for m in messages_of(body)]


def no_two_user_messages_in_a_row(body: dict) -> bool:
    r = roles(body)
    return all(not (a == b == "user") for a, b in zip(r, r[1:]))


# --- Bytes that are not UTF-8, and a paste of any length ------------------------------------


def test_a_task_argument_that_is_not_utf8_reaches_the_server_as_a_replacement_character(server, terminal):
    script = Script(server, [chat_response("FIXED")])
    t = terminal(script, b"fix \xff this")  # what $'fix \xff this' passes: the raw byte 0xff
    t.expect("[answer] FIXED")
    assert t.wait() == 0
    assert "Traceback" not in t.seen
    assert messages_of(script.turns[0])[-1] == {"role": "user", "content": "fix \ufffd this"}


def test_a_line_typed_with_bytes_that_are_not_utf8_reaches_the_server_as_a_replacement_character(server, terminal):
    script = Script(server, [chat_response("FIXED"), chat_response("NEXT-ANSWER")])
    t = terminal(script)
    t.at_prompt()
    os.write(t.master, b"fix \xff this\r")
    t.expect("agent> FIXED")
    assert messages_of(script.turns[0])[-1] == {"role": "user", "content": "fix \ufffd this"}
    assert "agent> NEXT-ANSWER" in t.ask("next question")
    quit_cleanly(t)


def test_a_50_kb_pasted_line_arrives_whole(server, terminal):
    """A terminal in canonical mode keeps at most 4,095 bytes of a line; readline reads the line
    itself, so the paste arrives whole. The default window (128,000) leaves room for it."""
    line = "".join(f"{i:05d} " for i in range(50_000 // 6)) + "END-OF-PASTE"
    assert len(line) > 50_000
    script = Script(server, [chat_response("GOT-IT"), chat_response("NEXT-ANSWER")])
    t = terminal(script)
    t.at_prompt()
    paste(t, line.encode() + b"\r")
    t.expect("agent> GOT-IT")
    assert messages_of(script.turns[0])[-1] == {"role": "user", "content": line}
    assert "[cut]" not in t.seen
    assert "agent> NEXT-ANSWER" in t.ask("next question")
    quit_cleanly(t)


def test_a_pasted_log_of_many_lines_is_one_question(server, terminal):
    """The lines of a paste after the first are already waiting when the first arrives: they join
    it, so a 700-line log is one question, not 700 (seen in tmux before this was built)."""
    lines = [f"01:{i // 60:02d}:{i % 60:02d} worker-{i % 7} processed batch {i}" for i in range(700)]
    script = Script(server, [chat_response("ONE-QUESTION"), chat_response("NEXT-ANSWER")])
    t = terminal(script)
    t.at_prompt()
    paste(t, ("\r".join(lines) + "\r").encode())
    t.expect("agent> ONE-QUESTION")
    assert messages_of(script.turns[0])[-1] == {"role": "user", "content": "\n".join(lines)}
    assert "agent> NEXT-ANSWER" in t.ask("next question")
    quit_cleanly(t)


# --- The [y/N] question, Ctrl-C while compacting ---------------------------------------------


@pytest.mark.parametrize("key", ["Ctrl-D", "Ctrl-C"])
def test_ctrl_d_or_ctrl_c_at_the_yes_no_question_answers_no_and_the_repl_goes_on(server, terminal, workspace, key):
    victim = workspace / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("kept\n")
    command = f"rm -rf {victim}"
    why = "`rm` is not a known read-only program"
    script = Script(server, [chat_response(tool_calls=[tool_call("call_rm", "bash", command=command)]),
                             chat_response("NOT-REMOVED"), chat_response("NEXT-ANSWER")])
    t = terminal(script)
    t.at_prompt()
    t.send("clean up")
    t.expect(f"[tool] bash, not known to be harmless ({why}):\r\n  │ {command}\r\nrun it? [y/N/a] ")
    wait_until(t.reading, "the question waits for an answer")
    start = t.mark
    if key == "Ctrl-D":
        os.write(t.master, b"\x04")
    else:
        t.interrupt()
    t.expect("agent> NOT-REMOVED")
    assert "[interrupted]" not in t.since(start) and "Traceback" not in t.seen
    assert tool_results(script.turns[1]) == {"call_rm": f"error: the user did not allow this command ({why})"}
    assert (victim / "keep.txt").read_text() == "kept\n"
    assert "agent> NEXT-ANSWER" in t.ask("and now?")
    quit_cleanly(t)


def test_a_means_yes_to_that_exact_command_for_the_rest_of_the_session(server, terminal, workspace):
    command, other = "echo again >> log.txt", "echo other >> log.txt"
    calls = [chat_response(tool_calls=[tool_call(f"call_{i}", "bash", command=c)])
             for i, c in enumerate([command, command, other])]
    script = Script(server, [calls[0], calls[1], calls[2], chat_response("DONE")])
    t = terminal(script)
    t.at_prompt()
    t.send("log it")
    why = "it is not a read-only program's plain words and simple quotes joined by |, && or ||"
    t.expect(f"[tool] bash, not known to be harmless (from character 12 (>> log.txt) {why}):\r\n  │ {command}\r\n"
             "run it? [y/N/a] ")
    t.send("a")
    t.expect(f"[tool] bash, not known to be harmless (from character 12 (>> log.txt) {why}):\r\n  │ {other}\r\n"
             "run it? [y/N/a] ")  # the same command again is not asked
    assert t.seen.count("run it?") == 2
    t.send("n")
    t.expect("agent> DONE")
    assert (workspace / "log.txt").read_text() == "again\nagain\n"
    quit_cleanly(t)


class HeldSummaries(Script):
    """A Script whose summary requests (no tools) are answered only after script.release.set()."""

    def reply(self, body: dict):
        if "tools" in body:
            return super().reply(body)
        with self.changed:
            self.summaries.append(body)
            self.changed.notify_all()
        self.release.wait(DEADLINE)
        return 200, chat_response(SUMMARY)

    def wait_for_summaries(self, n: int) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.summaries) >= n, DEADLINE):
                pytest.fail(f"the agent sent {len(self.summaries)} summary requests, not {n}")


def test_ctrl_c_while_compact_runs_the_summarizer_returns_to_the_prompt(server, terminal):
    script = HeldSummaries(server, answers(4) + [chat_response("AFTER")])
    t = terminal(script, "--keep-recent", "2")
    long_enough(t)
    t.at_prompt()
    start = t.mark
    t.send("/compact")
    script.wait_for_summaries(1)  # the summary model holds its answer
    t.interrupt()
    t.expect("[interrupted] the compaction was stopped; the history is as it was")
    t.expect("you> ")
    shown = t.since(start)
    script.release.set()
    assert "agent> AFTER" in t.ask("and now?")
    after = script.turns[-1]
    assert_valid(messages_of(after))
    assert [m["content"] for m in messages_of(after)[1:] if m["role"] == "user"] == [
        *(f"question {i} about the parser" for i in range(4)), "and now?"]  # nothing was compacted
    assert not any(m["content"].startswith("[Context summary]") for m in messages_of(after))
    quit_cleanly(t)
    assert "Traceback" not in shown and "nothing to compact yet" not in shown, shown


# --- Resume ----------------------------------------------------------------------------------


def test_resume_comes_back_with_the_strategy_chosen_in_the_repl_and_the_ladders_state(server, terminal, workspace):
    script = Script(server, answers(4) + [chat_response("AFTER-RESUME")])
    t = terminal(script, "--keep-recent", "2")
    long_enough(t)
    assert "[strategy] layered from now on" in t.ask("/strategy layered")
    assert re.search(r"\[compact\] 9 → \d+ messages", t.ask("/compact"))
    stats = t.ask("/context").splitlines()[-2]  # the meter's last line, before the prompt
    quit_cleanly(t)
    saved = json.loads(latest(records(workspace)).read_text())
    assert saved["strategy"] == "layered" and saved["state"]["compactions"] == 1 and saved["state"]["summary"]
    again = terminal(script, "--resume")  # layered keeps no recent messages: --keep-recent would be an error
    again.expect(f"[resume] {len(saved['messages'])} messages, strategy layered\r\n")
    again.expect("[repl] model test-model, strategy layered.")
    assert again.ask("/context").splitlines()[-2] == stats  # the ladder's compactions and savings are back
    assert "agent> AFTER-RESUME" in again.ask("go on")
    sent = messages_of(script.turns[-1])
    assert_valid(sent)
    assert [m["content"] for m in sent[:-1]] == [m["content"] for m in tiny_agent.outgoing(saved["messages"])]
    assert sent[-1] == {"role": "user", "content": "go on"}
    quit_cleanly(again)


# --- Options that do not apply, and settings that cannot work, each in one line --------------


def test_resume_and_workspace_without_a_model_say_they_do_not_apply(tty, tmp_path):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    t = tty(["--resume", "--workspace", str(folder)], agent_env())
    t.expect("[done]")
    assert t.wait() == 0 and "Traceback" not in t.seen
    said = t.seen.replace("\r", "").splitlines()
    assert said.count("[demo] --workspace applies to a real model; the demo works on a temporary copy of this "
                      "project") == 1
    assert said.count("[demo] --resume continues a REPL session: add --repl (python tiny_agent.py --demo --repl "
                      "--resume)") == 1
    assert list(folder.iterdir()) == []


def test_demo_with_a_model_configured_does_not_say_no_model_is_configured(tty, server):
    script = Script(server)
    t = tty(["--demo", "a task"], agent_env(script.base_url))
    t.expect("[done]")
    assert t.wait() == 0
    said = t.seen.replace("\r", "").splitlines()
    assert "no model is configured" not in t.seen
    assert said.count("[demo] --demo runs the offline demo model, so the task is not run") == 1
    assert said.count("[demo] --demo: running the offline demo, not the configured model.") == 1
    assert script.turns == []  # the task went nowhere


def test_demo_with_a_model_configured_sends_nothing_to_it(tty, server):
    """"running the offline demo, not the configured model": its compactions summarize offline too,
    and no file of the project's copy is sent to the configured server."""
    script = Script(server)
    t = tty(["--demo"], agent_env(script.base_url))
    t.expect("[done]")
    assert t.wait() == 0 and "[compact]" in t.seen
    assert script.turns == [] and script.summaries == []


@pytest.mark.parametrize("path", ["", "/v1"])
def test_a_server_that_answers_200_with_html_gets_the_v1_hint_only_without_v1(tmp_path, server, path):
    server.expect_request(f"{path}/chat/completions", method="POST").respond_with_data(
        "<html><body><h1>Welcome to nginx!</h1></body></html>", content_type="text/html")
    base = server.url_for(path).rstrip("/")
    result = run_agent(["a task"], agent_env(base), tmp_path)
    line = assert_one_line_error(result, f"the server at {base} did not answer like an OpenAI-compatible server")
    hint = f"; OPENAI_BASE_URL usually ends in /v1 ({base}/v1)"
    assert line.endswith(hint) if path == "" else "usually ends in /v1" not in line, line


@pytest.mark.parametrize("max_output", ["4000", "6000"])
def test_max_output_tokens_of_half_the_window_or_more_is_refused_in_one_line(tmp_path, server, workspace, max_output):
    script = Script(server, [chat_response("DONE")])
    result = run_agent(["--workspace", str(workspace), "a task"],
                       agent_env(script.base_url, CONTEXT_WINDOW="8000", MAX_OUTPUT_TOKENS=max_output), tmp_path / "cwd")
    assert_one_line_error(result, f"MAX_OUTPUT_TOKENS={max_output} leaves no room in CONTEXT_WINDOW=8000: keep it "
                                  "under half the window")
    assert script.turns == []


def test_max_output_tokens_under_half_the_window_is_used_as_the_replys_limit(tmp_path, server, workspace):
    script = Script(server, [chat_response("DONE")])
    result = run_agent(["--workspace", str(workspace), "a task"],
                       agent_env(script.base_url, CONTEXT_WINDOW="8000", MAX_OUTPUT_TOKENS="3999"), tmp_path / "cwd")
    assert result.returncode == 0 and "[answer] DONE" in result.stdout, result.stderr
    assert script.turns[0]["max_tokens"] == 3999


def test_send_reasoning_that_is_not_a_yes_or_no_is_refused_in_one_line(tmp_path, server, workspace):
    script = Script(server, [chat_response("DONE")])
    result = run_agent(["--workspace", str(workspace), "a task"], agent_env(script.base_url, SEND_REASONING="maybe"),
                       tmp_path / "cwd")
    assert_one_line_error(result, "SEND_REASONING='maybe' must be one of 1, true, yes, on, 0, false, no, off")
    assert script.turns == []


# --- Commands and options that are wrong, a reader that leaves ------------------------------


def test_an_unknown_command_says_so_and_lists_the_commands(server, terminal):
    script = Script(server)
    t = terminal(script)
    shown = t.ask("/frobnicate now").replace("\r", "")
    assert f"unknown command /frobnicate; the commands are:\n{tiny_agent.HELP}\n" in shown, shown
    assert "agent>" not in shown and script.turns == []
    quit_cleanly(t)


@pytest.mark.parametrize("args, expected", [
    (["--frobnicate"], "error: unrecognized arguments: --frobnicate (see python tiny_agent.py --help)"),
    (["--max-iterations", "many"], "error: argument --max-iterations: invalid int value: 'many' "
                                   "(see python tiny_agent.py --help)"),
])
def test_a_wrong_option_is_one_line_on_stderr_and_exit_code_2(tmp_path, args, expected):
    result = run_agent(args, agent_env(), tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == expected + "\n"


def test_a_workspace_that_is_a_file_says_it_is_a_file(tmp_path, server):
    script = Script(server)
    path = tmp_path / "notes.txt"
    path.write_text("not a folder\n")
    result = run_agent(["--workspace", str(path), "a task"], agent_env(script.base_url), tmp_path)
    assert_one_line_error(result, f"--workspace {path}: is a file, not a folder")
    assert script.turns == []


@pytest.mark.parametrize("args", [["--help"], []], ids=["help", "demo"])
def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path, args):
    """`python tiny_agent.py --help | head -1`: the pipe's reader is gone before the agent writes."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, str(AGENT), *args], stdin=subprocess.DEVNULL, stdout=write,
                                stderr=subprocess.PIPE, env=agent_env(), cwd=tmp_path, timeout=DEADLINE)
    finally:
        os.close(write)
    assert result.stderr == b"", result.stderr.decode(errors="replace")
    assert result.returncode == 0


# --- What the terminal shows of the model's arguments -----------------------------------------


def test_the_tool_preview_prints_no_raw_newline_or_escape_from_the_models_arguments(server, terminal):
    arguments = '{"command": "echo\nSECOND-LINE \x1b[2J\x1b[31mRED\x1b]0;title\x07\r\tEND"}'
    reply = chat_response(tool_calls=[tool_call("call_1", "bash", command="x")])
    reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = arguments
    script = Script(server, [reply, chat_response("DONE")])
    t = terminal(script)
    t.at_prompt()
    t.send("go")
    line = line_of(t, "[tool] bash ")
    t.expect("agent> DONE")
    assert not any(not c.isprintable() for c in line), repr(line)
    assert line == '[tool] bash {"command": "echo SECOND-LINE RED END"}', repr(line)  # the sequences whole, no "[2J"
    quit_cleanly(t)


# --- A server error leaves no unanswered question ----------------------------------------------


def test_a_turn_that_ends_in_a_server_error_leaves_no_unanswered_question(server, terminal, workspace):
    script = Script(server, [chat_response("FIRST-ANSWER"), BROKEN, BROKEN, BROKEN, chat_response("SECOND-ANSWER")])
    t = terminal(script)
    assert "agent> FIRST-ANSWER" in t.ask("first question")
    assert "error: the server answered HTTP 500" in t.ask("second question")  # sent three times: the client's retries
    assert "agent> SECOND-ANSWER" in t.ask("second question")  # the user sends it again
    retry = script.turns[4]
    assert [(m["role"], m["content"]) for m in messages_of(retry)[1:]] == [
        ("user", "first question"), ("assistant", "FIRST-ANSWER"), ("user", "second question")]
    assert no_two_user_messages_in_a_row(retry)
    quit_cleanly(t)
    saved = json.loads(latest(records(workspace)).read_text())
    assert [m["content"] for m in saved["messages"][1:]] == ["first question", "FIRST-ANSWER", "second question",
                                                            "SECOND-ANSWER"]


# --- /context after a compaction -------------------------------------------------------------


def meter_total(meter: str) -> int:
    return int(re.search(r"\[context\] ~([\d,]+) of", meter)[1].replace(",", ""))


@pytest.mark.parametrize("strategy", ["sawtooth", "layered"])
def test_context_after_a_compaction_shows_the_history_after_it_and_the_stats(server, terminal, workspace, strategy):
    script = Script(server, answers(4))
    t = terminal(script, "--strategy", strategy, *options_for(strategy, keep_recent=2), **TOKENS_EXTRA)  # counts as this test does
    long_enough(t)
    before = t.ask("/context")
    assert re.search(r"\[compact\] 9 → \d+ messages", t.ask("/compact"))
    meter = t.ask("/context")
    saved = json.loads(latest(records(workspace)).read_text())
    after = tiny_agent.schema_tokens() + sum(compact.estimate_tokens([m]) - 3 for m in saved["messages"])
    assert meter_total(meter) == after < meter_total(before)
    assert re.search(r"^\[stats\] compactions: 0, tokens saved: 0\r?$", before, re.M), before
    stats = re.search(r"^\[stats\] compactions: 1, tokens saved: ([\d,]+)\r?$", meter, re.M)
    assert stats, meter
    assert int(stats[1].replace(",", "")) == saved["state"]["tokens_saved"] > 0
    quit_cleanly(t)


# --- Words ------------------------------------------------------------------------------------


def test_one_iteration_is_said_in_the_singular(server, terminal):
    script = Script(server, [chat_response(tool_calls=[tool_call("call_1", "bash", command="true")])])
    t = terminal(script, "--max-iterations", "1", "keep going")
    t.expect("[limit] stopped after 1 model call without a final answer: --max-iterations raises the limit\r\n")
    t.expect("[answer] stopped after 1 model call without a final answer\r\n")
    t.expect("[done] 1 request, 0 compactions, ")
    assert t.wait() == 3 and len(script.turns) == 1  # the limit is not success


def test_the_demo_says_how_bash_runs(tty, mode):
    t = tty([], agent_env(**mode))
    shell = line_of(t, "[shell] ")
    t.expect("[tool] ")
    assert shell.startswith(START_LINE["PATH" not in mode]), shell
    assert t.wait() == 0


# --- The demo REPL, keyless, and its resume --------------------------------------------------


def test_the_demo_repl_runs_keylessly_and_resume_continues_it(tty):
    demo_records = tiny_agent.records_folder(tiny_agent.HERE, "demo")  # under this test's XDG_STATE_HOME
    t = tty(["--demo", "--repl"], agent_env())
    t.expect(tiny_agent.DEMO_SAYS)
    t.expect("[shell] ")
    meter = t.ask("/context")
    assert re.search(r"\[context\] ~[\d,]+ of 40,000 tokens", meter), meter
    assert "[compact] nothing to compact yet: the history is 0 messages after the system prompt" in t.ask("/compact")
    answer = t.ask("survey the project")
    surveyed = re.search(r"agent> \[demo model\] Surveyed (\d+) Python files", answer)
    assert surveyed and int(surveyed[1]) > 10 and "[compact]" in answer, answer[-3000:]
    quit_cleanly(t)
    saved = json.loads(latest(demo_records).read_text())
    n = len(saved["messages"])
    assert n > 2 and saved["state"]["compactions"] >= 1
    again = tty(["--demo", "--repl", "--resume"], agent_env(**TOKENS_EXTRA))  # counts as this test does
    again.expect(f"[resume] {n} messages")
    meter = again.ask("/context")
    total = tiny_agent.schema_tokens() + sum(compact.estimate_tokens([m]) - 3 for m in saved["messages"])
    assert meter_total(meter) == total  # the saved history, not a fresh one
    assert re.search(r"agent> \[demo model\] Surveyed \d+ Python files", again.ask("survey it again"))
    quit_cleanly(again)
    later = json.loads(latest(demo_records).read_text())
    assert later["state"]["compactions"] > saved["state"]["compactions"]  # the same state, carried on


# --- The agent's records and the workspace, with bubblewrap and without -----------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_command_that_deletes_the_agents_records_does_not_delete_them(server, terminal, workspace, mode):
    """No name filter. Inside bubblewrap the whole records root is out of sight,
    so even commands said yes to (--yes) find nothing to delete, by name or by search; without it
    such a command is asked, and no leaves the records as they are (README: what is not confined)."""
    folder = records(workspace)
    confined = "PATH" not in mode
    commands = [f"rm -rf {folder}", f": > {folder}/session.json; find {folder} -type f -exec truncate -s 0 {{}} +",
                f"rm -rf {folder.parent}", "find / -name 'session*.json*' -exec truncate -s 0 {} + 2>/dev/null"]
    calls = [chat_response(tool_calls=[tool_call(f"call_{i}", "bash", command=c)]) for i, c in enumerate(commands)]
    replies = [r for i, call in enumerate(calls) for r in (call, chat_response(f"TRIED-{i}"))]
    script = Script(server, answers(4) + replies)
    t = terminal(script, "--keep-recent", "2", *(["--yes"] if confined else []), **mode)
    long_enough(t)
    assert re.search(r"\[compact\] 9 → \d+ messages", t.ask("/compact"))
    archived = snapshot(folder / "archive")
    assert archived and all(data for data in archived.values())  # the archive holds what left the context
    for i, command in enumerate(commands):
        t.at_prompt()
        t.send(f"attempt {i}")
        if not confined:
            t.expect("run it? [y/N/a] ")
            t.send("n")
        t.expect(f"agent> TRIED-{i}")
        result = tool_results(script.turns[-1])[f"call_{i}"]
        assert result.startswith("exit code" if confined else "error: the user did not allow this command"), result
        assert snapshot(folder / "archive") == archived
        session = json.loads(latest(folder).read_text())
        assert session["messages"][1]["content"].startswith("[Context summary]")
    quit_cleanly(t)


def test_rm_rf_of_the_whole_workspace_is_not_run_without_the_users_yes(server, terminal, workspace, mode):
    (workspace / "a.txt").write_text("a\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "b.txt").write_text("b\n")
    before = snapshot(workspace)
    script = Script(server, [chat_response(tool_calls=[tool_call("call_rm", "bash", command="rm -rf ./*")]),
                             chat_response("ASKED")])
    t = terminal(script, **mode)
    t.at_prompt()
    t.send("tidy up")
    t.expect("[tool] bash, not known to be harmless (`rm` is not a known read-only program):\r\n  │ rm -rf ./*\r\n"
             "run it? [y/N/a] ")
    t.send("n")
    t.expect("agent> ASKED")
    assert tool_results(script.turns[1]) == {
        "call_rm": "error: the user did not allow this command (`rm` is not a known read-only program)"}
    assert snapshot(workspace) == before
    quit_cleanly(t)
