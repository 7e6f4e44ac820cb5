"""Lesson 12 · Importance eviction and the rolling window
Motto: drop what matters least, not what is oldest; fold the rest into one summary that grows.

The problem: cutting the oldest turns throws away the user's rules from turn 3 and keeps the
routine `ls` from turn 40. And re-summarizing a summary of a summary loses a little each time.

How it works:
  importance  scores each group (groups(), lesson 08): the user's words 3, the agent's prose 2,
              a bare call 1, a tool result 0.5 (smart eviction's weights, Weights); decisions,
              errors and user constraints get a bonus; newer beats older.
  eviction    drops the lowest-scoring whole groups between head and tail until the list fits,
              and leaves one "[evicted]" note per gap. What stays keeps its order; the user's
              words that leave are carried by the state (carry_user_words, lesson 10).
  hybrid      keeps the last `keep_recent` messages raw and a rolling summary of everything
              older. The old summary is part of the next middle, so it is *updated*, not
              summarized again: its tool counts keep adding up.

      [system][summary v3 = v2 + new turns, the user's words below it][ack][6 newest messages]

What changed since lesson 11: the first lossy steps that choose *what* to drop by meaning.
Try it: change TARGET_SHARE to 0.1 or 0.6 and compare which planted facts stay; set
  keep_recent=12 on the hybrid Compactor; give importance() Weights(multiply=True).
Explains compact.py Part III ("Eviction and the rolling window"): Weights, importance,
  evict_by_importance, eviction_note; ("The ladder's steps and policies"): evict, the policy
  "hybrid"; Part II ("Messages as servers send them"): groups; ("The summary step"): boundaries;
  ("The engine"): Compactor, CompactState. Part 3 replays the run with lessons/benchmark.py's
  replay (through show.watch).
Run: python lessons/12_eviction_and_rolling.py
"""

import re

import show
from compact import Compactor, boundaries, estimate_tokens, evict_by_importance, importance
from conversations import generate_conversation

TARGET_SHARE = 0.3


EXAMPLES = {
    "user constraint": [{"role": "user", "content": "Do not modify deploy.sh."}],
    "user request": [{"role": "user", "content": "Please also look at the token expiry."}],
    "decision": [{"role": "assistant", "content": "Decision: use sqlite because the tests run offline."}],
    "error output": show.step("c1", "bash", "FAILED tests/test_auth.py::test_login - AssertionError",
                              command="pytest -q"),
    "routine output": show.step("c1", "bash", "README.md\nsrc\ntests", command="ls"),
}


def tool_calls(messages):
    return sum(len(m.get("tool_calls") or []) for m in messages)


def main():
    show.banner("1. Importance scores (higher stays longer)")
    print(f"  {'kind':<16} {'oldest':>7} {'newest':>7}")
    for kind, messages in EXAMPLES.items():
        old, new = (importance(messages, (0, len(messages)), r) for r in (0.0, 1.0))
        print(f"  {kind:<16} {old:>7.1f} {new:>7.1f}")

    show.banner("2. Evict by importance to a token target")
    conversation = generate_conversation(60, seed=4)
    messages = conversation.messages
    head, tail = boundaries(Compactor(policy="layered", context_window=64_000), messages)
    target = int(TARGET_SHARE * estimate_tokens(messages))
    out = evict_by_importance(messages, target, head, tail)
    show.sizes("evict", messages, out)
    notes = [m["content"] for m in out if m["content"] and m["content"].startswith("[evicted]")]
    for note in notes:
        print(f"  {note[:100]}")
    position = {id(m): i for i, m in enumerate(messages)}
    kept = [position[id(m)] for m in out if id(m) in position]
    print(f"[kept] {len(kept)} original messages, in their original order: {kept == sorted(kept)}")
    text = " ".join(str(m) for m in out)
    for kind in ("constraint", "decision", "error"):
        facts = [f for f in conversation.facts if f.kind == kind]
        print(f"[kept] planted {kind}s still in context: {sum(f.text in text for f in facts)} of {len(facts)}")

    show.banner("3. The hybrid: a rolling summary over a long run")
    left, add_up = [0], [True]  # tool calls that have left the context so far; do the counts agree?

    def on_compaction(compactor, before, after):  # the loop compacts before every model call
        left[0] += tool_calls(before) - tool_calls(after)
        counted = sum(int(n) for n in re.findall(r"×(\d+)", compactor.state.summary))
        add_up[0] &= counted == left[0]
        print(f"[rolling] compaction {compactor.state.compactions}: {left[0]:>3} tool calls have left "
              f"the context, the summary counts {counted:>3}")
    compactor, _, _ = show.watch(generate_conversation(250, seed=3).messages,
                                 lambda summarizer: Compactor(context_window=64_000, policy="hybrid"), on_compaction)
    print(f"[rolling] tool counts add up at every compaction: {'yes' if add_up[0] else 'NO'}")
    state = compactor.state
    print(f"[state] compactions={state.compactions} tokens_saved={state.tokens_saved:,}")
    print(f"[state] recent_files={state.recent_files}")
    print(f"\n[lesson 12] done: eviction kept {len(kept)} messages in order; the rolling summary "
          f"was updated {state.compactions} times")


if __name__ == "__main__":
    main()
