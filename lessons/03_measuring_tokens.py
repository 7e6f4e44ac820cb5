"""Lesson 03 · Measuring tokens
Motto: you cannot keep under a limit you do not measure, and chars/4 is not a measurement.

The problem: the window is counted in tokens, not characters or messages. "len(text) / 4" roughly
fits English prose only: code, JSON and logs have more tokens per character, and one Chinese
character is about one token, so chars/4 counts Chinese text at a fraction of its real size. And
lesson 02's rule counts messages: 10 messages can hold one 8,000-token answer.

How it works: text_tokens counts exactly with the o200k tokenizer when `bpe-openai` is
installed (pip install -e ".[tokens]"); otherwise heuristic_tokens splits the text the way a BPE
tokenizer roughly does (words, digit groups, CJK characters, punctuation). Each string is counted
once and remembered (one token memo), so a long history is not re-tokenized on every turn.
message_tokens adds a message's reasoning, its tool calls and the framing every message costs;
estimate_tokens sums a list. The engine sums a history once (a Tally): a list that extends the
last one it measured costs only its new messages, so the check before every call costs what the
new messages cost (lesson 15 measures it).

The token net puts tokens under the message count: the sawtooth (Compactor(), the engine's default
policy) compacts a list that passes `trigger` of its window even below THRESHOLD (the tutorial's 30), and
find_cut_within keeps fewer recent messages until they take at most half of that many tokens
(max_tokens), but never fewer than the newest tool-call group. When the
server refuses a request anyway, is_context_overflow recognises each family's wording and
refused_size reads the count it gives: the truth about that request's size. Then the engine's
Budget says how much of the window the history may use:

    |<------------------------------ context_window ------------------------------>|
    | system prompt |        history may use this: effective        | reserved output |
                    |<- target 0.5 ->|
                    |<----- trigger 0.7 ----->|  past here: compact, down to target

An estimate is still an estimate: when the server reports how many tokens it counted
(usage.prompt_tokens), the loop keeps it (Session.usage) and compact.request_tokens starts from it:
the one place our estimate meets the server's count.

What changed since lesson 02: the sawtooth counted messages; Part II counts tokens from here on.
Try it: paste your own text into SAMPLES; set NET to 6_000 and the net leaves the history alone;
set WINDOW to 128_000 and see the trigger move.
Explains compact.py Part II ("Tokens"): heuristic_tokens, text_tokens, message_tokens,
estimate_tokens, Tally, request_tokens, Budget; ("The summary step"): find_cut_within; ("Refusals
the engine reads"): is_context_overflow, refused_size; ("The engine"): Compactor.
Run: python lessons/03_measuring_tokens.py
"""

import textwrap

import show
from compact import (KEEP_RECENT, THRESHOLD, ACK, Budget, Compactor, Tally, compact_messages, estimate_tokens, find_cut, find_cut_within,
                     heuristic_tokens, is_context_overflow, is_summary, message_tokens, refused_size,
                     summarize_extractive)
from conversations import generate_conversation

WINDOW, RESERVED = 40_000, 4_000
NET = 3_000  # max_tokens for the token net in part 2

SAMPLES = {
    "English prose": "When an agent works on a long task, every tool call adds a request and a result "
                     "to its history. Nothing is ever removed, so the history grows until the model "
                     "refuses it. Compaction keeps the important parts and drops the rest, so the "
                     "agent can keep working without losing track of what the user asked for.",
    "Python code": "def expire_sessions(store, now=None, ttl=900):\n"
                   "    now = now or datetime.now(timezone.utc)\n"
                   "    expired = [k for k, s in store.items() if (now - s['created']).seconds > ttl]\n"
                   "    for key in expired:\n        del store[key]\n    return len(expired)\n",
    "JSON": '{"id": "call_7f3a9c", "type": "function", "function": {"name": "read_file", '
            '"arguments": "{\\"path\\": \\"src/shopfront/sessions.py\\"}"}, "usage": '
            '{"prompt_tokens": 18234, "completion_tokens": 412, "cached": [0, 1024, 2048]}}',
    "shell log": "2024-05-14T09:00:01.400Z INFO  http GET /sessions/9913 200 631ms\n"
                 "2024-05-14T09:00:02.100Z DEBUG db pool: 9 connections in use (0x7f3a9c2e)\n"
                 "2024-05-14T09:00:02.800Z WARN  cache miss for product:3866, loading from db\n"
                 "npm ERR! code ERESOLVE /usr/lib/node_modules/npm/lib/cli.js:79:25\n",
    "Chinese text": "智能体每调用一次工具，历史记录里就会多出一条请求和一条结果。这些消息从来不会被删除，"
                    "所以历史会一直增长，直到模型拒绝请求。上下文压缩保留重要的部分，丢掉其余的内容，"
                    "让智能体可以继续工作，同时不忘记用户最初的要求。",
}


def cell(estimate: int, exact: int | None) -> str:
    """`76 (+19%)`: an estimate and its error against the exact count, when there is one."""
    return f"{estimate:>6}" + (f" ({(estimate - exact) / exact:+4.0%})" if exact else "       ")


def exact_encoding():
    """The o200k tokenizer itself, for the exact column; None without the `tokens` extra."""
    try:
        import bpe_openai
    except ImportError:
        return None
    return bpe_openai.get_encoding("o200k_base")


def parallel_calls_example() -> list[dict]:
    """A hand-made history: a long written answer, a new request, then three files read at once."""
    paths = ["cart.py", "orders.py", "users.py"]
    calls = [show.call(f"call_{n}", "read_file", path=path) for n, path in enumerate(paths, start=1)]
    analysis = " ".join(f"Order {1000 + i}: the cart rounds each line before tax, so the total is {i % 9 + 1} "
                        "cents off the invoice." for i in range(120))
    return [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Why does checkout fail?"},
            *show.step("call_0", "read_file", "def checkout(cart):\n    return pay(cart.total)\n", path="app.py"),
            {"role": "assistant", "content": analysis},
            {"role": "user", "content": "Now fix it in cart.py."},
            show.asks(*calls),
            *[show.result(c["id"], f"# {path}\n" + "def total(items):\n    return sum(items)\n" * 25)
              for c, path in zip(calls, paths)]]


class Refusal(Exception):
    """A server's error as the openai client raises it: the message, and the JSON body."""

    def __init__(self, message: str, **body):
        super().__init__(message)
        self.body = {"error": {"message": message, **body}}


REFUSALS = {  # as the servers word them (tests/test_refusals.py has each as a fixture)
    "OpenAI": Refusal("This model's maximum context length is 128000 tokens. However, your messages resulted in "
                      "130412 tokens. Please reduce the length of the messages.", code="context_length_exceeded"),
    "llama-server": Refusal("the request exceeds the available context size, try increasing it",
                            type="exceed_context_size_error", n_prompt_tokens=5010, n_ctx=4096),
    "vLLM": Refusal("The decoder prompt (length 5000) is longer than the maximum model length of 4096."),
    "Anthropic": Refusal("prompt is too long: 210345 tokens > 200000 maximum"),
    "a rate limit": Refusal("Rate limit reached for requests", code="rate_limit_exceeded"),
}


def token_net() -> None:
    messages = parallel_calls_example()
    show.show(messages)
    untouched = compact_messages(messages, summarize_extractive) is messages
    print(f"[net] {len(messages)} messages, ~{estimate_tokens(messages):,} tokens: below the threshold of {THRESHOLD}, "
          f"so without max_tokens nothing happens: {untouched}")
    for net in (NET, 600):
        fit = find_cut_within(messages, KEEP_RECENT, 1, net)
        tail = estimate_tokens(messages[fit:]) - 3
        print(f"[net] max_tokens={net:,}: keep_recent={KEEP_RECENT} would keep from {find_cut(messages, KEEP_RECENT, 1)}; find_cut_within "
              f"keeps from {fit} ({messages[fit]['role']}), ~{tail:,} tokens"
              + (" (the newest group: never split)" if tail > net // 2 else f" ≤ half of {net:,}"))
    # the sawtooth with a NET-token window, nothing reserved: it compacts once the history passes it
    sawtooth = Compactor(context_window=NET, reserved_output=0, trigger=1.0, summarize=summarize_extractive)
    out = sawtooth.compact(messages)
    show.sizes("net", messages, out)
    print("[net] sent now: " + " · ".join("summary" if is_summary(m) else "ACK" if m is ACK else m["role"] for m in out)
          + " (ACK: an assistant turn between the summary and a kept user message)")
    return messages, out


def refusals() -> None:
    print("[refusal] a request over the window is refused; what the loop reads from each server's answer:")
    for server, error in REFUSALS.items():
        counted = refused_size(error)
        print(f"  {server:<13} overflow {str(is_context_overflow(error)):<5}  counted "
              f"{f'{counted:,}' if counted else '-':<8} {textwrap.shorten(str(error), 56, placeholder=' …')}")
    print("[refusal] a count is the truth about that request's size: the loop keeps it in Session.usage and")
    print("[refusal] scales its next estimate to it; an error that is not a refusal (a rate limit) is raised")


def main() -> None:
    encoding = exact_encoding()
    show.banner("1. Three ways to count the same text")
    if encoding is None:
        print('[tokens] bpe-openai is not installed (pip install -e ".[tokens]"): no exact count, heuristic only')
    rows = [(name, len(text), len(encoding.encode(text, disallowed_special=())) if encoding else None,
             round(len(text) / 4), heuristic_tokens(text)) for name, text in SAMPLES.items()]
    print(f"  {'sample':<14} {'chars':>6} {'exact':>6} {'len/4':>13} {'heuristic':>13}")
    for name, chars, exact, quarter, guess in rows:
        print(f"  {name:<14} {chars:>6} {exact or '-':>6} {cell(quarter, exact)} {cell(guess, exact)}")
    counter = "the exact tokenizer" if encoding else "heuristic_tokens"
    print(f"[tokens] estimate_tokens uses {counter}: {estimate_tokens(SAMPLES['Chinese text'])} tokens "
          "for the Chinese text")
    if encoding is not None:
        for label, column in (("len/4", 3), ("heuristic", 4)):
            errors = [(row[column] - row[2]) / row[2] for row in rows]
            print(f"[tokens] {label:<9} worst error {max(map(abs, errors)):.0%}, counted too LOW on "
                  f"{sum(e < 0 for e in errors)} of {len(rows)} samples")
        print("[tokens] too low is the dangerous side (the request hits the wall); too high compacts early")

    show.banner(f"2. The token net: {len(parallel_calls_example())} messages can be too many tokens")
    net_before, net_after = token_net()

    show.banner("3. What the server counted")
    refusals()

    show.banner(f"4. The budget of a {WINDOW:,}-token window for a generated conversation")
    messages = generate_conversation(30, seed=1).messages
    budget = Budget(context_window=WINDOW, reserved_output=RESERVED)  # trigger 0.7, target 0.5
    system = message_tokens(messages[0])
    effective, history = budget.effective(messages), budget.history(messages)
    print(f"[budget] window {WINDOW:,} − reserved output {RESERVED:,} − system prompt {system:,} "
          f"= effective {effective:,}")
    print(f"[budget] trigger {budget.trigger:.0%} of effective = {budget.trigger * effective:,.0f} tokens; "
          f"target {budget.target:.0%} = {budget.target * effective:,.0f}")
    print("[budget] the answer needs room in the same window; the system prompt is always sent as it is")
    print(f"[budget] history: {len(messages) - 1} messages, {history:,} tokens = {history / effective:.0%} "
          "of effective")
    tally = Tally()  # what the engine keeps between calls
    before = tally(messages[:-1])
    print(f"[tally] a Tally sums the first {len(messages) - 1} messages once ({before:,} tokens); given all "
          f"{len(messages)}, it knows {tally.known(messages)} and counts only the new one: +{tally(messages) - before:,}")
    if budget.over(messages, budget.trigger):
        print(f"[budget] over the trigger: compact now, and remove at least "
              f"{history - budget.target * effective:,.0f} tokens to reach the target")
    else:
        print("[budget] under the trigger: nothing to do yet")
    print("[budget] why a gap between trigger and target: compacting to just under 0.7 would trigger again")
    print("[budget] on the next turn; going down to 0.5 buys several turns per compaction.")
    print(f"[lesson 03] done: {len(SAMPLES)} samples measured; the net took {len(net_before)} messages ~"
          f"{estimate_tokens(net_before):,} → ~{estimate_tokens(net_after):,} tokens; history {history:,} of effective "
          f"{effective:,} tokens ({history / effective:.0%}), trigger at {budget.trigger:.0%}")


if __name__ == "__main__":
    main()
