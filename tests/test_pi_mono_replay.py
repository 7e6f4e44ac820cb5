"""Pi-mono's large-session fixture (tests/data, source in tests/data/SOURCES.md) replayed
through every strategy like the agent loop that wrote it: compacted before every assistant message,
the compacted list fed back. Every request is a valid list, and the user's latest request is in it
word for word until a newer request replaces it (pi-mono's own request at message 83 was gone after
the second summary)."""

from __future__ import annotations

import json

import compact
import pytest
from conftest import sawtooth, ROOT, compacting_policies

FIXTURE = ROOT / "tests" / "data" / "pi-mono-large-session.jsonl"
WINDOW = 16_000


def text_of(parts) -> str:
    return "\n".join(p.get("text", "") for p in parts if p.get("type") == "text")


def session_messages() -> list[dict]:
    """pi-mono's session entries as OpenAI chat messages; an aborted reply that holds nothing is left
    out, and the 18 calls the user interrupted get a result, as tiny_agent's answer_open_calls gives them."""
    out = []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        m = entry.get("message") if entry.get("type") == "message" else None
        if m is None:
            continue
        if m["role"] == "user":
            out.append({"role": "user", "content": text_of(m["content"])})
        elif m["role"] == "toolResult":
            out.append({"role": "tool", "tool_call_id": m["toolCallId"], "content": text_of(m["content"])})
        else:
            calls = [{"id": p["id"], "type": "function", "function": {"name": p["name"],
                                                                      "arguments": json.dumps(p["arguments"])}}
                     for p in m["content"] if p.get("type") == "toolCall"]
            if text_of(m["content"]) or calls:
                out.append({"role": "assistant", "content": text_of(m["content"]) or None,
                            **({"tool_calls": calls} if calls else {})})
    return compact.repair(out)


def strategy(name: str):
    if name == "sawtooth":
        state = compact.CompactState()
        return lambda h: sawtooth(h, compact.summarize_extractive, max_tokens=int(0.7 * WINDOW * 3 / 4),
                                          state=state)
    build = (lambda n, **k: compact.Compactor(policy=n, **k))
    compactor = build(name, context_window=WINDOW, reserved_output=WINDOW // 4, summarize=compact.summarize_extractive)
    return compactor.compact


def test_the_fixture_is_a_valid_conversation():
    messages = session_messages()
    assert len(messages) >= 900 and sum(m["role"] == "user" for m in messages) == 88
    assert compact.find_problems(messages) == []


@pytest.mark.parametrize("name", compacting_policies())
def test_every_request_is_valid_and_quotes_the_latest_user_request(name):
    compaction, history, latest = strategy(name), [{"role": "system", "content": "You are a coding agent."}], None
    requests = 0
    for m in session_messages():
        if m["role"] == "assistant":
            try:
                history = compaction(history)
            except compact.ContextOverflowError:
                pass  # a turn that alone does not fit this small window: the agent would say so
            requests += 1
            assert compact.find_problems(history) == [], (name, requests)
            text = "\n".join(compact.content_text(x) for x in history)
            assert latest in text, (name, requests, latest[:80])
        elif m["role"] == "user":
            latest = m["content"]
        history = [*history, m]
    assert requests > 400
