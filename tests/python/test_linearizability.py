"""Linearizability of a 3-node recalld cluster under partitions, kill -9
and leader transfers, checked by Porcupine (tools/lincheck), and the
negative control: with `--cluster-read stale` and a follower cut off, the
checker must object.

The harness is lincluster.py; this is its short run (CI). The long run's
command and result: docs/benchmarks/cluster-linearizability.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lincluster import build_checker, run
from mcserver import server_command_from_env

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def checker(tmp_path_factory) -> Path:
    if "recalld" not in " ".join(server_command_from_env()):
        pytest.skip("cluster mode is recalld's (RECALL_SERVER is not recalld)")
    return build_checker(tmp_path_factory.mktemp("lincheck"))


def test_linearizable_under_partitions_and_kills(checker, tmp_path):
    r = run(tmp_path, checker, rounds=1, clients=6, keys=4, ops_per_phase=40)
    assert len(r.faults) == 6, r.faults
    # The run did something: reads and writes on every key, across faults.
    assert r.ops > 8 * 40, r
    assert r.returncode == 0, f"{r.verdict}\nhistory: {r.history} (logs beside it)"
    assert "linearizable:" in r.verdict


def test_stale_follower_reads_are_flagged(checker, tmp_path):
    r = run(tmp_path, checker, rounds=1, clients=4, keys=2, ops_per_phase=40, stale=True)
    assert r.returncode == 1, f"the checker did not flag stale reads: {r.verdict}\nhistory: {r.history}"
    assert "NOT linearizable" in r.verdict
    assert (tmp_path / "history.html").stat().st_size > 0


def test_linearizable_while_placement_moves_leaders_and_replicas(checker, tmp_path):
    # Four nodes, four groups of three replicas, alor: a slowed disk sends
    # replicas and leaders off its node, the node running placement is
    # killed mid-way, the disk recovers, and group 0's leader is cut off.
    r = run(tmp_path, checker, rounds=1, clients=6, keys=8, ops_per_phase=40, placement=True)
    assert len(r.faults) == 4, r.faults
    assert r.ops > 8 * 40, r
    assert r.returncode == 0, f"{r.verdict}\nhistory: {r.history} (logs beside it)"
    assert "linearizable:" in r.verdict
