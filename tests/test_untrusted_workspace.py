"""The workspace is untrusted: the agent's settings, records and secrets come from its user, never
from the folder it works in. Each promise is attacked from outside: the real command line with
stdin not a terminal (so "asked" means refused), a scripted server, hostile workspaces; inside
bubblewrap and without it (`mode`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, chat_response
from test_repl import KEY, Script, agent_env, run_agent, server, tool_call, workspace  # noqa: F401
from test_shell import mode, path_without_bwrap  # noqa: F401

import tiny_agent

NOT_ALLOWED = "error: the user did not allow this command ("


def results_of(script: Script, turn: int = 1) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in script.turns[turn]["messages"] if m["role"] == "tool"}


def run_calls(server, tmp_path, workspace, calls: list[tuple], env: dict, *options: str) -> tuple:
    """One reply holding `calls`, then DONE: (the finished agent, its results by call id, the script)."""
    script = Script(server, [chat_response(tool_calls=calls), chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), *options, "try them"], agent_env(script.base_url, **env),
                     tmp_path / "cwd")
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    return done, results_of(script), script


def agent_copy(folder: Path, settings: str) -> Path:
    """tiny_agent.py and compact.py in `folder`, with `settings` as the .env beside them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tiny_agent.py", "compact.py"):
        shutil.copy(ROOT / name, folder)
    (folder / ".env").write_text(settings)
    return folder


def no_env_file() -> dict:
    """A child's environment without TINY_AGENT_ENV_FILE: it reads the .env beside its tiny_agent.py."""
    return {k: v for k, v in agent_env().items() if k != tiny_agent.ENV_FILE and not k.startswith("OPENAI_")
            and k != "MODEL"}


# --- 1. Settings come from the user ---------------------------------------------------------------

def test_a_workspaces_env_decides_nothing_the_agents_own_does(server, tmp_path):
    """A workspace whose .env names the attacker's server, a model and a records folder inside it;
    the agent runs in it (its current folder too). The request goes to the server the .env beside
    tiny_agent.py names, with its model, and the records stay where the environment says."""
    user, attacker = Script(server, [chat_response("DONE")]), Script(server, [chat_response("PWNED")])
    attacker_url = attacker.base_url.replace("127.0.0.1", "localhost")  # another address of the same test server
    agent = agent_copy(tmp_path / "agent", f"OPENAI_BASE_URL={user.base_url}\nOPENAI_API_KEY={KEY}\nMODEL=users-model\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text(f"OPENAI_BASE_URL={attacker_url}\nMODEL=workspace-model\n"
                             f"XDG_STATE_HOME={ws / '.state'}\nCONTEXT_WINDOW=abc\n")
    env = {**no_env_file(), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(agent / "tiny_agent.py"), "hi"], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout + done.stderr
    assert f"[settings] read {agent / '.env'}" in done.stdout
    assert [body["model"] for body in user.turns + attacker.turns] == ["users-model"]
    assert not (ws / ".state").exists() and (Path(env["XDG_STATE_HOME"]) / "tiny-agent").is_dir()


def test_records_go_where_the_environment_says_never_where_a_settings_file_says(server, tmp_path, workspace):
    settings = tmp_path / "settings.env"
    settings.write_text(f"XDG_STATE_HOME={tmp_path / 'elsewhere'}\nHOME={tmp_path / 'home'}\n")
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "--env-file", str(settings), "hi"], agent_env(script.base_url),
                     tmp_path / "cwd")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "home").exists()
    assert tiny_agent.saved_sessions(tiny_agent.records_folder(workspace))


def test_env_file_names_the_settings_and_a_missing_one_is_one_line(server, tmp_path, workspace):
    script = Script(server, [chat_response("DONE")])
    settings = tmp_path / "mine.env"
    settings.write_text(f"OPENAI_BASE_URL={script.base_url}\nMODEL=from-env-file\n")
    env = {k: v for k, v in agent_env().items() if k != "MODEL"}
    done = run_agent(["--workspace", str(workspace), "--env-file", str(settings), "hi"], env, tmp_path / "cwd")
    assert done.returncode == 0 and f"[settings] read {settings}" in done.stdout, done.stderr
    assert [body["model"] for body in script.turns] == ["from-env-file"]
    missing = run_agent(["--env-file", str(tmp_path / "nowhere.env"), "hi"], env, tmp_path / "cwd")
    assert missing.returncode == 1 and missing.stderr.strip().splitlines() == [
        f"error: configuration: --env-file {tmp_path / 'nowhere.env'}: no such file"], missing.stderr


def test_the_settings_file_in_use_is_what_a_hint_names():
    assert tiny_agent.settings_file() == Path(os.devnull)  # the tests' own: conftest names no file
    assert tiny_agent.settings_file("x.env") == Path("x.env")
    assert tiny_agent.setting("NOT_SET_ANYWHERE") == f"NOT_SET_ANYWHERE in {os.devnull}"


def test_the_readmes_test_command_runs_with_a_users_env_beside_the_agent_and_no_test_reads_it(tmp_path):
    """A checkout with the user's .env beside tiny_agent.py (a server, a key, a model): the test set-up
    starts, and neither a test nor an agent it starts reads that file."""
    copy = agent_copy(tmp_path / "checkout", f"OPENAI_BASE_URL=http://127.0.0.1:9/v1\nOPENAI_API_KEY={KEY}\n"
                                             "MODEL=users-model\n")
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=shutil.ignore_patterns("__pycache__", "test_*.py"))
    (copy / "tests" / "test_probe.py").write_text(
        "import os, subprocess, sys\nimport tiny_agent\n\n\n"
        "def test_probe():\n"
        "    assert tiny_agent.strict_env() is None and 'OPENAI_BASE_URL' not in os.environ\n"
        "    child = subprocess.run([sys.executable, '-c', 'import tiny_agent, os; tiny_agent.strict_env(); '\n"
        "                            'print(os.environ.get(\"MODEL\"))'], capture_output=True, text=True,\n"
        f"                           cwd={str(copy)!r})\n"
        "    assert child.stdout.strip() == 'None', child.stdout + child.stderr\n")
    env = {k: v for k, v in os.environ.items() if k != tiny_agent.ENV_FILE and not k.startswith(("OPENAI_", "PYTEST_"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/test_probe.py"],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


# --- 1 and 3. The agent run on its own folder: its settings file is out of reach ----------------------

OWN_SETTINGS_READS = ["cat .env", "cat .env | tr a-z A-Z", "cut -c1-20 .env", "grep -o . .env", "head -c 30 .env",
                      "tail -c 40 ./.env", "wc -c .env && cat .env", "sort .env", "grep -n KEY .env", "uniq .env"]


def test_the_agents_own_settings_in_its_workspace_reach_no_tool_and_no_server(server, tmp_path, mode):
    """The agent run on its own folder, its key in the .env there: each command naming it is asked
    (refused), the file tools refuse it, and inside bubblewrap a command that reads it without naming
    it finds it empty. The key, in no form, reaches the server."""
    script = Script(server, [])
    agent = agent_copy(tmp_path / "agent", f"OPENAI_BASE_URL={script.base_url}\nOPENAI_API_KEY={KEY}\nMODEL=m\n")
    calls = [tool_call(f"call_{i}", "bash", command=c) for i, c in enumerate(OWN_SETTINGS_READS)]
    calls += [tool_call("read", "read_file", path=".env"), tool_call("sub", "read_file", path="x/../.env"),
              tool_call("grep", "bash", command="grep -r test-k3y .")]
    script.steps += [chat_response(tool_calls=calls), chat_response("DONE")]
    env = {**no_env_file(), "PYTHONPATH": os.pathsep.join(sys.path), **mode}
    done = subprocess.run([sys.executable, str(agent / "tiny_agent.py"), "--workspace", str(agent), "hi"], cwd=agent,
                          env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout + done.stderr
    results = results_of(script)
    assert all(results[f"call_{i}"].startswith(NOT_ALLOWED) for i in range(len(OWN_SETTINGS_READS))), results
    assert "agent's own settings" in results["read"] and "agent's own settings" in results["sub"]
    sent = json.dumps(script.turns)
    for form in (KEY, KEY.upper(), KEY[:20], KEY[-20:]):  # unconfined, grep -r's line shows it masked
        assert form not in sent, form
    if "PATH" not in mode:  # inside bubblewrap: hidden even from a command that does not name it
        assert "k3y" not in results["grep"], results["grep"]


# --- 2. Options by allowlist ------------------------------------------------------------------------

def allowed_commands() -> list[str]:
    """A command for each option of each program's allowlist, with a value where it takes one."""
    commands = []
    for program, (flags, valued, long, single, numbers, *_) in {
            name: (*spec, "", "", "", False)[:5] for name, spec in tiny_agent.OPTIONS.items()}.items():
        start, operand = (f"{program} .", "") if program == "find" else (program, " notes.txt")
        commands += [f"{start} -{f}{operand}" for f in flags] + [f"{start} -{v} 1{operand}" for v in valued]
        commands += [f"{start} --{n}{'1' if n.endswith('=') else ''}{operand}" for n in long.split()]
        commands += [f"{start} -{n.rstrip('=')}{' 1' if n.endswith('=') else ''}" for n in single.split()]
        commands += [f"{start} -5{operand}"] if numbers else []
    return commands


def test_each_allowed_option_runs_unasked(server, tmp_path, workspace, mode):
    (workspace / "notes.txt").write_text("b\na\na\n")
    commands = allowed_commands()
    assert len(commands) > 250
    calls = [tool_call(f"call_{i}", "bash", command=c) for i, c in enumerate(commands)]
    _, results, _ = run_calls(server, tmp_path, workspace, calls, mode)
    refused = {commands[int(i.split("_")[1])]: r for i, r in results.items() if not r.startswith("exit code ")}
    assert len(results) == len(commands) and not refused, refused


LIST = "list0"  # a list of files the model wrote with write_file (not asked): what no question sees
REFUSED_CLASSES = {
    "a list of files": [
        f"wc --files0-from={LIST}", f"wc --files0-from {LIST}", f"wc -l --files0-from={LIST}", f"sort --files0-from={LIST}",
        f"sort -u --files0-from {LIST}", f"du --files0-from={LIST}", f"du -sh --files0-from={LIST}",
        f"find -files0-from {LIST}", f"wc -c --files0-from={LIST} | head -1", f"du -a --files0-from {LIST} | sort",
        f"sort -z --files0-from={LIST}", f"wc -m --files0-from={LIST}"],
    "an output file": [
        "sort -o out.txt notes.txt", "sort --output=out.txt notes.txt", "sort -uo out.txt notes.txt",
        "sort notes.txt -o out.txt", "sort --output out.txt notes.txt", "uniq notes.txt out.txt",
        "uniq -c notes.txt out.txt", "find . -fprint out.txt", "find . -fprint0 out.txt", "find . -fprintf out.txt %p",
        "find . -fls out.txt", "uniq -- notes.txt out.txt"],
    "running a program": [
        "find . -exec touch pwned ';'", "find . -name notes.txt -exec touch pwned '{}' +",
        "find . -execdir touch pwned ';'", "find . -type f -execdir touch pwned '{}' +", "find notes.txt -ok touch pwned ';'",
        "find notes.txt -okdir touch pwned ';'", "sort --compress-program=touch -S 1 notes.txt",
        "sort --compress-program touch notes.txt", "sort -S 1 --compress-program=./pwn notes.txt",
        "find . -maxdepth 1 -exec touch pwned ';'", "find . -newer notes.txt -o -exec touch pwned ';'"],
    "following forever": [
        "tail -f notes.txt", "tail -F notes.txt", "tail --follow notes.txt", "tail --follow=name notes.txt",
        "tail --follow=descriptor notes.txt", "tail -n 1 -f notes.txt", "tail --retry -f notes.txt",
        "tail -s 1 -f notes.txt", "tail --pid=1 -f notes.txt", "tail -qf notes.txt", "tail -fn1 notes.txt",
        "tail -f -- notes.txt"],
}


@pytest.mark.parametrize("refused", REFUSED_CLASSES)
def test_every_option_of_a_refused_class_is_asked(server, tmp_path, workspace, mode, refused):
    """The model writes a list naming a file beside the workspace and its own process's environment
    (with the key), then tries each variant: each is asked, so refused, and nothing is written, run
    or read."""
    (workspace / "notes.txt").write_text("b\na\n")
    (tmp_path / "beside.txt").write_text("BESIDE-THE-WORKSPACE\n")
    variants = REFUSED_CLASSES[refused]
    assert len(variants) >= 10
    listed = f"{tmp_path / 'beside.txt'}\0/proc/self/environ\0/proc/{os.getpid()}/environ\0"
    calls = [tool_call("list", "write_file", path=LIST, content=listed)]
    calls += [tool_call(f"call_{i}", "bash", command=c) for i, c in enumerate(variants)]
    _, results, _ = run_calls(server, tmp_path, workspace, calls, mode)
    ran = {variants[int(i.split("_")[1])]: r for i, r in results.items() if i != "list" and not r.startswith(NOT_ALLOWED)}
    assert not ran, ran
    assert sorted(p.name for p in workspace.iterdir()) == [LIST, "notes.txt"]
    assert not any(KEY in r or "BESIDE" in r for r in results.values())


# Each part of the rule that a path outside the workspace is asked, on its own: a command that only
# that part catches, which runs unasked (and shows the file beside the workspace) when it is removed.
@pytest.mark.parametrize("part, command", [("with ..", "cat ../beside.txt"), ("absolute", "cat {beside}"),
                                           ("inside an option", "diff --from-file={beside} notes.txt")])
def test_each_part_of_the_outside_rule_asks_on_its_own(server, tmp_path, workspace, path_without_bwrap, part, command):
    (workspace / "notes.txt").write_text("b\n")
    (tmp_path / "beside.txt").write_text("BESIDE-THE-WORKSPACE\n")
    command = command.format(beside=tmp_path / "beside.txt")
    assert tiny_agent.PROVED.fullmatch(command)  # the program and its words are allowed: only the path asks
    _, results, _ = run_calls(server, tmp_path, workspace, [tool_call("c", "bash", command=command)],
                              {"PATH": path_without_bwrap})
    assert results["c"].startswith(NOT_ALLOWED + "it names a path outside the workspace"), results


# --- 4. Records are the agent's alone ------------------------------------------------------------

def session_file(folder: Path, name: str, records: str | None, when: int) -> Path:
    path = folder / name
    data = {"version": 2, "messages": [{"role": "system", "content": "s"}], "strategy": "sawtooth", "state": None,
            "sent": [], "archive": None}
    path.write_text(json.dumps({**data, **({"records": records} if records is not None else {})}))
    os.utime(path, ns=(when, when))
    return path


def test_pruning_deletes_only_the_sessions_the_agent_saved_for_this_workspace(server, tmp_path, workspace):
    folder = tiny_agent.records_folder(workspace)
    ours = [session_file(folder, f"session-{i:02}.json", folder.name, 10**9 + i) for i in range(25)]
    foreign = [session_file(folder, "session-other.json", "other-1234567890", 1),
               session_file(folder, "session-old-format.json", None, 2)]
    (folder / "session-not-json.json").write_text("the user's notes")
    os.utime(folder / "session-not-json.json", ns=(3, 3))
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "hi"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 0 and "[session] removed 6 sessions" in done.stdout, done.stdout + done.stderr
    assert all(p.exists() for p in foreign) and (folder / "session-not-json.json").exists()
    assert [p.exists() for p in ours] == [False] * 6 + [True] * 19


def test_a_records_folder_reached_through_a_link_is_refused(server, tmp_path, workspace):
    other = tmp_path / "other-records"
    other.mkdir()
    planted = session_file(other, "session-1.json", None, 1)
    folder = tiny_agent.records_folder(workspace)
    folder.rmdir()
    folder.symlink_to(other)
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "--resume", "hi"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 1 and script.turns == [], done.stdout
    assert done.stderr.strip().splitlines() == [f"error: configuration: the records folder {folder} is a symbolic "
                                                "link, which may lead to another workspace's records: remove it "
                                                "(the agent makes its own)"]
    assert planted.exists() and sorted(p.name for p in other.iterdir()) == ["session-1.json"]


def test_resuming_a_session_saved_for_another_workspace_is_one_line(server, tmp_path, workspace):
    folder = tiny_agent.records_folder(workspace)
    session_file(folder, "session-1.json", "other-workspace-0123456789", 1)
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "--resume", "hi"], agent_env(script.base_url), tmp_path / "cwd")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and script.turns == [] and len(lines) == 1, done.stdout + done.stderr
    assert "saved for another workspace's records (other-workspace-0123456789)" in lines[0]


# --- 5. Every name printed is clean --------------------------------------------------------------

HOSTILE_NAME = "ws\x1b]0;TITLE\x07\x1b]52;c;cHduZWQ=\x07\x1b[31m\x9b2J\u202e"


def test_a_workspace_named_with_escape_sequences_prints_none_and_names_no_records_folder_with_them(server, tmp_path):
    ws = tmp_path / HOSTILE_NAME
    ws.mkdir()
    (tmp_path / "cwd").mkdir()
    settings = tmp_path / f"settings{HOSTILE_NAME}.env"
    settings.write_text("")
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(ws), "--env-file", str(settings), "--view", "hi"], agent_env(script.base_url),
                     tmp_path / "cwd")
    assert done.returncode == 0 and "[view]" in done.stdout and "[settings] read" in done.stdout, done.stderr
    for bad in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert bad not in done.stdout + done.stderr
    folder = tiny_agent.records_folder(ws)
    assert folder.name.isascii() and all(c.isalnum() or c in "._-" for c in folder.name), folder.name


# --- 6. A record is outside input wherever it is read --------------------------------------------

@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "1e400", "1" + "0" * 400])
def test_a_session_with_a_number_out_of_range_is_one_line(server, tmp_path, workspace, number):
    folder = tiny_agent.records_folder(workspace)
    entry = {"compaction": 1, "policy": "sawtooth", "level": 0, "window": 128000, "effective": 100000,
             "trigger": "NUMBER", "target": 0.5, "before_tokens": 10, "after_tokens": 5, "ratio": 2.0, "steps": [],
             "before": [], "after": []}
    data = {"version": 2, "records": folder.name, "strategy": "sawtooth", "messages": [
        {"role": "system", "content": "s"}], "state": {"log": [entry]}, "sent": [[1, 10]], "archive": None}
    (folder / "session-1.json").write_text(json.dumps(data).replace('"NUMBER"', number))
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "--resume", "--view", "hi"], agent_env(script.base_url),
                     tmp_path / "cwd")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr and len(lines) == 1, done.stdout + done.stderr
    assert "is damaged and was left untouched" in lines[0] and "a number out of range" in lines[0], lines[0]


# --- 1. Lessons read settings the way the agent does ----------------------------------------------

def test_lesson_02_run_in_a_workspace_ignores_its_env(tmp_path):
    """Lesson 02 run from a folder whose .env names a server and a model: it reads the agent's own
    settings (here none), so its summaries stay the lesson's stand-in and no request is tried."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text("OPENAI_BASE_URL=http://127.0.0.1:9/v1\nOPENAI_API_KEY=planted\nMODEL=workspace-model\n")
    env = {k: v for k, v in agent_env().items() if not k.startswith("OPENAI_") and k != "MODEL"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run([sys.executable, str(ROOT / "lessons" / "02_sawtooth.py")], cwd=ws, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "[summary] summaries by: the lesson's stand-in (no model configured" in done.stdout, done.stdout[-2000:]
