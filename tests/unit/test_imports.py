"""The package's import structure: its stage packages stand on floors and every import runs down them, no import
cycle among bandpo's modules (every import counts: module level, inside functions, and ``import bandpo.x`` of a
package), and the lm-eval hooks stay free of the report."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import bandpo

PACKAGE = Path(bandpo.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The bandpo modules one file imports (``from bandpo.x import y`` counts bandpo.x.y when that is a module,
    else bandpo.x; a relative import is resolved against the file's package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:  # bandpo.analysis.load.x -> bandpo.analysis.load
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): imported_modules(f, modules) for f in files}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_the_imports():
    graph = import_graph()
    assert "bandpo.core.files" in graph["bandpo.core.run_contract"]
    assert "bandpo.score.lm_eval_results" in graph["bandpo.score.evaluate"]
    assert "bandpo.study" in graph["bandpo.analysis.load"]
    assert {"bandpo.report.build", "bandpo.report.cli"} <= graph["bandpo.report"] | graph["bandpo.report.__main__"]


def test_no_import_cycle_among_bandpo_modules():
    graph = import_graph()
    two_way = sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, ()))
    assert two_way == [], f"modules importing each other: {two_way}"
    assert cycles(graph) == [], f"import cycles: {cycles(graph)}"


# bandpo's packages from the ground floor up. A module may import its own package and the floors below it, never
# a floor above: the ground floor (core) holds what several stages share (file writes, settings by name, provenance,
# the run contract, the training protocol both trainers share); the statistics are every decision's (the plan checks
# a design with them, the looks, the analysis and rank decide with them); the study holds what the config declares
# that every stage, the analysis and the report read (run folders' names, seeds, margins in the code's unit); the
# runtime runs a model for every stage (sampler,
# lean forward pass, optimiser, schedule); the methods and the grader serve every stage that trains or scores; the
# run plan reads the config into every stage's jobs, so it stands above them; the analysis reads what they wrote, the
# decisions the DAG feeds back into its jobs (decide) are made from it, and the report renders it all.
FLOORS = ("core", "stats", "study", "runtime", "methods", "grader", "data", "models", "train", "verl", "score", "plan",
          "analysis", "decide", "report")  # fmt: skip


def floor(module: str) -> int | None:
    """The floor of a bandpo module (None: the package's top-level __init__ or a folder of data)."""
    parts = module.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 1 and parts[1] in FLOORS else None


def test_every_module_stands_on_a_floor():
    loose = [m for m in import_graph() if m != "bandpo" and floor(m) is None]
    assert loose == [], f"modules outside the stage packages {FLOORS}: {loose}"


def test_every_import_runs_down_the_floors():
    graph = import_graph()
    up = sorted((a, b) for a, targets in graph.items() for b in targets
                if floor(a) is not None and floor(b) is not None and floor(b) > floor(a))  # fmt: skip
    assert up == [], "imports from a lower floor up to a higher one: " + ", ".join(f"{a} -> {b}" for a, b in up)


def test_no_stage_analysis_or_report_imports_the_planner():
    """The planner (bandpo.plan) turns the config into jobs; what the stages, the analysis, the decisions and the
    report read of the config is the study's (bandpo.study, below them all), so none of them imports the planner
    (issue #70)."""
    graph = import_graph()
    readers = [m for m in graph if floor(m) is not None and FLOORS[floor(m)] not in ("plan",)]
    wrong = sorted((a, b) for a in readers for b in graph[a] if b == "bandpo.plan" or b.startswith("bandpo.plan."))
    assert wrong == [], f"modules importing the planner: {wrong}"


def test_an_import_up_is_found():
    assert floor("bandpo.core.files") < floor("bandpo.train.loop") < floor("bandpo.report.cli")
    assert floor("bandpo") is None


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_evaluation_does_not_import_the_report():
    """The lm-eval hooks (bandpo.score.evaluate, loaded by every task YAML) import neither the report nor
    pandas/Jinja2."""
    banned = "('pandas', 'jinja2', 'bandpo.report', 'bandpo.analysis')"
    code = f"import sys, bandpo.score.evaluate; print([m for m in {banned} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_analysis_decisions_and_report_import_no_trainer():
    """The analysis, the decisions and the report read files only: importing them (and their command lines) loads
    neither torch nor a method registry nor the trainer; what needs those runs as a stage of its own
    (bandpo.methods.bounds_table, bandpo.train.atlas)."""
    banned = "('torch', 'bandpo.methods', 'bandpo.train.loop')"
    code = (f"import sys, bandpo.analysis, bandpo.decide.cli, bandpo.report.cli; "
            f"print([m for m in {banned} if m in sys.modules])")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
