"""The statement deadline every backend shares (``kakeibo.backends._base``): when the watchdog cancels, what
the caller then sees, and that a deadline never reaches past its statement. The engines' own timeout tests
are in ``test_backend_duckdb.py``, ``test_backend_postgres.py`` and ``test_backend_spark.py``."""

from __future__ import annotations

import itertools
import math
import threading
import time

import pytest

from kakeibo.backends._base import StatementTimeout, cancel_at_deadline, check_timeout


def test_check_timeout() -> None:
    assert check_timeout(None) is None
    assert check_timeout(None, 3.0) == 3.0
    assert check_timeout(0.25, 3.0) == 0.25
    for bad in (0, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="positive number of seconds"):
            check_timeout(bad)


class _Statement:
    """A fake statement: runs until cancelled (or for ``seconds``), counting the cancellations."""

    def __init__(self, seconds: float = 60.0) -> None:
        self.cancelled = threading.Event()
        self.cancels = 0
        self.seconds = seconds

    def cancel(self) -> None:
        self.cancels += 1
        self.cancelled.set()

    def run(self) -> str:
        if self.cancelled.wait(self.seconds):
            raise RuntimeError("cancelled by the engine")
        return "rows"


def test_a_statement_past_its_deadline_is_cancelled_and_raises_statement_timeout() -> None:
    statement = _Statement()
    started = time.monotonic()
    with pytest.raises(StatementTimeout) as caught, cancel_at_deadline(0.2, statement.cancel):
        statement.run()
    assert 0.2 <= time.monotonic() - started < 5
    assert caught.value.timeout == 0.2
    assert str(caught.value) == "the statement ran longer than its 0.2 s limit and was cancelled."
    assert isinstance(caught.value.__cause__, RuntimeError)  # the engine's error, for the logs


def test_a_statement_within_its_deadline_is_never_cancelled() -> None:
    statement = _Statement(seconds=0.01)
    with cancel_at_deadline(0.2, statement.cancel):
        assert statement.run() == "rows"
    time.sleep(0.4)  # past the deadline: the watchdog is gone, nothing cancels what runs next
    assert statement.cancels == 0
    assert not any(t.name == "kakeibo-statement-deadline" for t in threading.enumerate())


def test_errors_before_the_deadline_are_not_timeouts() -> None:
    with pytest.raises(KeyError), cancel_at_deadline(5, lambda: None):
        raise KeyError("not a timeout")


def test_the_cancel_repeats_until_the_statement_stops() -> None:
    """A cancel can land before the engine has work to stop (DuckDB before execution, Spark before its first
    job): it is repeated every 0.1 s. A statement that still completes returns its rows."""
    cancels: list[float] = []
    with cancel_at_deadline(0.1, lambda: cancels.append(time.monotonic())):
        time.sleep(0.55)
    assert 3 <= len(cancels) <= 6
    assert all(0.05 <= later - earlier < 1 for earlier, later in itertools.pairwise(cancels))


def test_no_deadline() -> None:
    with cancel_at_deadline(None, lambda: pytest.fail("no deadline, no cancel")):
        time.sleep(0.01)
