"""Test worker: record what this worker sees, as the seeds' launch code would read it.

probe.py OUT_DIR [--fail-once-rank R] [ARGS...]

Writes OUT_DIR/probe-<attempt>-<RANK>.json with argv, host, the rank variables, and the
ranks computed the way InternVideo's and SwAV's init_distributed_mode (SLURM branch) and
mmcv's launcher=slurm compute them. With --fail-once-rank R, rank R exits 3 on attempt 0.
"""
import json
import os
import socket
import sys

out_dir = sys.argv[1]
args = sys.argv[2:]
env = os.environ
attempt = env.get("TORCHELASTIC_RESTART_COUNT", "?")
rank = env.get("RANK", "?")
keys = [k for k in env if k.startswith(("SLURM_", "HERD_", "TORCHELASTIC_"))] + [
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
]
seeds = {
    # InternVideo / SwAV: rank from SLURM_PROCID, local GPU from SLURM_LOCALID, world size
    # from SLURM_NNODES times the first character of SLURM_TASKS_PER_NODE.
    "rank": int(env["SLURM_PROCID"]),
    "gpu": int(env["SLURM_LOCALID"]),
    "world_size": int(env["SLURM_NNODES"]) * int(env["SLURM_TASKS_PER_NODE"][0]),
    # mmcv launcher=slurm
    "mmcv_world_size": int(env["SLURM_NTASKS"]),
}
record = {
    "argv": sys.argv[1:],
    "host": socket.gethostname(),
    "pid": os.getpid(),
    "env": {k: env.get(k) for k in keys},
    "seeds": seeds,
}
# Written whole or not at all (renamed into place): a worker torn down mid-write by a
# failing peer must not leave half a probe for the test to read.
final = os.path.join(out_dir, f"probe-{attempt}-{rank}.json")
tmp = os.path.join(out_dir, f".probe-{attempt}-{rank}.json.{os.getpid()}")
with open(tmp, "w") as f:
    json.dump(record, f)
os.replace(tmp, final)

if len(args) >= 2 and args[0] == "--fail-once-rank" and args[1] == rank and attempt == "0":
    print(f"rank {rank} fails on purpose in attempt 0", file=sys.stderr, flush=True)
    sys.exit(3)
print(f"rank {rank} ok", flush=True)
