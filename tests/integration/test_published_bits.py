"""The published bits, checked on the CPU this runs on (marker ``published_bits``; CI runs it, so every CI machine is
a second machine checked exactly against the publication).

From a fresh working directory (``snakemake -d``, nothing of the checkout's run folders), the default config
(`config/config.yaml`) builds the tiny-s base model and trains main's GRPO run of seed 0, the DAG's own commands
and settings (`bandpo.core.numerics` fixed), the run while three processes per core keep the machine busy
(`conftest.busy_machine`: its rollouts' grades, and so its bits, must not depend on the load, issue #72). Then:

* the base model's weights sha256 equals the one `results/provenance.json` records for ``resources/models/tiny-s``;
* the run's digest (`bandpo.report.publish.run_digests`: the per-step metrics without timings, the trained weights)
  equals the published digest of ``tiny-s/grpo/seed0``.

On a mismatch the message names both CPU models (the publication's, from provenance.json, and this one). A few
minutes on 2 cores: the tiny-s base-model build and one 64-step run (slowed down by the load).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import busy_machine

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "results"
BASE = "resources/models/tiny-s"
RUN = "tiny-s/grpo/seed0"


def _published() -> dict:
    path = PUBLISHED / "provenance.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing: the published results are part of the repository")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.published_bits
def test_the_published_base_model_and_run_are_rebuilt_bit_for_bit_on_this_cpu(tmp_path):
    from bandpo.core.provenance import machine, weights_sha256
    from bandpo.report.publish import run_digests

    prov = _published()
    (base,) = [m for m in prov["base_models"] if m["path"] == BASE]
    (run,) = [r for r in prov["runs"] if r["run"] == RUN]
    profile = prov["config"]["profile"]
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path), "--cores", "2"]
    for target, load in ((f"{BASE}/config.json", contextlib.nullcontext()),
                         (f"results/{profile}/runs/{RUN}/run.json", busy_machine())):  # fmt: skip
        with load:  # last: --configfile takes several values
            proc = subprocess.run([*cmd, target, "--configfile", str(ROOT / "config" / "config.yaml")],
                                  capture_output=True, text=True, timeout=3600)  # fmt: skip
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]

    here, there = machine()["cpu_model"], prov["machine"]["cpu_model"]
    ran = json.loads((tmp_path / "results" / profile / "runs" / RUN / "run.json").read_text())
    branch = ran["machine"]["numerics"].get("mkl_branch")
    where = f"published on {there!r}, rebuilt here on {here!r} (MKL branch {branch})"
    print(f"published bits: {where}; trained under load, slowest verdict {ran['grader']['slowest_verdict']}")
    assert weights_sha256(tmp_path / BASE) == base["weights_sha256"], f"{BASE}: other weights ({where})"
    (ours,) = [r for r in run_digests(tmp_path / "results" / profile) if r["run"] == RUN]
    assert ours["metrics_sha256"] == run["metrics_sha256"], f"{RUN}: other per-step metrics ({where})"
    assert ours["weights_sha256"] == run["weights_sha256"], f"{RUN}: other trained weights ({where})"
