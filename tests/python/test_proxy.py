"""recall-proxy in front of a recalld with --data-dir: every command an
unmodified pymemcache client sends, the meta subset, the clear refusals,
and a client that never reads its replies stalling only itself."""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path

import pytest
from pymemcache.client.base import Client
from test_proxy_crash import HOST, Rig


@pytest.fixture(scope="module")
def rig():
    with tempfile.TemporaryDirectory(prefix="recall-proxy-") as d:
        r = Rig(backup="on", tmp=Path(d))
        try:
            r.start_server()
            r.start_proxy()
            yield r
        finally:
            r.close()


@pytest.fixture
def mc(rig):
    c = Client((HOST, rig.proxy_port), default_noreply=False, timeout=10)
    yield c
    c.close()


def raw(rig, data: bytes, expect_end: bytes | None) -> bytes:
    """Send, then read until the reply ends with `expect_end` (or, for
    None, until the proxy closes the connection)."""
    with socket.create_connection((HOST, rig.proxy_port), timeout=10) as s:
        s.sendall(data)
        got = b""
        while expect_end is None or not got.endswith(expect_end):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def test_classic_commands(mc, rig):
    assert mc.set(b"a", b"1", expire=0)
    assert mc.get(b"a") == b"1"
    assert mc.add(b"a", b"2") is False
    assert mc.add(b"b", b"x")
    assert mc.replace(b"b", b"y")
    assert mc.append(b"b", b"z") and mc.prepend(b"b", b"w")
    assert mc.get(b"b") == b"wyz"
    value, cas = mc.gets(b"a")
    assert value == b"1" and int(cas) > 0
    assert mc.cas(b"a", b"3", cas) is True
    assert mc.cas(b"a", b"4", cas) is False
    assert mc.get_many([b"a", b"b", b"missing"]) == {b"a": b"3", b"b": b"wyz"}
    mc.set(b"n", b"10")
    assert mc.incr(b"n", 5) == 15 and mc.decr(b"n", 20) == 0
    assert mc.incr(b"nokey", 1) is None
    assert mc.touch(b"a", 100)
    assert mc.delete(b"a") and not mc.delete(b"a")
    assert mc.get(b"a") is None
    # noreply: run, not answered; the next request sees it.
    mc.set(b"q", b"quiet", noreply=True)
    assert mc.get(b"q") == b"quiet"
    # The writes went to recalld, and the proxy's backup holds them.
    assert rig.direct().get(b"b") == b"wyz"
    assert int(mc.stats()[b"backup_entries"]) > 0
    assert mc.version().startswith(b"recall-proxy")


def test_meta_commands(rig):
    r = raw(rig, b"ms m1 2 c T0 F5 Oxy\r\nhi\r\nmg m1 v f c k\r\nma m2\r\nmd m1 q\r\nmg m1 v\r\nmn\r\n", b"MN\r\n")
    lines = r.split(b"\r\n")
    assert lines[0].startswith(b"HD c") and lines[0].endswith(b" Oxy")
    ts = lines[0].split()[1]
    assert lines[1] == b"VA 2 f5 " + ts + b" km1"
    assert lines[2] == b"hi"
    assert lines[3] == b"NF"
    assert lines[4:] == [b"EN", b"MN", b""]
    # q hides successes only, as recalld does: ma's too, even with v.
    r = raw(rig, b"ms m3 1 q\r\n5\r\nma m3 q v\r\nmd m3 q\r\nmd m3 q\r\nmg m3 v q\r\nmn\r\n", b"MN\r\n")
    assert r == b"NF\r\nMN\r\n"


def test_what_it_cannot_forward_is_refused_by_name(rig):
    r = raw(rig, b"mg k v N30\r\nlru_crawler metadump all\r\nreplay k 0 0 1 1\r\nx\r\ngat 10 k\r\nmn\r\n", b"MN\r\n")
    lines = r.split(b"\r\n")
    assert lines[0] == b"CLIENT_ERROR recall-proxy does not forward flag N on mg"
    assert lines[1] == b"CLIENT_ERROR recall-proxy does not forward lru_crawler"
    assert lines[2].startswith(b"CLIENT_ERROR recall-proxy does not forward replay")
    assert lines[3] == b"CLIENT_ERROR recall-proxy does not forward gat/gats"
    # Bad input is the decoder's error, as recalld itself would answer.
    r = raw(rig, b"set k 0 0 notanumber\r\nmn\r\n", b"MN\r\n")
    assert r.startswith(b"CLIENT_ERROR") and r.endswith(b"MN\r\n")
    # Streamed values cannot be skipped: refused, then the connection closes.
    r = raw(rig, b"sset k 0 0\r\n", None)
    assert r.startswith(b"CLIENT_ERROR recall-proxy does not forward streamed values")


def peak_rss_kib(pid: int) -> int:
    """The process's resident high-water mark (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_client_that_never_reads_stalls_only_itself(rig, mc):
    mc.set(b"big", b"v" * 500_000)
    before = peak_rss_kib(rig.proxy.pid)
    hog = socket.create_connection((HOST, rig.proxy_port), timeout=10)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.setblocking(False)
    # A multi-get whose one reply is 100 MB first, then single gets: far
    # more than the socket buffers hold, and it never reads.
    request = b"get " + b" ".join([b"big"] * 200) + b"\r\n" + b"get big\r\n" * 64
    sent = 0
    try:
        for _ in range(2000):
            sent += hog.send(request)
    except BlockingIOError:
        pass
    assert sent >= len(request)
    # Everyone else is still served.
    for i in range(50):
        assert mc.set(f"other{i}".encode(), b"x") and mc.get(f"other{i}".encode()) == b"x"
    # Hang up without reading, and wait until the proxy has let go of the
    # connection: a proxy that built the multi-get's reply whole did so
    # before it found the socket gone, so its peak shows it.
    hog.close()
    deadline = time.monotonic() + 30
    while int(mc.stats()[b"curr_connections"]) != 1:
        assert time.monotonic() < deadline, "the proxy kept the closed connection"
        time.sleep(0.01)  # a probe interval
    grown = peak_rss_kib(rig.proxy.pid) - before
    assert grown < 16 << 10, f"the proxy's peak grew by {grown} KiB for a client that does not read"
