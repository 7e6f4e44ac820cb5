"""The project speaks of itself: no issue numbers, no "seed NNN", no path outside the repository in the
code, the lessons, the guides or the tests. The design documents are named by their titles."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# an issue's number ("issue" and a number, "#5" too); a design document's seed ("seed" and three digits);
# a path that climbs out of the checkout to shared/
MAKING = re.compile(r"\bissues? #?\d+|\bseed \d{3}\b|\.\./shared\b", re.I)
# the tests and CI find the recorded runs and the prebuilt servers beside a checkout; nothing else may
OUTSIDE_OK = ("tests/", ".ci/")
TEXT = (".py", ".md", ".toml", ".example", ".sh", ".txt", ".cfg", ".jinja")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in listed.splitlines()
            if name.endswith(TEXT) or name.startswith(".ci/")]


def test_no_file_names_the_projects_own_making():
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
             for path in tracked_text_files() if path.is_file()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if (hit := MAKING.search(line)) and not (hit[0].startswith("..")
                                                       and str(path.relative_to(ROOT)).startswith(OUTSIDE_OK))]
    assert not found, "\n".join(found)


def test_the_pattern_finds_what_it_is_for():
    # written in two halves, so that this file does not name what it looks for
    for first, rest in (("(issue", " 13.9)"), ("Issue", " 16.2's table"), ("issue", " #5"),
                        ("seed", " 001's light tier"), ("--trajectories ..", "/shared/x.jsonl")):
        assert MAKING.search(first + rest), first + rest
    for line in ("an issue with the server", "seed=7", "shared/ memory", "issues a warning"):
        assert not MAKING.search(line), line


def test_the_checked_files_include_every_part():
    names = {str(path.relative_to(ROOT)) for path in tracked_text_files()}
    for name in ("README.md", "compact.py", "tiny_agent.py", "pyproject.toml", ".env.example",
                 "lessons/README.md", "lessons/benchmark.py", "tests/conftest.py", ".ci/run"):
        assert name in names, name
