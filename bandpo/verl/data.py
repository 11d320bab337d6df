"""Our JSONL rows (bandpo.data.tiny_math schema) -> verl's parquet rows, written atomically.

verl's RL data set reads, per row: ``data_source``, ``prompt`` (chat messages; verl applies the model's chat
template: a row's worked exchanges ``shots`` as earlier turns, `bandpo.data.tiny_math.chat_messages`, as the local
trainer), ``ability``, ``reward_model`` (``ground_truth`` goes to the reward function) and ``extra_info``.

    python -m bandpo.verl.data --train a/train.jsonl b/train.jsonl --val c/test.jsonl \\
        --out-train X.parquet --out-val Y.parquet
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pandas as pd

from bandpo.core.files import atomic_write_bytes, read_jsonl
from bandpo.data.tiny_math import chat_messages


def verl_rows(paths: list[str], split: str) -> list[dict]:
    rows = []
    for path in paths:
        source = Path(path).parent.name  # the data set id
        for row in read_jsonl(path):
            rows.append(
                {
                    "data_source": source,
                    "prompt": chat_messages(row["prompt"], row.get("shots")),
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": str(row["answer"])},
                    "extra_info": {
                        "split": split,
                        "index": len(rows),
                        "id": row["id"],
                        "level": int(row.get("level", 0)),
                    },
                }
            )
    return rows


def write_parquet(rows: list[dict], out: str) -> None:
    buf = io.BytesIO()
    pd.DataFrame(rows).to_parquet(buf, index=False)
    atomic_write_bytes(out, buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", nargs="+", required=True)
    ap.add_argument("--val", nargs="+", required=True)
    ap.add_argument("--out-train", required=True)
    ap.add_argument("--out-val", required=True)
    ap.add_argument("--val-split", default="test", help="the split the --val files are (extra_info.split)")
    args = ap.parse_args(argv)
    train, val = verl_rows(args.train, "train"), verl_rows(args.val, args.val_split)
    write_parquet(train, args.out_train)
    write_parquet(val, args.out_val)
    print(f"train: {len(train)} rows -> {args.out_train}; val: {len(val)} rows -> {args.out_val}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
