from bandpo.core.failures import run_job
from bandpo.decide.cli import main

raise SystemExit(run_job(main, "python -m bandpo.decide"))
