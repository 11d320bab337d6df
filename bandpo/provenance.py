"""What a result was computed with: package versions and the machine, recorded next to every output.

`versions` names the software (Python and installed distributions); `machine` names the hardware and, in a process
that has imported torch, the settings that decide its floating-point results on CPU: the SIMD kernel family torch
dispatches to (``torch.backends.cpu.get_cpu_capability()``: the same seed can give different bits under AVX2 and
AVX512) and its intra- and inter-op thread counts (a reduction split over more threads sums in another order).
`weights_sha256` names the weights themselves: the checksum of each weights file of a model folder (the base models
record theirs in info.json, the published provenance recomputes them). None of these imports torch: a process that
never computed with it (the report) does not pay for it.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

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
    """Platform, CPU model and core count; when torch is loaded in this process, also its CPU capability, thread
    counts and the CUDA device it has initialised (if any)."""
    out: dict[str, object] = {"platform": platform.platform(), "cpu_model": _cpu_model(), "cpu_count": os.cpu_count()}
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
