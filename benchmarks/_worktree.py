"""An older commit's tree for the side-by-side benchmarks (``--base-commit``): a detached ``git worktree`` of the
repository in a temporary folder, made for one benchmark run and removed after it, also when the run fails or is
stopped (Ctrl-C, SIGTERM). Used by bench_run_vs_base.py and bench_job_startup.py; each tree's commands then run
with ``PYTHONPATH`` set to that tree (`tree_env`), so an editable install elsewhere does not interfere.

The package moved its entry points (``bandpo.evaluate`` became ``bandpo.score``, the lm-eval task folder
``bandpo/lm_eval_tasks`` moved into it): `entry_module` and `tasks_dir` give an older tree's own names."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

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
    """``os.environ`` with ``env`` (a job's environment, `bandpo.config.jobs.Jobs.env`) and the tree's own code."""
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
