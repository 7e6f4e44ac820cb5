"""Tests for the mutants that survived the suite, each a bug written from outside (the four
the issue names) or made by mutmut over the mechanisms (README, "Mutation testing"), and the list
of the mutants that change nothing (EQUIVALENT below, one line each saying why; the mutant's diff:
`mutmut show NAME`). A name holds its number among its function's mutants: a function changed may
renumber them, and tests/run_mutmut.py then reports the survivor unnamed (check it again)."""

from __future__ import annotations

import errno
import json
import locale
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import call, chat_response, result
from test_repl import Script, agent_env, run_agent, server, tool_call, workspace  # noqa: F401
from test_shell import path_without_bwrap  # noqa: F401

import compact
import tiny_agent
from compact import Archive, Compactor

# --- 1. `find -fls FILE` writes FILE: asked about, in the checker and from outside ------------


@pytest.mark.parametrize("command", ["find . -fls f", "find . -name '*.py' -fls list.txt", "find src -fls out"])
def test_find_writing_a_listing_with_fls_is_asked_about(command):
    """READ_ONLY["find"] refuses -fls like -fprint: without it, these ran unasked."""
    assert tiny_agent.needs_asking(command) is not None
    assert tiny_agent.needs_asking(command.replace("-fls", "-ls")) is None  # the listing to the output is fine


def test_find_fls_from_the_command_line_is_not_run_unasked(server, workspace, tmp_path, path_without_bwrap):
    """The whole way, unconfined (inside bubblewrap a mistake of the checker could not write): a
    scripted model calls bash with `find . -fls f`, stdin is not a terminal, so nobody says yes."""
    (workspace / "notes.txt").write_text("notes\n")
    script = Script(server, [chat_response(tool_calls=[tool_call("call_1", "bash", command="find . -fls f")]),
                             chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "list the files"],
                     agent_env(script.base_url, PATH=path_without_bwrap), tmp_path / "cwd")
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-2000:]
    (result,) = [m["content"] for m in script.turns[1]["messages"] if m["role"] == "tool"]
    assert result.startswith("error: the user did not allow this command (")
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.txt"]  # no f


# --- 2. A tool call whose function name is "" -------------------------------------------------


def test_a_tool_call_with_an_empty_function_name_is_one_line_not_a_call():
    """Both readers refuse it: the history would keep a call to no tool, which a server refuses."""
    sent = json.dumps({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "", "arguments": "{}"}}]}}]})
    for read in (tiny_agent.read_reply, tiny_agent.read_whole_reply):
        with pytest.raises(tiny_agent.ServerReplyError) as raised:
            read(sent)
        assert "not named functions" in str(raised.value) and "\n" not in str(raised.value)


def test_a_saved_session_with_a_call_to_no_function_is_damaged(tmp_path):
    """The same reader checks a saved session: a call named "" is not resumed."""
    path = tmp_path / "session-1.json"
    path.write_text(json.dumps({"version": 2, "strategy": "sawtooth", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"}]}))
    with pytest.raises(tiny_agent.ConfigError, match="damaged"):
        tiny_agent.read_session(path)


# --- 3. A Slack token and a JWT are masked -----------------------------------------------------

SLACK = "xoxb-2048576012-4096123450123-Zq8wPkT3mN1vR7sB"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFkYSJ9."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")


@pytest.mark.parametrize("secret", [SLACK, JWT, SLACK.replace("xoxb", "xoxp"), JWT.replace("-", "_")],
                         ids=["slack bot", "jwt", "slack user", "jwt plain"])
def test_a_slack_token_and_a_jwt_in_plain_text_are_masked(secret, tmp_path):
    """SECRET_TOKEN's own patterns, with no secret-like name before them (SECRET_VALUE would mask
    `token = "…"` anyway): in a tool output, in a call's arguments, and in the archive's file."""
    output = f"posted with {secret} to #general\n"
    masked = compact.mask_secrets(output)
    assert secret not in masked and masked == "posted with [secret masked] to #general\n"
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"curl -H {secret}"})}}]}
    archive = Archive.in_folder(tmp_path / "archive", "s")
    archive.append([call, {"role": "tool", "tool_call_id": "c1", "content": output}], 1)
    assert secret not in archive.path.read_text() and archive.path.read_text().count("[secret masked]") == 2


# --- 4. The last resort archives what leaves before its summarizer reads it ------------------


def test_the_last_resort_archives_what_leaves_before_its_summarizer_reads_it(tmp_path):
    """echo-agent's order: archive, then summarize. The summarizer here checks that every message it
    is given is already in the archive (a crash inside a model call loses nothing)."""
    archive = Archive.in_folder(tmp_path / "archive", "s")
    read = []

    def summarizer(messages, focus=None):
        held = [json.dumps(r["message"], sort_keys=True) for r in archive.records()]
        read.append(all(json.dumps(compact.mask_secrets(m), sort_keys=True) in held for m in messages))
        return "## Progress\n- the earlier turns went fine"
    history = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix the clock bug."}]
    for k in range(8):
        history += [{"role": "assistant", "content": "", "tool_calls": [
                        {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
                    {"role": "tool", "tool_call_id": f"c{k}", "content": f"file_{k}.py\n" * 40}]
    history.append({"role": "user", "content": "Go on."})
    engine = Compactor(policy="layered", context_window=3_000, reserved_output=500, summarize=summarizer,
                       archive=archive, layers=("last resort",))
    out = engine.compact(history, level=1)
    assert [step for step, *_ in engine.state.report] == ["last resort"] and read == [True]
    assert archive.count() == len(history) - len(out) + 2  # the summary and its acknowledgement are new


# --- Atomic saving: a save that fails leaves the last good file, and no temporary one ---------


def saved_folder(folder):
    """A session saved once in `folder` (the last good file), and what saves it again."""
    folder.mkdir()
    config = tiny_agent.load_config()
    session = tiny_agent.new_session(config)
    path = folder / "session-1.json"
    assert tiny_agent.save_session(session, config, path) == path
    session.messages.append({"role": "user", "content": "a question the next save carries"})
    return path, path.read_bytes(), lambda: tiny_agent.save_session(session, config, path)


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_a_save_that_fails_keeps_the_last_good_file_whole_and_leaves_no_temporary_one(tmp_path, monkeypatch, capsys,
                                                                                      failing):
    """A full disk at the flush (the new text is written by then: a save in place would have
    truncated the file) or a rename that fails: the old bytes stay, nothing else is in the folder."""
    path, good, save = saved_folder(tmp_path / "records")

    def fail(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, failing, fail)
    assert save() is None
    monkeypatch.undo()
    assert path.read_bytes() == good and os.listdir(path.parent) == ["session-1.json"]
    assert capsys.readouterr().out.strip().endswith("the last saved copy stays; the run goes on")


def test_a_save_killed_before_its_rename_leaves_the_old_file_whole(tmp_path, monkeypatch):
    """A kill inside the save (here, the moment before the rename): the file named by the session is
    still the last good one, and the temporary file the kill left is not taken for a session."""
    path, good, save = saved_folder(tmp_path / "records")

    class Killed(BaseException):
        pass

    def killed(*args, **kwargs):
        raise Killed
    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(Killed):
        save()
    monkeypatch.undo()
    assert path.read_bytes() == good
    assert tiny_agent.saved_sessions(path.parent) == [path]  # what the kill left is no session --resume lists
    (left,) = [p for p in path.parent.iterdir() if p != path]  # beside it (a rename within one file system)
    assert left.name.startswith(".session-")  # hidden, and named for what it is
    assert tiny_agent.read_session(path)["messages"] == json.loads(good)["messages"]


# --- What mutmut cannot change: the module's constants ----------------------------------------
# mutmut mutates inside functions only; READ_ONLY, PLAIN and SECRET_TOKEN are module constants, so
# each alternative they hold has a test here that fails when it is taken out (the hand-written
# mutants of the former tests/mutate.py that mutmut cannot make).

REFUSED = {"find": ["-delete", "-exec rm '{}' +", "-execdir rm '{}' +", "-ok rm '{}' ';'", "-okdir rm '{}' ';'", "-fprint f",
                    "-fprint0 f", "-fprintf f %p", "-fls f"],
           "sort": ["-o f", "-uo f", "-T d", "-bT d", "--output=f", "--compress-program=gzip",
                    "--temporary-directory=d"]}


@pytest.mark.parametrize("program, option", [(p, o) for p, options in REFUSED.items() for o in options])
def test_each_option_that_writes_or_runs_a_program_is_asked_about(program, option):
    """READ_ONLY's refused options, each of them: find writes or runs with these, sort writes (a
    program's `{}` and `;` quoted, so nothing else in the command is asked about)."""
    start = "find . -name x" if program == "find" else "sort notes.txt"
    assert tiny_agent.needs_asking(f"{start} {option}") is not None
    assert tiny_agent.needs_asking(start) is None


@pytest.mark.parametrize("special", list("<>;$`()*?[]{}~#!\\&\"'\n"))
def test_every_character_bash_reads_specially_inside_a_word_is_asked_about(special):
    """PLAIN holds only what means nothing to bash: a word with any other character is asked."""
    assert tiny_agent.needs_asking(f"cat notes{special}txt") is not None
    assert tiny_agent.needs_asking("cat notes.txt") is None


TOKENS = {"openai": "sk-proj-" + "a1B2" * 6, "github": "ghp_" + "Zx9" * 8, "github oauth": "gho_" + "Zx9" * 8,
          "aws": "AKIA" + "ABCDEFGH23456789", "slack": SLACK, "jwt": JWT, "bearer": "Bearer abcdefgh12345678"}


@pytest.mark.parametrize("token", TOKENS.values(), ids=TOKENS.keys())
def test_each_kind_of_token_secret_token_knows_is_masked_in_plain_text(token):
    """SECRET_TOKEN's alternatives, each of them, with no secret-like name before the token."""
    masked = compact.mask_secrets(f"see {token} here")
    assert "[secret masked]" in masked and token.split()[-1] not in masked


# --- The mutants that change nothing -------------------------------------------------------------
# mutmut's name -> why no test can tell it from the code as written (python tests/run_mutmut.py reads
# this without importing the tests; `mutmut show NAME` prints the change).
EQUIVALENT: dict[str, str] = {
    "compact.xǁArchiveǁread__mutmut_22": "ensure_ascii=None: json.dumps reads it as a truth value, and None is false like False",
    "tiny_agent.x_save_session__mutmut_43": "ensure_ascii=None: json.dump reads it as a truth value, and None is false like False",
    "tiny_agent.x_save_session__mutmut_40": '"UTF-8" and "utf-8" name one codec (Python looks codec names up case-insensitively)',
    "tiny_agent.x_read_record__mutmut_42": '"UTF-8" and "utf-8" name one codec (Python looks codec names up case-insensitively)',
    "tiny_agent.x_save_session__mutmut_53": "suppress(None): the except meets the temporary file always there (this process made "
                                            "it; only the rename, which failed, removes it)",
    "compact.xǁArchiveǁrecords__mutmut_5": '"UTF-8" and "utf-8" name one codec (Python looks codec names up case-insensitively)',
    "compact.xǁArchiveǁappend__mutmut_7": "ensure_ascii=None: json.dumps reads it as a truth value, and None is false like False",
    "compact.xǁArchiveǁappend__mutmut_36": '"UTF-8" and "utf-8" name one codec (Python looks codec names up case-insensitively)',
    "compact.xǁArchiveǁcount__mutmut_17": "read(None) reads the file in one piece: the same newlines counted (the chunks only bound memory)",
    "compact.xǁArchiveǁcount__mutmut_19": "chunks of 2 MiB instead of 1 MiB: the same newlines counted (the chunks only bound memory)",
    "compact.xǁArchiveǁcount__mutmut_20": "chunks of 2 MiB instead of 1 MiB: the same newlines counted (the chunks only bound memory)",
    "compact.x_mask_secrets__mutmut_19": "m[2], the quote, is set exactly when m[1] is: both belong to SECRET_VALUE's first form",
    "compact.x_find_cut_within__mutmut_19": "used 1, not 0, only for an empty tail, which never enters the loop (that needs two groups)",
    "compact.x_cut_text__mutmut_19": "< 20 for <= 20: of exactly 20 lines that matter, the first 5 and the last 15 are all 20",
    "compact.x_user_notes__mutmut_84": "words joined by XX\\nXX: it is searched for whole rules, and sentences() ends a rule at every line end",
    "compact.x_user_notes__mutmut_43": "verbatim(..., None) for False: `whole or ...` reads it as a truth value, and None is false like False",
    "compact.x_last_resort__mutmut_131": "focus None where whole is False: summary_with_notes shows the focus only in a whole summary",
    "compact.x_last_resort__mutmut_133": "whole=None for False: summary_with_notes reads it as a truth value, and None is false like False",
    "compact.x_find_cut_within__mutmut_25": "max_tokens / 2 for // 2: used is an int, and an int passes m // 2 exactly when it passes m / 2",
    "tiny_agent.x_replace_file__mutmut_26": "follow_symlinks=None: os.stat reads it as a truth value, and None is false like False",
    "tiny_agent.x_replace_file__mutmut_37": "st_nlink >= 1: a file of one name is a record only inside the records, which tool_path refused already (the walk is slower)",
}


def test_each_equivalent_mutant_names_a_mechanism_and_says_why_in_one_line():
    """A name of a function that is gone, or of one mutmut is not run over, is a stale line."""
    import run_mutmut
    for name, why in EQUIVALENT.items():
        function, _, number = name.rpartition("__mutmut_")
        assert number.isdigit() and function in run_mutmut.MECHANISMS, name
        module, _, mangled = function.partition(".x")
        owner = {"compact": compact, "tiny_agent": tiny_agent}[module]
        for part in mangled.lstrip("_ǁ").split("ǁ"):
            owner = getattr(owner, part)
        assert why.strip() and "\n" not in why and len(why) <= 160, name


# --- The archive: what the recall tool reads -------------------------------------------------------


def tokens_exactly(n: int) -> str:
    """One line of `n` tokens by the project's count."""
    text = "alpha " * (n - 10)
    while compact.text_tokens(text) < n:
        text += "b"
    assert compact.text_tokens(text) == n
    return text


def test_the_archive_reads_a_message_back_as_indented_json_with_its_own_characters(tmp_path):
    archive = Archive.in_folder(tmp_path, "s")
    archive.append([{"role": "user", "content": "café ☕"}], 1)
    assert archive.read(0) == '{\n "role": "user",\n "content": "café ☕"\n}'
    assert archive.read(1) == "no archived message #1; the archive holds 1"
    assert archive.read(-1) == "no archived message #-1; the archive holds 1"


def test_the_archive_reads_back_at_most_a_third_of_max_chars_in_tokens(tmp_path):
    """8,000 characters by default: a message of 2,666 tokens comes back whole, one of 2,667 cut
    (on one line: by characters, what the cutter keeps of an enormous line)."""
    archive = Archive.in_folder(tmp_path, "s")
    whole, cut = tokens_exactly(2_666), tokens_exactly(2_667)
    archive.append([{"role": "tool", "tool_call_id": "c1", "content": text} for text in (whole, cut)], 1)
    assert json.loads(archive.read(0))["content"] == whole
    shown = json.loads(archive.read(1))["content"]
    assert shown != cut and "chars cut" in shown and compact.text_tokens(shown) <= 2_666
    assert json.loads(archive.read(0, max_chars=6_000))["content"] != whole


def test_the_archive_search_shows_the_newest_five_hits_each_in_one_line_of_300_characters(tmp_path):
    archive = Archive.in_folder(tmp_path, "s")
    archive.append([{"role": "user", "content": f"note {k}:   " + "word " * 100} for k in range(7)], 1)
    archive.append([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "grep -rn needle src"}'}}]}], 2)
    hits = archive.search("note").split("\n")
    assert [h.split(":")[0] for h in hits] == ["#2 [user] note 2", "#3 [user] note 3", "#4 [user] note 4",
                                             "#5 [user] note 5", "#6 [user] note 6"]
    assert all(len(h) == len("#2 [user] ") + 300 and "  " not in h for h in hits)
    assert archive.search("needle") == "#7 [assistant] bash(grep -rn needle src)"
    archive.append([{"role": "assistant", "content": "two calls", "tool_calls": [
        {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": c})}}
        for k, c in enumerate(["ls", "pwd"])]}], 3)
    assert archive.search("two") == "#8 [assistant] two calls bash(ls) bash(pwd)"
    assert archive.search("NOTE 6 word").startswith("#6 [user] note 6: word word")
    assert archive.search("absent") == "no archived message contains 'absent'"


# --- Session files: read like outside input, saved whole ----------------------------------------


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_record_is_read_only_as_a_regular_file_within_its_limit_in_one_line_each(tmp_path):
    """read_record: a symbolic link, a missing file, a FIFO and a file over the limit are each one
    line naming the file; a file of exactly the limit is read; nothing is left open."""
    record = tmp_path / "session-1.json"
    record.write_text("é" * 5)  # 10 bytes
    assert tiny_agent.read_record(record, limit=10) == "é" * 5
    (tmp_path / "link.json").symlink_to(record)
    os.mkfifo(tmp_path / "fifo.json")
    opened = open_descriptors()
    expected = {tmp_path / "link.json": f"{tmp_path / 'link.json'} cannot be read (a symbolic link); move it away",
                tmp_path / "gone.json": f"{tmp_path / 'gone.json'} cannot be read (No such file or directory); move it away",
                tmp_path / "fifo.json": f"{tmp_path / 'fifo.json'} is not a regular file; move it away"}
    for path, line in expected.items():
        with pytest.raises(tiny_agent.ConfigError) as raised:
            tiny_agent.read_record(path)
        assert str(raised.value) == line
    with pytest.raises(tiny_agent.ConfigError) as raised:
        tiny_agent.read_record(record, limit=9)
    assert str(raised.value) == f"{record} is 10 bytes, more than a session holds (9); move it away"
    with pytest.raises(tiny_agent.ConfigError, match="1,234 bytes, more than a session holds \\(1,000\\)"):
        (tmp_path / "big.json").write_bytes(b"x" * 1_234)
        tiny_agent.read_record(tmp_path / "big.json", limit=1_000)
    assert open_descriptors() == opened
    assert tiny_agent.read_record(record) == "é" * 5  # the limit by default: SESSION_LIMIT


def test_a_record_that_grows_after_it_was_measured_is_read_only_up_to_the_limit(tmp_path, monkeypatch):
    """The limit holds at the read too, not only at the size fstat reported a moment before."""
    record = tmp_path / "session-1.json"
    record.write_text("x" * 20)
    measured = os.fstat

    def smaller(fd):
        info = measured(fd)
        return os.stat_result((*info[:6], 5, *info[7:10]))
    monkeypatch.setattr(os, "fstat", smaller)
    assert tiny_agent.read_record(record, limit=10) == "x" * 10


def session_file(tmp_path, **fields):
    path = tmp_path / "session-1.json"
    path.write_text(json.dumps({"version": 2, "strategy": "sawtooth", "messages": [{"role": "user", "content": "go"}],
                                **fields}))
    return path


DAMAGED = {  # what a saved session holds -> what the one line says after "(", the file named before it
    "a list": ([], "it holds a list, not an object"),
    "version 3": ({"version": 3, "messages": []}, "it is version 3 of the format; this agent reads 1 and 2"),
    "version '2'": ({"version": "2", "messages": []}, "it is version '2' of the format; this agent reads 1 and 2"),
    "no messages": ({"messages": None}, "messages must be a list of dicts, not NoneType"),
    "an unknown strategy": ({"strategy": "magic"}, "unknown strategy 'magic'"),
    "a strategy not text": ({"strategy": 7}, "unknown strategy 7"),
    "an archive not text": ({"archive": 7}, "archive is not a path"),
    "a long strategy name": ({"strategy": "s" * 120}, "unknown strategy '" + "s" * 82 + "…"),  # 100 characters
    "a state field of another type": ({"state": {"summary": 7}}, "state field 'summary' is a int, not a str"),
    "a tool result without its call's id": ({"messages": [{"role": "tool", "content": "x"}]},
                                            "message 0: its content, tool_call_id or tool calls are not what a server sends"),
    "requests sent not a list": ({"sent": {}}, "sent is not a list of [messages, tokens] pairs"),
    "a request sent of three numbers": ({"sent": [[3, 100], [4, 120, 7]]}, "sent is not a list of [messages, tokens] pairs"),
    "a request sent not numbers": ({"sent": [[3, "100"]]}, "sent is not a list of [messages, tokens] pairs"),
}


@pytest.mark.parametrize("held, said", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_session_is_one_line_naming_the_file_and_what_is_wrong(tmp_path, held, said):
    path = tmp_path / "session-1.json"
    path.write_text(json.dumps(held if isinstance(held, list) else {"version": 2, "strategy": "sawtooth", "messages": [
        {"role": "user", "content": "go"}], **held}))
    before = path.read_bytes()
    with pytest.raises(tiny_agent.ConfigError) as raised:
        tiny_agent.read_session(path)
    assert str(raised.value) == f"{path} is damaged and was left untouched ({said}); move it away to start afresh"
    assert path.read_bytes() == before


def test_a_session_of_either_version_reads_with_its_defaults(tmp_path):
    """Version 1 (no strategy, no state) and 2; no version reads as 2; an archive may be absent."""
    for fields in ({"version": 1}, {}, {"version": 2, "archive": None}, {"archive": ""}):
        path = tmp_path / "session-1.json"
        path.write_text(json.dumps({"messages": [{"role": "user", "content": "go"}], **fields}))
        data = tiny_agent.read_session(path)
        assert data["strategy"] == "sawtooth" and data["state"] is None and data["sent"] == []
        assert data["messages"] == [{"role": "user", "content": "go"}]
    path.write_text(json.dumps({"strategy": "hybrid", "messages": [], "archive": "/a/b.jsonl",
                                "state": {"summary": "s", "pinned": ["Never push."]}, "sent": [[3, 100], [5, 180]]}))
    data = tiny_agent.read_session(path)
    assert data["strategy"] == "hybrid" and data["archive"] == "/a/b.jsonl" and data["sent"] == [[3, 100], [5, 180]]
    assert data["state"] == compact.CompactState(summary="s", pinned=["Never push."])


def test_a_session_is_saved_owner_only_as_the_agent_reads_it(tmp_path, monkeypatch):
    """What save_session writes: version 2, the strategy, the history as sent (its own characters),
    the compaction's state and the archive's path; the temporary file beside it, not in /tmp."""
    elsewhere = tmp_path / "tmp"
    elsewhere.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))
    config = tiny_agent.load_config()
    session = tiny_agent.new_session(config, archive_dir=tmp_path / "archive")
    session.messages.append({"role": "user", "content": "café"})
    session.compaction.state.summary = "résumé"
    path = tmp_path / "records" / "session-1.json"
    path.parent.mkdir()
    assert tiny_agent.save_session(session, config, path) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and os.listdir(elsewhere) == []
    assert '"café"' in path.read_text(encoding="utf-8")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["version"] == 2 and data["strategy"] == session.compaction.name
    assert data["messages"] == session.messages and data["state"]["summary"] == "résumé"
    assert data["archive"] == str(session.compaction.archive.path)
    assert tiny_agent.read_session(path)["messages"] == session.messages


def test_a_compaction_without_state_or_archive_is_saved_with_none_for_them(tmp_path):
    """save_session reads only the compaction's name, state, archive and the requests it sent (the
    page's sawtooth): a stand-in without state (a strategy of one's own) is saved with "state": null,
    and read back."""
    config = tiny_agent.load_config()
    session = tiny_agent.new_session(config)
    session.compaction = SimpleNamespace(name="none", state=None, archive=None, sent=[[3, 120]])
    path = tmp_path / "records" / "session-1.json"
    path.parent.mkdir()
    assert tiny_agent.save_session(session, config, path) == path
    data = json.loads(path.read_text())
    assert data["state"] is None and data["archive"] is None and data["strategy"] == "none"
    assert data["sent"] == [[3, 120]]
    assert tiny_agent.read_session(path)["state"] is None


def test_a_first_save_that_fails_says_nothing_is_saved_yet(tmp_path, monkeypatch, capsys):
    config = tiny_agent.load_config()
    session = tiny_agent.new_session(config)
    path = tmp_path / "records" / "session-1.json"
    path.parent.mkdir()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    assert tiny_agent.save_session(session, config, path) is None
    assert capsys.readouterr().out == ("[session] could not save session-1.json (No space left on device): nothing is "
                                       "saved yet; the run goes on\n")
    assert os.listdir(path.parent) == []


# --- The reply reader, and the agent's own secrets ----------------------------------------------


def test_layer_1s_reader_keeps_ids_names_and_arguments_and_makes_up_what_is_missing():
    """assistant_message, field by field: a usable id kept, any other made up as call_ and 12 hex
    digits; arguments "{}" when none came; the content text, or "" when it is not text."""
    reply = tiny_agent.read_reply(json.dumps({"choices": [{"message": {"content": ["not text"], "tool_calls": [
        {"id": "c1", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
        {"id": "", "function": {"name": "read_file", "arguments": None}},
        {"id": 7, "function": {"name": "read_file", "arguments": ""}},
        {"function": {"name": "recall"}}]}}]}))
    assert reply["role"] == "assistant" and reply["content"] == ""
    calls = reply["tool_calls"]
    assert [c["type"] for c in calls] == ["function"] * 4 and calls[0]["id"] == "c1"
    assert all(re.fullmatch(r"call_[0-9a-f]{12}", c["id"]) for c in calls[1:]) and len({c["id"] for c in calls}) == 4
    assert [c["function"] for c in calls] == [{"name": "bash", "arguments": '{"command": "ls"}'},
                                             {"name": "read_file", "arguments": "{}"},
                                             {"name": "read_file", "arguments": "{}"},
                                             {"name": "recall", "arguments": "{}"}]
    assert tiny_agent.read_reply(json.dumps({"choices": [{"message": {"content": "hi \udcff"}}]})) == {
        "role": "assistant", "content": "hi \ufffd"}  # no tool_calls key without calls; text made sendable
    sent = {"choices": [{"message": {"content": "x" * 200, "tool_calls": [{"id": "c1", "function": "bash"}]}}]}
    with pytest.raises(tiny_agent.ServerReplyError) as raised:
        tiny_agent.read_reply(json.dumps(sent))
    assert str(raised.value) == "tool calls that are not named functions: " + tiny_agent.printable(
        sent["choices"][0]["message"], 120)


@pytest.mark.parametrize("sent", ['{"choices": [{"message": "text"}]}', '{"choices": []}', "[1]", "nul",
                                  '{"choices": [{"message": "' + "long " * 40 + '"}]}'])
def test_a_body_without_a_message_object_is_one_line_quoting_it(sent):
    with pytest.raises(tiny_agent.ServerReplyError) as raised:
        tiny_agent.reply_body(sent)
    assert str(raised.value) == f"a reply that is not a chat completion: {tiny_agent.printable(sent, 120)}"


def test_the_agents_own_secret_of_eight_characters_or_more_is_masked_by_its_name(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "12345678")
    monkeypatch.setenv("DB_PASSWORD", "hunter2!x")
    monkeypatch.setenv("SHORT_KEY", "1234567")  # seven characters: too common to mask
    monkeypatch.setenv("KEYRING_PATH", "/home/me/keyring")  # KEY not at the end: not a secret
    assert tiny_agent.own_secrets_masked("t=12345678 p=hunter2!x s=1234567 k=/home/me/keyring") == (
        "t=[GITHUB_TOKEN masked] p=[DB_PASSWORD masked] s=1234567 k=/home/me/keyring")


def test_a_secret_literal_after_a_secret_like_name_is_masked_and_the_name_stays():
    """SECRET_VALUE's two forms: a quoted literal after a name (JSON, Python) and a NAME=value line."""
    assert compact.mask_secrets('{"api_key": "abcd1234efgh"}') == '{"api_key": "[secret masked]"}'
    assert compact.mask_secrets("password = 'correct-horse'") == "password = '[secret masked]'"
    assert compact.mask_secrets("export DB_TOKEN=abcdefgh123\nok") == "export DB_TOKEN=[secret masked]\nok"
    assert compact.mask_secrets('token = request.GET.get("token")') == 'token = request.GET.get("token")'
    assert compact.mask_secrets({"content": ["sk-" + "a" * 20, 3]}) == {"content": ["[secret masked]", 3]}


def test_an_archive_in_a_new_folder_is_owner_only_and_named_by_the_time_and_process(tmp_path):
    archive = Archive.in_folder(tmp_path / "records" / "archive")
    assert stat.S_IMODE((tmp_path / "records" / "archive").stat().st_mode) == 0o700
    assert re.fullmatch(rf"session-\d{{8}}-\d{{6}}-{os.getpid()}\.jsonl", archive.path.name)
    assert archive.path.parent == tmp_path / "records" / "archive"
    assert Archive.in_folder(tmp_path / "records" / "archive", "s").path.name == "session-s.jsonl"  # again: no error
    assert archive.count() == 0 and archive.records() == [] and not archive.path.exists()
    archive.append([{"role": "user", "content": "a\nb"}, {"role": "user", "content": "c"}], 3)
    assert archive.count() == 2 and stat.S_IMODE(archive.path.stat().st_mode) == 0o600
    assert archive.records() == [{"compaction": 3, "message": {"role": "user", "content": "a\nb"}},
                                 {"compaction": 3, "message": {"role": "user", "content": "c"}}]
    assert archive.append([{"role": "user", "content": "d"}], 4) == 2  # the number of its first record


@pytest.fixture
def ascii_locale():
    """The C locale for this test (ASCII, as on a bare server): a file opened without an encoding
    would be written in it; the agent's own files are UTF-8 whatever the locale."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    yield
    locale.setlocale(locale.LC_CTYPE, before)


def test_the_session_and_the_archive_are_utf_8_whatever_the_locale(tmp_path, ascii_locale):
    config = tiny_agent.load_config()
    session = tiny_agent.new_session(config, archive_dir=tmp_path / "archive")
    session.messages.append({"role": "user", "content": "café ☕"})
    path = tmp_path / "records" / "session-1.json"
    path.parent.mkdir()
    assert tiny_agent.save_session(session, config, path) == path
    assert tiny_agent.read_session(path)["messages"][-1]["content"] == "café ☕"
    archive = Archive.in_folder(tmp_path / "archive", "s")
    archive.append([{"role": "user", "content": "café ☕"}], 1)
    assert archive.records()[0]["message"]["content"] == "café ☕" and "café ☕" in archive.search("café")
    assert '"café ☕"' in archive.path.read_text(encoding="utf-8")  # as written, not \u escapes: grep finds it


# --- The approval checker's reasons ----------------------------------------------------------------
NOT_PROVED = "it is not a read-only program's plain words and simple quotes joined by |, && or ||"


@pytest.mark.parametrize("command, why", [
    ("> x", f"from character 1 (> x) {NOT_PROVED}"),  # no program at all
    ("cat<x", f"from character 1 (cat<x) {NOT_PROVED}"),  # a known program, glued to a redirection
    ("cat 'a'b", f"from character 8 (b) {NOT_PROVED}"),  # a word that goes on past its quote: no new program
    ("echo ok; " + "x" * 30, f"from character 8 (; xxxxxxxxxxxxxxxxxx…) {NOT_PROVED}"),  # 20 characters shown
    ("cat a | rm x", "`rm` is not a known read-only program"),
])
def test_the_reason_says_where_the_proof_stopped_and_names_a_program_only_after_a_joiner(command, why):
    assert tiny_agent.needs_asking(command) == why


# --- The engine's cut and tail: find_cut, groups, find_cut_within, is_cut_of, pin ------------------


def say(role: str, text: str = "x") -> dict:
    return {"role": role, "content": text}


def bash_call(k: int) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}


def bash_result(k: int) -> dict:
    return {"role": "tool", "tool_call_id": f"c{k}", "content": "out"}


def test_find_cut_keeps_at_least_one_message_and_steps_back_only_over_tool_results():
    """The cut: `keep_recent` from the end (one at least), back over results to their call, never
    before `head`, and a list that starts with results stops at `head`."""
    talk = [say("user"), say("assistant"), say("user")]
    assert compact.find_cut(talk, 1, 0) == 2 and compact.find_cut(talk, 0, 0) == 2
    assert compact.find_cut(talk, 2, 0) == 1 and compact.find_cut(talk, 9, 1) == 1
    calls = [say("user"), say("user"), bash_call(1), bash_result(1), bash_result(1)]
    assert compact.find_cut(calls, 2, 0) == 2 and compact.find_cut(calls, 1, 0) == 2
    assert compact.find_cut([bash_result(1), bash_result(1)], 1, 0) == 0  # nothing before them: the head
    assert compact.find_cut([say("system"), bash_result(1), bash_result(1)], 1, 1) == 1


def test_groups_are_a_call_with_its_results_or_one_message_the_oldest_first():
    messages = [say("system"), say("user"), bash_call(1), bash_result(1), bash_result(1), say("assistant"), bash_call(2), bash_result(2)]
    assert compact.groups(messages, 1) == [(1, 2), (2, 5), (5, 6), (6, 8)]
    assert compact.groups(messages) == [(0, 1), (1, 2), (2, 5), (5, 6), (6, 8)]
    assert compact.groups(messages, 8) == [] and compact.groups([]) == []


def test_find_cut_within_drops_the_oldest_whole_groups_until_the_rest_takes_half_of_max_tokens():
    """Exact sizes: the tail keeps groups while they pass half of `max_tokens`, the newest always;
    no `max_tokens`, no limit; an empty list cuts at `head`."""
    messages = [say("system"), say("user", "a"), say("assistant", "b " * 300), bash_call(1), bash_result(1)]
    (s1, s2), s3 = map(compact.message_tokens, messages[1:3]), sum(map(compact.message_tokens, messages[3:]))
    assert s1 < s3 < s2
    within = compact.find_cut_within
    assert within(messages, 4, 1, None) == 1 and within(messages, 4, 1, 0) == 1
    assert within(messages, 4, 1, 2 * (s1 + s2 + s3)) == 1  # exactly half: stays
    assert within(messages, 4, 1, 2 * (s2 + s3)) == 2  # the oldest goes, the rest is exactly half
    assert within(messages, 4, 1, 2 * s3) == 3  # both older groups go, each by its own size
    assert within(messages, 4, 1, 2 * s3 + 1) == 3 and within(messages, 4, 1, 2) == 3  # never the newest
    assert within(messages, 1, 1, 2) == 3  # one group: nothing to drop
    assert within([], 6, 0, 100) == 0 and within([say("system")], 6, 1, 100) == 1


def test_is_cut_of_wants_a_text_over_240_characters_and_a_shorter_cut_with_its_first_and_last_60():
    text = "".join(chr(ord("a") + k % 26) for k in range(241))
    cut = text[:60] + "\n[… cut …]\n" + text[-60:]
    assert compact.is_cut_of(cut, text)
    assert not compact.is_cut_of(cut[:-1] + "?", text)  # the tail not kept
    assert not compact.is_cut_of("?" + cut[1:], text)  # the head not kept
    assert not compact.is_cut_of(text[:60] + "?" * 121 + text[-60:], text)  # as long as the text: no cut
    short = text[:240]
    assert not compact.is_cut_of(short[:60] + "…" + short[-60:], short)  # 240 characters: too short to tell
    assert not compact.is_cut_of(short, short)
    shorter = text[:200]
    assert not compact.is_cut_of(shorter[:60] + shorter[-60:], shorter)


def test_pin_adds_in_order_and_a_near_duplicate_takes_the_older_wordings_place():
    assert compact.pin(["Never push.", "Use tabs."], ["never  PUSH.", "Run tests 3 times."]) == [
        "never  PUSH.", "Use tabs.", "Run tests 3 times."]
    assert compact.pin([], []) == [] and compact.pin(["Use tabs."], []) == ["Use tabs."]


# --- The one cutter and who calls it: find_constraints, cut_over, cut_text ----------------------------


def long_text(rule: str = "Never push to main.", error: str = "ValueError: bad value") -> str:
    """100 short lines, a rule at line 45 and an error at line 55 (both in the part a cut of 40 and
    40 lines takes out)."""
    rows = [f"line {k}" for k in range(100)]
    rows[45], rows[55] = rule, error
    return "\n".join(rows)


def test_cut_over_cuts_only_what_passes_over_keeping_a_users_rules_and_an_outputs_errors():
    text = long_text()
    n = compact.text_tokens(text)
    user, tool = say("user", text), {"role": "tool", "tool_call_id": "c1", "content": text}
    messages = [user, tool]
    out = compact.cut_over(messages, n - 1, why="was {n} tokens")
    assert out is not messages and out[0]["role"] == "user" and out[1]["tool_call_id"] == "c1"
    assert "Never push to main." in out[0]["content"] and "ValueError" not in out[0]["content"]
    assert "ValueError: bad value" in out[1]["content"] and "Never push" not in out[1]["content"]
    assert f"[… 19 lines cut: was {n} tokens …]" in out[1]["content"]
    assert compact.cut_over(messages, n) is messages  # exactly `over`: not passed
    kept = compact.cut_over(messages, n - 1, keep={id(user)})
    assert kept[0] is user and kept[1]["content"] != text
    assert compact.cut_over([user], 0, keep={id(user)}) == [user]
    assert compact.cut_over([tool], n - 1)[0]["content"].split("\n")[40] == "[… 19 lines cut …]"  # no why: no note
    short = compact.cut_over([tool], n - 1, to=100)[0]["content"]
    assert "chars cut" in short and compact.text_tokens(short) <= 100
    assert compact.cut_over([tool], n - 1, lines=(2, 2))[0]["content"].split("\n")[:3] == [
        "line 0", "line 1", "[… 95 lines cut …]"]


def test_find_constraints_keeps_a_users_rules_once_in_their_newest_wording():
    messages = [say("user", "Fix it. Never push to main."), say("tool", "Never trust this."),
                say("user", "never push to MAIN. Thanks.")]
    assert compact.find_constraints(messages) == ["never push to MAIN."]


def test_cut_text_keeps_the_first_and_last_lines_and_the_errors_between_them_the_first_5_and_last_15():
    rows = [f"row {k}" for k in range(200)]
    errors = list(range(50, 150, 4))  # 25 error lines in the middle (rows 40 to 159), one of 400 characters
    for k in errors:
        rows[k] = f"ValueError: {k}"
    rows[errors[-1]] = "ValueError: " + "v" * 400
    kept = [rows[k][:300] for k in errors[:5] + errors[-15:]]
    assert compact.cut_text("\n".join(rows), 10**6, "why") == "\n".join(
        [*rows[:40], "[… 100 lines cut: why …]", *kept, *rows[160:]])
    assert compact.cut_text("\n".join(rows), 10**6, lines=(2, 3)).split("\n")[:3] == ["row 0", "row 1", "[… 175 lines cut …]"]
    assert compact.cut_text("\n".join(rows), 10**6, lines=(2, 3)).split("\n")[-3:] == rows[-3:]
    for n in (3, 20, 21):  # up to 20 error lines are kept all; of 21, the first 5 and the last 15
        found = [f"ValueError: {k}" for k in range(n)]
        few = [f"row {k}" for k in range(40)] + found + [f"row {k}" for k in range(40)]
        assert compact.cut_text("\n".join(few), 10**6).split("\n")[40:] == [
            f"[… {max(0, n - 20)} lines cut …]", *(found if n <= 20 else found[:5] + found[-15:]), *few[-40:]]
    for lines in (80, 50):  # within both limits: the text itself
        text = "\n".join(f"row {k}" for k in range(lines))
        assert compact.cut_text(text, 10**6) == text
    exact = "one two three four five"
    assert compact.cut_text(exact, compact.text_tokens(exact)) == exact


@pytest.mark.parametrize("tokens", [200, 1_000, 2_000])
def test_cut_text_of_a_few_enormous_lines_keeps_characters_of_each_end_that_fit_and_the_errors_between(tokens):
    """About three characters a token, half for each end, shrunk by a fifth until the cut fits with
    20 tokens to spare; the error lines between them (each at most 300 characters, all of them at
    most 2,000 characters or 1.5 a token, the newest) stay."""
    errors = [f"ValueError: {k} " + "v" * 140 for k in range(30)] + ["E   " + "e" * 400]
    text = "\n".join([" ".join(f"head{k}" for k in range(4_000)), *errors, " ".join(f"tail{k}" for k in range(4_000))])
    out = compact.cut_text(text, tokens, "why")
    kept = "".join(e[:300] + "\n" for e in errors)[-min(2_000, tokens * 3 // 2):]
    half = min(len(text) // 2, max(50, (tokens * 3 - len(kept)) // 2))
    while half > 50 and compact.text_tokens(text[:half] + kept + text[-half:]) + 20 > tokens:
        half = int(half * 0.8)
    assert out == f"{text[:half]}\n[… {len(text) - 2 * half:,} chars cut: why …]\n{kept}{text[-half:]}"
    assert compact.text_tokens(out) <= tokens and half > 50


def test_cut_text_of_a_short_text_over_a_tiny_budget_keeps_50_characters_of_each_end():
    text = " ".join(f"w{k}" for k in range(100))
    out = compact.cut_text(text, 10)
    assert out == f"{text[:50]}\n[… {len(text) - 100:,} chars cut …]\n{text[-50:]}"


def test_cut_text_starts_from_half_the_text_or_three_characters_a_token_and_stops_at_50():
    """Digits two characters a token: the text's half is the first estimate; a budget the first
    estimate fits with exactly 20 tokens to spare keeps it; one that needs 51 characters shrinks once
    more (to 40: the 50 is where shrinking stops, not a floor)."""
    digits = " ".join(str(k % 10) for k in range(400))
    tokens = compact.text_tokens(digits) - 10
    assert len(digits) < 3 * tokens
    half = len(digits) // 2
    while compact.text_tokens(digits[:half] + digits[-half:]) + 20 > tokens:
        half = int(half * 0.8)
    assert compact.cut_text(digits, tokens).split("\n")[0] == digits[:half]
    prose = " ".join(["the quick brown fox jumps over the lazy dog"] * 300)
    exact = next(t for t in range(40, 600) if compact.text_tokens(prose[:3 * t // 2] + prose[-(3 * t // 2):]) + 20 == t)
    assert compact.cut_text(prose, exact).split("\n")[0] == prose[:3 * exact // 2]
    words = " ".join(f"w{k}" for k in range(2_000))
    assert compact.cut_text(words, 34).split("\n")[0] == words[:40]  # 3 * 34 // 2 = 51, over: shrunk to 40


# --- The engine's tail, when a step is due, what it archives; the pinned rules -------------------


def stand_in_engine(keep_recent: int, trigger: float = 0.5, tail_share: float = 0.25) -> SimpleNamespace:
    """What boundaries reads of an engine: an effective window of 100 tokens a message (so a window
    read of another list shows)."""
    return SimpleNamespace(budget=SimpleNamespace(effective=lambda messages: 100 * len(messages)),
                           keep_recent=keep_recent, trigger=trigger, tail_share=tail_share)


def test_boundaries_keep_the_newest_groups_within_the_tails_share_and_the_newest_always():
    """keep_recent 0: whole groups, the newest first, while they take at most tail_share of the
    window (exactly that share stays); the newest group stays even past it."""
    messages = [say("system"), say("user", "a " * 40), say("assistant", "b " * 40), say("user", "c " * 40)]
    s1, s2, s3 = map(compact.message_tokens, messages[1:])
    effective = 100 * len(messages)
    assert compact.boundaries(stand_in_engine(0, tail_share=(s2 + s3) / effective), messages) == (1, 2)
    assert compact.boundaries(stand_in_engine(0, tail_share=(s2 + s3 - 1) / effective), messages) == (1, 3)
    assert compact.boundaries(stand_in_engine(0, tail_share=1 / effective), messages) == (1, 3)  # the newest always
    assert compact.boundaries(stand_in_engine(0, tail_share=1.0), messages) == (1, 1)
    assert compact.boundaries(stand_in_engine(0, tail_share=1.0), messages[1:]) == (0, 0)


def test_boundaries_with_keep_recent_cut_within_half_of_the_trigger_and_take_the_engines_by_default():
    messages = [say("system"), say("user", "a " * 40), say("assistant", "b " * 40), say("user", "c " * 40)]
    s3 = compact.message_tokens(messages[3])
    effective = 100 * len(messages)
    tight = stand_in_engine(3, trigger=2 * s3 / effective)  # half of trigger * effective: the newest alone
    assert compact.boundaries(tight, messages) == (1, 3)
    assert compact.boundaries(tight, messages, keep_recent=2) == (1, 3)
    assert compact.boundaries(stand_in_engine(3, trigger=1.0), messages) == (1, 1)
    assert compact.boundaries(stand_in_engine(2, trigger=1.0), messages) == (1, 2)
    assert compact.boundaries(stand_in_engine(2, trigger=1.0), messages, keep_recent=3) == (1, 1)
    assert compact.boundaries(stand_in_engine(2, trigger=1.0, tail_share=1.0), messages, keep_recent=0) == (1, 1)


def test_a_step_is_due_when_forced_every_call_or_past_its_share_unless_stuck():
    engine = Compactor()

    def due(at=0.5, **fields):
        return compact.due_at(engine, at, compact.Pass(**{"level": 0, "size": 50, "effective": 100, **fields}))
    assert due(level=1) and due(level=1, stuck=True) and due(0.0, size=0) and due(0.0, stuck=True)
    assert not due() and due(size=51) and not due(size=51, stuck=True) and not due(1.0, size=51)
    assert due(too_many=True) and not due(too_many=True, stuck=True) and not due(size=0, effective=0)
    assert due(0.4) and due(0.4, too_many=True) and not due(size=0)


def test_what_leaves_is_archived_once_with_the_next_compactions_number_and_its_record_noted(tmp_path):
    archive = Archive.in_folder(tmp_path / "archive", "s")
    archive.append([say("user", "before")], 1)
    engine = Compactor(archive=archive)
    engine.state.compactions = 2
    a, b, c, d, e = (say("user", t) for t in "abcde")
    run = compact.Pass(records={id(b): 0})
    compact.archived(engine, [a, b, c, d, e], [a, d], run)
    assert archive.records()[1:] == [{"compaction": 3, "message": c}, {"compaction": 3, "message": e}]
    assert run.records == {id(b): 0, id(c): 1, id(e): 2}
    compact.archived(engine, [a, d], [a, d], run)  # nothing leaves: nothing written
    assert archive.count() == 3
    fresh = Compactor(archive=Archive.in_folder(tmp_path / "other", "s"))
    compact.archived(fresh, [a], [a], compact.Pass())
    assert not fresh.archive.path.exists()
    none = Compactor(archive=None)
    run = compact.Pass()
    compact.archived(none, [a, b], [a], run)
    compact.archived(none, [a], [a], run)
    assert run.records == {id(b): None}


def test_the_pinned_rules_within_their_budget_newest_last_and_a_line_for_the_rest():
    """Each rule shown costs its tokens and 2 more; the rules that do not fit are counted on one line."""
    rules = [f"Never touch file_{k}.py." for k in range(5)]
    each, rest = compact.text_tokens(rules[0]), "earlier constraints, not shown for space"
    where = "; the recall tool finds them in the archive"
    assert compact.pins_text([], 100) == ""
    assert compact.pins_text(rules, 10**6) == compact.PINS_NOTE + "\n" + "\n".join(f"- {r}" for r in rules)
    assert compact.pins_text(rules, 3 * each + 4) == compact.PINS_NOTE + "\n" + "\n".join(
        f"- {r}" for r in rules[2:]) + f"\n- … and 2 {rest}{where}"
    assert compact.pins_text(rules, 3 * each + 3).endswith(f"\n- … and 3 {rest}{where}")
    assert compact.pins_text(rules, 3 * each + 4, archived=False).endswith(f"- … and 2 {rest}")
    assert compact.pins_text(rules, each - 1) == compact.PINS_NOTE + f"\n\n- … and 5 {rest}{where}"


def test_carry_user_words_takes_the_task_the_latest_the_others_and_the_rules_of_what_leaves():
    """The task once (the first request, when it leaves), the latest (even kept), the others that
    leave with their spaces collapsed, at most SAID_CHARS each and the newest SAID, and the rules of
    the requests that leave only."""
    first = say("user", "Fix the clock bug. Never push to main.")
    others = [say("user", f"request   {k}\n  now") for k in range(10)]
    long = say("user", "x" * 700)
    kept = say("user", "Go on. Always use tabs.")
    messages = [say("system"), first, say("assistant", "ok"), *others, long, kept]
    state = compact.CompactState()
    compact.carry_user_words(state, messages, [messages[0], kept])
    assert state.task == first["content"] and state.latest == kept["content"]
    assert state.said == [f"request {k} now" for k in range(3, 10)] + ["x" * compact.SAID_CHARS]
    assert state.pinned == ["Never push to main."]
    compact.carry_user_words(state, [say("user", "Another task."), say("user", "Never push to main. Avoid sudo.")], [])
    assert state.task == first["content"] and state.latest == "Never push to main. Avoid sudo."
    assert state.said[-2:] == ["Another task.", "Never push to main. Avoid sudo."]
    assert state.pinned == ["Never push to main.", "Avoid sudo."]
    fresh = compact.CompactState()
    a, b = say("user", "The task, kept. Always use tabs."), say("user", "This one leaves.")
    compact.carry_user_words(fresh, [a, b], [a])
    assert fresh.task == "" and fresh.latest == "This one leaves." and fresh.said == ["This one leaves."]
    assert fresh.pinned == []  # the kept request's rule is not looked at
    compact.carry_user_words(fresh, [b, say("user", "Never use sudo.")], [b])
    assert fresh.task == "" and fresh.said == ["This one leaves.", "Never use sudo."] and fresh.pinned == ["Never use sudo."]
    compact.carry_user_words(fresh, [], [])
    assert fresh.latest == "Never use sudo."


# --- The file tools: which paths they take, and how a write lands -------------------------------


@pytest.mark.parametrize("path, said", [
    ("", "path '' must be relative to the workspace"),
    (7, "path 7 must be relative to the workspace"),
    ("/etc/passwd", "path '/etc/passwd' must be relative to the workspace"),
    ("a\0b", "path 'a\\x00b' holds a null byte or a character that is not text; nothing was read or written"),
    ("a\ud800b", "path 'a\\ud800b' holds a null byte or a character that is not text; nothing was read or written"),
    ("../x", "path '../x' leads outside the workspace"),
    ("a/../../x", "path 'a/../../x' leads outside the workspace"),
    (".", "path '.' is the workspace folder itself, not a file"),
    ("a/..", "path 'a/..' is the workspace folder itself, not a file"),
])
def test_tool_path_refuses_each_path_that_is_not_a_file_of_the_workspace_in_its_own_words(tmp_path, path, said):
    with pytest.raises(tiny_agent.ToolError) as raised:
        tiny_agent.tool_path(tiny_agent.Workspace(root=tmp_path), path)
    assert str(raised.value) == said


def test_tool_path_resolves_dots_and_empty_names_by_name():
    assert tiny_agent.tool_path(tiny_agent.Workspace(root=Path("/w")), "./a//b/./../c.txt") == ["a", "c.txt"]


def test_no_tool_path_leads_into_the_agents_records_even_inside_the_workspace(tmp_path, state):
    """The `state` fixture puts the records in tmp_path/state: here inside the workspace."""
    (state / "tiny-agent" / "w").mkdir(parents=True)
    ws = tiny_agent.Workspace(root=tmp_path)
    for path in ("state/tiny-agent", "state/tiny-agent/w/session-1.json", "state/x/../tiny-agent/w"):
        with pytest.raises(tiny_agent.ToolError) as raised:
            tiny_agent.tool_path(ws, path)
        assert str(raised.value) == f"path {path!r} {tiny_agent.RECORDS}"
    assert tiny_agent.tool_path(ws, "state/notes.txt") == ["state", "notes.txt"]


@pytest.mark.parametrize("path", [".env", "sub/.env", ".git/config", "a/.git/hooks/pre-commit"])
def test_the_file_tools_read_the_users_settings_but_never_write_them(tmp_path, path):
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text("KEY=1\n")
    ws = tiny_agent.Workspace(root=tmp_path)
    assert tiny_agent.read_file(ws, path) == "KEY=1\n"
    for write in (lambda: tiny_agent.write_file(ws, path, "x"), lambda: tiny_agent.edit_file(ws, path, "1", "2")):
        with pytest.raises(tiny_agent.ToolError) as raised:
            write()
        assert str(raised.value) == f"path {path!r} is the user's settings (.env, .git): only the user changes them"
    assert (tmp_path / path).read_text() == "KEY=1\n"
    assert tiny_agent.tool_path(ws, path.replace(".env", ".envrc").replace(".git/", ".github/"), writing=True)


def test_a_write_keeps_a_files_mode_and_a_new_file_gets_0666_less_the_umask(tmp_path):
    """A file keeps its mode (0600 stays private, 0755 runs); the temporary file is gone."""
    ws, umask = tiny_agent.Workspace(root=tmp_path / "w"), os.umask(0o022)
    (tmp_path / "w").mkdir()
    try:
        assert tiny_agent.write_file(ws, "new.txt", "héllo") == "wrote 5 chars to new.txt"
        tiny_agent.write_file(ws, "sub/deeper/new.txt", "x")
    finally:
        os.umask(umask)
    assert (tmp_path / "w" / "new.txt").read_text() == "héllo" and (tmp_path / "w" / "sub/deeper/new.txt").read_text() == "x"
    assert stat.S_IMODE((tmp_path / "w" / "new.txt").stat().st_mode) == 0o644
    for mode in (0o600, 0o755):
        (tmp_path / "w" / f"{mode:o}").write_text("old")
        (tmp_path / "w" / f"{mode:o}").chmod(mode)
        tiny_agent.write_file(ws, f"{mode:o}", "new")
        assert (tmp_path / "w" / f"{mode:o}").read_text() == "new"
        assert stat.S_IMODE((tmp_path / "w" / f"{mode:o}").stat().st_mode) == mode
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["600", "755", "new.txt", "sub"]


def test_a_write_over_a_folder_a_fifo_or_a_link_is_refused_in_one_line(tmp_path):
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    (tmp_path / "file-link").symlink_to(tmp_path / "state")  # a link is refused whatever it leads to
    (tmp_path / "state" / "f").write_text("kept")
    (tmp_path / "link-to-file").symlink_to(tmp_path / "state" / "f")
    for name in ("dir", "pipe", "link", "file-link", "link-to-file"):
        with pytest.raises(tiny_agent.ToolError) as raised:
            tiny_agent.write_file(tiny_agent.Workspace(root=tmp_path), name, "x")
        assert str(raised.value) == f"{name} is not a regular file"
    assert (tmp_path / "link").is_symlink() and list((tmp_path / "dir").iterdir()) == []


def test_a_write_to_a_hard_link_of_a_record_is_refused_and_the_record_kept(tmp_path, state):
    record = state / "tiny-agent" / "w" / "session-1.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"version": 2}')
    (tmp_path / "work").mkdir()
    os.link(record, tmp_path / "work" / "s.json")
    with pytest.raises(tiny_agent.ToolError) as raised:
        tiny_agent.write_file(tiny_agent.Workspace(root=tmp_path / "work"), "s.json", "x")
    assert str(raised.value) == f"s.json {tiny_agent.RECORDS} (a hard link to one)"
    assert record.read_text() == '{"version": 2}' and os.path.samefile(record, tmp_path / "work" / "s.json")
    os.link(tmp_path / "work" / "s.json", tmp_path / "work" / "t.json")  # three names now
    with pytest.raises(tiny_agent.ToolError):
        tiny_agent.write_file(tiny_agent.Workspace(root=tmp_path / "work"), "t.json", "x")
    (tmp_path / "work" / "mine.txt").write_text("a")  # an ordinary hard link is written: the name replaced
    os.link(tmp_path / "work" / "mine.txt", tmp_path / "work" / "also.txt")
    tiny_agent.write_file(tiny_agent.Workspace(root=tmp_path / "work"), "also.txt", "b")
    assert (tmp_path / "work" / "also.txt").read_text() == "b" and (tmp_path / "work" / "mine.txt").read_text() == "a"


def test_a_write_whose_rename_fails_leaves_the_file_whole_and_no_temporary_one(tmp_path, monkeypatch):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "notes.txt").write_text("old")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(tiny_agent.os, "replace", full)
    monkeypatch.chdir(tmp_path)  # a temporary file looked for in the wrong folder would not be found
    with pytest.raises(OSError):
        tiny_agent.write_file(tiny_agent.Workspace(root=tmp_path / "w"), "notes.txt", "new")
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["notes.txt"] and (tmp_path / "w" / "notes.txt").read_text() == "old"


def test_a_link_planted_at_the_temporary_name_is_never_written_through(tmp_path, monkeypatch):
    """The temporary file is made new (O_EXCL) and never through a link (O_NOFOLLOW): with its
    random part known here, a link put at its name in advance stops the write, and nothing outside
    changes."""
    (tmp_path / "w").mkdir()
    (tmp_path / "outside.txt").write_text("mine")
    monkeypatch.setattr(tiny_agent.os, "urandom", lambda n: b"\0" * n)
    (tmp_path / "w" / ".notes.txt.00000000.tmp").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(FileExistsError):
        tiny_agent.write_file(tiny_agent.Workspace(root=tmp_path / "w"), "notes.txt", "x")
    assert (tmp_path / "outside.txt").read_text() == "mine" and not (tmp_path / "w" / "notes.txt").exists()


# --- The last resort: what it keeps, cuts and gives the summarizer ----------------------------------


def calling(*made: dict) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": list(made)}


def last_resort_of(history: list[dict], window: int, reserve: int, level: int = 1, focus: str | None = None,
                   summary: str = "## Progress\n- the earlier turns went fine") -> tuple[list[dict], list[list[str]]]:
    """What the last resort makes of `history` (called alone, compact now or as far as it goes at
    level 2, query_db a precise tool), and the texts each summarizer call read."""
    read = []

    def summarizer(messages, focus=None):
        read.append([compact.content_text(m) for m in messages])
        return summary
    engine = Compactor(context_window=window, reserved_output=reserve, summarize=summarizer, precise_tools=("query_db",))
    return compact.last_resort(engine, history, compact.begin(engine, history, focus, level, None)), read


def test_the_last_resort_keeps_precise_results_whole_and_cuts_the_turns_outputs_to_a_twentieth_of_the_room():
    """A window of 100,000 with 20,000 reserved: outputs of the latest turn over 1,000 tokens
    (SNIP_SHARE of the 80,000 tokens of room, divided by 4) are cut to 1,000, its long arguments
    shortened; a precise tool's call and result, earlier or not, stay word for word, and the
    summarizer reads only what leaves."""
    history = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix the clock bug."},
               calling(call("q1", "query_db", sql="select " + "x" * 500)), result("q1", tokens_exactly(1_500)),
               {"role": "assistant", "content": "Found the rows."}, {"role": "user", "content": "Now check the logs."},
               calling(call("b1", "bash", command="cat log " + "y" * 500), call("b2", "bash", command="ls")),
               result("b1", tokens_exactly(1_001)), result("b2", tokens_exactly(1_000))]
    out, read = last_resort_of(history, 100_000, 20_000, focus="the logs")
    assert read == [["Fix the clock bug.", "Found the rows."]]
    assert out[0] is history[0] and compact.is_summary(out[1]) and len(out) == 8
    assert "Focus of this compaction: the logs" in out[1]["content"]
    assert all(a is b for a, b in zip(out[2:5], [history[2], history[3], history[5]])) and out[7] is history[8]
    assert out[5]["tool_calls"][0]["function"]["arguments"] != history[6]["tool_calls"][0]["function"]["arguments"]
    assert out[5]["tool_calls"][1] is history[6]["tool_calls"][1]
    assert out[6]["content"] == compact.cut_text(history[7]["content"], 1_000, "what the last resort keeps of one output")


def test_the_last_resort_cuts_outputs_over_125_tokens_in_a_small_window():
    """SNIP_SHARE of 3,000 tokens of room, divided by 4, is 37: the floor of 125 tokens holds."""
    history = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix the clock bug."},
               {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Run it."},
               calling(call("b1", "bash", command="make"), call("b2", "bash", command="ls")),
               result("b1", tokens_exactly(126)), result("b2", tokens_exactly(125))]
    out, _ = last_resort_of(history, 4_000, 1_000)
    assert out[-2]["content"] == compact.cut_text(history[-2]["content"], 125, "what the last resort keeps of one output")
    assert out[-1] is history[-1] and out[-3] is history[4] and out[-4] is history[3] and out[-5] == compact.ACK


def test_the_last_resort_keeps_the_last_message_with_its_call_and_the_latest_request_and_no_copy():
    """The latest turn is the newest message and what it answers (find_cut with 1), not two; a
    precise group in that turn is kept once, where it stands."""
    base = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix the clock bug."},
            calling(call("b1", "bash", command="ls")), result("b1", "clock.py")]
    history = [*base, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Next."}]
    out, read = last_resort_of(history, 100_000, 20_000)
    assert out[2:] == [compact.ACK, history[-1]] and out[3] is history[-1] and read == [["Fix the clock bug.", "", "clock.py", "Done."]]
    history = [*base, {"role": "user", "content": "Query it."}, calling(call("q1", "query_db", sql="x")), result("q1", "1 row")]
    out, _ = last_resort_of(history, 100_000, 20_000)
    assert out[2:] == [compact.ACK, *history[-3:]] and all(a is b for a, b in zip(out[3:], history[-3:]))


def test_a_latest_turn_that_alone_does_not_fit_has_its_long_texts_cut_to_their_first_and_last_10_lines():
    """A reply of 4,000 tokens in a window of 3,000 tokens of room (over it, not twice over): cut to
    125 tokens, saying why; the user's request beside it stays whole. As far as it goes (level 2)
    a precise result still stays word for word."""
    plan = "\n".join(f"step {k}" for k in range(1_000))
    assert compact.text_tokens(plan) == 3_999
    history = [{"role": "system", "content": "You plan."}, {"role": "user", "content": "Plan it."},
               calling(call("q1", "query_db", sql="x")), result("q1", tokens_exactly(300)),
               {"role": "user", "content": "Write the plan. " + tokens_exactly(200)}, {"role": "assistant", "content": plan}]
    out, _ = last_resort_of(history, 4_000, 1_000)
    why = "this message alone would not fit the window"
    assert out[-1]["content"] == compact.cut_text(plan, 125, why, (10, 10))
    assert out[-1]["content"] not in (compact.cut_text(plan, 125, why, (11, 10)), compact.cut_text(plan, 125, why, (10, 11)))
    assert len(out) == 6 and out[0] is history[0] and all(a is b for a, b in zip(out[2:5], history[2:5]))
    out, _ = last_resort_of(history, 100_000, 20_000, level=2)
    assert out[2] is history[2] and out[3] is history[3]
    assert out[-1]["content"] == compact.cut_text(plan, 60, "cut to fit the window", (5, 5))


def test_a_summary_too_large_for_the_window_gives_way_to_a_note_and_the_users_words_without_extras():
    """The summary, then the latest turn: when both do not fit, the summary is a note that sends
    to the archive, and only the user's words stay below it (no focus line, the latest cut)."""
    history = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix the clock bug."},
               {"role": "assistant", "content": "Looking."}, {"role": "user", "content": "Go on."}]
    big = "## Progress\n" + "".join(f"- step {k} went fine\n" for k in range(400))
    out, _ = last_resort_of(history, 4_000, 1_000, focus="the clock", summary=big)
    text = out[1]["content"]
    assert "(The summary of the earlier turns did not fit the window; see the archive.)" in text and "step 7 " not in text
    assert "Focus of this compaction" not in text and "Fix the clock bug." in text
    assert out[2:] == [compact.ACK, history[-1]]


def test_summarize_gone_calls_the_summarizer_once_a_compaction_with_the_focus_and_says_when_it_stood_in(capsys):
    """The first call summarizes what leaves with the focus asked for; a second in the same compaction
    adds the offline summary of what else leaves below it; a summarizer that fails is replaced by
    the offline summary, the first line saying so."""
    seen = []

    def summarizer(messages, focus=None):
        seen.append((len(messages), focus))
        return "## Progress\n- the clock bug is found\n"
    engine = Compactor(summarize=summarizer)
    engine.guard.offline = lambda messages, focus=None: f"(offline: {len(messages)} messages, focus {focus})"
    gone = [{"role": "user", "content": "Fix the clock."}, {"role": "assistant", "content": "Looking."}]
    more = [{"role": "user", "content": "And the alarm."}]
    run = compact.Pass(focus="the clock")
    compact.summarize_gone(engine, gone, [], run)
    assert seen == [(2, "the clock")] and run.summarized is True
    first = engine.state.summary
    assert first.startswith("## Progress\n- the clock bug is found")
    compact.summarize_gone(engine, more, [], run)
    assert seen == [(2, "the clock")] and engine.state.summary == first.rstrip() + "\n\n(offline: 1 messages, focus the clock)"

    def failing(messages, focus=None):
        raise ConnectionError("down")
    engine = Compactor(summarize=failing)
    engine.guard.offline = lambda messages, focus=None: f"(offline: {len(messages)} messages, focus {focus})"
    compact.summarize_gone(engine, gone, [], compact.Pass(focus="the clock"))
    assert engine.state.summary == (f"(Compaction 1 replaced 2 messages, ~{compact.estimate_tokens(gone):,} tokens, turns 1-1; "
                                    "the summary model failed, so the summary below was extracted from the turns without it.)\n"
                                    "(offline: 2 messages, focus the clock)")
    assert "the summarizer failed (ConnectionError)" in capsys.readouterr().err


# --- As far as it goes: cut_everything -----------------------------------------------------------------


def test_cut_everything_cuts_each_long_message_to_60_tokens_and_arguments_over_200_characters_but_keeps_the_users():
    """The system prompt, the user's words and a precise group stay as they are, however long; a
    message of 61 tokens is cut, one of 60 is not; an output keeps its first and last 5 lines."""
    lines = "\n".join(f"line {k}" for k in range(100))
    history = [{"role": "system", "content": tokens_exactly(300)}, {"role": "user", "content": tokens_exactly(300)},
               calling(call("q1", "query_db", sql="w" * 400)), result("q1", tokens_exactly(300)),
               calling(call("b1", "bash", command="z" * 300), call("b2", "bash", command="y" * 186)),
               result("b1", lines), result("b2", tokens_exactly(61)), {"role": "assistant", "content": tokens_exactly(60)}]
    assert len(history[4]["tool_calls"][1]["function"]["arguments"]) == 201
    out = compact.cut_everything(history, ("query_db",))
    assert all(out[k] is history[k] for k in (0, 1, 2, 3, 7))
    why = "cut to fit the window"
    assert out[5]["content"] == compact.cut_text(lines, 60, why, (5, 5))
    assert out[5]["content"] not in (compact.cut_text(lines, 60, why, (6, 5)), compact.cut_text(lines, 60, why, (5, 6)))
    assert out[6]["content"] == compact.cut_text(history[6]["content"], 60, why, (5, 5))
    for made in out[4]["tool_calls"]:
        assert json.loads(made["function"]["arguments"])["command"].endswith(f"chars cut: {why}]")
    assert out[4]["tool_calls"][1]["function"]["arguments"] == json.dumps(
        {"command": "y" * 100 + f"…[86 chars cut: {why}]"}, ensure_ascii=False)


# --- The user's words under a summary: user_notes ------------------------------------------------------


def test_user_notes_show_the_task_the_other_requests_the_rules_and_the_latest_each_once():
    """In that order, each under its heading; a request equal to the task or the latest is not among
    the others, a rule a request already shows is not pinned again, and what the kept messages show
    is not repeated at all."""
    task, latest = "Fix the clock bug.", "Now the alarm. Never push to main."
    state = compact.CompactState(task=task, latest=latest, said=["Check the logs.", task, "Run the tests.", latest],
                                 pinned=["Never push to main.", "Always use tabs."])
    assert compact.user_notes(state, [], 1_000) == "\n\n".join([
        f"{compact.TASK_NOTE}\n```\n{task}\n```", f"{compact.SAID_NOTE}\n- Check the logs.\n- Run the tests.",
        compact.pins_text(["Always use tabs."], 1_000), f"{compact.LATEST_NOTE}\n```\n{latest}\n```"])
    kept = [{"role": "user", "content": latest}, {"role": "user", "content": "Check the logs. All of them."}]
    assert compact.user_notes(state, kept, 1_000) == "\n\n".join([
        f"{compact.TASK_NOTE}\n```\n{task}\n```", f"{compact.SAID_NOTE}\n- Run the tests.", compact.pins_text(["Always use tabs."], 1_000)])
    assert compact.user_notes(compact.CompactState(), [], 1_000) == ""
    assert compact.user_notes(compact.CompactState(task=task, latest=task), [], 1_000) == f"{compact.TASK_NOTE}\n```\n{task}\n```"


def test_rules_past_the_budget_are_counted_and_the_archive_named_only_when_there_is_one():
    rules = [f"Never touch file_{k}.py." for k in range(5)]
    state, budget = compact.CompactState(pinned=rules), compact.text_tokens(rules[-1])
    assert compact.user_notes(state, [], budget) == compact.pins_text(rules, budget, True)
    assert compact.user_notes(state, [], budget, archived=False) == (
        f"{compact.PINS_NOTE}\n- {rules[-1]}\n- … and 4 earlier constraints, not shown for space")


def test_the_other_requests_are_the_newest_that_fit_the_budget_at_2_tokens_more_each():
    said = ["Check the logs.", "Run the tests."]
    each = [compact.text_tokens(x) for x in said]
    state = compact.CompactState(said=said)
    assert compact.user_notes(state, [], sum(each) + 4) == f"{compact.SAID_NOTE}\n- Check the logs.\n- Run the tests."
    assert compact.user_notes(state, [], sum(each) + 3) == f"{compact.SAID_NOTE}\n- Run the tests."


def test_user_notes_cut_a_task_over_the_budget_keeping_its_rules_and_the_latest_only_when_not_whole():
    """A task of 30 lines within the budget stays verbatim; one token over, its first and last 10
    lines stay with the rules between them, and the cut says the archive holds it whole when there
    is one. The latest request is cut the same way only when even the last resort does not fit."""
    task = "\n".join(f"line {k}" if k != 15 else "Never delete the tests." for k in range(30))
    latest = task.replace("line", "the row")
    state, budget = compact.CompactState(task=task, latest=latest), compact.text_tokens(task)
    assert compact.text_tokens(latest) > budget
    assert compact.user_notes(state, [], budget) == f"{compact.TASK_NOTE}\n```\n{task}\n```\n\n{compact.LATEST_NOTE}\n```\n{latest}\n```"
    for archived, where in ((True, "the archive holds it whole"), (False, "")):
        cut, cut_latest = (compact.cut_text(t, budget - 1, where, (10, 10), compact.CONSTRAINT) for t in (task, latest))
        assert "Never delete the tests." in cut and "line 10\n" not in cut and "line 19\n" not in cut
        assert compact.user_notes(state, [], budget - 1, archived, whole=False) == (
            f"{compact.TASK_NOTE}\n```\n{cut}\n```\n\n{compact.LATEST_NOTE}\n```\n{cut_latest}\n```")
        assert compact.user_notes(state, [], budget - 1, archived) == (
            f"{compact.TASK_NOTE}\n```\n{cut}\n```\n\n{compact.LATEST_NOTE}\n```\n{latest}\n```")


# --- The engine's steps: apply --------------------------------------------------------------------------


def test_a_step_is_kept_when_it_frees_at_least_its_frees_tokens_and_what_it_took_is_noted():
    """Its name, the sizes before and after and the seconds it ran go in the report; a step that
    freed less is undone, its summary and turns count too."""
    history = [say("system", "s"), say("user", tokens_exactly(100)), say("assistant", "ok"), say("user", "go")]
    shorter = [history[0], say("user", "short"), *history[2:]]
    engine = Compactor()
    run = compact.begin(engine, history, None, 1, None)
    freed = engine.size(history, run) - engine.size(shorter, run)

    def trim(messages, run):
        engine.state.summary, engine.state.turns = "made by the step", 7
        return shorter
    clock = time.perf_counter()
    assert compact.apply(engine, compact.Step("trim", trim, 0, 0, frees=freed), history, run) is shorter
    took = time.perf_counter() - clock
    assert (engine.state.summary, engine.state.turns) == ("made by the step", 7)
    (name, before, after, seconds), = engine.state.report
    assert (name, before, after) == ("trim", engine.size(history, run), engine.size(shorter, run)) and 0 <= seconds <= took
    engine.state.summary, engine.state.turns = "", 0
    assert compact.apply(engine, compact.Step("trim", trim, 0, 0, frees=freed + 1), history, run) is history
    assert (engine.state.summary, engine.state.turns) == ("", 0) and len(engine.state.report) == 2


def test_a_step_run_every_call_that_did_nothing_does_not_hold_the_next_compaction_back():
    """A step past its share that frees nothing makes the engine wait until the history grows (the
    floor); one that runs every call (`at` 0) is not a try at compaction, and leaves no floor."""
    history = [say("system", "s"), say("user", "Fix the clock bug."), say("assistant", "ok"), say("user", "go")]
    for at, floor in ((0, False), (0.0001, True)):
        engine = Compactor(layers=(("reasoning", {"at": at, "until": 0}),))
        assert engine.compact(history) is history and engine.state.compactions == 0
        assert bool(engine.state.floor) is floor


def test_a_history_exactly_at_the_window_that_nothing_changed_is_not_a_compaction():
    history = [say("system", "s"), say("user", "Fix the clock bug."), say("assistant", "ok")]
    engine = Compactor(layers=("reasoning",))
    run = compact.begin(engine, history, None, 0, None)
    run.effective = run.size
    assert compact.finish(engine, history, history, run) is history and engine.state.compactions == 0 and engine.state.log == []
    run.effective = run.size - 1
    with pytest.raises(compact.ContextOverflowError):
        compact.finish(engine, history, history, run)


def test_a_compaction_that_fits_exactly_is_counted_with_what_it_saved_and_a_floor_only_past_the_trigger():
    """The window itself fits; a list as large as before saved 0 tokens; past the trigger the next
    compaction waits for 5% growth, at the trigger exactly (or under) it does not wait."""
    history = [say("system", "s"), say("user", "Fix the clock bug."), say("assistant", "ok")]
    engine = Compactor(trigger=0.5, layers=("reasoning",))
    for room, floor in ((1, True), (2, False)):
        run = compact.begin(engine, history, None, 0, None)
        out = [dict(m) for m in history]  # another list, as large
        run.effective = room * engine.size(out, run)
        assert compact.finish(engine, history, out, run) is out and engine.state.tokens_saved == 0
        assert engine.state.floor == (int(engine.size(out, run) * compact.GROWTH_BEFORE_RETRY) if floor else 0)
        assert engine.state.log[-1]["after_tokens"] == engine.size(out, run)
    assert engine.state.compactions == 2
