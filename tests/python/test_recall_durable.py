"""recall.DurableClient through kill -9 of recalld: every acknowledged
write reads back after each restart, and a plain recall.Client, the
negative control, loses the writes no snapshot covered.

Each cycle writes batch A, waits until a snapshot covers it, writes batch
B (overwrites, new keys, a delete, an incr), kills the server with SIGKILL,
restarts it on the same port and data directory, and reads every key of
the ledger (the last acknowledged value of each key, None for a deleted
one) back. Batch B lives only in the client's backup when the server dies.

A last test kills a writer process and the server together: a new
process on the writer's spill file replays what both lost.

Cycles: RECALL_PY_CRASH_CYCLES (10 by default; docs/benchmarks/python-client.md
has the 100-cycle command and its result).
"""

from __future__ import annotations

import os
import time

import pytest
from mcserver import RawConn, ServerProcess
from recall_py import recall, require_recalld, restart, until

CYCLES = int(os.environ.get("RECALL_PY_CRASH_CYCLES", "10"))
KEYS = 20


def server_args(data_dir) -> list[str]:
    # No periodic snapshot: only the ones each cycle asks for, so batch B is
    # never in a snapshot when the server is killed (the control depends on it).
    return ["--data-dir", str(data_dir), "--snapshot-interval", "3600", "--recovery-grace", "5"]


def durable_watermark(srv) -> int:
    with RawConn(srv.address) as conn:
        conn.send(b"durable\r\n")
        line = conn.readline().strip()
    parts = line.split()
    assert parts[0] == b"DURABLE", line
    return int(parts[2])


def run_cycles(srv, client, cover_batch_a) -> tuple[int, int, list[str]]:
    """Returns (reads checked, writes lost, the first few losses)."""
    ledger: dict[str, bytes | None] = {}
    checked, lost, examples = 0, 0, []
    for cycle in range(CYCLES):
        for i in range(KEYS // 2):
            key, value = f"k{i}", f"{cycle}:A{i}".encode()
            client.set(key, value)
            ledger[key] = value
        if cycle == 0:
            # In batch A, so that they exist after every crash, also for the
            # control (which loses what comes after).
            client.set("counter", b"0")
            client.set("log", b"")
        cover_batch_a()
        for i in range(KEYS // 4, KEYS):
            key, value = f"k{i}", f"{cycle}:B{i}".encode()
            client.set(key, value)
            ledger[key] = value
        gone = f"k{cycle % (KEYS // 2)}"
        assert client.delete(gone, noreply=False) is True
        ledger[gone] = None
        ledger["counter"] = str(client.incr("counter", 1)).encode()
        assert client.append("log", f"{cycle},".encode()) is True
        ledger["log"] = (ledger.get("log") or b"") + f"{cycle},".encode()

        if isinstance(client, recall.DurableClient):
            # Batch B is in the backup only: the replay has work to do.
            assert sum(entries for _, entries, _, _ in client.backup_status()) > 0
        restart(srv)
        # Replay now (the poller would too); the plain client has nothing to replay.
        until(getattr(client, "poll_now", lambda: None), "replay after restart")
        for key, want in ledger.items():
            got = until(lambda k=key: client.get(k), f"read {key} after restart")
            checked += 1
            if (got.rstrip() if got is not None else None) != want:
                lost += 1
                if len(examples) < 5:
                    examples.append(f"cycle {cycle}: {key} = {got!r}, acknowledged {want!r}")
                ledger[key] = got  # count each loss once
    return checked, lost, examples


@pytest.fixture
def crash_server(server_command, tmp_path):
    require_recalld(server_command)
    srv = ServerProcess(server_command, server_args(tmp_path / "data"), name="recalld (killed each cycle)")
    srv.start()
    yield srv
    srv.stop()


@pytest.mark.timeout(60 + 20 * CYCLES)
def test_durable_client_keeps_every_acknowledged_write_through_kill_9(crash_server):
    client = recall.DurableClient(crash_server.address, default_noreply=False, poll_interval=0.05)
    checked, lost, examples = run_cycles(crash_server, client, lambda: client.sync(30))
    assert checked >= CYCLES * KEYS
    assert lost == 0, f"{lost} of {checked} acknowledged writes lost: {examples}"
    print(f"DurableClient: {CYCLES} kill -9 cycles, {checked} reads, 0 acknowledged writes lost")
    client.close(30)


@pytest.mark.timeout(60 + 20 * CYCLES)
def test_negative_control_plain_client_loses_writes(crash_server):
    client = recall.Client(crash_server.address, default_noreply=False)

    def snapshot_batch_a():
        _, cas = client.gets(f"k{KEYS // 2 - 1}")
        with RawConn(crash_server.address) as conn:
            conn.send(b"snapshot\r\n")
            assert conn.readline().strip() == b"OK"
        deadline = time.monotonic() + 30
        while durable_watermark(crash_server) < int(cas):
            assert time.monotonic() < deadline, "no snapshot covered batch A"
            time.sleep(0.01)

    checked, lost, _ = run_cycles(crash_server, client, snapshot_batch_a)
    # The checker can fail: without the backup, batch B dies with the server.
    assert lost > 0, f"the plain client lost nothing in {checked} reads"
    print(f"negative control: {lost} of {checked} acknowledged writes lost")


WRITER = """
import sys, recall
db = recall.DurableClient(("127.0.0.1", int(sys.argv[1])), spill_file=sys.argv[2], default_noreply=False)
for i in range(50):
    db.set(f"s{i}", f"v{i}".encode())
print("acknowledged", flush=True)
sys.stdin.read()  # killed here, with its backup in the spill file only
"""


@pytest.mark.timeout(120)
def test_spill_file_survives_the_client_and_the_server_killed_together(crash_server, tmp_path):
    import subprocess
    import sys

    spill = tmp_path / "client.spill"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(crash_server.port), str(spill)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "acknowledged"
    finally:
        writer.kill()
        writer.wait(10)
    restart(crash_server)
    # A new process on the same spill file takes the dead one's id and backup.
    db = recall.DurableClient(crash_server.address, spill_file=str(spill), default_noreply=False)
    until(db.poll_now, "replay from the spill file")
    got = {i: db.get(f"s{i}") for i in range(50)}
    assert got == {i: f"v{i}".encode() for i in range(50)}
    db.close(30)
