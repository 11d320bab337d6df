"""Suite-wide test settings.

In CI (``CI`` set, as `.ci/run` runs) a skipped test is a failure: CI installs every test dependency (verl, lm-eval,
rliable, Debian's chromium), so a skip there means a missing install, which must not pass silently. On a developer's
machine a test whose optional dependency is missing is skipped with its reason (``pytest -ra`` lists them).

Also here: `snakemake`, the project's Snakefile run in a working directory of its own, the session fixture
`smoke_run`, the smoke DAG run once per pytest session for every test that builds on it, and `busy_machine`, other
processes that keep every core busy.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEFILE = ROOT / "Snakefile"
SMOKE = ROOT / "config" / "smoke.yaml"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _in_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (every test dependency is installed there): {reason}"


def snakemake(workdir: Path, *args: str, configfile: Path | None = None, env=None, timeout: int = 600):
    """`python -m snakemake -s Snakefile -d workdir *args [--configfile configfile]`, its output captured. The process
    gets `output` (stdout + stderr), `seconds` (wall time, for hang guards only: never asserted) and `cpu_seconds`
    (the CPU time of snakemake and every job it ran, its waited-for descendants: what a comparison may assert)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "-d", str(workdir), *args]
    if configfile is not None:
        cmd += ["--configfile", str(configfile)]  # last: --configfile takes several values
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc.seconds = time.monotonic() - t0
    proc.cpu_seconds = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    proc.output = proc.stdout + proc.stderr
    return proc


KEEP_SMOKE_RUN = "BANDPO_SMOKE_RUN"  # a new, empty folder: pytest sessions of one checkout in a row share one smoke run


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """config/smoke.yaml through the whole DAG, once per pytest session: (workdir, process). The tests that build on
    it (the no-op rerun, added method entries, the crash and resume, the SLURM profile) share it; those that add jobs
    write into the workdir, so `process.reference` is a copy of results/smoke as the uninterrupted run left it, the
    reference of every comparison.

    With $BANDPO_SMOKE_RUN set (.ci/run: a new temporary folder, for the sessions it runs one after the other on one
    checkout), the first session keeps its run there and later sessions start from a copy of it (its workdir, with
    Snakemake's records and the files' times, and the process's return code, output and times) instead of running
    the same DAG on the same code again. Never point it at a folder kept from other code."""
    if importlib.util.find_spec("snakemake") is None:
        pytest.skip("snakemake is not installed")
    wd = tmp_path_factory.mktemp("smoke")
    keep = Path(os.environ[KEEP_SMOKE_RUN]) if os.environ.get(KEEP_SMOKE_RUN) else None
    if keep is not None and (keep / "process.json").is_file():
        shutil.copytree(keep / "workdir", wd, symlinks=True, dirs_exist_ok=True)
        proc = subprocess.CompletedProcess([], 0)
        for key, value in json.loads((keep / "process.json").read_text()).items():
            setattr(proc, key, value)
    else:
        proc = snakemake(wd, "--cores", "2", configfile=SMOKE, timeout=900)
        assert proc.returncode == 0, proc.output[-5000:]
        if keep is not None:
            shutil.copytree(wd, keep / "workdir", symlinks=True)
            fields = {k: getattr(proc, k) for k in ("args", "returncode", "output", "seconds", "cpu_seconds")}
            (keep / "process.json").write_text(json.dumps(fields))
    proc.reference = tmp_path_factory.mktemp("smoke-reference") / "smoke"
    shutil.copytree(wd / "results" / "smoke", proc.reference)
    return wd, proc


BUSY_PER_CORE = 3  # busy processes per core of this machine: a machine kept at three times its capacity


@contextlib.contextmanager
def busy_machine(per_core: int = BUSY_PER_CORE):
    """``per_core`` processes per usable core that spin on the CPU for the ``with`` block (killed after it, also on
    an error): the load another job puts on the machine."""
    n = per_core * len(os.sched_getaffinity(0))
    spin = "while True:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
