"""A job whose start is slow and that then hangs: rank 3 is silent for SLOW seconds before
it imports torch (a slow import, a dataset indexed at start) while the others, which said
they started, wait for it in init_process_group; then every rank ticks every 0.1 s and meets
the others in a gloo barrier every ten ticks, until rank 1 stops for good in round STUCK
(a rank stuck in a kernel): the others wait in the next barrier, and no rank makes progress
after that.

    python slow_then_stuck.py --slow 20 --stuck-after 5
"""

import argparse
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--slow", type=float, default=20.0)
p.add_argument("--stuck-after", type=int, default=5)
args = p.parse_args()
rank = int(os.environ["RANK"])
if rank == 3:
    time.sleep(args.slow)
else:
    print(f"rank={rank} waiting for the others", flush=True)

import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
print(f"rank={rank} start pid={os.getpid()}", flush=True)
for r in range(1000):
    for t in range(10):
        print(f"rank={rank} round={r} tick={t}", flush=True)
        if rank == 1 and r == args.stuck_after and t == 3:
            # Stuck mid-round, silently: the others tick on for 0.6 s, then wait.
            while True:
                time.sleep(3600)
        time.sleep(0.1)
    dist.barrier()
