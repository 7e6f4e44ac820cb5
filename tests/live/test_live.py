"""The real agent against a real server: llama-cpp-python's OpenAI-compatible server serving
SmolLM2-135M with a 2,048-token window (tests/live/serve_llama.sh), and, where a test takes
`smollm2_server`, llama.cpp's own llama-server too (serve_llama_server.sh; see conftest.py). A 135M
model's answers are poor; these tests check the plumbing: no HTTP error left unrecovered, the loop
goes on, compactions fit the window.

The agent runs as a user runs it, `python tiny_agent.py "<task>"`, in a scratch workspace, never
with --yes; with bubblewrap installed its bash runs jailed there (the model's commands are random)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASK = "Read every file in this folder, one by one, with read_file, and tell me what each one says."


@pytest.fixture
def workspace(tmp_path) -> Path:
    """A small folder for the model to read: six short files."""
    for n in range(1, 7):
        (tmp_path / f"notes_{n}.txt").write_text(f"note {n}: the meeting moved to room {100 + n}.\n")
    return tmp_path


def agent(workspace: Path, base_url: str, model: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`python tiny_agent.py ...` with only the live server configured."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LIVE_"))}
    clean.update({"OPENAI_BASE_URL": base_url, "MODEL": model, "SUMMARY_MODEL": model, "CONTEXT_WINDOW": "2048",
                  "PYTHONIOENCODING": "utf-8", "XDG_STATE_HOME": str(workspace.parent / "records"),
                  "REQUEST_TIMEOUT": "600", **env})  # a loaded 2-core machine can take minutes for one reply
    return subprocess.run([sys.executable, str(ROOT / "tiny_agent.py"), "--workspace", str(workspace), *args],
                          cwd=workspace, env=clean, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)


LIMIT = "--max-iterations raises the limit"  # the line of a run that reached its model calls


def finished(done: subprocess.CompletedProcess) -> bool:
    """The run ended without an error: an answer (exit 0), or the iteration limit a tiny model
    reaches (exit 3, with the line that names --max-iterations)."""
    return done.returncode == 0 or (done.returncode == 3 and LIMIT in done.stdout + done.stderr)


def test_the_first_request_is_estimated_within_15_percent_of_the_servers_count(live_base_url, live_model,
                                                                                   monkeypatch):
    """llama-cpp-python only: it renders the schemas. llama-server with SmolLM2's template renders
    none (103 prompt tokens with or without them, RESPONSES.md), so there the count says nothing
    about the schema estimate."""
    import compact
    import tiny_agent
    from openai import OpenAI
    monkeypatch.setenv("CONTEXT_WINDOW", "2048")
    session = tiny_agent.new_session(tiny_agent.load_config())
    session.messages.append({"role": "user", "content": TASK})
    estimate = compact.request_tokens(session.messages, None, tiny_agent.schema_tokens())
    model = tiny_agent.openai_model(OpenAI(base_url=live_base_url, api_key="x", max_retries=0), live_model,
                                    read=tiny_agent.read_whole_reply)  # Layer 2's reader keeps the server's count
    counted = model(session.messages, tiny_agent.TOOL_SCHEMAS)["usage"]
    assert abs(estimate - counted) <= 0.15 * counted, (estimate, counted)


@pytest.mark.parametrize("strategy", ["sawtooth", "layered", "hybrid", "zones"])
def test_the_agent_runs_a_many_tool_task_through_compactions(workspace, live_base_url, live_model, strategy):
    done = agent(workspace, live_base_url, live_model, TASK, "--strategy", strategy, "--max-iterations", "16")
    output = done.stdout + done.stderr
    assert finished(done), output[-3_000:]
    assert "Traceback" not in output and "error:" not in done.stderr, output[-3_000:]
    assert "[compact]" in output, output[-3_000:]  # at least one compaction happened
    assert output.count("[tool]") >= 4  # the loop went on through many calls


def test_a_refusal_by_the_server_is_recovered_and_the_loop_goes_on(workspace, smollm2_server):
    """CONTEXT_WINDOW says 8,192 and the task comes with long notes, but the server holds 2,048: the
    agent's own trigger is far away, the server refuses the very first request, and reactive
    compaction recovers (archiving what it cuts) without ever re-sending the refused request."""
    notes = " ".join(f"Note {n}: the meeting in room {100 + n} moved to the afternoon." for n in range(160))
    done = agent(workspace, smollm2_server.url, smollm2_server.model, f"{TASK} My notes: {notes}",
                 "--max-iterations", "6", CONTEXT_WINDOW="8192", MAX_OUTPUT_TOKENS="256")
    output = done.stdout + done.stderr
    assert finished(done), output[-3_000:]
    assert "the server refused the request as too long" in output, output[-3_000:]
    after = output.split("the server refused the request as too long", 1)[1]
    assert "[compact]" in after, output[-3_000:]  # it compacted...
    if smollm2_server.calls_tools:
        assert "[tool]" in after, output[-3_000:]  # ...then went on (llama-server's model sees no tools)
    records = workspace.parent / "records" / "tiny-agent"  # the agent's records live outside the workspace
    archived = "".join(p.read_text(encoding="utf-8") for p in records.glob("*/archive/*.jsonl"))
    assert "Note 159: the meeting in room 259" in archived  # what was cut is archived whole


def test_the_summary_model_reads_a_large_middle_in_pieces_that_fit_its_window(smollm2_server, monkeypatch):
    import compact
    from openai import OpenAI
    sys.path.insert(0, str(ROOT / "lessons"))
    from conversations import generate_conversation
    messages = generate_conversation(turns=20, seed=1).messages[1:]
    monkeypatch.setenv("SUMMARY_CONTEXT_WINDOW", "2048")
    pieces = compact.transcript_chunks(messages, 1_000)
    assert len(pieces) > 1  # the middle is larger than one request
    client = OpenAI(base_url=smollm2_server.url, api_key="x", max_retries=0)
    summary = compact.summarize_with_model(messages, client=client, model=smollm2_server.model)  # raises on any HTTP error
    assert isinstance(summary, str)


def test_lesson_03_runs_with_the_real_model(smollm2_server):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LIVE_"))}
    env.update(OPENAI_BASE_URL=smollm2_server.url, MODEL=smollm2_server.model, SUMMARY_MODEL=smollm2_server.model,
               SUMMARY_CONTEXT_WINDOW="2048", CONTEXT_WINDOW="2048", PYTHONIOENCODING="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "lessons" / "04_summarizer.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3_000:]
    assert "summary model failed" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-3_000:]
