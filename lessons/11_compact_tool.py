"""Lesson 11 · The compact tool: the model asks for compaction itself
Motto: the one who knows what comes next chooses what to keep.

The problem: the compactor only sees token counts. The model knows when a phase of work is over
("I have read the sources; now the tests") and what the next phase needs. Without a way to say
so, it waits for the window to fill and gets a summary aimed at nothing in particular.

How it works: `compact` is one more tool in TOOL_SCHEMAS (Layer 2 registers it). The loop runs
every call of that message; then the compaction it calls next (Strategy) sees the compact call
among the new results, compacts at once with the model's `focus`, and answers the call with what
it did:

    model ──► compact {"focus": "..."} ──► compact_now(session): Strategy(messages, level=1, focus=...)
                                              ├─► summarizer(what leaves, focus="...")
                                              └─► result "compacted 16 → 11 messages, keeping what matters for: …"

A forced compaction runs now, whatever the trigger says, and aims at the target: the cheap rungs
run only while the history is over the target, the summary always runs (so the focus reaches the
summarizer), and the last resort only if the history is still over the target.

The model here is a STAND-IN: a fixed Python script, not a language model. It reads files through
the real tools, calls `compact` at the end of each of its two phases, then answers. The loop, the
tools and the compactor are the real code. The summarizer is wrapped to print the focus it gets.

What changed since lesson 10: the focus no longer has to be guessed from the last user message.
Try it: change FOCUS; delete the second compact step and compare the final summary.
Explains tiny_agent.py Layer 1 ("The loop"): compact_now; ("bash"): TOOL_SCHEMAS; Layer 2 ("Tools"):
compact_call; ("Strategies"): Strategy (the compact call), requested_focus; compact.py Part II
("Tokens, as the server counts them"): Budget; ("The engine"): Compactor.compact(level=1), Pass.
Run: python lessons/11_compact_tool.py
"""

import tempfile
from pathlib import Path

import show
import tiny_agent
from compact import Budget, is_summary, parse_summary, summarize_extractive, summary_body

FIRST_FOCUS = "which check in src/ can return 401"
FOCUS = "the failed test in tests/test_auth_0.py"
SOURCES = {f"src/module_{i}.py": "".join(f"def check_{i}_{j}(user):\n    return user.level >= {j}\n\n"
                                         for j in range(40)) for i in range(6)}
TESTS = {"pytest.log": "tests/test_auth_0.py::test_login_0_7 FAILED\nE   AssertionError: expected 200, got 401",
         **{f"tests/test_auth_{i}.py": "".join(f"def test_login_{i}_{j}():\n    assert login('user{j}').status == 200\n\n"
                                               for j in range(40)) for i in range(3)}}
foci_received = []


def scripted_model():
    """The stand-in for a language model: (messages, tools) -> assistant message, from a script."""
    script = ([("read_file", {"path": p}) for p in SOURCES] + [("compact", {"focus": FIRST_FOCUS})]
              + [("read_file", {"path": p}) for p in TESTS] + [("compact", {"focus": FOCUS})])

    def model(messages, tools):
        if not script:
            return {"role": "assistant", "content": "[stand-in] The 401 comes from the token TTL."}
        name, args = script.pop(0)
        note = (f"[stand-in] Reading {args['path']}: the 401 must come from a check that runs before "
                "the handler." if name == "read_file" else "[stand-in] This phase is done; compacting.")
        return show.asks(show.call(f"call_{len(script)}", name, **args), text=note)
    return model


def summarizer_that_prints(messages, focus=None):
    """The ladder's offline summarizer, wrapped to show what the compactor passes it."""
    foci_received.append(focus)
    print(f"[summarizer] received focus={focus!r} with {len(messages)} messages to summarize")
    return summarize_extractive(messages, focus)


def main():
    with tempfile.TemporaryDirectory() as folder:
        for path, text in {**SOURCES, **TESTS}.items():
            (Path(folder) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(folder) / path).write_text(text)
        config = tiny_agent.Config(strategy="layered", context_window=16_000)
        session = tiny_agent.new_session(config, summarize=summarizer_that_prints)
        show.banner("1. The real loop, with a scripted stand-in model")
        print("[stand-in] The model is a fixed Python script, not a language model; the loop, the tools "
              "and the compactor are the real code.")
        # the budget make_compaction gives its Compactor: the window, the answer's reserve, the schemas
        budget = Budget(config.context_window, config.reserved_output, fixed_tokens=tiny_agent.schema_tokens())
        effective = budget.effective(session.messages)
        print(f"[forced] trigger {budget.trigger:.0%} = {budget.trigger * effective:,.0f} history tokens, "
              f"target {budget.target:.0%} = {budget.target * effective:,.0f}")

        def log(line):
            first, *steps = line.split("\n")  # a [compact] line, then one line per step the ladder ran
            print(first)
            if line.startswith("[compact] "):
                history = budget.history(session.messages)
                cheap = "over the target: cheap rungs first" if history > budget.target * effective else \
                    "under the target: no cheap rung"
                print(f"[forced] the history was {history:,} tokens ({history / effective:.0%}): under the trigger, "
                      f"so only the model's call compacts; {cheap}, then the summary:")
            for step in steps:
                print(step)
        answer = tiny_agent.run_agent(session, "Why does the login test fail?", scripted_model(),
                                      tiny_agent.AgentWorkspace(Path(folder)), log=log)
    show.banner("2. What the model sees afterwards")
    show.show(session.messages)
    summary = next(m for m in session.messages if is_summary(m))
    print("[focus] the summary's \"Relevant to the focus\" lines (from the messages that left; what the newest")
    print("[focus] focus names may still stand whole in the kept tail, and earlier foci's lines roll forward):")
    for line in parse_summary(summary_body(summary)).get("Relevant to the focus", []):
        print(f"[focus] {line[:90]}")
    print(f"[answer] {answer}")
    asked = [FIRST_FOCUS, FOCUS]
    print(f"\n[lesson 11] done: {session.compaction.compactions} compactions asked for by the model; "
          f"{sum(f in foci_received for f in asked)} of {len(asked)} foci reached the summarizer")


if __name__ == "__main__":
    main()
