"""A look of a sequential primary: the verdict rule (`bandpo.stats.rule.decide`) on the paired differences of
the seeds run so far, which tells the DAG whether to train the next look's seeds.

The look's spec (written by the run plan, `bandpo.plan.runs.Plan.look_spec`) names the design (fractions of the
score), the task and metric family compared, the pair's seeds in look order and, per seed, the evaluation summary of
each side. Look j reads the first j x k seeds: each side's ``mean@k`` of the task (`bandpo.analysis.load`, as the
report reads it), their differences treatment - control in seed order, and `decide` over the looks they reach. The
result is one JSON object (`look_record`): the verdict (``better``, ``not better by the margin`` or ``undecided``),
the look and pairs it rests on, the estimate with its 95% t interval, the t statistic and boundaries. A later look
never changes an earlier decision: `decide` stops at the first look that crosses.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bandpo.analysis.load import parse_metric, summary_values
from bandpo.core.files import atomic_write_text, read_spec
from bandpo.stats.design import SequentialDesign
from bandpo.stats.rule import decide

LOOK_KEYS = ("design", "task", "metric", "seeds", "summaries")  # a look's spec (bandpo.plan.runs writes it)


def look_spec(values: dict[str, Any]) -> dict[str, Any]:
    """A look's spec from its JSON object; ValueError naming the keys it lacks."""
    missing = [k for k in LOOK_KEYS if k not in values]
    if missing:
        raise ValueError(f"not a look's spec (missing {', '.join(missing)})")
    return values


def read_look_spec(path: str | Path) -> dict[str, Any]:
    """A look's spec file (`bandpo.core.files.read_spec`); ValueError naming the file when it is not one."""
    return read_spec(path, look_spec)


def seed_score(path: str | Path, task: str, family: str) -> float:
    """The ``family@k`` value (e.g. mean@8) of ``task`` in one evaluation summary; FileNotFoundError / ValueError
    naming the file when it is missing or holds no such value."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"evaluation summary not found: {path}")
    read = summary_values(path)
    if read is None:
        raise ValueError(f"{path}: not an evaluation summary")
    _summary, got_task, values, _stderr, _source = read
    found = [v for name, v in values.items() if parse_metric(name)[0] == family]
    if got_task != task or len(found) != 1:
        raise ValueError(f"{path}: no single {family}@k value of task {task!r} (task {got_task!r}: {sorted(values)})")
    return found[0]


def look_differences(spec: Mapping[str, Any], n: int) -> list[float]:
    """treatment - control of the first ``n`` seeds of the spec, in seed order."""
    sides = spec["summaries"]
    return [seed_score(sides["treatment"][i], spec["task"], spec["metric"])
            - seed_score(sides["control"][i], spec["task"], spec["metric"]) for i in range(n)]  # fmt: skip


def look_record(spec: Mapping[str, Any], look: int) -> dict[str, Any]:
    """The verdict after ``look`` looks (1-based): `decide` on the pairs of the first look x k seeds."""
    design = SequentialDesign(**spec["design"])
    if not 1 <= look <= design.looks:
        raise ValueError(f"look {look}: the design has looks 1..{design.looks}")
    n = look * design.k
    result = decide(design, look_differences(spec, n))
    return {"experiment": spec.get("experiment"), "model": spec.get("model"), "treatment": spec.get("treatment"),
            "control": spec.get("control"), "seeds": list(spec["seeds"][: result.n]), "design": dict(spec["design"]),
            "label": result.label, **dataclasses.asdict(result)}  # fmt: skip


def write_look(spec_path: str | Path, look: int, out: str | Path) -> Path:
    record = look_record(read_look_spec(spec_path), look)
    return atomic_write_text(Path(out), json.dumps(record, indent=1, sort_keys=True) + "\n")
