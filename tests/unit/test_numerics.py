"""The same seed, the same bits on any x86-64 CPU (`bandpo.core.numerics`).

Every guarded operation, in the shapes the tiny models use, and a short base-model build and training run give the
same bytes under the fixed numerics as this machine is and with MKL capped to AVX2 (what an AVX2-only CPU runs), and
MKL runs the AVX2 branch whatever the CPU's vendor (on a CPU that is not Intel's: only with the preloaded library,
and without it the ops differ, so the check sees the vendor's path). A change that brings back a kernel chosen by
the machine (an op outside MKL's reproducibility mode, an ATen kernel not pinned to AVX2, MKL's own branch on
another vendor's CPU) makes these fail on an AVX-512 machine such as CI's. Each case runs in a child process: the
settings are read when torch first computes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bandpo.core import numerics
from bandpo.plan.runs import Plan
from bandpo.plan.validate import load_yaml, validate_config

ROOT = Path(__file__).resolve().parents[2]
CAP = {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}  # MKL as on a CPU without AVX-512 (ATen and oneDNN are capped by FIXED)


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


FLAGS = _cpu_flags()
needs_avx2 = pytest.mark.skipif("avx2" not in FLAGS, reason="the fixed numerics need an x86-64 CPU with AVX2")

# Each guarded op in the models' shapes (tiny-s: hidden 64, MLP 172, 4 heads; tiny-m: hidden 128, MLP 344; a
# 99-token vocabulary; rollout batches of 128 rows, pretraining batches of 32 x 128 tokens), forward and backward,
# hashed; plus a whole tiny-s forward/backward through transformers and an AdamW step.
OPS = r"""
import hashlib, json, sys
import bandpo  # the numerics settings, before torch computes
import torch, torch.nn.functional as F
from bandpo.core import numerics
from bandpo.models.tiny import build_tokenizer, get_size, init_model
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
def r(*s): return torch.randn(*s, generator=g)
out = {}
def h(name, t): out[name] = hashlib.sha256(t.detach().contiguous().float().numpy().tobytes()).hexdigest()
V = 99
for hidden, mlp in ((64, 172), (128, 344)):
    for rows in (1, 8, 128 * 24, 32 * 128):
        x = r(rows, hidden).requires_grad_()
        for n_out in (hidden, 3 * hidden, mlp, V):
            w = r(n_out, hidden).requires_grad_()
            y = F.linear(x, w)
            y.square().sum().backward()
            h(f"linear{rows}x{hidden}x{n_out}", y); h(f"linear_dx{rows}x{hidden}x{n_out}", x.grad)
            h(f"linear_dw{rows}x{hidden}x{n_out}", w.grad); x.grad = None
        w2 = r(mlp, hidden)
        h(f"mlp_down{rows}x{mlp}", r(rows, mlp) @ w2)
    z = r(128 * 24, V)
    h(f"softmax{hidden}", z.softmax(-1)); h(f"log_softmax{hidden}", z.log_softmax(-1)); h(f"exp{hidden}", z.exp())
    h(f"logsumexp{hidden}", z.logsumexp(-1)); h(f"entropy{hidden}", -(z.softmax(-1) * z.log_softmax(-1)).sum(-1))
    h(f"ce{hidden}", F.cross_entropy(z, torch.randint(0, V, (128 * 24,), generator=g), label_smoothing=0.03))
    a = r(512, hidden)
    h(f"rms_norm{hidden}", a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6))
    h(f"layer_norm{hidden}", F.layer_norm(a, (hidden,))); h(f"silu{hidden}", F.silu(a)); h(f"gelu{hidden}", F.gelu(a))
    h(f"rowsum{hidden}", a.sum(-1))
    for heads in (4,):
        d = hidden // heads
        q, k, v = (r(32, heads, 60, d).requires_grad_() for _ in range(3))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.sum().backward()
        h(f"sdpa_causal{hidden}", o); h(f"sdpa_dq{hidden}", q.grad); h(f"sdpa_dk{hidden}", k.grad)
        mask = torch.ones(32, 1, 60, 60, dtype=torch.bool).tril()
        mask[:, :, :, :7] = False; mask[:, :, :, 0] = True
        h(f"sdpa_masked{hidden}", F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    emb = torch.nn.Embedding(V, hidden); emb.weight.data = r(V, hidden)
    emb(torch.randint(0, V, (128, 60), generator=g)).pow(2).sum().backward()
    h(f"embedding_backward{hidden}", emb.weight.grad)
    lin = torch.nn.Linear(hidden, mlp); lin.weight.data = r(mlp, hidden); lin.bias.data = r(mlp)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3, weight_decay=0.01)
    for _ in range(3):
        opt.zero_grad(); lin(r(64, hidden)).tanh().sum().backward(); opt.step()
    h(f"adamw{hidden}", lin.weight)
p = r(128, V).softmax(-1)
h("multinomial", torch.multinomial(p, 8, replacement=True, generator=torch.Generator().manual_seed(3)))
torch.manual_seed(0)
model = init_model(get_size("tiny-s"), build_tokenizer(), seed=0)
ids = torch.randint(0, V, (16, 48), generator=g)
logits = model(input_ids=ids).logits
logits.log_softmax(-1).mean().backward()
h("tiny_s_forward", logits)
h("tiny_s_backward", torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
print(json.dumps({"ops": out, "numerics": numerics.record()}))
"""


def _child_env(extra: dict[str, str] | None = None, mode: str = "fixed") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in numerics.FIXED and k not in CAP and k != "LD_PRELOAD"}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", **numerics.env(mode), **(extra or {})}


def _ops(env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", OPS], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


def test_mode_and_job_environment(monkeypatch):
    monkeypatch.setenv(numerics.MODE_ENV, "fixed")
    preload = numerics.mkl_preload()  # the library MKL needs on a CPU that is not Intel's, built once
    assert numerics.env() == {numerics.MODE_ENV: "fixed", **numerics.FIXED, **preload}
    if numerics.cpu_vendor() in ("GenuineIntel", None):
        assert preload == {}
    else:
        assert preload["LD_PRELOAD"].split(":")[0] == str(numerics.shim_path()) and numerics.shim_path().is_file()
    monkeypatch.setenv(numerics.MODE_ENV, "native")
    assert numerics.env() == {numerics.MODE_ENV: "native"}
    monkeypatch.setenv(numerics.MODE_ENV, "fast")
    with pytest.raises(ValueError, match="BANDPO_NUMERICS='fast': expected one of fixed, native"):
        numerics.mode()
    monkeypatch.delenv(numerics.MODE_ENV)
    jobs = Plan(validate_config(load_yaml(ROOT / "config" / "config.yaml"), root=ROOT), ROOT)
    env = jobs.env()
    assert all(env[k] == v for k, v in numerics.FIXED.items()), "every job starts under the fixed numerics"
    assert "MKL_CBWR=" in jobs.env_prefix()


def test_trl_benchmark_runs_both_trainers_under_the_jobs_numerics(monkeypatch):
    """benchmarks/bench_trainer_vs_trl.py starts the suite's side as a script, which does not restart itself with
    MKL's library: its children get the jobs' numerics environment (the library included on a CPU that is not
    Intel's), so that both trainers run MKL's AVX2 branch as a training job does, and the thread count."""
    import importlib.util

    monkeypatch.setenv(numerics.MODE_ENV, "fixed")
    monkeypatch.setenv("MKL_CBWR", "AUTO")  # a stray value in the caller's environment is overridden
    spec = importlib.util.spec_from_file_location(
        "bench_trainer_vs_trl", ROOT / "benchmarks" / "bench_trainer_vs_trl.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    env = bench.child_env(3)
    assert {k: env[k] for k in numerics.env()} == numerics.env()
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == ("3", "3")
    monkeypatch.setenv(numerics.MODE_ENV, "native")  # the user's opt-out reaches both children
    assert bench.child_env(1)[numerics.MODE_ENV] == "native"


@needs_avx2
def test_guarded_ops_same_bits_as_the_machine_is_and_capped():
    as_is, capped = _ops(_child_env()), _ops(_child_env(CAP))
    assert as_is["numerics"]["mode"] == "fixed" and as_is["numerics"]["torch_imported_before"] is False
    assert as_is["numerics"]["torch_cpu_capability"] == numerics.FIXED_CAPABILITY  # ATen's kernels pinned
    for run in (as_is, capped):  # MKL runs the branch asked for, whatever the CPU's vendor
        assert run["numerics"]["mkl_branch"] == numerics.FIXED_MKL_BRANCH
    differ = sorted(op for op in as_is["ops"] if as_is["ops"][op] != capped["ops"][op])
    assert not differ, f"machine-dependent kernels under the fixed numerics: {differ}"
    if numerics.mkl_preload():
        # another vendor's CPU: without the preloaded library MKL silently runs its own branch, other bits
        own = _ops({k: v for k, v in _child_env().items() if k != "LD_PRELOAD"})
        assert own["numerics"]["mkl_branch"] == "AUTO"
        assert own["stderr"].count("warning: MKL runs its AUTO branch in this process, not AVX2") == 1
        assert any(own["ops"][op] != as_is["ops"][op] for op in as_is["ops"])
    assert "warning: MKL" not in as_is["stderr"] + capped["stderr"]
    if "avx512f" in FLAGS:
        # the check can see a machine-dependent path: this machine's native kernels give other bits
        native = _ops(_child_env(mode="native"))
        assert native["numerics"]["torch_cpu_capability"] != numerics.FIXED_CAPABILITY
        assert any(native["ops"][op] != as_is["ops"][op] for op in as_is["ops"])


def _run(cmd: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", *cmd], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-3000:]}"


def _build_and_train(tmp: Path, data: Path, env: dict[str, str]) -> dict[str, object]:
    """A 30-step tiny-s build and a 2-step GRPO run from it; the bytes that must not depend on the CPU."""
    _run(["bandpo.models", "build", "--size", "tiny-s", "--data", str(data), "--out", str(tmp / "model"),
          "--steps", "30", "--eval-limit", "4", "--threads", "1", "--no-progress"], env)  # fmt: skip
    _run(["bandpo.train", "--model", str(tmp / "model"), "--data", str(data), "--method", "grpo", "--seed", "0",
          "--steps", "2", "--prompts-per-step", "4", "--out", str(tmp / "run"), "--threads", "1",
          "--no-progress"], env)  # fmt: skip
    from bandpo.train.settings import TIMING_KEYS

    metrics = [json.loads(line) for line in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    return {
        "base": (tmp / "model" / "model.safetensors").read_bytes(),
        "trained": (tmp / "run" / "model" / "model.safetensors").read_bytes(),
        "metrics": [{k: v for k, v in m.items() if k not in TIMING_KEYS} for m in metrics],
        "run_machine": json.loads((tmp / "run" / "run.json").read_text())["machine"],
        "build_machine": json.loads((tmp / "model" / "info.json").read_text())["machine"],
    }


@needs_avx2
def test_build_and_training_same_bytes_as_the_machine_is_and_capped(tmp_path):
    data = tmp_path / "data"
    _run(["bandpo.data", "tiny-math", "--out", str(data), "--seed", "0", "--n-train", "3000", "--n-val", "40",
          "--n-test", "8"], _child_env())  # fmt: skip
    as_is = _build_and_train(tmp_path / "as-is", data, _child_env())
    capped = _build_and_train(tmp_path / "capped", data, _child_env(CAP))
    for facts in (as_is["run_machine"], as_is["build_machine"]):  # provenance says what ran
        assert facts["numerics"]["mode"] == "fixed" and facts["numerics"]["env"] == numerics.FIXED
        assert facts["numerics"]["mkl_branch"] == numerics.FIXED_MKL_BRANCH
        assert facts["torch_cpu_capability"] == numerics.FIXED_CAPABILITY
    assert as_is["base"] == capped["base"], "the base model's bytes depend on the CPU's instruction set"
    assert as_is["metrics"] == capped["metrics"], "the per-step metrics depend on the CPU's instruction set"
    assert as_is["trained"] == capped["trained"], "the trained model's bytes depend on the CPU's instruction set"


def _published(folder: Path, metrics: list[dict], score: str = "0.5") -> Path:
    """A published folder as `python -m bandpo.report publish` writes it, from one run folder with ``metrics``."""
    from bandpo.report.publish import run_digests

    run = folder / "src" / "runs" / "tiny-s" / "grpo" / "seed0"
    (run / "model").mkdir(parents=True)
    (run / "model" / "model.safetensors").write_bytes(b"weights")
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    prov = {"base_models": [{"path": "resources/models/tiny-s", "weights_sha256": {"model.safetensors": "ab"}}],
            "runs": run_digests(folder / "src")}  # fmt: skip
    (folder / "provenance.json").write_text(json.dumps(prov))
    (folder / "steps.csv").write_text("experiment,model,entry,seed,step,entropy\nmain,tiny-s,grpo,0,1,0.41\n")
    (folder / "scores.csv").write_text(
        f"experiment,model,entry,seed,task,metric,value\nmain,tiny-s,grpo,0,t,m,{score}\n"
    )
    return folder


def test_exact_compare_names_the_first_difference(tmp_path, capsys):
    from bandpo.report.compare import compare_exact, exact_compare

    step = {"step": 1, "entropy": 0.41, "step_seconds": 1.0}
    a = _published(tmp_path / "a", [step])
    b = _published(tmp_path / "b", [{**step, "step_seconds": 9.0}])  # timing is not a result
    assert all(diff is None for _, diff in exact_compare(a, b))
    assert compare_exact(a, b) == 0 and "the rerun gave the same bits" in capsys.readouterr().out

    c = _published(tmp_path / "c", [{**step, "entropy": 0.4100001}], score="0.500001")
    diffs = dict(exact_compare(a, c))
    assert diffs["scores.csv"] == "row 1 (experiment=main, model=tiny-s, entry=grpo, seed=0, task=t, metric=m): " \
                                  "value differ (0.5 vs 0.500001)"  # fmt: skip
    assert diffs["runs (1: per-step metrics, trained weights)"].startswith("tiny-s/grpo/seed0: metrics_sha256 differ")
    assert diffs["steps.csv"] is None
    assert compare_exact(a, c) == 1
    (c / "steps.csv").unlink()
    assert compare_exact(a, c) == 2 and "steps.csv not found" in capsys.readouterr().err


def test_mkl_library_is_built_once_and_a_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    path_var = os.environ["PATH"]
    monkeypatch.setenv("BANDPO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no cc, gcc or clang
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(RuntimeError, match="needs a C compiler .* or set BANDPO_NUMERICS=native"):
        numerics.build_shim()
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(RuntimeError, match="no-such-cc"):
        numerics.build_shim()
    assert not list((tmp_path / "cache").glob("*")), "a failed build leaves nothing behind"
    monkeypatch.setenv("PATH", path_var)
    monkeypatch.delenv("CC")
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler on this machine")
    path = numerics.build_shim()
    assert path == numerics.shim_path() and path.parent == tmp_path / "cache" and path.is_file()
    mtime = path.stat().st_mtime_ns
    assert numerics.build_shim() == path and path.stat().st_mtime_ns == mtime  # built once
    monkeypatch.setattr(numerics, "cpu_vendor", lambda: "AuthenticAMD")
    preload = numerics.mkl_preload("fixed")["LD_PRELOAD"]
    assert preload.split(":")[0] == str(path) and numerics.mkl_preload("native") == {}
    monkeypatch.setattr(numerics, "cpu_vendor", lambda: "GenuineIntel")
    assert numerics.mkl_preload("fixed") == {}


def test_module_of_reads_the_module_past_interpreter_options():
    """The restart applies to ``python [options] -m bandpo.<stage>``: the module is found past interpreter flags and
    options with values, attached or not; a script, ``-c`` or a bare interpreter runs no module."""
    py = sys.executable
    assert numerics.module_of([py, "-m", "bandpo.train", "--seed", "0"]) == "bandpo.train"
    assert numerics.module_of([py, "-X", "dev", "-u", "-W", "error", "-m", "bandpo.models", "build"]) == "bandpo.models"
    assert numerics.module_of([py, "-Xdev", "-uB", "-mbandpo.eval"]) == "bandpo.eval"
    assert numerics.module_of([py, "-c", "import bandpo", "-m", "bandpo.train"]) is None
    assert numerics.module_of([py, "script.py", "-m", "bandpo.train"]) is None
    assert numerics.module_of([py]) is None and numerics.module_of([py, "-u", "-m"]) is None
