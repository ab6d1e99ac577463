"""Test worker that needs nothing but the standard library (no torch).

env_dump.py OUT_DIR [hang]

Writes OUT_DIR/worker-<RANK>.json with its host, pid and whole environment, renamed into
place so a reader never sees half of it, and prints one line. With `hang` it then sleeps
without another line, so herd's hang watchdog takes it for hung and dumps its stack.
"""
import json
import os
import socket
import sys
import time

out_dir = sys.argv[1]
rank = os.environ["RANK"]
record = {"host": socket.gethostname(), "pid": os.getpid(), "env": dict(os.environ)}
path = os.path.join(out_dir, f"worker-{rank}.json")
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.rename(path + ".tmp", path)
print(f"rank={rank} wrote {path}", flush=True)
if sys.argv[2:] == ["hang"]:
    while True:
        time.sleep(60)
