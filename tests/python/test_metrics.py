"""recalld's own Prometheus endpoint (--metrics-addr), scraped over HTTP and
parsed with prometheus_client's text-format parser.

The server listens for metrics on 127.0.0.1 port 0 and says where on its
"metrics listening on" line; the test waits for that line (bounded), does
traffic through pymemcache, scrapes again and checks that memcached_exporter's
families are there under its names and that the counters moved as the
traffic says. Bad requests get their 4xx. The Grafana dashboard in
packaging/grafana asks only for families the endpoint has.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mcserver import HOST
from prometheus_client.parser import text_string_to_metric_families
from pymemcache.client.base import Client

METRICS_LINE = re.compile(rb"metrics listening on http://([0-9.]+):(\d+)/metrics")
READY_BUDGET_S = 10

# The families memcached_exporter gives for memcached's general `stats`
# (pkg/exporter/exporter.go), as prometheus_client's parser names them
# (a counter's family without `_total`).
EXPORTER_FAMILIES = {
    "memcached_up": "gauge",
    "memcached_uptime_seconds": "gauge",
    "memcached_time_seconds": "gauge",
    "memcached_version": "gauge",
    "memcached_process_user_cpu_seconds": "counter",
    "memcached_process_system_cpu_seconds": "counter",
    "memcached_read_bytes": "counter",
    "memcached_written_bytes": "counter",
    "memcached_current_connections": "gauge",
    "memcached_max_connections": "gauge",
    "memcached_connections": "counter",
    "memcached_connections_rejected": "counter",
    "memcached_connections_yielded": "counter",
    "memcached_connections_listener_disabled": "counter",
    "memcached_accepting_connections": "gauge",
    "memcached_current_bytes": "gauge",
    "memcached_limit_bytes": "gauge",
    "memcached_commands": "counter",
    "memcached_current_items": "gauge",
    "memcached_items": "counter",
    "memcached_items_evicted": "counter",
    "memcached_items_reclaimed": "counter",
    "memcached_item_too_large": "counter",
    "memcached_item_no_memory": "counter",
}


def metrics_url(server) -> str:
    deadline = time.monotonic() + READY_BUDGET_S
    while True:
        m = METRICS_LINE.search(server.log_bytes())
        if m:
            return f"http://{m.group(1).decode()}:{int(m.group(2))}/metrics"
        assert server.alive(), server.log_bytes().decode(errors="replace")
        assert time.monotonic() < deadline, "no 'metrics listening on' line:\n" + server.log_bytes().decode(errors="replace")
        time.sleep(0.02)


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict, family: str, sample: str | None = None, **labels) -> float:
    """The value of `family`'s sample named `sample` (default: the family's
    own, `_total` for a counter) with these labels."""
    kind = families[family].type
    want = sample or (family + "_total" if kind == "counter" else family)
    for s in families[family].samples:
        if s.name == want and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {want} with {labels}: {families[family].samples}")


@pytest.fixture
def metered(request, server_factory, server_command):
    if "recalld" not in os.path.basename(server_command[0]):
        pytest.skip("--metrics-addr is recalld's own")
    if os.environ.get("RECALL_SASL") == "1":
        pytest.skip("the traffic here is text protocol; -S serves binary only")
    srv = server_factory("--metrics-addr", f"{HOST}:0")
    return srv, metrics_url(srv)


@pytest.mark.counts_requests
def test_families_and_counters_move(metered):
    server, url = metered
    before = scrape(url)
    for name, kind in EXPORTER_FAMILIES.items():
        assert name in before, f"{name} missing; have {sorted(before)}"
        assert before[name].type == kind, (name, before[name].type)
    assert value(before, "memcached_up") == 1
    assert before["recall_request_duration_seconds"].type == "histogram"

    c = Client(server.address, **server.client_kwargs())
    # noreply=False throughout: a reply means the server has counted it.
    c.set("k1", b"v" * 100, noreply=False)
    c.set("k2", b"w", noreply=False)
    for _ in range(5):
        assert c.get("k1") == b"v" * 100
    for _ in range(3):
        assert c.get("missing") is None
    c.delete("k2", noreply=False)
    c.close()

    after = scrape(url)
    moved = lambda name, **l: value(after, name, **l) - value(before, name, **l)  # noqa: E731
    assert moved("memcached_commands", command="get", status="hit") == 5
    assert moved("memcached_commands", command="get", status="miss") == 3
    assert moved("memcached_commands", command="set", status="hit") == 2
    assert moved("memcached_commands", command="delete", status="hit") == 1
    assert value(after, "memcached_current_items") == 1
    assert moved("memcached_items") == 2
    assert moved("memcached_read_bytes") > 0
    assert moved("memcached_written_bytes") > 0
    # The stats table and the scrape agree: the same source.
    stats = dict(Client(server.address, **server.client_kwargs()).stats())
    assert value(after, "memcached_current_bytes") == int(stats[b"bytes"])
    assert value(after, "memcached_limit_bytes") == int(stats[b"limit_maxbytes"])
    # Eleven requests ran, each a turn of its own (pymemcache waits for
    # each reply), so the histogram counted at least that many.
    h = "recall_request_duration_seconds"
    turns = lambda f: value(f, h, h + "_bucket", le="+Inf")  # noqa: E731
    assert turns(after) - turns(before) >= 11
    assert value(after, h, h + "_count") == turns(after)
    assert value(after, h, h + "_sum") > 0


def raw_http(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_bad_requests_get_4xx(metered):
    _server, url = metered
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=5)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=5)
    assert e.value.code == 405
    assert raw_http(url, b"stats\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    # Exactly the server's 8 KiB head limit with no end in sight: it reads
    # it all (so its close is not a reset) and refuses it.
    start = b"GET /metrics HTTP/1.1\r\nX: "
    huge = start + b"a" * (8192 - len(start))
    assert raw_http(url, huge).startswith(b"HTTP/1.1 431 ")
    head = raw_http(url, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")
    # Still serving after all that.
    assert value(scrape(url), "memcached_up") == 1


DASHBOARD = Path(__file__).resolve().parents[2] / "packaging" / "grafana" / "recall-dashboard.json"
# Cluster mode's families need a cluster (tests/python/lincluster.py starts
# one for other suites); this single server cannot show them.
NEEDS_CLUSTER = "recall_cluster_"


def dashboard_metrics() -> set[str]:
    exprs = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                exprs.append(node["expr"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(DASHBOARD.read_text()))
    names = set()
    for e in exprs:
        names.update(re.findall(r"\b((?:memcached|recall)_[a-z_]+)", e))
    return names


def test_the_dashboard_asks_only_for_families_recalld_exports(server_factory, server_command, tmp_path):
    if "recalld" not in os.path.basename(server_command[0]):
        pytest.skip("--metrics-addr is recalld's own")
    if os.environ.get("RECALL_CLUSTER"):
        pytest.skip("a cluster node's data directory belongs to the cluster harness")
    # Durability on and the prioritized policy, so their families exist.
    srv = server_factory("--metrics-addr", f"{HOST}:0", "--data-dir", str(tmp_path), "-o", "policy=prioritized")
    have = set()
    for f in scrape(metrics_url(srv)).values():
        have.update(s.name for s in f.samples)
    wanted = dashboard_metrics()
    assert len(wanted) > 20, wanted
    missing = sorted(n for n in wanted if n not in have and not n.startswith(NEEDS_CLUSTER))
    assert not missing, f"the dashboard asks for families /metrics does not have: {missing}"
