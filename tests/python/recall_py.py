"""Shared helpers of the recall Python package's tests (test_recall_*.py)."""

from __future__ import annotations

import time

import pytest

try:
    import recall
except ImportError as e:  # scripts/test builds it before pytest runs
    raise ImportError(
        "the recall Python package is not installed in this venv; build it with "
        "`.venv/bin/maturin develop -m crates/recall-py/Cargo.toml` (scripts/test does)"
    ) from e


def require_recalld(server_command: list[str]) -> None:
    """These tests use recall's extensions (sset/sget, the write backup)."""
    if "recalld" not in " ".join(server_command):
        pytest.skip("needs recalld (RECALL_SERVER is another server)")


def restart(srv, budget_s: float = 20.0) -> None:
    """kill -9 `srv` and start it again on the same port with the same flags."""
    port = srv.port
    srv.stop()
    deadline = time.monotonic() + budget_s
    srv._spawn(port)
    outcome = srv._probe(deadline)
    assert outcome == "ready", f"restart: {outcome}\n{srv.log_bytes().decode(errors='replace')[-3000:]}"


def until(fn, what: str, budget_s: float = 30.0, retry_on=(recall.MemcacheError,)):
    """fn() until it returns without one of `retry_on`, bounded by budget_s."""
    deadline = time.monotonic() + budget_s
    while True:
        try:
            return fn()
        except retry_on as e:
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: still failing after {budget_s} s: {e}") from e
            time.sleep(0.02)
