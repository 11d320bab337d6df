"""Methods defined outside ``bandpo/``: import the user's modules that register methods.

Nothing here runs at import: a module of your own is imported only when something calls `load_method_modules`
(named modules) or `load_env_method_modules` (``$BANDPO_METHOD_MODULES``), which is what the places where a run
starts do: the trainer (`bandpo.train.cli.main` and `bandpo.train.loop.train`), verl's side
(`bandpo.verl.plugin`, which verl imports in its driver and every Ray worker before it looks a loss up;
`bandpo.verl.command.VerlRun`), the evaluation of a run (`bandpo.score.evaluate`), the workflow's config check
(``method_modules``) and the listing ``python -m bandpo.methods`` (``$BANDPO_METHOD_MODULES`` and
``--method-module``, each method with its file).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from bandpo.methods.registry import FILE_MODULE_PREFIX, LOADED_MODULES, METHOD_MODULES_ENV, list_methods

_METHOD_SOURCES: dict[str, str] = {}  # method name -> the module (absolute .py path or module name) that added it


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
        known = set(list_methods())
        key = _load(spec, root)
        for name in set(list_methods()) - known:
            _METHOD_SOURCES[name] = key
    return sorted(set(list_methods()) - before)


def _load(spec: str, root: str | os.PathLike | None) -> str:
    """Import one module (once per process); returns its key in ``LOADED_MODULES``."""
    if spec.endswith(".py"):
        path = Path(spec) if Path(spec).is_absolute() else Path(root or os.getcwd()) / spec
        key = str(path.resolve())
        if key in LOADED_MODULES:
            return key
        if not path.is_file():
            raise ImportError(f"method module {spec!r}: file not found ({path})")
        name = f"{FILE_MODULE_PREFIX}{path.stem}_{hashlib.sha256(key.encode()).hexdigest()[:8]}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise ImportError(f"method module {spec!r} ({path}) failed to import: {type(e).__name__}: {e}") from e
        LOADED_MODULES[key] = module
        return key
    if spec in LOADED_MODULES:
        return spec
    try:
        LOADED_MODULES[spec] = importlib.import_module(spec)
    except ImportError as e:
        raise ImportError(
            f"method module {spec!r} is not importable ({e}); give a module on sys.path / PYTHONPATH or "
            "the path of a .py file"
        ) from e
    return spec


def loaded_method_modules() -> list[str]:
    """The user modules imported by `load_method_modules` in this process (names, or absolute file paths)."""
    return list(LOADED_MODULES)


def method_module_of(method: str) -> str | None:
    """The user module whose import registered ``method`` (an absolute .py path or a module name), None for a
    built-in method or one registered otherwise."""
    return _METHOD_SOURCES.get(method)


def load_env_method_modules() -> list[str]:
    """`load_method_modules` of ``$BANDPO_METHOD_MODULES`` (unset or empty: nothing); called where a run starts."""
    return load_method_modules(os.environ.get(METHOD_MODULES_ENV))
