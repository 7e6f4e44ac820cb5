"""Stands in for bpe-openai being absent. The tests that start the agent as a program put this folder
first on its PYTHONPATH (conftest's `offline`), so the agent runs as `pip install -e .` installs it:
without the `tokens` extra, counting with heuristic_tokens. That is the README's first command, and
it spares every agent process the half second that loading the tokenizer's library costs."""

raise ImportError("the default install has no tokens extra")
