"""Every reference the documentation makes to something of this repository exists.

The docs (README.md, docs/*.md, workflow/README.md, benchmarks/README.md, results/README.md) name modules, scripts,
configs and Snakemake rules; a reorganisation that moves one leaves the text behind. Extracted precisely, not by
guessing at prose:

* **paths** in inline code spans (`` `bandpo/methods/band.py` ``, `` `config/gpu.yaml` ``, `` `.ci/run` ``, a
  glob such as `` `workflow/rules/*.smk` ``): a token of a span that starts with one of `PATH_ROOTS` must exist,
  relative to the repository root (placeholders with ``{``, ``<`` or ``...`` are skipped);
* **modules**: every ``python -m bandpo...`` command (in code spans and fenced blocks) must name a module of the
  package, and every dotted ``bandpo.x.y`` in a code span a module, or a name defined at the top of one (read from
  its source; nothing is imported);
* **scripts** run as ``python path/to/script.py`` and configs given as ``--configfile config/x.yaml`` in fenced
  blocks (the code spans are covered above; a fenced block may show a file the reader is to write, e.g. a rule file
  of their own, so only commands are checked there);
* **Snakemake rules** named as such: ``rule `x` ``, ``rules `x`, `y` and `z` ``, `` `x` rule `` / `` `x` job ``,
  `` `rule x` ``, and the rules listed for a ``workflow/rules/*.smk`` file in a table row of its files (spans
  outside parentheses). Names are lower-case identifiers (a selection rule such as ``largest-learning-compared``
  is not a Snakemake rule); they must be among the ``rule NAME:`` (or ``checkpoint NAME:``) definitions of the
  Snakefile and workflow/rules/*.smk, or the main experiment's evaluation rules named by ``group_rule_name("...", ...)``
  (with the ``_primary`` suffix of its primary pair's rule where that pair runs seeds of its own: ``primary.seeds``).

Every missing reference is listed in the failure with its file and line.
"""

from __future__ import annotations

import ast
import importlib.machinery
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
    "workflow/README.md",
    "benchmarks/README.md",
    "results/README.md",
]
PATH_ROOTS = ("bandpo/", "benchmarks/", "workflow/", ".ci/", "config/", "tests/", "profiles/")
PLACEHOLDER = re.compile(r"[{}<>]|\.\.\.|…")
FENCE = re.compile(r"^ *```[^\n]*\n.*?^ *```[ \t]*$", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
PYTHON_M = re.compile(r"\bpython3? -m (bandpo(?:\.\w+)*)\b(?!\.<)")
PYTHON_SCRIPT = re.compile(r"\bpython3? ((?:benchmarks|workflow|tests|\.ci|bandpo)/[\w./-]+\.py)\b")
CONFIGFILE = re.compile(r"--configfile[ =](config/[\w./-]+\.ya?ml)\b")
DOTTED = re.compile(r"^bandpo(?:\.\w+)+")
RULE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
# "rule `x`", "rules `x`, `y` and `z`" (the spans after the word), "`x` rule", "`x` jobs"
RULES_BEFORE = re.compile(r"\b[Rr]ules? ((?:`[^`\n]+`(?:,? (?:and |or )?|/| / |, )?)+)")
RULE_AFTER = re.compile(r"`([^`\n]+)` (?:rules?|jobs?)\b")


@dataclass(frozen=True)
class Ref:
    doc: str
    line: int
    kind: str  # path, module, rule
    ref: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.kind} {self.ref!r}"


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _without_fences(text: str) -> str:
    """The text with fenced code blocks blanked (newlines kept, so positions keep their line numbers)."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _spans(text: str):
    """(position, content) of every inline code span outside fenced blocks, within one paragraph."""
    for m in SPAN.finditer(_without_fences(text)):
        if "\n\n" not in m.group(1):
            yield m.start(1), m.group(1)


def _clean(token: str) -> str:
    token = token.split("::")[0]  # tests/test_x.py::test_name
    return token.strip("\"'()[],;:").rstrip(".")


def references(doc: str, text: str) -> list[Ref]:
    refs: list[Ref] = []
    for pos, span in _spans(text):
        for token in span.split():
            token = _clean(token)
            if PLACEHOLDER.search(token):
                continue
            if token.startswith(PATH_ROOTS):
                refs.append(Ref(doc, _line(text, pos), "path", token))
            elif (m := DOTTED.match(token)) and not token[m.end() :].startswith(".<"):
                refs.append(Ref(doc, _line(text, pos), "module", m.group(0)))
        if m := re.fullmatch(r"rule (\w+)", span.strip()):
            refs.append(Ref(doc, _line(text, pos), "rule", m.group(1)))
    for m in PYTHON_M.finditer(text):
        refs.append(Ref(doc, _line(text, m.start(1)), "module", m.group(1)))
    for fence in FENCE.finditer(text):
        for pattern in (PYTHON_SCRIPT, CONFIGFILE):
            for m in pattern.finditer(fence.group(0)):
                refs.append(Ref(doc, _line(text, fence.start() + m.start(1)), "path", m.group(1)))
    prose = _without_fences(text)
    for m in RULES_BEFORE.finditer(prose):
        for s in re.finditer(r"`([^`\n]+)`", m.group(1)):
            if RULE_NAME.match(s.group(1)):
                refs.append(Ref(doc, _line(text, m.start(1) + s.start(1)), "rule", s.group(1)))
    for m in RULE_AFTER.finditer(prose):
        if RULE_NAME.match(m.group(1)):
            refs.append(Ref(doc, _line(text, m.start(1)), "rule", m.group(1)))
    refs += _rule_table_refs(doc, text)
    return refs


def _rule_table_refs(doc: str, text: str) -> list[Ref]:
    """A files table's row ``| `workflow/rules/x.smk` | `rule_a` (...), `rule_b` (...) |``: the spans of its second
    cell outside parentheses name the file's rules."""
    refs = []
    for m in re.finditer(r"^\| `workflow/rules/[\w-]+\.smk` \|(.*)\|[ \t]*$", text, re.M):
        cell, depth, i = m.group(1), 0, 0
        while i < len(cell):
            c = cell[i]
            if c == "`":
                end = cell.index("`", i + 1)
                name = cell[i + 1 : end]
                if depth == 0 and RULE_NAME.match(name):
                    refs.append(Ref(doc, _line(text, m.start(1) + i), "rule", name))
                i = end
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
    return refs


# ----------------------------------------------------------------------------------------------------------------
# What exists


@cache
def rule_names() -> frozenset[str]:
    names = set()
    for path in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]:
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"^\s*(?:rule|checkpoint)\s+(\w+)\s*:", text, re.M))
        for kind in re.findall(r"\bgroup_rule_name\(\s*\"(\w+)\"", text):  # the main experiment's rule names
            names |= {kind, f"{kind}_primary"}  # its primary pair's, where the pair runs seeds of its own
    return frozenset(names)


def module_spec(name: str):
    """The spec of module ``name`` of this checkout's package, found by the import system without importing
    anything (each parent's submodule_search_locations); None if there is no such module."""
    parts = name.split(".")
    spec = importlib.machinery.PathFinder.find_spec(parts[0], [str(ROOT)])
    for i in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), spec.submodule_search_locations)
    return spec


@cache
def top_level_names(origin: str) -> frozenset[str] | None:
    """Names a module defines at its top (functions, classes, assignments, imports, also inside top-level if / try
    blocks); None when it defines a module ``__getattr__`` (anything may exist)."""
    tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    return None if "__getattr__" in names else frozenset(names)


def missing_module(dotted: str) -> str | None:
    """Why ``dotted`` (a module, or a module's top-level name and attributes of it) does not exist; None if it does."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        spec = module_spec(".".join(parts[:n]))
        if spec is not None:
            break
    else:
        return "no such module"
    if n == len(parts):
        return None
    names = top_level_names(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    if names is not None and parts[n] not in names:
        return f"module {'.'.join(parts[:n])} has no submodule or top-level name {parts[n]!r}"
    return None


def missing(ref: Ref) -> str | None:
    if ref.kind == "path":
        if "*" in ref.ref:
            return None if any(ROOT.glob(ref.ref)) else "no file matches"
        return None if (ROOT / ref.ref).exists() else "no such file or folder"
    if ref.kind == "module":
        return missing_module(ref.ref)
    if ref.kind == "rule":
        return None if ref.ref in rule_names() else "no such Snakemake rule"
    raise AssertionError(ref.kind)


def all_references() -> list[Ref]:
    refs = []
    for doc in DOC_FILES:
        refs += references(doc, (ROOT / doc).read_text(encoding="utf-8"))
    return refs


# ----------------------------------------------------------------------------------------------------------------
# Tests


def test_every_reference_in_the_docs_exists():
    refs = all_references()
    assert len({r.kind for r in refs}) == 3 and len(refs) > 100  # the extraction finds something of each kind
    broken = [f"{ref}: {why}" for ref in refs if (why := missing(ref)) is not None]
    assert not broken, f"{len(broken)} reference(s) in the docs name nothing of this repository:\n" + "\n".join(broken)


def test_extraction_is_precise():
    """What counts as a reference, on a made-up page (line numbers included); prose is never guessed at."""
    page = """\
See `bandpo/methods/band.py` and `python -m bandpo.report build`; `bandpo.methods.resolve(name)` resolves.
The rule `train` and rules `select`, `report` and `publish`; the `eval_group` jobs. `rule all`.
Not references: the rule `largest-learning-compared`, the `COMPACT_FRAC` rule, `results/{profile}/runs/`,
`python -m bandpo.<name>`, a train rule, bandpo/not/in/code.py.

```python
include_rules: [workflow/rules/my_trainer.smk]
"python benchmarks/bench_band.py --configfile config/smoke.yaml"
```

| path | what |
|---|---|
| `workflow/rules/train.smk` | `train` (`python -m bandpo.train`), or `train_verl` + `merge_verl` (`trainer: verl`) |
"""
    got = {(r.line, r.kind, r.ref) for r in references("page.md", page)}
    assert got == {
        (1, "path", "bandpo/methods/band.py"),
        (1, "module", "bandpo.report"),
        (1, "module", "bandpo.methods.resolve"),
        (2, "rule", "train"),
        (2, "rule", "select"),
        (2, "rule", "report"),
        (2, "rule", "publish"),
        (2, "rule", "eval_group"),
        (2, "rule", "all"),
        (8, "path", "benchmarks/bench_band.py"),
        (8, "path", "config/smoke.yaml"),
        (13, "path", "workflow/rules/train.smk"),
        (13, "module", "bandpo.train"),
        (13, "rule", "train"),
        (13, "rule", "train_verl"),
        (13, "rule", "merge_verl"),
    }


def test_existence_checks():
    assert missing(Ref("d", 1, "module", "bandpo.methods.resolve")) is None  # a name re-exported by the package
    assert missing(Ref("d", 1, "module", "bandpo.core.atomic_dir")) is None
    assert "no submodule or top-level name 'atomic_dir'" in missing(Ref("d", 1, "module", "bandpo.atomic_dir"))
    assert missing(Ref("d", 1, "path", "workflow/rules/*.smk")) is None
    assert missing(Ref("d", 1, "path", "workflow/scripts/atomic_dir.py")) == "no such file or folder"
    assert {"train", "train_verl", "eval_group", "eval_run", "all"} <= rule_names()
    assert "train_local" not in rule_names()


def test_smoke_config_header_counts_its_jobs():
    """config/smoke.yaml's header says how many jobs the smoke DAG runs on a fresh checkout (`snakemake -n`)."""
    from bandpo.plan import sweep, validate

    text = (ROOT / "config" / "smoke.yaml").read_text(encoding="utf-8")
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#")).split("\n\n")[0]
    (claimed,) = re.findall(r"\((\d+) jobs on a fresh checkout", header)
    cfg = validate.validate_config(yaml.safe_load(text), root=ROOT)
    assert int(claimed) == sum(sweep.expected_jobs(cfg).values())


if __name__ == "__main__":  # the list alone: python tests/unit/test_doc_references.py
    for ref in all_references():
        if (why := missing(ref)) is not None:
            print(f"{ref}: {why}")
