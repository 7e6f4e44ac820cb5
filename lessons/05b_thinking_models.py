"""Lesson 05b · Thinking models: the reasoning rung
Motto: a thinking model's scratch work is the largest thing it sends back, and the server decides
which of it may go.

The problem: a thinking model (DeepSeek, Qwen, models served by vLLM) returns its chain of thought
in `reasoning_content` (or `reasoning`) beside the answer, and it is often longer than the answer
and the tool calls together. The loop keeps it (tiny_agent.read_whole_reply) and message_tokens
counts it. Can the compactor drop it like an old tool result? The server says which part may go.
DeepSeek's thinking-mode guide, for the messages between two user messages:

    the model called no tool   its reasoning_content is ignored in later requests: it may go
    the model called tools     its reasoning_content must be sent back, in every later request;
                               without it the API answers HTTP 400 "The `reasoning_content` in the
                               thinking mode must be passed back to the API."

    user · [reasoning → call · result · reasoning → call · result · reasoning → answer] · user · …
           └──────────── a stretch that called tools: its reasoning goes back ───────┘

(DeepSeek V3.2's guide ignored all reasoning before the latest user message; the V4 guide keeps
the reasoning of stretches that called tools.) check() below is that rule, checked here: nothing
is sent anywhere.

How it works: drop_old_reasoning is the first step, "reasoning", of every policy of the one engine,
the sawtooth (Compactor()) included, before any summary (STEPS["reasoning"] calls it). It follows
the rule above: it removes the reasoning of a finished exchange (user message to user message)
that called no tool, keeps the reasoning of every exchange that called tools, and returns a new
list (part 2 checks the result against the rule). The summarizer's transcript shows reasoning only
as a short marker, because it is scratch work, not facts. SEND_REASONING=0 (tiny_agent.outgoing)
strips all of it, for servers that reject the field.

What changed since lesson 05: masking dropped old tool results; this rung drops old reasoning.
Try it: give turn 2 a tool call (TOOLS_IN_TURN_2 = True) and run check() again.
Explains compact.py Part II ("Messages as servers send them"): REASONING_FIELDS, reasoning_text;
("Tokens"): message_tokens; ("The first step"): reasoning, drop_old_reasoning; ("The summarizer that
reads in pieces"): transcript_lines, REASONING_MARK; tiny_agent.py Layer 2 ("Requests"):
read_whole_reply, outgoing.
Run: python lessons/05b_thinking_models.py
"""

import show
from compact import drop_old_reasoning, estimate_tokens, reasoning_text, text_tokens, transcript_lines
from conversations import generate_thinking_conversation
from tiny_agent import outgoing

TOOLS_IN_TURN_2 = False
REFUSAL = "HTTP 400: The `reasoning_content` in the thinking mode must be passed back to the API."


def thought(step: int, about: str) -> str:
    """A thinking model's reasoning for one step: long, tentative, and of no use two turns later."""
    return " ".join(f"Step {step}.{k}: about {about}, I should check whether the fixture's token is "
                    f"older than the {900 + k}-second TTL, or whether the clock is naive; maybe both."
                    for k in range(12))


def history() -> list[dict]:
    """Three user turns of a thinking model: tools, then a plain question, then tools again."""
    think = lambda step, about, **message: {"role": "assistant", "content": "", **message,
                                           "reasoning_content": thought(step, about)}
    turn_2 = [show.asks(show.call("call_2", "read_file", path="src/config.py"), reasoning_content=thought(4, "TTL")),
              show.result("call_2", "TTL = 900  # seconds")] if TOOLS_IN_TURN_2 else []
    return [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "The login test fails. Find out why."},
            show.asks(show.call("call_0", "read_file", path="tests/test_auth.py"),
                      reasoning_content=thought(1, "the test")),
            show.result("call_0", "def test_login():\n    assert login(token_age=901).status == 200"),
            show.asks(show.call("call_1", "bash", command="pytest -q tests/test_auth.py"),
                      reasoning_content=thought(2, "the failure")),
            show.result("call_1", "FAILED tests/test_auth.py::test_login - assert 401 == 200"),
            think(3, "the answer", content="The fixture's token is 901 s old; the TTL is 900 s."),
            {"role": "user", "content": "What does TTL mean?"},
            *turn_2,
            think(4, "the question", content="Time to live: how long a token stays valid."),
            {"role": "user", "content": "Fix the fixture and run the tests."},
            show.asks(show.call("call_3", "edit_file", path="tests/test_auth.py", old="901", new="899"),
                      reasoning_content=thought(5, "the fix")),
            show.result("call_3", "edited tests/test_auth.py"),
            show.asks(show.call("call_4", "bash", command="pytest -q tests/test_auth.py"),
                      reasoning_content=thought(6, "the check")),
            show.result("call_4", "1 passed")]


def stretches(messages: list[dict]) -> list[range]:
    """The messages between two user messages, and after the last one."""
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    return [range(a + 1, b) for a, b in zip(users, users[1:] + [len(messages)])]


def check(messages: list[dict]) -> str:
    """DeepSeek's rule, as its thinking-mode guide states it: in a stretch that called tools, every
    assistant message carries its reasoning_content. Checked here, not sent."""
    for stretch in stretches(messages):
        if any(messages[i].get("tool_calls") for i in stretch):
            if any(messages[i]["role"] == "assistant" and "reasoning_content" not in messages[i] for i in stretch):
                return REFUSAL
    return "HTTP 200"


def main() -> None:
    messages = history()
    show.banner("1. A thinking model's history, and what DeepSeek accepts")
    show.show(messages)
    reasoning = sum(text_tokens(reasoning_text(m)) for m in messages)
    print(f"[reasoning] {reasoning:,} of ~{estimate_tokens(messages):,} tokens are reasoning "
          f"({reasoning / estimate_tokens(messages):.0%})")
    print(f"[rule] as the model wrote it: {check(messages)}")
    print(f"[rule] with no reasoning at all (SEND_REASONING=0, or a client that drops the field): "
          f"{check(outgoing(messages, send_reasoning=False))}")

    show.banner("2. drop_old_reasoning")
    before = [reasoning_text(m) for m in messages]
    dropped = drop_old_reasoning(messages)
    for n, stretch in enumerate(stretches(messages), start=1):
        had = [i for i in stretch if reasoning_text(messages[i])]
        gone = [i for i in had if not reasoning_text(dropped[i])]
        tools = "called tools" if any(messages[i].get("tool_calls") for i in stretch) else "called no tool"
        where = "the current turn" if n == len(stretches(messages)) else f"turn {n}"
        print(f"[drop] {where:<16} ({tools:<14}) reasoning in #{', #'.join(map(str, had))}: "
              f"{'removed' if gone == had else 'kept' if not gone else 'partly removed'}")
    saved = estimate_tokens(messages) - estimate_tokens(dropped)
    print(f"[drop] ~{estimate_tokens(messages):,} → ~{estimate_tokens(dropped):,} tokens ({-saved / estimate_tokens(messages):+.0%}); "
          f"the input list is unchanged: {before == [reasoning_text(m) for m in messages]}")
    verdict = check(dropped)
    print(f"[rule] the result: {verdict}")
    if verdict != "HTTP 200":
        print("[rule] drop_old_reasoning removed the reasoning of a turn that called tools: DeepSeek V4 refuses")
        print("[rule] that; only V3.2 ignored all reasoning before the latest user message")

    run = generate_thinking_conversation(120, seed=0).messages
    quiet = [s for s in stretches(run)[:-1] if not any(run[i].get("tool_calls") for i in s)]  # finished ones
    show.banner(f"3. A longer run: 120 turns, {len(stretches(run))} user requests")
    share = sum(text_tokens(reasoning_text(m)) for m in run) / estimate_tokens(run)
    after = drop_old_reasoning(run)
    print(f"[tokens] {len(run)} messages, ~{estimate_tokens(run):,} tokens, {share:.0%} of them reasoning; "
          f"drop_old_reasoning → ~{estimate_tokens(after):,} "
          f"({estimate_tokens(after) / estimate_tokens(run) - 1:+.0%}); DeepSeek's rule: {check(after)[:8]}")
    print(f"[tokens] only the reasoning of the {len(quiet)} finished exchanges that called no tool went; "
          f"the {len(stretches(run)) - len(quiet)} others keep theirs")

    show.banner("4. What the summarizer reads")
    for line, _ in transcript_lines(messages[1:5]):
        print(f"[transcript] {line.split(chr(10))[0][:90]}")
    print(f"[lesson 05b] done: reasoning was {reasoning / estimate_tokens(messages):.0%} of the history; "
          f"drop_old_reasoning saved ~{saved:,} tokens; DeepSeek's rule answers {verdict[:8]}")


if __name__ == "__main__":
    main()
