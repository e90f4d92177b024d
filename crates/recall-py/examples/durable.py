"""recall.DurableClient from Python: writes that survive kill -9 of recalld.

Start a server that keeps snapshots, then run this twice, killing the
server with kill -9 in between (and starting it again) after the first run:

    recalld --data-dir /tmp/recall-data -p 11211 &
    python crates/recall-py/examples/durable.py write
    kill -9 %1; recalld --data-dir /tmp/recall-data -p 11211 &
    python crates/recall-py/examples/durable.py read

`write` keeps its backup in a spill file, so the second process replays
what the first one wrote and the server lost, then reads it back.
"""

import sys

import recall

SPILL = "/tmp/recall-example.spill"

db = recall.DurableClient(("127.0.0.1", 11211), spill_file=SPILL, default_noreply=False)
if sys.argv[1:] == ["write"]:
    for i in range(100):
        db.set(f"user:{i}", f"profile {i}".encode())
    print("100 writes acknowledged; backup:", db.backup_status())
else:
    db.poll_now()  # replay to a restarted server now rather than at the next poll
    found = sum(db.get(f"user:{i}") == f"profile {i}".encode() for i in range(100))
    print(f"{found} of 100 writes read back")
    db.close()  # empty the backup (wait for a snapshot) and say goodbye
