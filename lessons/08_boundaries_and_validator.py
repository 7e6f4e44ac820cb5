"""Lesson 08 · Boundaries and the validator
Motto: cut between groups, never through one; then check the list before a provider does.

The problem: a compactor cuts the history into pieces and glues some back together. A cut that
lands inside a tool-call group leaves a tool result without its call (or a call without its
result), and the provider answers HTTP 400. So do a system message in the middle and, for some
providers, a conversation that does not start with the user.

How it works:
    [system] | [task][old turns ............. ] | [newest turns within the tail budget]
      head   |   middle (what is replaced)      |   tail (kept verbatim)
  groups(messages, head) is the one walker of tool-call groups: it asks Part I's find_cut for
  one group at a time from the end (an assistant message with the results after it, or one
  message alone), and every step that needs a group asks it. boundaries(engine, messages) fills
  the tail with whole groups from the end up to `tail_share` of the effective window, so a call
  and its results are always on the same side. repair is the one validator: it fixes what a
  provider would reject (an orphan result goes, an open call gets a placeholder result, a late
  system message becomes a user note) and, given a list, says what it fixed; find_problems is
  that list plus Anthropic's rule that the first turn is the user's. Tool results are paired
  with the calls just before them (by position), because real models reuse ids. A message with
  no valid role cannot be repaired: compaction (the one engine, Compactor, whatever its policy)
  refuses the list loudly (check_messages) instead of dropping it.

What changed since lesson 07: the cheap layers never moved a message; from here on we cut.
Try it: set TAIL_SHARES to (0.01, 0.02, 0.03); add {"role": "assistant", "content": ""} to a
  broken list and see the new problem and its repair.
Explains compact.py Part I ("The tutorial's sawtooth"): find_cut; Part II ("Messages as servers
  send them"): check_messages, groups, pair_tool_results; ("The summary step"): boundaries; ("How
  the engine ends: a valid list"): repair; ("The engine"): Compactor; Part III ("Validation"):
  find_problems.
Run: python lessons/08_boundaries_and_validator.py
"""

import show
from compact import Compactor, boundaries, find_problems, groups, message_tokens, repair
from conversations import generate_conversation

TAIL_SHARES = (0.05, 0.10, 0.20, 0.30)


def naive_tail_start(messages, head, budget):
    """Where the tail would start on the token budget alone, without looking at groups."""
    start, used = len(messages), 0
    while start > head and used + message_tokens(messages[start - 1]) <= budget:
        start -= 1
        used += message_tokens(messages[start])
    return start


def show_boundaries(messages):
    compactor = Compactor(policy="layered", context_window=16_000, reserved_output=2_000)
    head, tail = boundaries(compactor, messages)
    walked = groups(messages, head)
    print(f"[groups] groups(messages, {head}): {len(messages) - head} messages in {len(walked)} groups, "
          f"the largest of {max(end - start for start, end in walked)} messages (a call with its results)")
    part = lambda a, b: f"{b - a:>3} messages, ~{sum(map(message_tokens, messages[a:b])):,} tokens"
    print(f"[head]   messages 0-{head - 1}: {part(0, head)} (the system prompt, kept verbatim)")
    print(f"[middle] messages {head}-{tail - 1}: {part(head, tail)} (what a summary replaces)")
    print(f"[tail]   messages {tail}-{len(messages) - 1}: {part(tail, len(messages))} "
          f"(tail_share {compactor.tail_share:.0%} of {compactor.budget.effective(messages):,})")
    for share in TAIL_SHARES:
        compactor.tail_share = share
        head, tail = boundaries(compactor, messages)
        naive = naive_tail_start(messages, head, share * compactor.budget.effective(messages))
        moved = "moved out of a tool-call group" if naive != tail else "already between groups"
        print(f"  share {share:.0%}: budget alone starts at {naive} ({messages[naive]['role']}), "
              f"tail starts at {tail} ({messages[tail]['role']}): {moved}")


def brief(messages):
    """`user · assistant → call_1 · tool(call_1)`: the shape of a list, which is what providers check."""
    def one(m):
        if m.get("tool_calls"):
            return "assistant → " + ", ".join(c["id"] for c in m["tool_calls"])
        who = f"tool({m['tool_call_id']})" if m["role"] == "tool" else m["role"]
        note = m["content"][:14] + "…" if m["content"].startswith("[") else ""  # what repair wrote
        return f"{who} {note}".strip()
    return " · ".join(one(m) for m in messages)


def call(call_id, path):
    """An assistant message with one read_file call."""
    return show.asks(show.call(call_id, "read_file", path=path))


result = show.result


def broken_lists():
    system = {"role": "system", "content": "You are a coding agent."}
    task = {"role": "user", "content": "Fix the failing test in tests/test_auth.py."}
    return {
        "orphan tool result": [system, result("call_7", "old output whose call was cut"), task,
                               call("call_1", "auth.py"), result("call_1", "def login(): ...")],
        "unanswered call": [system, task, call("call_1", "auth.py"),
                            {"role": "user", "content": "Read the test first, please."}],
        "system message in the middle": [system, task, call("call_1", "auth.py"),
                                         result("call_1", "def login(): ..."),
                                         {"role": "system", "content": "Reminder: run the tests."}],
        "reused ids paired by position": [system, task, call("call_0", "auth.py"),  # its result was lost
                                          call("call_0", "tests/test_auth.py"),
                                          result("call_0", "def test_login(): ...")],
    }


def main():
    show.banner("1. Boundaries: head, middle, tail")
    show_boundaries(generate_conversation(40, seed=1).messages)

    show.banner("2. The validator: what a provider would reject, and the repair")
    fixed = 0
    for name, messages in broken_lists().items():
        print(f"--- {name}: system · {brief(messages[1:])}")
        for provider in ("openai", "anthropic"):
            for problem in find_problems(messages, provider) or ["none"]:
                print(f"  [problem] {provider:<9} {problem}")
        if name.startswith("reused ids"):
            calls = {c["id"] for m in messages for c in m.get("tool_calls") or []}
            results = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
            print(f"  [naive]   comparing ids as sets finds {'nothing' if calls == results else 'it'}: "
                  "call_0 has *a* result, just not the first call's")
        fixed_lines: list[str] = []  # repair says what it fixed here
        repaired = repair(messages, fixed_lines)
        ok = not find_problems(repaired, "openai") and not find_problems(repaired, "anthropic")
        fixed += ok
        print(f"  [repair]  {len(messages)} → {len(repaired)} messages: system · {brief(repaired[1:])}")
        print(f"  [check]   {'valid' if ok else 'STILL INVALID'} for openai and anthropic; what repair says it "
              f"fixed is find_problems' openai list: {fixed_lines == find_problems(messages)}")
    no_role = [{"role": "system", "content": "You are a coding agent."}, {"content": "a message with no role"}]
    print(f"--- no role: {find_problems(no_role)[0]}")
    try:
        Compactor().compact(no_role)  # the sawtooth: the engine's default policy
    except ValueError as error:
        print(f"  [refused] sawtooth raises ValueError: {error}")
    print(f"\n[lesson 08] done: the tail never starts on a tool result; repair made {fixed} of "
          f"{len(broken_lists())} broken lists valid")


if __name__ == "__main__":
    main()
