"""``python -m bandpo.train``: one training run of the local trainer (`bandpo.train.cli.main`)."""

import sys

if not {"-h", "--help"} & set(sys.argv[1:]):
    # a training job: its grader worker starts first and loads math-verify on another core while this process
    # imports torch (`bandpo.grader.start_workers`)
    import bandpo.grader

    bandpo.grader.start_workers()

from bandpo.core.failures import run_job
from bandpo.core.options import exit_job
from bandpo.train.cli import main

exit_job(run_job(main, "python -m bandpo.train"))
