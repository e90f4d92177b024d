"""pymemcache (text protocol) against the server under test.

scripts/test runs this file twice: as is, and over TLS (RECALL_TLS=1, see
conftest.py), so every client here passes `server.client_kwargs()`.

Runs every test twice: with the plain Client and with a HashClient that has
a single server (HashClient routes through its own key hashing and client
pool, a common production setup).
"""

from __future__ import annotations

import json

import pytest
from pymemcache.client.base import Client
from pymemcache.client.hash import HashClient
from pymemcache.exceptions import (
    MemcacheClientError,
    MemcacheIllegalInputError,
    MemcacheServerError,
)

BINARY_VALUE = bytes(range(256)) * 4 + b"\r\nEND\r\n\x00tail"
ONE_MB = 1024 * 1024


class JsonSerde:
    """Stores JSON with flags=1 and raw bytes with flags=0, so a flags
    round-trip is observable (pymemcache only exposes flags to the serde)."""

    def __init__(self):
        self.seen_flags = []

    def serialize(self, key, value):
        if isinstance(value, bytes):
            return value, 0
        return json.dumps(value).encode(), 1

    def deserialize(self, key, value, flags):
        self.seen_flags.append(flags)
        return json.loads(value) if flags == 1 else value


def make_client(kind, server, **kwargs):
    # default_noreply=False: pymemcache defaults to noreply for storage
    # commands, which would make every set "succeed" without asking the server.
    opts = dict(connect_timeout=5, timeout=5, default_noreply=False, **server.client_kwargs(), **kwargs)
    if kind == "client":
        return Client(server.address, **opts)
    return HashClient([server.address], **opts)


@pytest.fixture(params=["client", "hash"])
def kind(request):
    return request.param


@pytest.fixture
def mc(kind, server):
    client = make_client(kind, server)
    yield client
    client.close()


def test_version_matches_stats(mc, server):
    version = Client(server.address, **server.client_kwargs(), timeout=5).version()
    assert version and b" " not in version
    stats = Client(server.address, **server.client_kwargs(), timeout=5).stats()
    assert stats[b"version"] == version


def test_set_get_roundtrip(mc):
    assert mc.set("greeting", b"hello") is True
    assert mc.get("greeting") == b"hello"
    assert mc.get("missing") is None
    assert mc.get("missing", default=b"dflt") == b"dflt"


def test_overwrite_and_empty_value(mc):
    assert mc.set("k", b"first")
    assert mc.set("k", b"")
    assert mc.get("k") == b""


def test_flags_roundtrip_via_serde(kind, server):
    serde = JsonSerde()
    client = make_client(kind, server, serde=serde)
    assert client.set("doc", {"a": [1, 2, 3]})
    assert client.set("raw", b"bytes")
    assert client.get("doc") == {"a": [1, 2, 3]}
    assert client.get("raw") == b"bytes"
    assert serde.seen_flags == [1, 0]


def test_get_many(mc):
    assert mc.set_many({"a": b"1", "b": b"2", "c": b"3"}) == []
    got = mc.get_many(["a", "b", "nope", "c"])
    assert got == {"a": b"1", "b": b"2", "c": b"3"}


def test_add(mc):
    assert mc.add("k", b"v1") is True
    assert mc.add("k", b"v2") is False
    assert mc.get("k") == b"v1"


def test_replace(mc):
    assert mc.replace("k", b"v") is False
    assert mc.get("k") is None
    mc.set("k", b"old")
    assert mc.replace("k", b"new") is True
    assert mc.get("k") == b"new"


def test_append_prepend(mc):
    assert mc.append("k", b"x") is False
    assert mc.prepend("k", b"x") is False
    assert mc.get("k") is None
    mc.set("k", b"mid")
    assert mc.append("k", b">>") is True
    assert mc.prepend("k", b"<<") is True
    assert mc.get("k") == b"<<mid>>"


def test_gets_and_cas(mc):
    mc.set("k", b"v0")
    value, token = mc.gets("k")
    assert value == b"v0"
    assert int(token) > 0
    assert mc.cas("k", b"v1", token) is True
    assert mc.get("k") == b"v1"
    # The token is now stale: the store above changed it.
    assert mc.cas("k", b"v2", token) is False
    assert mc.get("k") == b"v1"
    _, token2 = mc.gets("k")
    assert token2 != token


def test_cas_missing_key(mc):
    # pymemcache maps NOT_FOUND to None (EXISTS would be False).
    assert mc.cas("never-set", b"v", 12345) is None


def test_gets_many_distinct_tokens(mc):
    mc.set("a", b"1")
    mc.set("b", b"2")
    got = mc.gets_many(["a", "b", "zz"])
    assert set(got) == {"a", "b"}
    assert got["a"][0] == b"1" and got["b"][0] == b"2"
    assert got["a"][1] != got["b"][1]


def test_delete(mc):
    mc.set("k", b"v")
    assert mc.delete("k") is True
    assert mc.delete("k") is False
    assert mc.get("k") is None


def test_delete_many(mc):
    mc.set_many({"a": b"1", "b": b"2"})
    assert mc.delete_many(["a", "b", "c"]) is True
    assert mc.get_many(["a", "b"]) == {}


def test_incr_decr(mc):
    mc.set("n", b"10")
    assert mc.incr("n", 5) == 15
    assert mc.decr("n", 3) == 12
    assert mc.get("n") == b"12"
    assert mc.incr("missing", 1) is None
    assert mc.decr("missing", 1) is None


def test_decr_floors_at_zero(mc):
    mc.set("n", b"3")
    assert mc.decr("n", 10) == 0
    assert mc.get("n") == b"0"
    mc.set("n", b"100")
    assert mc.decr("n", 1) == 99
    assert mc.get("n") == b"99 "  # same length: space-padded in place


def test_incr_wraps_at_2_64(mc):
    mc.set("n", str(2**64 - 2).encode())
    assert mc.incr("n", 1) == 2**64 - 1
    assert mc.incr("n", 3) == 2
    # memcached rewrites the number in place when the result is not longer
    # than the stored value, padding with spaces (it does not shrink it).
    assert mc.get("n") == b"2" + b" " * 19
    assert mc.incr("n", 1) == 3  # the padding is still a valid number


def test_incr_non_numeric(mc):
    mc.set("s", b"abc")
    with pytest.raises(MemcacheClientError, match="non-numeric"):
        mc.incr("s", 1)
    assert mc.get("s") == b"abc"


def test_touch(mc):
    assert mc.touch("missing", 100) is False
    mc.set("k", b"v", expire=100)
    assert mc.touch("k", 0) is True
    assert mc.get("k") == b"v"
    # A negative exptime expires the item immediately.
    assert mc.touch("k", -1) is True
    assert mc.get("k") is None


def test_negative_expire_means_already_expired(mc):
    assert mc.set("k", b"v", expire=-1) is True
    assert mc.get("k") is None
    assert mc.add("k", b"again") is True  # the expired item doesn't block add
    assert mc.get("k") == b"again"


def test_flush_all(mc, kind):
    mc.set_many({"a": b"1", "b": b"2"})
    result = mc.flush_all()
    # HashClient.flush_all() returns nothing; the gets below are the check.
    assert result is (True if kind == "client" else None)
    assert mc.get_many(["a", "b"]) == {}
    assert mc.set("a", b"new")  # the cache works normally afterwards
    assert mc.get("a") == b"new"


def test_binary_safe_value(mc):
    assert mc.set("bin", BINARY_VALUE)
    assert mc.get("bin") == BINARY_VALUE


def test_value_near_1mb(mc):
    # 1 MB item limit (-I 1m default) includes item overhead and the key,
    # so stay a little under it.
    value = bytes(i % 251 for i in range(ONE_MB - 1024))
    assert mc.set("big", value)
    assert mc.get("big") == value


def test_value_over_1mb_rejected(mc):
    with pytest.raises(MemcacheServerError, match="too large"):
        mc.set("huge", b"x" * (ONE_MB + 1))
    assert mc.get("huge") is None


@pytest.mark.server_args("-I", "2m")
def test_item_size_flag_raises_limit(mc):
    value = b"y" * (ONE_MB + ONE_MB // 2)
    assert mc.set("big", value)
    assert mc.get("big") == value


def test_key_length_limit(mc, server):
    key250 = "k" * 250
    assert mc.set(key250, b"v")
    assert mc.get(key250) == b"v"
    # pymemcache refuses long keys itself...
    with pytest.raises(MemcacheIllegalInputError):
        mc.set("k" * 251, b"v")
    # ...so also send one raw to check that the server rejects it too.
    raw = Client(server.address, **server.client_kwargs(), timeout=5)
    with pytest.raises(MemcacheClientError, match="bad command line format"):
        raw.raw_command(b"get " + b"k" * 251)


def test_noreply_commands_are_silent(kind, server):
    client = make_client(kind, server)
    # If the server answered any noreply command, the stray reply would be
    # read as the answer to the following get and these asserts would fail.
    assert client.set("k", b"1", noreply=True) is True
    assert client.get("k") == b"1"
    assert client.add("k", b"2", noreply=True) is True  # result unknowable
    assert client.get("k") == b"1"
    assert client.append("k", b"0", noreply=True) is True
    assert client.incr("k", 5, noreply=True) is None
    assert client.get("k") == b"15"
    assert client.touch("k", 100, noreply=True) is True
    assert client.delete("k", noreply=True) is True
    assert client.get("k") is None
    client.set("j", b"x")
    client.flush_all(noreply=True)
    assert client.get("j") is None


@pytest.mark.counts_requests
def test_stats_counters(server):
    client = Client(server.address, **server.client_kwargs(), timeout=5, default_noreply=False)
    client.set("a", b"1")
    client.get("a")
    client.get("b")
    client.delete("a")
    client.delete("a")
    client.incr("nope", 1)
    stats = client.stats()
    assert stats[b"cmd_set"] == 1
    assert stats[b"cmd_get"] == 2
    assert stats[b"get_hits"] == 1
    assert stats[b"get_misses"] == 1
    assert stats[b"delete_hits"] == 1
    assert stats[b"delete_misses"] == 1
    assert stats[b"incr_misses"] == 1
    assert stats[b"curr_items"] == 0
    assert stats[b"total_items"] == 1
    assert stats[b"curr_connections"] >= 1
    assert stats[b"limit_maxbytes"] == 64 * ONE_MB


@pytest.mark.server_args("-m", "32")
def test_stats_reflect_memory_flag(server):
    stats = Client(server.address, **server.client_kwargs(), timeout=5).stats()
    assert stats[b"limit_maxbytes"] == 32 * ONE_MB


def test_hash_client_routes_to_single_server(server):
    # Every key must land on the only server: a plain Client sees them all.
    hc = make_client("hash", server)
    keys = [f"key-{i}" for i in range(50)]
    hc.set_many({k: k.encode() for k in keys})
    direct = Client(server.address, **server.client_kwargs(), timeout=5)
    assert direct.get_many(keys) == {k: k.encode() for k in keys}
