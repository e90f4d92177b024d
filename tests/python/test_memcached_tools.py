"""memcached's operator tools against the server under test, unchanged:

* Prometheus's memcached_exporter, built from its public source through the
  Go module proxy (skipped only when no Go toolchain is installed): it must
  report `memcached_up 1` and every metric family it reports for memcached
  in the same state (live against Debian's memcached when installed, and
  against the family list recorded from it,
  tests/differential/exporter_families_1.6.18.txt);
* memcached-tool's `display` (Debian's memcached package): a row per slab
  class `stats slabs` reports.

Scrapes are parsed with prometheus_client's text-format parser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from mcserver import HOST, free_port
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
RECORDED_FAMILIES = ROOT / "tests" / "differential" / "exporter_families_1.6.18.txt"
EXPORTER_MODULE = "github.com/prometheus/memcached_exporter"
EXPORTER_VERSION = "v0.16.0"
MEMCACHED_TOOL = Path("/usr/share/memcached/scripts/memcached-tool")
# Building the exporter downloads its modules and compiles ~100 packages.
BUILD_TIMEOUT_S = 900


def go_binary() -> str | None:
    return shutil.which("go") or next((g for g in ["/usr/local/go/bin/go"] if os.access(g, os.X_OK)), None)


@pytest.fixture(scope="session")
def exporter_binary() -> Path:
    """memcached_exporter built from its tagged source, cached under target/.

    `go install module@version` would ask the proxy for the module's
    version list (to report deprecation), which the proxy refuses for this
    module; downloading the tagged version and building it in place uses
    only that version's files and its go.sum."""
    go = go_binary()
    if go is None:
        pytest.skip("no Go toolchain (scripts/test installs golang-go)")
    # The exporter's go.mod asks for Go 1.25; from 1.21 on, the go command
    # fetches that toolchain itself (GOTOOLCHAIN=auto, a module from the
    # proxy), while an older one cannot build it at all.
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    major_minor = tuple(int(x) for x in version.removeprefix("go").split(".")[:2] if x.isdigit())
    if major_minor < (1, 21):
        pytest.skip(f"{version} cannot build memcached_exporter {EXPORTER_VERSION} (needs Go 1.21 or later)")
    out = ROOT / "target" / "tools" / f"memcached_exporter-{EXPORTER_VERSION}" / "memcached_exporter"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    dl = subprocess.run(
        [go, "mod", "download", "-json", f"{EXPORTER_MODULE}@{EXPORTER_VERSION}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=out.parent,
        timeout=BUILD_TIMEOUT_S,
    )
    assert dl.returncode == 0, f"go mod download failed:\n{dl.stdout}\n{dl.stderr}"
    src = json.loads(dl.stdout)["Dir"]
    tmp = out.with_suffix(".tmp")
    build = subprocess.run(
        [go, "build", "-o", str(tmp), "./cmd/memcached_exporter"],
        capture_output=True,
        text=True,
        env=env,
        cwd=src,
        timeout=BUILD_TIMEOUT_S,
    )
    assert build.returncode == 0, f"building memcached_exporter failed:\n{build.stderr}"
    tmp.rename(out)
    return out


def fill(conn) -> None:
    """The same small workload on either server: items of two sizes, hits,
    misses and each command the exporter counts per class."""
    conn.send(
        b"set small 0 0 5\r\nhello\r\n"
        + b"set big 0 0 3000\r\n" + b"x" * 3000 + b"\r\n"
        + b"set n 0 0 1\r\n1\r\n"
        + b"get small\r\nget nope\r\nincr n 2\r\ntouch small 100\r\ndelete gone\r\n"
    )
    want = [b"STORED", b"STORED", b"STORED", b"VALUE", b"hello", b"END", b"END", b"3", b"TOUCHED", b"NOT_FOUND"]
    for prefix in want:
        line = conn.readline()
        assert line.startswith(prefix), (prefix, line)


def scrape(exporter: Path, address: str) -> str:
    """One scrape of a fresh exporter pointed at `address`."""
    port = free_port()
    proc = subprocess.Popen(
        [str(exporter), f"--memcached.address={address}", f"--web.listen-address={HOST}:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=2) as r:
                    return r.read().decode()
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def memcached_families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text) if f.name.startswith("memcached_")}


def value(families: dict[str, list], name: str, **labels: str) -> float:
    matches = [s.value for s in families[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matches) == 1, (name, labels, families[name])
    return matches[0]


def total(families: dict[str, list], name: str, **labels: str) -> float:
    return sum(s.value for s in families[name] if all(s.labels.get(k) == v for k, v in labels.items()))


def recorded_families() -> list[str]:
    lines = RECORDED_FAMILIES.read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


# A first run builds the exporter (the fixture) within the test's time.
@pytest.mark.timeout(BUILD_TIMEOUT_S + 60)
def test_exporter_reports_server_up_with_memcached_s_families(exporter_binary, server, reference_server):
    for srv in (server, reference_server):
        with srv.connect() as conn:
            fill(conn)
    ours = memcached_families(scrape(exporter_binary, server.addr_str))
    assert value(ours, "memcached_up") == 1, "the exporter could not parse the server's stats"
    theirs = memcached_families(scrape(exporter_binary, reference_server.addr_str))
    assert value(theirs, "memcached_up") == 1
    assert sorted(theirs) == recorded_families(), "the recording no longer matches memcached: re-record it"
    assert sorted(ours) == sorted(theirs)
    # The values are the server's own, not placeholders (summed over slab
    # classes: memcached has two here, recall one).
    assert value(ours, "memcached_current_items") == 3
    assert total(ours, "memcached_slab_current_items") == 3
    assert total(ours, "memcached_slab_chunks_used") == 3
    assert total(ours, "memcached_slab_commands", command="get", status="hit") == 1
    assert total(ours, "memcached_slab_commands", command="set", status="hit") == 3
    assert total(ours, "memcached_slab_commands", command="touch", status="hit") == 1
    assert total(ours, "memcached_slab_commands", command="incr", status="hit") == 1
    assert value(ours, "memcached_lru_crawler_enabled") == 1
    assert value(ours, "memcached_max_connections") > 0


# A first run builds the exporter (the fixture) within the test's time.
@pytest.mark.timeout(BUILD_TIMEOUT_S + 60)
def test_exporter_families_without_memcached_match_the_recording(exporter_binary, server):
    """Where memcached itself is absent, the recording stands in for it."""
    with server.connect() as conn:
        fill(conn)
    ours = memcached_families(scrape(exporter_binary, server.addr_str))
    assert value(ours, "memcached_up") == 1
    assert sorted(ours) == recorded_families()


def stat_names(conn, group: bytes) -> list[str]:
    conn.send(b"stats " + group + b"\r\n")
    names = []
    while (line := conn.readline()) != b"END\r\n":
        names.append(line.split(b" ")[1].decode())
    return names


def recorded(name: str) -> list[str]:
    lines = (ROOT / "tests" / "differential" / name).read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize("args", [(), ("-o", "no_lru_maintainer")])
def test_stats_tables_keys_match_the_recordings(server_factory, args):
    """`stats settings`, `slabs` and `items` print memcached 1.6.18's keys
    in its order (recorded by tests/differential/record_stats_tables.py in
    the same state: one 5-byte item, read once); recall's own settings
    follow as recall_*."""
    with server_factory(*args).connect() as conn:
        conn.send(b"set k 0 0 5\r\nhello\r\nget k\r\n")
        for want in (b"STORED\r\n", b"VALUE k 0 5\r\n", b"hello\r\n", b"END\r\n"):
            assert conn.readline() == want
        settings = stat_names(conn, b"settings")
        want = recorded("stats_settings_1.6.18.txt")
        assert settings[: len(want)] == want
        assert all(k.startswith("recall_") for k in settings[len(want) :])
        assert stat_names(conn, b"slabs") == recorded("stats_slabs_1.6.18.txt")
        items = "stats_items_no_lru_maintainer_1.6.18.txt" if args else "stats_items_1.6.18.txt"
        assert stat_names(conn, b"items") == recorded(items)


def test_memcached_tool_display_prints_a_row_per_class(server):
    if not MEMCACHED_TOOL.exists() or shutil.which("perl") is None:
        pytest.skip(f"{MEMCACHED_TOOL} not found (Debian's memcached package)")
    with server.connect() as conn:
        fill(conn)
        conn.send(b"stats slabs\r\n")
        classes = set()
        while (line := conn.readline()) != b"END\r\n":
            name = line.split(b" ")[1]
            if b":" in name:
                classes.add(int(name.split(b":")[0]))
    assert classes, "stats slabs reports no class"
    out = subprocess.run(
        ["perl", str(MEMCACHED_TOOL), server.addr_str, "display"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["#", "Item_Size", "Max_age", "Pages", "Count", "Full?", "Evicted", "Evict_Time", "OOM"]
    rows = [line.split() for line in lines[1:]]
    assert sorted(int(r[0]) for r in rows) == sorted(classes)
    # Count is the class's items: every stored item is in a row.
    assert sum(int(r[4]) for r in rows) == 3


def record() -> None:
    """Re-record exporter_families_1.6.18.txt from memcached on PATH:
    .venv/bin/python tests/python/test_memcached_tools.py"""
    from mcserver import ServerProcess, reference_command

    with ServerProcess(reference_command(), name="memcached") as mc:
        with mc.connect() as conn:
            fill(conn)
        exporter = ROOT / "target" / "tools" / f"memcached_exporter-{EXPORTER_VERSION}" / "memcached_exporter"
        names = sorted(memcached_families(scrape(exporter, mc.addr_str)))
    version = subprocess.run([reference_command()[0], "-V"], capture_output=True, text=True).stdout.strip()
    RECORDED_FAMILIES.write_text(
        f"# The metric families memcached_exporter {EXPORTER_VERSION} reports for {version} ({len(names)}),\n"
        "# as prometheus_client's parser names them, after test_memcached_tools.py's fill().\n"
        "# Recorded by running tests/python/test_memcached_tools.py as a script.\n"
        + "".join(n + "\n" for n in names)
    )
    print(f"{RECORDED_FAMILIES}: {len(names)} families")


if __name__ == "__main__":
    record()
