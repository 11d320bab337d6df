"""The config files of a ``snakemake`` command, read before Snakemake reads them: one line per bad file.

Snakemake loads every ``--configfile`` itself, before the Snakefile runs, and names neither the file, the line nor
the column of a YAML syntax error ("Config file is not valid JSON or YAML"); a file that does not exist ends in a
traceback. The workflow profiles (``profiles/default/config.yaml``, ``profiles/slurm/config.yaml``) are YTE
templates whose ``__definitions__`` call `check_command_line` while Snakemake reads the profile, which it does before
the config files: a bad file stops the command there with one line, ``Invalid config (FILE:LINE:COLUMN): ...``. The
Snakefile checks the default ``config/config.yaml`` (read only without ``--configfile``) the same way. Imports only
PyYAML (and Snakemake's own argument parser, already loaded): it runs at every ``snakemake`` start.

An overlay is a config file read after another one, which it names: ``extends: real-lm-compare.yaml`` (relative to
the overlay's folder). Snakemake merges the files given to ``--configfile`` in order (mappings key by key, at every
depth; any other value replaced), so an overlay states only what it changes; `check_command_line` stops a command
that gives an overlay without its base before it, and `read_config` merges a file over its base as Snakemake does
(for the tools and tests that read one config file).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


def config_file_error(path: str | os.PathLike) -> str | None:
    """What is wrong with a config file as Snakemake would read it (JSON, else YAML; a mapping of keys): None, or one
    line, ``Invalid config (FILE): ...`` (``FILE:LINE:COLUMN`` for a syntax error)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return f"Invalid config ({path}): no such file"
    except (OSError, UnicodeDecodeError) as e:
        return f"Invalid config ({path}): cannot be read: {getattr(e, 'strerror', None) or e}"
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = yaml.load(text, Loader=yaml.FullLoader)  # Snakemake's loader (through YTE)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            what = " ".join(str(e.problem or e.context).split())
            if e.problem and e.context and e.context_mark:
                what += f" ({e.context} at line {e.context_mark.line + 1}, column {e.context_mark.column + 1})"
            return f"Invalid config ({where}): YAML syntax error: {what}"
        except yaml.YAMLError as e:
            return f"Invalid config ({path}): YAML error: {' '.join(str(e).split())}"
    if not isinstance(data, dict):
        return f"Invalid config ({path}): not a mapping of config keys (the file holds a {type(data).__name__})"
    return None


def command_line_configfiles(argv: Sequence[str] | None = None) -> list[str]:
    """The ``--configfile`` values of a snakemake command line (default: this process's, ``sys.argv``), as
    Snakemake's own argument parser reads them."""
    from snakemake.cli import get_argument_parser  # lazy: snakemake's parser, only where a command line is read

    args, _ = get_argument_parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    return [str(p) for p in args.configfile or []]


def _extends(path: str | os.PathLike) -> Path | None:
    """The base an overlay names (``extends``, relative to its folder), resolved; None for a plain config file."""
    with open(path, encoding="utf-8") as f:
        base = (yaml.safe_load(f) or {}).get("extends")
    return (Path(path).parent / str(base)).resolve() if base else None


def overlay_error(paths: Sequence[str | os.PathLike]) -> str | None:
    """None, or one line when an overlay among ``paths`` (in ``--configfile`` order) comes without its base before
    it: the command that reads both."""
    for i, path in enumerate(paths):
        base = _extends(path)
        if base is not None and base not in [Path(p).resolve() for p in paths[:i]]:
            rel = os.path.relpath(base)
            return (f"Invalid config ({path}): it extends {rel}, which must come before it: snakemake --configfile "
                    f"{rel} {path}")  # fmt: skip
    return None


def merge_config(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base`` as Snakemake merges two config files: mappings key by key at every depth, any
    other value (a list included) replaced."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = merge_config(out[key], value) if both else value
    return out


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """A config file as the workflow reads it with its base: an overlay (``extends``) merged over the config it
    extends (`merge_config`, recursively), a plain file as it is."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    base = _extends(path)
    return merge_config(read_config(base), data) if base is not None else data


def check_command_line(argv: Sequence[str] | None = None) -> None:
    """Stop the command (SystemExit, one line) at the first bad ``--configfile``, or an overlay given without its
    base: the profiles' hook."""
    paths = command_line_configfiles(argv)
    for path in paths:
        error = config_file_error(path)
        if error:
            raise SystemExit(error)
    if error := overlay_error(paths):
        raise SystemExit(error)
