"""Settings given by name: ``--set KEY=VALUE`` arguments checked against a dataclass, and the message for unknown
names (with the closest valid name as a hint). Imports nothing heavy: the workflow's config check uses it too."""

from __future__ import annotations

import atexit
import dataclasses
import difflib
import json
import logging
import os
import sys
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def unknown_names(unknown: Iterable[Any], known: Sequence[str]) -> str:
    """``'delt' (did you mean 'delta'?), 'x'``: each unknown name with its closest known one, if any is close."""
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(str(name), list(known), n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ", ".join(parts)


def allowed_types(hint: Any) -> tuple[type, ...]:
    """The plain types a field's annotation admits: ``float | None`` -> (float, NoneType), ``dict[str, Any]`` ->
    (dict,); ``Any`` -> (object,)."""
    if hint is Any:
        return (object,)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in allowed_types(arg))
    if origin is not None:
        return (origin,)
    return (hint,) if isinstance(hint, type) else (object,)


def _fit(label: str, value: Any, allowed: tuple[type, ...], raw: str | None = None) -> Any:
    """``value`` if it fits ``allowed`` (an int is widened to a float field; a bool fits only a bool field); for a
    text field given something else from the command line, the text ``raw`` itself; else ValueError naming
    ``label``."""
    if object in allowed:
        return value
    if isinstance(value, bool):  # bool is an int in Python: accept it only where bool is allowed
        if bool in allowed:
            return value
    elif isinstance(value, int) and int not in allowed and float in allowed:
        return float(value)
    elif isinstance(value, allowed):
        return value
    if raw is not None and str in allowed:
        return raw  # e.g. a str field given 123 or null: the text itself
    names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
    got = "" if raw is not None else f", got {value!r}"  # a --set label already shows the text
    raise ValueError(f"{label}: expected {names}{got}")


def check_fields(values: Mapping[str, Any], schema: type, what: str = "field") -> dict[str, Any]:
    """Typed ``values`` (from a YAML config) checked against the fields of the dataclass ``schema``: the values,
    ints widened for float fields. ValueError naming the key for an unknown name (with a 'did you mean' hint) or a
    value of the wrong type; ``what`` names the kind of setting in the message ("training setting")."""
    fields = [f.name for f in dataclasses.fields(schema)]
    hints = typing.get_type_hints(schema)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            raise ValueError(f"unknown {what} {unknown_names([key], fields)}; valid: {', '.join(fields)}")
        out[key] = _fit(f"{what} {key!r}", value, allowed_types(hints[key]))
    return out


def parse_assignments(items: Iterable[str], schema: type) -> dict[str, Any]:
    """``["steps=7", "lr=1e-3", "lr_end=null"]`` -> ``{"steps": 7, "lr": 0.001, "lr_end": None}`` for the fields of
    the dataclass ``schema``. Values are read as JSON where they parse (numbers, true/false, null, lists, objects),
    else as text; each must fit its field's annotation (an integer is accepted for a float field). ValueError naming
    the item for a missing ``=``, an unknown field (with a 'did you mean' hint) or a value of the wrong type."""
    fields = [f.name for f in dataclasses.fields(schema)]
    hints = typing.get_type_hints(schema)
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        if key not in fields:
            hint = unknown_names([key], fields)
            raise ValueError(f"--set {item!r}: unknown field {hint}; valid: {', '.join(fields)}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key] = _fit(f"--set {key}={raw}", value, allowed_types(hints[key]), raw)
    return out


def exit_job(code: int | None) -> typing.NoReturn:
    """End a job process that finished (``main()`` returned): run the exit handlers (``atexit``: the grader's
    workers, multiprocessing, logging), flush the standard streams, then leave with ``os._exit``, skipping only the
    interpreter's teardown of its modules, which frees memory the operating system frees anyway and, once torch is
    imported, costs about 0.3 s of every job (`benchmarks/bench_job_startup.py`). A job that raised exits the usual
    way (its traceback printed by the interpreter)."""
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream: nothing left to keep
            pass
    os._exit(code if isinstance(code, int) else 0)
