"""A forker's copy: Part I of compact.py and tiny_agent.py without its ladder lines is a whole
compacting agent. Part I never refers to Part II, and the copy runs the offline demo."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PART_II = "# Part II · The ladder"


def part_one() -> str:
    source = (ROOT / "compact.py").read_text(encoding="utf-8")
    assert PART_II in source
    return source[:source.index(PART_II)].rstrip("# =\n") + "\n"


def test_part_one_never_refers_to_a_name_defined_in_part_two():
    source = (ROOT / "compact.py").read_text(encoding="utf-8")
    whole, first = ast.parse(source), ast.parse(part_one())
    defined_first = {n.name for n in first.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
        t.id for n in first.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined_later = {n.name for n in whole.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
        t.id for n in whole.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    used = {n.id for n in ast.walk(first) if isinstance(n, ast.Name)}
    assert not (used & (defined_later - defined_first)), sorted(used & (defined_later - defined_first))


def test_part_one_reads_top_to_bottom_without_forward_references():
    """Every module-level name a function of Part I uses is defined above that function."""
    tree = ast.parse(part_one())
    seen: set[str] = set(dir(__builtins__)) | {"annotations"}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            seen |= {(a.asname or a.name).split(".")[0] for a in node.names}
            continue
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        local = {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}
        local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        module_level = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
            t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        forward = (names - local - seen) & module_level
        name = getattr(node, "name", None) or ast.unparse(node)[:40]
        assert not forward, f"{name} uses {sorted(forward)} before they are defined"
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            seen.add(node.name)
        seen |= {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}


def test_the_forkers_copy_runs_the_demo(tmp_path):
    (tmp_path / "compact.py").write_text(part_one(), encoding="utf-8")
    agent = [line for line in (ROOT / "tiny_agent.py").read_text(encoding="utf-8").split("\n")
             if not line.rstrip().endswith("# ladder")]
    (tmp_path / "tiny_agent.py").write_text("\n".join(agent), encoding="utf-8")
    shutil.copytree(ROOT / "lessons", tmp_path / "lessons")  # files for the demo to survey
    env = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "tiny_agent.py", "--max-iterations", "40"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2_000:]
    assert "[compact]" in done.stdout and "(sawtooth)" in done.stdout
    helped = subprocess.run([sys.executable, "tiny_agent.py", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert "{sawtooth,none}" in helped.stdout


def test_the_readme_says_where_part_one_ends():
    import re
    stated = re.search(r"banner `Part II · The ladder`, line (\d+)", (ROOT / "README.md").read_text(encoding="utf-8"))
    lines = (ROOT / "compact.py").read_text(encoding="utf-8").split("\n")
    actual = next(n for n, line in enumerate(lines, 1) if line.startswith(PART_II))
    assert stated and int(stated[1]) == actual, f"README says line {stated and stated[1]}, compact.py has {actual}"
