"""Side-by-side timing for the benchmark scripts: every candidate timed in the same round-robin, so that a change
of machine load hits all of them alike."""

from __future__ import annotations

import resource
import subprocess
import time
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path


def interleaved_times(
    fns: Mapping[Hashable, Callable[[], object]], repeats: int, sync: Callable[[], None] = lambda: None
) -> dict[Hashable, list[float]]:
    """Wall seconds of ``repeats`` calls of each function, after one warm-up call each, calls interleaved;
    ``sync`` waits for the device (CUDA kernels run asynchronously) before a clock is read."""
    for fn in fns.values():
        fn()
    sync()
    times: dict[Hashable, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
    return times


def timed_process(cmd: list[str], cwd: str | Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds of one process ``cmd`` and its CPU seconds (user + system, from getrusage of the children);
    SystemExit with the tail of its stderr when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"failed (rc {proc.returncode}) in {cwd}: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
