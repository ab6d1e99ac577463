"""A job that can hang for real: every rank prints a tick every 0.1 s and meets the others
in a gloo barrier every ten ticks. Stop one rank (SIGSTOP) right after a barrier and the
others tick on for a second, then wait in the next barrier forever: the stopped rank went
silent first, and no rank makes progress after that.

    python hang.py --rounds 40     # 40 barriers (~40 s), then exit 0
"""

import argparse
import os
import time

import torch.distributed as dist


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=40)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = os.environ.get("HERD_ATTEMPT", "?")
    print(f"rank={rank} start pid={os.getpid()} attempt={attempt}", flush=True)
    for r in range(args.rounds):
        for t in range(10):
            print(f"rank={rank} round={r} tick={t}", flush=True)
            time.sleep(0.1)
        dist.barrier()
        print(f"rank={rank} barrier={r}", flush=True)
    print(f"rank={rank} done rounds={args.rounds}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os._exit(main())
