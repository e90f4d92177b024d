"""recall.Client (the recall Python package, crates/recall-py) against a
real recalld: pymemcache's methods and return values, errors, serializers,
ketama over two servers, streaming, and the GIL released while waiting."""

from __future__ import annotations

import io
import json
import os
import socket
import threading

import pymemcache
import pytest
from pymemcache import serde as pm_serde
from recall_py import recall, require_recalld


@pytest.fixture(params=["Client", "DurableClient"])
def client(request, server):
    """Both classes answer pymemcache's way; DurableClient's writes take
    the backup's path (meta commands with timestamps)."""
    if request.param == "DurableClient":
        require_recalld(request.getfixturevalue("server_command"))
    c = getattr(recall, request.param)(server.address, default_noreply=False)
    yield c
    c.close()


def test_storage_commands_return_what_pymemcache_returns(client, server):
    reference = pymemcache.Client(server.address, default_noreply=False)
    assert client.set("k", b"v1") is True
    assert client.get("k") == b"v1" == reference.get("k")
    assert client.get("missing") is None
    assert client.get("missing", default=b"d") == b"d"
    assert client.add("k", b"v2") is False
    assert client.add("new", b"n") is True
    assert client.replace("k", b"v3") is True
    assert client.replace("absent", b"x") is False
    assert client.append("k", b">") is True
    assert client.prepend("k", b"<") is True
    assert client.append("absent", b"x") is False
    assert client.get("k") == b"<v3>"
    # noreply (pymemcache's default) returns True whatever the outcome.
    assert client.add("k", b"ignored", noreply=True) is True
    assert client.get("k") == b"<v3>"


def test_flags_and_expire_reach_the_server(client, server):
    client.set("f", b"x", expire=100, flags=7)
    reference = pymemcache.Client(server.address, serde=RawFlags())
    assert reference.get("f") == (b"x", 7)
    assert client.touch("f", 0) is True
    assert client.touch("absent", 10) is False


def test_gets_and_cas(client):
    client.set("c", b"one")
    value, cas = client.gets("c")
    assert value == b"one" and cas.isdigit()
    assert client.cas("c", b"two", cas) is True
    assert client.cas("c", b"three", cas) is False  # the CAS moved on
    assert client.cas("absent", b"x", b"1") is None
    assert client.gets("absent") == (None, None)
    assert client.gets("absent", default=0, cas_default=-1) == (0, -1)
    assert client.get("c") == b"two"
    with pytest.raises(recall.MemcacheIllegalInputError):
        client.cas("c", b"v", "12a")


def test_get_many_gets_many_and_deletes(client):
    assert client.get_many([]) == {}
    client.set_many({"a": b"1", "b": b"2"})
    assert client.get_many(["a", "b", "zz"]) == {"a": b"1", "b": b"2"}
    assert client.get_multi([b"a"]) == {b"a": b"1"}
    many = client.gets_many(["a", "b"])
    assert set(many) == {"a", "b"} and many["a"][0] == b"1" and many["a"][1].isdigit()
    assert client.delete("a") is True
    assert client.delete("a") is False
    assert client.delete("a", noreply=True) is True
    assert client.delete_many(["b"]) is True
    assert client.get_many(["a", "b"]) == {}


def test_incr_decr(client):
    client.set("n", b"10")
    assert client.incr("n", 5) == 15
    assert client.decr("n", 20) == 0  # stops at zero
    assert client.incr("absent", 1) is None
    assert client.incr("n", 1, noreply=True) is None
    assert int(client.get("n")) == 1  # memcached keeps the width: b"1 "
    with pytest.raises(recall.MemcacheIllegalInputError):
        client.incr("n", "1")
    client.set("text", b"abc")
    with pytest.raises(recall.MemcacheClientError):
        client.incr("text", 1)


def test_key_prefix_unicode_and_dict_access(server):
    c = recall.Client(server.address, key_prefix=b"app:", allow_unicode_keys=True)
    c["k"] = b"v"
    assert c["k"] == b"v"
    assert pymemcache.Client(server.address).get("app:k") == b"v"
    c.set("ключ", b"u")
    assert c.get("ключ") == b"u"
    del c["k"]
    with pytest.raises(KeyError):
        c["k"]


def test_bad_input_is_refused_before_sending(client):
    for key in (b"key with spaces", b"\r\nflush_all", b"x" * 251, b""):
        with pytest.raises(recall.MemcacheIllegalInputError):
            client.set(key, b"v")
    with pytest.raises(recall.MemcacheIllegalInputError):
        client.get("\u0fff")  # not ASCII, and allow_unicode_keys is off
    with pytest.raises(recall.MemcacheIllegalInputError):
        client.set("k", "\u0fff")  # a str value is encoded with `encoding` (ascii)
    with pytest.raises(recall.MemcacheIllegalInputError):
        client.set("k", b"v", expire="soon")
    # Nothing of the above reached the server.
    assert client.get("k") is None


def closed_port() -> tuple[str, int]:
    """An address nothing listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = s.getsockname()
    s.close()
    return addr


def test_errors_are_pymemcaches_classes(server):
    from pymemcache.exceptions import MemcacheServerError, MemcacheUnexpectedCloseError

    c = recall.Client(server.address, default_noreply=False)
    with pytest.raises(MemcacheServerError):
        c.set("big", b"x" * (2 << 20))  # over the 1 MiB item limit: SERVER_ERROR
    c.set("after", b"ok")  # the connection is still usable
    assert c.get("after") == b"ok"
    down = recall.Client(closed_port())
    with pytest.raises(MemcacheUnexpectedCloseError) as err:
        down.get("k")
    assert isinstance(err.value, ConnectionError)


def test_ignore_exc_turns_read_errors_into_misses():
    c = recall.Client(closed_port(), ignore_exc=True)
    assert c.get("k", default=b"d") == b"d"
    assert c.get_many(["a"]) == {}
    with pytest.raises(recall.MemcacheError):
        c.set("k", b"v")  # writes still raise, as in pymemcache


class RawFlags:
    def serialize(self, key, value):
        return value, 0

    def deserialize(self, key, value, flags):
        return value, flags


class JsonSerde:
    def serialize(self, key, value):
        if isinstance(value, bytes):
            return value, 1
        return json.dumps(value).encode(), 2

    def deserialize(self, key, value, flags):
        return value if flags == 1 else json.loads(value)


def test_serde_objects_and_legacy_functions(server):
    c = recall.Client(server.address, serde=JsonSerde())
    c.set("j", {"a": [1, 2]})
    c.set("b", b"raw")
    assert c.get("j") == {"a": [1, 2]}
    assert c.get_many(["j", "b"]) == {"j": {"a": [1, 2]}, "b": b"raw"}
    # pymemcache's own serdes, and values written by pymemcache read back.
    p = recall.Client(server.address, serde=pm_serde.pickle_serde)
    p.set("p", {"x": (1, 2.5)})
    assert p.get("p") == {"x": (1, 2.5)}
    assert pymemcache.Client(server.address, serde=pm_serde.pickle_serde).get("p") == {"x": (1, 2.5)}
    z = recall.Client(server.address, serde=pm_serde.compressed_serde)
    z.set("z", "text " * 1000)
    assert z.get("z") == "text " * 1000
    legacy = recall.Client(
        server.address,
        serializer=lambda k, v: (str(v).encode(), 5),
        deserializer=lambda k, v, f: (int(v), f),
    )
    legacy.set("n", 42)
    assert legacy.get("n") == (42, 5)
    # An explicit flags= wins over the serializer's, as in pymemcache.
    legacy.set("n", 43, flags=9)
    assert legacy.get("n") == (43, 9)


def test_ketama_over_two_servers_places_keys_as_libmemcached(server_factory):
    import pylibmc

    a, b = server_factory(), server_factory()
    c = recall.Client([a.address, b.addr_str], default_noreply=False)
    keys = [f"key:{i}" for i in range(200)]
    for k in keys:
        c.set(k, k.encode())
    direct = [pymemcache.Client(s.address) for s in (a, b)]
    holders = {k: [i for i, d in enumerate(direct) if d.get(k) is not None] for k in keys}
    assert all(len(h) == 1 for h in holders.values()), "every key is on exactly one server"
    counts = [sum(h == [i] for h in holders.values()) for i in (0, 1)]
    assert min(counts) > 40, counts  # both servers take a share
    # libmemcached's weighted ketama (pylibmc's default behavior here) agrees.
    mc = pylibmc.Client([a.addr_str, b.addr_str], behaviors={"ketama_weighted": True})
    assert all(mc.get(k) == k.encode() for k in keys)
    assert c.get_many(keys) == {k: k.encode() for k in keys}


def test_weights_shift_the_share(server_factory):
    a, b = server_factory(), server_factory()
    c = recall.Client([(*a.address, 3), (*b.address, 1)])
    for i in range(400):
        c.set(f"w{i}", b"x")
    held = [int(pymemcache.Client(s.address).stats()[b"curr_items"]) for s in (a, b)]
    assert sum(held) == 400 and held[0] > 2 * held[1], held


def test_streaming_put_and_get(server, server_command):
    require_recalld(server_command)
    c = recall.Client(server.address)
    value = os.urandom(3 * 65536 + 123)  # several frames and a partial one
    assert c.put_stream("s", io.BytesIO(value)) is True
    r = c.get_stream("s")
    assert r.read(10) == value[:10]
    assert r.read() == value[10:]
    assert r.read(5) == b""
    r.close()
    assert c.get("s") == value  # a streamed value is a value
    assert c.get_stream("absent") is None
    c.set("small", b"plain")
    with c.get_stream("small") as f:
        assert f.read() == b"plain"
    # readinto (io.BufferedReader over the stream) and an empty value.
    assert c.put_stream("empty", io.BytesIO(b"")) is True
    assert io.BufferedReader(c.get_stream("empty")).read() == b""
    assert io.BufferedReader(c.get_stream("s")).read() == value


def test_put_stream_from_a_file_that_fails_stores_nothing(server, server_command):
    require_recalld(server_command)
    c = recall.Client(server.address)
    c.set("s", b"old")

    class Broken(io.RawIOBase):
        def __init__(self):
            self.calls = 0

        def read(self, n):
            self.calls += 1
            if self.calls > 2:
                raise OSError("disk gone")
            return b"x" * n

    with pytest.raises(OSError, match="disk gone"):
        c.put_stream("s", Broken())
    assert c.get("s") == b"old"


def test_the_gil_is_released_while_waiting_for_a_reply():
    """A fake server run by this thread answers a get issued from another
    thread: it can only answer if the waiting call let Python run."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    c = recall.Client(listener.getsockname(), timeout=10)
    result = {}

    def call():
        try:
            result["value"] = c.get("k")
        except Exception as e:  # reported by the assertion below
            result["error"] = e

    t = threading.Thread(target=call)
    t.start()
    listener.settimeout(10)
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(10)
        request = b""
        while not request.endswith(b"\r\n"):
            request += conn.recv(100)
        assert request == b"get k\r\n"
        conn.sendall(b"VALUE k 0 5\r\nhello\r\nEND\r\n")
        t.join(15)
    listener.close()
    assert result == {"value": b"hello"}


def test_cluster_map_from_a_follower_seed(server_command):
    """cluster=True: the servers are seeds; requests follow the cluster
    map's leader (recall-client's routing, tested in Rust against a leader
    move), here through a seed that is a follower."""
    require_recalld(server_command)
    from mcserver import ClusterNodeProcess

    node = ClusterNodeProcess(server_command, name="cluster follower", role="follower").start()
    try:
        c = recall.Client([node.addr_str], cluster=True, default_noreply=False)
        assert c.set("ck", b"cv") is True
        assert c.get("ck") == b"cv"
        assert c.incr("n", 1) is None
        c.set_many({"a": b"1", "b": b"2"})
        assert c.get_many(["a", "b", "ck"]) == {"a": b"1", "b": b"2", "ck": b"cv"}
        assert c.delete("ck") is True
        assert c.get("ck") is None
    finally:
        node.stop()


def test_one_client_shared_by_threads(server):
    c = recall.Client(server.address, default_noreply=False)
    errors = []

    def work(t):
        try:
            for i in range(200):
                key = f"t{t}:{i}"
                c.set(key, key.encode())
                assert c.get(key) == key.encode()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert len(c.get_many([f"t{t}:{i}" for t in range(4) for i in range(200)])) == 800
