"""The run contract: the files, ``metrics.jsonl`` keys and ``run.json`` fields of a finished training run.

Written down once, in ``bandpo/schemas/run.schema.yaml`` (shipped in the package); every trainer produces it (the
local trainer, `bandpo.verl.merge` for verl, any external rule) and the report checks it when it loads a run
(this module reads files only, no torch):

    from bandpo.core.run_contract import check_run
    check_run("results/embedded/runs/tiny-s/grpo/seed0")   # raises RunContractError naming the run and the key

    python -m bandpo.core.run_contract RUN_DIR [RUN_DIR ...]    # the same from the shell: exit status 1 on a broken run
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bandpo.core.files import package_data, read_jsonl

__all__ = [
    "SCHEMA_PATH",
    "RunContractError",
    "check_outputs",
    "check_run",
    "contract",
    "read_run",
    "required_metric_keys",
]

SCHEMA_PATH = package_data("schemas", "run.schema.yaml")


class RunContractError(ValueError):
    """A run folder that does not follow the run contract."""


@functools.cache
def contract() -> dict[str, Any]:
    """The contract as read from `SCHEMA_PATH`."""
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


def required_metric_keys(per_bucket: bool = True, directional: bool = True) -> list[str]:
    """Keys a line of metrics.jsonl must hold; with ``directional`` (all but verl's own losses trained by verl)
    the clip fraction by direction; with ``per_bucket`` (a method with per-token bounds) also the per-bucket keys
    (``clipfrac_upper/p0.0-0.2``, ...)."""
    spec = contract()["metrics"]
    out = list(spec["required"]) + (list(spec["directional"]) if directional else [])
    if per_bucket:
        out += [f"{k}/{b}" for k in spec["per_bucket"] for b in spec["buckets"]]
    return out


def _has_buckets(row: dict[str, Any]) -> bool:
    prefixes = tuple(f"{k}/" for k in contract()["metrics"]["per_bucket"])
    return any(key.startswith(prefixes) for key in row)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def read_run(run_dir: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ``metrics.jsonl`` rows and the ``run.json`` of a run folder, each read once; `RunContractError` naming
    the run for a missing contract file or a file that is not JSON (objects)."""
    run = Path(run_dir)
    for name in contract()["files"]:
        if not (run / name).is_file():
            raise RunContractError(f"run {run}: missing file {name!r} (run contract: {SCHEMA_PATH.name})")
    try:
        rows = read_jsonl(run / "metrics.jsonl")
    except ValueError as err:  # names metrics.jsonl and the line
        raise RunContractError(f"run {run}: {err}") from None
    try:
        info = json.loads((run / "run.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise RunContractError(f"run {run}: run.json is not JSON ({err})") from None
    if not isinstance(info, dict):
        raise RunContractError(f"run {run}: run.json is not a JSON object")
    return rows, info


def check_outputs(run: str | Path, rows: list[dict[str, Any]], info: dict[str, Any]) -> None:
    """Check a run's metrics rows and run.json (`read_run`) against the contract; `RunContractError` naming the
    run and the first missing metrics key (with the line) or run.json field. Per-bucket keys are all required on a
    line that has any of them (methods with per-token bounds) and none otherwise (whole-loss methods)."""
    spec = contract()
    if not rows:
        raise RunContractError(f"run {run}: metrics.jsonl has no line")
    directional = info.get("directional_clipfrac", True) is not False
    for number, row in enumerate(rows, start=1):
        for key in required_metric_keys(per_bucket=_has_buckets(row), directional=directional):
            if key not in row:
                raise RunContractError(f"run {run}: metrics.jsonl line {number} lacks the key {key!r}")
            if not _is_number(row[key]):
                raise RunContractError(f"run {run}: metrics.jsonl line {number}: {key!r} is not a number: {row[key]!r}")
    for field in spec["run_json"]["required"]:
        if field not in info:
            raise RunContractError(f"run {run}: run.json lacks the field {field!r}")
    if not isinstance(info["config"], dict):
        raise RunContractError(f"run {run}: run.json field 'config' is not a mapping")
    for field in spec["run_json"]["config_required"]:
        if field not in info["config"]:
            raise RunContractError(f"run {run}: run.json lacks the field 'config.{field}'")


def check_run(run_dir: str | Path) -> dict[str, Any]:
    """Check one finished run folder against the contract (`read_run`, then `check_outputs`); returns its
    run.json."""
    rows, info = read_run(run_dir)
    check_outputs(Path(run_dir), rows, info)
    return info


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bandpo.core.run_contract", description="check finished run folders")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    args = ap.parse_args(argv)
    for run in args.runs:
        try:
            info = check_run(run)
        except RunContractError as err:
            print(f"python -m bandpo.core.run_contract: {err}", file=sys.stderr)
            return 1
        print(f"{run}: follows the run contract ({info['steps']} steps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
