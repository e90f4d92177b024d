"""recall's hit ratios against libCacheSim's on the same trace.

A small Zipf trace is written in libCacheSim's oracleGeneral format and
replayed by both in object-count mode (every object one unit, every request
a GET whose miss inserts): libCacheSim through its Python package
(`libcachesim`, tests/python/requirements.txt), recall through
`recall-sim objects` (LRU and FIFO are recall-sim's reference policies;
SIEVE and S3-FIFO are the store's own code in a real store). Each hit ratio
must agree within 1 percentage point.

The full comparison on larger traces is in docs/benchmarks/hit-ratio.md.
"""

import csv
import os
import random
import struct
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIM = os.environ.get("RECALL_SIM", os.path.join(ROOT, "target", "release", "recall-sim"))

if os.environ.get("RECALL_SKIP_RUST") == "1" and not os.path.exists(SIM):
    pytest.skip("RECALL_SKIP_RUST=1 and no recall-sim binary", allow_module_level=True)

import libcachesim as lcs  # noqa: E402  (after the skip above)

OBJECTS = 5_000
REQUESTS = 60_000
SIZES = [50, 250, 1000]  # 1%, 5%, 20% of the objects

# libCacheSim's S3-FIFO with the paper's settings (its defaults).
LCS = {
    "lru": lambda n: lcs.LRU(n),
    "fifo": lambda n: lcs.FIFO(n),
    "sieve": lambda n: lcs.Sieve(n),
    "s3fifo": lambda n: lcs.S3FIFO(n, small_size_ratio=0.1, ghost_size_ratio=0.9, move_to_main_threshold=2),
}


def write_trace(path, objects=OBJECTS, requests=REQUESTS, alpha=1.0, one_hit=0.2, seed=13):
    """A Zipf(alpha) trace over `objects` ids, with a share `one_hit` of
    requests for fresh ids never requested again (so S3-FIFO's small queue
    has work to do), in libCacheSim's oracleGeneral format."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** alpha for i in range(objects)]
    ids = rng.choices(range(objects), weights=weights, k=requests)
    fresh = objects
    with open(path, "wb") as f:
        for t, i in enumerate(ids):
            if rng.random() < one_hit:
                i, fresh = fresh, fresh + 1
            # clock_time u32, obj_id u64, obj_size u32, next_access_vtime i64
            f.write(struct.pack("<IQIq", t, i + 1, 100, -1))


def lcs_hit_ratio(path, policy, size):
    params = lcs.ReaderInitParam(ignore_obj_size=True)
    reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE, params)
    miss, _byte_miss = LCS[policy](size).process_trace(reader)
    return 1.0 - miss


def compare(trace, sizes, csv_out):
    """(policy, size) -> (recall's hit ratio, libCacheSim's)."""
    subprocess.run(
        [SIM, "objects", "--oracle", trace, "--policies", ",".join(LCS), "--sizes", ",".join(map(str, sizes)),
         "--csv", csv_out],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with open(csv_out, newline="") as f:
        recall = {(r["policy"], int(r["objects"])): float(r["hit_ratio"]) for r in csv.DictReader(f)}
    assert len(recall) == len(LCS) * len(sizes), recall
    return {key: (ours, lcs_hit_ratio(trace, *key)) for key, ours in recall.items()}


def test_recall_agrees_with_libcachesim(tmp_path):
    assert os.path.exists(SIM), f"{SIM}: build it first (cargo build --release -p recall-sim)"
    trace = str(tmp_path / "zipf.oracleGeneral")
    write_trace(trace)
    both = compare(trace, SIZES, str(tmp_path / "recall.csv"))
    bad = {k: v for k, v in both.items() if abs(v[0] - v[1]) > 0.01}
    assert not bad, "hit ratios differ by more than 1 point: " + "; ".join(
        f"{p} at {n} objects: recall {100 * o:.2f}% vs libCacheSim {100 * t:.2f}%" for (p, n), (o, t) in bad.items()
    )
    # The policies must actually differ on this trace, or agreeing proves little.
    at_small = {p: both[(p, SIZES[0])][0] for p in LCS}
    assert max(at_small.values()) - min(at_small.values()) > 0.02, at_small


# The full comparison in docs/benchmarks/hit-ratio.md:
#   .venv/bin/python tests/python/test_libcachesim.py
FULL = [
    # (name, objects, requests, alpha, one-hit share)
    ("Zipf 0.8, 100k objects, 20% one-hit", 100_000, 2_000_000, 0.8, 0.2),
    ("Zipf 0.95, 200k objects (the ETC runs' popularity)", 200_000, 2_000_000, 0.95, 0.0),
    ("Zipf 1.0, 100k objects, 20% one-hit", 100_000, 2_000_000, 1.0, 0.2),
    ("Zipf 1.2, 100k objects, 50% one-hit", 100_000, 2_000_000, 1.2, 0.5),
]
FULL_SHARES = [0.01, 0.02, 0.05, 0.1, 0.2]


def full_comparison(tmp):
    worst = 0.0
    print("| trace | policy | " + " | ".join(f"{100 * s:g}%" for s in FULL_SHARES) + " |")
    print("|---|---|" + "---:|" * len(FULL_SHARES))
    for name, objects, requests, alpha, one_hit in FULL:
        trace = os.path.join(tmp, "full.oracleGeneral")
        write_trace(trace, objects, requests, alpha, one_hit, seed=1)
        sizes = [round(s * objects) for s in FULL_SHARES]
        both = compare(trace, sizes, os.path.join(tmp, "full.csv"))
        for p in LCS:
            cells = []
            for n in sizes:
                ours, theirs = both[(p, n)]
                worst = max(worst, abs(ours - theirs))
                cells.append(f"{100 * ours:.2f} / {100 * theirs:.2f}")
            print(f"| {name} | {p} | " + " | ".join(cells) + " |")
    print(f"\nlargest difference: {100 * worst:.2f} points")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        full_comparison(d)
