"""``python -m bandpo.data``: generate tiny-math or normalise a real data set (`bandpo.data.cli.main`)."""

from bandpo.core.failures import run_job
from bandpo.data.cli import main

raise SystemExit(run_job(main, "python -m bandpo.data"))
