"""Live tests against real OpenAI-compatible servers. Each test skips unless its server's URL is set:

    LIVE_BASE_URL    llama-cpp-python + SmolLM2, chatml-function-calling  (serve_llama.sh, port 8765)
    LIVE_SERVER_URL  llama.cpp's llama-server + SmolLM2, its own template  (serve_llama_server.sh, 8766)
    LIVE_NOJINJA_URL the same llama-server started with --no-jinja       (JINJA=0 PORT=8767 ...)
    LIVE_GEMMA_URL   llama-server + Gemma 3 270M, Gemma 3's template      (MODEL=gemma PORT=8768 ...)

e.g.
    bash tests/live/serve_llama.sh --background
    LIVE_BASE_URL=http://127.0.0.1:8765/v1 python -m pytest tests/live

tests/conftest.py still applies here: it blocks sockets to anything but loopback (a server on
127.0.0.1 is fine) and clears OPENAI_*/MODEL variables before each test, so tests take the URL
from the fixtures below rather than from the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

LIVE_BASE_URL = os.environ.get("LIVE_BASE_URL", "").rstrip("/")
LIVE_MODEL = os.environ.get("LIVE_MODEL", "smollm2")


@dataclass(frozen=True)
class Server:
    name: str         # the id pytest shows: llama-cpp-python, llama-server, ...
    url: str          # the base URL, ending in /v1
    model: str
    calls_tools: bool  # the server renders the tool schemas, so the model can call tools


# name -> (environment variable, model, calls_tools, how to start it): what RESPONSES.md measured about each
SERVERS = {
    "llama-cpp-python": ("LIVE_BASE_URL", LIVE_MODEL, True, "bash tests/live/serve_llama.sh --background", 8765),
    # SmolLM2's template renders no tools
    "llama-server": ("LIVE_SERVER_URL", "smollm2", False, "PORT=8766 bash tests/live/serve_llama_server.sh --background", 8766),
    "llama-server-nojinja": ("LIVE_NOJINJA_URL", "smollm2", False,
                             "JINJA=0 PORT=8767 bash tests/live/serve_llama_server.sh --background", 8767),
    "llama-server-gemma": ("LIVE_GEMMA_URL", "gemma", False,
                           "MODEL=gemma PORT=8768 bash tests/live/serve_llama_server.sh --background", 8768),
}


def live_server(name: str) -> Server:
    """The server called `name`, or skip the test, saying how to start that server, when its URL is not set."""
    variable, model, calls_tools, start, port = SERVERS[name]
    url = os.environ.get(variable, "").rstrip("/")
    if not url:
        pytest.skip(f"no {name} is running: start it ({start}), then set {variable}=http://127.0.0.1:{port}/v1")
    return Server(name, url, model, calls_tools)


@pytest.fixture(params=["llama-cpp-python", "llama-server"])
def smollm2_server(request) -> Server:
    """SmolLM2 on each server that serves it with jinja: llama-cpp-python, then llama-server."""
    return live_server(request.param)


@pytest.fixture
def live_base_url() -> str:
    return live_server("llama-cpp-python").url


@pytest.fixture
def live_model() -> str:
    return LIVE_MODEL


@pytest.fixture
def live_client(smollm2_server):
    """An openai client for each live server; no retries, so a server error shows at once."""
    from openai import OpenAI
    return OpenAI(base_url=smollm2_server.url, api_key="sk-live-test", max_retries=0, timeout=120)
