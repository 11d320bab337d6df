"""``python -m bandpo.score``: one scoring job, lm-eval over one or more checkpoints (`bandpo.score.evaluate.main`)."""

import sys

if not {"-h", "--help"} & set(sys.argv[1:]):
    # a scoring job: its grader worker starts first and loads math-verify on another core while this process
    # imports lm-eval and torch (`bandpo.grader.start_workers`)
    import bandpo.grader

    bandpo.grader.start_workers()

from bandpo.core.failures import run_job
from bandpo.core.options import exit_job
from bandpo.score.evaluate import main

exit_job(run_job(main, "python -m bandpo.score"))
