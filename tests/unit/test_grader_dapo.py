"""The ``math-dapo`` grader mode against verl's own ``math_dapo.compute_score`` (the paper's reward rule).

Parity: over a corpus of realistic testbed completions, hand-picked cases (fractions, units, degrees, percentages,
LaTeX, thousands separators, several ``Answer:`` lines, the 300-character window, the ``\\boxed{}`` fallback) and
seeded random strings built from the rule's own tokens, ``bandpo.grader`` in mode ``math-dapo`` scores 1.0 exactly
where verl's score is +1, through every public entry point (``grade``, ``grade_detailed``, ``grade_many``, the verl
reward function).  Hostile inputs (megabyte strings, deep nesting, towers of powers) are bounded by process time.
"""

from __future__ import annotations

import importlib.util
import random
import time
from pathlib import Path

import pytest

from bandpo import grader as G
from bandpo.data import tiny_math
from bandpo.grader import dapo


def _load_math_dapo():
    """verl's ``verl/utils/reward_score/math_dapo.py`` from the installed verl, loaded on its own (it needs only
    ``re``): importing the ``verl`` package would cost seconds of torch and ray imports."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed", allow_module_level=True)
    path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "reward_score" / "math_dapo.py"
    module_spec = importlib.util.spec_from_file_location("verl_math_dapo", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


math_dapo = _load_math_dapo()

MODE = "math-dapo"
ROOT = Path(__file__).resolve().parents[2]


def verl_correct(response: str, reference: str) -> bool:
    out = math_dapo.compute_score(response, reference)
    assert out["score"] in (1.0, -1.0) and out["acc"] == (out["score"] > 0)
    return out["score"] > 0


# --------------------------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------------------------
PAD = "We check every step of the computation once more, carefully. " * 6  # 372 characters

HAND: list[tuple[str, str]] = [
    # fractions: string equality after the Minerva normalisation, no equivalence
    ("Answer: 1/2", "\\frac{1}{2}"),
    ("Answer: \\frac{1}{2}", "\\frac{1}{2}"),
    ("Answer: \\frac12", "\\frac{1}{2}"),
    ("Answer: \\dfrac{1}{2}", "\\frac{1}{2}"),
    ("Answer: \\dfrac{1}{2}", "\\dfrac{1}{2}"),
    ("Answer: \\tfrac{1}{2}", "\\frac{1}{2}"),
    ("Answer: 0.5", "1/2"),
    ("Answer: 0.5", "0.5"),
    ("Answer: -7/12", "-7/12"),
    ("Answer: -\\frac{7}{12}", "-7/12"),
    ("Answer: \\frac{-7}{12}", "-\\frac{7}{12}"),
    ("Answer: \\frac1{2}", "\\frac{1}{2}"),
    ("Answer: \\sqrt2", "\\sqrt{2}"),
    ("Answer: 3\\sqrt{2}", "3\\sqrt2"),
    ("Answer: \\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}"),
    # units, degrees, percentages, text
    ("Answer: 5 cm", "5"),
    ("Answer: 5 \\text{cm}", "5"),
    ("Answer: 5\\text{ cm}", "5"),
    ("Answer: 5 \\mbox{cm}", "5"),
    ("Answer: 12 inches", "12"),
    ("Answer: 30 degrees", "30"),
    ("Answer: 30^\\circ", "30"),
    ("Answer: 30^{\\circ}", "30"),
    ("Answer: 30°", "30"),
    ("Answer: 25\\%", "25"),
    ("Answer: 25\\%", "25\\%"),
    ("Answer: 25%", "25\\%"),
    ("Answer: 25 percent", "25"),
    ("Answer: \\$12", "12"),
    ("Answer: $12", "12"),
    ("Answer: 12 dollars", "12"),
    ("Answer: 5 \\text{ m}", "5"),
    ("Answer: \\text{(A)}", "(A)"),
    ("Answer: \\textbf{B}", "B"),
    ("Answer: \\overline{3}", "3"),
    ("Answer: 4\\text{th}", "4"),
    ("Answer: 4\\mathrm{th}", "4"),
    ("Answer: 2, \\text{and} 3", "2,3"),
    # LaTeX wrappers
    ("Answer: \\boxed{70}", "70"),
    ("Answer: $\\boxed{70}$", "70"),
    ("Answer: $70$", "70"),
    ("Answer: $70$.", "70"),
    ("Answer: 70.", "70"),
    ("Answer: \\(70\\)", "70"),
    ("Answer: \\[70\\]", "70"),
    ("Answer: $x = 70$", "70"),
    ("Answer: x = 70", "70"),
    ("Answer: x=70, y=3", "3"),
    ("Answer: $a$ and $b$", "a"),
    ("Answer: \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("Answer: \\boxed{70} \\boxed{71}", "70}\\boxed{71"),
    # thousands separators, negatives, decimals
    ("Answer: 1,000", "1000"),
    ("Answer: 1{,}000", "1000"),
    ("Answer: 1,\\!000", "1000"),
    ("Answer: 1\\,000", "1000"),
    ("Answer: 1 000", "1000"),
    ("Answer: 1,000,000", "1000000"),
    ("Answer: -1,000", "-1000"),
    ("Answer: -5", "-5"),
    ("Answer: - 5", "-5"),
    ("Answer: −5", "-5"),
    ("Answer: 70.0", "70"),
    ("Answer: 070", "70"),
    ("Answer: (1,2)", "(1, 2)"),
    ("Answer: 1, 2", "1,2"),
    # whitespace and case
    ("answer: 70", "70"),
    ("ANSWER:70", "70"),
    ("Answer :   70   ", "70"),
    ("Answer:\n70", "70"),
    ("Answer:\n\n\n70", "70"),
    ("Answer:\t70", "70"),
    ("Answer:\t70\t", "70"),
    ("Answer: 70\r\n", "70"),
    ("Final Answer: 70", "70"),
    ("The answer: 70", "70"),
    ("The answer is 70", "70"),
    ("**Answer:** 70", "70"),
    ("Answer: **70**", "70"),
    ("Answer: a 70", "70"),
    ("Answer: an 70", "70"),
    ("Answer: X", "x"),
    ("Answer: x", "x"),
    # several Answer: lines, several on one line
    ("Answer: 1\nAnswer: 2", "2"),
    ("Answer: 1\nAnswer: 2", "1"),
    ("Answer: 1 Answer: 2", "2"),
    ("Answer: 1 Answer: 2", "1Answer:2"),
    ("Answer: 1\nso the answer: 2\nwait", "2"),
    ("Answer: 2\n\\boxed{3}", "3"),
    ("Answer: 2\n\\boxed{3}", "2"),
    # the \boxed{} fallback (no Answer: line): last 100 characters, content compared as given
    ("So \\boxed{70}", "70"),
    ("So \\boxed{70}.", "70"),
    ("So \\boxed{ 70 }", "70"),
    ("So \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("So \\boxed{\\frac{1}{2}}", "1/2"),
    ("So \\boxed{70} and \\boxed{71}", "71"),
    ("So \\boxed{70} and \\boxed{71", "70"),
    ("So \\boxed{70", "70"),
    ("So \\boxed 70", "70"),
    ("So \\fbox{70}", "70"),
    ("So \\boxed{{70}}", "{70}"),
    ("So \\boxed{70}" + "." * 95, "70"),
    ("So \\boxed{70}" + "." * 80, "70"),
    ("\\boxed{70}" + "." * 90, "70"),  # the box starts 100 characters from the end: read
    ("\\boxed{70}" + "." * 91, "70"),  # 101: not read
    ("x\\boxed{70}" + "." * 90, "70"),
    ("Answer: [INVALID]\n\\boxed{7}", "7"),
    ("Answer: [INVALID]", "[INVALID]"),
    ("no answer at all", "[INVALID]"),
    ("no answer at all", "70"),
    # the 300-character window
    ("Answer: 70\n" + PAD, "70"),
    ("Answer: 70\n" + PAD[:280], "70"),
    ("Answer: 70\n" + PAD[:288], "70"),
    ("Answer: 70\n" + PAD[:289], "70"),
    ("Answer: 70\n" + PAD[:290], "70"),
    (PAD + "Answer: 70", "70"),
    (PAD + "Answer: 70\n" + PAD[:200], "70"),
    ("Answer: 1\n" + PAD + "Answer: 2", "2"),
    ("Answer: 1\n" + PAD + "Answer: 2", "1"),
    ("Answer: 1\n" + PAD, "1"),
    (PAD + "\\boxed{70}", "70"),
    ("Answer: 70" + "." * 290, "70"),  # the match starts 300 characters from the end: read
    ("Answer: 70" + "." * 291, "70"),  # 301: "nswer: 70..." is not a match
    ("xAnswer: 70" + "." * 290, "70"),
    ("Answer:  70" + "." * 290, "70"),
    ("Answer: 70 " + " " * 289 + "\n", "70"),
    ("\\boxed{70}" + PAD, "70"),
    # empty and None-like
    ("", "70"),
    ("Answer:", "70"),
    ("Answer: ", "70"),
    ("Answer: $$", "70"),
    ("Answer: $ $", "$"),
    ("Answer: None", "None"),
    ("Answer: None", "70"),
    ("None", "None"),
    ("Answer: null", "null"),
    ("Answer: 0", "0"),
    ("Answer: 70", " 70 "),
    ("Answer: 70", "$70$"),
    ("Answer: 70", "\\boxed{70}"),
    ("Answer: 70", "x = 70"),
    ("Answer: 70", "70 cm"),
    # unicode
    ("Answer: ７０", "７０"),
    ("Answer: 7０", "70"),
    ("Answer: ²", "²"),
    ("Answer: π", "\\pi"),
    ("Answer: π", "π"),
    ("Answer: 1,٢", "1٢"),
    ("ANſWER: 70", "70"),
    ("Answer\u2003:\u300070", "70"),
    ("Answer:\u00a070\u00a0", "70"),
    ("Answer: 70\u2028", "70"),
    ("Answer: \u200b70", "70"),
    ("Answer: 70 \U0001f600", "70"),
]


def _testbed() -> list[tuple[str, str]]:
    """Completions of the testbed's tiny-math prompts ("Q: Compute 88+43-61.\\nA: ..."), right and wrong, in the
    forms a policy writes: a worked solution ending in \\boxed{}, an Answer: line, both, fractions in LaTeX."""
    rng = random.Random(0)
    items: list[tuple[str, str]] = []
    for gen in (tiny_math.GENERATORS[kind] for kind in sorted(tiny_math.GENERATORS)):
        for level in (1, 2, 3):
            for _ in range(6):
                problem, answer, solution = gen(rng, level)
                prompt = tiny_math.tiny_prompt(problem)
                wrong = str(int(answer.split("/")[0]) + rng.choice((-1, 1)))
                num, _, den = answer.partition("/")
                latex = f"\\frac{{{num.lstrip('-')}}}{{{den}}}" if den else answer
                latex = "-" + latex if den and num.startswith("-") else latex
                forms = [
                    solution,
                    f"{solution}\nAnswer: {answer}",
                    f"{solution}\nAnswer: {wrong}",
                    f"{solution.split('. ')[0]}.\nAnswer: ${latex}$",
                    f"Answer: \\boxed{{{answer}}}",
                    f"{prompt}{solution}\nAnswer: {answer}",
                    f"{solution} Answer:{answer}.",
                    f"answer: {answer}\nAnswer: {wrong}",
                    f"Answer: {answer} is it\n{PAD}",
                    f"{PAD}{solution}",
                    f"{PAD}The answer: {answer}",
                    solution.replace("}", ""),
                ]
                for form in forms:
                    for ref in dict.fromkeys((answer, latex, wrong)):
                        items.append((form, ref))
    return items


TOKENS = (
    *"Answer: answer: ANSWER Answer : \\boxed{ \\boxed{} { } $ $ = , . \\! \\; \\, ^\\circ ^{\\circ} \\% %".split(),
    *"\\text{ \\textbf{ \\overline{ \\mbox{ frac \\frac \\dfrac sqrt \\sqrt cm units degrees a an and".split(),
    *"1 2 3 70 -5 1/2 0.5 1,000 x y \\pi [INVALID] ſ ７ ² \u2003 \u00a0 ü".split(),
    " ",
    "  ",
    "\n",
    "\t",
    "\\ ",
    "a ",
    "an ",
    ".$",
    "\\$",
    '"',
    "\r",
)


def _fuzz(n: int, seed: int) -> list[tuple[str, str]]:
    """Random strings made of the rule's own tokens: responses and references alike, newlines included, so that
    every regular expression of the Minerva normalisation meets its corner cases (lines, nesting, shorthand)."""
    rng = random.Random(seed)

    def text(k: int) -> str:
        return "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, k)))

    items = []
    for _ in range(n):
        ref = text(6)
        response = text(40)
        if rng.random() < 0.5:
            response += rng.choice(("Answer: ", "answer:", "\\boxed{")) + ref + rng.choice(("", "}", "\n", " cm"))
        items.append((response, ref))
    return items


STRUCTURE = (
    *"\\text{ \\textbf{ \\overline{ \\boxed{ \\text{} \\text{m} \\text{s} \\text{and} \\mbox{ { } $ $ =".split(),
    *"frac sqrt \\frac \\sqrt \\! , . 1 2 a an x cm ^\\circ \\%".split(),
    "\n",
    "\n",
    " ",
    "a ",
    "\\text{\n}",
    "\\text{\ns}",
)


def _structures(n: int, seed: int) -> list[str]:
    """Random texts dense in the normalisation's structure (braces, commands, ``$`` pairs, newlines): the
    reference side of the rule, where newlines matter (an ``Answer:`` line has none)."""
    rng = random.Random(seed)
    return ["".join(rng.choice(STRUCTURE) for _ in range(rng.randint(0, 24))) for _ in range(n)]


def _hostile() -> list[tuple[str, str]]:
    mb = 1 << 20
    return [
        ("7" * mb, "7"),
        ("Answer: " + "7" * mb, "7" * 292),
        ("Answer: 7\n" + "x" * mb, "7"),
        ("x" * mb + "\nAnswer: 7", "7"),
        ("{" * mb + "\\boxed{7}", "7"),
        ("\\boxed{" * 100_000 + "7" + "}" * 100_000, "7"),
        ("\\boxed{" * 50_000, "7"),
        ("Answer: " * 50_000, "Answer:"),
        ("answer " * 100_000 + ": 7", "7"),
        ("Answer: " + "2^" * 100_000 + "2", "2"),
        ("Answer: " + "\\frac{" * 10_000, "frac{"),
        ("Answer: " + "(" * 10_000 + "1" + ")" * 10_000, "1"),
        ("$" * mb, "$"),
        ("Answer: " + "$" * mb, ""),
        ("é" * mb + "Answer: ü", "ü"),
        ("\n" * mb + "Answer: 7", "7"),
        (" " * mb + "Answer:" + " " * mb + "7", "7"),
        ("Answer:" + "\u2003" * 290 + "7", "7"),
        ("\U0001f600" * mb + "\\boxed{7}", "7"),
    ]


CORPUS: list[tuple[str, str]] = HAND + _testbed() + _fuzz(3000, seed=1) + _hostile()
PARITY = [(r, g) for r, g in CORPUS if g.strip()]  # a blank reference scores 0 here, verl compares it (see below)


# --------------------------------------------------------------------------------------------------------------
# Parity
# --------------------------------------------------------------------------------------------------------------
def test_corpus_is_broad():
    expected = [verl_correct(r, g) for r, g in PARITY]
    assert len(PARITY) > 3000 and len(HAND) > 140
    assert 0.05 < sum(expected) / len(expected) < 0.95  # both verdicts well represented
    hand = [verl_correct(r, g) for r, g in HAND if g.strip()]
    assert sum(hand) > 40 and len(hand) - sum(hand) > 40


def test_normalisation_and_box_parity():
    """The two parts, string for string: the Minerva normalisation and the balanced last ``\\boxed{}``."""
    texts = _structures(4000, seed=2) + [g for _, g in CORPUS] + [r[-300:] for r, _ in CORPUS]
    for text in texts:
        assert dapo.minerva_normalise(text) == math_dapo.normalize_final_answer(text), text
        box = math_dapo.last_boxed_only_string(text)
        assert dapo.last_box_content(text) == (math_dapo.remove_boxed(box) if box is not None else None), text


def test_parity_with_verl_math_dapo():
    mismatches = [
        (r[-120:], g, G.grade_detailed(r, g, mode=MODE))
        for r, g in PARITY
        if (G.grade(r, g, mode=MODE) == 1.0) != verl_correct(r, g)
    ]
    assert not mismatches, mismatches[:10]


def test_parity_of_the_compared_strings():
    """Where verl finds an answer, ours is the same string (GradeResult.pred, extract_answer)."""
    for r, g in PARITY:
        want = math_dapo.compute_score(r, g)["pred"]
        got = G.grade_detailed(r, g, mode=MODE)
        if want == dapo.INVALID:
            assert got.pred is None or got.pred == want, (r[-120:], g)
        else:
            assert got.pred == want, (r[-120:], g, got)
            assert G.extract_answer(r, MODE) == (want or None)


def test_parity_in_batches_and_through_the_verl_reward():
    spec = importlib.util.spec_from_file_location("verl_reward", ROOT / "workflow" / "scripts" / "verl_reward.py")
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    responses, references = zip(*PARITY, strict=True)
    expected = [1.0 if verl_correct(r, g) else 0.0 for r, g in PARITY]
    assert G.grade_many(list(responses), list(references), mode=MODE) == expected
    for (r, g), want in zip(PARITY[:400], expected, strict=False):
        out = reward.compute_score("math_dapo", r, g, grader_mode=MODE)
        verl = math_dapo.compute_score(r, g)
        assert out == {"score": 1.0 if want else -1.0, "acc": want, "pred": out["pred"]}
        assert out["score"] == verl["score"]
        # verl's maj@k votes on pred: ours is verl's, or "" where verl has none ([INVALID]): the same partition
        assert out["pred"] == verl["pred"] or (out["pred"] == "" and verl["pred"] == dapo.INVALID)


def test_paper_rule_is_stricter_than_the_lenient_modes():
    """The reason for the mode: the lenient modes accept equivalent answers the paper's rule scores wrong."""
    for response, reference in [("Answer: 1/2", "\\frac{1}{2}"), ("Answer: 0.5", "1/2"), ("Answer: 2/4", "1/2")]:
        assert not verl_correct(response, reference)
        assert G.grade(response, reference, mode=MODE) == 0.0
        assert G.grade(response, reference, mode="strict-answer-line") == 1.0
        assert G.grade(response, reference, mode="lenient") == 1.0
    # and an answer outside the last 300 characters does not count
    response = "Answer: 70\n" + PAD
    assert G.grade(response, "70", mode=MODE) == 0.0 and G.grade(response, "70", mode="strict-answer-line") == 1.0


# --------------------------------------------------------------------------------------------------------------
# The mode in the API
# --------------------------------------------------------------------------------------------------------------
def test_mode_is_known_and_recorded():
    assert MODE in G.MODES
    result = G.grade_detailed("Answer: 5 cm", "5", mode=MODE)
    assert (result.score, result.method, result.pred, result.gold, result.mode) == (1.0, "math_dapo", "5", "5", MODE)
    assert G.grade_detailed("Answer: 6", "5", mode=MODE).method == "math_dapo"
    assert G.grade_detailed("no answer", "5", mode=MODE).method == "no_answer"
    assert G.grader_id(MODE) == f"bandpo.grader/math-dapo@{G.GRADER_VERSION}"
    G.configure(mode=MODE)
    try:
        assert G.grade("Answer: 1/2", "\\frac{1}{2}") == 0.0
        assert G.grade("Answer: \\frac{1}{2}", "\\frac{1}{2}") == 1.0
        assert G.extract_answer("Answer: $\\dfrac12$") == "\\dfrac{1}{2}"
        assert G.grader_info()["mode"] == MODE
    finally:
        G.configure(mode="lenient")


@pytest.mark.parametrize("reference", [None, "", "  ", "\n", True, object()])
def test_missing_or_blank_reference_scores_zero(reference):
    """Deviation from verl, which raises on None and compares a blank reference with an empty answer."""
    result = G.grade_detailed("Answer: $$", reference, mode=MODE)
    assert (result.score, result.method) == (0.0, "no_reference")


def test_untrusted_types():
    assert G.grade(None, "5", mode=MODE) == 0.0
    assert G.grade(b"Answer: 5", "5", mode=MODE) == 1.0
    assert G.grade("Answer: 5", 5, mode=MODE) == 1.0
    assert G.grade("Answer: 5", 5.0, mode=MODE) == 0.0  # "5.0", as verl compares str(5.0)
    assert G.grade(12345, "5", mode=MODE) == 0.0
    assert G.extract_answer(None, MODE) is None and G.extract_answer("Answer: $$", MODE) is None


def test_hostile_inputs_are_fast():
    """Responses are cut to 300 characters first; references are normalised in linear time."""
    mb = 1 << 20
    worst = [
        ("x", "a" * mb),
        ("x", "\\text{" * (mb // 6)),
        ("x", ("\\text{" + "\n") * (mb // 7)),
        ("x", "\\boxed{" * (mb // 7) + "}"),
        ("x", "frac" * (mb // 4)),
        ("x", "sqrt{" * (mb // 5)),
        ("x", "$" + "a" * mb),
        ("x", "=" * mb),
        ("x", "1," * (mb // 2)),
        *_hostile(),
    ]
    t0 = time.process_time()
    for response, reference in worst:
        G.grade(response, reference, mode=MODE)
    assert time.process_time() - t0 < 10.0  # a few hundred ms; quadratic work on a megabyte would take hours


# --------------------------------------------------------------------------------------------------------------
# math-dapo-paper: the authors' rule, the Answer: line only
# --------------------------------------------------------------------------------------------------------------
PAPER = "math-dapo-paper"


def authors_correct(response: str, reference: str) -> bool:
    """The authors' rule as verl 0.9.1 still has it: its Minerva check of the last 300 characters, without the
    ``\\boxed{}`` fallback that ``verify`` adds after it."""
    return math_dapo.is_correct_minerva(response[-300:], reference)[0]


def test_paper_mode_parity_with_verl_minerva_check():
    mismatches = [(r[-120:], g) for r, g in PARITY if (G.grade(r, g, mode=PAPER) == 1.0) != authors_correct(r, g)]
    assert not mismatches, mismatches[:10]


def test_paper_mode_differs_from_verl_091_only_on_the_box_fallback():
    """Where the two rules disagree, verl 0.9.1 took its \\boxed{} fallback and the paper's rule found no answer;
    the corpus holds such items (an R1-style ending, \\boxed{X} and no Answer: line)."""
    differ = [(r, g) for r, g in PARITY if G.grade(r, g, mode=PAPER) != G.grade(r, g, mode=MODE)]
    # the one other way round: a reference that normalises to verl's own no-answer marker, matched by such a line
    invalid = [(r, g) for r, g in differ if dapo.minerva_normalise(g) == dapo.INVALID]
    assert all(authors_correct(r, g) and not verl_correct(r, g) for r, g in invalid)
    differ = [item for item in differ if item not in invalid]
    assert len(differ) > 50
    for r, g in differ:
        assert verl_correct(r, g) and not authors_correct(r, g)
        assert math_dapo.is_correct_minerva(r[-300:], g)[1] == dapo.INVALID
        assert G.grade_detailed(r, g, mode=PAPER).method == "no_answer"
    r1_ending = "Adding the cases gives 204 in all, so the answer is \\(\\boxed{204}\\)."
    assert (G.grade(r1_ending, "204", mode=MODE), G.grade(r1_ending, "204", mode=PAPER)) == (1.0, 0.0)
    both = "so \\boxed{204}\nAnswer: 204"
    assert G.grade(both, "204", mode=MODE) == G.grade(both, "204", mode=PAPER) == 1.0
    assert G.extract_answer(r1_ending, MODE) == "204" and G.extract_answer(r1_ending, PAPER) is None


def test_paper_mode_through_the_verl_reward():
    spec = importlib.util.spec_from_file_location("verl_reward", ROOT / "workflow" / "scripts" / "verl_reward.py")
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    r1_ending = "so the answer is \\boxed{204}"
    assert reward.compute_score("aime-2024", r1_ending, "204", grader_mode=PAPER)["score"] == -1.0
    assert reward.compute_score("aime-2024", r1_ending, "204", grader_mode=MODE)["score"] == 1.0
    # a validation set graded by its own rule (grader_modes: data source -> mode), the others by grader_mode
    modes = {"amc-2023": "math-boxed"}
    assert reward.compute_score("amc-2023", r1_ending, "204", grader_mode=PAPER, grader_modes=modes) == {
        "score": 1.0,
        "acc": 1.0,
        "pred": "204",
    }
    assert reward.compute_score("aime-2024", r1_ending, "204", grader_mode=PAPER, grader_modes=modes)["acc"] == 0.0


# --------------------------------------------------------------------------------------------------------------
# math-boxed: verl's \\boxed{} MATH rule (the authors' AMC23 validation rows)
# --------------------------------------------------------------------------------------------------------------
def test_boxed_mode_parity_with_verl_math_reward():
    from verl.utils.reward_score import math_reward

    items = [*PARITY[:1500], *((r, g) for r, g in HAND if g.strip())]
    items += [
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\dfrac{1}{2}}", "\\frac12"),
        ("\\fbox{7}", "7"),
        ("\\boxed 7$", "7"),
    ]
    mismatches = [
        (r[-120:], g) for r, g in items if G.grade(r, g, mode="math-boxed") != math_reward.compute_score(r, g)
    ]
    assert not mismatches, mismatches[:10]
    assert G.grade("Answer: 204", "204", mode="math-boxed") == 0.0  # an Answer: line alone does not count
    assert G.grade("\\boxed{0.5}", "\\frac{1}{2}", mode="math-boxed") == 1.0  # the MATH normalisation
    assert G.grade("Answer: 0.5", "\\frac{1}{2}", mode=PAPER) == 0.0
