"""The README's quoted demo output is the demo's, in shape: every quoted line, its numbers aside,
is a line a fresh run prints (the numbers move as the project's files grow, the README says)."""

from __future__ import annotations

import re
from pathlib import Path

import tiny_agent

ROOT = Path(__file__).resolve().parent.parent
CHART = set(" │┤└─█0123456789,")


def quoted_demo_lines() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("Its last lines look like this", 1)[1].split("```\n", 2)[1]
    return [line for line in block.split("\n") if line.strip() and line != "..."]


def shape(line: str) -> re.Pattern:
    """The line with each number (and a trailing "…" list) free to differ."""
    pattern = re.escape(line.rstrip(" …"))
    pattern = re.sub(r"\d[\d,]*", lambda _: r"\d[\d,]*", pattern.replace(r"\,", ","))
    return re.compile(pattern)


def test_the_readmes_demo_output_is_what_the_demo_prints(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert tiny_agent.main(["--demo"]) == 0
    printed = capsys.readouterr().out.split("\n")
    for line in quoted_demo_lines():
        if set(line) <= CHART:  # a row of the chart: its bars depend on the run
            assert any(set(p) <= CHART and "█" in p for p in printed), line
            continue
        assert any(shape(line).search(p) for p in printed), f"the README quotes {line!r}; the demo printed no such line"


def test_how_it_works_is_short_and_the_two_set_up_commands_come_first():
    """A newcomer reads the two commands before anything else to run, and "How it works" in a
    short diagram and a few sentences (at most 1,600 characters; the long explanations are the lessons')."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```\w*\n(.*?)```", readme, re.S)
    assert [b.strip() for b in blocks[:2]] == [
        'python3 -m venv .venv && . .venv/bin/activate && pip install -e . && python tiny_agent.py',
        'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[dev]" && python -m pytest -q']
    section = readme[readme.index("## How it works"):readme.index("\n## ", readme.index("## How it works") + 1)]
    assert len(section) <= 1_600, f"How it works is {len(section):,} characters"
    assert "compact_messages" in section and "compact.py" in section and "tiny_agent.py" in section
