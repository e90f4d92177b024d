"""conftest.py for a client library's own test suite, run against recalld.

test_client_own_suites.py copies this file next to the suite's tests (as
conftest.py) and runs that pytest inside a network and mount namespace of
its own (`unshare -n -m`, with a private /tmp), because these suites hard-
code where their server is: 127.0.0.1:11211, a second server on port 5000,
the unix socket /tmp/memcached.sock. In the namespace those addresses are
free and belong to this run only.

It starts what the suites expect memcached to be, each as RECALL_SERVER
(the command line, split on spaces) with memcached's own options:

* 127.0.0.1:11211 and :5000, and /tmp/memcached.sock (python-binary-
  memcached's and pylibmc's suites);
* [::1]:IPV6_PORT (the fixture `memcached_ipv6`);
* a SASL server (`-S`, the fixture `memcached_sasl`: port, user, password);
* `memcached` on PATH is recalld too, for a test that starts its own.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time

import pytest

SERVER = shlex.split(os.environ["RECALL_SERVER"])
IPV6_PORT = 11213
SASL_PORT = 11214
SASL_USER, SASL_PASSWORD = "user", "password"
# What the servers print goes here (a file, never an unread pipe).
LOG_DIR = os.environ.get("OWN_SUITE_LOG_DIR", "/tmp")
STARTUP_BUDGET_S = 10.0


def _ready(family: int, address, binary: bool) -> bool:
    """Whether a server answers a version request at `address`."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(address)
            if binary:
                # A binary VERSION request: magic 0x80, opcode 0x0b.
                s.sendall(bytes([0x80, 0x0B]) + bytes(22))
                return s.recv(1) == b"\x81"
            s.sendall(b"version\r\n")
            return s.recv(8) == b"VERSION "
    except OSError:
        return False


def _start(name: str, args: list[str], family: int, address, binary: bool = False, env=None):
    log = open(os.path.join(LOG_DIR, f"recalld-{name}.log"), "wb")  # noqa: SIM115 (closed by _stop)
    proc = subprocess.Popen(
        SERVER + args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
    )
    deadline = time.monotonic() + STARTUP_BUDGET_S
    while not _ready(family, address, binary):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.close()
            with open(log.name, "rb") as f:
                raise RuntimeError(f"{name} did not start ({SERVER + args}): {f.read().decode(errors='replace')}")
        time.sleep(0.01)
    return proc, log


def _stop(started) -> None:
    proc, log = started
    proc.kill()
    proc.wait()
    log.close()


@pytest.fixture(scope="session", autouse=True)
def memcached_standard_port():
    started = _start("11211", ["-l", "127.0.0.1", "-p", "11211", "-U", "0"], socket.AF_INET, ("127.0.0.1", 11211))
    yield started[0]
    _stop(started)


@pytest.fixture(scope="session", autouse=True)
def memcached_other_port():
    started = _start("5000", ["-l", "127.0.0.1", "-p", "5000", "-U", "0"], socket.AF_INET, ("127.0.0.1", 5000))
    yield started[0]
    _stop(started)


@pytest.fixture(scope="session", autouse=True)
def memcached_socket():
    path = "/tmp/memcached.sock"
    started = _start("socket", ["-s", path], socket.AF_UNIX, path)
    yield started[0]
    _stop(started)


@pytest.fixture(scope="session")
def memcached_ipv6():
    started = _start("ipv6", ["-l", "::1", "-p", str(IPV6_PORT), "-U", "0"], socket.AF_INET6, ("::1", IPV6_PORT))
    yield started[0]
    _stop(started)


@pytest.fixture(scope="session")
def memcached_sasl():
    pwdb = os.path.join(LOG_DIR, "sasl-pwdb")
    with open(pwdb, "w") as f:
        f.write(f"{SASL_USER}:{SASL_PASSWORD}\n")
    env = {**os.environ, "MEMCACHED_SASL_PWDB": pwdb}
    args = ["-S", "-l", "127.0.0.1", "-p", str(SASL_PORT), "-U", "0"]
    started = _start("sasl", args, socket.AF_INET, ("127.0.0.1", SASL_PORT), binary=True, env=env)
    yield SASL_PORT, SASL_USER, SASL_PASSWORD
    _stop(started)
