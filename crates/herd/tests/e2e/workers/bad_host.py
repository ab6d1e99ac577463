"""A worker that fails on one host only, as one with a broken GPU would: on host BAD_HOST it
exits 3 right at its start; everywhere else it joins the process group, runs a few
all-reduce steps and finishes.

    python bad_host.py BAD_HOST
"""

import os
import socket
import sys
import time

import torch
import torch.distributed as dist

bad = sys.argv[1]
host = socket.gethostname()
rank = int(os.environ["RANK"])
attempt = os.environ.get("HERD_ATTEMPT", "?")
if host == bad:
    print(f"rank={rank} host={host} attempt={attempt} failing: this host is broken", flush=True)
    sys.exit(3)
dist.init_process_group("gloo")
print(f"rank={rank} host={host} attempt={attempt} start", flush=True)
total = torch.zeros(1)
for step in range(1, 6):
    t = torch.ones(1) * (rank + 1)
    dist.all_reduce(t)
    total += t
    print(f"rank={rank} step={step}", flush=True)
    time.sleep(0.2)
print(f"rank={rank} done total={int(total.item())}", flush=True)
dist.destroy_process_group()
