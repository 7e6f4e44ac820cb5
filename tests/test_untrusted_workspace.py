"""The workspace is untrusted: the agent's settings, records and secrets come from its user, never
from the folder it works in. Each promise attacked from outside: the real command line with stdin
not a terminal (so a command that is asked is refused), a scripted server, a hostile workspace,
inside bubblewrap and without it."""

from __future__ import annotations

import json
import os
import re
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
SECRET = "ghp_" + "s3cr3t" * 6  # a secret of the user's settings file, never in the child's environment

# program -> every option the allowlist lets run unasked; a name ending in = takes the value 1
ALLOWED = {
    "cat": "-A -b -e -E -n -s -t -T -u -v --show-all --number-nonblank --show-ends --number --squeeze-blank "
           "--show-tabs --show-nonprinting",
    "head": "-q -v -z -n= -c= --lines= --bytes= --quiet --silent --verbose --zero-terminated",
    "tail": "-q -v -z -n= -c= --lines= --bytes= --quiet --silent --verbose --zero-terminated",
    "wc": "-c -l -m -w -L --bytes --chars --lines --words --max-line-length",
    "grep": "-i -v -n -c -l -L -o -w -x -r -E -F -G -h -H -s -q -a -Z -z -b -T -I -A= -B= -C= -m= -e= "
            "--ignore-case --invert-match --line-number --count --files-with-matches --files-without-match "
            "--only-matching --word-regexp --line-regexp --recursive --extended-regexp --fixed-strings "
            "--basic-regexp --no-filename --with-filename --no-messages --quiet --silent --text --null "
            "--null-data --byte-offset --initial-tab --after-context= --before-context= --context= --max-count= "
            "--regexp= --include= --exclude= --exclude-dir= --color= --label=",
    "ls": "-a -A -l -h -R -t -r -S -1 -d -F -i -s -U -X -v -c -u -g -G -n -o -p -Q -N -k --all --almost-all "
          "--human-readable --recursive --reverse --directory --classify --inode --size --sort= --time= "
          "--format= --color= --indicator-style= --width=",
    "stat": "-L -t -c= --dereference --terse --format= --printf=",
    "du": "-s -a -h -c -b -k -m -L -x -l -d= -B= --summarize --all --human-readable --total --bytes "
          "--apparent-size --dereference --one-file-system --count-links --max-depth= --block-size= --exclude=",
    "cut": "-b= -c= -f= --bytes= --characters= --fields=",
    "sort": "-b -d -f -g -i -M -h -n -R -r -V -s -u -z -c -k= -t= -S= --ignore-leading-blanks --dictionary-order "
            "--ignore-case --general-numeric-sort --ignore-nonprinting --month-sort --human-numeric-sort "
            "--numeric-sort --random-sort --reverse --version-sort --stable --unique --zero-terminated --check "
            "--key= --field-separator= --buffer-size=",
    "uniq": "-c -d -D -u -i -z -f= -s= -w= --count --repeated --unique --ignore-case --zero-terminated "
            "--skip-fields= --skip-chars= --check-chars=",
    "diff": "-q -s -u -y -i -w -b -B -a -N -r -t -T -U= -C= --brief --report-identical-files --side-by-side "
            "--ignore-case --ignore-all-space --ignore-space-change --ignore-blank-lines --text --new-file "
            "--recursive --normal --unified= --context= --color= --label=",
    "find": "-print -print0 -empty -depth -ls -prune -true -readable -writable -xdev -name= -iname= -path= "
            "-type= -maxdepth= -mindepth= -size= -mtime= -mmin= -perm= -links= -regex=",
}
OPERANDS = {"diff": "notes.txt notes.txt", "find": "."}


def allowed_commands() -> list[str]:
    """One command for each allowed option: the program, the option (with the value 1), its operand."""
    commands = []
    for program, names in ALLOWED.items():
        for name in names.split():
            option = name[:-1] + (" 1" if name.startswith("-") and not name.startswith("--") else "=1") \
                if name.endswith("=") else name
            option = f"{option[:-2]} f" if option in ("-type 1",) else option
            where = OPERANDS.get(program, "notes.txt")
            commands.append(f"find . {option}" if program == "find" else f"{program} {option} {where}")
    return commands + ["tr -d 1", "tr -s a", "pwd -L", "pwd -P", "which -a ls", "basename -a x/y", "dirname -z x/y",
                       "realpath -e notes.txt", "realpath --relative-to=. notes.txt", "echo --any-word"]


# class -> variants, each an option a read-only program must not take unasked
REFUSED = {
    "a list of files or patterns read from a file": [
        "wc --files0-from=list", "sort --files0-from=list", "du --files0-from=list", "find -files0-from list",
        "wc --files0-from list", "du --files0-from list notes.txt", "sort --files0-from=list -r", "du -s --files0-from=list",
        "grep -X list notes.txt", "du -X list .", "du --exclude-from=list .", "sort --random-source=list notes.txt",
        "wc -l --files0-from=list"],
    "an output file": [
        "sort -o out.txt notes.txt", "sort --output=out.txt notes.txt", "sort -rout.txt notes.txt", "sort -T . notes.txt",
        "sort --temporary-directory=. notes.txt", "find . -fprint out.txt", "find . -fprint0 out.txt",
        "find . -fprintf out.txt x", "find . -fls out.txt", "uniq notes.txt out.txt", "diff --output=out.txt notes.txt "
        "notes.txt", "sort -nro out.txt notes.txt"],
    "running a program": [
        "find . -exec touch pwned ;", "find . -exec touch pwned +", "find . -execdir touch pwned +", "find . -ok touch {} +",
        "find . -okdir touch {} +", "sort --compress-program=touch notes.txt", "find . -delete",
        "diff --to-file=notes.txt --ifdef=x notes.txt", "grep --devices=read x notes.txt",
        "sort -S 1 --compress-program touch notes.txt", "ls --color=always -Z --context notes.txt"],
    "following forever": [
        "tail -f notes.txt", "tail -F notes.txt", "tail --follow notes.txt", "tail --follow=name notes.txt",
        "tail --retry notes.txt", "tail -fn1 notes.txt", "tail -n1 -f notes.txt", "tail --follow=descriptor notes.txt",
        "tail -Fq notes.txt", "tail --pid=1 -f notes.txt", "tail -s 1 -f notes.txt", "tail -qf notes.txt"],
}


def through_the_cli(server, variants, ws, tmp_path, mode, extra=None, agent=None):
    """Every variant as a bash call of one scripted reply, through the real command line; returns
    (command -> its result, the finished process, the script)."""
    calls = [tool_call(f"call_{i}", "bash", command=v) for i, v in enumerate(variants)]
    script = Script(server, [chat_response(tool_calls=calls), chat_response("DONE")])
    (tmp_path / "cwd").mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, str(agent or ROOT / "tiny_agent.py"), "--workspace", str(ws), "go"],
                          env=agent_env(script.base_url, **mode, **(extra or {})), cwd=tmp_path / "cwd",
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    got = {variants[int(m["tool_call_id"].split("_")[1])]: m["content"]
           for m in script.turns[1]["messages"] if m["role"] == "tool"}
    assert len(got) == len(variants)
    return got, done, script


def make(ws: Path) -> None:
    (ws / "notes.txt").write_text("b\na\na\n")
    (ws / "list").write_text(f"{ws.parent / 'beside.txt'}\0")
    (ws.parent / "beside.txt").write_text("BESIDE-THE-WORKSPACE\n")


# --- Options by allowlist ------------------------------------------------------------------------

def test_every_allowed_option_runs_unasked(server, workspace, tmp_path, mode):
    make(workspace)
    commands = allowed_commands()
    assert len(commands) > 250
    assert [c for c in commands if tiny_agent.needs_asking(c)] == []
    got, _, _ = through_the_cli(server, commands, workspace, tmp_path, mode)
    assert {c: r for c, r in got.items() if not r.startswith("exit code ")} == {}


@pytest.mark.parametrize("kind", REFUSED)
def test_every_refused_class_of_option_is_asked(server, workspace, tmp_path, mode, kind):
    make(workspace)
    variants = REFUSED[kind]
    assert len(variants) >= 10
    got, _, _ = through_the_cli(server, variants, workspace, tmp_path, mode)
    assert {c: r for c, r in got.items() if not r.startswith(NOT_ALLOWED)} == {}
    assert not (workspace / "out.txt").exists() and not (workspace / "pwned").exists()
    assert "BESIDE-THE-WORKSPACE" not in json.dumps(got)


# Each part of the rule that a path outside the workspace is asked, each with its own attack: the
# test of a part fails when that part is taken out of OUTSIDE, whatever the others do.
OUTSIDE_PARTS = {
    "absolute": ["cat {beside}", "head -n 5 {beside}", "grep -r . {beside}", "cat '{beside}'", 'wc -l "{beside}"',
                 "cat notes.txt {beside}", "diff notes.txt {beside}", "sort {beside}", "tail {beside}", "cut -c1-9 {beside}"],
    "with ..": ["cat ../beside.txt", "head ../beside.txt", "grep -r BESIDE ..", "cat sub/../../beside.txt", "sort ../beside.txt",
                "cat notes.txt ../beside.txt", "diff notes.txt ../beside.txt", "tail -n 1 ../beside.txt",
                "cut -c1-9 ../beside.txt", "wc ../beside.txt"],
    "inside an option": ["diff --from-file={beside} notes.txt", "diff --to-file={beside} notes.txt",
                         "grep --file={beside} notes.txt", "grep -f{beside} notes.txt", "grep --file {beside}x notes.txt",
                         "diff --from-file={parent} notes.txt", "grep -rf{beside} .", "diff -r --from-file={beside} notes.txt",
                         "realpath --relative-to={parent} notes.txt", "du --exclude={parent} ."],
}


@pytest.mark.parametrize("part", OUTSIDE_PARTS)
def test_each_part_of_the_outside_rule_is_asked(server, workspace, tmp_path, path_without_bwrap, part):
    make(workspace)
    (workspace / "sub").mkdir()
    beside, parent = workspace.parent / "beside.txt", str(workspace.parent)
    variants = [v.format(beside=beside, parent=parent) for v in OUTSIDE_PARTS[part]]
    assert all(tiny_agent.needs_asking(v) for v in variants)
    got, _, _ = through_the_cli(server, variants, workspace, tmp_path, {"PATH": path_without_bwrap})
    assert {c: r for c, r in got.items() if not r.startswith(NOT_ALLOWED)} == {}
    assert "BESIDE-THE-WORKSPACE" not in json.dumps(got)


def test_without_the_options_no_outside_word_is_asked():
    """What the three parts answer for: the same commands with only plain words run unasked."""
    assert [c for c in ("cat notes.txt", "grep -r x .", "diff --from-file=notes.txt notes.txt") if
            tiny_agent.needs_asking(c)] == []


# --- Settings: the agent run on its own folder ---------------------------------------------------

READS = ["cat .env", "head -c 30 .env", "grep -o . .env", "cut -c1-20 .env", "tail -c 50 .env", "sort .env",
         "grep -r ghp_ .", "grep -ro . .", "cat ./.env", "diff .env notes.txt"]


def test_the_agents_own_settings_file_in_the_workspace(server, tmp_path, mode):
    """The agent's folder is the workspace, and its .env holds a secret: inside bubblewrap no
    command and no file tool reads it; unconfined, every command that names it is asked (a
    recursive grep still reads it there: the README says so)."""
    ws = tmp_path / "agent"
    ws.mkdir()
    for name in ("tiny_agent.py", "compact.py"):
        shutil.copy(ROOT / name, ws)
    make(ws)
    (ws / ".env").write_text(f"GITHUB_TOKEN={SECRET}\nMODEL=test-model\n")
    env = {"TINY_AGENT_ENV_FILE": "", "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "default_install"), str(ROOT)])}
    sandboxed = not mode
    reads = READS if sandboxed else [c for c in READS if "-r" not in c]
    calls = [tool_call(f"call_{i}", "bash", command=c) for i, c in enumerate(reads)]
    calls += [tool_call("call_file", "read_file", path=".env"), tool_call("call_up", "read_file", path="x/../.env")]
    script = Script(server, [chat_response(tool_calls=calls), chat_response("DONE")])
    (tmp_path / "cwd").mkdir()
    done = run_agent(["--workspace", str(ws), "go"], agent_env(script.base_url, **mode, **env), tmp_path / "cwd")
    assert done.returncode == 0 and f"[settings] read {ws / '.env'}" in done.stdout, done.stdout + done.stderr
    got = {m["tool_call_id"]: m["content"] for m in script.turns[1]["messages"] if m["role"] == "tool"}
    named = [f"call_{i}" for i, c in enumerate(reads) if ".env" in c]
    assert [i for i in named if not got[i].startswith(NOT_ALLOWED)] == []
    assert "agent's own settings" in got["call_file"] and "agent's own settings" in got["call_up"]
    sent = json.dumps(script.turns + script.summaries)
    assert SECRET[4:16] not in sent and "s3cr3t" not in sent


def test_a_workspaces_env_is_a_file_like_any_other(server, workspace, tmp_path):
    """A hostile workspace's .env names another server and moves the records into the workspace:
    the agent talks to its own server and keeps its records where its environment says."""
    (workspace / ".env").write_text(f"OPENAI_BASE_URL=http://127.0.0.1:9/v1\nMODEL=planted\n"
                                    f"XDG_STATE_HOME={workspace}\n")
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "hi"], agent_env(script.base_url), workspace)
    assert done.returncode == 0 and "DONE" in done.stdout and "[settings] read" not in done.stdout, done.stdout
    assert script.turns[0]["model"] == "test-model" and not (workspace / "tiny-agent").exists()


# --- Records are the agent's alone -----------------------------------------------------------------

def test_a_records_folder_reached_through_a_link_is_refused(server, workspace, tmp_path, state):
    other = tmp_path / "other-records"
    other.mkdir()
    (other / "session-1.json").write_text(json.dumps({"version": 2, "messages": [{"role": "user", "content": "THEIRS"}]}))
    folder = tiny_agent.records_folder(workspace)
    shutil.rmtree(folder)
    folder.symlink_to(other)
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "--resume", "hi"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 1 and script.turns == [] and "is a symbolic link" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and [p.name for p in other.iterdir()] == ["session-1.json"]


def test_a_session_saved_for_another_workspace_is_not_resumed(server, workspace, tmp_path):
    folder = tiny_agent.records_folder(workspace)
    (folder / "session-x.json").write_text(json.dumps({"version": 2, "records": "other-0123456789", "messages": [
        {"role": "user", "content": "THEIRS"}]}))
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "--resume", "hi"], agent_env(script.base_url), tmp_path / "cwd")
    assert done.returncode == 1 and script.turns == [], done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "another workspace's records" in lines[0] and "Traceback" not in done.stderr


# --- Every name printed is clean --------------------------------------------------------------------

HOSTILE = "ws\x1b]0;PWNED-TITLE\x07\x1b]52;c;SGVsbG8=\x07\x1b[31m\u202e\x9b2J"


def test_a_hostile_folder_name_reaches_no_terminal(server, tmp_path, state):
    ws = tmp_path / HOSTILE
    ws.mkdir()
    settings = tmp_path / f"settings{HOSTILE}.env"
    settings.write_text("")
    script = Script(server, [chat_response("DONE")])
    (tmp_path / "cwd").mkdir()
    done = run_agent(["--workspace", str(ws), "--env-file", str(settings), "--view", "hi"], agent_env(script.base_url),
                     tmp_path / "cwd")
    assert done.returncode == 0 and "[settings] read" in done.stdout and "[view]" in done.stdout, done.stderr
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]", done.stdout + done.stderr)
    names = [p.name for p in (state / "tiny-agent").iterdir()]
    assert names and all(re.fullmatch(r"[A-Za-z0-9._-]+", n) for n in names), names


# --- A record is outside input wherever it is read ---------------------------------------------------

@pytest.mark.parametrize("odd", ["Infinity", "-Infinity", "NaN", "1e999", "1" + "0" * 400])
def test_a_number_out_of_range_in_a_saved_session_is_one_line(server, workspace, tmp_path, odd):
    folder = tiny_agent.records_folder(workspace)
    entry = {"compaction": 1, "policy": "sawtooth", "level": 0, "window": 4000, "effective": 3500, "trigger": "ODD",
             "target": 0.5, "before_tokens": 10, "after_tokens": 5, "ratio": 0.5, "steps": [], "before": [], "after": []}
    state = {"log": [entry]}
    text = json.dumps({"version": 2, "records": folder.name, "strategy": "sawtooth", "state": state, "sent": [[2, 10]],
                       "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
    (folder / "session-odd.json").write_text(text.replace('"ODD"', odd))
    script = Script(server, [chat_response("DONE")])
    done = run_agent(["--workspace", str(workspace), "--resume", "--view", "hi"], agent_env(script.base_url),
                     tmp_path / "cwd")
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is damaged" in lines[0] and "not a finite number in range" in lines[0], lines


def test_a_page_record_out_of_range_is_one_line_on_the_page():
    entry = {"compaction": 1, "policy": "sawtooth", "level": 0, "window": 4000, "effective": 3500,
             "trigger": float("inf"), "target": 0.5, "before_tokens": 10, "after_tokens": 5, "ratio": 0.5,
             "steps": [], "before": [], "after": []}
    assert "not a finite number in range" in tiny_agent.record_problem(entry)
    assert tiny_agent.record_problem({**entry, "trigger": 0.7}) == ""


# --- The suite runs with the user's .env beside tiny_agent.py, and no test reads it ----------------

def test_the_tests_run_with_a_users_env_beside_the_agent_and_read_none(tmp_path):
    """A copy of the checkout with a .env that names a server nothing answers and a window too small:
    a slice of the suite that starts agents in-process and as programs passes there."""
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "__pycache__", ".env"))
    (copy / ".env").write_text("OPENAI_BASE_URL=http://127.0.0.1:9/v1\nOPENAI_API_KEY=sk-user\nMODEL=users-model\n"
                               "CONTEXT_WINDOW=1000\nREQUEST_TIMEOUT=1\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TINY_AGENT_ENV_FILE", "PYTEST_XDIST_WORKER",
                                                             "PYTEST_XDIST_TESTRUNUID", "PYTHONPATH")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "tests/test_untrusted_workspace.py", "-k", "hostile_folder or workspaces_env or page_record"],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
