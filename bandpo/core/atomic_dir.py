"""Run a command that writes a folder, and publish the folder atomically.

    python -m bandpo.core.atomic_dir --final results/embedded/runs/tiny-s/grpo/seed0 -- \\
        python -m bandpo.train ... --out {tmp}

``{tmp}`` in the command is replaced by a fresh path next to ``--final`` (same file system, not yet created). When
the command succeeds, the finished folder takes the place of ``--final`` (`bandpo.core.files.replace_dir`: one atomic
swap
on Linux; any old folder, e.g. the empty one Snakemake creates for the outputs, is removed); when it fails, the
temporary folder is deleted and the exit status is passed on, so a crash never leaves a folder that looks complete.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bandpo.core.files import replace_dir


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("usage: python -m bandpo.core.atomic_dir --final DIR -- COMMAND ... {tmp} ...", file=sys.stderr)
        return 2
    split = argv.index("--")
    ap = argparse.ArgumentParser(prog="python -m bandpo.core.atomic_dir")
    ap.add_argument("--final", required=True)
    args = ap.parse_args(argv[:split])
    command = argv[split + 1 :]
    if not command or not any("{tmp}" in c for c in command):
        print("bandpo.core.atomic_dir: the command must contain {tmp}", file=sys.stderr)
        return 2
    final = Path(args.final)
    final.parent.mkdir(parents=True, exist_ok=True)
    parent = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    tmp = parent / "out"
    try:
        rc = subprocess.call([c.replace("{tmp}", str(tmp)) for c in command])
        if rc != 0:
            print(
                f"bandpo.core.atomic_dir: command failed with exit status {rc}; {final} left unchanged", file=sys.stderr
            )
            return rc
        if not tmp.is_dir():
            print(
                f"bandpo.core.atomic_dir: the command exited 0 but wrote no folder at {{tmp}} = {tmp}", file=sys.stderr
            )
            return 1
        replace_dir(tmp, final)
        return 0
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
