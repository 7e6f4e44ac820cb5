"""Live tests against a real OpenAI-compatible server (see serve_llama.sh).

Skipped unless LIVE_BASE_URL is set, e.g.

    bash tests/live/serve_llama.sh --background
    LIVE_BASE_URL=http://127.0.0.1:8765/v1 python -m pytest tests/live

tests/conftest.py still applies here: it blocks sockets to anything but loopback (a server on
127.0.0.1 is fine) and clears OPENAI_*/MODEL variables before each test, so tests take the URL
from the fixtures below rather than from the environment.
"""

from __future__ import annotations

import os

import pytest

LIVE_BASE_URL = os.environ.get("LIVE_BASE_URL", "").rstrip("/")
LIVE_MODEL = os.environ.get("LIVE_MODEL", "smollm2")


def pytest_collection_modifyitems(config, items):
    if LIVE_BASE_URL:
        return
    skip = pytest.mark.skip(reason="live tests: set LIVE_BASE_URL (e.g. http://127.0.0.1:8765/v1)")
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture
def live_base_url() -> str:
    return LIVE_BASE_URL


@pytest.fixture
def live_model() -> str:
    return LIVE_MODEL


@pytest.fixture
def live_client(live_base_url):
    """An openai client for the live server; no retries, so a server error shows at once."""
    from openai import OpenAI
    return OpenAI(base_url=live_base_url, api_key="sk-live-test", max_retries=0, timeout=120)
