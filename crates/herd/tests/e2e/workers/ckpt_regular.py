"""Test worker: STEPS steps of STEP_TIME s each, logged with herd.log; every EVERY steps rank 0
saves a checkpoint with herd.save_atomic (each save takes SAVE_TIME s), and a start resumes
from herd.resume_from(); the last rank exits 1 at step CRASH of attempt 0.

Usage: ckpt_regular.py STEPS STEP_TIME EVERY SAVE_TIME CRASH
"""
import herd
import os
import sys
import time

steps, step_time, every, save_time, crash = (
    int(sys.argv[1]),
    float(sys.argv[2]),
    int(sys.argv[3]),
    float(sys.argv[4]),
    int(sys.argv[5]),
)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
start = 0
if herd.resume_from():
    with open(herd.resume_from()) as f:
        start = int(f.read())
    print("resumed step=%d" % start, flush=True)
for step in range(start + 1, steps + 1):
    time.sleep(step_time)
    herd.log(step, loss=1.0 / step)
    if step == crash and rank == world - 1 and os.environ.get("HERD_ATTEMPT") == "0":
        sys.exit(1)
    if step % every == 0 and rank == 0:
        path = os.path.join(herd.checkpoint_dir(), "step-%04d" % step)
        with herd.save_atomic(path) as tmp:
            time.sleep(save_time)
            with open(tmp, "w") as f:
                f.write(str(step))
