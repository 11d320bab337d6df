"""The config files of a ``snakemake`` command, read before Snakemake reads them: one line per bad file.

Snakemake loads every ``--configfile`` itself, before the Snakefile runs, and names neither the file, the line nor
the column of a YAML syntax error ("Config file is not valid JSON or YAML"); a file that does not exist ends in a
traceback. The workflow profiles (``profiles/default/config.yaml``, ``profiles/slurm/config.yaml``) are YTE
templates whose ``__definitions__`` call `check_command_line` while Snakemake reads the profile, which it does before
the config files: a bad file stops the command there with one line, ``Invalid config (FILE:LINE:COLUMN): ...``. The
Snakefile checks the default ``config/config.yaml`` (read only without ``--configfile``) the same way. Imports only
PyYAML (and Snakemake's own argument parser, already loaded): it runs at every ``snakemake`` start.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

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


def check_command_line(argv: Sequence[str] | None = None) -> None:
    """Stop the command (SystemExit, one line) at the first bad ``--configfile``: the profiles' hook."""
    for path in command_line_configfiles(argv):
        error = config_file_error(path)
        if error:
            raise SystemExit(error)
