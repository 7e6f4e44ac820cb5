"""The two forker's copies the README describes ("Fork it"), built exactly as it says, checked with
pyflakes (no undefined name), for dead functions, and run against a scripted OpenAI-compatible
server: the tutorial's (compact.py Part I + tiny_agent.py Layer 1) and the real-server one
(Parts I-II + Layers 1-2). compact.py reads top to bottom: no name is used above its definition."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import chat_response

ROOT = Path(__file__).resolve().parent.parent
BANNERS = {"compact.py": ("# Part II ·", "# Part III ·"), "tiny_agent.py": ("# Layer 2 ·", "# Layer 3 ·")}
ENTRY = {1: 'if __name__ == "__main__":\n    sys.exit(one_task())\n', 2: 'if __name__ == "__main__":\n    sys.exit(main())\n'}


def upto(name: str, layer: int) -> str:
    """The README's words: every line above the ruler (`# ===…`, `# ═══…`) that opens part (or layer) `layer + 1`."""
    lines = (ROOT / name).read_text(encoding="utf-8").split("\n")
    end = next(i for i, line in enumerate(lines) if line.startswith(BANNERS[name][layer - 1])) - 1
    assert lines[end].startswith(("# =", "# ═")), f"{name}: the {BANNERS[name][layer - 1]!r} banner opens with a ruler"
    return "".join(line + "\n" for line in lines[:end])


def fork(tmp_path: Path, layer: int) -> Path:
    """The README's procedure: cut both files above the banner, and end tiny_agent.py with its entry."""
    folder = tmp_path / f"fork{layer}"
    folder.mkdir()
    (folder / "compact.py").write_text(upto("compact.py", layer), encoding="utf-8")
    (folder / "tiny_agent.py").write_text(upto("tiny_agent.py", layer) + ENTRY[layer], encoding="utf-8")
    return folder


def dead_functions(source: str, users: str) -> set[str]:
    """Top-level functions and classes of `source` that nothing in `users` refers to (the entry
    points aside)."""
    defined = {n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    tree = ast.parse(users)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    return defined - used - {"one_task", "main"}


@pytest.mark.parametrize("layer", [1, 2])
def test_each_forkers_copy_passes_pyflakes_and_has_no_dead_function(tmp_path, layer):
    folder = fork(tmp_path, layer)
    done = subprocess.run([sys.executable, "-m", "pyflakes", "compact.py", "tiny_agent.py"], cwd=folder,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    compact, agent = ((folder / n).read_text(encoding="utf-8") for n in ("compact.py", "tiny_agent.py"))
    assert not dead_functions(agent, agent), dead_functions(agent, agent)
    assert not dead_functions(compact, compact + agent), dead_functions(compact, compact + agent)


def scripted():
    """A model that reads a note per turn for 20 turns, then answers; a summary request (no tools)
    gets a summary."""
    turns = []

    def reply(body: dict) -> tuple[int, dict]:
        if "tools" not in body:
            return 200, chat_response("SUMMARY: the agent read the notes one by one.")
        turns.append(body)
        if len(turns) > 20:
            return 200, chat_response("All notes are read.")
        return 200, chat_response(None, [(f"call_{len(turns)}", "read_file", {"path": f"notes/{len(turns) % 17}.txt"})])
    return reply


@pytest.mark.parametrize("layer", [1, 2])
def test_each_forkers_copy_runs_a_task_against_a_server_and_compacts(tmp_path, fake_openai, monkeypatch, layer):
    folder = fork(tmp_path, layer)
    server = fake_openai(scripted())
    (folder / "notes").mkdir()
    for i in range(17):
        (folder / "notes" / f"{i}.txt").write_text(f"note {i}: " + "words " * 40, encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8", "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path),
           "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test", "MODEL": "test-model"}
    done = subprocess.run([sys.executable, "tiny_agent.py", "Read every note."], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2_000:] + done.stderr[-2_000:]
    assert "Traceback" not in done.stderr and "All notes are read." in done.stdout
    summaries = [b for b in server.requests if "tools" not in b]
    assert summaries, "the copy never compacted"
    assert summaries[0]["temperature"] == 0.1 and len(summaries[0]["messages"]) == 2  # the tutorial's summarize
    if layer == 2:
        assert "[compact]" in done.stdout and "[shell]" in done.stdout


def test_the_readme_states_the_size_of_each_copy_and_where_each_part_starts():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for layer in (1, 2):
        lines = sum(upto(name, layer).count("\n") for name in BANNERS) + ENTRY[layer].count("\n")
        stated = re.search(rf"copy {layer}[^\n]*\| ([\d,]+) lines \|", readme)
        assert stated and int(stated[1].replace(",", "")) == lines, f"README: copy {layer} is {lines} lines"
    for name, (second, third) in BANNERS.items():
        text = (ROOT / name).read_text(encoding="utf-8").split("\n")
        for banner in (second, third):
            line = next(n for n, t in enumerate(text, 1) if t.startswith(banner))
            assert f"`{banner[2:].split(' ·')[0]}` at line {line} of {name}" in readme or \
                f"{banner[2:].split(' ·')[0]} (line {line})" in readme, f"README: where {banner} starts in {name} ({line})"


def test_compact_messages_and_all_it_reaches_fit_in_the_first_150_lines():
    """Issue 19: the tutorial's compactor is read beside its ~100 lines of TypeScript."""
    tree = ast.parse((ROOT / "compact.py").read_text(encoding="utf-8"))
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign):
            defs.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
    seen, todo = set(), ["compact_messages"]
    while todo:
        name = todo.pop()
        if name not in seen and name in defs:
            seen.add(name)
            todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs]
    nodes = {id(defs[n]): defs[n] for n in seen}.values()
    assert sum(n.end_lineno - n.lineno + 1 for n in nodes) <= 150 and max(n.end_lineno for n in nodes) <= 200


def test_the_loop_stands_first_in_tiny_agent_and_names_no_strategy():
    source = (ROOT / "tiny_agent.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    loop = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name in ("run", "run_calls", "compact_now", "ask", "send")}
    assert len(loop) == 5 and max(n.end_lineno for n in loop.values()) <= 200
    for node in loop.values():
        text = ast.get_source_segment(source, node)
        assert not re.search(r"strategy|Compactor|ladder|sawtooth", text.split('"""', 2)[-1]), node.name


@pytest.mark.parametrize("name", ["compact.py", "tiny_agent.py"])
def test_each_part_reads_top_to_bottom_without_forward_references(name):
    """Every module-level name a statement uses at import time, or a function of Part I / Layer 1
    uses, is defined above it. (Functions further down may call what follows them: the loop comes
    first on purpose.)"""
    source = upto(name, 1) if name == "compact.py" else (ROOT / name).read_text(encoding="utf-8")
    tree = ast.parse(source)
    module_level = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    seen: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            if name == "compact.py":
                used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                assert not (used & module_level) - seen - {node.name}, f"{node.name} uses names defined below it"
            for d in getattr(node, "decorator_list", []):
                assert not {n.id for n in ast.walk(d) if isinstance(n, ast.Name)} & (module_level - seen)
            seen.add(node.name)
        elif not isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)):
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            assert not (used & module_level) - seen, f"line {node.lineno} uses names defined below it"
            seen |= {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}
            seen |= {node.target.id} if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) else set()
