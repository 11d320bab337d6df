"""Side-by-side timing for the benchmark scripts: every candidate timed in the same round-robin, so that a change
of machine load hits all of them alike."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping


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
