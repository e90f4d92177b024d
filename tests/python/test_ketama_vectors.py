"""Ketama placement: pylibmc (libmemcached) is the reference.

recall-client claims to put every key on the same server as pylibmc with
{"ketama_weighted": True}: MD5, 160 points per server (40 hashes x 4),
weights, libketama's rules.  ({"ketama": True} in pylibmc 1.6.3, i.e.
libmemcached 1.0.16, keeps the default one-at-a-time hash with 100 points
per server, which is why it is not used.)  Two things check that claim:

1. The live cross-check (test_live_pylibmc_matches_recall_ketama_place):
   start three real servers on ephemeral ports of 127.0.0.1, store every
   key through a pylibmc client configured with all of them, then read each
   server alone to learn which keys it holds -- that is where libmemcached
   really put them.  The same server list goes to the hidden CLI command
   `recall ketama-place --server HOST:PORT:WEIGHT...`, which prints the
   server recall-client's ketama module picks for each key; the two must
   agree key for key.  Also with pylibmc's "remove_failed" after one server
   is killed (`recall ketama-place --remove-failed HOST:PORT`): libmemcached
   then rebuilds the continuum over the live servers (their weights, their
   count), which is recall-client's DeadServerPolicy::Redistribute.

2. The recorded vectors, crates/recall-client/tests/data/ketama_vectors.json,
   which crates/recall-client/tests/ketama.rs (and crates/recall-cli/tests/cli.rs, through `recall
   ketama-place`) check without any server.  Their server names are fixed
   (127.0.0.2-4 on ports 11311-11313, and one set on 11211 for
   libmemcached's rule of leaving ":11211" out of the hashed name), because
   ketama hashes the names.  Nothing listens there: pylibmc's Client.hash(key)
   returns libmemcached's memcached_generate_hash(), which for the ketama
   distribution is the *index of the server* the key goes to, computed
   without connecting.  test_vector_file_matches_pylibmc compares the file
   with it, and the live test asserts that hash() agrees with where the keys
   were really stored, so the oracle is checked against the ground truth.
   For the remove_failed set, hash() is taken over the live servers only
   (mapped back to their index in the full list): that is what
   libmemcached's update_continuum builds once a server is ejected, and the
   live test checks that equivalence too.

No test here binds or connects to a fixed port: servers get ephemeral ports
from mcserver.py (probed for readiness, never slept for), and the fixed
names of the vector file are only ever hashed.

The servers are real memcached if it is installed (the reference: placement
is decided by the client, so the server only has to store keys correctly),
else the server under test (RECALL_SERVER, default target/release/recalld).
The `recall` binary is $RECALL_CLI, else the newest of target/{debug,release}/recall
(under $CARGO_TARGET_DIR if set, and under the repo root) that knows
`ketama-place`, else it is built with cargo.  Everything is skipped only when
pylibmc is not importable.

The other continuum, pylibmc's most common setting {"ketama": True}
(libmemcached's unweighted ketama: 100 points per server, one per hash,
with the default one-at-a-time hash), and the same with {"hash": "md5"},
are `recall --distribution ketama|ketama-md5` and recall-client's
Distribution::Ketama / KetamaMd5.  They are checked the same two ways:
test_live_pylibmc_unweighted_ketama_matches_recall stores the 1,000+ keys
through pylibmc on three servers and compares key for key, and
crates/recall-client/tests/data/ketama_unweighted_vectors.json (checked by
crates/recall-client/tests/ketama.rs) records pylibmc's hash() for fixed
names.

Regenerate the vector files (after checking why they changed!) with:

    python tests/python/test_ketama_vectors.py --write
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcserver import (  # noqa: E402
    ServerProcess,
    ServerStartError,
    reference_command,
    server_command_from_env,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
VECTORS = REPO_ROOT / "crates" / "recall-client" / "tests" / "data" / "ketama_vectors.json"
UNWEIGHTED_VECTORS = VECTORS.with_name("ketama_unweighted_vectors.json")
BEHAVIORS = {"ketama_weighted": True}
# recall's --distribution name -> the pylibmc behaviors it must match.
UNWEIGHTED = {
    "ketama": {"ketama": True},
    "ketama-md5": {"ketama": True, "hash": "md5"},
}


def keys_for_vectors() -> list[str]:
    """A deterministic mix of key shapes: short, structured, long, odd bytes."""
    keys = [f"key{i}" for i in range(400)]
    keys += [f"user:{i}:profile" for i in range(300)]
    keys += [f"session-{i * 7919:08x}" for i in range(200)]
    keys += [("long-" + str(i)) * (1 + i % 40) for i in range(80)]
    keys += ["a", "b", "z", "0", "~", "-", "key", "KEY", "\u00e9t\u00e9", "\u65e5\u672c"]
    keys += [f"k{i}/{'x' * (i % 17)}" for i in range(10)]
    return [k[:250] for k in keys]


# The recorded sets.  These names are only hashed, never bound or dialled.
SETS = [
    {
        "name": "three servers, equal weights",
        "servers": [
            {"host": "127.0.0.2", "port": 11311, "weight": 1},
            {"host": "127.0.0.3", "port": 11312, "weight": 1},
            {"host": "127.0.0.4", "port": 11313, "weight": 1},
        ],
    },
    {
        "name": "three servers, weights 1:2:3",
        "servers": [
            {"host": "127.0.0.2", "port": 11311, "weight": 1},
            {"host": "127.0.0.3", "port": 11312, "weight": 2},
            {"host": "127.0.0.4", "port": 11313, "weight": 3},
        ],
    },
    {
        # libmemcached's remove_failed (pylibmc behavior "remove_failed"):
        # the continuum is rebuilt over the live servers, with their weights
        # and count; recall-client's DeadServerPolicy::Redistribute.
        "name": "weights 1:2:3, second server dead, remove_failed",
        "servers": [
            {"host": "127.0.0.2", "port": 11311, "weight": 1},
            {"host": "127.0.0.3", "port": 11312, "weight": 2},
            {"host": "127.0.0.4", "port": 11313, "weight": 3},
        ],
        "dead": [1],
    },
    {
        "name": "three servers on the default port (names without :11211)",
        "servers": [
            {"host": "127.0.0.2", "port": 11211, "weight": 1},
            {"host": "127.0.0.3", "port": 11211, "weight": 1},
            {"host": "127.0.0.4", "port": 11211, "weight": 1},
        ],
    },
]


# -- libmemcached's placement without servers (pylibmc's Client.hash) ----------


def _spec(server: dict) -> str:
    return f"{server['host']}:{server['port']}:{server['weight']}"


def hash_placement(
    pylibmc, servers: list[dict], keys: list[str], dead: list[int] = (), behaviors: dict = BEHAVIORS
) -> dict[str, int]:
    """key -> server index, as libmemcached computes it (nothing is contacted).

    With `dead`: the continuum over the other servers, which is what
    remove_failed rebuilds once those are ejected (libmemcached's
    update_continuum skips ejected servers and counts only the live ones'
    weights and number).  Indices refer to the full list.
    """
    live = [i for i in range(len(servers)) if i not in dead]
    mc = pylibmc.Client([_spec(servers[i]) for i in live], behaviors=behaviors)
    placement = {k: live[mc.hash(k)] for k in keys}
    # Grouped by server, then in key order (the file's layout).
    order = {k: i for i, k in enumerate(keys)}
    return {k: placement[k] for k in sorted(keys, key=lambda k: (placement[k], order[k]))}


def generate() -> dict:
    import pylibmc

    keys = keys_for_vectors()
    return {
        "about": "Which server pylibmc (libmemcached) puts each key on. Generated by "
        "tests/python/test_ketama_vectors.py --write; checked by crates/recall-client/tests/ketama.rs.",
        "generator": f"pylibmc {pylibmc.__version__}, libmemcached {pylibmc.libmemcached_version}",
        "behaviors": BEHAVIORS,
        "sets": [{**vs, "placement": hash_placement(pylibmc, vs["servers"], keys, vs.get("dead", []))} for vs in SETS],
    }


# The unweighted continuum ignores weights (libmemcached switches to the
# weighted one when a server has a weight above 1), so its sets are the
# equal-weight ones, and one with remove_failed.
UNWEIGHTED_SETS = [
    SETS[0],
    SETS[3],
    {
        "name": "three servers, equal weights, second server dead, remove_failed",
        "servers": SETS[0]["servers"],
        "dead": [1],
    },
]


def generate_unweighted() -> dict:
    import pylibmc

    keys = keys_for_vectors()
    return {
        "about": "Which server pylibmc (libmemcached) puts each key on with its unweighted ketama. Generated by "
        "tests/python/test_ketama_vectors.py --write; checked by crates/recall-client/tests/ketama.rs.",
        "generator": f"pylibmc {pylibmc.__version__}, libmemcached {pylibmc.libmemcached_version}",
        "distributions": {
            name: {
                "behaviors": behaviors,
                "sets": [
                    {**vs, "placement": hash_placement(pylibmc, vs["servers"], keys, vs.get("dead", []), behaviors)}
                    for vs in UNWEIGHTED_SETS
                ],
            }
            for name, behaviors in UNWEIGHTED.items()
        },
    }


# -- fixtures ------------------------------------------------------------------


@pytest.fixture(scope="session")
def pylibmc():
    # ImportError too, not just a missing module: a pylibmc whose
    # libmemcached cannot be loaded is just as unimportable.
    return pytest.importorskip("pylibmc", exc_type=ImportError)


def _cargo() -> str | None:
    found = shutil.which("cargo")
    if found:
        return found
    home = Path.home() / ".cargo" / "bin" / "cargo"
    return str(home) if home.exists() else None


def _knows_ketama_place(binary: Path) -> bool:
    try:
        r = subprocess.run([str(binary), "ketama-place", "--help"], capture_output=True, timeout=30)
    except OSError:
        return False
    return r.returncode == 0


def _build_recall_cli() -> Path:
    cargo = _cargo()
    if cargo is None:
        pytest.fail("no `recall` binary and no cargo to build one (set RECALL_CLI)", pytrace=False)
    r = subprocess.run(
        [cargo, "build", "-p", "recall-cli", "--bin", "recall", "--message-format=json-render-diagnostics"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=900,
    )
    if r.returncode != 0:
        pytest.fail(f"cargo build -p recall-cli --bin recall failed:\n{r.stderr[-3000:]}", pytrace=False)
    for line in r.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("target", {}).get("name") == "recall":
            if msg.get("executable"):
                return Path(msg["executable"])
    pytest.fail("cargo built recall-cli but reported no `recall` executable", pytrace=False)


@pytest.fixture(scope="session")
def recall_cli() -> Path:
    """The `recall` binary: $RECALL_CLI, else a built one, else build it."""
    explicit = os.environ.get("RECALL_CLI", "").strip()
    if explicit:
        path = Path(explicit)
        if not path.is_absolute() and not path.exists():
            path = REPO_ROOT / path
        if not _knows_ketama_place(path):
            pytest.fail(f"RECALL_CLI={explicit}: not a `recall` that runs `ketama-place`", pytrace=False)
        return path
    roots = [REPO_ROOT / "target"]
    if os.environ.get("CARGO_TARGET_DIR"):
        roots.insert(0, Path(os.environ["CARGO_TARGET_DIR"]))
    built = [root / profile / "recall" for root in roots for profile in ("debug", "release")]
    built = sorted((p for p in built if p.is_file()), key=lambda p: p.stat().st_mtime, reverse=True)
    # A binary older than the ketama-place command is not an answer; build.
    for candidate in built:
        if _knows_ketama_place(candidate):
            return candidate
    return _build_recall_cli()


def _store_command() -> list[str]:
    """memcached if installed (the reference), else the server under test."""
    return reference_command() or server_command_from_env()


@pytest.fixture
def three_servers(pylibmc):
    started: list[ServerProcess] = []
    command = _store_command()
    try:
        for i in range(3):
            srv = ServerProcess(command, name=f"server {i}")
            started.append(srv)
            srv.start()
    except ServerStartError as e:
        for srv in started:
            srv.stop()
        pytest.fail(str(e), pytrace=False)
    yield started
    for srv in started:
        srv.stop()


# -- helpers -------------------------------------------------------------------


def recall_ketama_place(
    cli: Path, specs: list[str], keys: list[str], removed: list[str] = (), distribution: str = "ketama-weighted"
) -> dict[str, str]:
    """key -> "host:port" from `recall ketama-place`."""
    argv = [str(cli), "--distribution", distribution, "ketama-place"]
    for s in specs:
        argv += ["--server", s]
    for r in removed:
        argv += ["--remove-failed", r]
    r = subprocess.run(argv, input="".join(k + "\n" for k in keys).encode(), capture_output=True, timeout=60)
    assert r.returncode == 0, f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode(errors='replace')}"
    out = {}
    for line in r.stdout.decode().splitlines():
        key, server = line.split("\t")
        out[key] = server
    assert list(out) == keys, "ketama-place prints every key once, in input order"
    return out


def pylibmc_store_and_observe(
    pylibmc,
    specs: list[str],
    live_addrs: list[str],
    keys: list[str],
    remove_failed: bool,
    base_behaviors: dict = BEHAVIORS,
):
    """Store `keys` through one pylibmc client over `specs`; return
    (key -> "host:port" of the server that holds it, that client)."""
    behaviors = dict(base_behaviors)
    if remove_failed:
        # Eject a server on its first failure and keep it out for the test.
        behaviors.update({"remove_failed": 1, "retry_timeout": 600})
    mc = pylibmc.Client(specs, behaviors=behaviors)
    if remove_failed:
        # Hitting the dead server is what ejects it.  Keys stored by this
        # pass may sit on a server the rebuilt continuum no longer picks,
        # so the real pass below stores a different value and only that
        # value counts when reading back.
        failures = 0
        for k in keys:
            try:
                mc.set(k, b"0")
            except pylibmc.Error:
                failures += 1
        assert failures, "no operation failed: the killed server's port answered"
    for k in keys:
        assert mc.set(k, b"1"), f"pylibmc could not store {k!r}"
    placement: dict[str, str] = {}
    for addr in live_addrs:
        one = pylibmc.Client([addr])
        for k, v in one.get_multi(keys).items():
            if v != b"1":
                continue
            assert k not in placement, f"{k!r} found on {placement[k]} and {addr}"
            placement[k] = addr
    missing = [k for k in keys if k not in placement]
    assert not missing, f"keys on no server: {missing[:5]}"
    return placement, mc


# -- the tests -----------------------------------------------------------------

LIVE_CASES = [
    pytest.param([1, 1, 1], None, id="weights 1:1:1"),
    pytest.param([1, 2, 3], None, id="weights 1:2:3"),
    # remove_failed: the live servers' points are recomputed from their own
    # weights and count.  Killing the first or the third server changes
    # them (live 2:3 gets 128+192 points instead of 160+240; live 1:2 gets
    # 104+212 instead of 80+160); killing the second, as in the vector
    # file, happens to leave them as they were.
    pytest.param([1, 2, 3], 0, id="weights 1:2:3, first server killed, remove_failed"),
    pytest.param([1, 2, 3], 1, id="weights 1:2:3, second server killed, remove_failed"),
    pytest.param([1, 2, 3], 2, id="weights 1:2:3, third server killed, remove_failed"),
    pytest.param(None, None, id="no weights in the specs"),
]


@pytest.mark.parametrize(("weights", "dead"), LIVE_CASES)
def test_live_pylibmc_matches_recall_ketama_place(pylibmc, recall_cli, three_servers, weights, dead):
    keys = keys_for_vectors()
    addrs = [srv.addr_str for srv in three_servers]
    specs = addrs if weights is None else [f"{a}:{w}" for a, w in zip(addrs, weights)]
    if dead is not None:
        three_servers[dead].stop()  # SIGKILL and wait: its port now refuses
    live_addrs = [a for i, a in enumerate(addrs) if i != dead]

    observed, mc = pylibmc_store_and_observe(pylibmc, specs, live_addrs, keys, remove_failed=dead is not None)
    removed = [] if dead is None else [addrs[dead]]
    predicted = recall_ketama_place(recall_cli, specs, keys, removed)

    # Each live server holds a share; the dead one none.
    assert set(observed.values()) == set(live_addrs)
    moved = [k for k in keys if predicted[k] != observed[k]]
    assert not moved, (
        f"{len(moved)} of {len(keys)} keys placed differently by recall ketama-place than by pylibmc, "
        f"e.g. {[(k, predicted[k], observed[k]) for k in moved[:5]]}"
    )

    # The server-free oracle used for the vector file (pylibmc's hash(),
    # over the live servers for remove_failed) agrees with the ground truth,
    # and so does the client that did the storing (after ejecting).
    servers = [
        {"host": "127.0.0.1", "port": srv.port, "weight": w} for srv, w in zip(three_servers, weights or [1, 1, 1])
    ]
    oracle = hash_placement(pylibmc, servers, keys, [] if dead is None else [dead])
    assert [addrs[oracle[k]] for k in keys] == [observed[k] for k in keys], "hash() disagrees with the servers"
    assert [addrs[mc.hash(k)] for k in keys] == [observed[k] for k in keys], "the storing client's hash()"


@pytest.mark.parametrize("dead", [None, 1], ids=["all alive", "second server killed, remove_failed"])
@pytest.mark.parametrize("distribution", list(UNWEIGHTED))
def test_live_pylibmc_unweighted_ketama_matches_recall(pylibmc, recall_cli, three_servers, distribution, dead):
    """pylibmc's {"ketama": True} (and with MD5) against recall
    --distribution ketama (ketama-md5), key for key, on three servers."""
    behaviors = UNWEIGHTED[distribution]
    keys = keys_for_vectors()
    assert len(keys) >= 500
    addrs = [srv.addr_str for srv in three_servers]
    if dead is not None:
        three_servers[dead].stop()
    live_addrs = [a for i, a in enumerate(addrs) if i != dead]
    observed, mc = pylibmc_store_and_observe(
        pylibmc, addrs, live_addrs, keys, remove_failed=dead is not None, base_behaviors=behaviors
    )
    removed = [] if dead is None else [addrs[dead]]
    predicted = recall_ketama_place(recall_cli, addrs, keys, removed, distribution)
    assert set(observed.values()) == set(live_addrs)
    moved = [k for k in keys if predicted[k] != observed[k]]
    assert not moved, (
        f"{distribution}: {len(moved)} of {len(keys)} keys placed differently by recall than by pylibmc {behaviors}, "
        f"e.g. {[(k, predicted[k], observed[k]) for k in moved[:5]]}"
    )
    # The weighted continuum would not do: the test tells the two apart.
    weighted = recall_ketama_place(recall_cli, addrs, keys, removed)
    assert sum(weighted[k] != observed[k] for k in keys) > len(keys) // 10
    servers = [{"host": "127.0.0.1", "port": srv.port, "weight": 1} for srv in three_servers]
    oracle = hash_placement(pylibmc, servers, keys, [] if dead is None else [dead], behaviors)
    assert [addrs[oracle[k]] for k in keys] == [observed[k] for k in keys], "hash() disagrees with the servers"


@pytest.mark.parametrize("distribution", list(UNWEIGHTED))
def test_unweighted_vector_file_matches_pylibmc(pylibmc, distribution):
    recorded = json.loads(UNWEIGHTED_VECTORS.read_text(encoding="utf-8"))["distributions"][distribution]
    assert recorded["behaviors"] == UNWEIGHTED[distribution]
    for vs, want in zip(recorded["sets"], UNWEIGHTED_SETS):
        assert (vs["servers"], vs.get("dead")) == (want["servers"], want.get("dead")), "regenerate"
        keys = list(vs["placement"])
        assert set(keys) == set(keys_for_vectors())
        now = hash_placement(pylibmc, vs["servers"], keys, vs.get("dead", []), UNWEIGHTED[distribution])
        diff = [k for k in keys if now[k] != vs["placement"][k]]
        assert not diff, f"{distribution}, {vs['name']}: {len(diff)} keys moved, e.g. {diff[:5]}"


def _load() -> dict:
    return json.loads(VECTORS.read_text(encoding="utf-8"))


@pytest.mark.parametrize("index", range(len(SETS)), ids=[s["name"] for s in SETS])
def test_vector_file_matches_pylibmc(pylibmc, index):
    """The committed file is libmemcached's placement for its (fixed, only
    hashed) server names; see the module docstring."""
    recorded = _load()["sets"][index]
    assert (recorded["servers"], recorded.get("dead")) == (
        SETS[index]["servers"],
        SETS[index].get("dead"),
    ), "SETS and the file disagree: regenerate"
    keys = list(recorded["placement"])
    now = hash_placement(pylibmc, recorded["servers"], keys, recorded.get("dead", []))
    diff = [k for k in keys if now[k] != recorded["placement"][k]]
    assert not diff, f"{len(diff)} keys moved, e.g. {diff[:5]}"


def test_vector_file_is_complete():
    data = _load()
    assert data["behaviors"] == BEHAVIORS
    assert [(s["servers"], s.get("dead")) for s in data["sets"]] == [(s["servers"], s.get("dead")) for s in SETS]
    for s in data["sets"]:
        assert set(s["placement"]) == set(keys_for_vectors())
        # Every live server gets a share of the keys, a dead one none.
        live = set(range(len(s["servers"]))) - set(s.get("dead", []))
        assert set(s["placement"].values()) == live


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {sys.argv[0]} --write   (regenerates {VECTORS})")
    VECTORS.parent.mkdir(parents=True, exist_ok=True)
    VECTORS.write_text(json.dumps(generate(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {VECTORS}")
    UNWEIGHTED_VECTORS.write_text(json.dumps(generate_unweighted(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {UNWEIGHTED_VECTORS}")
