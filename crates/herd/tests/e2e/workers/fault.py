"""Test worker: the last rank fails in the given way; every other rank waits to be killed.

fault.py MODE MARKER_DIR    MODE: exit7 | sigkill | segv | orphan | none

Every rank writes MARKER_DIR/up-RANK ("HOST PID") once it runs. The failing rank then waits
for MARKER_DIR/go, which the test writes once it has seen every rank's process on its node
(no fixed sleep: the fault comes when the test is ready to watch the teardown), writes
MARKER_DIR/failing (the moment it fails) and fails. `orphan` first forks a child that ignores
SIGTERM and sleeps, then the parent exits 1. Every process here carries MARKER_DIR in its
command line, so the test can find leftovers in the nodes' process tables.
"""
import ctypes
import os
import signal
import socket
import sys
import time

mode, marker = sys.argv[1], sys.argv[2]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
print(f"rank {rank} of {world} up on pid {os.getpid()}", flush=True)


def publish(name, text):
    with open(os.path.join(marker, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(marker, name + ".tmp"), os.path.join(marker, name))


publish(f"up-{rank}", f"{socket.gethostname()} {os.getpid()}")

if rank != world - 1 or mode == "none":
    time.sleep(300)
    sys.exit(0)

deadline = time.monotonic() + 240
while not os.path.exists(os.path.join(marker, "go")):
    if time.monotonic() > deadline:
        print(f"rank {rank}: no go from the test in 240 s", file=sys.stderr, flush=True)
        sys.exit(98)
    time.sleep(0.02)

if mode == "orphan":
    ready, tell = os.pipe()
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(tell, b"1")
        time.sleep(300)
        os._exit(0)
    os.read(ready, 1)  # the child ignores SIGTERM now

publish("failing", str(time.time()))
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
