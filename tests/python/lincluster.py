"""A Jepsen-style linearizability run against a 3-node recalld cluster.

Three real recalld processes on loopback, their Raft traffic passing
through a fault proxy per directed link (so a test can cut any link),
several concurrent clients writing and reading a few keys through every
node, and a nemesis that partitions nodes, slows a node's links, and kills
nodes with SIGKILL and restarts them, and hands the leadership over
(`cluster transfer-leader`). Every operation is recorded with its
invocation and return time; the history is checked by tools/lincheck
(Porcupine).

Used by test_linearizability.py (the short run CI does) and as a command
for long runs (docs/benchmarks/cluster-linearizability.md):

    python tests/python/lincluster.py --rounds 20 --out /tmp/lin
    python tests/python/lincluster.py --stale --rounds 3 --out /tmp/lin-stale
    python tests/python/lincluster.py --placement --rounds 3 --out /tmp/lin-alor

--placement runs four nodes, four groups of three replicas and `alor`
placement instead, and its nemesis makes placement move leaders and
replicas while the clients run: a node's disk made slow by emulation
(`cluster emulate-fsync-delay`) until it gave up a group, kill -9 of the
node running placement (group 0's leader) and its restart, the disk made
fast again (placement may move groups back; the phase does not wait for
it), and a partition of group 0's leader.

How outcomes are recorded (what an unknown outcome means is the point):
  * a set answered STORED, a delete answered DELETED or NOT_FOUND, an
    append STORED or NOT_STORED, an incr/decr its number, NOT_FOUND or
    the non-numeric CLIENT_ERROR, a cas STORED, EXISTS or NOT_FOUND:
    known, with its return time and its answer (checked like a read's);
  * a write answered with an error that says it was not applied (not
    leader, unreachable leader "not applied", cluster busy): left out;
  * a write that timed out, lost its connection, or got an error that says
    it "may or may not" have been applied: an unknown outcome, recorded
    without a return (the checker lets it take effect at any later time,
    or never), and its client continues under a new id;
  * a get (or gets, with its cas token) with a value or a miss: known; a
    get with an error or no answer: left out (it observed nothing).
  * a cas uses the token of the gets just before it (read-modify-write).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcserver import HOST, REPO_ROOT, free_port, server_command_from_env  # noqa: E402

# A request's socket timeout: longer than the cluster's own timeout (a
# write then gets the server's "timed out" answer) and a forward's hop.
CLUSTER_TIMEOUT_MS = 1500
SOCKET_TIMEOUT_S = 4.0
# How long the cluster may take to serve again after a fault or a heal
# (an election takes about a second; nodes share a busy machine).
RECOVERY_BUDGET_S = 30.0
STARTUP_BUDGET_S = 30.0
# Cluster starts tried when a node finds a chosen port taken (start_all).
PORT_ATTEMPTS = 3
# The slow-node fault: each message to and from the node held back this
# long. A round trip then takes 2x this, a third of the 100 ms heartbeat
# that is also openraft's AppendEntries timeout (recall-raft/src/timing.rs),
# so the node is slow, not cut off. (With round trips near the timeout, on a
# loaded machine, they crossed it so often that the cluster served under 5
# requests a second: docs/benchmarks/cluster-linearizability.md.)
SLOW_S = 0.015


# -- the fault proxy ------------------------------------------------------------


class Link:
    """A TCP relay for one directed Raft link (node i dialling node j).

    Up, it pipes bytes both ways. Cut, it closes the connections it relays
    and black-holes new ones: accepted, never read or answered, so the
    dialling node's RPCs time out as across a real partition (a link that
    refused or reset them would make openraft retry at once, in a tight
    loop). Healing closes the black-holed connections; the nodes redial."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((HOST, 0))
        self.listener.listen(16)
        self.addr = self.listener.getsockname()
        self.lock = threading.Lock()
        self.up = True
        self.live: set[socket.socket] = set()
        self.held: list[socket.socket] = []
        self.closed = False
        # Slow: seconds each relayed chunk is held back.
        self.delay = 0.0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.closed:
                    conn.close()
                    continue
                if not self.up:
                    self.held.append(conn)
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=2.0)
                upstream.settimeout(None)
            except OSError:
                # The target is down (killed). Closing `conn` would fail the
                # dialler's RPC at once and openraft would retry at once;
                # held, it times out, as dialling a dead node's port would
                # be refused and backed off from.
                with self.lock:
                    self.held.append(conn)
                continue
            with self.lock:
                # The target is back: release what waited for it.
                held, self.held = (self.held, []) if self.up else ([], self.held)
            for s in held:
                s.close()
            with self.lock:
                if not self.up or self.closed:
                    conn.close()
                    upstream.close()
                    continue
                self.live |= {conn, upstream}
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Read `src`; each chunk is due at `dst` `delay` after it arrived
        (latency, not a bandwidth limit: chunks in flight overlap)."""
        due: queue.Queue[tuple[float, bytes] | None] = queue.Queue()
        threading.Thread(target=self._deliver, args=(due, src, dst), daemon=True).start()
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                due.put((time.monotonic() + self.delay, data))
        except OSError:
            pass
        due.put(None)

    def _deliver(self, due: queue.Queue, src: socket.socket, dst: socket.socket) -> None:
        try:
            while (item := due.get()) is not None:
                at, data = item
                # The slow-link fault itself: hold the chunk until it is due.
                if (wait := at - time.monotonic()) > 0:
                    time.sleep(wait)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            self._drop(s)

    def _drop(self, s: socket.socket) -> None:
        with self.lock:
            self.live.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def cut(self) -> None:
        with self.lock:
            self.up = False
            live = list(self.live)
        for s in live:
            self._drop(s)

    def heal(self) -> None:
        with self.lock:
            self.up = True
            self.delay = 0.0
            held, self.held = self.held, []
        for s in held:
            s.close()

    def close(self) -> None:
        with self.lock:
            self.closed = True
        self.cut()
        self.heal()
        self.listener.close()


# -- the cluster ----------------------------------------------------------------


def _line(s: socket.socket, buf: bytearray) -> bytes:
    """One reply line (without CRLF); bytes after it stay in `buf`."""
    while True:
        i = buf.find(b"\r\n")
        if i >= 0:
            line = bytes(buf[:i])
            del buf[: i + 2]
            return line
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk


def _exact(s: socket.socket, buf: bytearray, n: int) -> bytes:
    while len(buf) < n:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    data = bytes(buf[:n])
    del buf[:n]
    return data


def ask(addr: tuple[str, int], line: bytes, timeout: float = 2.0) -> bytes:
    """Send one command, return its first reply line."""
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(line + b"\r\n")
        return _line(s, bytearray())


class Cluster:
    """`nodes` recalld nodes (ids 1..n, three by default), logs on disk so
    a killed node restarts under its id, Raft links through `Link`s; `extra`
    flags go to every node."""

    def __init__(self, workdir: Path, read: str = "linearizable", nodes: int = 3, extra: tuple[str, ...] = ()):
        self.command = server_command_from_env()
        self.workdir = workdir
        self.read = read
        self.extra = list(extra)
        self.ids = tuple(range(1, nodes + 1))
        self._choose_ports()
        self.procs: dict[int, subprocess.Popen] = {}
        self.started: set[int] = set()

    def _choose_ports(self) -> None:
        """Client and Raft ports for every node, and the Raft links to them."""
        self.client = {i: free_port() for i in self.ids}
        self.raft = {i: free_port() for i in self.ids}
        self.links = {(i, j): Link((HOST, self.raft[j])) for i in self.ids for j in self.ids if i != j}

    def addr(self, i: int) -> tuple[str, int]:
        return (HOST, self.client[i])

    def _argv(self, i: int) -> list[str]:
        argv = self.command + ["-p", str(self.client[i]), "-l", HOST, "-U", "0"]
        argv += ["--cluster-node-id", str(i), "--cluster-timeout-ms", str(CLUSTER_TIMEOUT_MS)]
        argv += ["--cluster-log-dir", str(self.workdir / f"node{i}"), "--cluster-read", self.read]
        for j in self.ids:
            raft = f"{HOST}:{self.raft[j]}" if j == i else "%s:%d" % self.links[(i, j)].addr
            argv += ["--cluster-peer", f"{j}={raft}/{HOST}:{self.client[j]}"]
        if i == 1 and 1 not in self.started:
            argv.append("--cluster-bootstrap")
        return argv + self.extra

    def start(self, i: int) -> None:
        (self.workdir / f"node{i}").mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / f"node{i}.log", "ab")
        self.procs[i] = subprocess.Popen(self._argv(i), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        self.started.add(i)
        deadline = time.monotonic() + STARTUP_BUDGET_S
        while time.monotonic() < deadline:
            if self.procs[i].poll() is not None:
                raise RuntimeError(f"node {i} exited with {self.procs[i].returncode}; see {self.workdir}/node{i}.log")
            try:
                if ask(self.addr(i), b"version").startswith(b"VERSION"):
                    return
            except OSError:
                pass
            time.sleep(0.05)  # probing until the node answers
        raise RuntimeError(f"node {i} did not answer within {STARTUP_BUDGET_S}s")

    def _port_taken(self) -> bool:
        return any(
            b"Address already in use" in (self.workdir / f"node{i}.log").read_bytes()
            for i in self.ids
            if (self.workdir / f"node{i}.log").exists()
        )

    def start_all(self) -> None:
        # free_port() releases the port it found, so another socket can take
        # it before the node binds it. Then the whole cluster starts again on
        # fresh ports (every node's flags name every port), at most
        # PORT_ATTEMPTS times; the failed attempt's logs are kept beside.
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                for i in self.ids:
                    self.start(i)
                break
            except RuntimeError:
                if attempt == PORT_ATTEMPTS or not self._port_taken():
                    raise
                self.stop()
                self.started.clear()
                for i in self.ids:
                    shutil.rmtree(self.workdir / f"node{i}", ignore_errors=True)
                    log = self.workdir / f"node{i}.log"
                    if log.exists():
                        log.rename(self.workdir / f"node{i}.attempt{attempt}.log")
                self._choose_ports()
        if self.leader(STARTUP_BUDGET_S) is None:
            raise RuntimeError(f"no leader elected within {STARTUP_BUDGET_S}s; logs in {self.workdir}")

    def kill(self, i: int) -> None:
        p = self.procs.pop(i)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)

    def leader(self, budget: float = RECOVERY_BUDGET_S) -> int | None:
        """A leader that a majority of the running nodes name (probing)."""
        deadline = time.monotonic() + budget
        while time.monotonic() < deadline:
            named: dict[int, int] = {}
            for i in self.procs:
                try:
                    head = ask(self.addr(i), b"cluster map", timeout=1.0).split()
                except OSError:
                    continue
                if len(head) == 7 and head[0] == b"MAP" and head[6] != b"0":
                    named[int(head[6])] = named.get(int(head[6]), 0) + 1
            for lead, votes in named.items():
                if votes >= max(2, len(self.procs) // 2 + 1) and lead in self.procs:
                    return lead
            time.sleep(0.05)  # probing until an election settles
        return None

    def partition(self, i: int) -> None:
        """Cut every Raft link to and from node i."""
        for (a, b), link in self.links.items():
            if i in (a, b):
                link.cut()

    def slow(self, i: int, delay: float) -> None:
        """Delay every chunk on the Raft links to and from node i."""
        for (a, b), link in self.links.items():
            if i in (a, b):
                link.delay = delay

    def heal(self) -> None:
        for link in self.links.values():
            link.heal()

    def transfer(self, lead: int, target: int) -> str:
        """Ask `lead` to hand the leadership to `target` (`cluster
        transfer-leader`) and return its answer. A leader younger than its
        lease answers "try again"; that is asked again, within the budget."""
        deadline = time.monotonic() + RECOVERY_BUDGET_S
        while True:
            try:
                line = ask(self.addr(lead), b"cluster transfer-leader %d" % target, timeout=SOCKET_TIMEOUT_S)
            except OSError as e:
                return f"no answer: {e or type(e).__name__}"
            reply = line.decode(errors="replace")
            if not reply.endswith("try again") or time.monotonic() >= deadline:
                return reply
            time.sleep(0.1)  # probing until the leader is old enough to hand over

    def stat(self, i: int, name: str) -> str | None:
        """One `stats` value of node i (None if it does not answer)."""
        try:
            with socket.create_connection(self.addr(i), timeout=2.0) as s:
                s.sendall(b"stats\r\n")
                buf = b""
                while not buf.endswith(b"END\r\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        return None
                    buf += chunk
        except OSError:
            return None
        for line in buf.split(b"\r\n"):
            f = line.split()
            if len(f) == 3 and f[0] == b"STAT" and f[1] == name.encode():
                return f[2].decode()
        return None

    def held(self, i: int) -> int | None:
        v = self.stat(i, "cluster_groups_held")
        return int(v) if v is not None else None

    def until(self, what: str, ok, budget: float = 120.0) -> None:
        """Probe `ok()` until it holds, or fail naming `what`."""
        deadline = time.monotonic() + budget
        while not ok():
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{what}: not within {budget:.0f}s; logs in {self.workdir}")
            time.sleep(0.2)  # probing until placement acted

    def stop(self) -> None:
        for i in list(self.procs):
            self.kill(i)
        for link in self.links.values():
            link.close()


# -- clients and the history ----------------------------------------------------


@dataclass
class History:
    ops: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ok: int = 0
    unknown: int = 0
    progress: threading.Condition = field(default_factory=threading.Condition)

    def record(self, op: dict) -> None:
        with self.lock:
            self.ops.append(op)
            if op["return"] is None:
                self.unknown += 1
        if op["return"] is not None:
            with self.progress:
                self.ok += 1
                self.progress.notify_all()

    def wait_ok(self, n: int, budget: float) -> bool:
        """Wait until `n` more operations completed with a known outcome."""
        deadline = time.monotonic() + budget
        with self.progress:
            goal = self.ok + n
            while self.ok < goal:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.progress.wait(left)
        return True

    def write(self, path: Path) -> None:
        with self.lock, open(path, "w") as f:
            for op in self.ops:
                f.write(json.dumps(op) + "\n")


# Errors that say the write was refused before it was proposed.
_NOT_APPLIED = (b"not applied", b"not leader", b"cluster busy", b"no quorum", b"not supported")


class Client(threading.Thread):
    """Gets, sets, deletes, appends, incr/decr and gets-then-cas of a few
    keys on random nodes until stopped."""

    ids = iter(range(1_000_000))
    ids_lock = threading.Lock()

    def __init__(
        self, cluster: Cluster, history: History, keys: list[str], stop: threading.Event, seed: int, cas: bool = True
    ):
        super().__init__(daemon=True)
        self.cluster, self.history, self.keys, self.stop = cluster, history, keys, stop
        self.use_cas = cas
        self.rng = random.Random(seed)
        self.seed = seed
        self.n = 0
        self.cid = self._new_id()
        self.conns: dict[int, tuple[socket.socket, bytearray]] = {}
        # Nodes this client talks to, and when to try a node that refused
        # a connection again.
        self.nodes = list(cluster.ids)
        self.down_until: dict[int, float] = {}

    @classmethod
    def _new_id(cls) -> int:
        with cls.ids_lock:
            return next(cls.ids)

    def _conn(self, node: int) -> tuple[socket.socket, bytearray]:
        if node not in self.conns:
            s = socket.create_connection(self.cluster.addr(node), timeout=SOCKET_TIMEOUT_S)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns[node] = (s, bytearray())
        return self.conns[node]

    def _drop(self, node: int) -> None:
        s, _ = self.conns.pop(node, (None, None))
        if s is not None:
            s.close()

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            node = self.rng.choice([n for n in self.nodes if self.down_until.get(n, 0) <= now] or self.nodes)
            key = self.rng.choice(self.keys)
            r = self.rng.random()
            if r < 0.35:
                self.get(node, key)
            elif r < 0.65:
                self.n += 1
                # Half the values are numbers, for incr and decr to work on.
                value = f"c{self.seed}-{self.n}" if self.rng.random() < 0.5 else str(self.seed * 1_000_000 + self.n)
                self.set(node, key, value)
            elif r < 0.72:
                self.delete(node, key)
            elif r < 0.79:
                self.n += 1
                self.append(node, key, f"+{self.seed}.{self.n}")
            elif r < 0.89:
                self.arith(node, key, self.rng.choice(("incr", "decr")), self.rng.randint(1, 9))
            else:
                # Read-modify-write: the token of a gets, then cas.
                token = self.get(node, key, gets=True)
                if token is not None and self.use_cas and not self.stop.is_set():
                    self.n += 1
                    self.cas(node, key, f"c{self.seed}-{self.n}", token)
        for node in list(self.conns):
            self._drop(node)

    def _op(self, node: int, op: dict, request: bytes, parse) -> None:
        op["call"] = time.monotonic_ns()
        try:
            s, buf = self._conn(node)
        except OSError:
            # Not connected, so nothing was sent: no operation. The node
            # is skipped for a moment (it is down or restarting).
            self.down_until[node] = time.monotonic() + 0.2
            return
        try:
            s.sendall(request)
            outcome = parse(s, buf)
        except (OSError, ConnectionError, ValueError) as e:
            self._drop(node)
            outcome = "unknown"
            op["error"] = str(e) or type(e).__name__
        op["return"] = time.monotonic_ns()
        if outcome == "unknown":
            if op["op"] in ("get", "gets"):
                return  # observed nothing
            op["return"] = None
            self.history.record(op)
            self.cid = self._new_id()  # the old process may still act
        elif outcome == "refused":
            return
        else:
            self.history.record(op)

    @staticmethod
    def _write_outcome(op: dict, line: bytes, ok: tuple[bytes, ...]) -> str:
        if line in ok:
            return "ok"
        if any(m in line for m in _NOT_APPLIED):
            return "refused"
        op["error"] = line.decode(errors="replace")
        return "unknown"

    def set(self, node: int, key: str, value: str) -> None:
        op = {"client": self.cid, "op": "set", "key": key, "value": value, "node": node}
        req = b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(value), value.encode())
        self._op(node, op, req, lambda s, buf: self._write_outcome(op, _line(s, buf), (b"STORED",)))

    def delete(self, node: int, key: str) -> None:
        op = {"client": self.cid, "op": "delete", "key": key, "node": node}
        req = b"delete %s\r\n" % key.encode()

        def parse(s: socket.socket, buf: bytearray) -> str:
            line = _line(s, buf)
            # The answer is checked too: a NOT_FOUND after an acknowledged
            # set is a lost write even when no read follows.
            op["found"] = line == b"DELETED"
            return self._write_outcome(op, line, (b"DELETED", b"NOT_FOUND"))

        self._op(node, op, req, parse)

    def append(self, node: int, key: str, suffix: str) -> None:
        op = {"client": self.cid, "op": "append", "key": key, "value": suffix, "node": node}
        req = b"append %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(suffix), suffix.encode())

        def parse(s: socket.socket, buf: bytearray) -> str:
            line = _line(s, buf)
            op["outcome"] = {b"STORED": "stored", b"NOT_STORED": "not_stored"}.get(line)
            return self._write_outcome(op, line, (b"STORED", b"NOT_STORED"))

        self._op(node, op, req, parse)

    def arith(self, node: int, key: str, verb: str, delta: int) -> None:
        op = {"client": self.cid, "op": verb, "key": key, "delta": delta, "node": node}
        req = b"%s %s %d\r\n" % (verb.encode(), key.encode(), delta)

        def parse(s: socket.socket, buf: bytearray) -> str:
            line = _line(s, buf)
            if line.isdigit():
                op["outcome"], op["value"] = "value", line.decode()
                return "ok"
            if line == b"NOT_FOUND":
                op["outcome"] = "not_found"
                return "ok"
            if line.startswith(b"CLIENT_ERROR") and b"non-numeric" in line:
                op["outcome"] = "non_numeric"
                return "ok"
            return self._write_outcome(op, line, ())

        self._op(node, op, req, parse)

    def cas(self, node: int, key: str, value: str, token: int) -> None:
        op = {"client": self.cid, "op": "cas", "key": key, "value": value, "cas": token, "node": node}
        req = b"cas %s 0 0 %d %d\r\n%s\r\n" % (key.encode(), len(value), token, value.encode())
        answers = {b"STORED": "stored", b"EXISTS": "exists", b"NOT_FOUND": "not_found"}

        def parse(s: socket.socket, buf: bytearray) -> str:
            line = _line(s, buf)
            op["outcome"] = answers.get(line)
            return self._write_outcome(op, line, tuple(answers))

        self._op(node, op, req, parse)

    def get(self, node: int, key: str, gets: bool = False) -> int | None:
        """A get (or gets); returns the cas token a gets found."""
        verb = "gets" if gets else "get"
        op = {"client": self.cid, "op": verb, "key": key, "node": node}

        def parse(s: socket.socket, buf: bytearray) -> str:
            line = _line(s, buf)
            if line == b"END":
                op["found"] = False
                return "ok"
            parts = line.split()
            if len(parts) == (5 if gets else 4) and parts[0] == b"VALUE":
                data = _exact(s, buf, int(parts[3]) + 2)[:-2]
                if _line(s, buf) != b"END":
                    raise ValueError("no END after the value")
                op["found"], op["value"] = True, data.decode()
                if gets:
                    op["cas"] = int(parts[4])
                return "ok"
            return "refused"  # an error: it observed nothing

        self._op(node, op, b"%s %s\r\n" % (verb.encode(), key.encode()), parse)
        return op.get("cas")


# -- a run ----------------------------------------------------------------------


@dataclass
class Run:
    history: Path
    ops: int
    unknown: int
    faults: list[str]
    verdict: str
    returncode: int


def build_checker(out: Path) -> Path:
    """Build tools/lincheck (Porcupine from the Go module proxy or cache)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        raise RuntimeError("the Go toolchain is needed for tools/lincheck (scripts/test installs it)")
    binary = out / "lincheck"
    subprocess.run(
        [go, "build", "-buildvcs=false", "-o", str(binary), "."],
        cwd=REPO_ROOT / "tools" / "lincheck",
        check=True,
        timeout=300,
    )
    return binary


def check(checker: Path, history: Path, html: Path) -> tuple[int, str]:
    p = subprocess.run(
        [str(checker), "-timeout", "120s", "-html", str(html), str(history)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p.returncode, (p.stdout + p.stderr).strip()


def run(
    workdir: Path,
    checker: Path,
    rounds: int = 1,
    clients: int = 6,
    keys: int = 4,
    ops_per_phase: int = 60,
    stale: bool = False,
    seed: int = 1,
    cas: bool = True,
    placement: bool = False,
) -> Run:
    """Start a cluster, run clients under the nemesis, check the history.

    Without `stale`, each round partitions the leader, partitions a
    follower, slows the leader's links, kills the leader and restarts it,
    kills a follower and restarts it, hands the leadership to a follower
    (`cluster transfer-leader`); a phase lasts until the clients
    completed `ops_per_phase` operations (the cluster serves again) after
    the fault and after its repair. With `stale` (every node serving reads from its own store),
    each round partitions a follower, writes through the leader and reads
    at the cut-off follower, the negative control. Without `cas`, the
    clients' gets are not followed by a cas (to tell a cas anomaly from
    the rest: docs/benchmarks/cluster-linearizability.md, "Two histories
    the checker flags"). With `placement`, the cluster and the nemesis of
    the module note's --placement."""
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    if placement:
        cluster = Cluster(workdir, nodes=4, extra=PLACEMENT_FLAGS)
    else:
        cluster = Cluster(workdir, read="stale" if stale else "linearizable")
    history = History()
    stop = threading.Event()
    faults: list[str] = []
    key_names = [f"k{i}" for i in range(keys)]
    threads: list[Client] = []

    def phase(what: str, fault, repair) -> None:
        faults.append(what)
        fault()
        if not history.wait_ok(ops_per_phase, RECOVERY_BUDGET_S):
            raise RuntimeError(f"{what}: the cluster served fewer than {ops_per_phase} operations in {RECOVERY_BUDGET_S}s")
        repair()
        if cluster.leader() is None:
            raise RuntimeError(f"after {what}: no leader within {RECOVERY_BUDGET_S}s")
        if not history.wait_ok(ops_per_phase, RECOVERY_BUDGET_S):
            raise RuntimeError(f"after {what}: fewer than {ops_per_phase} operations in {RECOVERY_BUDGET_S}s")

    try:
        cluster.start_all()
        for c in range(clients):
            t = Client(cluster, history, key_names, stop, seed=seed * 1000 + c, cas=cas)
            threads.append(t)
            t.start()
        if not history.wait_ok(ops_per_phase, RECOVERY_BUDGET_S):
            raise RuntimeError("the cluster did not serve the clients")
        for _ in range(rounds if placement else 0):
            placement_round(cluster, history, faults, phase, ops_per_phase)
        for _ in range(0 if placement else rounds):
            lead = cluster.leader()
            if lead is None:
                raise RuntimeError("no leader")
            follower = rng.choice([i for i in cluster.ids if i != lead])
            if stale:
                phase(f"partition follower {follower}", lambda: stale_probe(cluster, history, follower, lead), cluster.heal)
                continue
            phase(f"partition leader {lead}", lambda: cluster.partition(lead), cluster.heal)
            lead = cluster.leader()
            follower = rng.choice([i for i in cluster.ids if i != lead])
            phase(f"partition follower {follower}", lambda: cluster.partition(follower), cluster.heal)
            lead = cluster.leader()
            phase(f"slow leader {lead} ({SLOW_S * 1000:.0f} ms a message)", lambda: cluster.slow(lead, SLOW_S), cluster.heal)
            lead = cluster.leader()
            phase(f"kill -9 leader {lead}", lambda: cluster.kill(lead), lambda: cluster.start(lead))
            lead = cluster.leader()
            follower = rng.choice([i for i in cluster.ids if i != lead])
            phase(f"kill -9 follower {follower}", lambda: cluster.kill(follower), lambda: cluster.start(follower))
            lead = cluster.leader()
            target = rng.choice([i for i in cluster.ids if i != lead])

            def transfer() -> None:
                # The answer goes into the fault's name: a transfer that
                # timed out or was refused is a fault that did not happen.
                faults[-1] += f": {cluster.transfer(lead, target)}"

            phase(f"transfer leader {lead} to {target}", transfer, lambda: None)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=2 * SOCKET_TIMEOUT_S)
        # A last read of every key through the leader: an acknowledged write
        # that was lost shows up here, if nowhere else.
        final = Client(cluster, history, key_names, stop, seed=seed * 1000 + 999)
        lead = cluster.leader(5.0) if cluster.procs else None
        if lead is not None:
            for k in key_names:
                final.get(lead, k)
        cluster.stop()
    path = workdir / "history.jsonl"
    history.write(path)
    code, verdict = check(checker, path, workdir / "history.html")
    return Run(path, len(history.ops), history.unknown, faults, verdict, code)


# The placement run's cluster: four nodes, four groups of three, `alor`.
PLACEMENT_FLAGS = ("--cluster-groups", "4", "--cluster-replicas", "3", "--cluster-placement", "alor")
# The slow disk of the placement run (emulated): far slower than the
# others', so Eq. 1 moves replicas off it and leader migration its leaders.
SLOW_DISK_US = 50_000


def busiest(cluster: Cluster) -> int:
    """The node holding the most bytes, as `cluster placement` shows it
    where placement runs (`active=1`; another node's lines may be old)."""
    best, most = cluster.ids[0], -1
    for i in cluster.procs:
        try:
            with socket.create_connection(cluster.addr(i), timeout=2.0) as s:
                s.sendall(b"cluster placement\r\n")
                buf = b""
                while not buf.endswith(b"END\r\n") and len(buf) < 1 << 20:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
        except OSError:
            continue
        lines = buf.decode(errors="replace").split("\r\n")
        if not lines or "active=1" not in lines[0]:
            continue
        for line in lines:
            if line.startswith("NODE "):
                f = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
                if int(f.get("bytes", 0)) > most:
                    best, most = int(f["node"]), int(f.get("bytes", 0))
        if most >= 0:
            break
    return best


def placement_round(cluster: Cluster, history: History, faults: list[str], phase, ops_per_phase: int) -> None:
    """One round of the placement nemesis (module note): every change is
    placement's own, made while the clients run."""
    x = busiest(cluster)
    before = cluster.held(x) or 0
    faults.append(f"slow disk on node {x} (emulated {SLOW_DISK_US} us a sync; it held {before} groups)")
    ask(cluster.addr(x), b"cluster emulate-fsync-delay %d" % SLOW_DISK_US)
    cluster.until(f"node {x} gives up a group", lambda: (h := cluster.held(x)) is not None and h < before)
    if not history.wait_ok(ops_per_phase, RECOVERY_BUDGET_S):
        raise RuntimeError(f"slow node {x}: fewer than {ops_per_phase} operations in {RECOVERY_BUDGET_S}s")
    faults[-1] += f", then {cluster.held(x)}"
    # Placement runs on group 0's leader: kill it while the moves go on.
    lead = cluster.leader()
    if lead is None:
        raise RuntimeError("no leader of group 0")
    phase(f"kill -9 node {lead}, which runs placement", lambda: cluster.kill(lead), lambda: cluster.start(lead))
    low = cluster.held(x) or 0
    faults.append(f"fast disk on node {x} again (it held {low} groups)")
    ask(cluster.addr(x), b"cluster emulate-fsync-delay 0")
    if not history.wait_ok(ops_per_phase, RECOVERY_BUDGET_S):
        raise RuntimeError(f"fast node {x}: fewer than {ops_per_phase} operations in {RECOVERY_BUDGET_S}s")
    lead = cluster.leader()
    if lead is None:
        raise RuntimeError("no leader of group 0")
    phase(f"partition node {lead}, which runs placement", lambda: cluster.partition(lead), cluster.heal)
    faults[-2] += f", then {cluster.held(x)}"


def stale_probe(cluster: Cluster, history: History, follower: int, lead: int) -> None:
    """Cut `follower` off, then write each key through the leader and read
    it at the follower: with stale reads on, the follower still answers
    from before the cut, after the write was acknowledged."""
    cluster.partition(follower)
    probe = Client(cluster, history, [], threading.Event(), seed=424242)
    for k in ("k0", "k1"):
        probe.n += 1
        probe.set(lead, k, f"probe-{k}-{time.monotonic_ns()}")
        probe.get(follower, k)
    for node in list(probe.conns):
        probe._drop(node)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="nemesis rounds (6 faults each)")
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--keys", type=int, default=4)
    ap.add_argument("--ops-per-phase", type=int, default=200)
    ap.add_argument("--stale", action="store_true", help="the negative control: --cluster-read stale")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-cas", action="store_true", help="gets without the cas after them")
    ap.add_argument("--placement", action="store_true", help="4 nodes, alor placement moving replicas (module note)")
    ap.add_argument("--out", type=Path, help="keep the history, logs and HTML here (default: a temp dir)")
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="lincluster-"))
    out.mkdir(parents=True, exist_ok=True)
    checker = build_checker(out)
    start = time.monotonic()
    r = run(
        out / "run", checker, a.rounds, a.clients, a.keys, a.ops_per_phase, a.stale, a.seed, not a.no_cas, a.placement
    )
    print(f"faults: {len(r.faults)} ({', '.join(r.faults)})")
    print(f"operations: {r.ops} ({r.unknown} with unknown outcome) in {time.monotonic() - start:.0f}s")
    print(r.verdict)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
