"""recall-proxy's crash test: an unmodified pymemcache client writes through
recall-proxy while the recalld behind it is killed -9 and restarted.

Every cycle writes a batch of new keys through the proxy (each write counts
once pymemcache got STORED), kills recalld with SIGKILL, and starts it again
on the same data directory; recalld's snapshot interval is an hour, so
nothing written since its start is on its disk. Once the restarted recalld
has ended its recovery (the proxy, a registered client, has replayed), the
previous cycle's keys are read *directly from recalld*, not through the
proxy (whose reads would repair a lost key from the backup and hide the
loss). With `--kill-proxy`, every fifth cycle also kills the proxy with
SIGKILL together with the server and starts a new proxy on its spill file.

CI runs the short version below; the long one is

    python3 tests/python/test_proxy_crash.py --cycles 100 [--kill-proxy]

(binaries from RECALL_SERVER / RECALL_PROXY, default target/release/, else
target/debug/). The negative control (`--backup off`) must lose writes.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
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
    if os.environ.get(env):
        return os.environ[env]
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

    def start_server(self):
        self.server = subprocess.Popen(
            [binary("RECALL_SERVER", "recalld"), "-p", str(self.server_port), "-l", HOST, "-U", "0",
             "--data-dir", str(self.tmp / "data"), "--durability", "client-backup",
             "--snapshot-interval", "3600", "--recovery-grace", "2"],
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
    refused: int = 0
    checked: int = 0
    lost: list = field(default_factory=list)
    proxy_kills: int = 0


def run(cycles: int, backup: str = "on", kill_proxy: bool = False, seed: int = 1, tmp: Path | None = None) -> Result:
    rng = random.Random(seed)
    own_tmp = tmp is None
    tmpdir = tempfile.TemporaryDirectory(prefix="recall-proxy-crash-") if own_tmp else None
    rig = Rig(backup=backup, tmp=Path(tmpdir.name) if tmpdir else tmp)
    res = Result()
    try:
        rig.start_server()
        rig.start_proxy()
        prev: dict[bytes, bytes] = {}
        for cycle in range(cycles + 1):
            if cycle > 0:
                rig.kill(rig.server)
                killed_proxy = kill_proxy and cycle % 5 == 0
                if killed_proxy:
                    rig.kill(rig.proxy)
                    res.proxy_kills += 1
                rig.start_server()
                if killed_proxy:
                    rig.start_proxy()
                rig.wait_recovered()
                got = rig.direct().get_many(list(prev)) if prev else {}
                for k, v in prev.items():
                    res.checked += 1
                    if got.get(k) != v:
                        res.lost.append(k)
            if cycle == cycles:
                break
            client = Client((HOST, rig.proxy_port), default_noreply=False, connect_timeout=2, timeout=10)
            prev = {}
            target = rng.randint(20, 80)
            attempts = 0
            while len(prev) < target and attempts < 50 * target:
                attempts += 1
                key = f"c{cycle}:{len(prev)}".encode()
                value = f"{seed}-{cycle}-{len(prev)}-{rng.getrandbits(32)}".encode()
                try:
                    if client.set(key, value):
                        prev[key] = value
                        res.acknowledged += 1
                    else:
                        res.refused += 1
                except Exception:
                    # Not acknowledged (the proxy answered SERVER_ERROR, or the
                    # connection broke): not counted, and the key is reused.
                    res.refused += 1
                    client.close()
            client.close()
            if len(prev) < target:
                raise AssertionError(f"cycle {cycle}: only {len(prev)} of {target} writes acknowledged")
        return res
    finally:
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
    # No snapshot ran between the writes and the kill: all of them are gone.
    assert len(r.lost) == r.checked


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
          f"seconds={time.monotonic() - t0:.1f} acknowledged={r.acknowledged} refused={r.refused} "
          f"checked={r.checked} lost={len(r.lost)} proxy_kills={r.proxy_kills}")
    return 0 if (a.backup == "off") == bool(r.lost) else 1


if __name__ == "__main__":
    sys.exit(main())
