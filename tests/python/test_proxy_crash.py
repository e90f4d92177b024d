"""recall-proxy's crash test: an unmodified pymemcache client writes through
recall-proxy while the recalld behind it is killed -9 and restarted.

A writer thread sets new keys through the proxy without pause (a write
counts once pymemcache got STORED). Every cycle waits for 20 to 80 more
acknowledged writes, kills recalld with SIGKILL in the middle of the
stream, and starts it again on the same data directory; recalld's snapshot
interval is an hour, so nothing written since its start is on its disk.
Once the restarted recalld has ended its recovery (the proxy, a registered
client, has replayed: the test fails if the grace period ended it
instead), the writes acknowledged so far are read *directly from recalld*,
not through the proxy (whose reads would repair a lost key from the backup
and hide the loss), and all of them once more at the end. With
`--kill-proxy`, every fifth cycle also kills the proxy with SIGKILL
together with the server and starts a new proxy on its spill file.

CI runs the short version below; the long one is

    python3 tests/python/test_proxy_crash.py --cycles 100 [--kill-proxy]

(binaries from RECALL_SERVER / RECALL_PROXY, default target/release/, else
target/debug/). The negative control (`--backup off`) must lose writes.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pymemcache.client.base import Client

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
# Bounds for every wait: a wedged process fails the run, never hangs it.
READY_TIMEOUT = 20.0
RECOVERY_TIMEOUT = 30.0


def binary(env: str, name: str) -> str:
    if os.environ.get(env, "").strip():
        argv = shlex.split(os.environ[env])
        if len(argv) != 1 or Path(argv[0]).name != name:
            # A reference memcached (RECALL_SERVER="memcached -u root") has
            # no write backup to test.
            pytest.skip(f"{env}={os.environ[env]!r} is not {name}")
        return argv[0]
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / name
        if p.exists():
            return str(p)
    pytest.skip(f"{name} not built (cargo build -p ...), or set {env}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = pred()
        if r:
            return r
        time.sleep(0.01)  # a probe interval, not a wait for readiness
    raise TimeoutError(f"timed out waiting for {what}")


def can_connect(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=0.5).close()
        return True
    except OSError:
        return False


@dataclass
class Rig:
    """A recalld on a fixed port (the proxy's --servers must not change)
    and a recall-proxy in front of it."""

    backup: str
    tmp: Path
    server_port: int = field(default_factory=free_port)
    server: subprocess.Popen | None = None
    proxy: subprocess.Popen | None = None
    proxy_port: int = 0

    def grace(self) -> int:
        """recalld's --recovery-grace. With the backup on, recovery ends when
        the proxy has replayed, so a long grace costs nothing and leaves a
        proxy killed with the server time to restart on a loaded machine;
        without it only the grace period ends recovery (no client
        registered), so it is short."""
        return 15 if self.backup == "on" else 2

    def start_server(self):
        self.server = subprocess.Popen(
            [binary("RECALL_SERVER", "recalld"), "-p", str(self.server_port), "-l", HOST, "-U", "0",
             "--data-dir", str(self.tmp / "data"), "--durability", "client-backup",
             "--snapshot-interval", "3600", "--recovery-grace", str(self.grace())],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.server.poll() is None and can_connect(self.server_port), READY_TIMEOUT, "recalld")

    def start_proxy(self):
        port_file = self.tmp / "proxy.port"
        port_file.unlink(missing_ok=True)
        argv = [binary("RECALL_PROXY", "recall-proxy"), "--listen", f"{HOST}:0", "--port-file", str(port_file),
                "--servers", f"{HOST}:{self.server_port}", "--backup", self.backup,
                "--retry-backoff-ms", "20", "--request-timeout-ms", "2000"]
        if self.backup == "on":
            argv += ["--spill-file", str(self.tmp / "proxy.spill"), "--client-id", "crash-test-proxy"]
        self.proxy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        text = wait_for(lambda: port_file.exists() and port_file.read_text(), READY_TIMEOUT, "the proxy's port file")
        self.proxy_port = int(text.strip().rsplit(":", 1)[1])

    def kill(self, proc: subprocess.Popen | None):
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=READY_TIMEOUT)

    def direct(self) -> Client:
        return Client((HOST, self.server_port), default_noreply=False, connect_timeout=2, timeout=5)

    def wait_recovered(self):
        """Until recalld's recovery is over: every registered client (the
        proxy) replayed, or the grace period ended it. With the backup on it
        must be the replay: the proxy registered, and a grace period that
        ran out with it missing fails the run."""
        def done():
            try:
                c = self.direct()
                s = c.stats()
                c.close()
            except Exception:
                return None
            return s if s[b"recovering"] == 0 else None
        s = wait_for(done, RECOVERY_TIMEOUT, "recalld's recovery to end")
        if self.backup == "on":
            assert s[b"recovery_grace_missed"] == 0, "the proxy did not replay within the grace period"
            assert s[b"recovery_clients_replayed"] == s[b"recovery_clients_known"] == 1

    def close(self):
        self.kill(self.proxy)
        self.kill(self.server)


@dataclass
class Result:
    acknowledged: int = 0
    in_doubt: int = 0
    checked: int = 0
    lost: list = field(default_factory=list)
    proxy_kills: int = 0
    # Acknowledged before the first kill: no snapshot has ever covered them.
    before_first_kill: int = 0


class Writer(threading.Thread):
    """Writes new keys through the proxy without pause, across the kills:
    a write counts as acknowledged when pymemcache got STORED. A write that
    raised is in doubt and its key is never used again (it may still land
    later, from a connection the client gave up on)."""

    def __init__(self, rig: Rig, seed: int):
        super().__init__(daemon=True)
        self.rig, self.rng = rig, random.Random(seed)
        self.lock = threading.Condition()
        self.acked: list[tuple[bytes, bytes]] = []
        self.in_doubt = 0
        self.stop = threading.Event()
        self.paused = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        client = None
        n = 0
        try:
            while not self.stop.is_set():
                if self.paused.is_set():
                    client and client.close()
                    client = None
                    self.stop.wait(0.01)  # paused while the proxy is down
                    continue
                if client is None:
                    client = Client((HOST, self.rig.proxy_port), default_noreply=False, connect_timeout=2, timeout=10)
                key, value = f"k{n}".encode(), f"{n}-{self.rng.getrandbits(32)}".encode()
                n += 1
                try:
                    ok = client.set(key, value)
                except Exception:
                    ok = None
                    client.close()
                    client = None
                with self.lock:
                    if ok:
                        self.acked.append((key, value))
                        self.lock.notify_all()
                    else:
                        self.in_doubt += 1
        except BaseException as e:  # reported by the main thread
            self.error = e

    def wait_acked(self, count: int):
        with self.lock:
            if not self.lock.wait_for(lambda: len(self.acked) >= count or self.error, timeout=RECOVERY_TIMEOUT):
                raise TimeoutError(f"the writer did not reach {count} acknowledged writes")


def check(rig: Rig, pairs: list[tuple[bytes, bytes]], res: Result):
    """Read `pairs` directly from recalld, in chunks."""
    c = rig.direct()
    for i in range(0, len(pairs), 100):
        chunk = pairs[i : i + 100]
        got = c.get_many([k for k, _ in chunk])
        for k, v in chunk:
            res.checked += 1
            if got.get(k) != v:
                res.lost.append(k)
    c.close()


def run(cycles: int, backup: str = "on", kill_proxy: bool = False, seed: int = 1, tmp: Path | None = None) -> Result:
    rng = random.Random(seed)
    tmpdir = tempfile.TemporaryDirectory(prefix="recall-proxy-crash-") if tmp is None else None
    rig = Rig(backup=backup, tmp=Path(tmpdir.name) if tmpdir else tmp)
    res = Result()
    writer = None
    try:
        rig.start_server()
        rig.start_proxy()
        writer = Writer(rig, seed)
        writer.start()
        checked_upto = 0
        for cycle in range(1, cycles + 1):
            # Kill at a random moment of the write stream.
            writer.wait_acked(len(writer.acked) + rng.randint(20, 80))
            rig.kill(rig.server)
            if cycle == 1:
                with writer.lock:
                    res.before_first_kill = len(writer.acked)
            if kill_proxy and cycle % 5 == 0:
                writer.paused.set()
                rig.kill(rig.proxy)
                res.proxy_kills += 1
                rig.start_server()
                rig.start_proxy()
                writer.paused.clear()
            else:
                rig.start_server()
            rig.wait_recovered()
            with writer.lock:
                todo = writer.acked[checked_upto:]
            check(rig, todo, res)
            checked_upto += len(todo)
        writer.stop.set()
        writer.join(timeout=READY_TIMEOUT)
        if writer.error:
            raise writer.error
        # Every acknowledged write, once more, after the last restart.
        res.acknowledged, res.in_doubt = len(writer.acked), writer.in_doubt
        res.checked, res.lost = 0, []
        check(rig, writer.acked, res)
        return res
    finally:
        if writer:
            writer.stop.set()
        rig.close()
        if tmpdir:
            tmpdir.cleanup()


def test_every_acknowledged_write_survives_kill_9_of_the_server():
    r = run(cycles=10, backup="on", seed=1)
    assert r.checked == r.acknowledged and r.checked > 0
    assert r.lost == [], f"{len(r.lost)} acknowledged writes lost: {r.lost[:10]}"


def test_and_of_the_proxy_too_with_its_spill_file():
    r = run(cycles=10, backup="on", kill_proxy=True, seed=2)
    assert r.proxy_kills == 2
    assert r.checked == r.acknowledged and r.checked > 0
    assert r.lost == [], f"{len(r.lost)} acknowledged writes lost: {r.lost[:10]}"


def test_negative_control_without_the_backup_loses_writes():
    r = run(cycles=3, backup="off", seed=3)
    assert r.checked == r.acknowledged and r.checked > 0
    # No snapshot ever ran: at least everything written before the first
    # kill is gone.
    assert r.before_first_kill > 0 and len(r.lost) >= r.before_first_kill


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--backup", choices=["on", "off"], default="on")
    ap.add_argument("--kill-proxy", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    t0 = time.monotonic()
    r = run(a.cycles, a.backup, a.kill_proxy, a.seed)
    print(f"cycles={a.cycles} backup={a.backup} kill_proxy={a.kill_proxy} seed={a.seed} "
          f"seconds={time.monotonic() - t0:.1f} acknowledged={r.acknowledged} in_doubt={r.in_doubt} "
          f"checked={r.checked} lost={len(r.lost)} proxy_kills={r.proxy_kills}")
    return 0 if (a.backup == "off") == bool(r.lost) else 1


if __name__ == "__main__":
    sys.exit(main())
