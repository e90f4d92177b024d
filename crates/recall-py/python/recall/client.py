"""recall.Client and recall.DurableClient: pymemcache's Client interface
over recall-client and recall-durable (the Rust crates, through ``recall._native``).

What lives here is what pymemcache users expect of the interface: key
prefixes and encodings, serializers (``serde`` objects or the older
``serializer``/``deserializer`` functions), ``noreply``, ``ignore_exc`` and
pymemcache's return values. The protocol, pools, ketama, cluster routing,
the write backup and streaming are the Rust crate's.

``noreply``: recall-client always reads the reply (a request without one
cannot be matched to its answer on a pipelined connection), so a write with
``noreply=True`` has been acknowledged when the call returns; only the
return value follows pymemcache's (``True``, or ``None`` for incr/decr).
"""

from __future__ import annotations

import io
import socket
from typing import Any, Iterable

from . import _native
from .exceptions import MemcacheError, MemcacheIllegalInputError

_STORED, _NOT_STORED, _EXISTS, _NOT_FOUND = _native.STORED, _native.NOT_STORED, _native.EXISTS, _native.NOT_FOUND


def _server_name(server: Any) -> str:
    """``"host:port"``, ``"host:port:weight"``, ``(host, port)`` or
    ``(host, port, weight)`` as recall-client's server spec."""
    if isinstance(server, str):
        return server
    if isinstance(server, (tuple, list)) and len(server) in (2, 3):
        host = server[0]
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return ":".join([host, *(str(part) for part in server[1:])])
    raise MemcacheIllegalInputError(f"a server is 'host:port' or (host, port), got {server!r}")


def _servers(servers: Any) -> list[str]:
    # One server (pymemcache's Client) or a list of them (its HashClient).
    if isinstance(servers, str) or (isinstance(servers, tuple) and len(servers) in (2, 3) and isinstance(servers[1], int)):
        return [_server_name(servers)]
    return [_server_name(s) for s in servers]


class _LegacySerde:
    """pymemcache's ``serializer``/``deserializer`` functions as a serde."""

    def __init__(self, serializer, deserializer):
        self.serialize = serializer or (lambda key, value: (value, 0))
        self.deserialize = deserializer or (lambda key, value, flags: value)


class StreamReader(io.RawIOBase):
    """A streamed value (``get_stream``) as a read-only binary file."""

    def __init__(self, native):
        super().__init__()
        self._native = native

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        data = self._native.read(len(buf))
        buf[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        return self._native.read(size)

    def readall(self) -> bytes:
        parts = []
        while chunk := self._native.read(1 << 16):
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if not self.closed:
            self._native.close()
        super().close()


class Client:
    """pymemcache's ``Client`` interface over one server or, given a list,
    several (libmemcached-compatible weighted ketama, as pylibmc's
    ``ketama_weighted``), or a replicated cluster (``cluster=True``: the
    servers are seeds; requests follow the cluster map's leaders).

    Servers: ``"host:port"``, ``"host:port:weight"``, ``(host, port)`` or a
    list of those. ``timeout``/``connect_timeout`` in seconds.
    """

    _durable = False

    def __init__(
        self,
        server,
        serde=None,
        serializer=None,
        deserializer=None,
        connect_timeout: float | None = None,
        timeout: float | None = None,
        no_delay: bool = True,
        ignore_exc: bool = False,
        socket_module=None,
        socket_keepalive=None,
        key_prefix: bytes | str = b"",
        default_noreply: bool = True,
        allow_unicode_keys: bool = False,
        encoding: str = "ascii",
        tls_context=None,
        *,
        cluster: bool = False,
        pool_size: int | None = None,
        **native,
    ):
        # no_delay and socket_keepalive are accepted for pymemcache's
        # signature: recall-client sets TCP_NODELAY and manages its sockets.
        if socket_module is not None and socket_module is not socket:
            raise ValueError("recall.Client does its own I/O: socket_module must be the socket module or None")
        if tls_context is not None:
            raise ValueError("recall.Client does not speak TLS yet (tls_context must be None)")
        self.servers = _servers(server)
        self.serde = serde or _LegacySerde(serializer, deserializer)
        if isinstance(key_prefix, str):
            key_prefix = key_prefix.encode("ascii")
        if not isinstance(key_prefix, bytes):
            raise TypeError("key_prefix should be bytes.")
        self.key_prefix = key_prefix
        self.ignore_exc = ignore_exc
        self.default_noreply = default_noreply
        self.allow_unicode_keys = allow_unicode_keys
        self.encoding = encoding
        self._key_encoding = "utf8" if allow_unicode_keys else "ascii"
        self._native = _native.NativeClient(
            self.servers,
            cluster=cluster,
            connect_timeout=connect_timeout,
            timeout=timeout,
            pool_size=pool_size,
            durable=self._durable,
            **native,
        )

    # -- keys and values ---------------------------------------------------

    def check_key(self, key) -> bytes:
        if isinstance(key, str):
            try:
                key = key.encode(self._key_encoding)
            except UnicodeEncodeError:
                raise MemcacheIllegalInputError(f"Non-ASCII key: {key!r}") from None
        elif not isinstance(key, bytes):
            raise MemcacheIllegalInputError(f"a key is str or bytes, got {key!r}")
        return self.key_prefix + key if self.key_prefix else key

    def _value(self, key, value, flags):
        data, data_flags = self.serde.serialize(key, value)
        if flags is not None:
            data_flags = flags
        if not isinstance(data, bytes):
            try:
                data = str(data).encode(self.encoding)
            except UnicodeEncodeError as e:
                raise MemcacheIllegalInputError(f"Data values must be binary-safe: {e}") from None
        return data, data_flags

    @staticmethod
    def _int(value, name: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise MemcacheIllegalInputError(f"{name} must be integer, got bad value: {value!r}")
        return value

    # -- storage -----------------------------------------------------------

    def _store(self, mode: str, key, value, expire, flags, cas=0):
        data, data_flags = self._value(key, value, flags)
        return self._native.store(mode, self.check_key(key), data, data_flags, self._int(expire, "expire"), cas)[0]

    def set(self, key, value, expire: int = 0, noreply: bool | None = None, flags: int | None = None) -> bool:
        self._store("set", key, value, expire, flags)
        return True

    def set_many(self, values: dict, expire: int = 0, noreply: bool | None = None, flags: int | None = None) -> list:
        """Stores each pair; returns the keys that were not stored."""
        return [key for key, value in values.items() if self._store("set", key, value, expire, flags) != _STORED]

    set_multi = set_many

    def _conditional(self, mode, key, value, expire, noreply, flags) -> bool:
        status = self._store(mode, key, value, expire, flags)
        return True if self._noreply(noreply) else status == _STORED

    def _noreply(self, noreply) -> bool:
        return self.default_noreply if noreply is None else noreply

    def add(self, key, value, expire: int = 0, noreply: bool | None = None, flags: int | None = None) -> bool:
        return self._conditional("add", key, value, expire, noreply, flags)

    def replace(self, key, value, expire: int = 0, noreply: bool | None = None, flags: int | None = None) -> bool:
        return self._conditional("replace", key, value, expire, noreply, flags)

    def append(self, key, value, expire: int = 0, noreply: bool | None = None, flags: int | None = None) -> bool:
        return self._conditional("append", key, value, expire, noreply, flags)

    def prepend(self, key, value, expire: int = 0, noreply: bool | None = None, flags: int | None = None) -> bool:
        return self._conditional("prepend", key, value, expire, noreply, flags)

    def cas(self, key, value, cas, expire: int = 0, noreply: bool = False, flags: int | None = None) -> bool | None:
        """``None`` if the key is missing, ``False`` if its CAS changed."""
        if isinstance(cas, (int, str)) and not isinstance(cas, bool):
            cas = str(cas).encode(self.encoding)
        if not isinstance(cas, bytes) or not cas.isdigit():
            raise MemcacheIllegalInputError(f"cas must only contain values in 0-9, got bad value: {cas!r}")
        status = self._store("cas", key, value, expire, flags, int(cas))
        if self._noreply(noreply):
            return True
        return {_STORED: True, _EXISTS: False, _NOT_FOUND: None}.get(status, False)

    # -- retrieval ---------------------------------------------------------

    def get(self, key, default: Any = None) -> Any:
        try:
            hit = self._native.get(self.check_key(key))
        except MemcacheIllegalInputError:
            raise
        except MemcacheError:
            if self.ignore_exc:
                return default
            raise
        if hit is None:
            return default
        return self.serde.deserialize(key, hit[0], hit[1])

    def gets(self, key, default: Any = None, cas_default: Any = None) -> tuple:
        try:
            hit = self._native.gets(self.check_key(key))
        except MemcacheIllegalInputError:
            raise
        except MemcacheError:
            if self.ignore_exc:
                return default, cas_default
            raise
        if hit is None:
            return default, cas_default
        return self.serde.deserialize(key, hit[0], hit[1]), str(hit[2]).encode()

    def _fetch_many(self, keys: Iterable, with_cas: bool) -> dict:
        keys = list(keys)
        if not keys:
            return {}
        wire = {self.check_key(k): k for k in keys}
        try:
            hits = self._native.get_many(list(wire), with_cas)
        except MemcacheIllegalInputError:
            raise
        except MemcacheError:
            if self.ignore_exc:
                return {}
            raise
        out = {}
        for k, hit in hits.items():
            original = wire[k]
            value = self.serde.deserialize(original, hit[0], hit[1])
            out[original] = (value, str(hit[2]).encode()) if with_cas else value
        return out

    def get_many(self, keys: Iterable) -> dict:
        return self._fetch_many(keys, False)

    get_multi = get_many

    def gets_many(self, keys: Iterable) -> dict:
        return self._fetch_many(keys, True)

    # -- the rest ----------------------------------------------------------

    def delete(self, key, noreply: bool | None = None) -> bool:
        existed = self._native.delete(self.check_key(key))
        return True if self._noreply(noreply) else existed

    def delete_many(self, keys: Iterable, noreply: bool | None = None) -> bool:
        for key in keys:
            self._native.delete(self.check_key(key))
        return True

    delete_multi = delete_many

    def incr(self, key, value: int, noreply: bool | None = False) -> int | None:
        new = self._native.incr(self.check_key(key), self._int(value, "value"))
        return None if noreply else new

    def decr(self, key, value: int, noreply: bool | None = False) -> int | None:
        new = self._native.decr(self.check_key(key), self._int(value, "value"))
        return None if noreply else new

    def touch(self, key, expire: int = 0, noreply: bool | None = None) -> bool:
        existed = self._native.touch(self.check_key(key), self._int(expire, "expire"))
        return True if self._noreply(noreply) else existed

    def flush_all(self, delay: int = 0, noreply: bool | None = None) -> bool:
        self._native.flush_all(self._int(delay, "delay") or None)
        return True

    def version(self) -> bytes:
        """The first server's version (pymemcache's Client has one server)."""
        return self._native.version()[0][1].encode()

    def stats(self, *args) -> dict:
        """The first server's ``stats``, names as bytes and numbers parsed."""
        name, pairs = self._native.stats(" ".join(args))[0]
        return {k.encode(): _stat_value(v) for k, v in pairs}

    def close(self) -> None:
        """Connections close when the client is dropped; nothing to do."""

    quit = close

    # -- streaming (sset / sget) -------------------------------------------

    def put_stream(self, key, fileobj, expire: int = 0, flags: int = 0) -> bool:
        """Store the bytes of a binary file object (read in 64 KiB chunks
        and sent frame by frame: never held whole). True if stored."""
        return self._native.put_stream(self.check_key(key), fileobj, flags, self._int(expire, "expire")) == _STORED

    def get_stream(self, key) -> StreamReader | None:
        """The value as a binary file object read as it arrives, or None."""
        native = self._native.get_stream(self.check_key(key))
        return None if native is None else StreamReader(native)

    # -- dict-style access, as pymemcache --------------------------------

    def __setitem__(self, key, value):
        self.set(key, value, noreply=True)

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise KeyError
        return value

    def __delitem__(self, key):
        self.delete(key, noreply=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _stat_value(v: str):
    for parse in (int, float):
        try:
            return parse(v)
        except ValueError:
            pass
    return v.encode()


class DurableClient(Client):
    """Client whose acknowledged writes survive a crash of the server
    (docs/durability.md): every write is kept in a client-side backup until
    the server's snapshot covers it, and replayed when the server restarts
    (recalld with ``--data-dir``; the default ``--durability client-backup``).

    Extra arguments: ``client_id`` (the id the servers know this client by;
    default random), ``spill_file`` (a path: the backup is also appended to
    this file, so a client killed with its server loses nothing either;
    ``spill_fsync=True`` survives a machine crash), ``poll_interval`` (how
    often each server's watermark is read, seconds).

    Not backed up: ``touch`` (a touch lost in a crash leaves the older
    expiry) and ``put_stream`` (a streamed value is never held whole).
    Call ``close()`` to empty the backup and say goodbye to the servers.
    """

    _durable = True

    def check_key(self, key) -> bytes:
        # The durable path uses meta commands, which could carry any key
        # base64-encoded; keep pymemcache's rule so the two clients agree.
        key = super().check_key(key)
        if not key or len(key) > 250 or any(c <= 0x20 or c == 0x7F for c in key):
            raise MemcacheIllegalInputError(f"Key is empty, too long, or has whitespace or control characters: {key!r}")
        return key

    @property
    def client_id(self) -> str:
        return self._native.client_id()

    def backup_status(self) -> list[tuple[str, int, int, str]]:
        """Per server: (server, entries, bytes, state) not yet durable."""
        return self._native.backup_status()

    def sync(self, timeout: float = 10.0) -> None:
        """Wait until every server's snapshot covers the backup."""
        self._native.sync(timeout)

    def poll_now(self) -> None:
        """Read every server's watermark now (trim; replay if it restarted)."""
        self._native.poll_now()

    def close(self, timeout: float = 10.0) -> None:
        """Empty the backup (``sync``) and say goodbye to the servers."""
        self._native.close(timeout)

    quit = close
