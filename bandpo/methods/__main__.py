"""``python -m bandpo.methods [--json] [--method-module M ...]``: every registered method, its kind (bounds / loss /
verl loss), its parameters with their defaults, and where it comes from (the function that implements it; for a
verl loss, verl's registry entry that it calls)."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from typing import Any

from bandpo import methods

KIND_LABELS = {"bounds": "bounds", "loss": "loss", "verl": "verl loss"}


def describe(name: str) -> dict[str, Any]:
    """One method as a JSON-able mapping: name, kind, description, parameters (name -> default), source."""
    m = methods.get_method(name)
    defaults = m.config_cls()
    params = {f.name: getattr(defaults, f.name) for f in fields(m.config_cls)}
    if m.kind == "verl":
        source = f"verl.trainer.ppo.core_algos.POLICY_LOSS_REGISTRY[{m.config_cls.verl_loss_mode!r}]"
    else:
        source = f"{m.fn.__module__}.{m.fn.__qualname__}"
    return {
        "name": name,
        "kind": KIND_LABELS.get(m.kind, m.kind),
        "description": m.description,
        "params": params,
        "config": f"{m.config_cls.__module__}.{m.config_cls.__qualname__}",
        "source": source,
    }


def table(rows: list[dict[str, Any]]) -> str:
    width = max(len(r["name"]) for r in rows)
    kind_width = max(len(r["kind"]) for r in rows)
    lines = []
    for r in rows:
        params = ", ".join(f"{k}={v!r}" for k, v in r["params"].items()) or "(no parameters)"
        lines.append(f"{r['name']:<{width}}  {r['kind']:<{kind_width}}  {params}")
        pad = " " * (width + kind_width + 4)
        lines.append(f"{pad}source: {r['source']}")
        if r["description"]:
            lines.append(f"{pad}{r['description']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bandpo.methods", description=__doc__)
    parser.add_argument("--json", action="store_true", help="one JSON list instead of the table")
    parser.add_argument("--method-module", action="append", default=[], help="a module of your own methods")
    args = parser.parse_args(argv)
    methods.load_method_modules(args.method_module)
    rows = [describe(name) for name in methods.list_methods()]
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
