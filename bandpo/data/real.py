"""The paper's real data sets, normalised to the row schema of `bandpo.data.tiny_math`.

Real sets
---------
``load_real_dataset(name, path=...)`` parses local files (JSON/JSONL/Parquet, or a directory of them) in the
formats of the hub data sets named in :data:`REAL_DATASETS`; without a path it downloads through
``datasets.load_dataset`` only when ``allow_download=True`` (the GPU profile). Nothing here touches the network
by default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bandpo.data.tiny_math import PAPER_PROMPT, make_row, write_jsonl
from bandpo.grader import last_boxed


@dataclass(frozen=True)
class RealSpec:
    """Where a real data set lives on the hub and which local split file it becomes."""

    hub_id: str
    split: str  # hub split
    out_split: str  # our split name: train (training data) or test (evaluation sets)
    levels: tuple[int, ...] = field(default=())  # keep only these levels (empty: keep all)
    dedup: bool = False
    english_only: bool = False
    fields: tuple[str, ...] = ()  # fields every source row must have: the layout the loader is written for


REAL_DATASETS: dict[str, RealSpec] = {
    "dapo-math-17k": RealSpec("BytedTsinghua-SIA/DAPO-Math-17k", "train", "train", dedup=True, english_only=True),
    # MATH's 12,000-problem training split (the 7,500 train problems and the 4,500 test problems outside MATH-500,
    # whose 500 are its test split), levels 3-5; rows: problem, solution, answer, subject, level, unique_id
    "math-l3-5": RealSpec(
        "nlile/hendrycks-MATH-benchmark",
        "train",
        "train",
        levels=(3, 4, 5),
        fields=("problem", "solution", "answer", "subject", "level"),
    ),
    "aime-2024": RealSpec("HuggingFaceH4/aime_2024", "train", "test"),
    "aime-2025": RealSpec("math-ai/aime25", "test", "test"),
    "amc-2023": RealSpec("math-ai/amc23", "test", "test"),
    "math-500": RealSpec("HuggingFaceH4/MATH-500", "test", "test"),
}


def real_entry_problems(entry: Mapping[str, Any], profile: str) -> list[tuple[list[str], str]]:
    """What is wrong with a config's ``data`` entry of a real data set, as (its key path, why): an unknown name, a
    ``path`` that does not exist (a relative one, from the working folder), or neither a path nor ``download: true``
    (``profile``: the config's, named in the message)."""
    name, path = entry["name"], entry.get("path")
    if name not in REAL_DATASETS:
        return [(["name"], f"unknown real data set {name!r}; known: {', '.join(sorted(REAL_DATASETS))}")]
    if not path and not entry.get("download"):
        return [([], f"no path, and download is off (profile {profile!r}): set path to a local copy of "
                     f"{REAL_DATASETS[name].hub_id} in its format, or download: true")]  # fmt: skip
    if path and not os.path.exists(path):
        where = "" if os.path.isabs(path) else f" (relative to the working folder {os.getcwd()})"
        return [(["path"], f"{path} does not exist{where}")]
    return []


def normalize_answer(value: Any) -> str:
    """Reference answers as strings; integral floats (``27.0``, from some parquet files) become ``27``."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        s = value.strip()
        if re.fullmatch(r"-?\d+\.0+", s):
            return s.split(".")[0]
        return s
    return str(value).strip()


_PROMPT_HEAD, _PROMPT_TAIL = PAPER_PROMPT.split("{problem}")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def strip_paper_prompt(text: str) -> str:
    """Recover the bare problem from a user turn that already wraps it in the paper's (DAPO's) template."""
    t = text.strip()
    if t.startswith(_PROMPT_HEAD.strip()) and t.endswith(_PROMPT_TAIL.strip()):
        return t[len(_PROMPT_HEAD.strip()) : len(t) - len(_PROMPT_TAIL.strip())].strip()
    return t


def _parse_level(value: Any) -> int:
    if isinstance(value, int | float):
        return int(value)
    m = re.search(r"\d+", str(value or ""))
    return int(m.group()) if m else 0


def _first(row: dict, keys: Sequence[str]) -> Any:
    for k in keys:
        if k in row and row[k] is not None and row[k] != "":
            return row[k]
    return None


def normalize_real_row(name: str, row: dict, index: int) -> dict | None:
    """One source row -> our schema, or None when it has no usable problem or answer."""
    problem = _first(row, ("problem", "question", "Problem", "Question"))
    answer = _first(row, ("answer", "Answer", "final_answer"))
    solution = _first(row, ("solution", "Solution")) or ""
    if problem is None and isinstance(row.get("prompt"), list | tuple):  # verl / DAPO chat format
        users = [m for m in row["prompt"] if isinstance(m, dict) and m.get("role", "user") == "user"]
        if users:
            problem = strip_paper_prompt(str(users[-1].get("content", "")))
    elif problem is None and isinstance(row.get("prompt"), str):  # open-r1's processed DAPO: prompt + solution
        problem = strip_paper_prompt(row["prompt"])
        if answer is None and solution:
            answer, solution = solution, ""
    if answer is None and isinstance(row.get("reward_model"), dict):
        answer = row["reward_model"].get("ground_truth")
    if answer is None and solution:
        answer = last_boxed(str(solution))
    if problem is None or answer is None or str(problem).strip() == "":
        return None
    problem = str(problem).strip()
    kind = _first(row, ("type", "subject")) or name
    rid = _first(row, ("unique_id", "id", "ID", "problem_idx"))
    if rid is None and isinstance(row.get("extra_info"), dict):
        rid = row["extra_info"].get("index")
    return make_row(
        f"{name}-{rid if rid is not None else index}",
        problem,
        normalize_answer(answer),
        str(solution),
        _parse_level(row.get("level")),
        str(kind),
        PAPER_PROMPT.format(problem=problem),
    )


def _local_files(name: str, path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl", ".parquet"))
        if not files:
            raise FileNotFoundError(f"{name}: no .json/.jsonl/.parquet files under its path {path}")
        return files
    if not path.exists():
        raise FileNotFoundError(f"{name}: its path {path} does not exist")
    return [path]


def _iter_source_rows(name: str, spec: RealSpec, path: str | os.PathLike | None, allow_download: bool):
    # lazy: datasets takes about a second to import; the run plan (Snakemake's start) reads this module's registry
    from datasets import load_dataset

    if path is not None:
        files = _local_files(name, Path(path))
        builder = "parquet" if all(f.suffix == ".parquet" for f in files) else "json"
        if builder == "json" and any(f.suffix == ".parquet" for f in files):
            raise ValueError(f"mixed parquet and json files under {path}")
        ds = load_dataset(builder, data_files=[str(f) for f in files], split="train")
        yield from ds
        return
    if not allow_download:
        raise RuntimeError(
            f"{name}: no local path and downloads are off: set the data set's path (a local copy of {spec.hub_id} in "
            "its format) or download: true in the config (by hand: --path FILE or --download)"
        )
    yield from load_dataset(spec.hub_id, split=spec.split)


def load_real_dataset(
    name: str,
    path: str | os.PathLike | None = None,
    allow_download: bool = False,
    limit: int | None = None,
) -> list[dict]:
    """Load one of :data:`REAL_DATASETS` as rows of our schema.

    ``path``: a local file or folder in the hub set's own format (overrides the hub); a row without one of the
    spec's ``fields`` is an error naming the field. Level filtering (MATH 3-5), de-duplication and the English
    filter (DAPO) are applied as in the paper's protocol: a problem whose text (stripped, after removing the
    paper's prompt template) was seen before is dropped, and so is one that contains any CJK character (Chinese,
    Japanese kana, Hangul), which is how DAPO-Math-17k's non-English problems are told apart.
    """
    if name not in REAL_DATASETS:
        raise ValueError(f"unknown data set {name!r}; known: {sorted(REAL_DATASETS)}")
    spec = REAL_DATASETS[name]
    rows: list[dict] = []
    seen: set[str] = set()
    for i, src in enumerate(_iter_source_rows(name, spec, path, allow_download)):
        missing = [f for f in spec.fields if f not in src]
        if missing:
            raise ValueError(
                f"{name}: source row {i} ({path or spec.hub_id}) has no field(s) {', '.join(map(repr, missing))}; "
                f"expected the layout of {spec.hub_id}: {', '.join(spec.fields)}"
            )
        row = normalize_real_row(name, dict(src), i)
        if row is None:
            continue
        if spec.levels and row["level"] not in spec.levels:
            continue
        if spec.english_only and _CJK.search(row["problem"]):
            continue
        if spec.dedup:
            if row["problem"] in seen:
                continue
            seen.add(row["problem"])
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):  # some sources repeat ids: fall back to positions
        for i, r in enumerate(rows):
            r["id"] = f"{name}-{i}"
    return rows


def write_real_dataset(name: str, out_dir: str | os.PathLike, **kwargs: Any) -> Path:
    rows = load_real_dataset(name, **kwargs)
    return write_jsonl(Path(out_dir) / f"{REAL_DATASETS[name].out_split}.jsonl", rows)


# --------------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------------
