"""Lesson 07 · Clear, dedupe, shorten
Motto: what was only a step, what was said twice, and what the agent wrote itself can go.

The problem: masking (lesson 05) and snipping (lesson 06) treat every result alike. Three kinds of
content can go even more safely, because the information survives somewhere else:

    clear    a cache_read result was only a step: once a later turn used it, it becomes
             "[tool cleared]"
    dedupe   the same call with the same output twice: the older copy points to the newer one
    shorten  the arguments of an old write_file hold the whole file, which is now on disk:
             long strings inside the JSON are cut, and the arguments stay valid JSON

How it works: all three pair each result with its call (pair_tool_results) and return a new list,
reusing every message they do not change. The newest results and the last calls stay whole.
shorten_arguments stands beside the one cutter of lesson 06: the last resort and the hardest cut
call it too, and its marker, like the cutter's, says how much it cut.

What changed since lesson 06: three more cheap layers; lesson 13 runs them all in one ladder.
Try it: make the second read of cart.py return other text and see dedupe keep it; set keep_last=0.
Explains compact.py Part III ("The cheap layers"): clear_tool_results, dedupe_tool_results; Part II
("The rules every policy shares"): shorten_arguments, shorten_value; ("How the engine ends: the
archive"): map_strings; ("Messages as servers send them"): pair_tool_results.
Run: python lessons/07_clear_and_dedupe.py
"""

import json

import show
from compact import (clear_tool_results, content_text, dedupe_tool_results, describe_call, pair_tool_results,
                     shorten_arguments)
from conversations import generate_conversation

VERBS = ("add", "remove", "count", "clear", "total", "empty")
CART_V1 = '"""Cart operations."""\n\n' + "".join(f"def {v}_item(cart, item):\n    return cart.{v}(item)\n\n"
                                              for v in VERBS)
CART_V2 = CART_V1 + "".join(f"def coupon_{n}(cart):\n    return cart.apply('SAVE{n}')\n\n" for n in range(60))


def history() -> list[dict]:
    """A small task, one tool call per turn, ending with a result the model has not read yet."""
    steps = [("cache_read", {"key": "pytest:lastfailed"}, '{\n  "tests/test_cart.py::test_coupon": true\n}'),
             ("read_file", {"path": "src/cart.py"}, CART_V1),
             ("bash", {"command": "pytest -q"}, "F..\nFAILED tests/test_cart.py::test_coupon\n1 failed"),
             ("read_file", {"path": "src/cart.py"}, CART_V1),  # the same call, the same output
             ("write_file", {"path": "src/cart.py", "content": CART_V2}, f"wrote {len(CART_V2):,} chars"),
             ("read_file", {"path": "src/cart.py"}, CART_V2),  # the same call, a new output
             ("bash", {"command": "pytest -q"}, "...\n3 passed"),
             ("cache_read", {"key": "ci:last_run"}, '{"status": "green"}')]
    messages = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Add coupon helpers to src/cart.py and make the tests pass."}]
    for n, (name, args, output) in enumerate(steps):
        messages += show.step(f"call_{n}", name, output, **args)
    return messages


def changed(before: list[dict], after: list[dict]) -> list[int]:
    return [i for i, (b, a) in enumerate(zip(before, after)) if b is not a]


def main() -> None:
    messages = history()
    show.show(messages, "the history: 8 calls, one per turn")

    show.banner("clear_tool_results: intermediate results")
    cleared = clear_tool_results(messages)
    for i in changed(messages, cleared):
        if cleared[i].get("tool_calls"):  # five-layer clears the whole record: the call's arguments too
            print(f"[clear] #{i} call {describe_call(messages[i]['tool_calls'][0])} → "
                  f"{describe_call(cleared[i]['tool_calls'][0])}")
        else:
            print(f"[clear] #{i} {len(content_text(messages[i])):,} chars → {content_text(cleared[i])!r}")
    print(f"[kept] #{len(messages) - 1} the newest cache_read result stays: no later turn has used it yet")

    show.banner("dedupe_tool_results: the same output twice")
    deduped = dedupe_tool_results(messages)
    for i, call in pair_tool_results(messages).items():
        if deduped[i] is not messages[i]:
            print(f"[dedupe] #{i} {len(content_text(messages[i])):,} chars → {content_text(deduped[i])!r}")
        elif call["function"]["name"] == "read_file":
            print(f"[kept] #{i} {describe_call(call)}, {len(content_text(messages[i])):,} chars, whole")
    print("[kept] the newest copy of an output stays, and so does a re-read whose text changed;")
    print("[kept] outputs under 200 chars are never deduped: a pointer would save next to nothing")

    show.banner("shorten_arguments: what the agent wrote itself")
    shortened = shorten_arguments(messages, max_chars=400, keep_last=3)
    for i in changed(messages, shortened):
        raw, new = (m[i]["tool_calls"][0]["function"]["arguments"] for m in (messages, shortened))
        args = json.loads(new)  # still valid JSON: a provider or a converter that parses it will not fail
        print(f"[shorten] #{i} write_file arguments {len(raw):,} → {len(new):,} chars, "
              f"valid JSON with keys {list(args)}")
        print(f"[shorten] content now ends: …{args['content'][-40:]!r}")
    print("[kept] the last 3 calls keep their arguments whole (keep_last=3)")

    show.banner("All three on a generated 40-turn conversation")
    generated = generate_conversation(40, seed=0).messages
    cheap = shorten_arguments(dedupe_tool_results(clear_tool_results(generated)), keep_last=3)
    show.sizes("clear+dedupe+shorten", generated, cheap)
    counts = [sum(1 for i in changed(messages, after) if after is not cleared or messages[i].get("role") == "tool")
              for after in (cleared, deduped, shortened)]  # a cleared record counts once, by its result
    print(f"[lesson 07] done: {counts[0]} cleared, {counts[1]} deduped, {counts[2]} shortened; "
          f"{len(changed(generated, cheap))} messages changed in a generated conversation")


if __name__ == "__main__":
    main()
