"""pylibmc's and python-binary-memcached's own test suites against recalld.

Neither ships its tests in its wheel, so the source distribution of the
version installed (pinned in requirements.txt) is fetched with pip, once,
into the virtualenv (`<venv>/own-suites/`, or $OWN_SUITES_CACHE). Their tests expect memcached at
fixed places (127.0.0.1:11211, port 5000, /tmp/memcached.sock), so each
suite runs in a child pytest inside a network and mount namespace of its
own (`unshare -n -m`, a private /tmp into which whatever the child needs
from the real /tmp is bound back), where own_suites/suite_conftest.py
starts recalld at those places. Nothing outside the namespace is touched.

What is left out, and why, is listed next to each suite below.
meta-memcache's own suite is not run: it tests the client against mocked
sockets only (test_meta_memcache.py drives it against the server instead).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from mcserver import server_command_from_env

HERE = Path(__file__).resolve().parent
SUITE_TIMEOUT_S = 600


def sdist(dist: str) -> Path:
    """The unpacked source distribution of the installed version of `dist`."""
    version = importlib.metadata.version(dist)
    cache = Path(os.environ.get("OWN_SUITES_CACHE") or Path(sys.prefix) / "own-suites")
    cache.mkdir(exist_ok=True)
    stem = f"{dist.replace('-', '_')}-{version}"
    unpacked = [p for p in cache.iterdir() if p.is_dir() and p.name.lower() in (stem.lower(), f"{dist}-{version}")]
    if unpacked:
        return unpacked[0]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         f"{dist}=={version}", "-d", str(cache)],
        check=True, timeout=300,
    )
    archive = next(p for p in cache.iterdir() if p.name.lower().startswith(stem.lower()) and p.name.endswith(".tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    return next(p for p in cache.iterdir() if p.is_dir() and p.name.lower().startswith(stem.lower()))


def run_in_namespace(root: Path, conftest_dir: Path, args: list[str], logs: Path) -> subprocess.CompletedProcess:
    """pytest `args` in `root`, in a fresh network and mount namespace,
    with recalld started by suite_conftest.py (copied to `conftest_dir`)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("needs unshare (util-linux) and ip (iproute2) to give the suite its own localhost")
    shutil.copy(HERE / "own_suites" / "suite_conftest.py", conftest_dir / "conftest.py")
    server = server_command_from_env()
    env = {
        **os.environ,
        "RECALL_SERVER": " ".join(server),
        "MEMCACHED_HOST": "127.0.0.1",
        "MEMCACHED_PORT": "11211",
        "OWN_SUITE_LOG_DIR": str(logs),
    }
    # The private /tmp hides the real one, so what the child needs from it
    # (a checkout, its virtualenv, the server binary, when they live under
    # /tmp) is bound back in: the real /tmp is first bound at /mnt (a tmpfs
    # in this namespace only), then each needed top directory is bound from
    # there into the new /tmp.
    keep = sorted({top_under_tmp(p) for p in (HERE, Path(sys.prefix), Path(server[0]), root, logs)} - {None})
    shell = (
        'ip link set lo up && mount -t tmpfs tmpfs /mnt && mkdir /mnt/tmp && mount --bind /tmp /mnt/tmp'
        ' && mount -t tmpfs tmpfs /tmp'
        ' && for d in $KEEP; do mkdir -p "/tmp/$d" && mount --bind "/mnt/tmp/$d" "/tmp/$d" || exit 1; done'
        ' && exec "$@"'
    )
    env["KEEP"] = " ".join(keep)
    cmd = ["unshare", "-n", "-m", "--", "sh", "-c", shell, "sh",
           sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", "--rootdir", str(root), *args]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)


def top_under_tmp(path: Path) -> str | None:
    """The name of the directory directly under /tmp that holds `path`, if
    `path` is under /tmp."""
    try:
        parts = path.resolve().relative_to("/tmp").parts
    except ValueError:
        return None
    return parts[0] if parts else None


def assert_passed(proc: subprocess.CompletedProcess, logs: Path) -> None:
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        for log in sorted(logs.glob("recalld-*.log")):
            out += f"\n--- {log.name}\n{log.read_text(errors='replace')[-2000:]}"
    assert proc.returncode == 0, out[-8000:]
    # Every collected test ran and passed: a skip would hide one.
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\b\d+ passed\b", summary) and not re.search(r"failed|error|skipped", summary), out[-8000:]


def log_dir(root: Path) -> Path:
    """Where the servers' output goes: next to the suite, since the
    namespace's /tmp is its own."""
    logs = root.parent / f"{root.name}-logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir()
    return logs


@pytest.mark.timeout(SUITE_TIMEOUT_S)
def test_pylibmc_own_suite():
    root = sdist("pylibmc")
    logs = log_dir(root)
    # Left out: test_invalid_flags_returned_2 compares the interpreter-wide
    # reference count of the interned string "key" before and after a
    # client-side serialization error; any other object of the process
    # that lets go of "key" in between moves it by one (seen once in CI,
    # passing on reruns). It tests pylibmc's C extension, not the server.
    deselect = "--deselect=tests/test_serialization.py::SerializationTests::test_invalid_flags_returned_2"
    proc = run_in_namespace(root, root, ["tests", deselect], logs)
    assert_passed(proc, logs)


@pytest.mark.timeout(SUITE_TIMEOUT_S)
def test_bmemcached_own_suite():
    root = sdist("python-binary-memcached")
    logs = log_dir(root)
    # Left out: test_tls.py needs `trustme` to make its certificates (not
    # in requirements.txt).
    proc = run_in_namespace(root, root / "test", ["test", "--ignore=test/test_tls.py"], logs)
    assert_passed(proc, logs)
