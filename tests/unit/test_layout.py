"""The package's size limits (#57), read from its source with ``ast``: no module over `MAX_MODULE_LINES` lines, no
function over `MAX_FUNCTION_LINES`, and no import inside a function except those of `LAZY_IMPORTS`, each of which
says why on its line or the line above its group of imports."""

from __future__ import annotations

import ast
from pathlib import Path

import bandpo

PACKAGE = Path(bandpo.__file__).resolve().parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80  # from the ``def`` line to the last line of the body (decorators not counted)

# (file under bandpo/, imported module) -> why it is imported inside a function rather than at the top
LAZY_IMPORTS = {
    ("data/real.py", "datasets"): "datasets' import (about a second) stays out of the run plan (it reads the registry)",
    ("data/tiny_math.py", "datasets"): "datasets' import stays out of every training job (the probe's rows)",
    ("grader/judge.py", "math_verify.parser"): "math-verify loads in the process that judges (issue #59's judge)",
    ("grader/judge.py", "math_verify"): "math-verify loads in the process that judges, a worker or in-process",
    ("grader/judge.py", "sympy"): "sympy loads with math-verify, in the process that judges",
    ("grader/judge.py", "sympy.core.cache"): "sympy loads with math-verify, in the process that judges",
    ("grader/judge.py", "sympy.core.random"): "sympy loads with math-verify, in the process that judges",
    ("grader/pool.py", "resource"): "Unix only, inside a try: elsewhere a worker runs without the guard",
    ("grader/pool.py", "pebble"): "the pool is loaded by a process that starts grader workers only",
    ("grader/api.py", "verl.utils.reward_score"): "verl's own MATH rule (math-boxed): verl loads only for that mode",
    ("grader/extract.py", "verl.utils.reward_score"): "as grader/api.py",
    ("plan/config_files.py", "snakemake.cli"): "snakemake's command-line parser, where a profile checks --configfile",
    ("plan/validate.py", "bandpo"): "the method registry imports torch: not paid by every Snakemake start",
    ("plan/validate.py", "bandpo.stats.design"): "the design imports scipy.stats: not paid by every Snakemake start",
    ("report/figures.py", "matplotlib.pyplot"): "pyplot fixes the process's backend: imported after it is set to Agg",
    ("report/figures.py", "seaborn"): "seaborn imports pyplot: after the backend is set",
    ("score/evaluate.py", "lm_eval"): "the job's recorded start-up (seconds.process_startup) counts lm-eval's import",
    ("score/evaluate.py", "lm_eval.loggers"): "as lm_eval",
    ("score/evaluate.py", "lm_eval.tasks"): "as lm_eval",
    ("score/evaluate.py", "lm_eval.tasks._yaml_loader"): "as lm_eval",
    ("score/evaluate.py", "torch"): "as lm_eval",
    ("score/evaluate.py", "bandpo.score.tiny_lm"): "registers the bandpo-tiny model with lm-eval, for that backend",
    ("score/evaluate.py", "lm_eval.models.huggingface"): "the hf backend only (transformers)",
    ("score/evaluate.py", "bandpo.runtime.fastlm"): "the hf backend only (torch)",
    ("train/probe.py", "bandpo.models.tiny"): "transformers, scipy and pandas stay out of every training job",
    ("train/runfiles.py", "transformers"): "transformers' model classes (about 4 CPU-seconds), for a non-tiny model",
    ("train/trackers.py", "torch.utils.tensorboard"): "optional dependency: the tensorboard package",
    ("train/trackers.py", "mlflow.entities"): "optional dependency: the mlflow package",
    ("train/trackers.py", "mlflow.tracking"): "optional dependency: the mlflow package",
    ("verl/cpu.py", "verl.trainer.ppo.v1.replay_buffer"): "verl's platform is resolved on this import: after ours",
    ("verl/cpu.py", "verl.experimental.agent_loop.single_turn_agent_loop"): "imports verl's trainer: as the buffer",
    ("verl/losses.py", "verl.workers.config"): "verl's import (~6 CPU-seconds) paid by verl jobs only",
    ("verl/losses.py", "verl.trainer.ppo.core_algos"): "verl's import paid by verl jobs only",
}


def _sources() -> dict[str, str]:
    return {p.relative_to(PACKAGE).as_posix(): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def function_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function (``from .x import y`` as ``.x``; one entry per name of
    ``import a, b``)."""
    out = []
    for f in _functions(tree):
        for node in ast.walk(f):
            if isinstance(node, ast.Import):
                out += [(node.lineno, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                out.append((node.lineno, "." * node.level + (node.module or "")))
    return sorted(set(out))  # an import in a nested function is inside both


def has_reason(lines: list[str], lineno: int) -> bool:
    """Whether the import at ``lineno`` (1-based) has a comment on its line, or on the first line above its group of
    consecutive imports (a comment line, or a ``try:`` with a comment; no blank line between)."""
    if "#" in lines[lineno - 1]:
        return True
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith(("import ", "from ")):
        i -= 1
    return i >= 0 and "#" in lines[i]


def test_no_module_over_the_limit():
    long = {name: len(src.splitlines()) for name, src in _sources().items()}
    assert {n: k for n, k in long.items() if k > MAX_MODULE_LINES} == {}


def test_no_function_over_the_limit():
    long = [(name, f.name, f.end_lineno - f.lineno + 1) for name, src in _sources().items()
            for f in _functions(ast.parse(src)) if f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES]  # fmt: skip
    assert long == []


def test_imports_inside_functions_are_the_listed_lazy_ones_and_say_why():
    found: dict[tuple[str, str], list[int]] = {}
    unexplained = []
    for name, src in _sources().items():
        lines = src.splitlines()
        for lineno, module in function_imports(ast.parse(src)):
            found.setdefault((name, module), []).append(lineno)
            if not has_reason(lines, lineno):
                unexplained.append(f"{name}:{lineno} {module}")
    assert sorted(set(found) - set(LAZY_IMPORTS)) == [], "imports inside functions: move them to the top"
    assert sorted(set(LAZY_IMPORTS) - set(found)) == [], "LAZY_IMPORTS lists imports that are gone"
    assert unexplained == [], "lazy imports without a comment saying why"


def test_the_walk_finds_an_import_inside_a_function_and_its_comment():
    src = "import os\n\n\ndef f():\n    # why\n    import a\n    from b import c\n\n    def g():\n        import d\n"
    assert function_imports(ast.parse(src)) == [(6, "a"), (7, "b"), (10, "d")]
    lines = src.splitlines()
    assert has_reason(lines, 6) and has_reason(lines, 7) and not has_reason(lines, 10)
