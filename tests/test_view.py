"""The page that shows every compaction: `--view` (with a task, with --demo, with --resume,
written when the run ends) and `/view` in the REPL write one self-contained HTML file beside the
session and print its path on a line of its own. The browser tests open it in headless Chromium with
JavaScript off and read what it renders, at a phone's width and a desktop's, against what the run
itself printed and kept (its [compact] lines, its session file, its archive); they skip with one line
where Chromium, chromedriver or selenium is missing (.ci/run installs them). The page of lesson 15's
250-turn generated run is measured: its size is held under 2 MB here, its time to open is printed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import DEFAULT_INSTALL, ROOT, chat_response
from test_repl import (AGENT, DEADLINE, Script, agent_env, assert_one_line_error, latest, piped, records,  # noqa: F401
                       run_agent, server)

import compact
import tiny_agent
from conversations import generate_conversation

SCREENSHOT = ROOT / "docs" / "compaction-page.png"  # the README and the guides show it; SCREENSHOT=1 rewrites it
WIDTHS = (390, 1280)  # a phone's, a desktop's
COMPACT_LINE = re.compile(r"^(?:you> )?\[compact\] (\d+) → (\d+) messages, request ~([\d,]+) tokens .*→ ~([\d,]+) estimated$", re.M)
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "span", "b", "a", "div", "svg", "rect",
        "line", "table", "tr", "th", "td", "section", "ol", "li", "pre", "details", "summary", "article"}


class Markup(HTMLParser):
    """A page's markup, parsed: its tags, the places its links and attributes lead, its style sheet."""

    def __init__(self, text: str):
        super().__init__()
        self.tags, self.leads, self.handlers, self.style, self.styling = set(), [], [], "", False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.leads += [value for name, value in attrs if name in ("href", "src", "srcset", "action", "xlink:href")]
        self.handlers += [name for name, _ in attrs if name.startswith("on")]
        self.styling = tag == "style"

    def handle_data(self, data):
        self.style += data if self.styling else ""

    def handle_endtag(self, tag):
        self.styling = False


def self_contained(page: Path) -> None:
    """Nothing on the page runs or comes from elsewhere: known tags only, no script, no handler, every
    link an anchor on the page itself, a style sheet that fetches nothing (no font, no image)."""
    markup = Markup(page.read_text(encoding="utf-8"))
    assert markup.tags <= TAGS, markup.tags - TAGS
    assert not markup.handlers and all(lead.startswith("#") for lead in markup.leads), markup.leads[:5]
    assert "url(" not in markup.style and "@import" not in markup.style and "@font-face" not in markup.style


def page_path(stdout: str) -> Path:
    """The page a run wrote: the line after "[view] …", which holds its path and nothing else."""
    lines = stdout.splitlines()
    found = [lines[i + 1] for i, line in enumerate(lines[:-1]) if line.endswith("open it in a browser:")]
    assert found, stdout[-2000:]
    path = Path(found[-1])
    assert path.is_file() and path.suffix == ".html", found
    return path


STEP_LINE = re.compile(r" {10}(\S.*?) +(?:[+-][\d,]+ tokens removed|nothing to do)")


def compactions(stdout: str) -> list[dict]:
    """Each compaction as the run printed it: its [compact] line (messages and the request's tokens,
    before and after) and the line of each step under it."""
    found = []
    for match in COMPACT_LINE.finditer(stdout):
        numbers = [int(n.replace(",", "")) for n in match.groups()]
        steps = []
        for line in stdout[match.end() + 1:].split("\n"):
            if not STEP_LINE.fullmatch(line):
                break
            steps.append(STEP_LINE.fullmatch(line)[1])
        found.append({"messages": tuple(numbers[:2]), "tokens": tuple(numbers[2:]), "steps": steps})
    return found


def archive_links(records: list[dict]) -> dict[int, set[int]]:
    """Compaction number -> the archive records it wrote: what its panel must link to."""
    links: dict[int, set[int]] = {}
    for n, record in enumerate(records):
        links.setdefault(record["compaction"], set()).add(n)
    return links


# --- Running the agent: the demo, and a REPL session with three compactions on a scripted server -----


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[str, Path]:
    """`python tiny_agent.py --demo --view`, as a reader runs it after the README's first command: its
    output and the page it wrote."""
    home = tmp_path_factory.mktemp("demo")
    env = {**agent_env(), "XDG_STATE_HOME": str(home), "PYTHONPATH": DEFAULT_INSTALL}
    done = subprocess.run([sys.executable, str(AGENT), "--demo", "--view"], env=env, cwd=home, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return done.stdout, page_path(done.stdout)


NOTE = "the cache is stale again. " * 250  # ~1,500 tokens: a read the summary frees
QUESTIONS = ["Read the notes. Do not modify deploy.sh.", "Read two more.", "/view", "/compact the notes", "And two more."]


def scripted(server, workspace: Path, cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess, Script]:
    """A REPL session piped its questions (/view and /compact among them) on a scripted server: two file
    reads and an answer a question, the sawtooth at 8 messages keeping 2; three compactions (the
    threshold, /compact, the threshold), each summary the server's "SUMMARY-k". The first note holds
    markup, which the page must show as text."""
    (workspace / "notes").mkdir(exist_ok=True)
    for i in range(8):
        (workspace / "notes" / f"{i}.txt").write_text(f"NOTE-{i} <script>alert('{i}')</script> {NOTE}")
    steps = []
    for q in range(3):
        steps += [chat_response(f"Reading note {n}.", [(f"call_{n}", "read_file", {"path": f"notes/{n}.txt"})])
                  for n in (2 * q, 2 * q + 1)] + [chat_response(f"ANSWER-{q}: the cache is stale.")]
    script = Script(server, steps, summary=[f"## Progress\n- SUMMARY-{k}: the agent read the notes." for k in range(1, 9)])
    done = piped(["--workspace", str(workspace), "--threshold", "8", "--keep-recent", "2", *args], "\n".join(QUESTIONS)
                 + "\n", agent_env(script.base_url, CONTEXT_WINDOW="16000"), cwd)
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr[-2000:]
    return done, script


@pytest.fixture
def session_run(server, tmp_path):
    """The scripted REPL session with --view: its output, the page written at its end, its saved
    session (read by the agent's own reader) and its archive's records."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "cwd").mkdir()
    done, script = scripted(server, workspace, tmp_path / "cwd", "--view")
    saved = tiny_agent.read_session(latest(records(workspace)))
    return {"stdout": done.stdout, "page": page_path(done.stdout), "saved": saved, "workspace": workspace,
            "archive": compact.Archive(Path(saved["archive"])).records(), "script": script}


# --- Without a browser: the flags, the file, what a damaged record gives ------------------------


def test_the_demo_with_view_writes_one_self_contained_page_and_prints_its_path(demo):
    stdout, page = demo
    assert "[demo] The model is a deterministic stand-in" in stdout
    assert stdout.rstrip("\n").splitlines()[-1] == str(page)  # the last line: the path, alone
    assert page.parent.parent.name == "tiny-agent" and page.with_suffix(".jsonl").name in os.listdir(page.parent / "archive")
    self_contained(page)
    text = page.read_text(encoding="utf-8")
    assert text.count('<section class=compaction id="c') == len(compactions(stdout)) >= 3


def test_slash_view_and_view_write_the_page_beside_the_session(session_run):
    stdout, page, saved = session_run["stdout"], session_run["page"], session_run["saved"]
    assert latest(records(session_run["workspace"])).with_suffix(".html") == page  # beside the session, its name
    assert stdout.count(f"\n{page}\n") == 2  # /view, then --view when the REPL ended: the path on a line of its own
    log = saved["state"].log
    assert [entry["compaction"] for entry in log] == [1, 2, 3] and len(compactions(stdout)) == 3
    assert [len(pair) for pair in saved["sent"]] == [2] * len(saved["sent"]) and len(saved["sent"]) == 9
    answered = [len(re.findall(r"\[tool\] |agent> ", stdout[:m.start()])) for m in COMPACT_LINE.finditer(stdout)]
    assert [entry["request"] for entry in log] == answered == [4, 6, 7]  # the requests before each: the page's marks
    self_contained(page)


def test_view_with_resume_draws_the_whole_session_and_a_damaged_record_is_one_line(server, session_run, tmp_path):
    """The page of a resumed session, written when the run ends, has the compactions and requests of
    the run before; a record the session file holds damaged is one line on it, not a traceback."""
    folder, workspace = records(session_run["workspace"]), session_run["workspace"]
    path = latest(folder)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["state"]["log"][1] = {"compaction": "two"}
    data["state"]["log"][2]["before"][3] = ["tool result", "many", "kept", None, ""]
    data["state"]["log"].append("not a record")
    path.write_text(json.dumps(data), encoding="utf-8")
    script = Script(server, [chat_response("RESUMED-ANSWER")])
    done = run_agent(["--workspace", str(workspace), "--resume", "--view", "go on"], agent_env(script.base_url,
                     CONTEXT_WINDOW="16000"), tmp_path / "cwd")
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr[-2000:]
    text = page_path(done.stdout).read_text(encoding="utf-8")
    assert "Strategy sawtooth: 10 requests, 4 compactions recorded." in text  # 9 before the resume, and this one
    assert '<section class=compaction id="c1">' in text and '<section class=compaction id="c2">' not in text
    damaged = re.findall(r"<p class=damaged>A compaction's record could not be drawn: ([^<]*)</p>", text)
    assert damaged == ["its field &#x27;compaction&#x27; is missing or of the wrong type.",
                       "row 3 of &#x27;before&#x27; is not what compaction_record writes.", "it is a str, not a record."]


def test_a_damaged_sent_list_in_the_session_file_is_one_line(server, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (records(workspace) / "session.json").write_text(json.dumps({"version": 2, "strategy": "sawtooth", "sent": [[1]],
                                                                 "messages": [{"role": "user", "content": "q"}]}))
    done = run_agent(["--workspace", str(workspace), "--resume", "go on"], agent_env(Script(server).base_url), tmp_path)
    assert_one_line_error(done, "session.json is damaged", "sent is not a list of [messages, tokens] pairs")


def replayed(turns: int, strategy: str, folder: Path, seed: int = 0, window: int = 32_000) -> tiny_agent.Session:
    """Lesson 15's generated run (its window, 32,000) played through the agent's own compaction and
    served model, as the loop plays it, its tool results taken from the run: a session to draw."""
    conversation = generate_conversation(turns, seed).messages
    session = tiny_agent.new_session(tiny_agent.Config(strategy=strategy, context_window=window),
                                     compact.summarize_extractive, archive_dir=folder / "archive")
    session.messages = conversation[:1]
    replies = iter([m for m in conversation if m["role"] == "assistant"])
    model = tiny_agent.served(session, lambda messages, tools: {**next(replies), "usage": compact.estimate_tokens(
        messages) + tiny_agent.schema_tokens()}, log=lambda line: None)
    for message in conversation[1:]:
        if message["role"] == "assistant":
            tiny_agent.compact_now(session, log=lambda line: None)
            message = model(session.messages, tiny_agent.TOOL_SCHEMAS)
        session.messages.append(message)
    return session


@pytest.mark.parametrize("strategy", ["sawtooth", "layered"])
def test_the_page_of_a_250_turn_session_weighs_under_2_mb(tmp_path, strategy, capsys):
    session = replayed(250, strategy, tmp_path)
    page = tiny_agent.write_view(session, tmp_path / "page.html", log=lambda line: None)
    size = page.stat().st_size
    with capsys.disabled():
        print(f"\n[view] 250 turns, {strategy}: {len(session.compaction.sent)} requests, "
              f"{session.compaction.compactions} compactions, a page of {size / 1e6:.2f} MB")
    assert session.compaction.compactions >= 10 and size < 2_000_000


def test_markup_in_a_message_and_a_damaged_archive_are_shown_as_text_and_one_line(tmp_path):
    """What the page shows from outside is escaped; an archive cut short is one line, and a record it
    no longer holds is one line at the anchor its link points to."""
    session = replayed(40, "sawtooth", tmp_path, window=8_000)
    archive = session.compaction.archive.path
    tiny_agent.write_view(session, tmp_path / "whole.html", log=lambda line: None)
    assert "<script" not in (tmp_path / "whole.html").read_text(encoding="utf-8")
    lines = archive.read_text(encoding="utf-8").splitlines(keepends=True)
    archive.write_text("".join(lines[:10]) + lines[10][:20], encoding="utf-8")  # a write cut short
    said = []
    text = tiny_agent.write_view(session, tmp_path / "cut.html", log=said.append).read_text(encoding="utf-8")
    assert said[-1] == str(tmp_path / "cut.html")
    assert len(re.findall(r"<p class=damaged>the archive [^<]* could not be read \(", text)) == 1
    archive.write_text("".join(lines[:10]), encoding="utf-8")  # a file holding only the first ten records
    text = tiny_agent.write_view(session, tmp_path / "short.html", log=said.append).read_text(encoding="utf-8")
    assert '<p class=damaged id="a10">archive #10: the archive file holds no such record.</p>' in text
    assert '<article class=record id="a9">' in text


@pytest.mark.parametrize("level, tokens, messages, why", [
    (2, 0, 3, "as far as it goes: the server refused the request as too long again"),
    (1, 0, 3, "now: /compact, the model's compact tool, or the server refused the request as too long"),
    (0, 7_001, 3, "the history passed the trigger, 70% of the room for messages"),
    (0, 100, 31, "more than 30 messages"),
    (0, 100, 3, "a step that runs before every call, or one output too large alone")])
def test_each_panel_says_why_its_compaction_happened(level, tokens, messages, why):
    entry = {"level": level, "before_tokens": tokens, "trigger": 0.7, "effective": 10_000, "before": [[]] * messages}
    assert tiny_agent.cause(entry, 30) == why


def test_view_on_a_session_with_no_compaction_says_so(tmp_path):
    session = tiny_agent.new_session(tiny_agent.Config())
    text = tiny_agent.write_view(session, tmp_path / "page.html", log=lambda line: None).read_text(encoding="utf-8")
    assert "No request was sent yet" in text and "No compaction yet" in text


# --- In a browser: headless Chromium, JavaScript off, at a phone's width and a desktop's -------


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium with JavaScript off, driven by selenium; without them, one line says what is missing."""
    missing = [name for name in ("chromium", "chromedriver") if not shutil.which(name)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        webdriver = None
        missing.append('selenium (pip install -e ".[dev]")')
    if missing:
        pytest.skip(f"the browser tests need {', '.join(missing)}; .ci/run installs Debian's chromium and chromium-driver")
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.binary_location = shutil.which("chromium")
    options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


def opened(driver, page: Path, width: int) -> float:
    """Open `page` at `width` pixels; the seconds until it was loaded, as the browser timed it."""
    driver.set_window_size(width, 1000)
    driver.get(page.as_uri())
    assert driver.execute_script("return window.innerWidth") == width
    assert driver.execute_script("return document.documentElement.scrollWidth") <= width  # nothing wider than the screen
    return driver.execute_script("return performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000


def original(record: dict) -> str:
    """A few words of what an archived message held, to find on the page it is shown on."""
    message = record["message"]
    text = compact.content_text(message) or (message.get("tool_calls") or [{}])[0].get("id", "")
    return " ".join(text.split())[:80]


def check_panels(driver, expected: list[dict], records: list[dict]) -> None:
    """Each compaction's panel as the browser renders it: its numbers, why, its steps, its blocks side by
    side (as many as the messages, those that left marked), its summary, and its archive links, one of
    them followed to the original it leads to."""
    from selenium.webdriver.common.by import By
    sections = driver.find_elements(By.CSS_SELECTOR, "section.compaction")
    assert [s.get_attribute("id") for s in sections] == [f"c{k}" for k in range(1, len(expected) + 1)]
    for section, want in zip(sections, expected):
        assert section.is_displayed()
        assert section.find_element(By.CSS_SELECTOR, ".counts").text == f"{want['messages'][0]} → {want['messages'][1]} messages"
        assert section.find_element(By.CSS_SELECTOR, ".tokens").text == f"{want['tokens'][0]:,} → {want['tokens'][1]:,} tokens"
        assert want.get("why", "Why: ") in section.find_element(By.CSS_SELECTOR, "p.note").text
        rows = section.find_elements(By.CSS_SELECTOR, "table.steps tr")[1:]
        assert [row.find_element(By.TAG_NAME, "td").text for row in rows] == want["steps"]
        before, after = (section.find_element(By.CSS_SELECTOR, f"div.{side}") for side in ("before", "after"))
        assert before.rect["x"] + before.rect["width"] <= after.rect["x"] and before.rect["y"] == after.rect["y"]
        blocks = before.find_elements(By.CSS_SELECTOR, "li")
        assert len(blocks) == want["messages"][0] and len(after.find_elements(By.CSS_SELECTOR, "li")) == want["messages"][1]
        assert all(block.is_displayed() and block.size["height"] >= 16 for block in blocks)
        gone = before.find_elements(By.CSS_SELECTOR, "li.gone")
        assert gone and all(" → " in block.text for block in gone) and len(gone) == want.get("gone", len(gone))
        links = before.find_elements(By.CSS_SELECTOR, "a")
        assert {int(a.get_attribute("href").rsplit("#a", 1)[1]) for a in links} == want["links"]
        if want["summary"] is not None:
            summary = section.find_element(By.CSS_SELECTOR, "pre.summary")
            assert summary.is_displayed() and want["summary"] in summary.text
            assert any(" by summary " in block.text + " " for block in after.find_elements(By.CSS_SELECTOR, "li"))
        follow(driver, links[0], records)
    check_blocks(driver, sections[0])


def follow(driver, link, records: list[dict]) -> None:
    """Click an archive link: the page scrolls to the original, which shows what the archive holds."""
    from selenium.webdriver.common.by import By
    k = int(link.get_attribute("href").rsplit("#a", 1)[1])
    link.click()
    target = driver.find_element(By.ID, f"a{k}")
    assert driver.current_url.endswith(f"#a{k}") and target.is_displayed()
    assert -1 < driver.execute_script("return arguments[0].getBoundingClientRect().top", target) < 1000  # in view
    assert original(records[k]) in " ".join(target.text.split())


def check_blocks(driver, section) -> None:
    """In one panel: each block has the colour the key gives its kind, one that left is outlined in
    dashes, and the block of the most tokens is the tallest."""
    from selenium.webdriver.common.by import By
    key = {span.text: span.value_of_css_property("background-color")
           for span in driver.find_elements(By.CSS_SELECTOR, "p.key span")}
    blocks = section.find_elements(By.CSS_SELECTOR, "ol.blocks li")
    for block in blocks:
        kind = block.text.rsplit(" · ", 1)[1].split("archive #")[0].strip()
        assert block.value_of_css_property("background-color") == key[kind], block.text
        left = "gone" in block.get_attribute("class").split()
        assert (block.value_of_css_property("outline-style") == "dashed") == left, block.text
    tokens = [int(block.text.split(" · ")[1].replace(",", "")) for block in blocks]
    heights = [block.size["height"] for block in blocks]
    assert heights[tokens.index(max(tokens))] == max(heights)


def check_chart(driver, expected: list[dict], window: int) -> None:
    """The sawtooth: a bar a request, each compaction's number above it linking to its panel, and the
    window named under it."""
    from selenium.webdriver.common.by import By
    marks = driver.find_elements(By.CSS_SELECTOR, ".marks a")
    assert marks and marks[0].text == "1" and all(mark.is_displayed() for mark in marks)
    assert all(mark.get_attribute("href").endswith(f"#c{mark.text}") for mark in marks)
    assert {int(mark.text) for mark in marks} <= set(range(1, len(expected) + 1))
    assert f"window {window:,}" in driver.find_element(By.CSS_SELECTOR, "div.chart + p.note").text


def demo_expected(stdout: str, page: Path) -> tuple[list[dict], list[dict]]:
    """What each panel of the demo's page must show, from what the demo printed ([compact] lines and
    their steps) and its archive: the records each compaction wrote there, and its summary, which the
    archive holds too once the next compaction replaced it."""
    records = compact.Archive(page.parent / "archive" / page.with_suffix(".jsonl").name).records()
    links = archive_links(records)
    summaries = {r["compaction"] - 1: compact.summary_body(r["message"]) for r in records if compact.is_summary(r["message"])}
    expected = [{**printed, "links": links[k], "summary": summaries.get(k, "## ")[:200]}
                for k, printed in enumerate(compactions(stdout), 1)]
    return expected, records


@pytest.mark.parametrize("width", WIDTHS)
def test_the_demos_page_shows_every_compaction_in_a_browser(browser, demo, width, tmp_path):
    stdout, page = demo
    expected, records = demo_expected(stdout, page)
    opened(browser, page, width)
    check_chart(browser, expected, tiny_agent.DEMO_WINDOW)
    check_panels(browser, expected, records)
    if width == max(WIDTHS):  # the picture the README and the guides show: the top of the page
        browser.set_window_size(width, 1500)
        browser.get(page.as_uri())
        browser.save_screenshot(str(tmp_path / "page.png"))
        if os.environ.get("SCREENSHOT") == "1":
            shutil.copy(tmp_path / "page.png", SCREENSHOT)


def test_the_layered_demos_page_shows_masking_before_a_summary(browser, tmp_path):
    """The guide's second command: the ladder's first compaction keeps every message and masks old
    outputs, their placeholders listed."""
    from selenium.webdriver.common.by import By
    env = {**agent_env(), "XDG_STATE_HOME": str(tmp_path), "PYTHONPATH": DEFAULT_INSTALL}
    done = subprocess.run([sys.executable, str(AGENT), "--demo", "--view", "--strategy", "layered"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    printed = compactions(done.stdout)
    assert done.returncode == 0 and printed[0]["messages"][0] == printed[0]["messages"][1], done.stderr[-2000:]
    opened(browser, page_path(done.stdout), max(WIDTHS))
    first = browser.find_element(By.CSS_SELECTOR, "section.compaction")
    assert first.find_element(By.CSS_SELECTOR, ".counts").text == "{0} → {0} messages".format(printed[0]["messages"][0])
    masked = first.find_elements(By.CSS_SELECTOR, "div.before li.gone")
    assert masked and all(" → mask · " in block.text for block in masked)
    listed = first.find_element(By.CSS_SELECTOR, "details summary").text
    assert listed == f"What the steps wrote in place of what they took ({len(masked)})"


@pytest.mark.parametrize("width", WIDTHS)
def test_a_sessions_page_shows_its_three_compactions_in_a_browser(browser, session_run, width):
    """The scripted session's page at its end: the numbers of its [compact] lines and of its session
    file, why each happened, the server's summaries, the user's rule carried under them, and the
    markup a note held shown as text."""
    from selenium.webdriver.common.by import By
    stdout, log, records = session_run["stdout"], session_run["saved"]["state"].log, session_run["archive"]
    links, expected = archive_links(records), []
    why = ["more than 8 messages", "now: /compact", "more than 8 messages"]
    for k, (printed, entry) in enumerate(zip(compactions(stdout), log), 1):
        outside = printed["tokens"][0] - entry["before_tokens"]  # the request's tokens besides the history
        expected.append({**printed, "tokens": (printed["tokens"][0], entry["after_tokens"] + outside), "links": links[k],
                         "summary": f"SUMMARY-{k}: the agent read the notes.", "why": f"Why: {why[k - 1]}",
                         "gone": sum(row[2] != "kept" for row in entry["before"])})
    opened(browser, session_run["page"], width)
    check_chart(browser, expected, 16_000)
    check_panels(browser, expected, records)
    words = browser.find_elements(By.CSS_SELECTOR, "section.compaction .words")
    assert "Do not modify deploy.sh." in words[-1].text
    note = next(k for k, r in enumerate(records) if "NOTE-0 " in compact.content_text(r["message"]))
    browser.find_element(By.CSS_SELECTOR, f'a[href="#a{note}"]').click()
    assert "NOTE-0 <script>alert('0')</script>" in browser.find_element(By.ID, f"a{note}").text


def test_the_page_of_a_250_turn_session_opens_in_a_browser(browser, tmp_path, capsys):
    """Lesson 15's 250-turn run, sawtooth: every panel is there; the time to open it is printed, not judged."""
    from selenium.webdriver.common.by import By
    session = replayed(250, "sawtooth", tmp_path)
    page = tiny_agent.write_view(session, tmp_path / "page.html", log=lambda line: None)
    log = session.compaction.state.log
    for width in WIDTHS:
        start = time.perf_counter()
        loaded = opened(browser, page, width)
        seconds = time.perf_counter() - start
        sections = browser.find_elements(By.CSS_SELECTOR, "section.compaction")
        assert len(sections) == len(log) and sections[-1].find_element(By.CSS_SELECTOR, ".counts").text == \
            f"{len(log[-1]['before'])} → {len(log[-1]['after'])} messages"
        with capsys.disabled():
            print(f"\n[view] 250 turns, {page.stat().st_size / 1e6:.2f} MB, {len(log)} panels, at {width} px: loaded "
                  f"in {loaded:.2f} s (the browser's clock), {seconds:.2f} s until the driver had it")


def test_lesson_09_writes_the_page_of_its_sawtooth_run(tmp_path):
    """`python lessons/09_archive_and_recall.py --view PAGE`: a lesson that compacts draws its run as
    the agent does, one panel a compaction, each original linked to its archive record."""
    page = tmp_path / "lesson09.html"
    done = subprocess.run([sys.executable, str(ROOT / "lessons" / "09_archive_and_recall.py"), "--view", str(page)],
                          cwd=tmp_path, env=agent_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and str(page) in done.stdout.splitlines(), done.stdout[-2000:] + done.stderr
    made = int(re.search(r"\[sawtooth\] (\d+) compactions", done.stdout)[1])
    text = page.read_text(encoding="utf-8")
    assert made >= 3 and text.count('<section class=compaction id="c') == made
    assert re.search(r'<a href="#a\d+"', text) and "<script" not in text  # no JavaScript, nothing unescaped
