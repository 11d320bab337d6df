"""verl run folder -> the run-output contract (model/ as a Hugging Face checkpoint, metrics.jsonl, run.json).

    python -m bandpo.verl.merge --run-dir results/gpu/runs/M/E/seed0 --base-model resources/models/M [--meta JSON]

1. the last saved step N (``checkpoints/latest_checkpointed_iteration.txt``): its Hugging Face weights are verl's
   own export ``checkpoints/global_step_N/actor/huggingface/`` when the run saved one (`bandpo.verl.command` asks
   for it: ``save_contents`` includes ``hf_model``; it equals the FSDP shards exactly), else merged from the FSDP
   shards with ``python -m verl.model_merger merge --backend fsdp --local_dir ... --target_dir ...`` (which rounds
   every weight to bfloat16). Either goes to a temporary folder, is completed with tokenizer files (from the
   checkpoint's ``huggingface/`` folder, else from the base model), stored in the base model's dtype and published
   as ``model/`` in two renames;
2. verl's file-logger JSONL (``{"step": s, "data": {...}}`` per line) becomes ``metrics.jsonl`` in the run
   contract's names (`contract_metrics`: ``actor/entropy`` -> ``entropy``, ``actor/bandpo/clipfrac`` -> ``clipfrac``,
   ...; verl's other metrics keep their names). verl does not log the reward function's ``acc``: ``accuracy`` is
   derived from the mean score, which `verl_reward.py` makes +1 / -1 (so it does not hold for a reward manager
   that changes the score, such as DAPO's overlong penalty);
3. ``run.json`` holds the contract's fields (trainer, config = the VerlRun fields of the run's ``--spec``, method,
   method_label and method_params = every parameter, defaults included, steps, train_seconds_total, versions) plus
   the merge command and the reward's grader (`grader`: name, mode = the config's ``grader_mode``, version, id).

The result is checked with `bandpo.core.run_contract.check_run` before the step succeeds.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from bandpo import grader, methods
from bandpo.core.files import atomic_write_text, read_jsonl, replace_dir
from bandpo.core.provenance import machine, versions
from bandpo.core.run_contract import check_run
from bandpo.verl import command
from bandpo.verl.launch import metrics_logs
from bandpo.verl.spec import read_spec

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "generation_config.json",
)


# verl's metric names -> the run contract's (bandpo/schemas/run.schema.yaml)
VERL_NAMES = {
    "critic/score/mean": "reward_mean",  # the reward function's "score" (+1 / -1) per response
    "actor/entropy": "entropy",
    "response_length/mean": "response_length",
    "timing_s/step": "step_seconds",
}
VERL_CLIPFRAC = "actor/pg_clipfrac"  # verl's own losses: share of tokens whose gradient their clip removed
PLUGIN_PREFIX = "actor/bandpo/"  # bandpo.verl.plugin's statistics: the same names as the local trainer's


# verl's held-out measurement (test_freq): "val-core/<data source>/acc/mean@<k>", the mean over the validation
# problems and their k samples of the reward function's acc (0 / 1): the local trainer's val/mean (validation mean@k)
# when there is one data source. Beside it, and with several sources (config/gpu.yaml: AIME24, AIME25, AMC23), verl's
# own metrics keep their names: per source mean@k, best@k/mean and maj@k/mean (bootstrap estimates, verl's
# process_validation_metrics) under val-core/, the rest under val-aux/.
_VAL_MEAN = re.compile(r"val-core/[^/]+/acc/mean@\d+")
VAL_PREFIXES = ("val-core/", "val-aux/")


def contract_metrics(data: dict) -> dict:
    """One step of verl's metrics with the run contract's names (the others keep verl's names)."""
    out = {}
    val = [key for key in data if _VAL_MEAN.fullmatch(key)]
    if len(val) == 1:
        out["val/mean"] = data[val[0]]
    if "critic/score/mean" in data:
        # verl does not log the reward function's "acc"; verl_reward.py's score is 2 * acc - 1 (the paper's +1 / -1)
        out["accuracy"] = (data["critic/score/mean"] + 1.0) / 2.0
    for key, value in data.items():
        if key in VERL_NAMES:
            out[VERL_NAMES[key]] = value
        elif key.startswith(PLUGIN_PREFIX):
            out[key[len(PLUGIN_PREFIX) :]] = value
        else:
            out[key] = value
    if "clipfrac" not in out and VERL_CLIPFRAC in data:  # verl's own loss: verl's clip fraction (no direction)
        out["clipfrac"] = data[VERL_CLIPFRAC]
    return out


def read_verl_metrics(*logs: Path) -> list[dict]:
    """verl's file-logger JSONL logs (a run's parts, oldest first: `bandpo.verl.launch.metrics_logs`) -> one contract
    row per step. A step's records are merged, a later value winning
    (a step logged again after a resume); the held-out measurement before training (step 0, ``val_every``) goes
    into the first step's row as ``val/mean_before``, as the local trainer logs it, and each of verl's validation
    metrics of step 0 as ``<name>_before``."""
    rows: dict[int, dict] = {}
    for src in logs:
        for number, rec in enumerate(read_jsonl(src), start=1):
            if not isinstance(rec.get("step"), int) or rec["step"] < 0:
                raise ValueError(f"{src}: record {number}: not a verl file-logger record with an integer step >= 0")
            rows.setdefault(rec["step"], {}).update(contract_metrics(rec.get("data") or {}), step=rec["step"])
    before = rows.pop(0, {})
    if rows:
        kept = {key: v for key, v in before.items() if key == "val/mean" or key.startswith(VAL_PREFIXES)}
        rows[min(rows)].update({f"{key}_before": v for key, v in kept.items()})
    return [rows[s] for s in sorted(rows)]


def cast_to_base_dtype(model_dir: Path, base_model: Path) -> str:
    """Store the merged model in the base model's dtype; returns the dtype.

    verl's merger writes the FSDP shards' tensors (fp32 when the actor trained in fp32) under a config that says
    bfloat16: the model is read in the base dtype directly (never through the config's bfloat16, which would round
    the weights) and written back with a config that says so.
    """
    base = AutoConfig.from_pretrained(base_model)
    dtype = getattr(base, "dtype", None) or getattr(base, "torch_dtype", None) or torch.float32
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    model.config.dtype = dtype
    model.save_pretrained(model_dir)
    return str(dtype).removeprefix("torch.")


def reward_grader(config: dict) -> dict | None:
    """The grader of the run's reward (`bandpo.grader`, in the mode the run's VerlRun passed to verl's workers):
    name, mode, version and id, as the local trainer records it; None for a config without ``grader_mode``."""
    mode = config.get("grader_mode")
    if mode is None:
        return None
    return {"name": grader.GRADER_NAME, "mode": mode, "version": grader.GRADER_VERSION, "id": grader.grader_id(mode)}


def method_record(config: dict) -> dict:
    """``{"method", "method_label", "method_params"}`` of the run's method as the local trainer records them: the
    label is `MethodConfig.label` (what the leaderboard's params column shows), the parameters are all spelled out,
    defaults included (the run contract's method_params; evaluation reads the run's method from run.json).
    ``{"method_params": config["params"]}`` when the config names no method."""
    if not config.get("method"):
        return {"method_params": config.get("params", {})}
    methods.load_method_modules(config.get("method_modules") or [])
    params = methods.make_config(config["method"], config.get("params") or {})
    out = {"method": config["method"], "method_label": params.label(), "method_params": params.to_dict()}
    if methods.get_method(config["method"]).kind == "verl":  # verl's own loss_mode: no bandpo.verl.plugin statistics
        out["directional_clipfrac"] = False
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--base-model", required=True)
    ap.add_argument("--meta", default="{}")
    ap.add_argument("--spec", required=True, help="the run's spec file (bandpo.verl.spec.VerlRun; run.json's config)")
    ap.add_argument("--backend", default="fsdp", choices=["fsdp", "megatron"])
    args = ap.parse_args(argv)
    run = Path(args.run_dir)
    ckpts = run / "checkpoints"
    step = int((ckpts / command.CHECKPOINT_TRACKER).read_text().strip())
    actor = ckpts / f"global_step_{step}" / "actor"
    if not actor.is_dir():
        raise FileNotFoundError(f"no actor checkpoint at {actor}")
    final = run / "model"
    parent = Path(tempfile.mkdtemp(prefix=".model.tmp-", dir=run))
    target = parent / "out"
    hf_copy = actor / "huggingface"
    if any(hf_copy.glob("*.safetensors")):  # verl's own full-precision export (save_contents: hf_model)
        cmd = ["copy", str(hf_copy)]
    else:
        cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", args.backend,
               "--local_dir", str(actor), "--target_dir", str(target)]  # fmt: skip
    t0 = time.time()
    try:
        print(" ".join(cmd), flush=True)
        if cmd[0] == "copy":
            shutil.copytree(hf_copy, target)
        else:
            subprocess.run(cmd, check=True)
        if not (target / "config.json").is_file():
            raise RuntimeError(f"{' '.join(cmd[:3])} wrote no config.json into {target}")
        for name in TOKENIZER_FILES:
            if (target / name).exists():
                continue
            for src_dir in (actor / "huggingface", Path(args.base_model)):
                if (src_dir / name).is_file():
                    shutil.copy2(src_dir / name, target / name)
                    break
        dtype = cast_to_base_dtype(target, Path(args.base_model))
        replace_dir(target, final)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    rows = read_verl_metrics(*metrics_logs(run))
    atomic_write_text(run / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    config = json.loads(json.dumps(command.record(read_spec(args.spec)), default=str))
    info = {
        "trainer": "verl",
        "config": config,
        **method_record(config),
        "steps": step,
        "train_seconds_total": sum(r.get("step_seconds", 0.0) for r in rows if r["step"] <= step),
        "checkpoint": str(actor),
        "dtype": dtype,
        "merge_command": cmd,
        "merge_seconds": round(time.time() - t0, 2),
        "meta": json.loads(args.meta),
        "grader": reward_grader(config),
        "versions": versions("verl", "torch", "transformers"),
        "machine": machine(),
    }
    atomic_write_text(run / "run.json", json.dumps(info, indent=2) + "\n")
    check_run(run)
    print(f"merged step {step} -> {final}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
