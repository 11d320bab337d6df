"""Hand-written prose carries no published number (issue #55, item 7).

A sentence that quotes a number of a run goes stale with the next publication; every such number is a generated
block (``<!-- generated:NAME -->``, `docs.blocks`), which ``python -m docs.blocks`` rewrites from
``results/`` and `tests/unit/test_docs.py` checks. This test scans the hand-written text for result-like numbers
and fails with the list, ``file:line: kind 'text'``.

**What is scanned**: README.md, docs/*.md and the hand-written pages under results/ (results/README.md). The other
Markdown pages under results/ are written whole by the report from the published tables (`GENERATED_PAGES`:
leaderboard.md by `bandpo.report.build`, the smoke section by `bandpo.report.smoke`, beside.md by
`bandpo.report.compare`): generated text, not scanned (their numbers are checked by tests/unit/test_report.py,
which rebuilds leaderboard.md from the tables, and tests/unit/test_docs.py). benchmarks/ is not scanned either:
benchmarks/README.md and benchmarks/CHANGELOG.md are measurement records, dated and kept as measured.

**What is not prose**: generated blocks, fenced code blocks, inline code spans that are code (`looks_like_code`:
commands, options, paths, calls, config keys and values as the files spell them, identifiers:
tests/unit/test_doc_references.py checks what they name; a span that holds a result-like number and looks like none
of these, `0.67` or `n = 15`, is prose in code font and is scanned, and so is a span that holds only a commit hash or
a date), link targets and URLs, HTML comments, arXiv identifiers.

**Result-like numbers** (`PATTERNS`): decimals (0.17, 12.4, +0.81), percentages, intervals ([+0.12, +1.49]), speed
ratios (2.46x), durations (144.2 minutes, 0.6 s), amounts in points (about 20 points), counts of seeds, seed pairs,
runs and jobs (3 seeds, 20 seed pairs, seeds 10-14), pairs (14 pairs), sample sizes (n = 15), "k of m" (6 of 10),
the same written as words (six of ten seeds, five pairs) and fractions in words (about a quarter, two thirds), dates
(2026-12-04) and commit hashes (ab864f4).

**Allowed** (`ALLOWED`): constants of the design, the method, the statistics and the paper's protocol, versions and
mathematical facts, each with its reason: a number that does not change when a run is made again. A number of a
run is never allowed here: it becomes a generated block, or the sentence says what to read instead (a table, a
column, benchmarks/CHANGELOG.md for the history of the measurements).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from docs.blocks import BLOCK

ROOT = Path(__file__).resolve().parents[2]
# Pages under results/ that the report writes whole (not hand-written): their text is generated
GENERATED_PAGES = ("leaderboard.md", "beside.md", "smoke_section.md")

CONTEXT = 60  # characters either side of a hit that an allowed constant's context may name
FENCE = re.compile(r"^ *```[^\n]*\n.*?^ *```[ \t]*$", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
NOT_PROSE = [
    re.compile(r"<!--.*?-->", re.S),  # comments (a generated block's markers are gone with the block)
    re.compile(r"\]\([^)\s]*\)"),  # link targets
    re.compile(r"<?https?://[^\s)>]+>?"),  # URLs
    re.compile(r"\barXiv:? ?\d{4}\.\d{4,5}\b"),  # arXiv identifiers
]
# an inline code span that is code: a path or URL, a call or a mapping, an option, a file, an identifier, an
# assignment as code writes it (no spaces), a key: value, a shell variable or quote, a command's short option
CODE = re.compile(
    r"[/(){}\[\]<>$'\"_\\|#@*]|--|\.(?:py|ya?ml|json|csv|md|smk|sh)\b|(?:^|\s)-[A-Za-z]"
    r"|\w=|=\w|^[\w.-]+:(?:\s|$)|\w:\w"
)
COMMIT = r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"
DATE = r"20\d\d-\d\d-\d\d"
NUMBER = r"[-+−±]?\d+(?:\.\d+)?"
# numbers written as words: a count or a fraction of a run's result reads the same spelled out ("six of ten seeds",
# "five pairs", "about a quarter"); "one" and "two" counting alone are the structure of a sentence ("one seed",
# "the two runs of a pair", "one of two words"), not a result, and are matched only as "k of m" with a counted noun
MANY = (
    r"(?:three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|"
    r"eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred)"
)
WORD = rf"(?:one|two|{MANY})"
WORDS = rf"{WORD}(?:[- ]{WORD})?"
COUNTED = r"(?:fresh |more |paired |trained |seed )?(?:pairs?|seeds?|runs?|jobs?|comparisons?|entries|looks?)"
PATTERNS = {
    "interval": rf"\[{NUMBER}, {NUMBER}\]",
    "ratio": r"(?<![\w.])\d+(?:\.\d+)?[x×](?![\w-])",
    "percentage": r"(?<![\w.])\d+(?:\.\d+)? ?%",
    "duration": r"(?<![\w.])\d+(?:\.\d+)?(?:[-–]\d+(?:\.\d+)?)? ?(?:CPU-minutes|minutes?|min|seconds?|s|ms|hours?|h)\b",
    "count": r"(?<![\w.])\d+(?:[-–]\d+| to \d+)? (?:fresh |more |paired |trained )?"
    r"(?:seed pairs?|paired seed differences|seeds?|runs?|jobs?)\b",
    "seeds": r"\bseeds? \d+[-–]\d+\b",
    "pairs": r"(?<![\w.])\d+(?:[-–]\d+| to \d+)? (?:fresh |more |paired )?pairs?\b",
    "n =": r"(?<![\w.])(?:n|N|n_max|n_j) ?= ?\d+\b(?!\.\d)",
    "k of m": r"(?<![\w.-])\d+ of (?:its |the |their |all )?\d+\b(?![.,]\d)",
    "words": rf"(?i:\b(?:two|{MANY})(?:[- ]{WORD})? of (?:its |the |their |all )?{WORDS}\b(?: {COUNTED}\b)?"
    rf"|\b{WORDS} of (?:its |the |their |all )?{WORDS} {COUNTED}\b|\b{MANY}(?:[- ]{WORD})? {COUNTED}\b)",
    "word fraction": r"(?i:\b(?:a|one|two|three|four|five|six|seven|eight|nine) "
    r"(?:quarters?|thirds?|fifths?|sixths?|eighths?|tenths?)\b"
    r"|\b(?:about|roughly|nearly|almost|over|under|more than|less than|at least) (?:a |one )?half\b)",
    "points": rf"(?<![\w.]){NUMBER}(?:[-–]\d+(?:\.\d+)?)? (?:percentage )?points?\b",
    "decimal": r"(?<![\w.])[-+−]?\d+\.\d+(?![\w.]*\d)",
    "date": rf"\b{DATE}\b",
    "commit": rf"\b{COMMIT}\b",
}


@dataclass(frozen=True)
class Allowed:
    """A constant the prose may state: ``token`` (a regex the whole hit must match), where ``context`` (a regex) is
    found in the text around it (`CONTEXT` characters either side; None: anywhere), and why it is no result."""

    token: str
    context: str | None
    reason: str


ALLOWED = (
    # the statistics of the design (bandpo.stats): levels, power, margins, windows, and their maths
    Allowed(
        r"(?:95|90|80)%",
        None,
        "confidence levels and power of the design: 95% intervals, the 90% interval of "
        "the equivalence test (two one-sided tests at 5%), 80% power for the MDE",
    ),
    Allowed(r"5%", None, "the test level α = 0.05 (and the tolerance a test gives the budget model)"),
    Allowed(r"0\.05", None, "α = 0.05; BandPO's trust-region radius δ = 0.05 (the paper's); the atlas grid's step"),
    Allowed(r"0\.975|0\.80?", r"t\(|power", "the quantile and the power in the t formulas: t(0.975, n-1), power 0.8"),
    Allowed(r"0\.9", r"stability 0\.9", "the stability a verdict's design targets (issue #67: stability 0.9 at δ)"),
    Allowed(
        r"4\.30|1\.96",
        r"quantile|normal",
        "t(0.975, 2) against the normal quantile: maths (test_docs.py::test_statistics_claims recomputes it)",
    ),
    Allowed(r"5\.36|5\.65|77%", r"SD / √3|power, not", "the shortcut's and the exact MDE at n = 3: maths"),
    Allowed(r"n = 3", r"4\.30 at|it gives 5\.36", "the worked examples of the t quantile and the MDE at n = 3: maths"),
    Allowed(r"\[0, 1\]", r"cut to", "the range of a score"),
    Allowed(r"10%", r"last 10% of", "the window of the final entropy: the last 10% of steps (design)"),
    Allowed(r"10%|0\.10", r"not better|p_not_better|/ m", 'the verdict rule\'s β = 0.10, the level of "not better"'),
    Allowed(r"0\.02", r"nats|margin", "the entropy margin, fixed in the config before the runs"),
    Allowed(r"0\.10|0\.85|0\.9", r"β|power|target", "the verdict rule's β, the power 1 - β and the stability target"),
    Allowed(r"5 seed pairs", r"look every", "the verdict rule's looks: k = 5 pairs (config/config.yaml)"),
    Allowed(
        r"5 seed pairs|5 points|15%|60%",
        r"one look|at least|between",
        "#56's floor of pairs, its pilot's "
        "bar and its task's band of base mean@8 (the issue's design, config/real-lm-compare.yaml)",
    ),
    Allowed(r"120 minutes", r"budget", "the publication budget of issue #55"),
    Allowed(
        r"0\.5 points",
        r"lower by",
        "the clip margin of the real LM's mechanism secondaries, declared in "
        "config/real-lm-next.yaml before the next comparison's runs (issue #67, item 4)",
    ),
    Allowed(
        r"10 seed pairs",
        r"pilot's trainer settings",
        "the next real-LM comparison's design (config/real-lm-next.yaml, declared before its runs)",
    ),
    Allowed(r"0\.5", r"threshold", "a method's default threshold, from its framework (docs/methods.md's rules table)"),
    Allowed(r"90 minutes", r"budget|2 cores", "the budget of issue #21"),
    Allowed(r"±?2 points", None, "the equivalence margin and the MDE target (the config's margin, MDE_TARGET)"),
    Allowed(
        r"\d\.\d\d",
        r"\| (?:main|separation) \| tiny-[sm] \| [\d.]+ \| \d+ \| [\d.]+ \|",
        "the plan of issue "
        "#37's seed pairs (docs/statistics.md): the SDs assumed and the MDEs planned before that run, a record "
        "of the plan that no later run changes (test_docs.py::test_planned_seeds_table_recomputes)",
    ),
    # the methods and the protocol: settings, defaults and what follows from them
    Allowed(
        r"0\.2|0\.20|0\.28|0\.16",
        None,
        "clip settings: GRPO's eps 0.2 / 0.2, Clip-Higher's 0.2 / 0.28, "
        "DCPO's 0.16 / 0.20, verl's clip_ratio 0.2; p < 0.2 is the lowest old-probability bucket (design)",
    ),
    Allowed(r"0\.8|1\.2|1\.28", None, "the ratio bounds 1 ± eps of GRPO and Clip-Higher; power 0.8"),
    Allowed(r"\[0\.8, 1\.28?\]", None, "the clip intervals of GRPO and Clip-Higher"),
    Allowed(r"0\.0071|0\.0056", r"p <|δ / 9", "where Band's cap binds, derived from δ and the cap: maths"),
    Allowed(
        r"0\.5",
        r"Bernoulli|at 4,352",
        "the random reward's probability (design); verl's overlong penalty "
        "halfway into its buffer (the paper's protocol)",
    ),
    Allowed(r"\[0\.5, 1\.5\]|0\.005", r"every 0\.005|every 0\.05", "the atlas's synthetic grid (its design)"),
    Allowed(
        r"1\.0",
        None,
        "unit settings: temperature, top_p, gradient clip, the overlong factor, a correct "
        "answer's reward, SAPO's tau_pos, DRO's beta",
    ),
    Allowed(r"0\.0", None, "zero settings: the KL coefficient, the warmup ratio, the overlong penalty's floor"),
    Allowed(
        r"0\.1|0\.01|0\.001",
        None,
        "protocol and method settings: weight decay 0.1 / 0.01, the KL "
        "coefficient 0.001, KL-Cov's ppo_kl_coef 0.1, p < 0.1 = 1 / the dual clip c; example probabilities",
    ),
    Allowed(r"0\.9", r"p = 0\.9", "an example probability (docs/band-operator.md)"),
    Allowed(r"1\.05", r"tau_neg", "SAPO's tau_neg (verl's default)"),
    Allowed(r"3\.0|20\.0", r"default 3\.0|20\.0 fallback", "verl's clip_ratio_c default and fallback"),
    Allowed(r"10\.0", r"cap|upper_bound_max|method's \(10\.0\)|dual-clip", "Band's cap and the dual clip c (settings)"),
    Allowed(r"0\.0005|0\.0001", r"learning rate", "the learning rates of TrainConfig (docs/protocol-fields.md)"),
    Allowed(r"n = 32", r"T = 1\.0", "the paper's validation samples a problem (docs/paper-protocol.md)"),
    Allowed(r"3 pairs", r"at least 3 pairs", "the adoption rule's floor of pairs on the real LM (declared)"),
    Allowed(r"1\.5", r"Qwen-1\.5B", "a model's name"),
    # versions
    Allowed(r"3\.10", r"Python", "the Python version required"),
    Allowed(r"22\.05", r"SLURM", "the SLURM version the profile ran on"),
    Allowed(r"0\.6", r"plugin 0\.6\.x", "a plugin's version"),
    Allowed(r"1\.16", r"TRL", "TRL's version"),
    # constants of code and tools (time budgets, poll intervals, sampling intervals)
    Allowed(r"120 s", r"SLURM's default|>= 120 s", "SLURM's setting"),
    Allowed(r"2 s", r"every 2 s|quiet window", "verl's poll interval and the rollout server's quiet window (code)"),
    Allowed(r"0\.05 s", r"polling every", "PollingReplayBuffer's poll interval (code)"),
    Allowed(r"0\.01 s", r"queue had not grown", "the rollout server's old batch trigger (code, as it was)"),
    Allowed(r"0\.8 s", r"first budget", "the grader's first time budget per item (code)"),
    Allowed(r"600 s", r"wall-clock guard", "the grader's default wall-clock guard against a hung worker (code)"),
    Allowed(r"0\.5 s|15 s|30 s", r"Snakemake's benchmark|then every 30 s|up to 30 s", "how Snakemake samples CPU time"),
    Allowed(r"4x", r"main's steps|its steps|main's\)", "the horizon's design: 4 times main's steps (its config)"),
    Allowed(r"25%|0\.75", r"paired SD falls", "the adoption rule of common random numbers (config/crn-check.yaml)"),
    Allowed(r"seeds 0-9", r"at main's settings, seeds 0-9", "crn-check's seeds (config/crn-check.yaml)"),
)


@dataclass(frozen=True)
class Hit:
    doc: str
    line: int
    kind: str
    text: str
    context: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.kind} {self.text!r}"


def prose_files() -> list[Path]:
    """README.md, docs/*.md and the hand-written pages under results/ (every .md there but `GENERATED_PAGES`)."""
    results = [p for pattern in ("*.md", "*/*.md") for p in (ROOT / "results").glob(pattern)]
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted(p for p in results if p.name not in GENERATED_PAGES)]  # fmt: skip


def _blank(m: re.Match) -> str:
    return re.sub(r"[^\n]", " ", m.group(0))


def looks_like_code(span: str) -> bool:
    """Whether an inline code span is code (`CODE`: a command, an option, a path, a call, a config key or value as
    the files spell them, an identifier) or holds no result-like number; else it is prose in code font (`0.67`,
    `n = 15`) and is scanned."""
    return bool(CODE.search(span)) or not any(re.search(p, span) for p in PATTERNS.values())


def prose(text: str) -> str:
    """``text`` with everything that is not hand-written prose blanked (lines and columns kept)."""
    text = BLOCK.sub(_blank, text)
    text = FENCE.sub(_blank, text)
    for pattern in NOT_PROSE:
        text = pattern.sub(_blank, text)

    def span(m: re.Match) -> str:  # code is not prose; a commit, a date or a number of a run in a span still is
        keep = re.fullmatch(rf"{COMMIT}|{DATE}", m.group(1)) or not looks_like_code(m.group(1))
        return m.group(0) if keep else _blank(m)

    return SPAN.sub(span, text)


def hits(doc: str, text: str) -> list[Hit]:
    """The result-like numbers of ``text``'s prose, an overlapping match kept once (the first, then the longest). A
    sentence wraps, so the text is matched with its line breaks read as spaces; ``context`` is the text around the
    hit (what `ALLOWED` reads)."""
    flat = prose(text).replace("\n", " ")
    found = sorted((m.start(), -m.end(), kind, m.group(0)) for kind, pattern in PATTERNS.items()
                   for m in re.finditer(pattern, flat))  # fmt: skip
    out, end = [], -1
    for start, neg_end, kind, token in found:
        if start < end:
            continue
        end = -neg_end
        context = flat[max(0, start - CONTEXT) : end + CONTEXT]
        out.append(Hit(doc, text.count("\n", 0, start) + 1, kind, token.strip(), " ".join(context.split())))
    return out


def allowed(hit: Hit) -> Allowed | None:
    for a in ALLOWED:
        if re.fullmatch(a.token, hit.text) and (a.context is None or re.search(a.context, hit.context)):
            return a
    return None


def test_prose_carries_no_published_number():
    found = []
    for path in prose_files():
        doc = str(path.relative_to(ROOT))
        found += [h for h in hits(doc, path.read_text(encoding="utf-8")) if allowed(h) is None]
    assert not found, (
        f"{len(found)} result-like number(s) in hand-written prose (make each a generated block, "
        "`docs.blocks`, or reword; a constant of the design goes into ALLOWED with its reason):\n"
        + "\n".join(map(str, found))
    )


def test_the_scan_finds_the_sentences_that_went_stale():
    """The sentences of issue #55 that went stale are each found; generated blocks, code, links and the allowed
    constants are not."""
    stale = (
        "published by commit ab864f4 on the results/ (2026-12-04); 0.17 nats, from about 0.42 at step 1;\n"
        "the probe's 12.4 points at 5 seeds would need about 137 seed\npairs; 20 seed pairs fixed beforehand "
        "(final mean@8 +0.81 points [+0.12, +1.49]); seeds 3-7; took 2.46x longer, 65.7 minutes; 15% less time.\n"
    )
    found = [(h.kind, h.text) for h in hits("x.md", stale)]
    assert found == [
        ("commit", "ab864f4"), ("date", "2026-12-04"), ("decimal", "0.17"), ("decimal", "0.42"),
        ("points", "12.4 points"), ("count", "5 seeds"), ("count", "137 seed pairs"), ("count", "20 seed pairs"),
        ("points", "+0.81 points"), ("interval", "[+0.12, +1.49]"), ("seeds", "seeds 3-7"), ("ratio", "2.46x"),
        ("duration", "65.7 minutes"), ("percentage", "15%"),
    ]  # fmt: skip
    assert [h.line for h in hits("x.md", stale)][6] == 2  # a count that wraps is found, on the line it starts
    clean = (
        "<!-- generated:seeds-main -->3 seeds (0-2)<!-- /generated:seeds-main --> `--steps 0.5` "
        "[text](results/2026-12-04.md) (arXiv 2603.04918) GRPO's eps 0.2 / 0.28 at 95%, T = 1.0\n"
        "```bash\npython x.py --lr 0.0005  # 3 seeds\n```\n"
    )
    assert [h for h in hits("x.md", clean) if allowed(h) is None] == []
    assert [(h.kind, h.text) for h in hits("x.md", "commit `3c287b2`, on `2026-12-05`")] == [
        ("commit", "3c287b2"), ("date", "2026-12-05")]  # fmt: skip


def test_generated_pages_are_written_by_the_report():
    """The pages under results/ that the scan leaves out are those the report writes whole (named by its code or by
    the workflow rule that writes them with it: ``smoke_section.md``, `bandpo.report smoke --out`)."""
    code = [*(ROOT / "bandpo" / "report").rglob("*.py"), *(ROOT / "workflow" / "rules").glob("*.smk")]
    source = "".join(p.read_text(encoding="utf-8") for p in code)
    for name in GENERATED_PAGES:
        assert name in source, name
    assert (ROOT / "results" / "README.md") in prose_files()


@pytest.mark.parametrize(
    "kind, sentence, token, constant",
    [
        # each new kind: a sentence of a run it catches, and a constant of the design beside it that it leaves alone
        ("pairs", "the verdict came after 14 pairs, not 10 pairs", "14 pairs", "at least 3 pairs of at least 24 steps"),
        ("n =", "tiny-m stopped at n = 15 with its interval", "n = 15", "(4.30 at n = 3 against the normal 1.96)"),
        ("k of m", "6 of 10 seeds favour BandPO-KL", "6 of 10", "the `seeds-main` block, tiny-s at most 20: 0-19"),
        ("words", "BandPO-KL won six of ten seeds", "six of ten seeds", "one seed, one base model, one of two words"),
        ("words", "the last look added five pairs", "five pairs", "the two runs of a pair draw the same number"),
        ("word fraction", "it closes about a quarter of the gap", "a quarter", "a look every 5 seed pairs"),
        ("word fraction", "two thirds of the runs collapsed", "two thirds", "α = 0.05 at one side"),
    ],
)
def test_each_new_pattern_catches_a_run_and_not_a_constant(kind, sentence, token, constant):
    assert (kind, token) in [(h.kind, h.text) for h in hits("x.md", sentence)]
    assert [h for h in hits("x.md", constant) if allowed(h) is None] == []


def test_code_spans_are_scanned_unless_they_are_code():
    """A span that holds a result-like number and is no code (`0.67`, `n = 15`) is prose in code font; commands,
    options, paths, calls, identifiers and config keys and values as the files spell them are not."""
    text = "stability `0.67`, stopped at `n = 15`, `6 of 10` seeds, `14 pairs`"
    assert [(h.kind, h.text) for h in hits("x.md", text)] == [
        ("decimal", "0.67"), ("n =", "n = 15"), ("k of m", "6 of 10"), ("pairs", "14 pairs")]  # fmt: skip
    code = ("`--steps 0.5` `n_max: {tiny-s: 20}` `margin: 2.0` `config/config.yaml` `n=15` `python -m x 3 seeds` "
            "`stability(0.67)` `mean@8_diff` `seeds: [0, 1, 2]` `results/real-lm/`")  # fmt: skip
    assert [(h.kind, h.text) for h in hits("x.md", code)] == []
    assert looks_like_code("python -m docs.blocks") and not looks_like_code("0.67")
