"""Test worker: the last rank fails in the given way; every other rank waits to be killed.

fault.py MODE MARKER_DIR    MODE: exit7 | sigkill | segv | orphan | none

The failing rank writes MARKER_DIR/failing (the moment it fails) first. `orphan` forks a
child that ignores SIGTERM and sleeps, then the parent exits 1. Every process here carries
MARKER_DIR in its command line, so the test can find leftovers in the nodes' process tables.
"""
import ctypes
import os
import signal
import sys
import time

mode, marker = sys.argv[1], sys.argv[2]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
print(f"rank {rank} of {world} up on pid {os.getpid()}", flush=True)

if rank != world - 1 or mode == "none":
    time.sleep(300)
    sys.exit(0)

time.sleep(2)  # let every rank start
if mode == "orphan":
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(300)
        os._exit(0)
    time.sleep(0.3)

with open(os.path.join(marker, "failing.tmp"), "w") as f:
    f.write(str(time.time()))
os.rename(os.path.join(marker, "failing.tmp"), os.path.join(marker, "failing"))
print(f"rank {rank} failing: {mode}", file=sys.stderr, flush=True)

if mode == "exit7":
    sys.exit(7)
if mode == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "segv":
    ctypes.string_at(0)
if mode == "orphan":
    sys.exit(1)
sys.exit(99)
