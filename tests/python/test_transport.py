"""Transports with a real client: pymemcache over a unix socket (-s, -a) and
over TLS (-Z). Each test runs against recalld and, when it is installed,
against memcached with the same flags and certificates, so "served as
memcached serves it" and "refused as memcached refuses it" are checked
against memcached itself.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import time

import pytest
from mcserver import ServerProcess, reference_command, server_command_from_env
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheUnexpectedCloseError


@pytest.fixture(params=["recalld", "memcached"])
def command(request):
    if request.param == "recalld":
        return server_command_from_env()
    cmd = reference_command()
    if cmd is None:
        pytest.skip("reference memcached not installed")
    return cmd


def start_on_unix_socket(command, path, *args) -> subprocess.Popen:
    """Start a server on the unix socket `path`; probe (bounded) until it answers."""
    proc = subprocess.Popen(
        [*command, "-s", str(path), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited: {proc.stderr.read().decode(errors='replace')}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(1)
                s.connect(str(path))
                s.sendall(b"version\r\n")
                if s.recv(100).startswith(b"VERSION "):
                    return proc
        except OSError:
            pass
        time.sleep(0.005)
    proc.kill()
    pytest.fail("server never answered on its unix socket")


def test_unix_socket_with_pymemcache(command, tmp_path):
    path = tmp_path / "mc.sock"
    proc = start_on_unix_socket(command, path, "-a", "0770")
    try:
        assert os.stat(path).st_mode & 0o777 == 0o770
        client = Client(str(path), timeout=5, default_noreply=False)
        assert client.set("k", b"over the socket")
        assert client.get("k") == b"over the socket"
        settings = client.stats("settings")
        assert settings[b"domain_socket"] == str(path).encode()
        assert settings[b"umask"] == 0o770  # pymemcache reads it as octal
        client.close()
    finally:
        proc.kill()
        proc.wait()


def refused(address, context) -> bool:
    """True if a client using `context` gets no answer: its handshake or its
    first request fails (TLS 1.3 clients finish the handshake before the
    server has checked their certificate, so the refusal arrives as an
    alert on the first read)."""
    client = Client(address, tls_context=context, connect_timeout=5, timeout=5)
    try:
        client.version()
    except (ssl.SSLError, OSError, MemcacheUnexpectedCloseError):
        return True
    finally:
        client.close()
    return False


def test_tls_requires_a_client_certificate_in_verify_mode_2(command, tls_files):
    args = tls_files.server_args(2)
    srv = ServerProcess(command, args, name="tls server", tls_context=tls_files.client_context("client"))
    srv.start()
    try:
        client = Client(srv.address, tls_context=tls_files.client_context("client"), timeout=5, default_noreply=False)
        assert client.set("k", b"over TLS")
        assert client.get("k") == b"over TLS"
        big = bytes(range(256)) * 2048  # 512 KiB: a reply in many TLS records
        assert client.set("big", big)
        assert client.get("big") == big
        settings = client.stats("settings")
        assert settings[b"ssl_enabled"] == b"yes"
        assert settings[b"ssl_verify_mode"] == 3  # OpenSSL's PEER | FAIL_IF_NO_PEER_CERT, as memcached prints it
        assert settings[b"ssl_ca_cert"] == tls_files.path("ca.pem").encode()
        assert refused(srv.address, tls_files.client_context(None)), "no client certificate"
        assert refused(srv.address, tls_files.client_context("intruder")), "certificate from another CA"
        # Still serving the client that has a good certificate.
        assert client.get("k") == b"over TLS"
        client.close()
    finally:
        srv.stop()
