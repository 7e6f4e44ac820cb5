"""Lesson 15 · Measuring
Motto: a compactor is judged by what it sends, what it costs, and what it keeps.

The problem: every earlier lesson showed one strategy on one example. Which one should an agent
use? That takes the same conversations, replayed through every strategy, measured the same way.

How it works: lessons/benchmark.py replays each conversation like the agent loop that wrote it,
compacting before every assistant message (a model call) and feeding the compacted list back:

    history ──strategy──▶ request ──▶ tokens, cached prefix, find_problems, what the next step needs
       ▲                     │
       └─────── + next messages

    none · window 20 (system + last 20) · mask 10 (every turn) · sawtooth 30/6 · layered · hybrid · zones
    and every preset of compact.PRESETS (Compactor(policy=name)): evo-agent · five-layer · smart-eviction ·
    echo-agent · sawtooth-tutorial

It reports tokens (summarizer calls included) and cost with prompt caching as shares of "none",
the growth exponent, the share of input that is a cached prefix (and, in a table of its own, how
cache-first batching and masking before every call change it), which planted facts are still in
the last request, the share of what the agent's next tool call used that is still in what it is
sent (by three definitions: compact.IDENTIFIER's identifiers, whole argument values, and marked
words; on recorded runs at 16k, 32k and 64k, with each strategy's worst case), what the reasoning
rung saves on a thinking model's history, the compactor's overhead next to json.dumps (on the same
list again, and on a history growing by one message a call, as the agent's loop calls it: the
engine sums a history once, so at 1,000 messages the check below the trigger should cost at most
0.1× a json.dumps of the whole list), and the issue's targets as PASS/FAIL lines. Every target is
a ratio measured in this run; the wall-clock time of each part is printed, never judged.

What changed since lesson 14: nothing new in compact.py; this lesson measures all of it at once,
lesson 16's presets and cache-first batching included.
Try it: --window 64000 (fewer compactions); --cached-rate 0.5; --trajectories
RUNS.jsonl --limit 20 (RUNS.jsonl: any file of recorded runs, one {"messages": [...]} a line) (--recorded-windows 8000 16000 for other windows than 16k,
32k and 64k); --json | python -m json.tool (--json results.json prints the tables and saves the JSON);
--plot tokens.png;
--linearity (the ladder's time from 10,000 to 50,000 messages instead of 1,000 to 5,000, about half a
minute more);
--readme (rewrites the tables of lesson 15 in lessons/README.md, and the summary line of README.md's
"## Measured", from this run; with --trajectories RUNS.jsonl the recorded ones too).
Explains compact.py Part II ("The engine"): Compactor (the sawtooth is its default policy),
POLICIES; ("Tokens"): Tally; ("The first step"): drop_old_reasoning; ("What a summary must keep"):
IDENTIFIER; Part III ("Presets"): PRESETS; ("The ladder's steps and policies"): batch, EVERY_CALL.
Run: python lessons/15_benchmark.py
"""

import argparse
import json
import os
import sys
import time

START = time.perf_counter()

import show  # noqa: E402  (puts the repository root on sys.path)
import benchmark  # noqa: E402
import compact  # noqa: E402
import conversations  # noqa: E402
from benchmark import check_targets, pct, pct1, run_benchmark, text_chart  # noqa: E402

CHART = {"none": "·", "sawtooth 30/6": "s", "layered": "█"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG, SHORT = (10_000, 20_000, 50_000), (1_000, 2_000, 5_000)  # messages: --linearity, and every run
README = os.path.join(ROOT, "README.md")  # one summary line, between markers
GUIDE = os.path.join(ROOT, "lessons", "README.md")  # the tables, in lesson 15's section


def number(kind: type, least: float, most: float | None = None):
    """An argparse type: a number of `kind` from `least` (to `most`), or one line that says which."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if value < least or (most is not None and value > most):
            raise argparse.ArgumentTypeError(f"{text} is out of range: from {least:,}"
                                             + (f" to {most:,}" if most is not None else ""))
        return value
    return parse


MIN_WINDOW = 8_000  # tokens: a generated run's largest tool output with the system prompt and a turn fits


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """An input the lesson cannot use is one line that says why, not the usage."""
        self.exit(2, f"error: {message} (see python lessons/15_benchmark.py --help)\n")


def parse_args(argv=None) -> argparse.Namespace:
    parser = Parser(description="Replay conversations through every compaction strategy.")
    parser.add_argument("--turns", type=number(int, conversations.MIN_TURNS), nargs="+", default=[50, 100, 250])
    parser.add_argument("--seeds", type=number(int, 0), nargs="+", default=[0, 1, 2])
    parser.add_argument("--window", type=number(int, MIN_WINDOW), default=32_000,
                        help=f"context window of the generated runs (at least {MIN_WINDOW:,})")
    parser.add_argument("--trajectories", nargs="*", default=[], help="JSONL files of recorded runs")
    parser.add_argument("--recorded-windows", type=number(int, MIN_WINDOW), nargs="+",
                        default=list(benchmark.RECORDED_WINDOWS), help="the windows the recorded runs are replayed at")
    parser.add_argument("--limit", type=number(int, 1), help="replay only the first N runs of each file")
    parser.add_argument("--cached-rate", type=number(float, 0.0, 1.0), default=0.1,
                        help="cached input price / input price, from 0 to 1")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="print the results as JSON only; with FILE, print the tables and save the JSON there")
    parser.add_argument("--plot", metavar="PNG", help="save a chart of tokens per turn (needs matplotlib)")
    parser.add_argument("--linearity", action="store_true",
                        help="time the layered compactor at 10,000, 20,000 and 50,000 messages")
    parser.add_argument("--readme", action="store_true",
                        help="rewrite lesson 15's tables in lessons/README.md and README.md's summary line "
                             "from this (default) run")
    parser.add_argument("--model", action="store_true",
                        help="summarize with the configured model (many calls: slow, and it costs money)")
    args = parser.parse_args(argv)
    for path in args.trajectories:  # read now, so a file it cannot use is one line before anything runs
        try:
            conversations.load_trajectories(path)
        except (OSError, ValueError) as error:
            parser.error(f"--trajectories {path}: {getattr(error, 'strerror', None) or error}")
    return args


def readme_refusal(args: argparse.Namespace) -> str | None:
    """Why this run may not write the README's figures, or None."""
    defaults = vars(parse_args([]))
    changed = [k for k, v in vars(args).items()
               if k not in ("trajectories", "json", "plot", "linearity", "readme") and v != defaults[k]]
    if changed:
        return "the guide and the README hold the default run's figures; drop " + ", ".join(
            "--" + k.replace("_", "-") for k in changed)
    if not benchmark.exact_tokens():
        return 'the guide and the README count tokens exactly: pip install -e ".[tokens]"'
    return None


def table(rows: dict, retention: bool) -> None:
    print(f"  {'strategy':<17} {'tokens':>7} {'peak':>6} {'growth':>6} {'late':>5} {'cache':>6} "
          f"{'cost':>6} {'over':>5} {'invalid':>8} {'next ids':>9} {'values':>7} {'words':>7}")
    for name, r in rows.items():
        step = r["next_step"]
        print(f"  {name:<17} {r['tokens_ratio']:>7.3f} {r['peak_ratio']:>6.3f} {r['growth']:>6.2f} "
              f"{r['late_growth']:>5.2f} {r['cache_hit']:>6.0%} {r['cost_ratio']:>6.3f} {r['over_window']:>5} "
              f"{r['invalid']['openai']:>3}/{r['invalid']['anthropic']:<4} {pct1(step['identifiers']):>9} "
              f"{pct1(step['values']):>7} {pct1(step['words']):>7}")
    if retention:
        print(f"\n  {'kept at the end':<17} {'recall':>7} {'artifact':>9} {'continue':>9} {'decision':>9} │ "
              f"{'constraints':>11} {'errors':>7}")
        for name, r in rows.items():
            k = r["retention"]
            print(f"  {name:<17} {pct(k['recall']):>7} {pct(k['artifact']):>9} {pct(k['continuation']):>9} "
                  f"{pct(k['decision']):>9} │ {pct(k['constraints']):>11} {pct(k['errors']):>7}")


def next_step_table(pooled: dict) -> None:
    """Each strategy's worst case over every definition and window, and the tokens at each window."""
    windows = sorted(pooled, key=int)
    print(f"  {'strategy':<17} {'worst case kept':>26} " + " ".join(f"{'tokens ' + str(int(w) // 1000) + 'k':>11}"
                                                                  for w in windows))
    for name in pooled[windows[0]]:
        print(f"  {name:<17} {benchmark.worst_cell(benchmark.worst_case(pooled, name)):>26} "
              + " ".join(f"{pooled[w][name]['tokens_ratio']:>11.1%}" for w in windows))
    n = pooled[windows[0]]["none"]["next_step_n"]
    for d in benchmark.NEXT_STEP.values():
        print(f"  {d.name} ({n[d.name]:,} at each window): {d.sentence}")


def cache_table(rows: dict) -> None:
    print(f"  {'strategy':<36} {'cache hit':>9} {'cost':>6} {'tokens':>7} {'next ids':>9} {'summaries':>9} "
          f"{'invalid':>8}")
    for name, r in rows.items():
        print(f"  {name:<36} {r['cache_hit']:>9.1%} {r['cost_ratio']:>6.3f} {r['tokens_ratio']:>7.3f} "
              f"{pct1(r['next_ids']):>9} {r['summaries']:>9} "
              f"{r['invalid']['openai']:>3}/{r['invalid']['anthropic']:<4}")


def plot(series: dict, window: int, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('[plot] matplotlib is not installed; to draw the PNG: pip install -e ".[plot]"')
        return
    figure, axes = plt.subplots(figsize=(10, 5))
    for name, values in series.items():
        axes.plot(range(1, len(values) + 1), values, label=name, linewidth=1)
    axes.axhline(window, color="gray", linestyle="--", label=f"window {window:,}")
    axes.set(yscale="log", xlabel="turn (model call)", ylabel="tokens sent")
    axes.legend()
    figure.savefig(path, dpi=120)
    print(f"[plot] saved {path}")


def write_figures(results: dict) -> None:
    """--readme: the tables between their markers in lesson 15's section of the guide, and the
    summary line between its markers in README.md (a half this run did not measure is kept)."""
    with open(GUIDE, encoding="utf-8") as f:
        guide = f.read()
    blocks = benchmark.guide_blocks(results)
    with open(GUIDE, "w", encoding="utf-8") as f:
        f.write(benchmark.write_readme(guide, blocks, benchmark.GUIDE_SECTION))
    with open(README, encoding="utf-8") as f:
        readme = f.read()
    line = benchmark.summary_line(results, benchmark.readme_section(readme, "summary"))
    with open(README, "w", encoding="utf-8") as f:
        f.write(benchmark.write_summary(readme, line))
    show.banner("lessons/README.md: lesson 15's tables, rewritten; README.md: its summary line")
    print("\n\n".join([*blocks.values(), line]))
    if "recorded" not in blocks:
        print("[readme] the recorded-runs block and half of the summary line were left as they are "
              "(pass --trajectories to rewrite them)")


def print_replays(results: dict, args: argparse.Namespace) -> None:
    """The setup, then every replay's table: generated runs, each recorded file and window, pooled."""
    ladder = "the guard's model" if benchmark.LADDER_SUMMARIZE is None else benchmark.LADDER_SUMMARIZE.__name__
    print(f"[setup] window {args.window:,} tokens (reserved output {args.window // 4:,}); seeds {args.seeds}; "
          f"cached input billed at {args.cached_rate:.0%} of the input price")
    print(f"[setup] summaries: the sawtooth's by compact.{benchmark.SUMMARIZE.__name__}, the ladder's by "
          f"{ladder}; counted as a model would bill them: its requests (the middle in transcript_chunks) "
          f"+ answers (at {results['output_price']:g}× the input price)")
    for turns, group in results["generated"].items():
        show.banner(f"{group['conversations']} generated conversations of {turns} turns, shares of none")
        table(group["strategies"], retention=True)
    for path, group in results["recorded"].items():
        for window, rows in group["windows"].items():
            show.banner(f"{group['conversations']} recorded runs of {os.path.basename(path)}, window {int(window):,}")
            table(rows, retention=False)
    for window, rows in results["recorded_pooled"].items():
        show.banner(f"all {sum(g['conversations'] for g in results['recorded'].values())} recorded runs, "
                    f"window {int(window):,}")
        table(rows, retention=False)
    print("\n  tokens/peak/cost: shares of none (cost: cached prefix at the cached rate); growth: slope of\n"
          "  log(cumulative tokens) on log(turn), late = second half only; cache: share of input tokens\n"
          "  cached; over: requests larger than the window; invalid: lists OpenAI/Anthropic would refuse;\n"
          "  next ids, values, words: of what each real next tool call used that appeared earlier in the\n"
          "  run, by each definition (below), the share still in the request the model was sent")
    if results["recorded_pooled"]:
        show.banner(f"What the next step needs, on all {sum(g['conversations'] for g in results['recorded'].values())}"
                    f" recorded runs: the worst case of {len(benchmark.NEXT_STEP)} definitions × "
                    f"{len(results['recorded_pooled'])} windows")
        next_step_table(results["recorded_pooled"])


def print_cache(results: dict, args: argparse.Namespace) -> None:
    """Cache first, then what caching makes of the tokens sent, and the chart of tokens per turn."""
    cache = results["cache"]
    show.banner(f"Cache first: the layered ladder on the {cache['conversations']} generated runs of "
                f"{cache['turns']} turns, shares of none")
    cache_table(cache["strategies"])
    print(f"[cache first] {benchmark.cache_verdict(cache['strategies'])}")
    if "recorded_cache" in results:
        show.banner(f"Cache first on all {sum(g['conversations'] for g in results['recorded'].values())} recorded "
                    f"runs, window {results['recorded_cache']['window']:,}")
        cache_table(results["recorded_cache"]["strategies"])
        print(f"[cache first] {benchmark.cache_verdict(results['recorded_cache']['strategies'])}")
    print("\n  cache hit: share of the input tokens that repeat the previous request's prefix; cost: with\n"
          f"  that prefix billed at {args.cached_rate:.0%}, a share of none's; cache-first N: the step\n"
          "  (\"batch\", {\"frees\": N, \"steps\": (...)}), the prefix-changing steps as one batch kept only when\n"
          "  it frees N tokens; mask every call: (\"mask\", EVERY_CALL), old results masked before every call,\n"
          "  not only at the trigger")

    longest = max(results["generated"], key=int)
    rows = results["generated"][longest]["strategies"]
    for name in ("mask 10", "layered"):
        print(f"[cache] {name} sends {rows[name]['tokens_ratio']:.0%} of none's tokens and pays "
              f"{rows[name]['cost_ratio']:.0%} of its cost: {rows[name]['cache_hit']:.0%} of its input is a cached prefix")
    show.banner(f"Tokens sent at each turn, {longest} turns, seed {args.seeds[0]}")
    print(text_chart({name: results["series"][name] for name in CHART}, "".join(CHART.values()), args.window))


def print_reasoning(results: dict) -> None:
    """The reasoning rung on a thinking model's runs, with and without it."""
    thinking = results["reasoning"]
    show.banner(f"The reasoning rung on a thinking model's runs ({thinking['conversations']} × "
                f"{thinking['turns']} tool turns, {thinking['requests']} user requests)")
    print(f"  reasoning_content is {thinking['reasoning_share']:.0%} of those conversations' tokens; the rung "
          f"(reasoning of finished exchanges without tool calls)\n  would remove {thinking['removable_share']:.1%} "
          "of them from the finished conversations, its upper bound")
    print(f"  {'strategy':<18} {'tokens':>7} {'reasoning sent':>15} {'summaries':>10}")
    for name, r in thinking["strategies"].items():
        print(f"  {name:<18} {r['tokens_ratio']:>7.1%} {r['reasoning']:>15,} {r['summaries']:>10}")
    for policy in ("layered", "hybrid", "zones"):
        with_rung, without = thinking["strategies"][policy], thinking["strategies"][policy + " no rung"]
        print(f"[reasoning] {policy}: {with_rung['tokens']:,} tokens with the rung, {without['tokens']:,} "
              f"without: it saves {1 - with_rung['tokens'] / without['tokens']:.1%}")


def print_timings(results: dict) -> None:
    """The overhead next to json.dumps (the same list again, and a growing one), mask_secrets, linearity."""
    if "overhead" in results:
        show.banner("Overhead of layered Compactor.compact, as a multiple of json.dumps(messages)")
        for row in results["overhead"]:
            print(f"  {row['messages']:>5,} messages {row['tokens']:>8,} tokens   below trigger "
                  f"{row['below_trigger']:>5.2f}×   above it (offline summary) {row['above_trigger']:>5.2f}×")
        grown = results["growing"]
        print(f"  {grown['messages']:>5,} messages {grown['tokens']:>8,} tokens   below trigger "
              f"{grown['below_trigger']:>5.2f}×   growing by one message a call, as the agent's loop calls it")
        print("  (the rows above pass the same list again; the engine sums a history once, so a list one\n"
              "  message longer costs that message)")
    if "linear" in results:
        lin = results["linear"]
        slow = sorted(lin["checks"].items(), key=lambda item: -max(item[1].values()))[:3]
        print(f"\n[linear] {len(lin['checks'])} checks of outside text on {lin['chars']:,} characters of one word and of "
              "punctuation, as a multiple of ordinary text (1 = linear; IDENTIFIER was ~2,000× on a long word): the "
              "slowest " + ", ".join(f"{n} {max(r.values()):.1f}×" for n, r in slow))
    if "linearity" in results:
        lin = results["linearity"]
        show.banner("Linearity: one layered compaction (every rung to the summary) of a long history")
        for n, seconds in zip(lin["messages"], lin["seconds"]):
            print(f"  {n:>6,} messages  {seconds:>6.2f} s")
        print(f"[linearity] growth exponent of the time from {lin['messages'][0]:,} to {lin['messages'][-1]:,} "
              f"messages: {lin['exponent']:.2f} (1 = linear, 2 = quadratic; rungs: {' → '.join(lin['rungs'])})")


def choose_summarizer(args: argparse.Namespace) -> None:
    """--model: the configured model summarizes, through each guard; else offline, so figures repeat."""
    if args.model and compact.model_configured():
        benchmark.SUMMARIZE, benchmark.LADDER_SUMMARIZE = compact.summarize_with_model, None  # through each guard
        benchmark.SUMMARY_WINDOW = compact.summary_window()
        benchmark.JOBS = 1  # model calls from forked workers would share the parent's connections
    else:  # offline by default, or zones would also call a model for every big tool output
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
            os.environ.pop(name, None)


def main(argv=None) -> None:
    args = parse_args(argv)
    refusal = readme_refusal(args) if args.readme else None
    if refusal:
        sys.exit(f"error: --readme: {refusal}")
    choose_summarizer(args)
    results = run_benchmark(args.turns, args.seeds, args.window, args.cached_rate,
                            trajectories=args.trajectories, recorded_windows=args.recorded_windows,
                            limit=args.limit, linearity_sizes=LONG if args.linearity else SHORT)
    targets = check_targets(results)
    elapsed = time.perf_counter() - START
    results["seconds"]["total"] = elapsed
    if args.json:
        results["targets"] = [{"passed": passed, "target": text} for passed, text in targets]
        if args.json == "-":
            print(json.dumps(results, indent=1))
            return
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    print_replays(results, args)
    print_cache(results, args)
    print_reasoning(results)
    print_timings(results)
    longest = max(results["generated"], key=int)
    rows = results["generated"][longest]["strategies"]
    show.banner("Targets")
    for passed, text in targets:
        print(f"{'SKIP' if passed is None else 'PASS' if passed else 'FAIL'}  {text}")
    if args.plot:
        plot(results["series"], args.window, args.plot)
    if args.readme:
        write_figures(results)
    parts = ", ".join(f"{part} {seconds:.1f} s" for part, seconds in results["seconds"].items() if part != "total")
    print(f"[time] this run took {elapsed:.1f} s on {os.cpu_count()} cores ({parts}; reported, not judged)")
    print(f"[lesson 15] done: at {longest} turns the layered ladder sent {rows['layered']['tokens_ratio']:.1%} of "
          f"the tokens of no compaction; {sum(p is False for p, _ in targets)} of "
          f"{sum(p is not None for p, _ in targets)} targets checked failed")


if __name__ == "__main__":
    main()
