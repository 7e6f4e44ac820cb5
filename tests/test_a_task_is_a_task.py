"""A task is a task: given with no model configured, it is not quietly replaced by the demo. The run
ends non-zero with one line that says how to configure a model or to ask for the demo; the demo
runs when it is asked for, or when nothing is asked."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, offline_env


def agent(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tiny_agent.py"), *args], cwd=cwd, env=offline_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("asked", [["find the TODOs"], ["--repl"], ["--repl", "find the TODOs"]])
def test_a_task_or_a_repl_with_no_model_is_one_line_and_a_failure(asked, tmp_path):
    ran = agent(*asked, cwd=tmp_path)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    lines = (ran.stdout + ran.stderr).strip().splitlines()
    assert len(lines) == 1 and "no model is configured" in lines[0], lines
    assert "OPENAI_BASE_URL" in lines[0] and "--demo" in lines[0], lines[0]
    assert "[demo]" not in ran.stdout  # the demo did not stand in for what was asked


def test_the_demo_runs_when_asked_for_and_when_nothing_is_asked(tmp_path):
    for asked in ([], ["--demo", "find the TODOs"]):
        ran = agent(*asked, "--max-iterations", "2", cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        assert "[demo] The model is a deterministic stand-in" in ran.stdout, ran.stdout
    assert "so the task is not run" in ran.stdout  # a task beside --demo says it was not run


def test_exit_says_where_the_demo_session_was_saved_and_the_command_it_names_continues_it(tmp_path):
    def repl(*args: str, typed: str) -> str:
        ran = subprocess.run([sys.executable, str(ROOT / "tiny_agent.py"), *args], cwd=tmp_path, env=offline_env(),
                             input=typed, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout
    first = repl("--demo", "--repl", "--max-iterations", "2", typed="hello\n/exit\n")
    said = re.search(r"\[saved\] the session is in (.+); continue it: python (.+)", first)
    assert said and Path(said[1]).is_file(), first[-400:]
    program, *again = shlex.split(said[2])
    assert program == str(ROOT / "tiny_agent.py")  # the file as it was run
    assert "[resume] " in repl(*again, typed="/exit\n")
    assert "[saved]" not in repl("--demo", "--repl", typed="/exit\n")  # no turn, nothing saved
