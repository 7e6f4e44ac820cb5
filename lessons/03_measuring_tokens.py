"""Lesson 04 · Measuring tokens
Motto: you cannot keep under a limit you do not measure, and chars/4 is not a measurement.

The problem: the window is counted in tokens, not characters or messages. "len(text) / 4" roughly
fits English prose only: code, JSON and logs have more tokens per character, and one Chinese
character is about one token, so chars/4 counts Chinese text at a fraction of its real size.

How it works: text_tokens counts exactly with the o200k tokenizer when `bpe-openai` is
installed (pip install .[tokens]); otherwise heuristic_tokens splits the text the way a BPE
tokenizer roughly does (words, digit groups, CJK characters, punctuation). Each string is counted
once and remembered, so a long history is not re-tokenized on every turn. message_tokens adds a
message's reasoning, its tool calls and the framing every message costs; estimate_tokens sums a
list. Then Budget says how much of the window the history may use:

    |<------------------------------ context_window ------------------------------>|
    | system prompt |        history may use this: effective        | reserved output |
                    |<- target 0.5 ->|
                    |<----- trigger 0.7 ----->|  past here: compact, down to target

An estimate is still an estimate: when the server reports how many tokens it counted
(usage.prompt_tokens), the loop passes that to the compactor as `used` (tiny_agent.request_tokens).

What changed since lesson 03: the sawtooth counted messages (its token net aside); Part II counts
tokens from here on.
Try it: paste your own text into SAMPLES; set WINDOW to 128_000 and see the trigger move.
Explains compact.py Part I: heuristic_tokens, text_tokens, message_tokens, estimate_tokens ("Messages
and their tokens"); Part II: Budget ("Measuring").
Run: python lessons/04_measuring_tokens.py
"""

import show
from compact import Budget, estimate_tokens, heuristic_tokens, message_tokens
from conversations import generate_conversation

WINDOW, RESERVED = 40_000, 4_000

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


def main() -> None:
    encoding = exact_encoding()
    show.banner("Three ways to count the same text")
    if encoding is None:
        print("[tokens] bpe-openai is not installed (pip install .[tokens]): no exact count, heuristic only")
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

    show.banner(f"The budget of a {WINDOW:,}-token window for a generated conversation")
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
    if budget.over(messages, budget.trigger):
        print(f"[budget] over the trigger: compact now, and remove at least "
              f"{history - budget.target * effective:,.0f} tokens to reach the target")
    else:
        print("[budget] under the trigger: nothing to do yet")
    print("[budget] why a gap between trigger and target: compacting to just under 0.7 would trigger again")
    print("[budget] on the next turn; going down to 0.5 buys several turns per compaction.")
    print(f"[lesson 04] done: {len(SAMPLES)} samples measured; history {history:,} of effective "
          f"{effective:,} tokens ({history / effective:.0%}), trigger at {budget.trigger:.0%}")


if __name__ == "__main__":
    main()
