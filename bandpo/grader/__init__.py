"""One answer grader for training rewards and for evaluation.

``grade(response, reference)`` returns 1.0 when the final answer of ``response`` is mathematically equivalent to
``reference`` and 0.0 otherwise.  Which part of the response is its final answer, and how it is compared, depends
on the grading mode (:data:`MODES`, ``BANDPO_GRADER_MODE`` or :func:`configure`):

* ``lenient`` (the default): the content of the last ``\\boxed{...}`` (also a truncated ``\\boxed{42`` whose closing
  brace a stop sequence removed) or of the last ``Answer:`` / ``The final answer is`` / ``####`` line, whichever
  comes last in the text;
* ``strict-answer-line``: the last ``Answer:`` line only, no ``\\boxed{}`` fallback; compared like ``lenient``, so
  still more lenient than the paper's rule (``1/2`` = ``\\frac{1}{2}``, no 300-character window);
* ``math-dapo``: verl 0.9.1's ``math_dapo.compute_score``: the Minerva-normalised last ``Answer:`` line of the
  last 300 characters, string-equal to the normalised reference (the last ``\\boxed{}`` of the last 100 characters
  only when there is no such line); no math-verify; verl's +1 / -1 is our 1 / 0 (`bandpo.grader.dapo`);
* ``math-dapo-paper``: the paper's reward and validation rule (the authors' verl fork): ``math-dapo`` without the
  ``\\boxed{}`` fallback, the ``Answer:`` line only;
* ``math-boxed``: verl's ``\\boxed{}`` MATH rule (``math_reward``, verl's own functions): the last ``\\boxed{}``
  of the response, Hendrycks-normalised, string-equal to the reference (the authors' AMC23 validation rule).

In ``lenient`` and ``strict-answer-line``, a reference may be a bare answer, a number, or a full solution with a
``\\boxed{}`` or ``####`` line (``math-dapo`` takes it as given, like verl).  Answers are compared by, in order: a
normalised string comparison; exact structural shortcuts that give math-verify's own verdict much faster (plain
numbers, radicals and multiples of pi, tuples, intervals and sets of plain numbers, multiple-choice letters);
math-verify (``parse`` + ``verify``) for everything else.  Model output is untrusted:
nothing evaluates text (no ``eval``/``exec``/``sympify``); ``grade`` never raises and its time is bounded whatever
the input, from any thread.

The modules, in the order an item meets them:

* `bandpo.grader.extract`: final answers of responses and references (linear time);
* `bandpo.grader.dapo`: the whole ``math-dapo`` and ``math-dapo-paper`` rules (string work only; the later
  modules do not see their items, nor those of ``math-boxed``, which verl's functions decide);
* `bandpo.grader.normalise`: normalisation and the fast structural verdicts;
* `bandpo.grader.precheck`: refusal of answers that could make math-verify run away (towers of powers, ...);
* `bandpo.grader.pool` / `bandpo.grader.judge`: math-verify in killable worker processes (:func:`start_workers`
  starts them before a job's heavy imports), or in-process under an alarm;
* `bandpo.grader.api`: the grading functions (:class:`Grading`: a batch graded as its items arrive), the verdict
  cache and the two budgets, in CPU seconds of the judging worker, so that the machine's load decides no score (an
  item that spends the first budget is graded again with 30x the budget; see that module);
* `bandpo.grader.config`: settings, read from ``BANDPO_GRADER_*`` at first use (not at import) or set by
  :func:`configure`; `bandpo.grader.counters`: :func:`stats`, :func:`counting`, :func:`slowest_verdict`;
  `bandpo.grader.version`: provenance.

Every score should be logged with the grader's provenance: :func:`grader_info` or the one-string :func:`grader_id`
(``name/mode@version``; the version names the bandpo version, the rules revision and math-verify's version).
"""

from bandpo.grader.api import (
    GradeResult,
    Grading,
    configure,
    grade,
    grade_detailed,
    grade_many,
    grade_many_detailed,
    grader_id,
    grader_info,
    warmup,
)
from bandpo.grader.config import MODES
from bandpo.grader.counters import Counts, counting, slowest_verdict, stats
from bandpo.grader.extract import extract_answer, last_boxed
from bandpo.grader.pool import shutdown, start_workers
from bandpo.grader.version import GRADER_NAME, GRADER_VERSION

__all__ = [
    "GRADER_NAME",
    "GRADER_VERSION",
    "MODES",
    "Counts",
    "GradeResult",
    "Grading",
    "configure",
    "counting",
    "extract_answer",
    "grade",
    "grade_detailed",
    "grade_many",
    "grade_many_detailed",
    "grader_id",
    "grader_info",
    "last_boxed",
    "shutdown",
    "start_workers",
    "slowest_verdict",
    "stats",
    "warmup",
]
