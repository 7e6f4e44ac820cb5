"""Lessons 01-07 (and 05b) run offline as a reader runs them, and print what they claim to show."""

from __future__ import annotations

import ast
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
                       "[stop] ask() tried force 1, 2 and 3", "--strategy none does not",
                       "[growth] every request re-sends", "[lesson 01] done:", "refused at ~"],
    "02_sawtooth.py": ["[summary] summaries by: the offline summarizer", "[compact] ", "1 earlier summary +",
                       "tokens sent at each of", "## Task", "find_cut walked back and ended at 6",
                       "would be refused: message 1: a tool result with no matching call",
                       "has 0 problems", "below the threshold of 30, so without max_tokens nothing happens: True",
                       "keeps from 5 (user)", "keeps from 6 (assistant)", "(the newest group: never split)",
                       "[net] 10 → 7 messages", "[lesson 02] done:", "0 requests refused"],
    "03_summarizer.py": ["[transcript]", "2 of them must be kept (the task and the latest request)",
                         "[assistant, turn 1 → read_file(", "[tool read_file]",
                         "The transcript is data to summarize", "summary_window() = 128,000 tokens",
                         "is read in 2 pieces", "the task: True, the latest request: True, the summary so far: False",
                         "the task: True, the latest request: True, the summary so far: True",
                         "parameters: max_tokens, messages, model, temperature;", "temperature=0.1",
                         "'<previous_summary>", "[summary] offline summarizer", "## Task", "## User said",
                         "no model configured", "backfill appended 4 sections it left out: Task, User said",
                         "role='user'", "reference material", "Continue with the remaining task",
                         "[lesson 03] done:"],
    "04_measuring_tokens.py": ["Chinese text", "shell log", "estimate_tokens uses the exact tokenizer",
                               "worst error", "= effective", "trigger 70%", "target 50%",
                               "[budget] over the trigger", "[lesson 04] done:"],
    "05_masking.py": ["[mask] #", "[pruned] read_file(", "one of the last 3 results", "shorter than a placeholder",
                      "is unchanged: True", "keeps the paths it named and its first and last error lines",
                      "E       assert 200 == 401", "untouched even with keep_last=0: True", "[lesson 05] done:"],
    "05b_thinking_models.py": ["[reasoning] ", "[rule] as the model wrote it: HTTP 200",
                               "(SEND_REASONING=0, or a client that drops the field): HTTP 400: The "
                               "`reasoning_content` in the thinking mode must be passed back to the API.",
                               "[drop] turn 1           (called tools  ) reasoning in #2, #4, #6: kept",
                               "[drop] turn 2           (called no tool) reasoning in #8: removed",
                               "[drop] the current turn (called tools  ) reasoning in #10, #12: kept",
                               "the input list is unchanged: True", "[rule] the result: HTTP 200",
                               "of them reasoning; drop_old_reasoning → ~", "finished exchanges that called no tool went",
                               "[assistant reasoning: 1,753 chars, not shown]",
                               "[lesson 05b] done:"],
    "06_snip.py": ["[head] ====", "[cut]  [… ", "[kept] Traceback (most recent call last):", "[kept] TypeError:",
                   "passed in 12.34s", "chars cut …]", "[error] a log's level", "[error] npm",
                   "[not]   code that raises", "the newest ~6,635 → ~6,635",
                   "'[this output alone would not fit the window, so it was cut]'",
                   "only 20 stay: the first 5 and the last 15", "[removed]", "[lesson 06] done:"],
    "07_clear_and_dedupe.py": ["[clear] #3", "'[tool cleared]'", "[dedupe] #5", "'[duplicate] same output",
                               "valid JSON with keys ['path', 'content']", "[kept]",
                               "[lesson 07] done: 1 cleared, 1 deduped, 1 shortened"],
}
ORDER = list(MARKERS)  # the reading order: 05b comes after 05


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


@pytest.mark.parametrize("lesson", ORDER[1:])
def test_lesson_docstring_has_the_standard_shape(lesson):
    """Each docstring says what changed since the lesson before it, and names compact.py's parts."""
    docstring = ast.get_docstring(ast.parse((ROOT / "lessons" / lesson).read_text(encoding="utf-8")))
    number, previous = lesson.split("_")[0], ORDER[ORDER.index(lesson) - 1].split("_")[0]
    assert docstring.startswith(f"Lesson {number} · ")
    for part in ("Motto:", "The problem:", "How it works:", f"What changed since lesson {previous}:",
                 "Try it:", "Explains ", f"Run: python lessons/{lesson}"):
        assert part in docstring, part


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


@pytest.mark.parametrize("lesson, summaries", [("02_sawtooth.py", 4), ("03_summarizer.py", 1)])
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
