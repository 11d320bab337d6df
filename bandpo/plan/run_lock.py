"""After a crash, the plain command again: clear the lock files a killed Snakemake run left behind.

Snakemake marks the files a run will write with lock files under ``.snakemake/locks/``. They name files, not the
process that wrote them, so a run killed by SIGKILL (or a power cut) leaves them behind, and the next run stops with
``LockException`` ("rerun with --unlock") although nothing else runs. The Snakefile calls `clear_stale_locks` first,
in the main Snakemake process only: it takes an exclusive ``flock`` on ``.snakemake/bandpo-run.flock`` and keeps it
for the life of the process. The kernel drops that lock when the process ends, however it ends. So holding it
proves that no other Snakemake run of this workflow is alive in this directory, and any lock files found are stale:
they are removed, as ``snakemake --unlock`` would. When another live run holds it, nothing is touched, and
Snakemake's own check stops the second run as before.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

_HELD: list[IO] = []  # the open lock file of this process: closing it (or exiting) releases the lock


def clear_stale_locks(snakemake_dir: str | os.PathLike = ".snakemake") -> list[Path]:
    """Take this process's run lock (once) and, when it is free, delete stale Snakemake lock files. Returns the
    deleted files (empty when another live run holds the lock, or when there were none)."""
    if _HELD:
        return []
    folder = Path(snakemake_dir)
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / "bandpo-run.flock", "a")  # noqa: SIM115 - held open for the life of the process
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return []  # another run of this workflow is alive here: its locks are real
    _HELD.append(handle)
    stale = sorted((folder / "locks").glob("*.lock"))
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
