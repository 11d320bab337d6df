"""bandpo.core.options (``--set KEY=VALUE`` against a dataclass, unknown-name hints) and bandpo.core.provenance."""

from __future__ import annotations

import platform
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from bandpo.core import options, provenance


@dataclass
class Settings:
    steps: int = 1
    lr: float = 0.1
    lr_end: float | None = None
    name: str = "x"
    flag: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    anything: Any = None


def test_parse_assignments_reads_json_and_checks_types():
    got = options.parse_assignments(
        ["steps=7", "lr=1", "lr_end=null", "name=123", "flag=true", 'params={"a": 1}', "anything=[1, 2]", "name=a=b"],
        Settings,
    )
    assert got == {"steps": 7, "lr": 1.0, "lr_end": None, "name": "a=b", "flag": True, "params": {"a": 1},
                   "anything": [1, 2]}  # fmt: skip
    assert isinstance(got["lr"], float)
    assert options.parse_assignments(["name=123"], Settings) == {"name": "123"}  # a text field keeps the text


@pytest.mark.parametrize(
    "item, message",
    [
        ("stpes=3", r"unknown field 'stpes' \(did you mean 'steps'\?\); valid: steps, lr"),
        ("zzz=3", r"unknown field 'zzz'; valid:"),
        ("steps", r"expected KEY=VALUE"),
        ("=3", r"expected KEY=VALUE"),
        ("steps=2.5", r"--set steps=2.5: expected int"),
        ("steps=true", r"expected int"),
        ("flag=1", r"expected bool"),
        ("lr=fast", r"--set lr=fast: expected float$"),
        ("lr_end=fast", r"expected float or null"),
        ("params=[1]", r"expected dict"),
    ],
)
def test_parse_assignments_rejects_naming_the_item(item, message):
    with pytest.raises(ValueError, match=message):
        options.parse_assignments([item], Settings)


def test_check_fields_types_config_values():
    assert options.check_fields({"steps": 3, "lr": 1, "lr_end": None}, Settings) == {
        "steps": 3,
        "lr": 1.0,
        "lr_end": None,
    }
    for values, message in [
        ({"stpes": 3}, r"unknown training setting 'stpes' \(did you mean 'steps'\?\)"),
        ({"flag": 1}, r"training setting 'flag': expected bool, got 1"),
        ({"steps": "3"}, r"training setting 'steps': expected int, got '3'"),
    ]:
        with pytest.raises(ValueError, match=message):
            options.check_fields(values, Settings, "training setting")


def test_unknown_names_hints_the_closest():
    assert options.unknown_names(["delt", "zzz"], ["delta", "divergence"]) == "'delt' (did you mean 'delta'?), 'zzz'"


def test_models_cli_set_is_checked(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "bandpo.models",
        "build",
        "--size",
        "tiny-test",
        "--data",
        "d",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run([*cmd, "--set", "batch_sise=8"], capture_output=True, text=True)
    assert proc.returncode == 2 and "did you mean 'batch_size'" in proc.stderr and "Traceback" not in proc.stderr


def test_provenance_versions_and_machine():
    v = provenance.versions("torch", "surely-not-an-installed-distribution")
    assert v["python"] == platform.python_version() and v["torch"] and v["surely-not-an-installed-distribution"] is None
    import torch

    m = provenance.machine()
    assert m["cpu_model"] and m["cpu_count"] >= 1
    assert m["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert m["torch_threads"] == torch.get_num_threads() and m["torch_interop_threads"] >= 1


def test_provenance_does_not_import_torch():
    code = (
        "import sys, bandpo.core.provenance as p; m = p.machine(); print('torch' in sys.modules, 'torch_threads' in m)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_exit_job_runs_the_exit_handlers_and_flushes_before_leaving():
    """`bandpo.core.options.exit_job` skips only the interpreter's teardown: atexit handlers run, buffered output is
    written, and the exit status is the job's."""
    code = (
        "import atexit, sys\nfrom bandpo.core.options import exit_job\n"
        "atexit.register(lambda: print('handler', end=''))\n"
        "sys.stdout.write('buffered ')\nsys.stderr.write('err')\nexit_job(3)\nprint('not reached')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (3, "buffered handler", "err")
