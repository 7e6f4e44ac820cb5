"""A message of the user's larger than the window: one rule under every strategy. It is
archived whole, the model is sent its head and tail with a marker of what was cut, and one line
tells the user; when the server's window is smaller than CONTEXT_WINDOW says, its refusal names
the real window and the same rule applies."""

from __future__ import annotations

import json

import pytest

import compact
import tiny_agent
from conftest import chat_response, counted

TASK = "Summarize this log. " + " ".join(f"line {n}: worker {n % 7} finished job {n * 13} in {n % 90} ms." for n in range(900))
REFUSAL = ("This model's maximum context length is 2048 tokens. However, you requested {n} tokens ({m} in the "
           "messages, 256 in the completion). Please reduce the length of the messages or completion.")


def strict_server(window: int = 2048):
    """Answers like llama-cpp-python with n_ctx `window`: a prompt and its max_tokens over the window
    are refused with its own words; anything else gets a final answer."""
    def reply(body: dict) -> tuple[int, dict]:
        size = counted(body) + (body.get("max_tokens") or 0)
        if size > window:
            return 400, {"error": {"message": REFUSAL.format(n=size, m=counted(body)), "type": "invalid_request_error",
                                   "param": "messages", "code": "context_length_exceeded"}}
        return 200, chat_response("DONE: the log says every worker finished.")
    return reply


def run_task(monkeypatch, tmp_path, capsys, strategy: str, window: str) -> tuple[int, str]:
    monkeypatch.setenv("CONTEXT_WINDOW", window)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code = tiny_agent.main([TASK, "--strategy", strategy, "--workspace", str(tmp_path)])
    out = capsys.readouterr()
    return code, out.out + out.err


def archived(tmp_path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "state").rglob("*.jsonl"))


@pytest.mark.parametrize("strategy", ["sawtooth", "layered", "hybrid", "zones", "none"])
def test_a_31_kb_task_in_a_2048_token_window_ends_the_same_under_every_strategy(fake_openai, monkeypatch, tmp_path,
                                                                               capsys, strategy):
    assert len(TASK) > 31_000
    server = fake_openai(strict_server())
    code, output = run_task(monkeypatch, tmp_path, capsys, strategy, "2048")
    assert code == 0 and "DONE: the log says every worker finished." in output, output[-2_000:]
    cut_lines = [line for line in output.splitlines() if line.startswith("[cut] your message")]
    assert len(cut_lines) == 1 and "the model sees its head and tail" in cut_lines[0]  # told what it saw
    sent = [m for m in server.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]
    assert sent.startswith(TASK[:200]) and sent.endswith(TASK[-200:]) and "chars cut: this message alone would not fit the window; the archive holds it whole" in sent
    assert json.dumps(TASK)[1:-1] in archived(tmp_path)  # the whole task, archived before it was cut
    assert not any("too long" in line for line in output.splitlines())  # refused by no one: cut before sending


@pytest.mark.parametrize("strategy", ["sawtooth", "layered"])
def test_a_server_smaller_than_context_window_names_its_window_and_the_same_rule_applies(
        fake_openai, monkeypatch, tmp_path, capsys, strategy):
    fake_openai(strict_server())
    code, output = run_task(monkeypatch, tmp_path, capsys, strategy, "8192")
    assert code == 0 and "DONE" in output, output[-2_000:]
    assert "the server refused the request as too long" in output  # the first request was refused...
    assert "[cut] your message" in output.split("the server refused the request as too long", 1)[1]  # ...then cut
    assert json.dumps(TASK)[1:-1] in archived(tmp_path)


def test_the_hardest_level_never_cuts_the_users_own_words():
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "a long request " * 200},
               {"role": "assistant", "content": "a long answer " * 200}]
    out = compact.cut_everything(history)
    assert out[1] is history[1] and "cut to fit the window" in out[2]["content"]
