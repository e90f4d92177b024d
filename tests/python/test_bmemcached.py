"""python-binary-memcached (bmemcached): binary protocol only.

bmemcached swallows connection errors (a dead server reads as a miss or a
failed store), so every test asserts positive results too: a server that
doesn't speak the binary protocol fails instead of looking like a miss.

Opcodes it uses: GET 0x00, GETK 0x0c / GETKQ 0x0d (multi-get), SET 0x01,
SETQ 0x11 / ADDQ 0x12 + NOOP (set_multi), ADD 0x02, REPLACE 0x03, DELETE 0x04
(+NOOP for delete_multi), INCREMENT 0x05, DECREMENT 0x06, FLUSH 0x08 (with a
4-byte expiration extra), STAT 0x10.  It has no touch/append/prepend.
"""

from __future__ import annotations

import bmemcached
import pytest
from bmemcached.exceptions import MemcachedException

BINARY_VALUE = bytes(range(256)) * 4 + b"\r\nEND\r\n\x00tail"
ONE_MB = 1024 * 1024
STATUS_VALUE_TOO_LARGE = 0x03
STATUS_NON_NUMERIC = 0x06
STATUS_INVALID_ARGUMENTS = 0x04


@pytest.fixture
def mc(server):
    client = bmemcached.Client([server.addr_str], socket_timeout=5, **server.sasl_kwargs())
    yield client
    client.disconnect_all()


def test_set_get(mc):
    assert mc.set("k", b"v") is True
    assert mc.get("k") == b"v"
    assert mc.get("missing") is None


def test_python_types_roundtrip_flags(mc):
    # bmemcached records the Python type in the item flags.
    assert mc.set("int", 7)
    assert mc.set("str", "text")
    assert mc.set("obj", {"nested": [1, 2]})
    assert mc.get("int") == 7
    assert mc.get("str") == "text"
    assert mc.get("obj") == {"nested": [1, 2]}


def test_compressed_value(mc):
    # Values over 128 bytes are zlib-compressed and flagged as such.
    text = "abc" * 1000
    assert mc.set("z", text)
    assert mc.get("z") == text


def test_get_multi(mc):
    assert mc.set_multi({"a": b"1", "b": b"2"}) == []
    assert mc.get_multi(["a", "nope", "b"]) == {"a": b"1", "b": b"2"}
    assert mc.get_multi(["x"]) == {}


def test_add_replace(mc):
    assert mc.add("k", b"1") is True
    assert mc.add("k", b"2") is False
    assert mc.replace("missing", b"x") is False
    assert mc.replace("k", b"3") is True
    assert mc.get("k") == b"3"


def test_gets_cas(mc):
    mc.set("k", b"v0")
    value, token = mc.gets("k")
    assert value == b"v0" and token > 0
    assert mc.cas("k", b"v1", token) is True
    assert mc.cas("k", b"v2", token) is False  # stale token
    assert mc.get("k") == b"v1"
    assert mc.gets("missing") == (None, None)


def test_cas_missing_key(mc):
    assert mc.set("present", b"p") is True  # the server really answers
    assert mc.cas("missing", b"v", 12345) is False
    assert mc.get("missing") is None
    assert mc.get("present") == b"p"


def test_set_returns_cas(mc):
    ok, token = mc.set("k", b"v", get_cas=True)
    assert ok is True
    assert mc.gets("k") == (b"v", token)


def test_delete(mc):
    mc.set("k", b"v")
    value, token = mc.gets("k")
    assert value == b"v"
    assert mc.delete("k", cas=token + 1) is False  # wrong CAS: kept
    assert mc.get("k") == b"v"
    assert mc.delete("k", cas=token) is True
    assert mc.get("k") is None
    mc.set_multi({"a": b"1", "b": b"2"})
    assert mc.delete_multi(["a", "b"]) is True
    assert mc.get_multi(["a", "b"]) == {}


def test_incr_decr(mc):
    mc.set("n", b"10")
    assert mc.incr("n", 5) == 15
    assert mc.decr("n", 100) == 0  # floors at zero
    # Rewritten in place, space-padded to the old length; flags (bytes) kept.
    assert mc.get("n") == b"0 "


def test_incr_creates_missing_with_default(mc):
    # bmemcached always sends an initial value and a (non-0xffffffff)
    # expiration, which tells the server to create a missing counter.
    assert mc.incr("fresh", 5) == 0
    assert mc.incr("fresh", 5) == 5
    # Created with flags 0, which bmemcached decodes as a str.
    assert mc.get("fresh") == "5"


def test_incr_wraps(mc):
    mc.set("n", str(2**64 - 1).encode())
    assert mc.incr("n", 2) == 1


def test_incr_non_numeric(mc):
    mc.set("s", b"abc")
    with pytest.raises(MemcachedException) as info:
        mc.incr("s", 1)
    assert info.value.code == STATUS_NON_NUMERIC
    assert mc.get("s") == b"abc"


def test_already_expired_absolute_time(mc):
    # bmemcached maps negative times to 0xfffffffe, so express "already
    # expired" as an absolute Unix time in the past (anything > 30 days).
    assert mc.set("k", b"v", time=1_000_000_000) is True
    assert mc.get("k") is None


def test_flush_all(mc):
    assert mc.set_multi({"a": b"1", "b": b"2"}) == []
    assert mc.get_multi(["a", "b"]) == {"a": b"1", "b": b"2"}
    assert mc.flush_all() is True
    assert mc.get_multi(["a", "b"]) == {}


def test_binary_value(mc):
    assert mc.set("bin", BINARY_VALUE)
    assert mc.get("bin") == BINARY_VALUE


def test_large_values(mc):
    value = bytes(i % 241 for i in range(ONE_MB - 1024))
    assert mc.set("big", value, compress_level=0)
    assert mc.get("big") == value
    with pytest.raises(MemcachedException) as info:
        mc.set("huge", b"x" * (ONE_MB + 1), compress_level=0)
    assert info.value.code == STATUS_VALUE_TOO_LARGE
    assert mc.get("huge") is None


def test_key_length(mc, server):
    assert mc.set("k" * 250, b"v") is True
    assert mc.get("k" * 250) == b"v"
    # bmemcached doesn't check key length: the server must refuse it.
    # memcached answers status 0x04 "Invalid arguments" and closes the
    # connection, after which bmemcached holds off reconnecting for 5 s,
    # so check the store with a new client.
    with pytest.raises(MemcachedException) as info:
        mc.set("k" * 251, b"v")
    assert info.value.code == STATUS_INVALID_ARGUMENTS
    other = bmemcached.Client([server.addr_str], socket_timeout=5, **server.sasl_kwargs())
    assert other.get("k" * 250) == b"v"
    with pytest.raises(MemcachedException) as info:
        other.get("k" * 251)
    assert info.value.code == STATUS_INVALID_ARGUMENTS


@pytest.mark.counts_requests
def test_stats(mc, server):
    mc.set("a", b"1")
    mc.get("a")
    mc.get("b")
    [(name, stats)] = mc.stats().items()
    assert name == server.addr_str
    assert int(stats["cmd_get"]) == 2
    assert int(stats["get_hits"]) == 1
    assert int(stats["get_misses"]) == 1
    assert int(stats["cmd_set"]) == 1
    assert int(stats["curr_items"]) == 1
    assert stats["version"]
    assert int(stats["pid"]) > 0


def test_quiet_pipeline(mc):
    # set_multi sends SETQ * n + NOOP; a server that answered a successful
    # quiet set would make bmemcached report that key as failed.
    mapping = {f"k{i}": str(i).encode() for i in range(50)}
    assert mc.set_multi(mapping) == []
    assert mc.get_multi(list(mapping)) == mapping
    # ADDQ on existing keys must answer (quiet commands still report errors).
    failed = mc.set_multi({("k1", 0): b"x", ("new", 0): b"y"})
    assert failed == [("k1", 0)]
    assert mc.get("new") == b"y"
    assert mc.get("k1") == b"1"


@pytest.mark.server_args("-B", "binary")
def test_binary_only_mode(mc):
    assert mc.set("k", b"v")
    assert mc.get("k") == b"v"
