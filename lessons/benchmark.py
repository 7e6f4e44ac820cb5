"""Replay conversations through each compaction strategy and measure what it costs and keeps.

The measuring kit behind lesson 15. A replay plays a recorded or generated conversation the way an
agent loop would have produced it:

    for each message:
        if it is an assistant message:      a model call happens here: one "turn"
            request = strategy(history)     what the model is sent
            measure(request)                tokens, cached prefix, validity
            history = request               stateful strategies: the compacted list IS the history
        history.append(message)

The facts a conversation planted (lessons/conversations.py) are then looked for, verbatim, in the
last request: what the model still has in front of it at the end of the run.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from compact import (Compactor, ContextOverflowError, compact_messages, content_text, estimate_tokens,
                     find_problems, mask_old_tool_results, message_tokens, summarize_offline,
                     summary_request)
from conversations import generate_conversation, load_trajectories

OUTPUT_PRICE = 4.0  # a summary's output tokens cost 4× an input token (gpt-4o-mini: $0.60 vs $0.15)
PROBES = ("recall", "artifact", "continuation", "decision")
KINDS = ("constraint", "error")  # reported on their own as well: the targets name them


# --------------------------------------------------------------------------------------------
# The strategies: each is a factory, so every replay starts with a fresh, empty state
# --------------------------------------------------------------------------------------------


SUMMARIZE: Callable = summarize_offline  # 15_benchmark.py --model swaps in compact.summarize_default


class CountingSummarizer:
    """The summarizer (offline unless --model), plus what the same call costs a model: the tokens
    of the request compact.summary_request builds for it, and the tokens of the answer."""

    def __init__(self, summarize: Callable | None = None):
        self.summarize = summarize or SUMMARIZE
        self.calls = self.input_tokens = self.output_tokens = 0

    def __call__(self, messages: list[dict], focus: str | None = None) -> str:
        text = self.summarize(messages, focus)
        self.calls += 1
        self.input_tokens += estimate_tokens(summary_request(messages, focus))
        self.output_tokens += estimate_tokens(text)
        return text


@dataclass
class Strategy:
    """`start(summarizer)` returns (compact, admit): compact(history) -> the request; admit(call,
    output) -> the text a tool result enters the history with, or None to keep outputs as they are.
    `feeds_back`: the request replaces the history (a compactor), or is only a view of it (a window)."""

    name: str
    start: Callable[[CountingSummarizer], tuple[Callable, Callable | None]]
    feeds_back: bool = True
    from_compact_py: bool = True  # False for the two baselines: none and the naive window


def sliding_window(history: list[dict], last: int) -> list[dict]:
    """The naive baseline: the system prompt and the last `last` messages, moved forward past any
    tool result so the window never starts with a result whose call it dropped."""
    head = history[:1] if history and history[0].get("role") == "system" else []
    start = max(len(head), len(history) - last)
    while start < len(history) and history[start].get("role") == "tool":
        start += 1
    return [*head, *history[start:]]


def strategies(window: int, last: int = 20, mask_window: int = 10, threshold: int = 30,
               keep_recent: int = 6) -> list[Strategy]:
    """The seven strategies of the benchmark, with the parameters the issue names."""
    def ladder(policy: str) -> Strategy:
        def start(summarizer):
            compactor = Compactor(context_window=window, reserved_output=window // 4, policy=policy,
                                  summarize=summarizer)
            return compactor.compact, compactor.admit_tool_result if policy == "zones" else None
        return Strategy(policy, start)

    return [
        Strategy("none", lambda s: (lambda h: h, None), from_compact_py=False),
        Strategy(f"window {last}", lambda s: (lambda h: sliding_window(h, last), None), feeds_back=False,
                 from_compact_py=False),
        Strategy(f"mask {mask_window}", lambda s: (lambda h: mask_old_tool_results(h, keep_last=mask_window), None)),
        Strategy(f"sawtooth {threshold}/{keep_recent}",
                 lambda s: (lambda h: compact_messages(h, s, threshold=threshold, keep_recent=keep_recent), None)),
        ladder("layered"),
        ladder("hybrid"),
        ladder("zones"),
    ]


# --------------------------------------------------------------------------------------------
# The replay
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    """What one strategy did to one conversation."""

    strategy: str
    per_turn: list[int] = field(default_factory=list)  # tokens of each request
    cached: int = 0  # tokens of requests that repeat the previous request's prefix
    summary_input: int = 0
    summary_output: int = 0
    summaries: int = 0
    over_window: int = 0  # requests larger than the context window: a provider would refuse them
    overflows: int = 0  # compactions that raised ContextOverflowError (the request was sent unchanged)
    invalid: dict = field(default_factory=lambda: {"openai": 0, "anthropic": 0})
    kept: dict = field(default_factory=dict)  # fact text -> still in the last request?

    @property
    def requests(self) -> int:
        return sum(self.per_turn)

    @property
    def tokens(self) -> int:
        """Everything a model reads or writes because of this strategy: the agent's requests and the
        summarizer's requests and answers."""
        return self.requests + self.summary_input + self.summary_output

    def cost(self, cached_rate: float) -> float:
        """In units of one uncached input token."""
        return (self.requests - self.cached + cached_rate * self.cached + self.summary_input
                + OUTPUT_PRICE * self.summary_output)


def common_prefix_tokens(previous: list[dict], request: list[dict]) -> int:
    """Tokens of the longest run of messages the request shares with the previous one, from the
    start: the part a provider's prompt cache has already seen."""
    n = 0
    for a, b in zip(previous, request):
        if a is not b and a != b:
            break
        n += message_tokens(a)
    return n + 3 if n else 0


def replay(messages: list[dict], strategy: Strategy, window: int, facts=()) -> Run:
    """Play `messages` like the agent loop that wrote them, compacting before every model call."""
    summarizer = CountingSummarizer()
    compact, admit = strategy.start(summarizer)
    run, history, previous, calls = Run(strategy.name), [], [], {}
    for message in messages:
        role = message.get("role")
        if role == "assistant" and history:
            try:
                request = compact(history)
            except ContextOverflowError:
                run.overflows += 1
                request = history
            measure(run, request, previous, window)
            previous = list(request)
            if strategy.feeds_back:
                history = list(request)
        if role == "assistant":
            calls = {c.get("id"): c for c in message.get("tool_calls") or []}
        elif role == "tool" and admit is not None and message.get("tool_call_id") in calls:
            text = admit(calls[message["tool_call_id"]], content_text(message))
            if text != content_text(message):
                message = {**message, "content": text}
        history.append(message)
    run.summaries, run.summary_input, run.summary_output = (summarizer.calls, summarizer.input_tokens,
                                                            summarizer.output_tokens)
    run.kept = {fact.text: contains(previous, fact.text) for fact in facts}
    return run


def measure(run: Run, request: list[dict], previous: list[dict], window: int) -> None:
    tokens = estimate_tokens(request)
    run.per_turn.append(tokens)
    run.cached += common_prefix_tokens(previous, request)
    run.over_window += tokens > window
    for provider in run.invalid:
        run.invalid[provider] += bool(find_problems(request, provider))


def contains(messages: list[dict], text: str) -> bool:
    """Is `text` verbatim in a message's content or in a tool call's arguments (summary included)?"""
    for m in messages:
        if text in content_text(m):
            return True
        if any(text in ((c.get("function") or {}).get("arguments") or "") for c in m.get("tool_calls") or []):
            return True
    return False


# --------------------------------------------------------------------------------------------
# Metrics over runs
# --------------------------------------------------------------------------------------------


def growth_exponent(per_turn: list[int], since: int = 1) -> float:
    """The slope of log(cumulative tokens) against log(turn), least squares over the turns from
    `since` on: about 2 when every request re-sends a history that only grows, about 1 when the
    request size stays bounded. From turn 1 the fit also sees the turns before the first compaction."""
    xs, ys, total = [], [], 0
    for turn, tokens in enumerate(per_turn, start=1):
        total += tokens
        if turn >= since:
            xs.append(math.log(turn))
            ys.append(math.log(total))
    if len(xs) < 2:
        return float("nan")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def share(values: list[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_runs(runs_by_strategy: dict[str, list[Run]], facts_by_conversation: list, cached_rate: float
                   ) -> dict[str, dict]:
    """One row a strategy, over all the conversations of a group. Ratios are to "none", as sums."""
    base = runs_by_strategy["none"]
    base_tokens, base_peak = sum(r.tokens for r in base), max(max(r.per_turn) for r in base)
    base_cost = sum(r.cost(cached_rate) for r in base)
    rows = {}
    for name, runs in runs_by_strategy.items():
        row = {
            "turns": sum(len(r.per_turn) for r in runs),
            "tokens": sum(r.tokens for r in runs),
            "summary_tokens": sum(r.summary_input + r.summary_output for r in runs),
            "summaries": sum(r.summaries for r in runs),
            "tokens_ratio": sum(r.tokens for r in runs) / base_tokens,
            "peak": max(max(r.per_turn) for r in runs),
            "peak_ratio": max(max(r.per_turn) for r in runs) / base_peak,
            "growth": sum(growth_exponent(r.per_turn) for r in runs) / len(runs),
            "late_growth": sum(growth_exponent(r.per_turn, len(r.per_turn) // 2) for r in runs) / len(runs),
            "cache_hit": sum(r.cached for r in runs) / max(1, sum(r.requests for r in runs)),
            "cost_ratio": sum(r.cost(cached_rate) for r in runs) / base_cost,
            "over_window": sum(r.over_window for r in runs),
            "overflows": sum(r.overflows for r in runs),
            "invalid": {p: sum(r.invalid[p] for r in runs) for p in ("openai", "anthropic")},
        }
        if facts_by_conversation:
            pairs = [(fact, run.kept[fact.text]) for run, facts in zip(runs, facts_by_conversation)
                     for fact in facts]
            row["retention"] = {**{p: share([k for f, k in pairs if f.probe == p]) for p in PROBES},
                                **{k + "s": share([kept for f, kept in pairs if f.kind == k]) for k in KINDS}}
        rows[name] = row
    return rows


def compare(conversations: list[tuple[list[dict], list]], window: int, cached_rate: float = 0.1,
            last: int = 20) -> tuple[dict[str, dict], dict[str, list[int]]]:
    """Replay every conversation through every strategy. Returns the rows and, for the chart,
    each strategy's tokens per turn on the first conversation."""
    runs: dict[str, list[Run]] = {}
    for messages, facts in conversations:
        for strategy in strategies(window, last):
            runs.setdefault(strategy.name, []).append(replay(messages, strategy, window, facts))
    facts = [facts for _, facts in conversations if facts]
    series = {name: rs[0].per_turn for name, rs in runs.items()}
    rows = summarize_runs(runs, facts if len(facts) == len(conversations) else [], cached_rate)
    for strategy in strategies(window, last):
        rows[strategy.name]["from_compact_py"] = strategy.from_compact_py
    return rows, series


def run_benchmark(turns=(50, 100, 250), seeds=(0, 1, 2), window: int = 32_000, cached_rate: float = 0.1,
                  last: int = 20, trajectories=(), recorded_window: int = 16_000, limit: int | None = None
                  ) -> dict:
    """The whole benchmark as one JSON-ready dict: generated runs by length, recorded runs by file,
    the overhead rows, and the chart's series (the longest generated conversation, first seed)."""
    results = {"window": window, "reserved_output": window // 4, "cached_rate": cached_rate,
               "output_price": OUTPUT_PRICE, "seeds": list(seeds), "generated": {}, "recorded": {},
               "recorded_window": recorded_window}
    longest = None
    for n in sorted(turns):
        made = [generate_conversation(n, seed) for seed in seeds]
        rows, series = compare([(c.messages, c.facts) for c in made], window, cached_rate, last)
        results["generated"][str(n)] = {"conversations": len(made), "strategies": rows}
        results["series"], longest = series, made[0].messages
    for path in trajectories:
        recorded = load_trajectories(path)[:limit]
        rows, _ = compare([(messages, []) for messages in recorded], recorded_window, cached_rate, last)
        results["recorded"][str(path)] = {"conversations": len(recorded), "strategies": rows}
    lengths = [n for n in (50, 150, 300) if n < len(longest)] + [len(longest)]
    results["overhead"] = overhead(longest, lengths)
    return results


def check_targets(results: dict, elapsed: float | None = None, default_run: bool = True
                  ) -> list[tuple[bool | None, str]]:
    """The issue's targets as (passed, one line saying what was measured); None: not checked."""
    turns = max(results["generated"], key=int)
    rows = results["generated"][turns]["strategies"]
    layered = rows["layered"]
    kept = layered.get("retention") or {}
    targets = [
        (layered["tokens_ratio"] <= 0.20,
         f"layered at {turns} turns sends at most 20% of none's tokens: {layered['tokens_ratio']:.1%}"),
        (kept.get("constraints") == 1.0,
         f"layered at {turns} turns keeps 100% of the pinned constraints: {pct(kept.get('constraints'))}"),
        (min(kept.get("decision") or 0, kept.get("errors") or 0) >= 0.95,
         f"layered at {turns} turns keeps at least 95% of decisions and errors: decisions "
         f"{pct(kept.get('decision'))}, errors {pct(kept.get('errors'))}"),
    ]
    compacting = {name: row for name, row in rows.items() if name != "none"}
    over = {name: row["growth"] for name, row in compacting.items() if not row["growth"] <= 1.1}
    late = ", ".join(f"{n} {rows[n]['late_growth']:.2f}" for n in over)
    targets.append((not over, f"growth exponent of every compacting strategy at {turns} turns is at most 1.1"
                              + (f": over it {', '.join(f'{n} {g:.2f}' for n, g in over.items())}\n      (the fit from "
                                 f"turn 1 includes the turns before the first compaction; fitted on the second "
                                 f"half only: {late})" if over else "")))
    worst = max(row["below_trigger"] for row in results["overhead"])
    targets.append((worst <= 0.5, f"below its trigger, layered compact costs at most 0.5× json.dumps: "
                                  f"at most {worst:.2f}×"))
    for label, groups in (("generated", results["generated"]), ("recorded", results["recorded"])):
        if not groups:
            targets.append((None, f"no invalid list on {label} conversations: not run (pass --trajectories)"))
            continue
        bad = naive = 0
        for group in groups.values():
            for row in group["strategies"].values():
                count = sum(row["invalid"].values())
                bad += count if row["from_compact_py"] else 0
                naive += count if not row["from_compact_py"] else 0
        targets.append((bad == 0, f"no invalid list from compact.py's strategies on {label} conversations: "
                                  f"{bad} (the baselines, none and the naive window: {naive})"))
    if elapsed is not None:
        passed = elapsed < 60 if default_run else None
        targets.append((passed, f"the whole default run takes under a minute: {elapsed:.1f} s on "
                                f"{os.cpu_count()} cores" + ("" if default_run else " (not the default run)")))
    return targets


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


# --------------------------------------------------------------------------------------------
# Overhead: what one compaction call costs next to serializing the request at all
# --------------------------------------------------------------------------------------------


def best_time(fn: Callable, number: int, repeat: int = 5) -> float:
    """Seconds a call, the best of `repeat` batches of `number` calls (the least disturbed)."""
    best = float("inf")
    for _ in range(repeat):
        clock = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - clock) / number)
    return best


def overhead(messages: list[dict], lengths: list[int]) -> list[dict]:
    """Layered Compactor.compact on the first `n` messages, as a multiple of json.dumps of them.
    Below the trigger: a window so large nothing happens (the price paid on every turn). Above it:
    a window that puts the history at 80% of the effective window, with the offline summarizer
    (the price of a compaction without a model's latency; there the first rungs usually suffice).
    The same message objects are passed
    every time, as in an agent loop, so compact's memoized token counts are warm."""
    rows = []
    for n in lengths:
        history = messages[:n]
        dumps = best_time(lambda: json.dumps(history), number=20)
        below = Compactor(context_window=10**9, policy="layered")
        below.compact(history)
        size = below.budget.history(history)
        system = estimate_tokens([m for m in history if m.get("role") == "system"]) - 3
        window = int((size / 0.8 + system) / 0.75)  # reserved_output = window // 4, as in `strategies`

        def above():
            Compactor(context_window=window, reserved_output=window // 4, policy="layered",
                      summarize=summarize_offline).compact(history)
        above()
        rows.append({"messages": n, "tokens": estimate_tokens(history),
                     "below_trigger": best_time(lambda: below.compact(history), number=20) / dumps,
                     "above_trigger": best_time(above, number=2, repeat=3) / dumps})
    return rows


# --------------------------------------------------------------------------------------------
# Output: a multi-series terminal chart
# --------------------------------------------------------------------------------------------


def text_chart(series: dict[str, list[int]], marks: str, top: int, height: int = 10, width: int = 72) -> str:
    """Tokens per turn, one mark a series, y from 0 to `top`; a value above the chart shows as ^."""
    longest = max(len(v) for v in series.values())
    columns = min(width, longest)
    rows = [[" "] * columns for _ in range(height)]
    for mark, values in zip(marks, series.values()):
        for col in range(columns):
            i = min(len(values) - 1, (col + 1) * longest // columns - 1)  # the last turn of the column
            if i < 0:
                continue
            level = values[i] * height / top
            row = height - 1 if level >= height else int(level)
            rows[row][col] = "^" if level >= height else mark
    lines = []
    for r in range(height - 1, -1, -1):
        label = f"{top * (r + 1) // height:>7,} ┤" if r in (height - 1, height // 2 - 1) else "        │"
        lines.append(label + "".join(rows[r]))
    lines.append("        └" + "─" * columns)
    legend = "   ".join(f"{mark} {name}" for mark, name in zip(marks, series))
    lines.append(f"         {legend}   (^ = above the chart; {longest} turns, {columns} columns)")
    return "\n".join(lines)
