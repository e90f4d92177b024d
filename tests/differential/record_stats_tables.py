#!/usr/bin/env python3
"""Record the keys memcached prints for `stats settings`, `stats slabs` and
`stats items` into stats_{settings,slabs,items}_<version>.txt here.

    tests/differential/record_stats_tables.py            # memcached on PATH (or MEMCACHED_BIN)

The server holds one 5-byte item (so exactly slab class 1 is in use and
reported), and that item has been read once. `stats items` is recorded a
second time under `-o no_lru_maintainer`, which leaves out the segmented
LRU's keys. recall-engine's and recall-server's tests and
tests/python/test_exporter.py compare recalld's keys against these files.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

from mcserver import ServerProcess, reference_command  # noqa: E402


def stat_keys(conn, group: str) -> list[str]:
    conn.send(f"stats {group}\r\n".encode())
    keys = []
    while (line := conn.readline()) != b"END\r\n":
        assert line.startswith(b"STAT "), line
        keys.append(line.split(b" ")[1].decode())
    return keys


def record(cmd: list[str], extra: list[str]) -> dict[str, list[str]]:
    with ServerProcess(cmd, extra, name="memcached") as server, server.connect() as conn:
        conn.send(b"set k 0 0 5\r\nhello\r\nget k\r\n")
        assert conn.readline() == b"STORED\r\n"
        assert conn.readline().startswith(b"VALUE k")
        conn.readline(), conn.readline()
        return {g: stat_keys(conn, g) for g in ("settings", "slabs", "items")}


def main() -> int:
    cmd = reference_command()
    if cmd is None:
        print("memcached not found (apt-get install memcached, or set MEMCACHED_BIN)", file=sys.stderr)
        return 2
    version = subprocess.run([cmd[0], "-V"], capture_output=True, text=True, check=True).stdout.split()[1]
    how = f"{Path(cmd[0]).name} {version}: memcached -p PORT -l 127.0.0.1 -U 0"
    setup = "one 5-byte item stored and read once"
    default = record(cmd, [])
    no_maintainer = record(cmd, ["-o", "no_lru_maintainer"])
    files = {
        "settings": (default["settings"], f"{how}, then stats settings"),
        "slabs": (default["slabs"], f"{how}, {setup}, then stats slabs"),
        "items": (default["items"], f"{how}, {setup}, then stats items"),
        "items_no_lru_maintainer": (
            no_maintainer["items"],
            f"{how} -o no_lru_maintainer, {setup}, then stats items",
        ),
    }
    for name, (keys, what) in files.items():
        path = HERE / f"stats_{name}_{version}.txt"
        header = (
            f"# The keys memcached prints for `stats {name.split('_')[0]}`, in its order ({len(keys)} keys).\n"
            f"# Recorded by record_stats_tables.py from {what}.\n"
            "# recalld prints exactly these keys in this order under the same options"
            + (", then its own (recall_*).\n" if name == "settings" else ".\n")
        )
        path.write_text(header + "".join(k + "\n" for k in keys))
        print(f"{path.name}: {len(keys)} keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
