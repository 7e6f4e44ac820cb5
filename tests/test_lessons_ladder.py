"""Lessons 08-14 and 16 run offline as a reader runs them, and print what they promise to show and
what the guides quote of them; each docstring's "Explains" line says where its names stand."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

import pytest

from conftest import cpu_seconds, lesson_command, offline_env, once_per_run
from test_lessons_first import GUIDES, LESSON_RATIO, unquoted

ROOT = Path(__file__).resolve().parent.parent


def run_all() -> dict[str, list]:
    """Every lesson at once, the way the README runs them, with no model configured: {lesson: [exit
    code, stdout, stderr]}. They run in parallel because each spends a second loading the tokenizer."""
    env = offline_env()
    started = {name: subprocess.Popen(lesson_command(name), cwd=ROOT, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for name in FILENAMES}
    done = {}
    for name, process in started.items():
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        done[name] = [process.returncode, stdout, stderr]
    return done


@functools.cache
def run_lesson(filename: str) -> subprocess.CompletedProcess:
    """One lesson's run; every lesson runs once for every worker of the test run."""
    code, stdout, stderr = once_per_run("lessons-ladder", run_all)[filename]
    return subprocess.CompletedProcess(["lessons/" + filename], code, stdout, stderr)


def found(pattern, text: str) -> bool:
    return bool(pattern.search(text)) if isinstance(pattern, re.Pattern) else pattern in text


LESSONS = [
    pytest.param("08_boundaries_and_validator.py", [
        "[head]", "[middle]", "[tail]", "moved out of a tool-call group",
        "[problem] anthropic the first message after the system prompt is not from the user",
        "[problem] openai    message 2: tool call call_0 has no result", "[naive]",
        "a system message after the start", "[system note] ",
        "[refused] sawtooth raises ValueError: message 1 has no valid role",
        re.compile(r"\[groups\] groups\(messages, 1\): \d+ messages in \d+ groups"),
        "what repair says it fixed is find_problems' openai list: True",
        re.compile(r"\[lesson 08\] done: .*repair made (\d+) of \1 broken lists valid"),
    ], [re.compile(r"tail starts at \d+ \(tool\)"), "STILL INVALID", "openai list: False"], id="08"),
    pytest.param("09_archive_and_recall.py", [
        "[archive] permissions 0o600", "'[secret masked]' is: True",
        "code kept as written: 'password = ReadOnlyPasswordHashField(': True",
        "code kept as written: 'token = request.GET.get(\"token\")': True",
        "[summary] [compactor] The full text of the compacted turns is archived in",
        re.compile(r"\[search\] 'UnicodeDecodeError'.*\n  #\d+ \[tool\]"),
        "the planted error is in what read returns: yes",
        '[recall] {"query": "UnicodeDecodeError"}', re.compile(r'\[recall\] \{"query": "#\d+"\}'),
        re.compile(r"\[sawtooth\] [1-9]\d* compactions; [1-9]\d* messages archived"),
        "[sawtooth] recall 'def load_cart' → #", "[lesson 09] done:",
    ], ["the leaked key is in the file: True", ": False\n"], id="09"),
    pytest.param("10_pinned_and_focus.py", [
        "'Do not modify deploy.sh.' verbatim under the summary, in the user's latest wording: 5 of 5 times",
        "'Answer in Chinese.' verbatim under the summary, in the user's latest wording: 5 of 5 times",
        re.compile(r"\[compaction 1\] .*state\.pinned = \['Do not modify deploy\.sh\.', 'Answer in Chinese\.'\]"),
        re.compile(r"\[compaction 5\] .*state\.pinned = \['Do NOT modify deploy\.sh\.', 'Answer in Chinese\.'\]"),
        "too: pinned once, in the newest wording ['Do NOT modify deploy.sh.'] (2 pins)",
        "→ ['Always run the tests 5 times.']", "→ ['Do not touch module_02.py.', 'Do not touch module_03.py.']",
        "is in state.pinned: False", "PIN_SHARE = 10%",
        re.compile(r"- … and \d+ earlier constraints, not shown for space; the recall tool finds them in the archive"),
        "--- focus=None\n  [focus] (no 'Relevant to the focus' section)",
        "[focus] FAILED tests/test_auth.py::test_login",
        "  [compactor] The user's other requests, the newest last:\n  - Do not modify deploy.sh. Answer in Chinese.\n"
        "  - Thanks. Please also look at the token expiry.\n  - Do NOT modify deploy.sh.\n",
        "no longer shows, and the pins stand alone: ['Do NOT modify deploy.sh.', 'Answer in Chinese.']",
        "[lesson 10] done: 2 user rules, each verbatim below 5 of 5 summaries",
    ], [], id="10"),
    pytest.param("11_compact_tool.py", [
        '[tool] compact {"focus": "the failed test in tests/test_auth_0.py"}',
        "[summarizer] received focus='which check in src/ can return 401'",
        "[summarizer] received focus='the failed test in tests/test_auth_0.py'",
        re.compile(r"\[compact\] \d+ → \d+ messages"), "[stand-in] The model is a fixed Python script",
        "under the trigger, so only the model's call compacts",
        re.compile(r"then the summary:\n +summary +\+[\d,]+ tokens removed"),
        re.compile(r"\n\[focus\] \S"),
        "[lesson 11] done: 2 compactions asked for by the model; 2 of 2 foci reached the summarizer",
    ], [], id="11"),
    pytest.param("12_eviction_and_rolling.py", [
        "user constraint", "routine output", "[evicted] ", "in their original order: True",
        "[kept] planted constraints still in context", "[rolling] compaction 2:",
        "tool counts add up at every compaction: yes", "[state] compactions=", "recent_files=",
        "[lesson 12] done:",
    ], [], id="12"),
    pytest.param("13_ladder.py", [
        re.compile(r"#1 +[\d,]+ → +[\d,]+ tok \| reasoning 0 · mask -"), " · summary -",
        re.compile(r"stopped below the summary rung \(\d+ right after masking, [1-9]\d* by cutting one output too "
               r"large\) and called no summarizer"),
        "last_error='ConnectionError: connection reset by peer'",
        "SummaryFailure: the summary looks like an error message",
        "last_error='SummaryFailure: the summarizer returned nothing'",
        re.compile(r"summary 3: summarizer called  → offline fallback +breaker open"),
        re.compile(r"summary 4: summarizer skipped → offline fallback +breaker open"),
        re.compile(r"summary 7: summarizer called  → its own summary +breaker closed"),
        "[overflow] after 20 turns: ContextOverflowError:\n    the latest turn",
        "[overflow] as the first task: ContextOverflowError:\n    the latest turn",
        "[last resort] a policy of one step, run at level 2 (steps: too large · last resort); it kept: "
        "system · summary · assistant · user",
        re.compile(r"\[light\] target 50% = [\d,]+ tok: light [\d,]+ → [\d,]+ reaches it: kept; model calls 0; "
                   r"steps: (too large · )?reasoning · light\n"),
        re.compile(r"\[light\] target 10% = [\d,]+ tok: light would not reach it, so it left [\d,]+ as it was; the "
                   r"summary rung rebuilds; model calls 1; steps: (too large · )?reasoning · light · summary"),
        re.compile(r"\[stats\] after failure 1: compactions: 1, tokens saved: [\d,]+; summarizer failures: 1, the last "
                   r"at \d\d:\d\d:\d\d \(ConnectionError: connection reset by peer\)\n\[stats\] after failure 2"),
        re.compile(r"\[stats\] after failure 3: compactions: 3, .*\n  WARNING: summaries are degraded: the summarizer "
                   r"failed 3 times in a row \(at \d\d:\d\d:\d\d, \d\d:\d\d:\d\d, \d\d:\d\d:\d\d\); the next 5 compactions"),
        "[lesson 13] done:", "light tier kept 1 of 2; breaker open: True",
    ], ["NOT raised", re.compile(r"after failure [12]: .*\n  WARNING")], id="13"),
    pytest.param("14_zones.py", [
        "lossless (tokens removed)", "more lossless-only passes", re.compile(r"evict -[\d,]+"),
        "[merge] 2 assistant messages → 1: 'The login test passes now.\\n\\nThe diff is small.'",
        re.compile(r"precise_tools=\(\) +bash results altered while in context: [1-9]"),
        re.compile(r"precise_tools=\('bash',\) bash results altered while in context: 0 of [1-9]"),
        re.compile(r"\[admit\] bash .*error line kept: True; cut \(no model\)"), re.compile(r"\[admit\] run_sql .*verbatim"),
        "[drift] - The timeout is 45 seconds (src/config.py) (unverified)",
        '[drift] - The user asked to modify the deploy script (the turns say "Do not modify the deploy script") (unverified)',
        "[drift] - 3 tests fail in tests/test_auth.py\n", "[lesson 14] done:",
    ], [], id="14"),
    pytest.param("16_presets.py", [
        "  preset              sent  compactions          summaries  constraints  decisions  errors",
        re.compile(r"\n  evo-agent +\d+\.\d%  \d+ \([1-9]\d* every call\) +\d+ +\d+ of \d+"),
        *(re.compile(rf"\n  {name} +\d+\.\d%  \d+( \(\d+ every call\))? +\d+ +\d+ of \d+ +\d+ of \d+ +\d+ of \d+\n")
          for name in ("five-layer", "smart-eviction", "echo-agent", "sawtooth-tutorial")),
        "[steps] evo-agent          mask · compact history · reasoning · summary · last resort",
        "[steps] five-layer         reasoning · batch snip+mask+clear+dedupe · light · summary · last resort",
        "[steps] smart-eviction     admit · reasoning · merge · dedupe · clear · mask · snip · shorten · evict · summary",
        "[steps] echo-agent         reasoning · mask · dedupe · snip · shorten · summary · last resort",
        "[steps] sawtooth-tutorial  reasoning · summary · last resort",
        "the default changes nothing (True); evo-agent masks 3 of 6 results, the last 3 stay whole",
        re.compile(r"\[evo-agent\] 6 reads of [\d,]+ characters, at \d+% of the window: the 3 left whole hold over "
                   r"50,000, so compact history summarizes: 14 → \d messages \(mask · compact history\)"),
        "[evo-agent] the focus ends the summary, as in every policy: '[compactor] Focus of this compaction: the parser module'",
        "a 3,000-line log → 'line 0' … 'line 99', '[… 2,880 lines cut …]', 'line 2980' … 'line 2999'",
        re.compile(r"\[five-layer\] cache first: the batch freed [\d,]+"),
        re.compile(r"\[five-layer\] the light tier ran in [1-9]\d* compactions: kept in [1-9]"),
        "the decision 4.5, a routine ls 3.0", "'最终结论：选择方案B，因为它更简单。' kept: True",
        "[zones] at 80%: zones default   lossy from 85%: ran no lossy step",
        re.compile(r"\[zones\] at 80%: smart-eviction  lossy from 75%: ran .*evict"),
        "smart-eviction plans with 90,000, the default 100,000", "one under 2,000 (frees) is not kept",
        "[confidence] - HAT123 departs at 10:40 from gate 7 (confidence: 2 of 3 facts found) (unverified)",
        "[echo-agent] [pruned] bash(grep -rn TODO src): 13 lines of output, 12 matches;",
        "[echo-agent] [pruned] read_file(src/app.py): 1,920 chars, 120 lines of the file;",
        re.compile(r"\[stats\] compactions: 1, tokens saved: [\d,]+; summarizer failures: 1, the last at "
                   r"\d\d:\d\d:\d\d \(RuntimeError: model down\)"),
        "[graded] summary 2: Earlier, in one line: ['I read auth.py.; Decided: compare with <= instead of <.']; Decisions: ['Decided: compare with <= instead of <.']; "
        "Progress: ['The check uses <= now. Running the tests.', 'The tests pass.']",
        "[lesson 16] done: 5 presets on one 150-turn conversation",
    ], ["kept: False", "(False)", "WARNING"], id="16"),
]


FILENAMES = [p.values[0] for p in LESSONS]


@pytest.mark.parametrize("filename, expected, unexpected", LESSONS)
def test_lesson_runs_offline_and_prints_its_markers(filename, expected, unexpected):
    done = run_lesson(filename)
    assert done.returncode == 0, done.stderr[-2000:]
    missing = [p if isinstance(p, str) else p.pattern for p in expected if not found(p, done.stdout)]
    present = [p if isinstance(p, str) else p.pattern for p in unexpected if found(p, done.stdout)]
    assert not missing and not present, f"missing {missing}, present {present}\n{done.stdout}"


@functools.cache
def lesson_01_cpu() -> float:
    """Lesson 01's CPU seconds, run here beside the others (test_lessons_first.py says why)."""
    done = subprocess.run(lesson_command("01_the_wall.py"), cwd=ROOT, env=offline_env(), capture_output=True, text=True)
    return cpu_seconds(done.stderr)


@pytest.mark.parametrize("filename", FILENAMES)
def test_each_lesson_takes_at_most_eight_times_lesson_01(filename):
    spent, reference = cpu_seconds(run_lesson(filename).stderr), lesson_01_cpu()
    assert spent <= LESSON_RATIO * reference, f"{filename}: {spent:.1f} s of CPU, lesson 01 {reference:.1f} s"


@pytest.mark.parametrize("guide", GUIDES)
@pytest.mark.parametrize("filename", FILENAMES)
def test_every_line_the_guides_quote_is_in_the_output(filename, guide):
    """What lessons/README.md and README.zh-CN.md quote of a lesson is what it prints."""
    done = run_lesson(filename)
    assert done.returncode == 0, done.stderr[-2000:]
    missing = unquoted(guide, filename, done.stdout)
    assert not missing, f"lessons/{guide} quotes lines {filename} does not print:\n" + "\n".join(missing)


@pytest.mark.parametrize("filename", FILENAMES)
def test_lesson_docstring_has_the_standard_shape(filename):
    docstring = ast.get_docstring(ast.parse((ROOT / "lessons" / filename).read_text(encoding="utf-8")))
    number = filename[:2]
    assert docstring.startswith(f"Lesson {number} · ")
    for part in ("Motto:", "The problem:", "How it works:", f"What changed since lesson {int(number) - 1:02d}:",
                 "Try it:", "Explains ", f"Run: python lessons/{filename}"):
        assert part in docstring, part


def test_presets_lesson_tail_grows_with_the_task_and_every_preset_keeps_the_constraints():
    """Lesson 16: smart eviction's raw tail, grown(20, 30), keeps more messages on a complex task than
    on a simple one; no preset loses a rule."""
    stdout = run_lesson("16_presets.py").stdout
    simple, complex_ = map(int, re.search(r"grown\(20, 30\) keeps, by the task's complexity: (\d+) messages at "
                                          r"0\.\d\d, (\d+) messages at 1\.00", stdout).groups())
    assert 20 <= simple < complex_, stdout
    rows = re.findall(r"^  (\S+) +\d+\.\d%  .*?(\d+) of (\d+) +\d+ of \d+ +\d+ of \d+$", stdout, re.M)
    assert len(rows) == 5 and all(kept == total for _, kept, total in rows), rows


def test_zones_run_lossy_steps_only_past_85_percent():
    """Every pass of lesson 14 that lists a lossy step started above 85% of the window; admission,
    which runs before every call, shows below it too."""
    rows = re.findall(r"#\d+ +(\d+)% → *\d+%  (.{9})(.{36}) (\S.*?) +[\d.]+ ms", run_lesson("14_zones.py").stdout)
    lossy_starts = [int(start) for start, _, _, lossy in rows if lossy != "—"]
    assert lossy_starts and min(lossy_starts) > 85, rows
    assert any(lossy == "—" for *_, lossy in rows), "the lossless zone never shows"
    assert any(int(start) <= 85 and admitted.strip() != "—" for start, admitted, _, _ in rows), rows


ALL_LESSONS = sorted(p.name for p in (ROOT / "lessons").glob("[01][0-9]*_*.py") if p.name[:2] != "15")


@pytest.mark.parametrize("filename", ALL_LESSONS)
def test_lessons_name_compact_py_parts_and_import_what_they_reuse(filename):
    """A docstring names Part I or a Part II section, never "section 4"; the replay and
    the counting summarizer live once, in lessons/benchmark.py, and lessons import them."""
    source = (ROOT / "lessons" / filename).read_text(encoding="utf-8")
    docstring = ast.get_docstring(ast.parse(source))
    assert not re.search(r"\bsection \d", docstring), filename
    assert "Part I" in docstring or filename.startswith("01_"), filename  # lesson 01 is the loop alone
    tree = ast.parse(source)
    defined = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert not defined & {"replay", "CountingSummarizer"}, filename


# --- Each "Explains" line names the part and the section each name stands in ---------

PART = re.compile(r"^# (Part (?:III|II|I)|Layer [123]) · (.+)$")
SECTION = re.compile(r"^# --- (.+?)\s*(?:\((?:lessons?|seeds?) [^)]*\))?\s*-*$")


@functools.cache
def layout(filename: str) -> tuple[dict, dict]:
    """compact.py's parts (tiny_agent.py's layers) as {"Part II": [(title, first, last), ...]}, the
    part's own title first and then its `# --- ` sections; and each top-level name's definition:
    {name: (line, {attribute names, for a class})}."""
    source = (ROOT / filename).read_text(encoding="utf-8")
    lines = source.splitlines()
    parts: dict[str, list] = {}
    current = None
    for number, line in enumerate(lines, start=1):
        if match := PART.match(line):
            current = match[1]
            parts[current] = [[match[2], number, len(lines)]]
        elif current and (match := SECTION.match(line)):
            parts[current].append([match[1], number, len(lines)])
    names = [p for p in parts]
    for i, part in enumerate(names):  # a part ends where the next begins; a section where the next begins
        end = parts[names[i + 1]][0][1] - 1 if i + 1 < len(names) else len(lines)
        parts[part][0][2] = end
        for j, section in enumerate(parts[part][1:], start=1):
            section[2] = parts[part][j + 1][1] - 1 if j + 1 < len(parts[part]) else end
    defined: dict[str, tuple[int, set]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            members = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            members |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
            defined[node.name] = (node.lineno, members)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defined.setdefault(name.id, (node.lineno, set()))
    return parts, defined


def explains_clause(docstring: str) -> str:
    """The docstring's "Explains ..." list: up to its first full stop."""
    text = " ".join(docstring.split("\nExplains ", 1)[1].split("\nRun:")[0].split())
    return re.split(r"\.(?:\s|$)", text, maxsplit=1)[0]


def titled(part: list, quoted: str) -> list:
    """The part's `# --- ` sections that start with `quoted` (then ":", "," or the end); else the
    part itself when its title does: "The ladder" is Part III's section of that name."""
    starts = [s for s in part if s[0] == quoted or re.match(re.escape(quoted) + r"[:,]", s[0])]
    return [s for s in starts if s is not part[0]] or starts


MARK = re.compile(r'(?P<file>compact\.py|tiny_agent\.py)|(?P<part>Part (?:III|II|I)\b|Layer [123]\b)'
                  r'|\((?P<sections>"[^"]+"(?:,\s*"[^"]+")*)\)')


def misplaced_names(clause: str) -> list[str]:
    """Every section the clause quotes that is not in the part it names, and every name of
    compact.py or tiny_agent.py it lists that is not defined in the part and sections it names."""
    wrong, file, part, sections = [], None, None, None
    position = 0
    for mark in [*MARK.finditer(clause), None]:
        text = clause[position:mark.start() if mark else len(clause)]
        if file:
            parts, defined = layout(file)
            whole = [(parts[part][0][1], parts[part][0][2])] if part else [(1, 10**9)]
            spans = [(s[1], s[2]) for q in sections for s in titled(parts[part], q)] if part and sections else whole
            bare = text
            while re.search(r"\([^()]*\)", bare):
                bare = re.sub(r"\([^()]*\)", "", bare)  # what an item says of itself: "(strategy none)"
            items = [m for m in re.findall(r"(?:^|[,;:])\s*([A-Za-z_]\w*)", bare) if m not in ("and", "the")]
            wrong += [f"{name} is not defined in {file}" for name in items if name not in defined]
            for word in re.findall(r"\b[A-Za-z_]\w*(?:\.\w+)?", text):
                name, _, member = word.partition(".")
                if name not in defined or word in ("compact.py", "tiny_agent.py"):
                    continue
                line, members = defined[name]
                if not any(a <= line <= b for a, b in (whole if member else spans)):  # a method: its class's part
                    wrong.append(f"{word} is not in {file} {part or ''} {sections or ''}".rstrip())
                elif member and members and member not in members:
                    wrong.append(f"{word}: {name} has no {member}")
        if mark is None:
            break
        position = mark.end()
        if mark["file"]:
            file, part, sections = mark["file"], None, None
        elif mark["part"]:
            file = "compact.py" if mark["part"].startswith("Part") else "tiny_agent.py"
            part, sections = mark["part"], None
        elif mark["sections"] and file and part:
            sections = re.findall(r'"([^"]+)"', mark["sections"])
            wrong += [f'no section "{q}" in {file} {part}' for q in sections if not titled(layout(file)[0][part], q)]
    return wrong


@pytest.mark.parametrize("filename", ALL_LESSONS)
def test_the_explains_line_names_the_part_and_section_of_each_name(filename):
    """The line "Explains compact.py Part II ("Tokens"): text_tokens, ..." is where text_tokens
    stands: a name moved to another part or section, or a section renamed, fails here."""
    docstring = ast.get_docstring(ast.parse((ROOT / "lessons" / filename).read_text(encoding="utf-8")))
    clause = explains_clause(docstring)
    assert re.search(r"\b(Part (?:III|II|I)|Layer [123])\b", clause) or filename.startswith("01_"), clause
    assert not misplaced_names(clause), (clause, misplaced_names(clause))


GUIDE_PARTS = {"第一部分": "Part I", "第二部分": "Part II", "第三部分": "Part III", "第一层": "Layer 1", "第二层": "Layer 2",
               "第三层": "Layer 3", "：": ": ", "；": "; ", "，": ", ", "。": ". "}


@pytest.mark.parametrize("guide,opening", [("README.md", "Explains "), ("README.zh-CN.md", "对应 ")])
def test_the_guides_explains_lines_name_the_part_and_section_of_each_name(guide, opening):
    """The same for each guide's "Explains" (对应) paragraph, read without its backticks: a section
    renamed or a function gone fails here and not in a reader's hands."""
    paragraphs = re.findall(rf"^{opening}.*?(?=\n\s*\n|\Z)", (ROOT / "lessons" / guide).read_text(encoding="utf-8"),
                            flags=re.M | re.S)
    assert len(paragraphs) == len(ALL_LESSONS) + 1  # and lesson 15's
    for paragraph in paragraphs:
        clause = " ".join(paragraph.replace("`", "").split())
        for words, english in GUIDE_PARTS.items():
            clause = clause.replace(words, english)
        clause = re.split(r"\.(?:\s|$)", clause.split(" ", 1)[1], maxsplit=1)[0]
        assert not misplaced_names(clause), (guide, clause, misplaced_names(clause))
