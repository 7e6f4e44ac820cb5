"""Lessons 01-07 (and 05b) run offline as a reader runs them, and print what they claim to show and
what the guides (lessons/README.md, lessons/README.zh-CN.md) quote of them."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import chat_response, cpu_seconds, lesson_command, offline_env, once_per_run
from test_sawtooth import pins_the_tutorials_numbers

ROOT = Path(__file__).resolve().parent.parent
# the lessons whose printed lines (their markers, the guides' quotes) are the tutorial's 30 and 6 at work
TUTORIAL_LESSONS = ("02_sawtooth.py", "03_measuring_tokens.py", "04_summarizer.py")


def written_for_the_tutorial(lesson: str) -> None:
    if lesson in TUTORIAL_LESSONS:
        pins_the_tutorials_numbers(f"{lesson}'s markers and the guides' quotes of it are its output at 30 and 6")

MARKERS = {
    "01_the_wall.py": ["[send] iteration  1:", "'code': 'context_length_exceeded'",
                       '"code": "context_length_exceeded"', "is_context_overflow(error) = True",
                       "[stop] before each retry served() asks the compaction for one level harder",
                       "strategy none cannot compact, so level 2 raised ContextOverflowError",
                       "the strategy none does not", "requests sent after it: 0",
                       "[growth] every request re-sends", "[lesson 01] done:", "refused at ~"],
    "02_sawtooth.py": ["[summary] summaries by: the lesson's stand-in (no model configured",
                       "[rule] above 30 messages, send [system prompt, a summary of the middle, the last 6]",
                       "[stand-in] The model is a fixed Python script",
                       "[compact] 34 → 10 messages: len - 6 = 28 is a tool message; find_cut stopped at 26, so 8 are kept",
                       "#26  assistant → bash, bash, bash  ◄ find_cut stops here", "◄ len - 6",
                       "whose call (#26) went into the summary",
                       "a server refuses a tool result that follows no call (HTTP 400)",
                       "the last middle held 1 earlier summary + 24 messages: the summary rolls forward",
                       "role='user'", "[Context summary] Earlier turns", "reference material", "- Task: Look at every",
                       "- Files read: cart.py, orders.py", "Continue with the remaining task", "[上下文摘要]",
                       "[chart] messages sent with each of the 21 requests", "messages: 2 6 10 14 18 22 26 30 10",
                       "[names] cutIndex and its while loop → find_cut",
                       "[names] compactMessages(messages) → compact_messages(messages)",
                       "[lesson 02] done:", "I looked at 20 of the 20 files"],
    "03_measuring_tokens.py": ["Chinese text", "shell log", "estimate_tokens uses the exact tokenizer",
                               "worst error", "below the threshold of 30, so without max_tokens nothing happens: True",
                               "find_cut_within keeps from 5 (user)", "find_cut_within keeps from 6 (assistant)",
                               "(the newest group: never split)", "[net] 10 → 8 messages",
                               "[net] sent now: system · summary · ACK · user · assistant · tool · tool · tool",
                               "OpenAI        overflow True   counted 130,412", "llama-server  overflow True   counted 5,010",
                               "a rate limit  overflow False  counted -", "= effective", "trigger 70%", "target 50%",
                               "[budget] over the trigger", "[tally] a Tally sums the first 78 messages once",
                               "it knows 78 and counts only the new one: +", "[lesson 03] done:"],
    "04_summarizer.py": ["[transcript]", "2 of them must be kept (the task and the latest request)",
                         "[assistant, turn 1 → read_file(", "[tool read_file]",
                         "The history is data to summarize", "summary_window() = 128,000 tokens",
                         "is read in 2 pieces", "the task: True, the latest request: True, the summary so far: False",
                         "the task: True, the latest request: True, the summary so far: True",
                         "parameters: max_tokens, messages, model, temperature;", "temperature=0.1",
                         "[request] system is SECTIONS_PROMPT", "SECTIONS_PROMPT starts with SUMMARY_PROMPT: True",
                         "## Earlier, in one line - the oldest progress", "… 11 more: Decisions, Files changed,",
                         "The user's own words are kept beside the summary: do not repeat",
                         "its 12 sections are SECTIONS, the format summarize_extractive writes too",
                         "'<previous_summary>", "[summary] offline summarizer", "## Decisions",
                         "no model configured", "backfill added 4 under its own '## Files changed'",
                         "the sections it left out: Errors seen, Identifiers",
                         "role='user'", "reference material", "(Compaction 1 replaced 48 messages",
                         "The user's task, verbatim:", "The user's other requests, the newest last:",
                         "[framing] the latest request stays a message: 'Quick interruption",
                         "Continue with the remaining task", "state.failures = 1",
                         "last_error = 'ConnectionError: the summary model is down'", "[lesson 04] done:"],
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
                   "[cut]  [… 211 lines cut: an old test run …]",
                   "chars cut: this output alone is over ~1,000 tokens, the limit for one new output, so it was cut …]'",
                   "only 20 stay: the first 5 and the last 15", "[removed]", "[lesson 06] done:"],
    "07_clear_and_dedupe.py": ["[clear] #3", "'[tool cleared]'", "[dedupe] #5", "'[duplicate] same output",
                               "valid JSON with keys ['path', 'content']", "[kept]",
                               "[lesson 07] done: 1 cleared, 1 deduped, 1 shortened"],
}
ORDER = list(MARKERS)  # the reading order: 05b comes after 05


def start(lesson: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen(lesson_command(lesson), cwd=ROOT, env=env, text=True,
                            encoding="utf-8", stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    try:
        stdout, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return process.returncode, stdout, stderr


def run_all() -> dict[str, tuple[int, str, str]]:
    """Every lesson once, all at the same time, so the file takes as long as the slowest lesson."""
    processes = {lesson: start(lesson, offline_env()) for lesson in MARKERS}
    return {lesson: finish(process) for lesson, process in processes.items()}


@pytest.fixture(scope="module")
def runs() -> dict[str, list]:
    """{lesson: [exit code, stdout, stderr]}, run once for every worker of the test run."""
    return once_per_run("lessons-first", run_all)


@pytest.mark.parametrize("lesson", MARKERS)
def test_lesson_runs_offline_and_prints_its_markers(runs, lesson):
    code, stdout, stderr = runs[lesson]
    assert code == 0, stderr
    written_for_the_tutorial(lesson)
    missing = [marker for marker in MARKERS[lesson] if marker not in stdout]
    assert not missing, f"{lesson} did not print {missing}:\n{stdout}"


# A lesson runs in seconds. Lesson 01 does little more than start Python and load the
# tokenizer (0.5-1.0 s of CPU on two cores, varying between runs): every lesson may take at most LESSON_RATIO times its CPU
# time measured in the same run (about 5 s), the benchmark, lesson 15, BENCHMARK_RATIO times (about 30 s).
LESSON_RATIO = 8
BENCHMARK_RATIO = 45


@pytest.mark.parametrize("lesson", MARKERS)
def test_each_lesson_takes_at_most_eight_times_lesson_01(runs, lesson):
    spent, reference = cpu_seconds(runs[lesson][2]), cpu_seconds(runs["01_the_wall.py"][2])
    assert spent <= LESSON_RATIO * reference, f"{lesson}: {spent:.1f} s of CPU, lesson 01 {reference:.1f} s"


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


def test_lesson_02_keeps_going_where_lesson_01_hit_the_wall(runs):
    """Lesson 01 is refused by a window its request really passed; lesson 02's loop, compacting at 30
    messages, finishes the task with every file still known from the summary or the tail."""
    size, window = (int(n.replace(",", "")) for n in
                    re.search(r"refused at ~([\d,]+) tokens > window ([\d,]+)", runs["01_the_wall.py"][1]).groups())
    assert size > window
    done = re.search(r"\[lesson 02\] done: (\d+) requests, (\d+) compactions, at most (\d+) messages sent "
                     r"\(threshold (\d+), keep_recent (\d+)\); I looked at (\d+) of the (\d+) files", runs["02_sawtooth.py"][1])
    _, compactions, most, threshold, _, seen, files = map(int, done.groups())
    assert compactions >= 2 and most <= threshold and seen == files


def test_lesson_03_counts_with_the_heuristic_when_bpe_openai_is_missing(tmp_path):
    (tmp_path / "bpe_openai.py").write_text("raise ImportError('not installed in this test')\n")
    code, stdout, stderr = finish(start("03_measuring_tokens.py", offline_env(PYTHONPATH=str(tmp_path))))
    assert code == 0, stderr
    assert "bpe-openai is not installed" in stdout and "estimate_tokens uses heuristic_tokens" in stdout
    assert "[lesson 03] done:" in stdout


def part_one_alone(tmp_path: Path) -> Path:
    """A fork that stops early: compact.py up to Part II and tiny_agent.py up to Layer 2 (ending as
    a Layer 1 fork ends), with lesson 02 beside them. Nothing else of the project is there."""
    compact = (ROOT / "compact.py").read_text(encoding="utf-8").splitlines(keepends=True)
    agent = (ROOT / "tiny_agent.py").read_text(encoding="utf-8").splitlines(keepends=True)
    part_two = next(i for i, line in enumerate(compact) if line.startswith("# Part II"))
    layer_two = next(i for i, line in enumerate(agent) if line.startswith("# Layer 2"))
    rule = max(i for i in range(layer_two) if agent[i].startswith("# ════"))
    (tmp_path / "compact.py").write_text("".join(compact[:part_two]), encoding="utf-8")
    (tmp_path / "tiny_agent.py").write_text("".join(agent[:rule]) + '\nif __name__ == "__main__":\n'
                                            "    sys.exit(one_task())\n", encoding="utf-8")
    (tmp_path / "lessons").mkdir()
    shutil.copy(ROOT / "lessons" / "02_sawtooth.py", tmp_path / "lessons")
    return tmp_path


def test_lesson_02_runs_with_part_one_and_layer_one_alone(runs, tmp_path):
    """Lesson 02 explains Part I and imports nothing below it, nor below tiny_agent's
    Layer 1, nor lessons/show.py (which imports Part II): run against the fork above, it prints
    what it prints with the whole project."""
    fork = part_one_alone(tmp_path)
    assert "def sawtooth(" not in (fork / "compact.py").read_text() and "def main(" not in (fork / "tiny_agent.py").read_text()
    process = subprocess.run([sys.executable, "lessons/02_sawtooth.py"], cwd=fork, env=offline_env(PYTHONPATH=str(fork)),
                             capture_output=True, text=True, encoding="utf-8", timeout=60)
    assert process.returncode == 0, process.stderr
    assert process.stdout == runs["02_sawtooth.py"][1]
    source = (ROOT / "lessons" / "02_sawtooth.py").read_text(encoding="utf-8")
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(source))
                for alias in (node.names if isinstance(node, ast.Import) else [])}
    imported |= {node.module for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)}
    assert "show" not in imported and "conversations" not in imported and "benchmark" not in imported


@pytest.mark.parametrize("lesson, summaries", [("02_sawtooth.py", 3), ("04_summarizer.py", 1)])
def test_lesson_summarizes_with_the_configured_model(fake_openai, lesson, summaries):
    if lesson == "02_sawtooth.py":  # its three summaries are the tutorial's numbers at work
        written_for_the_tutorial(lesson)
    server = fake_openai(lambda body: (200, chat_response("## Progress\n- summary written by the fake model")))
    env = offline_env(OPENAI_BASE_URL=os.environ["OPENAI_BASE_URL"], OPENAI_API_KEY="sk-test")
    code, stdout, stderr = finish(start(lesson, env))
    assert code == 0, stderr
    assert "summary written by the fake model" in stdout and "no model configured" not in stdout
    assert len(server.requests) == summaries
    for request in server.requests:
        assert request["temperature"] == 0.1 and "tools" not in request
        assert [m["role"] for m in request["messages"]] == ["system", "user"]


# --- Every line the guides quote of a lesson is in what the lesson prints ----------

GUIDES = ("README.md", "README.zh-CN.md")
HEADING = re.compile(r"^## (\d\d[a-z]?) · ")


def guide_quotes(guide: str) -> dict[str, list[str]]:
    """{lesson file: the lines the guide quotes as its output}: every line of the fenced blocks with
    no language (```bash blocks are commands) under the lesson's "## NN · " heading."""
    quotes: dict[str, list[str]] = {}
    lesson, fence = None, None
    for line in (ROOT / "lessons" / guide).read_text(encoding="utf-8").splitlines():
        if fence is None and line.startswith("## "):
            match = HEADING.match(line)
            lesson = match and next((ROOT / "lessons").glob(f"{match[1]}_*.py")).name
        elif line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            if fence == "" and lesson:
                quotes.setdefault(lesson, [])
        elif fence == "" and lesson and line.strip():
            quotes[lesson].append(line.strip())
    return quotes


def quoted_line(line: str) -> re.Pattern:
    """A quoted line as a pattern on one output line: "…" stands for what the guide left out."""
    return re.compile(r"[^\n]*?".join(re.escape(piece) for piece in line.split("…")))


def unquoted(guide: str, lesson: str, stdout: str) -> list[str]:
    """The lines `guide` quotes of `lesson` that its output does not contain. The guides' set-up
    installs the `tokens` extra and their token counts are counted with it, as the dev extra's are."""
    pytest.importorskip("bpe_openai", reason='the guides quote counts of the tokens extra: pip install -e ".[tokens]"')
    quotes = guide_quotes(guide)
    assert quotes.get(lesson), f"lessons/{guide} quotes no output of {lesson}"
    return [line for line in quotes[lesson] if not quoted_line(line).search(stdout)]


@pytest.mark.parametrize("guide", GUIDES)
@pytest.mark.parametrize("lesson", MARKERS)
def test_every_line_the_guides_quote_is_in_the_output(runs, guide, lesson):
    code, stdout, stderr = runs[lesson]
    assert code == 0, stderr
    written_for_the_tutorial(lesson)
    missing = unquoted(guide, lesson, stdout)
    assert not missing, f"lessons/{guide} quotes lines {lesson} does not print:\n" + "\n".join(missing)


def test_both_guides_quote_the_same_run():
    """The Chinese guide quotes the lines the English one does, lesson by lesson, so
    neither can keep an older run's output (lesson 15's tables live in the English guide only,
    written there by the benchmark, and the Chinese guide points to them)."""
    english, chinese = guide_quotes("README.md"), guide_quotes("README.zh-CN.md")
    assert english == chinese, sorted(k for k in english.keys() | chinese.keys() if english.get(k) != chinese.get(k))
