"""Mutation testing over the mechanisms, with a tool nobody here wrote (mutmut).

    python tests/run_mutmut.py                  # every mechanism below (hours on 2 cores)
    python tests/run_mutmut.py find_cut Archive # only these functions (a class: its methods)
    python tests/run_mutmut.py --report         # the last results again, without running
    python tests/run_mutmut.py --quick find_cut # each mutant against tests/test_mutants.py alone (seconds)
    python tests/run_mutmut.py --quick compact.x_find_cut__mutmut_3   # one mutant (mutmut's name for it)

mutmut copies the project into ./mutants, changes one thing at a time inside a function, and runs
the tests that called that function (pyproject.toml's [tool.mutmut] lists the test files). A mutant
no test kills must be killed by a new test or named in EQUIVALENT (tests/test_mutants.py) with one
line saying why it changes nothing; this exits 1 while a survivor is unnamed or a mutant unchecked
(an interrupted run). `mutmut show NAME` prints a mutant's diff. Not part of CI (too slow).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The mechanisms: mutmut's names for their functions (module.x_function, module.xǁClassǁmethod).
# Each of them has been run to the end: every mutant is killed or named in EQUIVALENT, and one that
# survived the rest of the suite has a test in tests/test_mutants.py that kills it alone (--quick).
MECHANISMS = [
    # the approval checker; the file tools; the reply reader (mutmut leaves a decorated function
    # alone: AgentWorkspace.shell, the sandbox's arguments, has no mutants; the bubblewrap tests hold it)
    "tiny_agent.x_needs_asking", "tiny_agent.x_tool_path",
    "tiny_agent.x_replace_file", "tiny_agent.x_reply_body", "tiny_agent.x_assistant_message",
    # session saving and loading; the agent's own secrets masked
    "tiny_agent.x_save_session", "tiny_agent.x_read_session", "tiny_agent.x_read_record",
    "tiny_agent.x_own_secrets_masked",
    # the engine's cut, tail, steps and last resort
    "compact.x_find_cut", "compact.x_groups", "compact.x_find_cut_within", "compact.x_boundaries",
    "compact.x_step_when_due", "compact.x_due_at", "compact.x_apply", "compact.x_kept_if_freed",
    "compact.x_finish", "compact.x_archived", "compact.x_last_resort",
    "compact.x_summarize_gone", "compact.x_cut_everything",
    # the user's words; secret masking; the archive; the one cutter
    "compact.x_carry_user_words", "compact.x_user_notes", "compact.x_pins_text", "compact.x_find_constraints",
    "compact.x_pin", "compact.x_mask_secrets", "compact.xǁArchiveǁin_folder", "compact.xǁArchiveǁappend",
    "compact.xǁArchiveǁcount", "compact.xǁArchiveǁrecords", "compact.xǁArchiveǁsearch", "compact.xǁArchiveǁread",
    "compact.x_cut_text", "compact.x_is_cut_of", "compact.x_cut_over",
]
DEAD = ("killed", "timeout", "segfault", "caught by type check")  # mutmut's words for a mutant a test stopped


def equivalent() -> dict[str, str]:
    """EQUIVALENT from tests/test_mutants.py, read without importing the tests."""
    tree = ast.parse((ROOT / "tests" / "test_mutants.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign) and "EQUIVALENT" in ast.unparse(node).split("=")[0]:
            return ast.literal_eval(node.value)
    return {}


def chosen(words: list[str]) -> list[str]:
    """The mechanisms named by `words`, a function's or a class's name (all without words), as
    mutmut's globs; a mutant's own name (tiny_agent.x_tool_path__mutmut_3) stands for itself."""
    named = [w for w in words if "__mutmut_" in w]
    functions = [w for w in words if w not in named]
    if named and not functions:
        return named
    return named + [f"{m}__mutmut_*" for m in MECHANISMS
                    if not functions or set(functions) & set(m.split(".x")[1].strip("_ǁ").split("ǁ"))]


def results(globs: list[str]) -> dict[str, str]:
    """Each mutant of the chosen functions -> its status, from mutmut's files in ./mutants."""
    from mutmut.stats import status_by_exit_code  # the `mutation` extra: the tests import MECHANISMS without it
    found = {}
    for meta in (ROOT / "mutants").glob("*.py.meta"):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if any(fnmatch.fnmatchcase(name, g) for g in globs):
                found[name] = status_by_exit_code[code]
    return found


def report(globs: list[str]) -> int:
    found, named = results(globs), equivalent()
    counts = {s: list(found.values()).count(s) for s in sorted(set(found.values()))}
    survivors = sorted(n for n, s in found.items() if s not in DEAD and s != "not checked")
    unnamed = [n for n in survivors if n not in named]
    stale = sorted(n for n in named if any(fnmatch.fnmatchcase(n, g) for g in globs) and found.get(n) == "killed")
    print(f"{len(found)} mutants of {len(globs)} functions: " + ", ".join(f"{n} {s}" for s, n in counts.items())
          + f"; {len(survivors) - len(unnamed)} of the survivors named equivalent")
    for n in unnamed:
        print(f"UNNAMED   {n}   (mutmut show {n})")
    for n in stale:
        print(f"KILLED    {n} is named equivalent: take it out of EQUIVALENT")
    return 1 if unnamed or counts.get("not checked") else 0


def quick(globs: list[str]) -> int:
    """Each mutant of the chosen functions (made by an earlier run, ./mutants) against
    tests/test_mutants.py alone, in one process: a pytest each, seconds where the whole suite takes
    a minute. In a copy of ./mutants, so a mutmut run going on is not changed; a mutant that runs
    past 10 seconds counts as killed (mutmut's timeout). Prints the survivors; 1 when one is unnamed."""
    import shutil
    import signal
    import tempfile
    import pytest
    names, named = sorted(results(globs)), equivalent()
    copy = Path(tempfile.mkdtemp(prefix="mutants-")) / "mutants"
    shutil.copytree(ROOT / "mutants", copy)
    for test in (ROOT / "tests").glob("*.py"):  # the tests as they are now (test_mutants imports conftest's helpers)
        shutil.copy(test, copy / "tests")
    os.chdir(copy)
    sys.path[:0] = [str(copy), str(copy / "tests")]

    def late(*_):
        raise TimeoutError("past 10 seconds")
    signal.signal(signal.SIGALRM, late)
    # a test that runs the agent as a child is left out: the child's calls are not this process's
    args = ["-q", "-x", "-n", "0", "-p", "no:cacheprovider", "-k", "not from_the_command_line", "tests/test_mutants.py"]
    os.environ["MUTANT_UNDER_TEST"] = ""  # first the code as it is (and the imports, before any clock runs):
    if pytest.main(args) != 0:  # a test failing without a mutant would count every mutant killed
        raise SystemExit("tests/test_mutants.py fails on the code as it is: fix that first")
    survivors = []
    for name in names:
        os.environ["MUTANT_UNDER_TEST"] = name
        signal.alarm(10)
        try:
            code = pytest.main(args)
        finally:
            signal.alarm(0)
        if code not in (0, 1):  # not a test that passed or failed: the run itself went wrong
            raise SystemExit(f"{name}: pytest exited {code}")
        if code == 0:
            survivors.append(name)
    shutil.rmtree(copy.parent)
    unnamed = [n for n in survivors if n not in named]
    print(f"{len(names)} mutants against tests/test_mutants.py: {len(names) - len(survivors)} killed, "
          f"{len(survivors) - len(unnamed)} survived named equivalent, {len(unnamed)} unnamed")
    for n in unnamed:
        print(f"UNNAMED   {n}   (mutmut show {n})")
    return 1 if unnamed else 0


def main(args: list[str]) -> int:
    words = [a for a in args if not a.startswith("--")]
    globs = chosen(words)
    os.chdir(ROOT)  # mutmut reads pyproject.toml and writes ./mutants here
    if "--quick" in args:
        return quick(globs)
    if "--report" not in args:
        children = os.environ.get("MUTMUT_CHILDREN", "2")  # a 2-core machine shared with other work
        subprocess.run(["nice", "-n", "19", sys.executable, "-m", "mutmut", "run", "--max-children", children,
                        *globs])
    return report(globs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
