"""Lesson 06 · Snip long outputs
Motto: the head says what ran, the tail says how it ended, the errors say why.

The problem: one test run or log can be longer than the rest of the history together. Masking
(lesson 05) only touches OLD results; the newest ones stay whole, however big they are.

How it works: snip_text keeps the first and the last max_lines/2 lines, and from the part it cuts
only the lines that look like errors (Traceback, Error, FAILED, assert, ...), behind a marker:

    line 1 … line 20 │ [… 211 lines cut …] │ error lines from the middle │ last 20 lines

A text made of a few enormous lines (minified code, one-line JSON) is cut by characters instead.
snip_long_outputs applies this to every tool result over a token limit.

What changed since lesson 05: masking drops old results; snipping shrinks big ones, even new ones.
Try it: set MAX_LINES to 10 or 200; in main(), call pytest_log(failing=(5, 230)) to fail in head and tail.
Explains compact.py: snip_text, ERROR_LINE, snip_long_outputs (section 2 "cheap layers").
Run: python lessons/06_snip.py
"""

import show
from compact import ERROR_LINE, estimate_tokens, snip_text

MAX_LINES = 40


def node_id(n: int, files: tuple) -> str:
    return f"tests/test_{files[n % len(files)]}.py::test_case_{n:03d}"


def pytest_log(files: tuple = ("cart", "orders", "sessions", "routes"), tests: int = 240,
               failing: tuple = (97, 151)) -> str:
    """A long pytest -v run: mostly PASSED lines, two failures in the middle, a summary at the end."""
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
    """The lines snip_text rescued from the cut part: between the marker and the tail."""
    rows = snipped.split("\n")
    marker = next(i for i, row in enumerate(rows) if row.startswith("[… "))
    return rows[marker + 1:len(rows) - MAX_LINES // 2]


def main() -> None:
    log = pytest_log()
    snipped = snip_text(log, max_lines=MAX_LINES)
    rows = snipped.split("\n")
    marker, kept = MAX_LINES // 2, kept_errors(snipped)

    show.banner(f"snip_text on a {log.count(chr(10)) + 1}-line pytest log, max_lines={MAX_LINES}")
    for row in rows[:3]:
        print(f"[head] {row[:76]}")
    print(f"[head] … {marker - 3} more head lines")
    print(f"[cut]  {rows[marker]}")
    for row in kept:
        print(f"[kept] {row[:76]}")
    print(f"[tail] … {MAX_LINES // 2 - 3} tail lines, ending with:")
    for row in rows[-3:]:
        print(f"[tail] {row[:76]}")

    show.banner("Sizes")
    for label, text in (("before", log), ("after", snipped)):
        print(f"[snip] {label:<6} {text.count(chr(10)) + 1:>4} lines, {len(text):>6,} chars, "
              f"~{estimate_tokens(text):>5,} tokens")
    errors_before = sum(bool(ERROR_LINE.search(row)) for row in log.split("\n"))
    errors_after = sum(bool(ERROR_LINE.search(row)) for row in rows)
    print(f"[snip] lines that look like errors: {errors_before} before, {errors_after} after")
    one_line = '{"bundle": "' + "a" * 60_000 + '"}'
    cut = snip_text(one_line)
    print(f"[snip] one {len(one_line):,}-char line (minified JSON) is cut by characters to {len(cut):,}: "
          f"{cut.split(chr(10))[1]}")

    show.banner("The limit of a cheap filter")
    noisy_log = pytest_log(files=("cart", "orders", "sessions", "errors"))
    noisy = kept_errors(snip_text(noisy_log, max_lines=MAX_LINES))
    real = [row for row in noisy if "PASSED" not in row]
    print("[kept] name one test file test_errors.py and ERROR_LINE matches its PASSED lines too;")
    print(f"[removed] only the last 20 matches stay: {len(noisy) - len(real)} PASSED lines, and {len(real)} "
          f"of the {len(kept)} real error lines")
    print(f"[lesson 06] done: {log.count(chr(10)) + 1} → {len(rows)} lines, ~{estimate_tokens(log):,} → "
          f"~{estimate_tokens(snipped):,} tokens, {errors_after} of {errors_before} error lines kept")


if __name__ == "__main__":
    main()
