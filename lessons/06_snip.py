"""Lesson 06 · Snip long outputs
Motto: the head says what ran, the tail says how it ended, the errors say why.

The problem: one test run or log can be longer than the rest of the history together. Masking
(lesson 05) only touches OLD results; the newest ones stay whole, however big they are.

How it works: cut_text(text, tokens, why, lines) is the one cutter, every place that cuts a
message calls it: it keeps the first and the last lines (`lines`, head and tail), and from the
part it cuts only the lines that look like errors, behind a marker that says how much it cut and why:

    line 1 … line 20 │ [… 211 lines cut: why …] │ error lines from the middle │ last 20 lines

ERROR_LINE finds an error marker anywhere in a line: "KeyError: …", pytest's "E   …" and
"FAILED …", a log's "… ERROR …" or "npm ERR! …"; not code such as `raise KeyError(name)`. A text
still over `tokens`, made of a few enormous lines (minified code, one-line JSON), is cut by
characters instead: the head and tail that fit, measured. cut_over cuts every message over a size;
snip_long_outputs is it on the tool results; the newest batch, which the model has not read yet,
is cut only when it alone is larger than `unseen_max`, and then the marker says so. Every policy
with steps also cuts, at every call, an old output over TOO_LARGE_SHARE of the room for messages
(the rule every policy shares).

What changed since lesson 05b: masking dropped old results and old reasoning; snipping shrinks big
ones, even new ones.
Try it: set HEAD_TAIL to (5, 5) or (100, 20) (five-layer's); in main(), call pytest_log(failing=(5, 230))
to fail in head and tail.
Explains compact.py Part II ("The rules every policy shares"): cut_text, cut_over, TOO_LARGE_SHARE;
("What a summary must keep"): ERROR_LINE; Part III ("The cheap layers"): newest_batch; ("The
ladder's steps and policies"): snip_long_outputs, snip.
Run: python lessons/06_snip.py
"""

import show
from compact import ERROR_LINE, content_text, cut_text, estimate_tokens, snip_long_outputs

HEAD_TAIL = (20, 20)  # the lines cut_text keeps: the first and the last
ONE_OUTPUT = 1_000  # tokens one cut output may keep
LINES = {"2024-05-14T09:25:00Z ERROR disk quota exceeded": "a log's level",
         "[1500] npm ERR! code ENOSPC": "npm",
         "E   assert 401 == 200": "pytest's assertion",
         "    raise KeyError(name)": "code that raises",
         "tests/test_errors.py::test_parse PASSED": "a test file named errors",
         "if level == ERROR:": "code that names ERROR"}


def node_id(n: int, files: tuple) -> str:
    return f"tests/test_{files[n % len(files)]}.py::test_case_{n:03d}"


def pytest_log(files: tuple = ("cart", "orders", "sessions", "routes"), tests: int = 240,
               failing: tuple = (97, 151)) -> str:
    """A long pytest -v run: mostly PASSED lines, failures in the middle, a summary at the end."""
    lines = ["============================= test session starts ==============================",
             "platform linux -- Python 3.12.3, pytest-8.2.0, pluggy-1.5.0", f"collected {tests} items", ""]
    for n in range(tests):
        outcome = "FAILED" if n in failing else "PASSED"
        lines.append(f"{node_id(n, files)} {outcome} [{100 * (n + 1) // tests:>3}%]")
        if n in failing:
            lines += ["Traceback (most recent call last):",
                      f'  File "src/shopfront/cart.py", line {40 + n}, in add_coupon',
                      "    if coupon.expires < now:",
                      "TypeError: can't compare offset-naive and offset-aware datetimes"]
    lines += ["", "=========================== short test summary info ============================",
              *[f"FAILED {node_id(n, files)} - TypeError: can't compare datetimes" for n in failing],
              f"=============== {len(failing)} failed, {tests - len(failing)} passed in 12.34s ==============="]
    return "\n".join(lines)


def kept_errors(snipped: str) -> list[str]:
    """The lines cut_text rescued from the cut part: between the marker and the tail."""
    rows = snipped.split("\n")
    marker = next(i for i, row in enumerate(rows) if row.startswith("[… "))
    return rows[marker + 1:len(rows) - HEAD_TAIL[1]]


def main() -> None:
    log = pytest_log()
    snipped = cut_text(log, ONE_OUTPUT, "an old test run", HEAD_TAIL)
    rows = snipped.split("\n")
    marker, kept = HEAD_TAIL[0], kept_errors(snipped)

    show.banner(f"1. cut_text on a {log.count(chr(10)) + 1}-line pytest log, lines={HEAD_TAIL}")
    for row in rows[:3]:
        print(f"[head] {row[:76]}")
    print(f"[head] … {marker - 3} more head lines")
    print(f"[cut]  {rows[marker]}")
    for row in kept:
        print(f"[kept] {row[:76]}")
    print(f"[tail] … {HEAD_TAIL[1] - 3} tail lines, ending with:")
    for row in rows[-3:]:
        print(f"[tail] {row[:76]}")
    for label, text in (("before", log), ("after", snipped)):
        print(f"[snip] {label:<6} {text.count(chr(10)) + 1:>4} lines, {len(text):>6,} chars, "
              f"~{estimate_tokens(text):>5,} tokens")
    errors_before = sum(bool(ERROR_LINE.search(row)) for row in log.split("\n"))
    errors_after = sum(bool(ERROR_LINE.search(row)) for row in rows)
    print(f"[snip] lines that look like errors: {errors_before} before, {errors_after} after")
    one_line = '{"bundle": "' + "a" * 60_000 + '"}'
    cut = cut_text(one_line, ONE_OUTPUT)
    print(f"[snip] one {len(one_line):,}-char line (minified JSON) is cut by characters to {len(cut):,}: "
          f"{cut.split(chr(10))[1]}")

    show.banner("2. What ERROR_LINE calls an error")
    for line, what in LINES.items():
        tag = "[error]" if ERROR_LINE.search(line) else "[not]"
        print(f"{tag:<8}{what:<26} {line.strip()}")

    show.banner("3. snip_long_outputs: old outputs, and the newest batch")
    messages = [{"role": "user", "content": "Why do the tests fail?"},
                *show.step("call_1", "bash", log, command="pytest -v"),
                *show.step("call_2", "bash", pytest_log(tests=400), command="pytest -v --lf")]
    for unseen_max in (None, 1_000):
        out = snip_long_outputs(messages, max_tokens=ONE_OUTPUT, unseen_max=unseen_max)
        old, new = (content_text(out[i]) for i in (2, 4))
        print(f"[snip] unseen_max={unseen_max}: the old output ~{estimate_tokens(log):,} → ~{estimate_tokens(old):,} "
              f"tokens; the newest ~{estimate_tokens(content_text(messages[4])):,} → ~{estimate_tokens(new):,}")
    print(f"[snip] the cut newest output says why: {next(row for row in new.split(chr(10)) if row.startswith('[… '))!r}")

    show.banner("4. The limit of a cheap filter")
    many = pytest_log(failing=tuple(range(60, 180, 4)))
    by_lines = cut_text(many, estimate_tokens(many), lines=HEAD_TAIL)  # its own size: only the lines are cut
    rescued = [row for row in kept_errors(by_lines) if ERROR_LINE.search(row)]
    middle_errors = sum(bool(ERROR_LINE.search(row)) for row in many.split("\n")[HEAD_TAIL[0]:-HEAD_TAIL[1]])
    print(f"[removed] {middle_errors} error lines in the cut part; only {len(rescued)} stay: the first 5 and the last 15")
    print("[removed] and `if level == ERROR:` counts as an error line: a regular expression cannot read code")
    print(f"[lesson 06] done: {log.count(chr(10)) + 1} → {len(rows)} lines, ~{estimate_tokens(log):,} → "
          f"~{estimate_tokens(snipped):,} tokens, {errors_after} of {errors_before} error lines kept")


if __name__ == "__main__":
    main()
