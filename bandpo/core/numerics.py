"""The numerics of every job: which CPU kernels torch and its math libraries run, fixed before torch computes.

The same seed gives the same bits only if every floating-point kernel is the same code. On CPU three libraries
choose their kernels from the machine's instruction set at run time, so by default an AVX-512 machine and an AVX2
machine (or two CPU vendors) sum in different orders and differ in the last bits, and a training run amplifies
those into different numbers:

- MKL (torch's BLAS on x86-64: every matmul and linear layer, forward and backward, and its vector maths such as
  ``exp``) follows ``MKL_CBWR``, its Conditional Numerical Reproducibility mode. ``AVX2`` runs the AVX2 code path
  on every CPU that has AVX2 (Intel or AMD, with or without AVX-512); ``,STRICT`` also makes its matrix products
  independent of the thread count.
- ATen's own vectorised kernels (softmax, log-softmax, cross-entropy, SDPA on CPU, norms, reductions) are compiled
  once per instruction set and chosen at the first dispatch from ``ATEN_CPU_CAPABILITY``; ``avx2`` caps them there.
- oneDNN (torch's mkldnn backend) caps its JIT kernels at ``ONEDNN_MAX_CPU_ISA`` (``DNNL_MAX_CPU_ISA`` in older
  releases).

`FIXED` is that set of variables: every process of the suite runs with them unless the user opts out with
``BANDPO_NUMERICS=native`` (the machine's fastest kernels, results then depend on the CPU). `apply` puts them into
``os.environ``; ``bandpo/__init__.py`` calls it, so every entry point (``python -m bandpo.<stage>``, the lm-eval
model class, the verl plugin) has them before any of its modules imports torch, and the workflow's jobs also get
them in their environment from the start (`env`, used by `bandpo.config.jobs.Jobs.env`), which covers processes
that are not ours (verl's trainer and its Ray workers). Thread counts are fixed by each job's ``--threads`` (the
config's ``threads``); ATen's own reductions still split by thread count, so a run is reproducible at its
configured thread count. `record` says what a process ran with; `bandpo.core.provenance.machine` stores it next
to every output, and ``results/provenance.json`` collects it per stage and per base model.

The guarantee needs AVX2 (x86-64-v3: Intel Haswell, AMD Zen and later); on an older CPU the libraries fall back
to other kernels and `record` shows a capability other than ``AVX2``. tests/unit/test_numerics.py checks
each guarded operation and a short build and training run under the settings as the machine is and with MKL
capped to AVX2 (as on an AVX2-only machine); benchmarks/bench_numerics.py measures the cost, fixed against
native, side by side.
"""

from __future__ import annotations

import os
import sys

MODE_ENV = "BANDPO_NUMERICS"
MODES = ("fixed", "native")
FIXED: dict[str, str] = {
    "MKL_CBWR": "AVX2,STRICT",  # MKL: the AVX2 code path on any AVX2 CPU; matrix products thread-count independent
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's vectorised kernels: the AVX2 build
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's JIT kernels at most AVX2
    "DNNL_MAX_CPU_ISA": "AVX2",  # the same for oneDNN releases that read the old name
}
FIXED_CAPABILITY = "AVX2"  # what torch.backends.cpu.get_cpu_capability() reports under FIXED on an AVX2 machine

_state: dict[str, object] = {}


def mode() -> str:
    """``fixed`` (default) or ``native``, from ``$BANDPO_NUMERICS``; anything else is an error naming both."""
    value = os.environ.get(MODE_ENV, "fixed").strip().lower() or "fixed"
    if value not in MODES:
        raise ValueError(
            f"{MODE_ENV}={os.environ[MODE_ENV]!r}: expected one of {', '.join(MODES)} "
            "(fixed: the same bits on any x86-64 CPU with AVX2; native: the machine's fastest kernels)"
        )
    return value


def env(numerics: str | None = None) -> dict[str, str]:
    """The variables a job's environment gets: `FIXED` plus the mode itself under ``fixed``; only the mode under
    ``native`` (its library variables are left as the user set them)."""
    numerics = numerics or mode()
    if numerics not in MODES:
        raise ValueError(f"numerics {numerics!r}: expected one of {', '.join(MODES)}")
    return {MODE_ENV: numerics, **(FIXED if numerics == "fixed" else {})}


def apply() -> dict[str, object]:
    """Fix the numerics of this process (idempotent): under ``fixed`` set every `FIXED` variable in ``os.environ``,
    overriding other values (they are read when torch first computes). Remembers whether torch had been imported
    before (then a library may already have read its variable; `record` says so). Returns `record`."""
    if not _state:
        numerics = mode()
        _state["mode"] = numerics
        _state["torch_imported_before"] = "torch" in sys.modules
        if numerics == "fixed":
            os.environ.update(FIXED)
    return record()


def record() -> dict[str, object]:
    """What this process runs with: the mode, each `FIXED` variable's value in its environment (None where unset),
    whether torch was imported before `apply` ran, and, once torch is imported, the kernel family ATen dispatches to
    (``AVX2`` under ``fixed`` on an AVX2 machine)."""
    out: dict[str, object] = {
        "mode": _state.get("mode", mode()),
        "env": {k: os.environ.get(k) for k in FIXED},
        "torch_imported_before": _state.get("torch_imported_before"),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return out
