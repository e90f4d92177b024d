"""pymemcache's own integration suite (shipped inside the pymemcache package,
`pymemcache/test/test_integration.py`) against the server under test.

It runs in a child pytest with pymemcache's conftest, pointed at a freshly
started server with its `--server`/`--port` options. Its `test_misc` calls
`stats cachedump 1 1` and `cache_memlimit 50`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pymemcache.test


def test_pymemcache_integration_suite(server):
    suite = os.path.dirname(pymemcache.test.__file__)
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
            "--rootdir", suite, os.path.join(suite, "test_integration.py"),
            "--server", "127.0.0.1", "--port", str(server.port),
        ],
        capture_output=True, text=True, timeout=300, cwd=suite,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    misc = [line for line in out.splitlines() if "::test_misc[" in line]
    assert misc and all("PASSED" in line for line in misc), out[-5000:]
