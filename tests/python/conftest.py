"""Fixtures that run the server under test (and a reference memcached).

The server under test is the command prefix in RECALL_SERVER (default:
target/release/recalld at the repo root).  To validate the suites against
real memcached:

    RECALL_SERVER="memcached -u root" pytest tests/python

Each test gets its own freshly started server, so tests can assert exact
counters (stats) and never see each other's keys.  Startup is ~20 ms, which
is cheaper than the debugging time shared state costs.

Extra server flags for one test or class:

    @pytest.mark.server_args("-I", "2m")

With RECALL_TLS=1 every server under test is started with TLS (-Z, fresh
throwaway certificates from tlsfiles.py) and clients connect through
`server.client_kwargs()` / `server.connect()`.

With RECALL_CLUSTER=leader (or follower) every server under test is one
node of a 3-node replicated cluster, the leader (or a follower, which
forwards to the leader); see mcserver.ClusterNodeProcess.

With RECALL_ASCII_AUTH=1 every server under test is started with -Y (an
auth file of one throwaway user) and pymemcache clients log in as they
connect (`server.client_kwargs()`); with RECALL_CLUSTER=follower this is
the login at a follower whose requests run on the leader.

With RECALL_SASL=1 every server under test is started with -S (SASL PLAIN,
users from a throwaway MEMCACHED_SASL_PWDB file) and binary clients log in
with `server.sasl_kwargs()`; only the binary-protocol suites make sense so.
"""

from __future__ import annotations

import os

import pytest
from mcserver import (
    ClusterNodeProcess,
    RawConn,
    ServerProcess,
    ServerStartError,
    reference_command,
    server_command_from_env,
)
from tlsfiles import TlsFiles


def pytest_configure(config):
    config.addinivalue_line("markers", "server_args(*flags): extra command-line flags for the server fixture")
    config.addinivalue_line(
        "markers",
        "counts_requests: asserts the server's request counters, which a cluster follower"
        " (RECALL_CLUSTER=follower) leaves to the leader it forwards to",
    )


def pytest_report_header(config):
    ref = reference_command()
    return [
        f"server under test: {' '.join(server_command_from_env())}",
        f"reference memcached: {' '.join(ref) if ref else 'not found'}",
    ]


@pytest.fixture(scope="session")
def server_command() -> list[str]:
    return server_command_from_env()


@pytest.fixture(scope="session")
def tls_files():
    """Throwaway certificates (a CA, a server and client pair, an intruder)."""
    files = TlsFiles()
    yield files
    files.close()


@pytest.fixture(scope="session")
def suite_tls(request):
    """With RECALL_TLS=1: the certificates every server under test uses."""
    if os.environ.get("RECALL_TLS") != "1":
        return None
    return request.getfixturevalue("tls_files")


SASL_USER, SASL_PASSWORD = "suite", "a password: with spaces"


@pytest.fixture(scope="session")
def suite_sasl(tmp_path_factory):
    """With RECALL_SASL=1: the password file every server under test uses."""
    if os.environ.get("RECALL_SASL") != "1":
        return None
    path = tmp_path_factory.mktemp("sasl") / "pwdb"
    path.write_text(f"{SASL_USER}:{SASL_PASSWORD}\n")
    return path


ASCII_USER, ASCII_PASSWORD = "suite", "an ascii password"


@pytest.fixture(scope="session")
def suite_ascii_auth(tmp_path_factory):
    """With RECALL_ASCII_AUTH=1: the -Y auth file every server under test
    uses (with RECALL_CLUSTER, every node of the cluster)."""
    if os.environ.get("RECALL_ASCII_AUTH") != "1":
        return None
    path = tmp_path_factory.mktemp("ascii-auth") / "users"
    path.write_text(f"{ASCII_USER}:{ASCII_PASSWORD}\n")
    return path


def _start(command, args, name, tls: TlsFiles | None = None, sasl_pwdb=None, auth_file=None) -> ServerProcess:
    kw = {}
    if sasl_pwdb is not None:
        args = ("-S", *args)
        kw = {"env": {"MEMCACHED_SASL_PWDB": str(sasl_pwdb)}, "sasl_credentials": (SASL_USER, SASL_PASSWORD)}
    if auth_file is not None and name == "server under test":
        args = ("-Y", str(auth_file), *args)
    cluster = os.environ.get("RECALL_CLUSTER")
    if cluster and name == "server under test" and tls is not None:
        srv = ClusterNodeProcess(command, [*tls.server_args(), *args], name=name, role=cluster, tls_context=tls.client_context(), **kw)
    elif cluster and name == "server under test":
        srv = ClusterNodeProcess(command, args, name=name, role=cluster, **kw)
    elif tls is not None:
        srv = ServerProcess(command, [*tls.server_args(), *args], name=name, tls_context=tls.client_context(), **kw)
    else:
        srv = ServerProcess(command, args, name=name, **kw)
    if auth_file is not None and name == "server under test":
        srv.ascii_credentials = (ASCII_USER, ASCII_PASSWORD)
    try:
        return srv.start()
    except ServerStartError as e:
        # A server that can't start is a failure of the thing under test,
        # not a reason to skip.
        pytest.fail(str(e), pytrace=False)


def _finish(servers) -> None:
    """Stop every server; fail if any of them died during the test.

    This surfaces panics/segfaults that happened after the test's last
    assertion (e.g. while a client was disconnecting).
    """
    crashes = []
    for srv in servers:
        if not srv.alive():
            crashes.append(f"{srv.name} exited during the test; output:\n{srv.log_bytes().decode(errors='replace')}")
        srv.stop()
    if crashes:
        pytest.fail("\n".join(crashes), pytrace=False)


@pytest.fixture
def server_factory(server_command, suite_tls, suite_sasl, suite_ascii_auth):
    """Start additional servers under test: server_factory("-I", "2m")."""
    started: list[ServerProcess] = []

    def make(*args: str) -> ServerProcess:
        srv = _start(server_command, args, "server under test", suite_tls, suite_sasl, suite_ascii_auth)
        started.append(srv)
        return srv

    yield make
    _finish(started)


@pytest.fixture
def server(request, server_factory) -> ServerProcess:
    """A fresh server under test, with flags from @pytest.mark.server_args."""
    if os.environ.get("RECALL_CLUSTER") == "follower" and request.node.get_closest_marker("counts_requests"):
        pytest.skip("a cluster follower forwards requests: the leader counts them (docs/compat.md)")
    marker = request.node.get_closest_marker("server_args")
    args = tuple(marker.args) if marker else ()
    return server_factory(*args)


@pytest.fixture
def raw(server):
    """A raw socket connection to `server`."""
    conn = server.connect()
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def memcached_command() -> list[str]:
    cmd = reference_command()
    if cmd is None:
        pytest.skip("reference `memcached` binary not found (apt-get install memcached)")
    return cmd


@pytest.fixture
def reference_server(memcached_command):
    """A real memcached, for differential tests."""
    srv = _start(memcached_command, (), "reference memcached")
    yield srv
    _finish([srv])
