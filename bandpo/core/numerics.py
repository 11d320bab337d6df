"""The numerics of every job: which CPU kernels torch and its math libraries run, fixed before torch computes.

The same seed gives the same bits only if every floating-point kernel is the same code. On CPU three libraries
choose their kernels from the machine's instruction set at run time, so by default an AVX-512 machine and an AVX2
machine (or two CPU vendors) sum in different orders and differ in the last bits, and a training run amplifies
those into different numbers:

- MKL (torch's BLAS on x86-64: every matmul and linear layer, forward and backward, and its vector maths such as
  ``exp``) follows ``MKL_CBWR``, its Conditional Numerical Reproducibility mode. ``AVX2`` runs the AVX2 code path
  on every CPU that has AVX2, with or without AVX-512; ``,STRICT`` also makes its matrix products independent of
  the thread count. MKL honours a branch other than ``AUTO`` or ``COMPATIBLE`` only where it identifies the CPU
  as Intel's: elsewhere (AMD, Hygon, ...) it silently runs ``AUTO``, its own choice for that CPU (MKL's developer
  guide, "Specifying code branches"). So on a CPU of another vendor every process under the fixed numerics also
  preloads a one-line library, `SHIM_SOURCE`, that answers MKL's internal "is this an Intel CPU?" query with yes
  (``LD_PRELOAD``; `mkl_preload`): MKL then runs the same AVX2 branch as on an Intel CPU. Measured on 2026-12-04:
  an AMD EPYC (Zen, AVX-512) built the default tiny-s base model with another sha256 than the Intel Xeon that
  published it; with the library preloaded it built the published bytes. `record` reports the branch MKL runs
  (``mkl_branch``), so a process where the branch was not honoured says so. ``COMPATIBLE`` (SSE2, honoured on
  every vendor) would need no library, but cost 1.48x on the tiny-s training steps on that machine
  (benchmarks/bench_numerics.py), and changes every published bit.
- ATen's own vectorised kernels (softmax, log-softmax, cross-entropy, SDPA on CPU, norms, reductions) are compiled
  once per instruction set and chosen at the first dispatch from ``ATEN_CPU_CAPABILITY``; ``avx2`` caps them there.
- oneDNN (torch's mkldnn backend) caps its JIT kernels at ``ONEDNN_MAX_CPU_ISA`` (``DNNL_MAX_CPU_ISA`` in older
  releases).

`FIXED` is that set of variables: every process of the suite runs with them unless the user opts out with
``BANDPO_NUMERICS=native`` (the machine's fastest kernels, results then depend on the CPU). `apply` puts them into
``os.environ``; ``bandpo/__init__.py`` calls it, so every entry point (``python -m bandpo.<stage>``, the lm-eval
model class, the verl plugin) has them before any of its modules imports torch, and the workflow's jobs also get
them in their environment from the start (`env`, used by `bandpo.plan.runs.Plan.env`), which covers processes
that are not ours (verl's trainer and its Ray workers). The preloaded library must be there when the process
starts: `env` includes it, and `apply` restarts a ``python -m bandpo.<stage>`` process once with it (before
anything else runs); another process that imports the package without it (e.g. a test runner) keeps MKL's own
branch, and `record` says so and warns once on stderr. Thread counts are fixed by each job's ``--threads`` (the
config's ``threads``); ATen's own reductions still split by thread count, so a run is reproducible at its
configured thread count.
`record` says what a process ran with; `bandpo.core.provenance.machine` stores it next to every output, and
``results/provenance.json`` collects it per stage and per base model.

The guarantee needs AVX2 (x86-64-v3: Intel Haswell, AMD Zen and later) and, on a CPU that is not Intel's, a C
compiler (``$CC``, else ``cc``, ``gcc`` or ``clang``) to build the preloaded library once (cached in
``$BANDPO_CACHE_DIR``, default ``~/.cache/bandpo``); on an older CPU the libraries fall back to other kernels and
`record` shows a capability other than ``AVX2``. tests/unit/test_numerics.py checks each guarded operation and a
short build and training run under the settings as the machine is and with MKL capped to AVX2 (as on an AVX2-only
machine), and that MKL runs the AVX2 branch; benchmarks/bench_numerics.py measures the cost, fixed against
native, side by side.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

MODE_ENV = "BANDPO_NUMERICS"
MODES = ("fixed", "native")
FIXED: dict[str, str] = {
    "MKL_CBWR": "AVX2,STRICT",  # MKL: the AVX2 code path on any AVX2 CPU; matrix products thread-count independent
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's vectorised kernels: the AVX2 build
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's JIT kernels at most AVX2
    "DNNL_MAX_CPU_ISA": "AVX2",  # the same for oneDNN releases that read the old name
}
FIXED_CAPABILITY = "AVX2"  # what torch.backends.cpu.get_cpu_capability() reports under FIXED on an AVX2 machine
FIXED_MKL_BRANCH = "AVX2"  # the branch MKL runs under FIXED (`record`'s ``mkl_branch``)
# Preloaded on a CPU of another vendor than Intel (`mkl_preload`): MKL asks this internal function whether the CPU
# is Intel's before it honours MKL_CBWR's branch; the first definition the dynamic linker finds is this one.
SHIM_SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
# MKL's CNR branch constants (mkl_cbwr_get(MKL_CBWR_BRANCH)), as `record` names them
MKL_BRANCHES = {0: "OFF", 1: "BRANCH_OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1",
                8: "SSE4_2", 9: "AVX", 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}  # fmt: skip
_REEXEC_ENV = "BANDPO_NUMERICS_REEXEC"  # set in a process `apply` restarted, so that it restarts at most once

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


@functools.cache
def cpu_vendor() -> str | None:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...) from /proc/cpuinfo, read once per process
    (`env` runs for every job the workflow plans); None where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "vendor_id":
                    return value.strip()
    except OSError:
        pass
    return None


def _needs_shim() -> bool:
    """MKL honours MKL_CBWR's AVX2 branch by itself only on an Intel CPU; an x86-64 CPU of another vendor needs
    `SHIM_SOURCE` preloaded (`mkl_preload`). Not needed off x86-64 (no MKL) or where the vendor is unknown."""
    vendor = cpu_vendor()
    return vendor is not None and vendor != "GenuineIntel"


def _cache_dir() -> Path:
    return Path(os.environ.get("BANDPO_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "bandpo")  # fmt: skip


def library_path(stem: str, source: str, flags: tuple[str, ...] = ()) -> Path:
    """Where `build_library` keeps ``source`` built with ``flags``: named by their hash, so a change rebuilds."""
    digest = hashlib.sha256("\0".join([source, *flags]).encode()).hexdigest()[:12]
    return _cache_dir() / f"{stem}-{digest}.so"


def build_library(stem: str, source: str, flags: tuple[str, ...], purpose: str, instead: str) -> Path:
    """Build the C ``source`` into a shared library (`library_path`) with the C compiler (``$CC``, else cc, gcc or
    clang) and ``flags``, once: written to a temporary name and renamed, so concurrent jobs never load a half-written
    file. A missing compiler or a failed build is a RuntimeError naming ``purpose`` and ``instead`` (what to do
    without a compiler)."""
    path = library_path(stem, source, flags)
    if path.is_file():
        return path
    compiler = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if not compiler:
        raise RuntimeError(
            f"{purpose} needs a C compiler (none found): install one (e.g. `apt-get install gcc`) or {instead}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.with_name(f".{path.stem}.{os.getpid()}.c")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        src.write_text(source)
        try:
            proc = subprocess.run([*shlex.split(compiler), "-shared", "-fPIC", *flags, "-o", str(tmp), str(src)],
                                  capture_output=True, text=True, env={**os.environ, "LD_PRELOAD": ""})  # fmt: skip
            error = proc.stderr.strip()[-2000:] if proc.returncode != 0 else None
        except OSError as err:
            error = str(err)
        if error is not None:
            raise RuntimeError(f"building {path.name} with {compiler} failed ({purpose}): {error}")
        os.replace(tmp, path)
    finally:
        src.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return path


_SHIM = ("libbandpo-mkl-intel-cpu", SHIM_SOURCE, ("-O2",))


def shim_path() -> Path:
    """Where the preloaded library lives once built (`library_path`)."""
    return library_path(*_SHIM)


def build_shim() -> Path:
    """Build `SHIM_SOURCE` into `shim_path`, once (`build_library`)."""
    return build_library(*_SHIM, purpose=f"BANDPO_NUMERICS=fixed on this {cpu_vendor()} CPU (bandpo.core.numerics: "
                         "a one-line library that lets MKL run the same AVX2 code as on Intel CPUs)",
                         instead="set BANDPO_NUMERICS=native (results then depend on the CPU)")  # fmt: skip


def mkl_preload(numerics: str | None = None) -> dict[str, str]:
    """``{"LD_PRELOAD": ...}`` with the built `SHIM_SOURCE` first (then whatever ``LD_PRELOAD`` held) under
    ``fixed`` on an x86-64 CPU that is not Intel's; ``{}`` otherwise."""
    if (numerics or mode()) != "fixed" or not _needs_shim():
        return {}
    shim = str(build_shim())
    rest = [p for p in os.environ.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p and p != shim]
    return {"LD_PRELOAD": ":".join([shim, *rest])}


def env(numerics: str | None = None) -> dict[str, str]:
    """The variables a job's environment gets: `FIXED` plus the mode itself under ``fixed`` (and `mkl_preload` on
    a CPU that is not Intel's); only the mode under ``native`` (its library variables are left as the user set
    them)."""
    numerics = numerics or mode()
    if numerics not in MODES:
        raise ValueError(f"numerics {numerics!r}: expected one of {', '.join(MODES)}")
    if numerics != "fixed":
        return {MODE_ENV: numerics}
    return {MODE_ENV: numerics, **FIXED, **mkl_preload(numerics)}


def _shim_loaded() -> bool:
    """Whether the preloaded library is mapped into this process (/proc/self/maps)."""
    try:
        return shim_path().name in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def module_of(argv: list[str]) -> str | None:
    """The module a Python command line runs with ``-m`` (``python -X dev -u -m bandpo.train ...`` ->
    ``bandpo.train``), None for a script, ``-c`` or a bare interpreter. Interpreter options may come first; ``-X``
    and ``-W`` take a value, which may also be attached (``-Xdev``, ``-mbandpo.train``)."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("-m"):
            return arg[2:]
        if arg in ("-X", "-W"):
            i += 2
        elif arg.startswith("-") and arg not in ("-", "--") and not arg.startswith("-c"):
            i += 1  # a flag (-u, -O, -B, -I, -E, -s, -Xdev, ...), possibly several in one (-uB)
        else:
            return None
    return None


def _restart_with_shim() -> None:
    """Restart this process once with the library preloaded, if it is ``python [options] -m bandpo.<stage>`` and
    has not imported torch yet (nothing has run: the package is being imported by its entry point). Other
    processes carry on; `record` then reports MKL's branch and warns. A build failure is reported on stderr, not
    raised: importing the package must not fail."""
    argv = getattr(sys, "orig_argv", [])
    module = module_of(argv)
    if os.environ.get(_REEXEC_ENV) or "torch" in sys.modules or not module or not module.startswith("bandpo"):
        return
    try:
        preload = mkl_preload("fixed")
    except RuntimeError as err:
        print(f"warning: {err}; this process runs MKL's own branch for this CPU", file=sys.stderr)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, {**os.environ, **preload, _REEXEC_ENV: "1"})


def apply() -> dict[str, object]:
    """Fix the numerics of this process (idempotent): under ``fixed`` set every `FIXED` variable in ``os.environ``,
    overriding other values (they are read when torch first computes), and on a CPU that is not Intel's restart a
    ``python -m bandpo.<stage>`` process once with `mkl_preload` where it lacks it. Remembers whether torch had
    been imported before (then a library may already have read its variable; `record` says so). Returns
    `record`."""
    if not _state:
        numerics = mode()
        _state["mode"] = numerics
        _state["torch_imported_before"] = "torch" in sys.modules
        if numerics == "fixed":
            os.environ.update(FIXED)
            if _needs_shim() and not _shim_loaded():
                _restart_with_shim()
    return record()


def mkl_branch() -> str | None:
    """The CNR branch MKL runs in this process (``AVX2`` under the fixed numerics; ``AUTO`` where MKL did not
    honour the requested one), read from torch's MKL; None before torch is imported or where torch has no MKL."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get  # mkl_cbwr_get's implementation, exported by torch's static MKL
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    value = get(1)  # MKL_CBWR_BRANCH
    return MKL_BRANCHES.get(value, str(value))


def record() -> dict[str, object]:
    """What this process runs with: the mode, each `FIXED` variable's value in its environment (None where unset),
    whether torch was imported before `apply` ran, and, once torch is imported, the kernel family ATen dispatches to
    (``AVX2`` under ``fixed`` on an AVX2 machine) and the branch MKL runs (``mkl_branch``: ``AVX2`` under
    ``fixed``)."""
    out: dict[str, object] = {
        "mode": _state.get("mode", mode()),
        "env": {k: os.environ.get(k) for k in FIXED},
        "torch_imported_before": _state.get("torch_imported_before"),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        branch = mkl_branch()
        if branch is not None:
            out["mkl_branch"] = branch
            if out["mode"] == "fixed" and branch != FIXED_MKL_BRANCH:
                _warn_mkl_branch(branch)
    return out


@functools.cache  # once per process: `record` runs for every output a process writes
def _warn_mkl_branch(branch: str) -> None:
    print(f"warning: MKL runs its {branch} branch in this process, not {FIXED_MKL_BRANCH} as the fixed numerics ask "
          "(a CPU that is not Intel's, and a process started without the preloaded library): its numbers are this "
          "CPU's own. Start it as `python -m bandpo.<stage>`, or with the environment of "
          "bandpo.core.numerics.env().", file=sys.stderr)  # fmt: skip
