"""Doc blocks of the publication itself, from each published folder's provenance.json: the commit its runs were
trained at, the machine and numerics they ran under, where its base models were built, and the seeds each
experiment's config gave it. What a sentence would otherwise quote by hand and lose at the next publication.

The commit in provenance.json is the checkout that ran the DAG (``git_commit``: the training commit). The commit
that added the folder to the repository is not in it (it holds the file); ``git log -1 -- results/provenance.json``
names it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bandpo.report.board import Board
from bandpo.study import look_blocks

NATIVE = "native"  # the numerics mode of a job that recorded none: the CPU's own kernels


def cpu_name(model: str | None) -> str:
    """A CPU model as the docs name it: ``Intel(R) Xeon(R) Processor`` -> ``Intel Xeon``; "an unrecorded CPU"."""
    if not model:
        return "an unrecorded CPU"
    name = re.sub(r"\((?:R|TM)\)", "", model)
    name = re.sub(r"\b(?:Processor|CPU)\b.*$", "", name)
    return " ".join(name.split())


def _article(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _and(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _stages(prov: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The numerics records of the jobs behind a publication (provenance ``numerics``: one per distinct setting and
    stage); the publishing machine's own record when there are none."""
    return list(prov.get("numerics") or []) or [prov.get("machine") or {}]


def cpus(prov: Mapping[str, Any]) -> list[str]:
    """The CPU models the publication's jobs ran on, as named (`cpu_name`), sorted."""
    return sorted({cpu_name(s.get("cpu_model")) for s in _stages(prov)})


def numerics_modes(prov: Mapping[str, Any]) -> list[str]:
    """The numerics modes the publication's jobs ran under (``fixed``, `NATIVE` where a job recorded none)."""
    return sorted({(s.get("numerics") or {}).get("mode") or NATIVE for s in _stages(prov)})


def _numerics_text(prov: Mapping[str, Any]) -> str:
    return _and([f"the {m} numerics" if m != NATIVE else "native kernels" for m in numerics_modes(prov)])


def short_commit(prov: Mapping[str, Any]) -> str:
    commit = prov.get("git_commit")
    return f"`{commit[:7]}`" if commit else "an unrecorded commit"


def publication(board: Board) -> str:
    """The published folder's run in one clause: the commit it was trained at (with uncommitted changes, if any),
    the CPU model(s) and numerics of its jobs, and the date of its publication where provenance.json records one
    (``published_on``, written by `bandpo.report.publish.provenance` since issue #55)."""
    prov = board.provenance
    changes = prov.get("code_changes") or []
    dirty = f" plus uncommitted changes to {len(changes)} file(s)" if prov.get("code_dirty") else ""
    when = f", published on {prov['published_on']}" if prov.get("published_on") else ""
    on = _and([_article(c) for c in cpus(prov)])
    return f"trained at commit {short_commit(prov)}{dirty} on {on} under {_numerics_text(prov)}{when}"


def machine(board: Board) -> str:
    """The CPU model(s) the published folder's jobs ran on, with an article: "an AMD EPYC"."""
    return _and([_article(c) for c in cpus(board.provenance)])


def published_by_its_config(folder: str, prov: Mapping[str, Any]) -> bool:
    """Whether the config recorded in a folder's provenance.json publishes that folder: a settled experiment's
    ``publish_dir`` (results/offpolicy), or a smoke profile's own results folder (``smoke_section``,
    results/real-lm-smoke); not a local run's report folder that happens to hold a provenance.json."""
    config = prov.get("config") or {}
    if config.get("publish") and config.get("publish_dir"):
        return str(config["publish_dir"]).rstrip("/").rpartition("/")[2] == folder
    return bool(config.get("smoke_section")) and config.get("profile") == folder


def published_parts(board: Board) -> list[tuple[str, Board]]:
    """(folder name, board) of every published folder under this board's folder (`published_by_its_config`)."""
    if board.folder is None:
        return []
    names = sorted(p.name for p in board.folder.iterdir()
                   if (p / "provenance.json").is_file() and (p / "leaderboard.csv").is_file())  # fmt: skip
    parts = [(name, board.part(name)) for name in names]
    return [(name, part) for name, part in parts if published_by_its_config(name, part.provenance)]


def base_models(board: Board) -> str:
    """Where the published folder's base models were built (provenance ``base_models``: each one's build machine and
    whether its weights are the bytes its build recorded), and which of them are the same bytes as a base model
    another published folder records as built on another CPU model."""
    models = board.provenance.get("base_models") or []
    if not models:
        return "no base model recorded"
    name = {m["path"]: m["path"].rstrip("/").rpartition("/")[2] for m in models}
    built = sorted({cpu_name((m.get("built_on") or {}).get("cpu_model")) for m in models})
    matches = [m.get("matches_build_record") for m in models]
    record = ("each the bytes its build recorded" if all(matches)
              else "not all the bytes their builds recorded")  # fmt: skip
    text = f"{_and(sorted(name.values()))}, built on {_and([_article(c) for c in built])}, {record}"
    same = []
    for m in models:
        for folder, part in published_parts(board):
            for other in part.provenance.get("base_models") or []:
                where = cpu_name((other.get("built_on") or {}).get("cpu_model"))
                if other.get("weights_sha256") == m.get("weights_sha256") and where not in built:
                    same.append(f"{name[m['path']]} the bytes {_article(where)} built for `results/{folder}/`")
    return text + (f" ({'; '.join(same)})" if same else "")


def published_numerics(board: Board) -> str:
    """Each published folder (this one and those under it that record their provenance), grouped by the numerics
    its jobs ran under: "`results/`, `results/offpolicy/` and `results/probe/` under the fixed numerics; ..."."""
    groups: dict[str, list[str]] = {}
    for folder, b in [("", board), *published_parts(board)]:
        groups.setdefault(_numerics_text(b.provenance), []).append(f"`results/{folder + '/' if folder else ''}`")
    return "; ".join(f"{_and(folders)} under {mode}" for mode, folders in groups.items())


def seed_range(seeds: Sequence[int]) -> str:
    """Seeds as the docs write them: a run of consecutive seeds as ``0-4``, else listed."""
    seeds = sorted(int(s) for s in seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _most_seeds(config: Mapping[str, Any], specs: Mapping[str, Mapping[str, Any]]) -> str:
    """The most seeds a group-sequential primary's pair may run on each model, as the run plan schedules them
    (`bandpo.study.look_blocks`: ``primary.seeds`` in looks of k up to the model's n_max): "tiny-s at most 20:
    0-19, tiny-m at most 15: 0-14"; one phrase, "at most 20: 0-19", when every model's are the same."""
    per_model: dict[str, list[int]] = {}
    for xp, spec in specs.items():
        if (spec.get("primary") or {}).get("sequential"):
            for model in spec.get("models") or [m["id"] for m in config.get("models") or []]:
                per_model[model] = [s for block in look_blocks(config, xp, model) for s in block]
    phrases = {model: f"at most {len(s)}: {seed_range(s)}" for model, s in per_model.items()}
    if len(set(phrases.values())) == 1:
        return next(iter(phrases.values()))
    return ", ".join(f"{model} {phrase}" for model, phrase in phrases.items())


def design_seeds(experiment: str) -> Callable[[Board], str]:
    """The seeds the published config gave an experiment (an axis: every cell ``experiment-*``, which must agree):
    "3 seeds (0-2; the primary pair 10: 0-9)", the primary pair's own ``primary.seeds`` where it has them; of a
    group-sequential primary (``primary.sequential``) the pair's seeds are the most it may run, in order, look by
    look, up to each model's n_max (`_most_seeds`): "3 seeds (0-2; the primary pair seeds until decided, tiny-s at
    most 20: 0-19, tiny-m at most 15: 0-14)" (where each model stopped: the headline's verdict cell)."""

    def block(board: Board) -> str:
        config = board.provenance.get("config") or {}
        specs = {k: v for k, v in board.experiments.items() if k == experiment or k.startswith(f"{experiment}-")}
        if not specs:
            raise KeyError(f"the published config has no experiment {experiment!r}")
        found = {tuple(v.get("seeds") or config.get("seeds") or ()) for v in specs.values()}
        pair = {tuple((v.get("primary") or {}).get("seeds") or ()) for v in specs.values()}
        sequential = any((v.get("primary") or {}).get("sequential") for v in specs.values())
        if len(found) != 1 or len(pair) != 1:
            raise ValueError(f"the cells of {experiment!r} have different seeds: {sorted(found | pair)}")
        (seeds,), (pair_seeds,) = found, pair
        text = f"{len(seeds)} seeds ({seed_range(seeds)}"
        if pair_seeds and sequential:
            text += f"; the primary pair seeds until decided, {_most_seeds(config, specs)}"
        elif pair_seeds and pair_seeds != seeds:
            text += f"; the primary pair {len(pair_seeds)}: {seed_range(pair_seeds)}"
        return text + ")"

    return block
