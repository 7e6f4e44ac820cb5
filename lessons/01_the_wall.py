"""Lesson 01 · The wall
Motto: an agent's messages only grow, and the window does not.

The problem: every iteration of the agent loop appends the model's reply and one result per tool
call, then sends the WHOLE list again. Nothing ever leaves. Sooner or later the request is longer
than the model's context window and the server refuses it with HTTP 400.

How it works: the real loop (tiny_agent.run_agent) with strategy "none", the offline DemoModel and real
tools on a temporary folder of small Python files:

    iteration 1:  [system, task]                              ─► model
    iteration 2:  [system, task, call, result]                ─► model
    iteration 3:  [system, task, call, result, call, r, r]    ─► model   ... until 400

Every request re-sends all earlier ones, so if each iteration adds about k tokens, request n
holds about n·k tokens, and the n requests together cost k·n²/2: quadratic in the iterations.
A request is the messages and the tool schemas, which go with every one of them. When the server
refuses, served() asks the compaction for one level harder before each retry (levels 1, 2, 3) and
never re-sends a refused request; strategy "none" cannot compact, so at level 1 the loop ends
with ContextOverflowError.

What changed: nothing yet. This is the starting point, the loop with no compaction at all.
Try it: raise WINDOW to 12_000 and the loop finishes; add names to show.SHOP_FILES and it hits the wall again.
Explains tiny_agent.py Layer 1 ("The loop"): run; Layer 2 ("The loop as the whole agent runs it"):
run_agent, served; ("Strategies"): make_compaction (strategy none); ("The offline demo"): DemoModel,
ContextLengthExceeded; compact.py Part II ("Refusals the engine reads"): is_context_overflow.
Run: python lessons/01_the_wall.py
"""

import json
import tempfile
import textwrap
from pathlib import Path

import show
from compact import ContextOverflowError, estimate_tokens, is_context_overflow
from tiny_agent import DEMO_TASK, AgentWorkspace, Config, ContextLengthExceeded, DemoModel, new_session, run_agent

WINDOW = 4_000  # tokens the demo model accepts, like a (very small) real model


def recording(model, sent: list[int], refused: list[tuple[int, Exception]]):
    """Wrap the model so we see each request's size before the model gets it, and its refusal.
    The size is what a server counts: the messages and the tool schemas sent with them."""
    def call(messages, tools):
        sent.append(estimate_tokens(messages) + estimate_tokens(json.dumps(tools)))
        print(f"[send] iteration {len(sent):>2}: {len(messages):>3} messages, ~{sent[-1]:>6,} tokens"
              f"   (all requests so far: ~{sum(sent):>7,})")
        try:
            return model(messages, tools)
        except ContextLengthExceeded as error:
            refused.append((len(sent), error))  # which request it was, and the refusal
            raise

    return call


def main() -> None:
    show.banner(f"The loop with no compaction, a model whose window is {WINDOW:,} tokens")
    sent: list[int] = []
    refused: list[tuple[int, Exception]] = []
    stopped = None
    with tempfile.TemporaryDirectory(prefix="lesson01-") as folder:
        show.make_project(Path(folder))
        session = new_session(Config(strategy="none"))
        try:
            run_agent(session, DEMO_TASK, recording(DemoModel(window=WINDOW), sent, refused),
                      AgentWorkspace(Path(folder)), log=lambda line: None)
            print("[answer] the loop finished before it hit the wall: lower WINDOW to see it")
        except ContextOverflowError as error:
            stopped = error

    if refused:
        refused_at, error = refused[0]
        show.banner("The server refuses the request")
        print(f"[error] {error}")
        print(f"[error] is_context_overflow(error) = {is_context_overflow(error)}: served() compacts "
              "harder and retries")
        print("[error] an OpenAI server sends this body with HTTP 400:")
        body = {"error": {"message": f"This model's maximum context length is {WINDOW} tokens. However, "
                                     f"your messages resulted in {sent[-1]} tokens. Please reduce the "
                                     "length of the messages.",
                          "type": "invalid_request_error", "param": "messages",
                          "code": "context_length_exceeded"}}
        print(textwrap.indent(json.dumps(body, indent=2), "        "))
        print("[stop] before each retry served() asks the compaction for one level harder (1, 2, then 3), and it never")
        print("[stop] re-sends a refused request; strategy none cannot compact, so level 2 raised ContextOverflowError:")
        print(textwrap.fill(str(stopped), 96, initial_indent="    ", subsequent_indent="    "))
        print(f"[stop] request {refused_at} was refused; requests sent after it: {len(sent) - refused_at}")

    show.banner("Why the bill grows quadratically")
    n, k = len(sent), (sent[-1] - sent[0]) / max(1, len(sent) - 1)
    print("[growth] every request re-sends all the earlier messages: old tokens are paid for again and again")
    print(f"[growth] each iteration added ~{k:,.0f} tokens; the last request held ~{sent[-1]:,}")
    print(f"[growth] {n} requests sent ~{sum(sent):,} tokens in all; n·(first request) + k·n(n−1)/2 "
          f"≈ {k * n * (n - 1) / 2 + n * sent[0]:,.0f}")
    print(f"[growth] twice the iterations would cost about four times as much: ~{4 * sum(sent):,} tokens")
    wall = f"refused at ~{sent[-1]:,} tokens > window {WINDOW:,}" if refused else "no wall hit"
    print(f"[lesson 01] done: {len(session.messages)} messages, {wall}; "
          f"{n} requests cost ~{sum(sent):,} tokens")


if __name__ == "__main__":
    main()
