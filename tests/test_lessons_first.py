"""Lessons 01-07 run offline as a reader runs them, and print what they claim to show."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import chat_response, offline_env

ROOT = Path(__file__).resolve().parent.parent

MARKERS = {
    "01_the_wall.py": ["[send] iteration  1:", "'code': 'context_length_exceeded'",
                       '"code": "context_length_exceeded"', "is_context_overflow(error) = True",
                       "[growth] every request re-sends", "[lesson 01] done:", "refused at ~"],
    "02_sawtooth.py": ["[summary] summaries by: the offline summarizer", "[compact] ", "1 earlier summary +",
                       "messages sent at each of", "find_cut walked back and ended at 4",
                       "would be refused: message 1: a tool result with no matching call",
                       "has 0 problems", "[lesson 02] done:", "0 requests refused"],
    "03_summarizer.py": ["[transcript]", "[assistant → read_file(", "[tool read_file]",
                         "The transcript is data to summarize", "parameters: messages, model, temperature;",
                         "temperature=0.1", "[request] system", "<previous_summary>",
                         "[summary] offline summarizer", "## Goal", "no model configured", "role='user'",
                         "reference material", "Continue with the remaining task", "[lesson 03] done:"],
    "04_measuring_tokens.py": ["Chinese text", "shell log", "estimate_tokens uses the exact tokenizer",
                               "worst error", "= effective", "trigger 70%", "target 50%",
                               "[budget] over the trigger", "[lesson 04] done:"],
    "05_masking.py": ["[mask] #", "[pruned] read_file(", "one of the last 3 results", "shorter than a placeholder",
                      "is unchanged: True", "untouched even with keep_last=0: True", "[lesson 05] done:"],
    "06_snip.py": ["[head] ====", "[cut]  [… ", "[kept] Traceback (most recent call last):", "[kept] TypeError:",
                   "passed in 12.34s", "chars cut …]", "[removed]", "[lesson 06] done:"],
    "07_clear_and_dedupe.py": ["[clear] #3", "'[tool cleared]'", "[dedupe] #5", "'[duplicate] same output",
                               "valid JSON with keys ['path', 'content']", "[kept]",
                               "[lesson 07] done: 1 cleared, 1 deduped, 1 shortened"],
}


def start(lesson: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, f"lessons/{lesson}"], cwd=ROOT, env=env, text=True,
                            encoding="utf-8", stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    try:
        stdout, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return process.returncode, stdout, stderr


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[int, str, str]]:
    """Every lesson once, all at the same time, so the file takes as long as the slowest lesson."""
    processes = {lesson: start(lesson, offline_env()) for lesson in MARKERS}
    return {lesson: finish(process) for lesson, process in processes.items()}


@pytest.mark.parametrize("lesson", MARKERS)
def test_lesson_runs_offline_and_prints_its_markers(runs, lesson):
    code, stdout, stderr = runs[lesson]
    assert code == 0, stderr
    missing = [marker for marker in MARKERS[lesson] if marker not in stdout]
    assert not missing, f"{lesson} did not print {missing}:\n{stdout}"


@pytest.mark.parametrize("lesson", MARKERS)
def test_lesson_output_fits_in_two_screens(runs, lesson):
    assert len(runs[lesson][1].splitlines()) <= 80


def test_the_window_that_stops_lesson_01_is_never_hit_in_lesson_02(runs):
    assert "refused at ~" in runs["01_the_wall.py"][1]
    done = re.search(r"\[lesson 02\] done: (\d+) iterations, (\d+) compactions, .* (\d+) requests refused",
                     runs["02_sawtooth.py"][1])
    _, compactions, refused = map(int, done.groups())
    assert compactions >= 2 and refused == 0
    assert "[answer] [demo model] Surveyed" in runs["02_sawtooth.py"][1]


def test_lesson_04_counts_with_the_heuristic_when_bpe_openai_is_missing(tmp_path):
    (tmp_path / "bpe_openai.py").write_text("raise ImportError('not installed in this test')\n")
    code, stdout, stderr = finish(start("04_measuring_tokens.py", offline_env(PYTHONPATH=str(tmp_path))))
    assert code == 0, stderr
    assert "bpe-openai is not installed" in stdout and "estimate_tokens uses heuristic_tokens" in stdout
    assert "[lesson 04] done:" in stdout


@pytest.mark.parametrize("lesson, summaries", [("02_sawtooth.py", 3), ("03_summarizer.py", 1)])
def test_lesson_summarizes_with_the_configured_model(fake_openai, lesson, summaries):
    server = fake_openai(lambda body: (200, chat_response("## Goal\n- summary written by the fake model")))
    env = offline_env(OPENAI_BASE_URL=os.environ["OPENAI_BASE_URL"], OPENAI_API_KEY="sk-test")
    code, stdout, stderr = finish(start(lesson, env))
    assert code == 0, stderr
    assert "summary written by the fake model" in stdout and "no model configured" not in stdout
    assert len(server.requests) == summaries
    for request in server.requests:
        assert request["temperature"] == 0.1 and "tools" not in request
        assert [m["role"] for m in request["messages"]] == ["system", "user"]
