"""meta-memcache (meta protocol: mg/ms/md/ma/mn) against the server under test.

What the client puts on the wire (useful when reading server logs):
  * nothing on connect: no version or mn handshake;
  * get:     mg <key> f v t l h        (get_cas adds c)
  * set:     ms <key> <len> T<ttl> F<flags> [M<mode>] [C<cas>] [q]
             and with no_reply=True an `mn` right after, to flush;
  * touch:   mg <key> T<ttl>            (no value requested: HD/EN)
  * delete:  md <key> [C<cas>] [I T<ttl>]
  * delta:   ma <key> D<n> [MD] [N<ttl> J<initial>] [v]
  * keys of 187+ chars are hashed and keys with spaces/binary are base64'd,
    both sent with the `b` flag, so the server must decode base64 keys.
Its serializer stores the Python type in the client flags (F) and zlib-
compresses values over 128 bytes.
"""

from __future__ import annotations

import random
import socket

import pytest
from meta_memcache import (
    CacheClient,
    Key,
    LeasePolicy,
    MemcacheServerError,
    Miss,
    RecachePolicy,
    RequestFlags,
    ServerAddress,
    SetMode,
    StalePolicy,
    Success,
    Value,
    connection_pool_factory_builder,
)
from meta_memcache_socket import MemcacheSocket

ONE_MB = 1024 * 1024
# meta-memcache can't send a negative TTL; an absolute time in the past
# (any value over 30 days is a Unix timestamp) means "already expired".
PAST = 1_000_000_000


@pytest.fixture
def cache(server):
    return CacheClient.cache_client_from_servers(
        servers=[ServerAddress(*server.address)],
        # With the default 4 KiB read buffer the client reassembles large
        # values quadratically (a 1 MB get takes ~25 s); 64 KiB makes it ms.
        connection_pool_factory_fn=connection_pool_factory_builder(
            connection_timeout=5, recv_timeout=5, read_buffer_size=65536
        ),
    )


@pytest.fixture
def msock(server):
    """The client's low-level socket wrapper, for raw commands."""
    sock = socket.create_connection(server.address, timeout=5)
    conn = MemcacheSocket(sock)
    yield conn
    conn.close()


def no_wait(seconds):
    raise AssertionError(f"lease retry tried to wait {seconds}s; the test expects no retries")


def test_set_get_types(cache):
    assert cache.set("bytes", b"\x00\x01raw", ttl=0) is True
    assert cache.set("str", "text", ttl=0) is True
    assert cache.set("int", 42, ttl=0) is True
    assert cache.set("obj", {"a": [1, 2]}, ttl=0) is True
    # Each type comes back only if the server returned the F flag intact.
    assert cache.get("bytes") == b"\x00\x01raw"
    assert cache.get("str") == "text"
    assert cache.get("int") == 42
    assert cache.get("obj") == {"a": [1, 2]}
    assert cache.get("missing") is None


def test_compressed_value(cache):
    text = "compress me " * 500
    assert cache.set("z", text, ttl=0)
    assert cache.get("z") == text


def test_multi_get(cache):
    cache.set("a", b"1", ttl=0)
    cache.set("b", b"2", ttl=0)
    got = cache.multi_get(["a", "nope", "b"])
    assert got == {Key("a"): b"1", Key("nope"): None, Key("b"): b"2"}


def test_set_modes(cache):
    assert cache.set("k", b"1", ttl=0, set_mode=SetMode.ADD) is True
    assert cache.set("k", b"2", ttl=0, set_mode=SetMode.ADD) is False
    assert cache.refill("k", b"3", ttl=0) is False  # refill is ADD
    assert cache.set("nope", b"x", ttl=0, set_mode=SetMode.REPLACE) is False
    assert cache.set("k", b"mid", ttl=0, set_mode=SetMode.REPLACE) is True
    assert cache.set("k", b">", ttl=0, set_mode=SetMode.APPEND) is True
    assert cache.set("k", b"<", ttl=0, set_mode=SetMode.PREPEND) is True
    assert cache.set("nope", b"x", ttl=0, set_mode=SetMode.APPEND) is False
    assert cache.get("k") == b"<mid>"
    assert cache.get("nope") is None


def test_cas(cache):
    token = cache.set_cas("k", b"v0", ttl=0)
    assert isinstance(token, int) and token > 0
    value, got_token = cache.get_cas("k")
    assert (value, got_token) == (b"v0", token)
    assert cache.set("k", b"v1", ttl=0, cas_token=token) is True
    assert cache.set("k", b"v2", ttl=0, cas_token=token) is False  # stale
    assert cache.get("k") == b"v1"
    assert cache.get_cas("missing") == (None, None)


def test_multi_get_cas(cache):
    t1 = cache.set_cas("a", b"1", ttl=0)
    t2 = cache.set_cas("b", b"2", ttl=0)
    assert t1 != t2
    got = cache.multi_get_cas(["a", "b", "c"])
    assert got == {Key("a"): (b"1", t1), Key("b"): (b"2", t2), Key("c"): (None, None)}


def test_delete_and_invalidate(cache):
    token = cache.set_cas("k", b"v", ttl=0)
    assert cache.delete("k", cas_token=token + 1) is False  # EX: kept
    assert cache.get("k") == b"v"
    assert cache.delete("k") is True
    assert cache.delete("k") is False  # NF
    assert cache.invalidate("k") is True  # missing counts as invalidated
    assert cache.get("k") is None


def test_touch(cache):
    cache.set("k", b"v", ttl=100)
    assert cache.touch("k", 500) is True
    assert cache.touch("missing", 500) is False
    result = cache.meta_get(Key("k"), flags=RequestFlags(return_ttl=True))
    assert isinstance(result, Success)
    assert 499 <= result.flags.ttl <= 500
    assert cache.touch("k", PAST) is True
    assert cache.get("k") is None


def test_get_with_touch_ttl(cache):
    cache.set("k", b"v", ttl=0)
    assert cache.get("k", touch_ttl=300) == b"v"
    result = cache.meta_get(Key("k"), flags=RequestFlags(return_ttl=True))
    assert 299 <= result.flags.ttl <= 300


def test_already_expired(cache):
    assert cache.set("k", b"v", ttl=PAST) is True
    assert cache.get("k") is None


def test_ttl_reported(cache):
    cache.set("forever", b"v", ttl=0)
    cache.set("soon", b"v", ttl=100)
    flags = RequestFlags(return_ttl=True, return_size=True, return_client_flag=True)
    forever = cache.meta_get(Key("forever"), flags=flags)
    soon = cache.meta_get(Key("soon"), flags=flags)
    assert forever.flags.ttl == -1
    assert 99 <= soon.flags.ttl <= 100
    assert soon.flags.size == 1
    assert soon.flags.client_flag == 16  # the serializer's "bytes" type


def test_delta(cache):
    assert cache.delta("cnt", 1) is False  # missing, not created
    assert cache.delta_initialize("cnt", 5, initial_value=10, initial_ttl=60) is True
    assert cache.delta_and_get("cnt", 3) == 13
    assert cache.delta_and_get("cnt", -20) == 0  # floors at zero
    assert cache.delta_initialize_and_get("other", 1, initial_value=100, initial_ttl=60) == 100
    assert cache.delta_initialize_and_get("other", 1, initial_value=100, initial_ttl=60) == 101
    assert cache.delta_and_get("missing", 1) is None


def test_no_reply(cache):
    # Sent as `ms ... q` followed by `mn`: a server that answered the quiet
    # set would leave a stray HD for the following get to misread.
    assert cache.set("k", b"1", ttl=0, no_reply=True) is True
    assert cache.get("k") == b"1"
    assert cache.delete("k", no_reply=True) is True
    assert cache.get("k") is None


def test_binary_value(cache):
    value = bytes(range(256)) * 3 + b"\r\nEN\r\n"
    assert cache.set("bin", value, ttl=0)
    assert cache.get("bin") == value


def test_large_values(cache):
    rng = random.Random(1)  # incompressible, so the client can't shrink it
    value = rng.randbytes(ONE_MB - 1024)
    assert cache.set("big", value, ttl=0)
    assert cache.get("big") == value
    with pytest.raises(MemcacheServerError):
        cache.set("huge", rng.randbytes(ONE_MB + 1024), ttl=0)
    assert cache.get("huge") is None  # and the pool recovered


def test_base64_keys(cache, msock):
    # Keys the text protocol can't carry are sent base64-encoded with `b`.
    assert cache.set("has space", b"s", ttl=0)
    assert cache.get("has space") == b"s"
    long_key = "k" * 251  # hashed by the client, then base64'd
    assert cache.set(long_key, b"l", ttl=0)
    assert cache.get(long_key) == b"l"
    # The server decodes the key: a plain-text read of the same bytes hits.
    assert msock.raw_cmd(b"mg aGFzIHNwYWNl b v") == b"VA 1"  # "has space"
    assert cache.get("k" * 250) is None


def test_longest_verbatim_key(cache):
    # 186 chars is the longest key meta-memcache sends verbatim.
    key = "p" * 186
    assert cache.set(key, b"v", ttl=0)
    assert cache.get(key) == b"v"


def test_lease_on_miss(cache):
    policy = LeasePolicy(ttl=30, miss_retries=1)
    # First reader wins the lease (W flag): a miss plus a CAS token to fill.
    value, token = cache.get_or_lease_cas("L", policy, lease_wait_fn=no_wait)
    assert value is None and token
    # Second reader loses (Z flag) on the empty placeholder.
    placeholder = cache.meta_get(Key("L"), flags=RequestFlags(return_value=True, vivify_on_miss_ttl=30))
    assert isinstance(placeholder, Value)
    assert placeholder.size == 0 and placeholder.flags.win is False
    # The winner fills it using its token; everyone then sees the value.
    assert cache.set("L", b"filled", ttl=60, cas_token=token) is True
    assert cache.get_or_lease("L", policy, lease_wait_fn=no_wait) == b"filled"


def test_recache_policy(cache):
    cache.set("r", b"val", ttl=10)
    # TTL below the recache threshold: the first reader is told to refresh
    # (W, shown as a miss), the next one keeps getting the value.
    assert cache.get("r", recache_policy=RecachePolicy(ttl=30)) is None
    assert cache.get("r", recache_policy=RecachePolicy(ttl=30)) == b"val"


def test_stale_on_delete(cache):
    cache.set("s", b"old", ttl=100)
    assert cache.delete("s", stale_policy=StalePolicy(mark_stale_on_deletion_ttl=30)) is True
    flags = RequestFlags(return_value=True, return_client_flag=True)
    first = cache.meta_get(Key("s"), flags=flags)
    second = cache.meta_get(Key("s"), flags=flags)
    assert first.flags.stale and first.flags.win is True
    assert second.flags.stale and second.flags.win is False
    assert second.value == b"old"


def test_meta_get_opaque_and_key(cache):
    cache.set("k", b"abc", ttl=0)
    result = cache.meta_get(Key("k"), flags=RequestFlags(return_value=True, opaque=b"xyz", return_size=True))
    assert result.flags.opaque == b"xyz"
    assert result.flags.size == 3
    assert isinstance(cache.meta_get(Key("nope")), Miss)


def test_version_flush_stats_raw(cache, msock):
    version = msock.raw_cmd(b"version")
    assert version.startswith(b"VERSION ") and len(version) > len(b"VERSION ")
    cache.set("k", b"v", ttl=0)
    assert msock.raw_cmd(b"flush_all") == b"OK"
    assert cache.get("k") is None
    stats = dict(line.split(b" ", 2)[1:] for line in msock.raw_cmd(b"stats", multi_line=True).split(b"\r\n") if line)
    assert stats[b"version"] == version.split(b" ", 1)[1]
    assert int(stats[b"cmd_flush"]) == 1
    assert int(stats[b"get_misses"]) == 1
    assert msock.raw_cmd(b"mn") == b"MN"
