"""Authentication with real clients: SASL PLAIN on the binary protocol
(-S, python-binary-memcached and pylibmc) and the text protocol's auth file
(-Y, pymemcache: the login token is an ordinary `set` of "<user> <password>").

The credentials file is memcached's format, one "user:password" per line;
-S reads the file named by MEMCACHED_SASL_PWDB, -Y the file it names.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import bmemcached
import pylibmc
import pytest
from bmemcached.exceptions import InvalidCredentials, MemcachedException
from pymemcache.client.base import Client as PymemcacheClient
from pymemcache.exceptions import MemcacheClientError

USER, PASSWORD = "user", "pencil"


@pytest.fixture
def auth_file(tmp_path):
    path = tmp_path / "users"
    path.write_text(f"{USER}:{PASSWORD}\nother:secret\n")
    return str(path)


@pytest.fixture
def sasl_server(server_factory, auth_file, monkeypatch):
    monkeypatch.setenv("MEMCACHED_SASL_PWDB", auth_file)
    return server_factory("-S")


def test_bmemcached_sasl_right_password(sasl_server):
    mc = bmemcached.Client([sasl_server.addr_str], USER, PASSWORD, socket_timeout=5)
    try:
        assert mc.set("k", b"v") is True
        assert mc.get("k") == b"v"
    finally:
        mc.disconnect_all()


def test_bmemcached_sasl_wrong_password_and_none(sasl_server):
    # bmemcached expects the wrong-password status to be 0x08; memcached
    # (and recalld) send 0x20 "Auth failure.", which it raises as a
    # MemcachedException.
    with pytest.raises((InvalidCredentials, MemcachedException), match="Auth failure"):
        mc = bmemcached.Client([sasl_server.addr_str], USER, "wrong", socket_timeout=5)
        mc.set("k", b"v")
    # Without credentials a command gets the same status (and the
    # connection is closed).
    mc = bmemcached.Client([sasl_server.addr_str], socket_timeout=5)
    try:
        with pytest.raises(MemcachedException, match="Auth failure"):
            mc.set("k", b"v")
    finally:
        mc.disconnect_all()


def _sasl_plugin_dir() -> str | None:
    """Where Debian's Cyrus SASL plugins (libsasl2-modules) are: the libsasl2
    bundled in pylibmc's wheel looks for its PLAIN plugin elsewhere."""
    found = glob.glob("/usr/lib/*/sasl2/libplain.so*") + glob.glob("/usr/lib/sasl2/libplain.so*")
    return os.path.dirname(found[0]) if found else None


# pylibmc's libsasl2 reads SASL_PATH once, when pylibmc is imported, so the
# client runs in a fresh interpreter with it set.
PYLIBMC_SCRIPT = """
import sys, pylibmc
addr, user, password = sys.argv[1:]
mc = pylibmc.Client([addr], binary=True, username=user, password=password)
assert mc.set("k", b"v")
assert mc.get("k") == b"v"
bad = pylibmc.Client([addr], binary=True, username=user, password="wrong")
try:
    bad.set("k", b"w")
except pylibmc.Error as e:
    print("refused:", e)
else:
    sys.exit("a wrong password was let in")
assert mc.get("k") == b"v"
"""


def test_pylibmc_sasl(sasl_server):
    if not pylibmc.support_sasl:
        pytest.skip("this pylibmc's libmemcached has no SASL")
    plugins = _sasl_plugin_dir()
    if plugins is None:
        pytest.skip("no Cyrus SASL PLAIN plugin (apt-get install libsasl2-modules)")
    env = dict(os.environ, SASL_PATH=plugins)
    run = subprocess.run(
        [sys.executable, "-c", PYLIBMC_SCRIPT, sasl_server.addr_str, USER, PASSWORD],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "refused:" in run.stdout


def test_pymemcache_auth_file(server_factory, auth_file):
    srv = server_factory("-Y", auth_file)
    mc = PymemcacheClient(srv.address, connect_timeout=5, timeout=5)
    try:
        with pytest.raises(MemcacheClientError, match="unauthenticated"):
            mc.get("k")
        with pytest.raises(MemcacheClientError, match="authentication failure"):
            mc.set("auth", f"{USER} wrong", noreply=False)
        assert mc.set("auth", f"{USER} {PASSWORD}", noreply=False) is True
        assert mc.set("k", b"v", noreply=False) is True
        assert mc.get("k") == b"v"
        stats = mc.stats()
        assert (stats[b"auth_cmds"], stats[b"auth_errors"]) == (2, 1)
    finally:
        mc.close()
