"""An older commit's tree for the side-by-side benchmarks (``--base-commit``): a detached ``git worktree`` of the
repository in a temporary folder, made for one benchmark run and removed after it, also when the run fails or is
stopped (Ctrl-C, SIGTERM). Used by bench_run_vs_base.py, bench_recipe_check.py and bench_job_startup.py; each
tree's commands then run with ``PYTHONPATH`` set to that tree (`tree_env`), so an editable install elsewhere does
not interfere.

The package moved its entry points (``bandpo.evaluate`` became ``bandpo.score``, the lm-eval task folder
``bandpo/lm_eval_tasks`` moved into it): `entry_module` and `tasks_dir` give an older tree's own names. Its trainer
reads a run's spec file since the run plan (``python -m bandpo.train --spec FILE``); an older tree's took the run as
flags and ``--set KEY=VALUE``: `train_command` gives a run (this tree's `TrainConfig`) in the form each tree takes,
`legacy_train_command` the older one."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bandpo.train.settings import RUN_FIELDS, TrainConfig

ROOT = Path(__file__).resolve().parents[1]
# an entry point of this tree -> its name in older commits (before the stage subpackages)
OLD_ENTRY = {"bandpo.score": "bandpo.evaluate", "bandpo.data": "bandpo.tasks"}
TASKS = ("bandpo/score/lm_eval_tasks", "bandpo/lm_eval_tasks")  # lm-eval's task YAMLs, newest layout first


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def resolve(commit: str) -> str:
    """The full hash of ``commit`` (any name git knows); SystemExit with git's message if there is none."""
    proc = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if proc.returncode != 0:
        raise SystemExit(f"--base-commit {commit!r}: not a commit of {ROOT}")
    return proc.stdout.strip()


def _raise_on_sigterm(signum, _frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def base_worktree(commit: str) -> Iterator[Path]:
    """``git worktree add --detach TMP/tree COMMIT`` for the ``with`` block, then ``git worktree remove --force``
    (and the temporary folder); SIGTERM is turned into an exit inside the block, so it cleans up too."""
    sha = resolve(commit)
    tmp = Path(tempfile.mkdtemp(prefix=f"bandpo-base-{sha[:7]}-"))
    tree = tmp / "tree"
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        proc = _git("worktree", "add", "--detach", str(tree), sha)
        if proc.returncode != 0:
            raise SystemExit(f"git worktree add {tree} {sha[:7]} failed: {proc.stderr.strip()}")
        yield tree
    finally:
        if tree.exists():
            _git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(tmp, ignore_errors=True)
        _git("worktree", "prune")
        signal.signal(signal.SIGTERM, previous)


def tree_env(tree: Path, env: dict[str, str]) -> dict[str, str]:
    """``os.environ`` with ``env`` (a job's environment, `bandpo.plan.runs.Plan.env`) and the tree's own code."""
    return {**os.environ, **env, "PYTHONPATH": str(tree)}


def entry_module(tree: Path, module: str) -> str:
    """``module`` (``python -m`` name in this tree) as ``tree`` names it."""
    old = OLD_ENTRY.get(module)
    path = tree / Path(*module.split("."))
    if old is None or path.is_dir() or path.with_suffix(".py").is_file():
        return module
    return old


def tasks_dir(tree: Path) -> Path:
    """The lm-eval task folder of ``tree``."""
    for rel in TASKS:
        if (tree / rel).is_dir():
            return tree / rel
    raise SystemExit(f"{tree}: no lm-eval task folder ({', '.join(TASKS)})")


def train_command(run: TrainConfig, tree: Path, spec_path: str | os.PathLike,
                  python: str = sys.executable) -> list[str]:  # fmt: skip
    """The run ``run`` as ``tree``'s trainer takes it: a tree with the run plan (``bandpo/plan/runs.py``: this one)
    reads its spec file, written to ``spec_path`` (``python -m bandpo.train --spec FILE``, as the workflow's rule
    ``train`` runs it); an older tree gets the same settings as flags (`legacy_train_command`)."""
    if not (Path(tree) / "bandpo" / "plan" / "runs.py").is_file():
        return legacy_train_command(run, tree, python)
    path = Path(spec_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(run), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return [python, "-m", "bandpo.train", "--spec", str(path)]


def legacy_train_command(run: TrainConfig, tree: Path | None, python: str = sys.executable) -> list[str]:
    """The run ``run`` (this tree's settings) as an older tree's trainer takes it, the command the run plan built
    before specs: ``python -m bandpo.train --model M --data D --method X --params JSON --seed S --set KEY=VALUE ...
    --out OUT --threads N --no-progress``, a ``--set`` for every `TrainConfig` field but the run's own
    (`bandpo.train.settings.RUN_FIELDS`; text as it is, anything else as JSON: ``lr_end=null``), so that both trees
    run the same settings; without the ``--set`` of fields ``tree``'s trainer does not define (`unknown_sets`;
    ``tree`` None: every one)."""
    values = dataclasses.asdict(run)
    cmd = [python, "-m", "bandpo.train", "--model", run.model, "--data", run.data, "--method", run.method,
           "--params", json.dumps(run.params, sort_keys=True), "--seed", str(run.seed)]  # fmt: skip
    for key in sorted(set(values) - set(RUN_FIELDS)):
        value = values[key]
        cmd += ["--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    cmd += ["--out", run.out, "--threads", str(run.threads)] + ([] if run.progress else ["--no-progress"])
    return cmd if tree is None else known_sets_only(cmd, tree)


def known_sets_only(cmd: list[str], tree: Path) -> list[str]:
    """``cmd`` without the ``--set KEY=VALUE`` pairs of `unknown_sets`."""
    drop = set(unknown_sets(cmd, tree))
    return [a for i, a in enumerate(cmd) if i not in drop and i - 1 not in drop]


def unknown_sets(cmd: list[str], tree: Path) -> list[int]:
    """The positions in ``cmd`` of each ``--set`` whose field ``tree``'s trainer does not define (no
    ``    FIELD: type`` line in its ``bandpo/train*`` sources, where every tree keeps ``TrainConfig``, nor in
    ``bandpo/core/protocol.py``, the shared fields it extends since the run plan)."""
    sources = _trainer_sources(tree)
    return [i for i, a in enumerate(cmd[:-1]) if a == "--set" and not re.search(
        rf"^    {re.escape(cmd[i + 1].split('=', 1)[0])}: ", sources, re.M)]  # fmt: skip


@functools.cache  # read once per tree, not once per job
def _trainer_sources(tree: Path) -> str:
    package = tree / "bandpo"
    files = [*package.glob("train*/**/*.py"), *package.glob("train*.py"), *package.glob("core/protocol.py")]
    return "\n".join(f.read_text() for f in files)
