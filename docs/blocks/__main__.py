"""``python -m docs.blocks [--check] [--root .] [--results DIR]``: rewrite the generated blocks of README.md,
docs/*.md and results/README.md from the published tables (`docs.blocks.update`); ``--check`` changes nothing and
exits 1 when a doc is stale. Run from the repository root."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from docs.blocks import block_count, update


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m docs.blocks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=".", help="the repository root (default: here)")
    ap.add_argument("--results", default=None, help="the published tables (default: ROOT/results)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a doc is stale")
    args = ap.parse_args(argv)
    try:
        stale = update(args.root, args.results, check=args.check)
    except (FileNotFoundError, ValueError) as err:
        print(f"{ap.prog}: error: {err}", file=sys.stderr)
        return 2
    for path in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {path}")
    if args.check and not stale:
        blocks, files = block_count(args.root)
        print(f"checked {blocks} generated blocks in {files} files: all up to date")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
