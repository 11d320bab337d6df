"""verl run folder -> the run-output contract (model/ as a Hugging Face checkpoint, metrics.jsonl, run.json).

    python merge_verl.py --run-dir results/gpu/runs/M/E/seed0 --base-model resources/models/M [--meta JSON]

1. the last saved step N (``checkpoints/latest_checkpointed_iteration.txt``) is merged from verl's FSDP shards with
   ``python -m verl.model_merger merge --backend fsdp --local_dir checkpoints/global_step_N/actor --target_dir ...``
   into a temporary folder, completed with tokenizer files (from the checkpoint's ``huggingface/`` folder, else
   from the base model) and published as ``model/`` (`bandpo.files.replace_dir`);
2. verl's file-logger JSONL (``{"step": s, "data": {...}}`` per line) becomes ``metrics.jsonl``
   (``{"step": s, ...metrics}`` per line);
3. ``run.json`` records the step, the merge command and versions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bandpo.files import atomic_write_text, read_jsonl, replace_dir
from bandpo.provenance import machine, versions

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


def flatten_metrics(src: Path) -> str:
    lines = [json.dumps({"step": rec.get("step"), **rec.get("data", {})}, sort_keys=False) for rec in read_jsonl(src)]
    return "\n".join(lines) + ("\n" if lines else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--base-model", required=True)
    ap.add_argument("--meta", default="{}")
    ap.add_argument("--backend", default="fsdp", choices=["fsdp", "megatron"])
    args = ap.parse_args(argv)
    run = Path(args.run_dir)
    ckpts = run / "checkpoints"
    step = int((ckpts / "latest_checkpointed_iteration.txt").read_text().strip())
    actor = ckpts / f"global_step_{step}" / "actor"
    if not actor.is_dir():
        raise FileNotFoundError(f"no actor checkpoint at {actor}")
    final = run / "model"
    parent = Path(tempfile.mkdtemp(prefix=".model.tmp-", dir=run))
    target = parent / "out"
    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", args.backend,
           "--local_dir", str(actor), "--target_dir", str(target)]  # fmt: skip
    t0 = time.time()
    try:
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        if not (target / "config.json").is_file():
            raise RuntimeError(f"verl.model_merger wrote no config.json into {target}")
        for name in TOKENIZER_FILES:
            if (target / name).exists():
                continue
            for src_dir in (actor / "huggingface", Path(args.base_model)):
                if (src_dir / name).is_file():
                    shutil.copy2(src_dir / name, target / name)
                    break
        replace_dir(target, final)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    atomic_write_text(run / "metrics.jsonl", flatten_metrics(run / "verl_metrics.jsonl"))
    info = {
        "trainer": "verl",
        "step": step,
        "checkpoint": str(actor),
        "merge_command": cmd,
        "merge_seconds": round(time.time() - t0, 2),
        "meta": json.loads(args.meta),
        "versions": versions("verl", "torch", "transformers"),
        "machine": machine(),
    }
    atomic_write_text(run / "run.json", json.dumps(info, indent=2) + "\n")
    print(f"merged step {step} -> {final}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
