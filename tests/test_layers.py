"""The measuring and the cheap, model-free layers of compact.py, each shown before and after on a
small hand-built conversation: tokens and budget, mask, snip, clear, dedupe, shorten, the structured
summary, pinned constraints, validation and repair, importance eviction. A test named after a
promise fails when that promise is broken, not only when the function stops running."""

from __future__ import annotations

import json

import pytest

import compact
from compact import (
    ERROR_LINE, LOST_RESULT, NEWEST, SECTIONS, Budget, estimate_tokens, evict_by_importance,
    find_constraints, find_problems, heuristic_tokens, mask_old_tool_results, message_tokens, placeholder, repair,
    shorten_arguments, snip_long_outputs, cut_text, text_tokens, summarize_extractive, summary_message,
)
from conftest import call, result

# --------------------------------------------------------------------------------------------
# Small builders for OpenAI-format messages (test_ladder.py imports them too)
# --------------------------------------------------------------------------------------------


def system(text="You are a careful coding agent.") -> dict:
    return {"role": "system", "content": text}


def user(text) -> dict:
    return {"role": "user", "content": text}


def assistant(text=None, *calls) -> dict:
    message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def tool_turn(cid, name, output, text=None, **args) -> list[dict]:
    """One assistant call and its result."""
    return [assistant(text, call(cid, name, **args)), result(cid, output)]


def log_output(tag, lines=60) -> str:
    """A tool output long enough to be worth masking, unique to its tag."""
    return "\n".join(f"{tag} line {i}: some ordinary output that nobody needs later" for i in range(lines))


def reads(n, start=0, name="read_file") -> list[dict]:
    """n completed read_file turns, each with a long, distinct output."""
    out = []
    for k in range(start, start + n):
        out += tool_turn(f"c{k}", name, log_output(f"file{k}"), path=f"src/mod{k}.py")
    return out


def results_of(messages) -> list[dict]:
    return [m for m in messages if m["role"] == "tool"]


def bodies(messages) -> list[str]:
    return [m["content"] for m in results_of(messages)]


# --------------------------------------------------------------------------------------------
# 1. Measure
# --------------------------------------------------------------------------------------------

CHINESE = (
    "上下文压缩是让智能体在固定窗口内持续工作的关键技术。每一次工具调用都会向消息列表追加一条助手消息和一条工具结果，"
    "因此历史只会增长，不会缩短。当历史接近窗口上限时，我们先用最便宜的办法：把旧的工具输出替换成一行占位符，"
    "告诉模型如何重新获取它们。如果这样还不够，再截断过长的日志，只保留开头、结尾和其中的错误行。"
    "再往后才请一个便宜的模型写摘要，摘要必须逐字保留用户的约束，例如不要修改部署脚本，或者必须用中文回答。"
    "最后的手段是只保留系统提示、摘要和最新一轮对话；如果连这样都放不下，就应该明确报错，而不是悄悄丢掉用户的请求。"
    "每一条离开上下文的消息都先写入归档文件，这样需要时还能用检索工具找回来。"
)
PYTEST_LOG = """\
============================= test session starts ==============================
platform linux -- Python 3.11.6, pytest-8.2.0, pluggy-1.5.0
rootdir: /home/user/project
collected 42 items

tests/test_api.py ........F...                                            [ 30%]
tests/test_models.py ..............                                       [ 64%]
tests/test_utils.py ..........F...                                        [100%]

=================================== FAILURES ===================================
_____________________________ test_create_user ________________________________

    def test_create_user(client):
        response = client.post('/users', json={'name': 'alice'})
>       assert response.status_code == 201
E       assert 500 == 201
E        +  where 500 = <Response [500]>.status_code

tests/test_api.py:57: AssertionError
=========================== short test summary info ============================
FAILED tests/test_api.py::test_create_user - assert 500 == 201
FAILED tests/test_utils.py::test_slugify - AssertionError: 'a-b' != 'a_b'
========================= 2 failed, 40 passed in 1.83s =========================
"""
SHELL_LOG = """\
$ git status
On branch main
Changes not staged for commit:
  (use "git add <file>..." to update what will be committed)
\tmodified:   src/app.py
\tmodified:   tests/test_app.py
$ ls -la src/
total 24
drwxr-xr-x  2 user user 4096 Mar  3 10:12 .
-rw-r--r--  1 user user 2211 Mar  3 10:12 app.py
-rw-r--r--  1 user user  845 Mar  3 09:58 config.py
$ grep -rn "TODO" src/
src/app.py:42:    # TODO: handle the empty case
src/config.py:7:# TODO: read from env
"""
JSON_BLOB = json.dumps({
    "reservation_id": "ZFA04Y", "user_id": "mia_li_3668", "origin": "JFK", "destination": "SEA",
    "flight_type": "one_way", "cabin": "economy",
    "flights": [{"flight_number": "HAT136", "date": "2024-05-20", "price": 1243},
                {"flight_number": "HAT039", "date": "2024-05-20", "price": 874}],
    "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
    "payment_history": [{"payment_id": "credit_card_4421486", "amount": 2117}],
    "created_at": "2024-05-05T23:00:15", "total_baggages": 3, "insurance": "no"}, indent=2)
PYTHON_CODE = '''\
def find_cut(messages: list[dict], keep_recent: int, head: int) -> int:
    """Where the kept tail starts, never inside a tool-call group."""
    cut = len(messages) - keep_recent
    while cut > head and messages[cut].get("role") == "tool":
        cut -= 1
    return cut


class Budget:
    def __init__(self, context_window=128_000, reserved_output=8_000):
        self.context_window = context_window
        self.reserved_output = reserved_output

    def effective(self, messages):
        system = sum(len(m["content"]) // 4 for m in messages if m["role"] == "system")
        return max(0, self.context_window - self.reserved_output - system)
'''
ENGLISH = (
    "An agent's history only grows: every tool call adds an assistant message and a tool result. "
    "When the history nears the window, the cheapest fix is to replace old tool outputs with a one-line "
    "placeholder that says how to get them back. If that is not enough, long logs are cut to their head "
    "and tail, keeping any error lines from the middle. Only then does a cheap model write a summary, "
    "and that summary must keep every constraint the user gave, word for word."
)
SAMPLES = {"chinese": CHINESE, "pytest log": PYTEST_LOG, "shell log": SHELL_LOG, "json": JSON_BLOB,
           "python": PYTHON_CODE, "english": ENGLISH}


def o200k():
    bpe_openai = pytest.importorskip("bpe_openai")
    return bpe_openai.get_encoding("o200k_base")


@pytest.mark.parametrize("kind", SAMPLES)
def test_estimate_tokens_is_exact_when_the_tokenizer_is_installed(kind):
    exact = len(o200k().encode(SAMPLES[kind]))
    assert estimate_tokens(SAMPLES[kind]) == exact


@pytest.mark.parametrize("kind", SAMPLES)
def test_heuristic_is_within_a_quarter_of_the_exact_count(kind):
    exact = len(o200k().encode(SAMPLES[kind]))
    assert 0.75 * exact <= heuristic_tokens(SAMPLES[kind]) <= 1.25 * exact


def test_a_message_list_counts_every_content_and_tool_call_argument():
    text_only = [user(ENGLISH), assistant(CHINESE)]
    with_call = [*text_only, assistant(None, call("c1", "write_file", path="a.json", content=JSON_BLOB))]
    assert estimate_tokens([user(ENGLISH)]) - estimate_tokens([user("")]) == estimate_tokens(ENGLISH)
    assert estimate_tokens(text_only) > estimate_tokens(ENGLISH) + estimate_tokens(CHINESE)
    assert estimate_tokens(with_call) - estimate_tokens(text_only) > estimate_tokens(JSON_BLOB)


def test_content_none_and_content_parts_are_counted_without_error():
    parts = {"role": "user", "content": [{"type": "text", "text": ENGLISH}]}
    assert estimate_tokens([parts]) == estimate_tokens([user(ENGLISH)])
    assert estimate_tokens([assistant(None)]) == estimate_tokens([assistant("")])


def test_budget_effective_is_window_minus_reserved_output_minus_system_prompt():
    messages = [system(PYTHON_CODE), user(ENGLISH)]
    budget = Budget(context_window=10_000, reserved_output=1_000)
    assert budget.effective(messages) == 9_000 - message_tokens(messages[0])
    assert budget.history(messages) == message_tokens(messages[1])


def test_budget_over_compares_the_history_with_a_share_of_the_effective_window():
    messages = [system(), user(ENGLISH)]
    history = message_tokens(messages[1])
    fits = Budget(context_window=history * 2 + 100 + message_tokens(messages[0]), reserved_output=100)
    assert fits.over(messages, 0.4) and not fits.over(messages, 0.6)


# --------------------------------------------------------------------------------------------
# 2. mask_old_tool_results
# --------------------------------------------------------------------------------------------


def test_old_results_become_one_line_that_says_how_to_get_them_back():
    messages = [system(), user("read the modules"), *reads(5), assistant("done")]
    out = mask_old_tool_results(messages, keep_last=3)
    first = results_of(out)[0]["content"]
    original = results_of(messages)[0]["content"]
    # the placeholder is tool-specific now: a read_file result is counted in chars of the file
    assert first == (f"[pruned] read_file(src/mod0.py): {len(original):,} chars, 60 lines of the file; "
                     "re-run the call to see it again")
    assert "\n" not in first


def test_mask_old_tool_results_keeps_error_lines_in_the_placeholder():
    log = numbered(200, {20: "FAILED tests/test_cart.py::test_total - assert 41 == 42",
                         90: "E   KeyError: 'session_id'", 150: "AssertionError: expected 3 items, got 2"})
    messages = [user("run the tests"), *tool_turn("t", "bash", log, command="pytest -q"), *reads(3), assistant("done")]
    masked = results_of(mask_old_tool_results(messages, keep_last=3))[0]["content"]
    lines = masked.split("\n")
    assert lines[0].startswith("[pruned] bash(pytest -q): ")
    # the first error line and the last two, each on its own line
    assert lines[1:] == ["FAILED tests/test_cart.py::test_total - assert 41 == 42", "E   KeyError: 'session_id'",
                         "AssertionError: expected 3 items, got 2"]


@pytest.mark.parametrize("matches", [0, 3, 25])
def test_placeholder_of_a_search_counts_its_matches(matches):
    # the bash tool's output: "exit code N", then grep's lines, each ending in a newline
    output = f"exit code {0 if matches else 1}\n" + "".join(f"src/m{i}.py:1:TODO {i}\n" for i in range(matches))
    note = placeholder(call("g", "bash", command="grep -rn TODO src"), output)
    assert note.startswith("[pruned] bash(grep -rn TODO src): ")
    assert f", {matches} matches;" in note


def test_placeholder_text_is_tool_specific():
    output = "x = 1\n" * 1_000
    read = placeholder(call("r", "read_file", path="src/app.py"), output)
    shell = placeholder(call("b", "bash", command="make"), output)
    other = placeholder(call("q", "query_db", sql="select 1"), output)
    assert read.startswith("[pruned] read_file(src/app.py): 6,000 chars, 1,000 lines of the file;")
    assert shell.startswith("[pruned] bash(make): 1,000 lines of output;")
    assert other.startswith("[pruned] query_db(select 1): 6,000 chars;")
    assert "matches" not in read + shell + other  # only a search reports matches


def test_no_placeholder_is_shorter_than_the_shortest_one():
    """mask_old_tool_results does not try to mask an output of SHORTEST_PLACEHOLDER characters or
    fewer (most outputs of a history, tried again at every compaction): sound only while no call and
    no output make a shorter placeholder. Every branch of placeholder: each kind of tool, a search,
    no name, arguments missing, empty or broken, an output empty or not."""
    names = [None, "", "x", "read_file", "bash", "grep", "write_file", "query_db"]
    arguments = [None, "", "{}", '{"path": ""}', '{"command": "grep x"}', "{not json"]
    outputs = ["", "x", "\n\n", "exit code 0\n", "a.py", "E   KeyError: 'k'"]
    lengths = {(name, args, out): len(placeholder({"function": {"name": name, "arguments": args}}, out))
               for name in names for args in arguments for out in outputs}
    assert min(lengths.values()) == compact.SHORTEST_PLACEHOLDER, min(lengths, key=lengths.get)


def test_the_last_three_results_stay_whole():
    messages = [user("read the modules"), *reads(5), assistant("done")]
    out = mask_old_tool_results(messages, keep_last=3)
    assert [b.startswith("[pruned]") for b in bodies(out)] == [True, True, False, False, False]
    assert results_of(out)[2:] == results_of(messages)[2:]


def test_the_newest_batch_the_model_has_not_seen_is_never_masked():
    batch = [call(f"p{k}", "read_file", path=f"lib/b{k}.py") for k in range(5)]
    messages = [user("read everything"), *reads(2), assistant("now five at once", *batch),
                *[result(f"p{k}", log_output(f"batch{k}")) for k in range(5)]]
    out = mask_old_tool_results(messages, keep_last=3)
    assert out[-5:] == messages[-5:]
    assert all(b.startswith("[pruned]") for b in bodies(out)[:2])


def test_precise_tools_are_never_masked():
    messages = [user("check"), *reads(2, name="get_reservation"), *reads(4, start=2), assistant("done")]
    out = mask_old_tool_results(messages, keep_last=1, precise_tools=("get_reservation",))
    assert bodies(out)[:2] == bodies(messages)[:2]
    assert all(b.startswith("[pruned]") for b in bodies(out)[2:5])


def test_masking_does_not_mutate_its_input_and_reuses_untouched_messages():
    messages = [user("read"), *reads(5), assistant("done")]
    snapshot = json.dumps(messages)
    out = mask_old_tool_results(messages)
    assert json.dumps(messages) == snapshot
    assert out[0] is messages[0] and out[-1] is messages[-1]
    assert out[2] is not messages[2] and out[2]["content"].startswith("[pruned]")  # a new dict for what changed


# --------------------------------------------------------------------------------------------
# 3. cut_text (the one cutter) / snip_long_outputs
# --------------------------------------------------------------------------------------------


def numbered(n, errors=None) -> str:
    """n log lines "step i ok"; `errors` replaces some of them by index."""
    errors = errors or {}
    return "\n".join(errors.get(i, f"step {i} ok") for i in range(n))


def test_snip_keeps_head_and_tail_around_a_cut_marker():
    out = cut_text(numbered(500), 10**6).split("\n")
    assert out[:40] == [f"step {i} ok" for i in range(40)]
    assert out[-40:] == [f"step {i} ok" for i in range(460, 500)]
    assert out[40] == "[… 420 lines cut …]"


def test_snip_keeps_error_lines_from_the_cut_part():
    errors = {150: "Traceback (most recent call last):", 200: "ValueError: bad width 7",
              300: "FAILED tests/test_app.py::test_width - assert 7 == 8"}
    out = cut_text(numbered(500, errors), 10**6)
    for line in errors.values():
        assert line in out
    assert "[… 417 lines cut …]" in out
    assert "step 150 ok" not in out and "step 200 ok" not in out


def test_snip_text_character_cut_keeps_error_lines():
    """A few enormous lines (minified JSON, a progress bar) with an error line between them."""
    error = "ValueError: width must be positive, got -3"
    text = "\n".join(["a" * 50_000, "b" * 50_000, error, "c" * 50_000])
    out = cut_text(text, 2_700)
    assert text_tokens(out) <= 2_700 and "chars cut" in out
    assert error in out and out.startswith("a" * 1_000) and out.endswith("c" * 1_000)


COMPILER_STYLE = pytest.param("src/app.py:12: error: Name 'parse' is not defined", id="mypy/gcc path:line: error:")


@pytest.mark.parametrize("line", ["2024-05-14T09:25:00Z ERROR disk quota exceeded", "[1500] npm ERR! code ENOSPC",
                                  "12:00:01 worker-3 FATAL out of memory", COMPILER_STYLE])
def test_error_lines_are_kept_wherever_the_marker_stands(line):
    assert ERROR_LINE.search(line)
    out = cut_text(numbered(500, {250: line}), 10**6)
    assert "lines cut" in out and line in out and "step 251 ok" not in out


@pytest.mark.parametrize("line", ["    raise KeyError(name)", "step 7 ok: no errors found", "errors = []"])
def test_lines_that_only_mention_an_error_are_not_error_lines(line):
    assert not ERROR_LINE.search(line)


def test_one_enormous_line_is_cut_by_characters():
    line = "".join(f"{i:06d}," for i in range(20_000))  # 140,000 chars, no newline
    out = cut_text(line, 2_700, "too long")
    head, marker, tail = out.split("\n")
    assert line.startswith(head) and line.endswith(tail) and len(head) == len(tail) > 1_000
    assert marker == f"[… {len(line) - 2 * len(head):,} chars cut: too long …]"
    assert 2_000 < text_tokens(out) <= 2_700  # the largest head and tail that fit, measured


def test_short_text_is_not_snipped():
    assert cut_text(SHELL_LOG, 2_000) is SHELL_LOG


def test_snip_long_outputs_snips_only_long_results_of_imprecise_tools():
    big = numbered(3_000)
    messages = [user("run it"), *tool_turn("a", "bash", big, command="pytest"),
                *tool_turn("b", "bash", "small output", command="ls"),
                *tool_turn("c", "query_db", big, sql="select *"), assistant("done")]
    out = snip_long_outputs(messages, max_tokens=500, precise_tools=("query_db",))
    snipped, small, precise = bodies(out)
    assert "lines cut" in snipped and snipped.startswith("step 0 ok") and snipped.endswith("step 2999 ok")
    assert estimate_tokens(snipped) < estimate_tokens(big) / 5
    assert small == "small output" and precise == big


def unseen_batch(output: str) -> list[dict]:
    """An old result of `output`, then the same output as the newest result the model has not seen."""
    return [user("run it"), *tool_turn("a", "bash", output, command="pytest"), assistant("again"),
            assistant(None, call("b", "bash", command="pytest -x")), result("b", output)]


@pytest.mark.parametrize("unseen_max", [None, 50_000])
def test_snip_long_outputs_does_not_cut_the_newest_unseen_batch_within_unseen_max(unseen_max):
    messages = unseen_batch(numbered(3_000))
    out = snip_long_outputs(messages, max_tokens=500, unseen_max=unseen_max)
    assert "lines cut" in out[2]["content"]  # the old, seen copy is cut
    assert out[-1] is messages[-1]  # the newest, unseen copy is whole


def test_snip_long_outputs_cuts_the_newest_unseen_batch_past_unseen_max_and_says_so():
    messages = unseen_batch(numbered(3_000))
    out = snip_long_outputs(messages, max_tokens=500, unseen_max=2_000)
    newest = out[-1]["content"]
    assert newest.startswith("step 0 ok") and newest.endswith("step 2999 ok")
    assert "lines cut: this output alone is over ~2,000 tokens, the limit for one new output, so it was cut …]" in newest
    assert estimate_tokens(newest) < 2_000 < estimate_tokens(messages[-1]["content"])


# --------------------------------------------------------------------------------------------
# 4. clear_tool_results
# --------------------------------------------------------------------------------------------


def cache_conversation(later_turn: bool) -> list[dict]:
    messages = [user("warm the cache"), *tool_turn("k1", "cache_read", "value-123 " * 30, key="users"),
                *tool_turn("k2", "read_file", "print('hi')", path="app.py")]
    return messages + ([assistant("cached and read")] if later_turn else [])


def test_intermediate_results_are_cleared_once_a_later_assistant_turn_exists():
    out = compact.clear_tool_results(cache_conversation(later_turn=True))
    assert bodies(out) == ["[tool cleared]", "print('hi')"]


def test_intermediate_results_are_not_cleared_before_the_model_saw_a_later_turn():
    messages = [user("warm the cache"), *tool_turn("k1", "cache_read", "value-123 " * 30, key="users")]
    assert compact.clear_tool_results(messages) == messages


# --------------------------------------------------------------------------------------------
# 5. dedupe_tool_results
# --------------------------------------------------------------------------------------------


def test_repeated_identical_results_keep_only_the_latest_whole():
    same = log_output("config")
    messages = [user("look"), *tool_turn("a", "read_file", same, path="cfg.toml"),
                *tool_turn("b", "bash", "ok", command="ls"),
                *tool_turn("c", "read_file", same, path="cfg.toml"),
                *tool_turn("d", "read_file", same, path="cfg.toml"), assistant("done")]
    first, ls, second, latest = bodies(compact.dedupe_tool_results(messages))
    assert latest == same and ls == "ok"
    for earlier in (first, second):
        assert earlier == "[duplicate] same output as the later read_file(cfg.toml) result below"


@pytest.mark.parametrize("change", ["output", "arguments", "tool"])
def test_results_that_differ_in_output_arguments_or_tool_are_not_deduped(change):
    later = {"output": ("read_file", log_output("v2"), "cfg.toml"),
             "arguments": ("read_file", log_output("v1"), "other.toml"),
             "tool": ("cat_file", log_output("v1"), "cfg.toml")}[change]
    messages = [user("look"), *tool_turn("a", "read_file", log_output("v1"), path="cfg.toml"),
                *tool_turn("b", later[0], later[1], path=later[2]), assistant("done")]
    assert compact.dedupe_tool_results(messages) == messages


# --------------------------------------------------------------------------------------------
# 6. shorten_arguments, beside the cutter
# --------------------------------------------------------------------------------------------


def writes(n) -> list[dict]:
    return [m for k in range(n) for m in tool_turn(f"w{k}", "write_file", "ok", path=f"f{k}.py",
                                                   content=f"# file {k}\n" + "x = 1\n" * 400)]


def test_long_arguments_of_old_calls_are_shortened_and_stay_valid_json():
    messages = [user("write files"), *writes(5), assistant("done")]
    out = shorten_arguments(messages, max_chars=400, keep_last=3)
    calls = [m["tool_calls"][0] for m in out if m.get("tool_calls")]
    for old in calls[:2]:
        args = json.loads(old["function"]["arguments"])
        assert len(old["function"]["arguments"]) < 400
        assert args["path"].startswith("f") and "chars cut]" in args["content"]
    assert [m for m in out if m.get("tool_calls")][2:] == [m for m in messages if m.get("tool_calls")][2:]


def test_a_shortened_argument_lists_the_names_it_cut_whole():
    content = "x = 1\n" * 100 + "new_lines.append(SECRET_KEY)\nif __name__ == '__main__':\n    main()\n"
    messages = [user("write files"), *tool_turn("w", "write_file", "ok", path="a.py", content=content), *writes(3)]
    args = json.loads(shorten_arguments(messages, max_chars=400, keep_last=3)[1]["tool_calls"][0]["function"]
                      ["arguments"])
    assert args["content"].endswith("names: new_lines.append, SECRET_KEY, __name__, __main__]")


def test_the_last_calls_keep_their_arguments_untouched():
    messages = [user("write files"), *writes(4)]
    out = shorten_arguments(messages, keep_last=3)
    at = [i for i, m in enumerate(messages) if m.get("tool_calls")]
    assert all(out[i] is messages[i] for i in at[-3:])
    assert out[at[0]] != messages[at[0]]  # the one older call was shortened


def test_arguments_that_are_not_json_are_replaced_by_valid_json():
    broken = assistant(None, {"id": "z", "type": "function",
                              "function": {"name": "bash", "arguments": "{not json " + "y" * 900}})
    messages = [user("go"), broken, result("z", "ok"), *writes(3)]
    out = shorten_arguments(messages, keep_last=3)
    assert json.loads(out[1]["tool_calls"][0]["function"]["arguments"])["shortened"].startswith("{not json")


# --------------------------------------------------------------------------------------------
# 9. summarize_extractive: the summary with no model, the ladder's and the sawtooth's
# --------------------------------------------------------------------------------------------


def work_session() -> list[dict]:
    return [
        user("Fix the failing width test in src/layout.py. Do not modify deploy.sh."),
        *tool_turn("r1", "read_file", "def width(box):\n    return box.w - 1\n", path="src/layout.py"),
        *tool_turn("b1", "bash", "FAILED tests/test_layout.py::test_width - assert 7 == 8\n1 failed",
                   text="I will run the tests first.", command="pytest -q"),
        assistant("The root cause is an off-by-one in width(), because it subtracts 1."),
        *tool_turn("e1", "edit_file", "edited", path="src/layout.py", old="box.w - 1", new="box.w"),
        *tool_turn("b2", "bash", "1 passed", command="pytest -q"),
        assistant("The test passes now. Next I will check the cache module for the same bug."),
    ]


def sections(summary: str) -> dict[str, list[str]]:
    return compact.parse_summary(summary)


def file_notes(found: dict[str, list[str]]) -> list[str]:
    """Each file the summary names, with the title of the section that names it ("Files changed: a.py")."""
    return [f"{title}: {item}" for title, items in found.items() if title.startswith("Files") for item in items]


def test_structured_summary_has_the_structured_sections():
    found = sections(summarize_extractive(work_session(), focus="the cache module"))
    # nothing earlier to grade; the file read was changed; the user's words are the state's, in no section
    assert list(found) == [s for s in SECTIONS if s not in (compact.EARLIER, "Files read")]
    assert "Do not modify deploy.sh." not in summarize_extractive(work_session())
    assert any("root cause is an off-by-one" in d for d in found["Decisions"])
    assert [n for n in file_notes(found) if "src/layout.py" in n and "changed" in n]  # edited after a read
    assert "FAILED tests/test_layout.py::test_width - assert 7 == 8" in found["Errors seen"]
    assert found["Tools run"] == ["bash ×2, edit_file ×1, read_file ×1"]
    assert found["Progress"][-1] == "The test passes now. Next I will check the cache module for the same bug."
    assert found["Next step"] == ["Next I will check the cache module for the same bug."]
    assert "test_width" in found["Identifiers"][0] and "src/layout.py" not in found["Identifiers"][0]  # listed once


def test_the_focus_steers_which_lines_the_summary_keeps():
    messages = [*work_session(), *tool_turn("g", "bash", "cache/store.py:12: TTL = 3600  # seconds",
                                           command="grep -n TTL cache/store.py")]
    unfocused = summarize_extractive(messages)
    focused = sections(summarize_extractive(messages, focus="what is the TTL in cache/store.py"))
    assert "Relevant to the focus" not in sections(unfocused)
    assert any("TTL = 3600" in line for line in focused["Relevant to the focus"])


def test_an_earlier_summary_is_updated_not_summarized_again():
    first = summarize_extractive(work_session())
    later = [summary_message(first), assistant("Continuing."),
             *tool_turn("b3", "bash", "ImportError: cannot import name 'ttl'", command="python -m cache"),
             *tool_turn("r2", "read_file", "TTL = 60", path="cache/store.py")]
    merged = sections(summarize_extractive(later))
    assert merged["Tools run"] == ["bash ×3, edit_file ×1, read_file ×2"]
    assert merged["Errors seen"][0] == "FAILED tests/test_layout.py::test_width - assert 7 == 8"
    assert merged["Errors seen"][-1] == "ImportError: cannot import name 'ttl'"
    notes = file_notes(merged)
    assert [n for n in notes if "src/layout.py" in n and "changed" in n]
    assert [n for n in notes if "cache/store.py" in n and "read" in n]
    assert compact.SUMMARY_TAG not in summarize_extractive(later)  # the old summary is merged, not quoted


def test_summarize_extractive_section_limits_keep_the_newest_items():
    messages = [user(f"Goal part {i}: handle case {chr(65 + i)}.") for i in range(10)]
    messages += [assistant(f"Step {chr(65 + i)} is done.") for i in range(6)]
    messages += [assistant(f"I decided to take route {chr(65 + i)} because it is simpler.") for i in range(12)]
    found = sections(summarize_extractive(messages))
    routes = [f"I decided to take route {chr(65 + i)} because it is simpler." for i in range(12)]
    assert found["Decisions"] == routes  # every decision, while the summary is within its budget
    assert found["Progress"] == routes[-NEWEST["Progress"]:]  # the newest progress
    assert not any("Goal part" in x for items in found.values() for x in items)  # the user's words: the state's


def test_summarize_extractive_keeps_identifiers_most_recent_first():
    messages = [user("Look at HAT001 first."), assistant("Then HAT002."), user("And finally HAT003 please.")]
    assert sections(summarize_extractive(messages))["Identifiers"] == ["HAT003, HAT002, HAT001"]
    many = [user("Check " + " ".join(f"ID{i:03d}X" for i in range(200)))]
    kept = sections(summarize_extractive(many))["Identifiers"][0].split(", ")
    budget = int(compact.IDENTIFIER_SHARE * compact.SUMMARY_TOKENS)
    assert 50 < len(kept) < 200 and kept == [f"ID{i:03d}X" for i in range(199, 199 - len(kept), -1)]  # the oldest go
    assert sum(compact.text_tokens(x) + 1 for x in kept) <= budget  # the rule: a share of the summary's budget


def test_the_identifiers_the_agent_typed_come_before_those_it_only_read():
    listing = " ".join(f"ITEM{i:03d}X" for i in range(400))  # read: more identifiers than the share holds
    script = "python - <<'EOF'\nfrom app import load_cfg_v2\n" + "print(1)\n" * 60 + "EOF"  # too long to quote
    messages = [user("Check the items."), *tool_turn("c1", "bash", listing, command=script),
                *tool_turn("c2", "bash", listing, command="ls data")]
    kept = sections(summarize_extractive(messages))["Identifiers"][0].split(", ")
    assert kept[0] == "load_cfg_v2" and "ITEM399X" in kept and "ITEM000X" not in kept  # then the newest read


def test_the_names_the_agent_typed_are_kept_whole_as_code_names_them():
    """What the agent typed it types again (the recorded SWE runs rewrite their reproduction scripts):
    a name with an underscore in any case, a dotted name whole, and a name that starts a line of the
    script, which the call's JSON escapes ("\\nnew_lines"), read without the escape's "n"."""
    script = ("cat <<'EOF' > repro.py\nnew_lines.append(1)\nsettings.configure(INSTALLED_APPS=[])\n"
              + "print(1)\n" * 60 + "if __name__ == '__main__':\n    schema_editor.create_model(Book)\nEOF")
    messages = [user("Reproduce the bug."), *tool_turn("c1", "bash", "ok", command=script)]
    kept = sections(summarize_extractive(messages))["Identifiers"][0].split(", ")
    assert {"new_lines.append", "INSTALLED_APPS", "__name__", "__main__", "schema_editor.create_model"} <= set(kept)
    assert not [k for k in kept if k.startswith("nnew") or k.startswith("nsettings")]
    assert compact.CODE_NAME.findall("see reproduce_app/models.py or a_b@example.com") == [
        "reproduce_app/models.py", "a_b@example.com"]  # a path and an address stay one name


def test_a_summary_may_take_a_share_of_what_it_replaces_and_at_least_summary_tokens():
    small = [user("Fix the parser."), *[assistant(f"I decided on step {i} because it is simpler.") for i in range(80)]]
    large = [*small, *[assistant(f"I decided on route {i} because it is simpler.") for i in range(4_000)]]
    assert compact.estimate_tokens(small) * compact.SUMMARY_SHARE < compact.SUMMARY_TOKENS
    assert compact.text_tokens(summarize_extractive(small)) <= compact.SUMMARY_TOKENS + 50
    share = int(compact.SUMMARY_SHARE * compact.estimate_tokens(large))
    assert share > 2 * compact.SUMMARY_TOKENS
    assert 1.5 * compact.SUMMARY_TOKENS < compact.text_tokens(summarize_extractive(large)) <= share + 50


def test_a_rolling_offline_summary_stays_within_its_budget_shrinking_the_oldest_details_first():
    long = [assistant(f"Step {i}: I decided to rewrite the parser because the old one " + "fails on nested input " * 10)
            for i in range(60)]
    text = summarize_extractive([user("Fix the parser."), *long])
    assert compact.text_tokens(text) <= compact.SUMMARY_TOKENS + 50
    decided = sections(text)["Decisions"]
    assert decided[-1].startswith("Step 59:") and not decided[-1].endswith("…")  # the newest whole
    assert decided[0].endswith("…") and len(decided[0]) == compact.DETAIL_CHARS + 1  # the oldest shortened first
    assert "Fix the parser." not in text  # the task is the state's: it never gives way to the summary's budget


# --------------------------------------------------------------------------------------------
# 10. Pinned constraints
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sentence", ["Please do not modify deploy.sh.", "Always answer in Chinese.",
                                      "不要修改 deploy.sh。", "You must keep the public API stable!"])
def test_find_constraints_takes_user_sentences_verbatim(sentence):
    messages = [user(f"Here is the task. {sentence}"), assistant("Sure.")]
    assert find_constraints(messages) == [sentence]


def test_constraints_in_tool_output_or_assistant_text_do_not_count():
    messages = [user("Summarize the README."),
                *tool_turn("r", "read_file", "Never do a release on Friday. You must run make first.",
                           path="README.md"),
                assistant("It says you must never release on Friday.")]
    assert find_constraints(messages) == []


def test_a_summary_message_is_not_a_source_of_constraints():
    messages = [summary_message("## User constraints (verbatim)\n- Never push to main."), user("Go on.")]
    assert find_constraints(messages) == []


# --------------------------------------------------------------------------------------------
# 11. find_problems / repair
# --------------------------------------------------------------------------------------------

BROKEN = {
    "leading tool results": [system(), result("x1", "stale"), result("x2", "stale"), user("hi"),
                             assistant("hello")],
    "orphan result": [system(), user("go"), *tool_turn("a", "bash", "ok", command="ls"),
                      result("zz", "from nowhere"), assistant("done")],
    "unanswered call": [system(), user("go"), assistant(None, call("a", "bash", command="ls"),
                                                        call("b", "bash", command="pwd")),
                        result("a", "ok"), user("and?")],
    "call at the end": [system(), user("go"), assistant(None, call("a", "bash", command="ls"))],
    "several system messages": [system(), user("go"), system("You are now in plan mode."),
                                assistant("ok")],
    "empty assistant": [system(), user("go"), assistant(None), assistant("done")],
    "reused id answered twice": [system(), user("go"), *tool_turn("same", "bash", "ok", command="ls"),
                                 result("same", "second answer"), assistant("done")],
}


@pytest.mark.parametrize("case", BROKEN)
def test_find_problems_names_each_broken_shape(case):
    assert find_problems(BROKEN[case])


@pytest.mark.parametrize("case", BROKEN)
def test_repair_makes_every_broken_shape_valid(case):
    fixed = repair(BROKEN[case])
    assert find_problems(fixed) == []
    assert find_problems(fixed, provider="anthropic") == []


def test_repair_answers_an_unanswered_call_with_a_placeholder():
    fixed = repair(BROKEN["unanswered call"])
    assert fixed[3:6] == [result("a", "ok"), result("b", LOST_RESULT), user("and?")]


def test_repair_turns_a_late_system_message_into_a_user_note():
    fixed = repair(BROKEN["several system messages"])
    assert fixed[2] == user("[system note] You are now in plan mode.")


def test_a_tool_call_id_reused_later_is_paired_by_position():
    messages = [system(), user("book it"),
                *tool_turn("call_1", "get_user", "user mia", user_id="mia"),
                *tool_turn("call_1", "get_reservation", "res ZFA04Y", reservation_id="ZFA04Y"),
                assistant("done")]
    assert find_problems(messages) == []
    assert repair(messages) == messages
    assert compact.pair_tool_results(messages)[5]["function"]["name"] == "get_reservation"


def test_a_valid_list_has_no_problems_and_repair_keeps_it():
    messages = [system(), user("go"), *reads(2), assistant("done")]
    assert find_problems(messages) == [] and find_problems(messages, provider="anthropic") == []
    assert repair(messages) == messages


def test_anthropic_wants_the_user_first_after_the_system_prompt():
    messages = [system(), assistant("I start."), user("ok")]
    assert find_problems(messages) == []
    assert find_problems(messages, provider="anthropic")


# --------------------------------------------------------------------------------------------
# 12. evict_by_importance
# --------------------------------------------------------------------------------------------


def eviction_case() -> list[dict]:
    return [system(), user("Refactor the parser."),  # head: 0..1
            *reads(3),  # routine reads: 2..7
            user("Never touch the generated files in gen/."),  # 8: a user constraint
            *reads(2, start=3),  # 9..12
            assistant("We will use a table-driven parser because it is easier to test."),  # 13
            *reads(1, start=5),  # 14..15
            user("Now run the tests.")]  # 16: tail


def test_eviction_drops_whole_low_importance_groups_and_leaves_a_note():
    messages = eviction_case()
    target = estimate_tokens(messages) - 2 * message_tokens(messages[3])
    out = evict_by_importance(messages, target, head=2, tail_start=16)
    assert estimate_tokens(out) <= target
    assert find_problems(out) == []
    kept_ids = {m.get("tool_call_id") for m in out if m["role"] == "tool"}
    kept_calls = {m["tool_calls"][0]["id"] for m in out if m.get("tool_calls")}
    assert kept_ids == kept_calls  # a call never loses its result, nor a result its call
    notes = [m["content"] for m in out if m["content"] and m["content"].startswith("[evicted]")]
    # one line for what went, then what a summary would keep of it: here the files it read
    assert notes and all("read_file(" in n.split("\n")[0] and "## Files read\n- src/mod" in n for n in notes)
    assert "c0" not in kept_ids  # the oldest routine read goes first


def test_eviction_keeps_user_constraints_decisions_head_tail_and_order():
    messages = eviction_case()
    out = evict_by_importance(messages, 0, head=2, tail_start=16)  # evict as much as it may
    kept = [m for m in out if not (m["content"] or "").startswith("[evicted]")]
    assert len(kept) < len(messages) and len(out) < len(messages)  # it did evict
    assert out[:2] == messages[:2] and out[-1] is messages[-1]
    assert messages[8] in kept
    assert [messages.index(m) for m in kept] == sorted(messages.index(m) for m in kept)


def test_eviction_takes_the_lowest_importance_first():
    messages = eviction_case()
    one_read = message_tokens(messages[2]) + message_tokens(messages[3])
    note = message_tokens(compact.eviction_note(messages[2:4]))  # what is evicted leaves a note that costs too
    out = evict_by_importance(messages, estimate_tokens(messages) - one_read + note + 1, head=2, tail_start=16)
    assert len(results_of(out)) == 5  # exactly one group went
    assert messages[13] in out and messages[8] in out
    assert "c0" not in {m.get("tool_call_id") for m in out}


def test_snip_keeps_the_first_and_the_last_error_lines_when_the_cut_part_has_many():
    lines = ["start"] * 50 + [f"ERROR step {i} failed" for i in range(40)] + ["end"] * 50
    out = cut_text("\n".join(lines), 10**6).split("\n")
    kept = [line for line in out if line.startswith("ERROR")]
    assert kept == [f"ERROR step {i} failed" for i in [*range(5), *range(25, 40)]]  # the first 5, the last 15


def test_a_masked_output_that_was_snipped_says_how_many_lines_it_had_in_all():
    """Five-layer's placeholder after a snip said "123 lines" for a 700-line output."""
    output = "\n".join(f"step {i} ok" for i in range(700))
    snipped = cut_text(output, 10**6, lines=(100, 20))
    note = compact.placeholder(call("c1", "bash", command="cat job.log"), snipped)
    assert note.startswith("[pruned] bash(cat job.log): 700 lines of output")
    assert compact.uncut_size(cut_text("x" * 50_000, 1_000)) == (1, 50_001)  # a cut line: still one line
