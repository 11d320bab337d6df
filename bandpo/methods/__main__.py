"""``python -m bandpo.methods [--json] [--method-module M ...]``: every registered method, its kind (bounds / loss /
verl loss), its parameters with their defaults, where it comes from (the function that implements it, for a
method of your own module its file; for a verl loss, verl's registry entry that it calls), the framework settings
that give the same rule (``shipped by``: verl's, TRL's) and the token inputs it requires.

Methods of your own modules are listed too: those named in ``$BANDPO_METHOD_MODULES`` (``os.pathsep``-separated
.py paths or module names, as the workflow passes ``method_modules`` to its jobs) and by ``--method-module`` (a .py
path or a module name; repeat it for several)."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import fields
from typing import Any

from bandpo import methods
from bandpo.methods.registry import function_origin, source_file

KIND_LABELS = {"bounds": "bounds", "loss": "loss", "verl": "verl loss"}
# Every verl loss method is compared with verl's own registry entry by one parametrized test.
VERL_PARITY_TEST = "tests/unit/test_verl_losses.py::test_loss_and_gradient_equal_verls_in_every_mode"


def describe(name: str) -> dict[str, Any]:
    """One method as a JSON-able mapping: name, kind, description, parameters (name -> default), config class,
    parity_tests (the tests that compare it with the framework that ships it, pytest node ids), source
    (``module.function``; ``path/to/file.py:function`` for a function outside bandpo), file (the file that
    defines the function) and method_module (the user module whose import registered it, as loaded: an absolute .py
    path or a module name; None for a built-in method)."""
    m = methods.get_method(name)
    defaults = m.config_cls()
    params = {f.name: getattr(defaults, f.name) for f in fields(m.config_cls)}
    shipped_by = m.config_cls.shipped_by
    parity_tests = list(m.config_cls.parity_tests)
    if m.kind == "verl":
        source = f"verl.trainer.ppo.core_algos.POLICY_LOSS_REGISTRY[{m.config_cls.verl_loss_mode!r}]"
        shipped_by = shipped_by or f"verl 0.9.1: loss_mode={m.config_cls.verl_loss_mode!r}"
        parity_tests = parity_tests or [VERL_PARITY_TEST]
    else:
        source = m.origin
    return {
        "name": name,
        "kind": KIND_LABELS.get(m.kind, m.kind),
        "description": m.description,
        "shipped_by": shipped_by,
        "parity_tests": parity_tests,
        "requires": list(m.config_cls.requires),
        "params": params,
        "config": function_origin(m.config_cls),
        "source": source,
        "file": source_file(m.fn),
        "method_module": methods.method_module_of(name),
    }


def table(rows: list[dict[str, Any]]) -> str:
    width = max(len(r["name"]) for r in rows)
    kind_width = max(len(r["kind"]) for r in rows)
    lines = []
    for r in rows:
        params = ", ".join(f"{k}={v!r}" for k, v in r["params"].items()) or "(no parameters)"
        lines.append(f"{r['name']:<{width}}  {r['kind']:<{kind_width}}  {params}")
        pad = " " * (width + kind_width + 4)
        source = r["source"]
        module = r["method_module"]
        if module is not None:  # its file is in the source already unless a module name registered it
            same = r["file"] is not None and os.path.abspath(r["file"]) == os.path.abspath(module)
            source += " (method module)" if same else f" (method module {module})"
        lines.append(f"{pad}source: {source}")
        if r["shipped_by"]:
            lines.append(f"{pad}shipped by: {r['shipped_by']}")
        for test in r["parity_tests"]:
            lines.append(f"{pad}parity test: {test}")
        if r["requires"]:
            lines.append(f"{pad}requires: {', '.join(r['requires'])} (token_inputs; the local trainer only)")
        if r["description"]:
            lines.append(f"{pad}{r['description']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bandpo.methods",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="one JSON list instead of the table")
    parser.add_argument(
        "--method-module",
        action="append",
        default=[],
        metavar="M",
        help=f"a module of your own methods: a .py path or a module name (repeatable; ${methods.METHOD_MODULES_ENV} "
        "is read too)",
    )
    args = parser.parse_args(argv)
    try:
        methods.load_env_method_modules()
        methods.load_method_modules(args.method_module)
    except ImportError as e:
        parser.error(str(e))
    rows = [describe(name) for name in methods.list_methods()]
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
