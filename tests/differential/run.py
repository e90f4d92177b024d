#!/usr/bin/env python3
"""Differential test: replay transcript scenarios against memcached and the
server under test, and compare the replies byte for byte (after a small,
documented normalisation).  See README.md in this directory for the scenario
format and the normalisation rules.

    tests/differential/run.py                      # RECALL_SERVER vs memcached
    tests/differential/run.py --server "memcached -u root"
    tests/differential/run.py -k meta_             # only matching scenarios
    tests/differential/run.py --show corpus/x.txt  # print one transcript

Exit status: 0 all compared scenarios matched, 1 a mismatch, 2 setup error
(no memcached, a server that won't start, a malformed scenario).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The server launcher is shared with the pytest suites in tests/python.
sys.path.insert(0, str(HERE.parent / "python"))

from mcserver import (  # noqa: E402
    HOST,
    ServerProcess,
    ServerStartError,
    reference_command,
    server_command_from_env,
)

CORPUS_DIR = HERE / "corpus"
KNOWN_DIFFERENCES = HERE / "known_differences.md"
SENTINEL = b"mn\r\n"
SENTINEL_REPLY = b"MN\r\n"
DEFAULT_STEP_TIMEOUT = 3.0

# The stats recall promises to report.  Only their names are compared.
PROMISED_STATS = frozenset(
    [
        "pid",
        "uptime",
        "time",
        "version",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "get_expired",
        "delete_misses",
        "delete_hits",
        "incr_misses",
        "incr_hits",
        "decr_misses",
        "decr_hits",
        "cas_misses",
        "cas_hits",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "bytes_read",
        "bytes_written",
        "limit_maxbytes",
        "threads",
        "curr_items",
        "total_items",
        "bytes",
        "evictions",
    ]
)


class ScenarioError(Exception):
    """A scenario file that doesn't follow the format."""


# -- scenario files ------------------------------------------------------------------


@dataclass
class Step:
    lineno: int
    chunks: list = field(default_factory=list)  # bytes, or ("template", bytes)
    sync: bool = True
    own_mn: int = 0  # `mn` commands in the step itself: their MNs precede ours

    def label(self) -> str:
        first = self.chunks[0] if self.chunks else b""
        text = first if isinstance(first, bytes) else first[1]
        text = text.rstrip(b"\r\n")
        shown = text[:70].decode("latin-1").encode("unicode_escape").decode()
        more = f"  [+{len(self.chunks) - 1} more]" if len(self.chunks) > 1 else ""
        return f"line {self.lineno}: {shown}{'...' if len(text) > 70 else ''}{more}"


@dataclass
class Scenario:
    name: str
    path: Path
    args: list
    steps: list


_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|[rnt0\\])")
_ESCAPES = {b"r": b"\r", b"n": b"\n", b"t": b"\t", b"0": b"\x00", b"\\": b"\\"}
_CAS_REF = re.compile(rb"\{\{CAS(\d+)([+-]\d+)?\}\}")


def _unescape(text: bytes) -> bytes:
    def one(m):
        e = m.group(1)
        return bytes([int(e[1:], 16)]) if e.startswith(b"x") else _ESCAPES[e]

    return _ESCAPE.sub(one, text)


def _chunk(data: bytes):
    # Chunks that reference CAS values are resolved per server at send time.
    return ("template", data) if _CAS_REF.search(data) else data


def parse_scenario(path: Path) -> Scenario:
    args: list = []
    steps: list = []
    current: Step | None = None

    def finish():
        nonlocal current
        if current is not None and current.chunks:
            steps.append(current)
        current = None

    for lineno, raw_line in enumerate(path.read_bytes().split(b"\n"), start=1):
        line = raw_line[:-1] if raw_line.endswith(b"\r") else raw_line
        if line.startswith(b"#"):
            continue
        if not line.strip():
            finish()
            continue
        if current is None:
            current = Step(lineno)
        if line.startswith(b"@"):
            word, _, rest = line[1:].partition(b" ")
            word = word.decode()
            if word == "args":
                if steps or current.chunks:
                    raise ScenarioError(f"{path.name}:{lineno}: @args must come before any step")
                args += shlex.split(rest.decode())
            elif word == "raw":
                current.chunks.append(_chunk(_unescape(rest)))
            elif word == "bytes":
                parts = rest.split()
                if not parts or not parts[0].isdigit() or len(parts) > 2 or (len(parts) == 2 and len(parts[1]) != 1):
                    raise ScenarioError(f"{path.name}:{lineno}: usage: @bytes COUNT [CHAR]")
                current.chunks.append((parts[1] if len(parts) == 2 else b"x") * int(parts[0]))
            elif word == "nosync":
                current.sync = False
            else:
                raise ScenarioError(f"{path.name}:{lineno}: unknown directive @{word}")
            continue
        if line.strip() == b"mn":
            current.own_mn += 1
        current.chunks.append(_chunk(line + b"\r\n"))
    finish()
    if not steps:
        raise ScenarioError(f"{path.name}: no steps")
    return Scenario(path.stem, path, args, steps)


def load_scenarios(corpus: Path = CORPUS_DIR, pattern: str = "") -> list:
    paths = sorted(corpus.glob("*.txt"))
    return [parse_scenario(p) for p in paths if pattern in p.stem]


def load_known_differences(path: Path = KNOWN_DIFFERENCES) -> dict:
    """Scenario name -> reason, from the list under '## Entries'."""
    known = {}
    if not path.exists():
        return known
    in_entries = False
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            in_entries = line.strip().lower() == "## entries"
            continue
        m = re.match(r"^[-*] `([^`]+)`\s*[:\-—]?\s*(.*)$", line.strip())
        if in_entries and m:
            known[m.group(1)] = m.group(2).strip() or "listed in known_differences.md"
    return known


# -- running against one server -----------------------------------------------------


class CasMap:
    """Real CAS values <-> placeholders numbered by first appearance."""

    def __init__(self):
        self.by_value: dict = {}
        self.by_index: dict = {}

    def name(self, value: bytes) -> str:
        if value not in self.by_value:
            n = len(self.by_value) + 1
            self.by_value[value] = n
            self.by_index[n] = value
        return f"<CAS{self.by_value[value]}>"

    def substitute(self, data: bytes) -> bytes:
        def one(m):
            real = self.by_index.get(int(m.group(1)))
            if real is None:
                return b"0"  # the server never showed that CAS: send something invalid
            return str(int(real) + int(m.group(2) or 0)).encode()

        return _CAS_REF.sub(one, data)


_VALUE_CAS = re.compile(rb"^(VALUE \S+ \d+ \d+ )(\d+)$")
_META_LINE = re.compile(rb"^(VA|HD|EN|NF|NS|EX) ")
_ME_LINE = re.compile(rb"^ME \S+ ")


def learn_cas(reply: bytes, cas: CasMap) -> None:
    """Record every CAS value the server revealed, in order of appearance."""
    for line in reply.split(b"\r\n"):
        m = _VALUE_CAS.match(line)
        if m:
            cas.name(m.group(2))
        elif _META_LINE.match(line):
            for tok in line.split(b" ")[1:]:
                if re.fullmatch(rb"c\d+", tok):
                    cas.name(tok[1:])
        elif _ME_LINE.match(line):
            for m2 in re.finditer(rb"\bcas=(\d+)", line):
                cas.name(m2.group(1))


def count_sentinels(buf: bytes) -> int:
    return len(re.findall(rb"(?:^|(?<=\n))MN\r\n", buf))


@dataclass
class StepResult:
    step: Step
    reply: bytes
    note: str = ""  # "closed", "timeout", "not sent"


def run_on_server(scenario: Scenario, address, step_timeout: float) -> tuple:
    """Play the scenario on one fresh connection; returns (results, CasMap)."""
    cas = CasMap()
    results = []
    sock = socket.create_connection(address, timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pending = b""  # replies to @nosync steps, read together with the next step
    closed = False
    try:
        for step in scenario.steps:
            if closed:
                # After a close or a timeout the stream can't be trusted (and
                # waiting out more timeouts would only slow a failing run).
                results.append(StepResult(step, b"", "not sent"))
                continue
            payload = b"".join(c if isinstance(c, bytes) else cas.substitute(c[1]) for c in step.chunks)
            if step.sync:
                payload += SENTINEL
            try:
                sock.sendall(payload)
            except OSError:
                closed = True
                results.append(StepResult(step, pending, "closed"))
                continue
            if not step.sync:
                results.append(StepResult(step, b"", "nosync"))
                continue
            want = step.own_mn + 1
            buf = pending
            pending = b""
            note = ""
            deadline = time.monotonic() + step_timeout
            while count_sentinels(buf) < want:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    note, closed = "timeout", True
                    break
                sock.settimeout(remaining)
                try:
                    chunk = sock.recv(1 << 20)
                except TimeoutError:
                    note, closed = "timeout", True
                    break
                except OSError:
                    chunk = b""
                if not chunk:
                    note = "closed"
                    closed = True
                    break
                buf += chunk
            if not note and buf.endswith(SENTINEL_REPLY):
                buf = buf[: -len(SENTINEL_REPLY)]
            learn_cas(buf, cas)
            results.append(StepResult(step, buf, note))
    finally:
        sock.close()
    return results, cas


# -- normalisation -------------------------------------------------------------------


def _fuzzy(n: bytes) -> str:
    # Seconds-based values (TTL left, last access) may tick between the two
    # servers; they compare equal within one second.
    return "~{" + n.decode() + "}"


def _printable(line: bytes) -> str:
    return line.decode("latin-1").encode("unicode_escape").decode()


def normalise(reply: bytes, cas: CasMap) -> list:
    lines = reply.split(b"\r\n")
    if lines[-1] == b"":
        lines.pop()
    else:
        # A reply not ending in CRLF: keep the tail visibly unterminated.
        lines[-1] += b"<no CRLF>"
    out: list = []
    stats: list = []

    def flush_stats():
        if stats:
            out.extend(sorted(stats))
            stats.clear()

    for line in lines:
        m = re.match(rb"^STAT (\S+) ", line)
        if m:
            name = m.group(1).decode()
            if name in PROMISED_STATS:
                stats.append(f"STAT {name} <value>")
            continue
        flush_stats()
        m = _VALUE_CAS.match(line)
        if m:
            out.append(_printable(m.group(1)) + cas.name(m.group(2)))
        elif _META_LINE.match(line):
            toks = line.split(b" ")
            norm = [_printable(toks[0])]
            for tok in toks[1:]:
                if re.fullmatch(rb"c\d+", tok):
                    norm.append("c" + cas.name(tok[1:]))
                elif re.fullmatch(rb"[tl]\d+", tok):
                    norm.append(tok[:1].decode() + _fuzzy(tok[1:]))
                else:
                    norm.append(_printable(tok))
            out.append(" ".join(norm))
        elif _ME_LINE.match(line):
            text = _printable(line)
            text = re.sub(r"\bcas=(\d+)", lambda m: "cas=" + cas.name(m.group(1).encode()), text)
            text = re.sub(r"\b(exp|la)=(\d+)", lambda m: f"{m.group(1)}={_fuzzy(m.group(2).encode())}", text)
            # Slab class and internal item size are memcached implementation details.
            text = re.sub(r"\b(cls|size)=\d+", r"\1=<impl>", text)
            out.append(text)
        elif line.startswith(b"VERSION "):
            out.append("VERSION <version>")
        else:
            out.append(_printable(line))
    flush_stats()
    return out


_FUZZ = re.compile(r"~\{(-?\d+)\}")


def lines_match(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if _FUZZ.sub("~", x) != _FUZZ.sub("~", y):
            return False
        for p, q in zip(_FUZZ.findall(x), _FUZZ.findall(y)):
            if abs(int(p) - int(q)) > 1:
                return False
    return True


def transcript(results: list, cas: CasMap) -> list:
    """Per step: (label, normalised reply lines)."""
    out = []
    for r in results:
        lines = normalise(r.reply, cas) if r.reply else []
        if r.note and r.note != "nosync":
            lines.append(f"<{r.note}>")
        out.append((r.step.label(), lines))
    return out


# -- comparison ----------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    status: str  # "pass", "fail", "skip", "error"
    detail: str = ""


def render(steps: list) -> list:
    out = []
    for label, lines in steps:
        out.append(f">> {label}")
        out.extend("   " + _FUZZ.sub(r"\1", line) for line in lines)
    return out


def compare(name: str, ref_steps: list, sut_steps: list, ref_label: str, sut_label: str) -> Outcome:
    mismatched = [i for i, (a, b) in enumerate(zip(ref_steps, sut_steps)) if not lines_match(a[1], b[1])]
    if not mismatched and len(ref_steps) == len(sut_steps):
        return Outcome(name, "pass")
    # Steps within tolerance are shown identically so the diff shows only
    # real differences.
    shown = [sut if i in mismatched else ref for i, (ref, sut) in enumerate(zip(ref_steps, sut_steps))]
    diff = difflib.unified_diff(render(ref_steps), render(shown), ref_label, sut_label, lineterm="", n=4)
    return Outcome(name, "fail", "\n".join(diff))


def run_scenario(
    scenario: Scenario, sut_cmd: list, ref_cmd: list, step_timeout: float = DEFAULT_STEP_TIMEOUT
) -> Outcome:
    transcripts = []
    for cmd, label in ((ref_cmd, "reference memcached"), (sut_cmd, "server under test")):
        srv = ServerProcess(cmd, scenario.args, name=label)
        try:
            srv.start()
        except ServerStartError as e:
            return Outcome(scenario.name, "error", str(e))
        try:
            results, cas = run_on_server(scenario, (HOST, srv.port), step_timeout)
        except OSError as e:
            return Outcome(scenario.name, "error", f"{label}: {e}")
        finally:
            srv.stop()
        transcripts.append(transcript(results, cas))
    ref_label = "memcached: " + " ".join(ref_cmd)
    sut_label = "under test: " + " ".join(sut_cmd)
    return compare(scenario.name, transcripts[0], transcripts[1], ref_label, sut_label)


def preflight(cmd: list, step_timeout: float = DEFAULT_STEP_TIMEOUT) -> str | None:
    """Check the server answers `mn`, which the runner relies on to delimit
    replies; returns an error message, or None if all is well.  Without this
    a server lacking `mn` would fail every step by timeout, slowly."""
    srv = ServerProcess(cmd, name="server under test")
    try:
        srv.start()
        with socket.create_connection((HOST, srv.port), timeout=step_timeout) as s:
            s.sendall(SENTINEL)
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(1024)
                if not chunk:
                    break
                reply += chunk
    except ServerStartError as e:
        return str(e)
    except OSError as e:
        return f"{' '.join(cmd)}: no reply to mn ({e}); the differential runner needs mn/MN to delimit replies"
    finally:
        srv.stop()
    if reply != SENTINEL_REPLY:
        return f"{' '.join(cmd)} answered mn with {reply!r}, not {SENTINEL_REPLY!r}; the differential runner needs it to delimit replies"
    return None


def show(scenario: Scenario, cmd: list, step_timeout: float) -> None:
    with ServerProcess(cmd, scenario.args) as srv:
        results, cas = run_on_server(scenario, (HOST, srv.port), step_timeout)
    print("\n".join(render(transcript(results, cas))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--server", help="command prefix of the server under test (default: $RECALL_SERVER or target/release/recalld)"
    )
    ap.add_argument("--reference", help="command prefix of the reference memcached (default: memcached on PATH)")
    ap.add_argument("--corpus", type=Path, default=CORPUS_DIR)
    ap.add_argument("--known", type=Path, default=KNOWN_DIFFERENCES, help="known differences file")
    ap.add_argument("--no-skip", action="store_true", help="also run scenarios listed as known differences")
    ap.add_argument("-k", dest="pattern", default="", help="only scenarios whose name contains this")
    ap.add_argument("--step-timeout", type=float, default=DEFAULT_STEP_TIMEOUT)
    ap.add_argument(
        "--show",
        type=Path,
        metavar="SCENARIO",
        help="print one scenario's normalised transcript from the reference and exit",
    )
    opts = ap.parse_args(argv)

    ref_cmd = shlex.split(opts.reference) if opts.reference else reference_command()
    if not ref_cmd:
        print("differential: reference memcached not found (apt-get install memcached)", file=sys.stderr)
        return 2
    sut_cmd = shlex.split(opts.server) if opts.server else server_command_from_env()

    try:
        if opts.show:
            show(parse_scenario(opts.show), ref_cmd, opts.step_timeout)
            return 0
        scenarios = load_scenarios(opts.corpus, opts.pattern)
    except ScenarioError as e:
        print(f"differential: {e}", file=sys.stderr)
        return 2
    if not scenarios:
        print("differential: no scenarios matched", file=sys.stderr)
        return 2
    known = {} if opts.no_skip else load_known_differences(opts.known)
    problem = preflight(sut_cmd, opts.step_timeout)
    if problem:
        print(f"differential: {problem}", file=sys.stderr)
        print(f"differential: 0 passed, {len(scenarios)} failed, 0 skipped")
        return 2

    counts = {"pass": 0, "fail": 0, "skip": 0, "error": 0}
    for sc in scenarios:
        if sc.name in known:
            outcome = Outcome(sc.name, "skip", known[sc.name])
        else:
            outcome = run_scenario(sc, sut_cmd, ref_cmd, opts.step_timeout)
        counts[outcome.status] += 1
        if outcome.status == "pass":
            print(f"PASS  {sc.name}")
        elif outcome.status == "skip":
            print(f"SKIP  {sc.name}  (known difference: {outcome.detail})")
        else:
            print(f"{outcome.status.upper():5} {sc.name}\n{outcome.detail}\n")
    failed = counts["fail"] + counts["error"]
    print(f"differential: {counts['pass']} passed, {failed} failed, {counts['skip']} skipped")
    if counts["error"]:
        return 2 if not counts["fail"] else 1
    return 1 if failed else 0


if __name__ == "__main__":
    # Turn SIGTERM into an exception so the servers we started get stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
