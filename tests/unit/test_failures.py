"""bandpo.core.failures: which job errors Snakemake's retries should not start again (the retries themselves:
tests/workflow/test_workflow.py)."""

from __future__ import annotations

import pytest

from bandpo.core.failures import RUN_ENV, JobError, deterministic, run_job


def _raised(exc: BaseException, cause: BaseException | None = None) -> BaseException:
    try:
        if cause is None:
            raise exc
        raise exc from cause
    except BaseException as e:
        return e


@pytest.mark.parametrize(
    "exc, expected",
    [
        (ValueError("bounds violate lower <= 1 <= upper"), True),
        (FileNotFoundError("no such file"), True),
        (ModuleNotFoundError("No module named 'mlflow'"), True),
        (KeyError("delta"), True),
        (ConnectionError("connection reset"), False),
        (OSError(28, "No space left on device"), False),
        (MemoryError(), False),
        (RuntimeError("out of memory"), False),
    ],
)
def test_errors_of_the_inputs_are_deterministic_errors_of_the_machine_are_not(exc, expected):
    assert deterministic(_raised(exc)) is expected


def test_a_not_found_raised_after_a_network_error_is_retried():
    """A hub client's "not found" (a FileNotFoundError) after a dropped connection is a network error."""
    assert deterministic(_raised(FileNotFoundError("not in the cache"), ConnectionError("reset"))) is False
    assert deterministic(_raised(ValueError("bad row"), FileNotFoundError("x"))) is True


def test_a_job_error_is_one_line_outside_snakemake_and_any_other_error_its_traceback(monkeypatch, capsys):
    """A `JobError` (a tracker that cannot start, say) is one line and exit status 1 in or outside Snakemake; outside,
    any other error keeps Python's traceback (it propagates); a `JobError` caused by an error of the machine is
    printed once but not remembered as deterministic."""
    monkeypatch.delenv(RUN_ENV, raising=False)

    def fails(exc):
        def main():
            raise exc

        return main

    with pytest.raises(SystemExit) as stop:
        run_job(fails(JobError("trackers: mlflow could not start (sqlite:///x), so the run stops")), "prog")
    assert stop.value.code == 1
    assert capsys.readouterr().err == "prog: error: trackers: mlflow could not start (sqlite:///x), so the run stops\n"
    with pytest.raises(ValueError, match="bad row"):
        run_job(fails(ValueError("bad row")), "prog")
    assert deterministic(_raised(JobError("could not start"))) is True
    assert deterministic(_raised(JobError("could not start"), ConnectionError("refused"))) is False
