"""``python -m bandpo.models``: build, evaluate or download a base model (`bandpo.models.cli.main`)."""

from bandpo.core.failures import run_job
from bandpo.core.options import exit_job
from bandpo.models.cli import main

exit_job(run_job(main, "python -m bandpo.models"))
