"""Test worker for `herd top`: every rank prints herd's JSON metrics on its own clock.

ticker.py [--interval S] [--slow-rank R] [--pids DIR] [--go FILE] [--max-seconds N]

Each rank prints one convention line (`{"step": N, "loss": …, "samples_per_s": …}`) every
S seconds (rank R of --slow-rank every 3·S, and at a third of the rate), with no
collectives between ranks, so one rank stopped with SIGSTOP goes silent alone while the
others go on. With --pids, each rank writes its pid to DIR/rank-R once it started. Ends
when FILE exists (--go) or after N seconds.
"""
import argparse
import json
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--interval", type=float, default=0.2)
p.add_argument("--slow-rank", type=int)
p.add_argument("--pids")
p.add_argument("--go")
p.add_argument("--max-seconds", type=float, default=240)
a = p.parse_args()

rank = int(os.environ["RANK"])
slow = a.slow_rank == rank
interval = a.interval * (3 if slow else 1)
batch = 32
if a.pids:
    path = os.path.join(a.pids, f"rank-{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)

start = time.time()
step = 0
while time.time() - start < a.max_seconds:
    if a.go and os.path.exists(a.go):
        break
    t0 = time.time()
    time.sleep(interval)
    step += 1
    rate = batch / (time.time() - t0)
    loss = 2.0 / (1 + 0.05 * step) + 0.01 * rank
    print(json.dumps({"step": step, "loss": loss, "samples_per_s": rate}), flush=True)
