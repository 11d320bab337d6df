"""The ``math-dapo`` and ``math-dapo-paper`` grading modes: verl's ``math_dapo`` rule, with and without its
``\\boxed{}`` fallback.

``math-dapo`` is ``verl.utils.reward_score.math_dapo.compute_score`` as verl 0.9.1 ships it (default arguments).
This module re-implements that rule (independently written, checked against verl's function in
``tests/unit/test_grader_dapo.py``):

1. only the last :data:`WINDOW` (300) characters of the response are read;
2. the answer is what follows the last match of ``Answer\\s*:\\s*`` (case-insensitive, the matches found left to
   right without overlap) up to the end of its line, normalised by the Minerva rule (:func:`minerva_normalise`);
   it is correct when it equals the normalised reference string exactly (no numeric or symbolic equivalence:
   ``1/2`` is not ``\\frac{1}{2}``, ``0.5`` is not ``1/2``);
3. only when there is no such line (or its normalised answer is the literal ``[INVALID]``, verl's marker for "no
   answer"): the content of the last balanced ``\\boxed{...}`` of the last :data:`BOX_WINDOW` (100) characters,
   compared with the reference string exactly as given (not normalised; a fallback of recent verl, 0.9.1
   included: earlier releases, and the many copies of their ``math_dapo.py``, score such a response wrong).

The ``math-dapo-paper`` mode is steps 1 and 2 alone (``box_fallback=False``): the rule of the verl fork the BandPO
authors trained and validated with, which grades the ``Answer:`` line only (verl 0.9.1's ``is_correct_minerva`` on
the last 300 characters, its rule before the fallback). The two differ on one kind of response only: one whose
last 300 characters hold no ``Answer:`` line (or only one whose answer normalises to ``[INVALID]``) and whose last
100 hold a closed ``\\boxed{X}`` with X equal to the reference: ``math-dapo`` scores it correct,
``math-dapo-paper`` wrong (R1-distilled models often end so); and, the other way round, a reference that itself
normalises to ``[INVALID]``, which only ``math-dapo-paper`` lets an ``Answer:`` line match.

verl's reward is +1 / -1 (``acc`` True / False); ours is 1.0 / 0.0 (``workflow/scripts/verl_reward.py`` maps it
back to +1 / -1).  Deviation: a missing or blank reference scores 0 (verl raises on ``None`` and would compare
an empty reference with an empty answer).

Pure string work: no math-verify, no worker process.  The response is cut to 300 characters before any regular
expression runs; the reference is normalised in time linear in its length (the Minerva rule's regular expressions
are rewritten as scans, so a megabyte reference cannot make it hang).
"""

from __future__ import annotations

import re

WINDOW = 300  # characters of the response that are read (verl: "the longest answer in MATH-500 has 159")
BOX_WINDOW = 100  # characters of the response searched for the \boxed{} fallback
INVALID = "[INVALID]"  # verl's prediction when no Answer: line matched

# Case-insensitive with Unicode rules, like verl's (?i) pattern ("\s" is any Unicode space, "ſ" matches "s").
_ANSWER_LINE = re.compile(r"answer\s*:\s*([^\n]+)", re.IGNORECASE)

# The Minerva normalisation's tables (Lewkowycz et al. 2022, appendix D.1, as in verl and lm-eval's
# hendrycks_math): literal replacements, applied in this order, then literal removals, in this order.
_REPLACE: tuple[tuple[str, str], ...] = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
_REMOVE: tuple[str, ...] = (
    *"square ways integers dollars mph inches hours km units".split(),
    "\\ldots",
    *"sue points feet minutes digits cents degrees cm gm pounds meters meals edges students childrentickets".split(),
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    '"',
    "\\dots",
)


def _first_dollar_pair(text: str) -> str:
    """Each line (split at ``\\n``) with two ``$`` or more becomes ``$`` + the text between its first two ``$`` +
    ``$``; other lines are kept."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        i = line.find("$")
        j = line.find("$", i + 1) if i >= 0 else -1
        if j >= 0:
            lines[k] = "$" + line[i + 1 : j] + "$"
    return "\n".join(lines)


def _unwrap_to_first_brace(text: str, command: str) -> str:
    """Left to right, each ``command{X}`` becomes ``X``, where ``}`` is the first one after the ``{`` on the same
    line (nesting is not followed; an occurrence with no ``}`` later on its line is kept)."""
    out: list[str] = []
    pos = 0
    n = len(text)
    start = text.find(command)
    while start >= 0:
        close = text.find("}", start + len(command))
        if close < 0:
            break  # no later occurrence can close either
        newline = text.find("\n", start, close)
        if newline >= 0:  # every occurrence before that newline meets the same "}" across it
            start = text.find(command, newline + 1)
            continue
        out += [text[pos:start], text[start + len(command) : close]]
        pos = close + 1
        start = text.find(command, pos)
    out.append(text[pos:n])
    return "".join(out)


def _unwrap_boxed_greedy(text: str) -> str:
    """On each line, the first ``\\boxed{`` with a ``}`` after it on that line is removed with the line's last
    ``}`` (whatever lies between is kept, nesting ignored)."""
    lines = text.split("\n")
    opener = "\\boxed{"
    for k, line in enumerate(lines):
        i = line.find(opener)
        j = line.rfind("}")
        if i >= 0 and j >= i + len(opener):
            lines[k] = line[:i] + line[i + len(opener) : j] + line[j + 1 :]
    return "\n".join(lines)


def _brace_shorthand(text: str, name: str, args: int) -> str:
    """TeX shorthand: ``frac`` followed by a character other than ``{`` and one more character (not a newline)
    becomes ``frac{a}{b}``; ``sqrt`` followed by a character other than ``{`` becomes ``sqrt{a}`` (``args`` = 2 or
    1).  Left to right, without overlap; an occurrence that does not fit is kept."""
    out: list[str] = []
    pos = 0
    n = len(text)
    start = text.find(name)
    while start >= 0:
        a = start + len(name)
        ok = a < n and text[a] != "{"
        if ok and args == 2:
            ok = a + 1 < n and text[a + 1] != "\n"
        if not ok:
            start = text.find(name, start + 1)
            continue
        out += [text[pos:a], "".join("{" + text[a + i] + "}" for i in range(args))]
        pos = a + args
        start = text.find(name, pos)
    out.append(text[pos:])
    return "".join(out)


def minerva_normalise(answer: str) -> str:
    """The Minerva normalisation of a final answer (verl's ``normalize_final_answer``), in linear time: the part
    after the last ``=``; the literal replacements and removals (articles, spaces, ``\\$``, units such as ``cm`` or
    ``degrees``, ``^\\circ``, ``\\text{}`` ...); the text between the first two ``$`` of a line; ``\\text{}``,
    ``\\textbf{}``, ``\\overline{}`` and ``\\boxed{}`` unwrapped; ``\\fracab`` / ``\\sqrta`` shorthand braced; ``$``
    removed; the commas of a plain digit string (``1,000``) removed; surrounding spaces stripped."""
    s = answer.rsplit("=", 1)[-1]
    for before, after in _REPLACE:
        s = s.replace(before, after)
    for removed in _REMOVE:
        s = s.replace(removed, "")
    s = _first_dollar_pair(s)
    for command in ("\\text{", "\\textbf{", "\\overline{"):
        s = _unwrap_to_first_brace(s, command)
    s = _unwrap_boxed_greedy(s)
    s = _brace_shorthand(s, "frac", 2)
    s = _brace_shorthand(s, "sqrt", 1)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s.strip()


def answer_line(response: str) -> str | None:
    """The raw answer of the last ``Answer:`` match in the last :data:`WINDOW` characters, ``None`` if none."""
    found = _ANSWER_LINE.findall(response[-WINDOW:])
    return found[-1] if found else None


def last_box_content(text: str) -> str | None:
    """Content of the last ``\\boxed{`` of ``text`` up to its matching ``}`` (every ``{`` and ``}`` counts, escaped
    or not); ``None`` if there is none or it is not closed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len("\\boxed"), len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + len("\\boxed{") : i]
    return None


def prediction(response: str, box_fallback: bool = True) -> tuple[str, bool]:
    """(the answer the rule compares, whether it came from the ``\\boxed{}`` fallback).  The answer is
    :data:`INVALID` when the response has no ``Answer:`` line and (with ``box_fallback``) no closed ``\\boxed{}``
    at its end."""
    window = response[-WINDOW:]
    raw = answer_line(window)
    pred = minerva_normalise(raw) if raw is not None else INVALID
    if pred != INVALID or not box_fallback:
        return pred, False
    boxed = last_box_content(window[-BOX_WINDOW:])
    return (boxed, True) if boxed is not None else (INVALID, False)


def judge(response: str, reference: str, box_fallback: bool = True) -> tuple[bool, str, str]:
    """(correct, the compared answer, the compared reference) by verl 0.9.1's ``math_dapo`` rule, or without its
    ``\\boxed{}`` fallback (``box_fallback=False``: the ``math-dapo-paper`` mode; see the module)."""
    pred, from_box = prediction(response, box_fallback)
    gold = reference if from_box else minerva_normalise(reference)
    return pred == gold, pred, gold
