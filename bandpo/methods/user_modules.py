"""Methods defined outside ``bandpo/``: import the user's modules that register methods.

Nothing here runs at import: a module of your own is imported only when something calls `load_method_modules`
(named modules) or `load_env_method_modules` (``$BANDPO_METHOD_MODULES``), which is what the places where a run
starts do: the trainer (`bandpo.train.main` and `bandpo.train.train`), verl's side (`bandpo.verl_plugin`, which
verl imports in its driver and every Ray worker before it looks a loss up; `bandpo.verl_command.VerlRun`), the
evaluation of a run (`bandpo.evaluate`), and the workflow's config check (``method_modules``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bandpo.methods.registry import list_methods

METHOD_MODULES_ENV = "BANDPO_METHOD_MODULES"
_LOADED_MODULES: dict[str, Any] = {}


def _split_specs(specs: Iterable[str] | str | None) -> list[str]:
    if specs is None:
        return []
    if isinstance(specs, str):
        specs = specs.split(os.pathsep)
    return [s.strip() for s in specs if s and s.strip()]


def load_method_modules(specs: Iterable[str] | str | None, root: str | os.PathLike | None = None) -> list[str]:
    """Import the user modules that register methods (each once per process); returns the methods they added.

    ``specs``: module names (``my_methods``, ``pkg.methods``; importable from ``sys.path``) or paths of ``.py``
    files (relative ones against ``root``, default the working directory), as a list or one
    ``os.pathsep``-separated string (the form of ``$BANDPO_METHOD_MODULES``). A module that cannot be found or
    fails to import raises ImportError naming it.
    """
    before = set(list_methods())
    for spec in _split_specs(specs):
        if spec.endswith(".py"):
            path = Path(spec) if Path(spec).is_absolute() else Path(root or os.getcwd()) / spec
            key = str(path.resolve())
            if key in _LOADED_MODULES:
                continue
            if not path.is_file():
                raise ImportError(f"method module {spec!r}: file not found ({path})")
            name = f"bandpo_method_module_{path.stem}_{hashlib.sha256(key.encode()).hexdigest()[:8]}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            try:
                module_spec.loader.exec_module(module)
            except Exception as e:
                del sys.modules[name]
                raise ImportError(f"method module {spec!r} ({path}) failed to import: {type(e).__name__}: {e}") from e
            _LOADED_MODULES[key] = module
        else:
            if spec in _LOADED_MODULES:
                continue
            try:
                _LOADED_MODULES[spec] = importlib.import_module(spec)
            except ImportError as e:
                raise ImportError(
                    f"method module {spec!r} is not importable ({e}); give a module on sys.path / PYTHONPATH or "
                    "the path of a .py file"
                ) from e
    return sorted(set(list_methods()) - before)


def loaded_method_modules() -> list[str]:
    """The user modules imported by `load_method_modules` in this process (names, or absolute file paths)."""
    return list(_LOADED_MODULES)


def load_env_method_modules() -> list[str]:
    """`load_method_modules` of ``$BANDPO_METHOD_MODULES`` (unset or empty: nothing); called where a run starts."""
    return load_method_modules(os.environ.get(METHOD_MODULES_ENV))
