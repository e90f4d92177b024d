"""The XDP front tier (crates/recall-xdp) on a veth pair between two network
namespaces that this module creates and removes: recalld and its program
in one, the clients in the other, so every UDP GET crosses the veth and
meets the program.

Skipped, with the reason, where XDP cannot run here: not root, no `ip`, or
recalld reports that the program did not load or attach (the error it
prints is the reason).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TAG = f"{os.getpid() % 100000}"
SRV_NS, CLI_NS = f"rxs{TAG}", f"rxc{TAG}"
SRV_IF, CLI_IF = f"rxa{TAG}", f"rxb{TAG}"
SRV_IP, CLI_IP = "10.213.0.1", "10.213.0.2"
PORT = 11411
CLONE_NEWNET = 0x40000000


def recalld_path() -> str:
    for p in (os.environ.get("RECALL_XDP_RECALLD"), ROOT / "target/release/recalld", ROOT / "target/debug/recalld"):
        if p and Path(p).exists():
            return str(p)
    pytest.skip("no recalld binary built (target/release/recalld)")


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@contextmanager
def in_netns(name: str):
    """Run the block in netns `name` (this thread only): sockets made in it
    stay in that namespace afterwards."""
    libc = ctypes.CDLL(None, use_errno=True)
    here = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    there = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        yield
    finally:
        libc.setns(here, CLONE_NEWNET)
        os.close(here)
        os.close(there)


@pytest.fixture(scope="module")
def veth():
    if os.geteuid() != 0:
        pytest.skip("the front tier needs root (network namespaces, XDP)")
    if not shutil.which("ip"):
        pytest.skip("no ip (iproute2)")
    sh("ip", "netns", "add", SRV_NS)
    try:
        sh("ip", "netns", "add", CLI_NS)
        sh("ip", "link", "add", SRV_IF, "type", "veth", "peer", "name", CLI_IF)
        sh("ip", "link", "set", SRV_IF, "netns", SRV_NS)
        sh("ip", "link", "set", CLI_IF, "netns", CLI_NS)
        sh("ip", "-n", SRV_NS, "addr", "add", f"{SRV_IP}/24", "dev", SRV_IF)
        sh("ip", "-n", CLI_NS, "addr", "add", f"{CLI_IP}/24", "dev", CLI_IF)
        for ns, dev in ((SRV_NS, SRV_IF), (CLI_NS, CLI_IF), (SRV_NS, "lo"), (CLI_NS, "lo")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        yield
    finally:
        subprocess.run(["ip", "netns", "del", SRV_NS], capture_output=True)
        subprocess.run(["ip", "netns", "del", CLI_NS], capture_output=True)


class Tier:
    """recalld in the server namespace, with clients in the other."""

    def __init__(self, extra_toml: str = "", args: tuple[str, ...] = ("--front-tier", SRV_IF)):
        self.dir = tempfile.TemporaryDirectory()
        cfg = Path(self.dir.name) / "recalld.toml"
        cfg.write_text("[front_tier]\n" + extra_toml)
        cmd = ["ip", "netns", "exec", SRV_NS, recalld_path(), "-p", str(PORT), "-U", str(PORT), "-l", SRV_IP]
        cmd += ["--config", str(cfg), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"recalld exited: {''.join(self.lines)}")
            self.lines.append(line)
            if line.startswith("listening on"):
                break
        else:
            raise RuntimeError("recalld did not start")
        self.output = "".join(self.lines)
        threading.Thread(target=self._drain, daemon=True).start()
        with in_netns(CLI_NS):
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.tcp = socket.create_connection((SRV_IP, PORT), timeout=5)
        self.udp.settimeout(2)
        self.rid = 0

    def _drain(self):
        for _ in self.proc.stdout:
            pass

    @property
    def attached(self) -> bool:
        return "front tier on" in self.output

    def skip_unless_attached(self):
        if not self.attached:
            why = [line for line in self.lines if "front tier" in line]
            self.close()
            pytest.skip(f"XDP did not load here: {''.join(why).strip()}")

    def close(self):
        self.tcp.close()
        self.udp.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self.dir.cleanup()

    def cmd(self, data: bytes, until: bytes = b"\r\n") -> bytes:
        self.tcp.sendall(data)
        buf = b""
        while not buf.endswith(until):
            chunk = self.tcp.recv(65536)
            assert chunk, "recalld closed the connection"
            buf += chunk
        return buf

    def set(self, key: str, value: bytes, flags: int = 0, exptime: int = 0) -> None:
        assert self.cmd(b"set %s %d %d %d\r\n%s\r\n" % (key.encode(), flags, exptime, len(value), value)) == b"STORED\r\n"

    def udp_get(self, key: str, gets: bool = False) -> bytes:
        """One UDP request; the reply's text (frame header checked, then cut)."""
        for _ in range(5):  # a lost datagram is retried, bounded
            self.rid = (self.rid + 1) % 65536
            req = bytes([self.rid >> 8, self.rid & 255, 0, 0, 0, 1, 0, 0])
            self.udp.sendto(req + (b"gets " if gets else b"get ") + key.encode() + b"\r\n", (SRV_IP, PORT))
            try:
                while True:
                    d = self.udp.recv(2048)
                    if d[:2] == req[:2]:
                        assert d[4:6] == b"\x00\x01", "one datagram"
                        return d[8:]
            except TimeoutError:
                continue
        raise AssertionError("no UDP reply")

    def stats(self) -> dict[str, int]:
        out = self.cmd(b"stats\r\n", b"END\r\n").decode()
        return {m[1]: int(m[2]) for m in re.finditer(r"STAT (\S+) (\d+)\r\n", out)}

    def until_tier_hit(self, key: str) -> bytes:
        """GET until the tier answers one (the fill follows recalld's reply)."""
        for _ in range(50):
            before = self.stats()["front_tier_hits"]
            r = self.udp_get(key)
            if self.stats()["front_tier_hits"] > before:
                return r
        raise AssertionError(f"the tier never answered {key}")


@pytest.fixture
def tier(veth):
    t = Tier()
    t.skip_unless_attached()
    yield t
    t.close()


def test_a_hit_is_answered_by_the_tier_and_counted_as_a_get(tier):
    tier.set("k1", b"hello", flags=7)
    assert tier.udp_get("k1") == b"VALUE k1 7 5\r\nhello\r\nEND\r\n"
    assert tier.until_tier_hit("k1") == b"VALUE k1 7 5\r\nhello\r\nEND\r\n"
    cas = int(tier.cmd(b"gets k1\r\n", b"END\r\n").split()[4])
    assert tier.udp_get("k1", gets=True) == b"VALUE k1 7 5 %d\r\nhello\r\nEND\r\n" % cas
    s = tier.stats()
    assert s["front_tier_hits"] >= 2 and s["front_tier_fills"] >= 1
    # Every get, the tier's included, is in cmd_get and get_hits.
    assert s["cmd_get"] == s["get_hits"] + s["get_misses"]
    assert s["get_hits"] >= s["front_tier_hits"] + 1


def test_a_miss_and_a_write_reach_recalld(tier):
    assert tier.udp_get("nothing") == b"END\r\n"
    tier.set("k2", b"one")
    tier.until_tier_hit("k2")
    tier.set("k2", b"two")
    # The set cleared the cell before STORED: the next read is recalld's.
    assert tier.udp_get("k2") == b"VALUE k2 0 3\r\ntwo\r\nEND\r\n"
    assert tier.cmd(b"delete k2\r\n") == b"DELETED\r\n"
    assert tier.udp_get("k2") == b"END\r\n"
    assert tier.stats()["front_tier_invalidations"] >= 1


def test_values_larger_than_a_chunk_are_served_by_recalld(veth):
    t = Tier("chunk = 64\n")
    t.skip_unless_attached()
    try:
        t.set("fits", b"x" * 64)
        t.until_tier_hit("fits")
        t.set("big", b"y" * 65)
        before = t.stats()
        for _ in range(5):
            assert t.udp_get("big") == b"VALUE big 0 65\r\n" + b"y" * 65 + b"\r\nEND\r\n"
        after = t.stats()
        assert after["front_tier_hits"] == before["front_tier_hits"]
        assert after["front_tier_fills"] == before["front_tier_fills"]
    finally:
        t.close()


def test_no_stale_read_under_concurrent_writers(tier):
    """Writers set and delete their keys over TCP; a flusher runs flush_all.
    Every UDP read must return a value at least as new as the last write
    (or flush) acknowledged before the read was sent."""
    keys = [f"race{i}" for i in range(4)]
    lock = threading.Lock()
    seq = [0]
    issued = {k: 0 for k in keys}  # the op a writer has in flight
    floor = {k: 0 for k in keys}  # the newest acknowledged op, per key
    stop = threading.Event()
    errors: list[str] = []

    def next_seq() -> int:
        with lock:
            seq[0] += 1
            return seq[0]

    def writer(key: str):
        with in_netns(CLI_NS):
            c = socket.create_connection((SRV_IP, PORT), timeout=5)
        f = c.makefile("rb")
        n = 0
        while not stop.is_set() and n < 3000:
            n += 1
            s = next_seq()
            with lock:
                issued[key] = s
            if n % 7 == 0:
                c.sendall(b"delete %s\r\n" % key.encode())
                f.readline()
            else:
                v = str(s).encode()
                c.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(v), v))
                assert f.readline() == b"STORED\r\n"
            with lock:
                floor[key] = max(floor[key], s)
        c.close()

    def flusher():
        with in_netns(CLI_NS):
            c = socket.create_connection((SRV_IP, PORT), timeout=5)
        f = c.makefile("rb")
        for _ in range(20):
            if stop.is_set():
                break
            with lock:
                before = dict(issued)
            c.sendall(b"flush_all\r\n")
            assert f.readline() == b"OK\r\n"
            with lock:
                for k in keys:
                    # A write in flight at the flush may land after it.
                    floor[k] = max(floor[k], before[k])
            time.sleep(0.05)
        c.close()

    threads = [threading.Thread(target=writer, args=(k,)) for k in keys] + [threading.Thread(target=flusher)]
    for t in threads:
        t.start()
    reads = 0
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and any(t.is_alive() for t in threads[:-1]):
            for k in keys:
                with lock:
                    low = floor[k]
                r = tier.udp_get(k)
                reads += 1
                m = re.fullmatch(rb"VALUE \S+ 0 \d+\r\n(\d+)\r\nEND\r\n", r)
                if m and int(m[1]) < low:
                    errors.append(f"{k}: read {int(m[1])} after {low} was acknowledged")
                elif not m and r != b"END\r\n":
                    errors.append(f"{k}: bad reply {r!r}")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    s = tier.stats()
    assert not errors, errors[:5]
    # The check ran against the tier, not around it.
    assert reads > 100 and s["front_tier_hits"] > 0, (reads, s)


def test_expired_items_are_not_served(tier):
    tier.set("short", b"soon", exptime=4)
    set_at = time.time()
    tier.until_tier_hit("short")
    # recalld's clock has one-second steps: after 4 s and a step, gone.
    while time.time() < set_at + 5.5:
        time.sleep(0.1)
    for _ in range(5):
        assert tier.udp_get("short") == b"END\r\n"


def test_kill_9_detaches_the_program(veth):
    t = Tier()
    t.skip_unless_attached()
    shown = subprocess.run(["ip", "-n", SRV_NS, "link", "show", SRV_IF], capture_output=True, text=True).stdout
    assert "xdp" in shown, shown
    t.proc.kill()  # SIGKILL
    t.proc.wait(timeout=10)
    for _ in range(100):
        shown = subprocess.run(["ip", "-n", SRV_NS, "link", "show", SRV_IF], capture_output=True, text=True).stdout
        if "xdp" not in shown:
            break
        time.sleep(0.05)
    t.close()
    assert "xdp" not in shown, shown


def test_off_by_default_and_a_bad_interface_is_an_error_not_a_crash(veth):
    off = Tier(args=())
    try:
        assert not any(k.startswith("front_tier") for k in off.stats())
    finally:
        off.close()
    bad = Tier(args=("--front-tier", "nosuchif0"))
    try:
        assert "serving without the front tier" in bad.output
        bad.set("k", b"v")
        assert bad.udp_get("k") == b"VALUE k 0 1\r\nv\r\nEND\r\n"
        assert not any(k.startswith("front_tier") for k in bad.stats())
    finally:
        bad.close()


def test_a_delayed_flush_all_is_respected(tier):
    tier.set("later", b"gone soon")
    tier.until_tier_hit("later")
    assert tier.cmd(b"flush_all 2\r\n") == b"OK\r\n"
    flushed_at = time.time() + 2
    # recalld's clock has one-second steps: a second past the flush time.
    while time.time() < flushed_at + 1.5:
        time.sleep(0.1)
    for _ in range(5):
        assert tier.udp_get("later") == b"END\r\n"
