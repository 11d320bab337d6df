"""What a result was computed with: package versions and the machine, recorded next to every output.

`versions` names the software (Python and installed distributions); `machine` names the hardware and, in a process
that has imported torch, the settings that decide its floating-point results on CPU: the SIMD kernel family torch
dispatches to (``torch.backends.cpu.get_cpu_capability()``: the same seed can give different bits under AVX2 and
AVX512) and its intra- and inter-op thread counts (a reduction split over more threads sums in another order),
and always the numerics settings the process ran with (`bandpo.core.numerics.record`: fixed or native, and the
math-library variables).
`weights_sha256` names the weights themselves: the checksum of each weights file of a model folder (the base models
record theirs in info.json, the published provenance recomputes them). `code_changes` names the code: whether the
checkout's code and config differ from its git commit, and how (the DAG's own outputs do not count). None of these
imports torch: a process that never computed with it (the report) does not pay for it.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from bandpo.core.numerics import record

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth")  # the files that hold a model's parameters


def versions(*packages: str) -> dict[str, str | None]:
    """``{"python": ..., package: version}`` for each named distribution (None where it is not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _cpu_model() -> str:
    """The CPU's model name (Linux: ``/proc/cpuinfo``; elsewhere what `platform` knows, possibly empty)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "Hardware"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, object]:
    """Platform, CPU model, core count and the numerics settings (`bandpo.core.numerics.record`, without the
    capability repeated); when torch is loaded in this process, also its CPU capability, thread counts and the
    CUDA device it has initialised (if any)."""
    numerics = record()
    numerics.pop("torch_cpu_capability", None)
    out: dict[str, object] = {"platform": platform.platform(), "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(),
                              "numerics": numerics}  # fmt: skip
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        out["torch_threads"] = torch.get_num_threads()
        out["torch_interop_threads"] = torch.get_num_interop_threads()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["cuda_device"] = torch.cuda.get_device_name()
    return out


def weights_sha256(folder: str | os.PathLike) -> dict[str, str]:
    """``{relative path: sha256 hex}`` of every weights file (`WEIGHT_PATTERNS`) under ``folder``, sorted by path
    (empty when there is none)."""
    folder = Path(folder)
    files = sorted({p for pattern in WEIGHT_PATTERNS for p in folder.rglob(pattern) if p.is_file()})
    out = {}
    for path in files:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        out[path.relative_to(folder).as_posix()] = h.hexdigest()
    return out


# Folders the DAG writes into (its outputs, not its code): the published and per-profile results, the built data
# and models, logs and rule benchmarks, Snakemake's state. `code_changes` ignores what differs under them.
OUTPUT_DIRS = ("results", "resources", "logs", ".snakemake")


def _git(repo: Path, *args: str) -> bytes | None:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout


def _sha12(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def code_changes(repo: str | os.PathLike, output_dirs: tuple[str, ...] = OUTPUT_DIRS) -> dict[str, object]:
    """How the code and config of the git checkout holding ``repo`` differ from its commit (HEAD): every tracked
    file that differs (staged or not) and every untracked file git does not ignore, outside the output folders
    ``output_dirs`` (top-level folders the DAG writes: a run's own outputs are not a change of what ran).

    Returns ``{"code_dirty": bool, "code_changes": [{"path", "status", "sha256"}, ...]}``: ``status`` one of
    modified, added, deleted, renamed, copied, unmerged, untracked; ``sha256`` the first 12 hex digits of the
    SHA-256 of the file's ``git diff --binary HEAD`` (of its content for an untracked file), so two runs with the
    same change show the same hash. Both values are None when ``repo`` is not in a git checkout or git is missing."""
    top = _git(Path(repo), "rev-parse", "--show-toplevel")
    status = _git(Path(repo), "status", "--porcelain=v1", "-z", "--untracked-files=all") if top else None
    if top is None or status is None:
        return {"code_dirty": None, "code_changes": None}
    root = Path(top.decode().strip())
    entries = status.decode("utf-8", "surrogateescape").split("\0")
    changes = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        xy, path = entry[:2], entry[3:]
        if "R" in xy or "C" in xy:
            i += 1  # -z: the source path of a rename or copy follows as its own field
        if path.split("/", 1)[0] in output_dirs:
            continue
        if xy == "??":
            kind = "untracked"
        elif xy[1] == "D" or xy == "D ":
            kind = "deleted"  # the working tree, which is what ran, lacks the file
        elif "U" in xy or xy in ("AA", "DD"):
            kind = "unmerged"
        else:
            kind = {"A": "added", "R": "renamed", "C": "copied"}.get(xy[0], "modified")
        if xy == "??":
            file = root / path
            digest = _sha12(file.read_bytes()) if file.is_file() else ""
        else:
            diff = _git(root, "diff", "--binary", "HEAD", "--", path)
            digest = _sha12(diff) if diff is not None else ""
        changes.append({"path": path, "status": kind, "sha256": digest})
    changes.sort(key=lambda c: c["path"])
    return {"code_dirty": bool(changes), "code_changes": changes}
