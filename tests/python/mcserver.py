"""Start memcached-compatible servers on ephemeral ports and talk to them raw.

Shared by the pytest fixtures (conftest.py) and the differential runner
(tests/differential/run.py), so both launch servers the same way.

Design notes:
  * Ports: we bind 127.0.0.1:0, read the port the kernel picked and close the
    socket before starting the server.  Another process can grab the port in
    between; the launcher notices the server exiting with "address in use"
    and retries on a new port instead of failing the test.
  * Readiness is detected by probing (connect + `version`), never by a fixed
    sleep: a fast server is used immediately, a slow one still gets ~10 s.
  * Servers are stopped with SIGKILL.  memcached takes about a second to honour
    SIGTERM, which would dominate a suite that starts one server per test, and
    nothing here tests graceful shutdown.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SERVER = "target/release/recalld"
HOST = "127.0.0.1"

# Total time a server gets to become ready, across all port retries.
STARTUP_BUDGET_S = 10.0
# How many fresh ports to try when the chosen one turns out to be taken.
PORT_ATTEMPTS = 5

# How servers report a port clash: memcached says "Address already in use",
# Rust's io::Error adds "(os error 98)".
_ADDR_IN_USE = re.compile(rb"address already in use|addrinuse|os error 98", re.IGNORECASE)


class ServerStartError(RuntimeError):
    pass


def _resolve_program(argv: list[str]) -> list[str]:
    """Make a relative program path (e.g. target/release/recalld) independent
    of the directory pytest was started from."""
    prog = argv[0]
    if "/" in prog and not os.path.isabs(prog) and not os.path.exists(prog):
        argv = [str(REPO_ROOT / prog)] + argv[1:]
    return argv


def server_command_from_env() -> list[str]:
    """The command prefix for the server under test (env RECALL_SERVER)."""
    raw = os.environ.get("RECALL_SERVER", "").strip() or DEFAULT_SERVER
    return _resolve_program(shlex.split(raw))


def reference_command() -> list[str] | None:
    """The command prefix for the reference memcached, or None if absent.

    MEMCACHED_BIN overrides the binary.  memcached refuses to start as root
    unless told which user to run as, hence `-u root` when we are root.
    """
    binary = os.environ.get("MEMCACHED_BIN") or shutil.which("memcached")
    if not binary or not os.path.exists(binary):
        return None
    cmd = [binary]
    if os.geteuid() == 0:
        cmd += ["-u", "root"]
    return cmd


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _wants_binary_only(args: Sequence[str]) -> bool:
    """True when the server was told to speak only the binary protocol (-B
    binary, or -S: SASL is binary-only), so the readiness probe must not use
    a text command."""
    args = list(args)
    if "-S" in args or "--enable-sasl" in args:
        return True
    for i, a in enumerate(args):
        if a == "-B" and i + 1 < len(args) and args[i + 1] == "binary":
            return True
        if a in ("-Bbinary", "--protocol=binary"):
            return True
    return False


class ServerProcess:
    """One server process listening on 127.0.0.1:<ephemeral port>."""

    def __init__(
        self,
        command: Sequence[str],
        extra_args: Sequence[str] = (),
        name: str = "server",
        tls_context: ssl.SSLContext | None = None,
        env: dict[str, str] | None = None,
        sasl_credentials: tuple[str, str] | None = None,
    ):
        self.command = list(command)
        # Extra environment for the server (MEMCACHED_SASL_PWDB with -S).
        self.env = dict(env or {})
        # With -S: the user and password binary clients log in with.
        self.sasl_credentials = sasl_credentials
        # -Y's user and password (set by conftest with RECALL_ASCII_AUTH=1).
        self.ascii_credentials: tuple[str, str] | None = None
        self.extra_args = list(extra_args)
        self.name = name
        # With TLS (the server's flags say -Z), the client side's context:
        # the readiness probe and clients connect through it.
        self.tls_context = tls_context
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._log = None
        self.argv: list[str] = []

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> ServerProcess:
        if not self.command or (not os.path.exists(self.command[0]) and shutil.which(self.command[0]) is None):
            raise ServerStartError(
                f"{self.name}: program {self.command[0]!r} not found "
                f"(set RECALL_SERVER, or build it: cargo build --release -p recall-server)"
            )
        deadline = time.monotonic() + STARTUP_BUDGET_S
        last_log = b""
        for _attempt in range(PORT_ATTEMPTS):
            port = free_port()
            self._spawn(port)
            outcome = self._probe(deadline)
            if outcome == "ready":
                return self
            last_log = self.log_bytes()
            self.stop()
            if outcome == "exited" and _ADDR_IN_USE.search(last_log) and time.monotonic() < deadline:
                continue  # lost the race for the port: pick another one
            break
        raise ServerStartError(
            f"{self.name} did not become ready ({' '.join(self.argv)}); output:\n{last_log.decode(errors='replace')}"
        )

    def _spawn(self, port: int) -> None:
        self.port = port
        self.argv = self.command + ["-p", str(port), "-l", HOST, "-U", "0"] + self.extra_args
        # A real file (not a pipe) so a chatty server can never block on a full
        # pipe that nobody reads, and we can still show its output on failure.
        self._log = tempfile.TemporaryFile(prefix="recall-server-log-")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env} if self.env else None,
            start_new_session=True,  # keep terminal signals (Ctrl-C) for pytest
        )

    def _probe(self, deadline: float) -> str:
        """Poll until the server answers a version request.

        Returns "ready", "exited" (process died) or "timeout".
        """
        binary = _wants_binary_only(self.extra_args)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return "exited"
            try:
                with socket.create_connection((HOST, self.port), timeout=0.25) as plain:
                    s = self.tls_context.wrap_socket(plain, server_hostname=HOST) if self.tls_context else plain
                    s.settimeout(max(0.05, min(1.0, deadline - time.monotonic())))
                    if binary:
                        s.sendall(binary_request(OP_VERSION))
                        header = _recv_exact(s, 24)
                        ok = header[0] == RES_MAGIC
                    else:
                        s.sendall(b"version\r\n")
                        # With -Y (an auth file) every command before the
                        # login token gets this refusal: it is up, too.
                        ok = _recv_line(s).startswith((b"VERSION ", b"CLIENT_ERROR unauthenticated"))
                if ok and self.proc.poll() is None:
                    return "ready"
                # Something answered, but not our server (or not correctly):
                # give it the rest of the budget rather than guessing.
            except OSError:
                pass  # not listening yet (refused) or not answering yet
            time.sleep(0.005)
        return "timeout"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.proc.send_signal(signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_bytes(self) -> bytes:
        if self._log is None:
            return b""
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    # -- conveniences ------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    @property
    def addr_str(self) -> str:
        return f"{HOST}:{self.port}"

    def connect(self, timeout: float = 5.0) -> RawConn:
        return RawConn(self.address, timeout=timeout, tls_context=self.tls_context)

    def sasl_kwargs(self) -> dict:
        """bmemcached's login arguments when the server runs with -S."""
        if self.sasl_credentials is None:
            return {}
        user, password = self.sasl_credentials
        return {"username": user, "password": password}

    def client_kwargs(self) -> dict:
        """Extra keyword arguments for a pymemcache client of this server
        (with -Y, sockets that log in as they connect)."""
        kw = {"tls_context": self.tls_context} if self.tls_context else {}
        if self.ascii_credentials is not None:
            kw["socket_module"] = LoginSocketModule(*self.ascii_credentials)
        return kw

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


CLUSTER_STARTUP_BUDGET_S = 60.0
# One try at a cluster: its three processes get this long to elect a leader
# the node under test knows; a try that runs out (a node that lost its port
# to another process, an election that keeps splitting on a loaded machine)
# is torn down and started again on fresh ports.
CLUSTER_ATTEMPT_S = 15.0


class ClusterNodeProcess(ServerProcess):
    """The server under test as one node of a 3-node replicated recall
    cluster on loopback (RECALL_CLUSTER=leader or follower): the two other
    nodes run beside it, with the same flags, and stop with it.  Node 1
    bootstraps the group (and so usually leads); the node under test is
    node 1 for "leader" and node 2 for "follower".  Ready once `cluster
    map` names a leader and this node has the role asked for; a cluster
    that elected otherwise, or whose other nodes died, is started again."""

    def __init__(
        self,
        command: Sequence[str],
        extra_args: Sequence[str] = (),
        name: str = "server",
        role: str = "leader",
        tls_context: ssl.SSLContext | None = None,
        env: dict[str, str] | None = None,
        sasl_credentials: tuple[str, str] | None = None,
    ):
        super().__init__(command, extra_args, name=name, tls_context=tls_context, env=env, sasl_credentials=sasl_credentials)
        self.role = role
        self.base_args = list(extra_args)
        self.others: list[subprocess.Popen] = []
        self._other_logs: list = []

    def start(self) -> ClusterNodeProcess:
        deadline = time.monotonic() + CLUSTER_STARTUP_BUDGET_S
        tries: list[str] = []
        me = 1 if self.role == "leader" else 2
        while time.monotonic() < deadline:
            attempt_end = min(deadline, time.monotonic() + CLUSTER_ATTEMPT_S)
            clients = [free_port() for _ in range(3)]
            rafts = [free_port() for _ in range(3)]
            peers = [f"{i + 1}={HOST}:{rafts[i]}/{HOST}:{clients[i]}" for i in range(3)]

            def cluster_args(node: int) -> list[str]:
                args = ["--cluster-node-id", str(node)]
                for p in peers:
                    args += ["--cluster-peer", p]
                return args + (["--cluster-bootstrap"] if node == 1 else [])

            for node in (1, 2, 3):
                if node != me:
                    argv = self.command + ["-p", str(clients[node - 1]), "-l", HOST, "-U", "0"]
                    log = tempfile.TemporaryFile(prefix=f"recall-node{node}-log-")  # noqa: SIM115 (closed in stop())
                    self._other_logs.append((node, log))
                    self.others.append(
                        subprocess.Popen(
                            argv + self.base_args + cluster_args(node),
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            env={**os.environ, **self.env} if self.env else None,
                        )
                    )
            self.extra_args = self.base_args + cluster_args(me)
            self._spawn(clients[me - 1])
            if self._probe(attempt_end) == "ready":
                leader = self._wait_for_leader(attempt_end)
                if leader is not None and (leader == me) == (self.role == "leader"):
                    return self
                why = f"node {me} wanted as {self.role}, node {leader} leads"
                dead = [f"node {n} exited ({p.returncode}): {self._tail(log)}" for (n, log), p in zip(self._other_logs, self.others) if p.poll() is not None]
                tries.append("; ".join([why, *dead]))
            else:
                tries.append(f"node {me} not ready: {self.log_bytes().decode(errors='replace')[-400:]}")
            self.stop()
        raise ServerStartError(f"{self.name}: no cluster with node {me} as {self.role} in {CLUSTER_STARTUP_BUDGET_S:.0f} s; tries: " + " | ".join(tries))

    @staticmethod
    def _tail(log) -> str:
        log.flush()
        log.seek(0)
        return log.read().decode(errors="replace")[-400:]

    def _wait_for_leader(self, deadline: float) -> int | None:
        """The leader's id once this node knows one (None at the deadline,
        or at once when another node of the cluster has died)."""
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.others):
                return None
            try:
                leader = self._leader_now()
                if leader:
                    return leader
            except (OSError, ValueError, ssl.SSLError):
                pass
            time.sleep(0.02)
        return None

    def _leader_now(self) -> int:
        """Who this node says leads (0: nobody yet): `cluster map`'s head,
        or under -S, where text is refused, the binary `stats`'
        cluster_leader after a SASL login."""
        with socket.create_connection(self.address, timeout=1.0) as plain:
            s = self.tls_context.wrap_socket(plain, server_hostname=HOST) if self.tls_context else plain
            if self.sasl_credentials is not None:
                user, password = self.sasl_credentials
                s.sendall(binary_request(0x21, key=b"PLAIN", value=b"\0%s\0%s" % (user.encode(), password.encode())))
                if _recv_binary(s).status != STATUS_OK:
                    raise ValueError("SASL login refused")
                s.sendall(binary_request(0x10))
                while True:
                    r = _recv_binary(s)
                    if not r.key:
                        return 0
                    if r.key == b"cluster_leader":
                        return int(r.value)
            if self.ascii_credentials is not None:
                login(s, *self.ascii_credentials)
            s.sendall(b"cluster map\r\n")
            head = _recv_line(s).split()
        if len(head) == 7 and head[0] == b"MAP":
            return int(head[6])
        return 0

    def alive(self) -> bool:
        return super().alive() and all(p.poll() is None for p in self.others)

    def stop(self) -> None:
        super().stop()
        for p in self.others:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        self.others = []
        for _, log in self._other_logs:
            log.close()
        self._other_logs = []


# -- raw socket helpers --------------------------------------------------------


def login(s: socket.socket, user: str, password: str) -> None:
    """-Y's login token on a fresh text connection (memcached: a `set`
    whose value is "<user> <password>")."""
    token = f"{user} {password}".encode()
    s.sendall(b"set auth 0 0 %d\r\n%s\r\n" % (len(token), token))
    reply = _recv_line(s)
    if reply != b"STORED\r\n":
        raise ConnectionError(f"login refused: {reply!r}")


class LoginSocketModule:
    """A socket module for pymemcache (its `socket_module`) whose sockets
    log in with -Y's token as soon as they connect, so a suite written for
    an open server runs unchanged against one with an auth file."""

    def __init__(self, user: str, password: str):
        self.credentials = (user, password)

    def __getattr__(self, name):
        return getattr(socket, name)

    def socket(self, *args, **kwargs) -> socket.socket:
        sock = _LoginSocket(*args, **kwargs)
        sock.credentials = self.credentials
        return sock


class _LoginSocket(socket.socket):
    credentials: tuple[str, str]

    def connect(self, address) -> None:
        super().connect(address)
        login(self, *self.credentials)


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)}/{n} bytes")
        buf += chunk
    return buf


def _recv_line(s: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\r\n"):
        chunk = s.recv(1)
        if not chunk:
            raise ConnectionError(f"connection closed mid-line: {buf!r}")
        buf += chunk
    return buf


class RawConn:
    """A buffered client socket for byte-exact protocol tests.

    Every read has a timeout so a server that stays silent fails the test
    instead of hanging it.
    """

    def __init__(self, address: tuple[str, int], timeout: float = 5.0, tls_context: ssl.SSLContext | None = None):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_context:
            self.sock = tls_context.wrap_socket(self.sock, server_hostname=address[0])
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"server closed the connection; unread buffer: {self.buf!r}")
        self.buf += chunk

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_upto(self, n: int, timeout: float = 2.0) -> bytes:
        """Up to n bytes: returns early only on EOF or after `timeout`
        seconds of waiting, so a short reply shows up in the assertion diff
        instead of as a bare timeout."""
        deadline = time.monotonic() + timeout
        old_timeout = self.sock.gettimeout()
        try:
            while len(self.buf) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.sock.settimeout(remaining)
                try:
                    chunk = self.sock.recv(65536)
                except TimeoutError:
                    break
                if not chunk:
                    break
                self.buf += chunk
        finally:
            self.sock.settimeout(old_timeout)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def readline(self) -> bytes:
        """One reply line, including its trailing \\r\\n."""
        while b"\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n") + 2
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_until(self, terminator: bytes) -> bytes:
        while terminator not in self.buf:
            self._fill()
        i = self.buf.index(terminator) + len(terminator)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def call(self, line: bytes) -> bytes:
        """Send one command line and return the first reply line."""
        self.send(line)
        return self.readline()

    def is_closed_by_peer(self, timeout: float = 2.0) -> bool:
        """True if the server closes the connection within `timeout`."""
        if self.buf:
            return False
        old_timeout = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        finally:
            self.sock.settimeout(old_timeout)


# -- binary protocol -----------------------------------------------------------

REQ_MAGIC = 0x80
RES_MAGIC = 0x81
OP_GET = 0x00
OP_SET = 0x01
OP_ADD = 0x02
OP_DELETE = 0x04
OP_INCREMENT = 0x05
OP_QUIT = 0x07
OP_NOOP = 0x0A
OP_VERSION = 0x0B
OP_GETK = 0x0C
OP_GETQ = 0x09

STATUS_OK = 0x0000
STATUS_KEY_NOT_FOUND = 0x0001
STATUS_KEY_EXISTS = 0x0002
STATUS_UNKNOWN_COMMAND = 0x0081

_HEADER = struct.Struct(">BBHBBHIIQ")


def binary_request(
    opcode: int,
    key: bytes = b"",
    value: bytes = b"",
    extras: bytes = b"",
    opaque: int = 0,
    cas: int = 0,
    vbucket: int = 0,
) -> bytes:
    body_len = len(extras) + len(key) + len(value)
    header = _HEADER.pack(REQ_MAGIC, opcode, len(key), len(extras), 0, vbucket, body_len, opaque, cas)
    return header + extras + key + value


class BinaryResponse:
    def __init__(self, header: bytes, body: bytes):
        (
            self.magic,
            self.opcode,
            key_len,
            self.extras_len,
            self.data_type,
            self.status,
            self.body_len,
            self.opaque,
            self.cas,
        ) = _HEADER.unpack(header)
        self.extras = body[: self.extras_len]
        self.key = body[self.extras_len : self.extras_len + key_len]
        self.value = body[self.extras_len + key_len :]

    def __repr__(self) -> str:
        return (
            f"BinaryResponse(op=0x{self.opcode:02x}, status=0x{self.status:04x}, "
            f"key={self.key!r}, extras={self.extras!r}, value={self.value[:64]!r}, "
            f"opaque={self.opaque}, cas={self.cas})"
        )


def _recv_binary(s: socket.socket) -> BinaryResponse:
    header = _recv_exact(s, 24)
    body_len = struct.unpack(">I", header[8:12])[0]
    return BinaryResponse(header, _recv_exact(s, body_len))


def read_binary_response(conn: RawConn) -> BinaryResponse:
    header = conn.read_exact(24)
    body_len = struct.unpack(">I", header[8:12])[0]
    return BinaryResponse(header, conn.read_exact(body_len))
