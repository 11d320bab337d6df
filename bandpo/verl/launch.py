"""``python -m bandpo.verl.launch --spec FILE``: one run of verl's trainer, as the workflow's rule ``train_verl`` runs
it. The spec file holds the run's `bandpo.verl.spec.VerlRun` fields (JSON, written by the run plan,
`bandpo.plan.runs`); this process checks them and the method, prints the command line (`bandpo.verl.command`), then
replaces itself with ``python -m verl.trainer.main_ppo`` under the run's environment. ``--print`` prints the shell
line and exits (what would run)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from bandpo.verl import command
from bandpo.verl.spec import read_spec


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bandpo.verl.launch", description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="the run's spec file (JSON: VerlRun fields)")
    ap.add_argument("--print", action="store_true", help="print the shell command line and exit")
    args = ap.parse_args(argv)
    try:
        run = read_spec(args.spec)
        argv_verl, env = command.command(run), command.env(run)
        line = command.shell_command(run)
    except (ImportError, ValueError) as e:
        ap.error(str(e))
    print(line, flush=True)
    if args.print:
        return 0
    sys.stderr.flush()
    os.execvpe(argv_verl[0], argv_verl, {**os.environ, **env})
    return 0  # pragma: no cover - exec does not return


if __name__ == "__main__":
    sys.exit(main())
