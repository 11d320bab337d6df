"""The study a validated config declares, below every stage: what the planner, the stages, the analysis and the
report all read of it, in one place on the floor just above `bandpo.core` and `bandpo.stats` (none of them imports
the planner, `bandpo.plan`, for it).

* The run folders' names: the experiment of the sweep itself (`MAIN`), the base model's reserved entry
  (`BASE_ENTRY`), an experiment's slot of a method entry (`slot_id`, `split_slot`) and a run's folder (`run_folder`).
* Each experiment's seeds: a slot's seeds (`slot_seeds`), a sequential primary's design (`sequential`) and the
  seeds each of its looks adds (`look_blocks`).
* The margins and designs in the code's unit: the config states margins and SDs in points; `primary_margin`,
  `family_margin`, `design_settings` and `select_min_gain` divide by `bandpo.stats.rule.POINTS` here and nowhere
  else.
* The planned experiments, typed and read-only (`Study`, `PlannedExperiment`): each experiment's settings as the
  config gives them and its margins and designs per model in fractions, built once from the config and handed to the
  report and the DAG's decision jobs as JSON (`report_experiments`), which reads back as the same study.

``cfg`` is a completed config (`bandpo.plan.validate` checks and completes it first), or the resolved config a
publication recorded in provenance.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from bandpo.stats.design import SequentialDesign
from bandpo.stats.rule import POINTS  # the config states margins and SDs in points; the code, in fractions

BASE_ENTRY = "base"  # the reserved method-entry id of the untrained base model (the step-0 row)
MAIN = "main"  # the experiment of the sweep itself (models x methods x seeds); runs without one belong to it
SLOT_SEP = "@"  # run folders of other experiments: {entry}@{experiment} (ids cannot hold "@")


def by_id(items: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {item["id"]: item for item in items}


def slot_id(experiment: str, entry: str) -> str:
    """The folder name (and ``entry`` wildcard) of an experiment's method entry: the entry id in ``main``,
    ``{entry}@{experiment}`` elsewhere (runs of one model in several experiments stay apart). `split_slot` reverses
    it."""
    return entry if experiment == MAIN else f"{entry}{SLOT_SEP}{experiment}"


def split_slot(folder_name: str) -> tuple[str, str]:
    """A run folder's name -> (method entry, experiment): ``grpo@probe`` -> ("grpo", "probe"), ``grpo`` ->
    ("grpo", "main")."""
    entry, sep, experiment = folder_name.partition(SLOT_SEP)
    return (entry, experiment) if sep and entry and experiment else (folder_name, MAIN)


def run_folder(model: str, slot: str, seed: int | str) -> str:
    """A run's folder under ``runs/`` (its training outputs) and ``eval/`` (its scores): ``{model}/{slot}/seed{seed}``
    (``seed`` may be a wildcard pattern such as ``"{seed}"``)."""
    return f"{model}/{slot}/seed{seed}"


def slot_seeds(cfg: Mapping[str, Any], experiment: str, entry: str) -> list[int]:
    """The seeds an experiment trains and scores a method entry with (its slot's seeds), the same on every model it
    runs the entry on: for the two entries of ``primary.compare`` the experiment's ``primary.seeds`` when set (a
    superset of its ``seeds``: more seed pairs where the question is), else the experiment's ``seeds``, kept to the
    entry's own ``seeds`` where it declares them (an entry that keeps the seeds it has); the base-model entry
    ``base`` always has the experiment's ``seeds``. ``cfg``: a completed config (experiments filled in by
    `bandpo.plan.validate`)."""
    xp = cfg["experiments"][experiment]
    primary = xp.get("primary") or {}
    if runs_primary_seeds(cfg, experiment, entry):
        return [int(s) for s in primary["seeds"]]
    own = (by_id(cfg.get("methods") or []).get(entry) or {}).get("seeds")
    return [int(s) for s in xp["seeds"] if own is None or s in own]


def runs_primary_seeds(cfg: Mapping[str, Any], experiment: str, entry: str) -> bool:
    """Whether an entry runs its experiment's ``primary.seeds`` (an entry of a primary pair with seeds of its own)."""
    primary = cfg["experiments"][experiment].get("primary") or {}
    return entry != BASE_ENTRY and bool(primary.get("seeds")) and entry in (primary.get("compare") or ())


def sequential(cfg: Mapping[str, Any], experiment: str) -> Mapping[str, Any] | None:
    """An experiment's group-sequential design (``primary.sequential``), or None."""
    return ((cfg["experiments"][experiment].get("primary") or {}).get("sequential")) or None


def look_blocks(cfg: Mapping[str, Any], experiment: str, model: str | None = None) -> list[list[int]]:
    """The seeds a sequential primary's pair adds for each look, in order: ``primary.seeds`` in blocks of k (the
    seeds of look j are those of blocks 1..j), up to the model's n_max (``model`` None: every block of the
    experiment's models); [] for an experiment without a sequential design."""
    design = sequential(cfg, experiment)
    if design is None:
        return []
    seeds = [int(s) for s in cfg["experiments"][experiment]["primary"]["seeds"]]
    models = [model] if model is not None else cfg["experiments"][experiment]["models"]
    n_max = max(int(per_model(design["n_max"], m)) for m in models)
    k = int(design["k"])
    return [seeds[i : i + k] for i in range(0, n_max, k)]


def per_model(value: float | Mapping[str, float], model: str) -> float:
    """A setting given as one number or as a mapping model -> number."""
    return float(value[model]) if isinstance(value, Mapping) else float(value)


def primary_margin(cfg: Mapping[str, Any], experiment: str, model: str) -> float:
    """The margin of an experiment's primary on a model, a fraction of the score (the config's points / 100: the one
    place where the config's unit becomes the code's); main's where the experiment declares none; NaN without one."""
    for xp_id in (experiment, MAIN):
        primary = ((cfg["experiments"].get(xp_id) or {}).get("primary")) or {}
        if primary.get("margin") is not None:
            return per_model(primary["margin"], model) / POINTS
    return float("nan")


def select_min_gain(select: Mapping[str, Any]) -> float:
    """A select rule's ``min_gain`` (config ``experiments.<id>.select``, points of mean@k), a fraction of the score;
    0 when unset."""
    return float(select.get("min_gain") or 0.0) / POINTS


def design_settings(cfg: Mapping[str, Any], experiment: str, model: str) -> dict[str, Any]:
    """The fields of `bandpo.stats.design.SequentialDesign` for a sequential primary on a model, in fractions of
    the score (`primary_margin`); n_max, alpha and beta may be given per model."""
    d = sequential(cfg, experiment)
    return {"margin": primary_margin(cfg, experiment, model), "k": int(d["k"]),
            "n_max": int(per_model(d["n_max"], model)), "planning_sd": per_model(d["planning_sd"], model) / POINTS,
            "alpha": per_model(d["alpha"], model), "beta": per_model(d["beta"], model), "spending": d["spending"],
            "futility_spending": d["futility_spending"]}  # fmt: skip


def family_margin(cfg: Mapping[str, Any], experiment: str, model: str) -> float:
    """The margin of every comparison with the control that an experiment's page shows on a model (its primary and
    its secondaries), a fraction of the score: the experiment's own ``primary.margin``, else its axis's
    (``axes.<id>.primary.margin``: an axis cell declares no primary), else main's (`primary_margin`); NaN
    without one."""
    xp = (cfg["experiments"].get(experiment)) or {}
    own = (xp.get("primary") or {}).get("margin")
    axis = (((cfg.get("axes") or {}).get(xp.get("axis") or "") or {}).get("primary") or {}).get("margin")
    if own is None and axis is not None:
        return per_model(axis, model) / POINTS
    return primary_margin(cfg, experiment, model)


# What the report reads of each experiment, as the config gives it (the primary's words, the runs it reuses from
# main, its axis and selection); an axis cell's methods too (a select rule reads them), not main's: adding a method
# entry must not rerun rule select; and the figures it names (``views``, where it names them)
REPORT_KEYS = ("description", "primary", "secondaries", "models", "seeds", "train", "reuse", "axis", "select")


@dataclass(frozen=True)
class PlannedExperiment:
    """One experiment as the report, the select rule and the decision jobs read it: its `REPORT_KEYS` as the
    config gives them (``spec``: words, ids and settings, no number to convert), and the numbers its verdicts need,
    per model, in the code's units (converted by `Study.from_config`, the one place where the config's points
    become fractions):

    * ``margins``: the margin of its comparisons with the control, a fraction of the score (`family_margin`; a
      model without one is left out);
    * ``entropy_margins``: ``primary.entropy_margin`` in nats, where declared;
    * ``clip_margins``: ``primary.clip_margin`` / `POINTS`, a fraction of the rare tokens, where declared;
    * ``designs``: `design_settings` for a primary with ``sequential`` (the fields of
      `bandpo.stats.design.SequentialDesign`, in fractions).

    Immutable: the mappings are read-only views."""

    id: str
    spec: Mapping[str, Any]
    margins: Mapping[str, float]
    entropy_margins: Mapping[str, float] | None = None
    clip_margins: Mapping[str, float] | None = None
    designs: Mapping[str, Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        for name in ("spec", "margins", "entropy_margins", "clip_margins", "designs"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    def margin(self, key: str, model: str) -> float:
        """The planned number ``key`` (``margins``, ``entropy_margins``, ``clip_margins``) on ``model``, NaN where
        none is planned."""
        value = (getattr(self, key) or {}).get(model)
        return float(value) if value is not None else float("nan")

    def design(self, model: str) -> SequentialDesign | None:
        """The sequential primary's design on ``model`` (checked when built), None without one."""
        settings = (self.designs or {}).get(model)
        return SequentialDesign(**settings) if settings is not None else None

    def to_json(self) -> dict[str, Any]:
        """The experiment as JSON (workflow/rules/report.smk passes it to the report and the select rule): the
        spec's keys, then the planned numbers, those that are set."""
        out = {**self.spec, "margins": dict(self.margins)}
        for name in PLANNED_KEYS[1:]:
            value = getattr(self, name)
            if value is not None:
                out[name] = json_ready(value)
        return out

    @classmethod
    def from_json(cls, experiment: str, data: Mapping[str, Any]) -> PlannedExperiment:
        """An experiment `to_json` wrote; ValueError when its primary states a margin in the config's points and
        the plan's number is missing (the config's experiments passed as they are)."""
        primary = data.get("primary") or {}
        for raw, planned in zip(("margin", "entropy_margin", "clip_margin", "sequential"), PLANNED_KEYS, strict=True):
            if primary.get(raw) is not None and planned not in data:
                raise ValueError(
                    f"experiment {experiment!r}: primary.{raw} without the run plan's {planned!r} (pass the "
                    "experiments of bandpo.study.report_experiments(config): the margins as fractions of the score)"
                )
        spec = {k: v for k, v in data.items() if k not in PLANNED_KEYS}
        return cls(experiment, spec, data.get("margins") or {},
                   *(data.get(k) for k in PLANNED_KEYS[1:]))  # fmt: skip


PLANNED_KEYS = ("margins", "entropy_margins", "clip_margins", "designs")


def json_ready(value: Any) -> Any:
    """Read-only views as plain dicts, for JSON."""
    if isinstance(value, Mapping):
        return {k: json_ready(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Study:
    """The experiments of a completed config as the stages after training read them (`PlannedExperiment`), by id;
    built once from the config (`from_config`) or from the JSON the workflow passes (`from_json`)."""

    experiments: Mapping[str, PlannedExperiment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "experiments", MappingProxyType(dict(self.experiments)))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> Study:
        """``cfg``: a completed config (`bandpo.plan.validate`), or the resolved config a publication recorded in
        provenance.json (margins in points there too)."""
        out = {}
        for xp_id, xp in cfg["experiments"].items():
            spec = {k: xp.get(k) for k in REPORT_KEYS} | ({"methods": xp.get("methods")} if xp.get("axis") else {})
            spec |= {"views": list(xp["views"])} if xp.get("views") else {}  # the report's figures it names
            models = list(xp.get("models") or [])
            margins = {m: family_margin(cfg, xp_id, m) for m in models}
            primary = xp.get("primary") or {}
            entropy = primary.get("entropy_margin")
            clip = primary.get("clip_margin")
            out[xp_id] = PlannedExperiment(
                xp_id, spec, {m: v for m, v in margins.items() if v == v},
                {m: per_model(entropy, m) for m in models} if entropy is not None else None,
                {m: per_model(clip, m) / POINTS for m in models} if clip is not None else None,
                {m: design_settings(cfg, xp_id, m) for m in models} if sequential(cfg, xp_id) is not None else None,
            )  # fmt: skip
        return cls(out)

    @classmethod
    def from_json(cls, data: Mapping[str, Mapping[str, Any]]) -> Study:
        return cls({xp: PlannedExperiment.from_json(xp, spec or {}) for xp, spec in data.items()})

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {xp: planned.to_json() for xp, planned in self.experiments.items()}

    def margins(self, experiment: str = MAIN) -> dict[str, float]:
        """An experiment's margin per model, fractions of the score; {} when the study has no such experiment."""
        planned = self.experiments.get(experiment)
        return dict(planned.margins) if planned is not None else {}


def report_experiments(cfg: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The experiments as the report and the select rule read them (workflow/rules/report.smk passes them as JSON):
    `Study.from_config` written as JSON (`PlannedExperiment.to_json`)."""
    return Study.from_config(cfg).to_json()
