#!/usr/bin/env python3
"""A small but real PyTorch DDP training: herd's reference workload.

Tiny MLP regression on synthetic data drawn from a fixed seed. gloo on CPU, nccl when GPUs
exist. Launched by anything that sets the torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT); with none of them it trains in one process.

Every rank logs `step`, `loss` and `samples_per_s` as key=value lines, and the same numbers
as one JSON object a line (herd's metrics convention, read into the experiment's metrics). Rank 0 writes a
checkpoint every --ckpt-every steps into --ckpt-dir (temp file, fsync, rename), and a start
resumes from $HERD_RESUME_FROM when herd set it (the newest complete checkpoint of earlier
attempts), else from the newest complete checkpoint there. SIGUSR1 (the scheduler's "time is almost
up") makes every rank agree on a step, checkpoint it and exit 0. At the end every rank prints
`checksum=` of the parameters: equal on all ranks, and equal between an uninterrupted run and
one resumed from a checkpoint, because each step's data depends only on (seed, step, rank).

For benchmarks and fault tests, two opt-in options (off by default, the output unchanged):
--log-time adds `time=` (Unix seconds, to the millisecond) to the key=value step lines and to
the `start` line (written once the process group is up); and
--hang-file PATH makes the last rank, at the first step where PATH exists, remove it and stop
making progress for good (a hung rank: it sleeps, its peers block in the next collective),
so a restarted job does not hang again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn

CKPT_PREFIX = "ckpt-"
CKPT_SUFFIX = ".pt"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps (default 200)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--hidden", type=int, default=64, help="hidden width of the MLP")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument(
        "--ckpt-dir",
        default=os.environ.get("HERD_CHECKPOINT_DIR"),
        help="checkpoint folder (default $HERD_CHECKPOINT_DIR; none: no checkpoints)",
    )
    p.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every K steps")
    p.add_argument(
        "--step-time",
        type=float,
        default=0.0,
        help="sleep this many seconds per step (stretches a run for time-limit tests)",
    )
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    p.add_argument(
        "--log-time",
        action="store_true",
        help="add time=<Unix seconds> to the key=value step lines (for benchmarks)",
    )
    p.add_argument(
        "--hang-file",
        default=None,
        help="fault test: the last rank removes this file when it appears and hangs for good",
    )
    args = p.parse_args(argv)
    if args.steps < 0 or args.batch_size < 1 or args.log_every < 1 or args.ckpt_every < 1:
        p.error("--steps must be >= 0; --batch-size, --log-every and --ckpt-every >= 1")
    return args


class Runtime:
    """Where this process sits in the job, from the torchrun variables."""

    def __init__(self, backend: str) -> None:
        env = os.environ
        self.distributed = "WORLD_SIZE" in env and "RANK" in env
        self.rank = int(env.get("RANK", 0))
        self.world_size = int(env.get("WORLD_SIZE", 1))
        self.local_rank = int(env.get("LOCAL_RANK", 0))
        self.host = socket.gethostname()
        use_cuda = torch.cuda.is_available() and backend != "gloo"
        if use_cuda:
            self.device = torch.device("cuda", self.local_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.backend = ("nccl" if use_cuda else "gloo") if backend == "auto" else backend
        if self.distributed:
            dist.init_process_group(backend=self.backend, init_method="env://")
            # The variables and the process group must agree, or ranks silently collide.
            assert dist.get_rank() == self.rank and dist.get_world_size() == self.world_size

    def log(self, msg: str) -> None:
        # One write(2) per line: ranks that share a stdout file (torchrun mode, srun without
        # --label) never glue their lines together, as print's two writes could.
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), f"rank={self.rank} {msg}\n".encode())

    def metrics(self, **values) -> None:
        # herd's metrics convention: one JSON object a line with a numeric "step".
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), (json.dumps(values) + "\n").encode())

    def all_max(self, value: int) -> int:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def close(self) -> None:
        """Leave the job: one last barrier, so no rank exits (closing its sockets) while a
        peer is still in a collective with it, then the process group is destroyed."""
        if self.distributed:
            dist.barrier()
            dist.destroy_process_group()


# Checkpoints are read back with torch's safe loader where it can read them: before torch
# 2.0 (Debian 12's python3-torch is 1.13) it refuses the optimizer's float settings.
WEIGHTS_ONLY = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 0)


def make_model(hidden: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, hidden), nn.Tanh(), nn.Linear(hidden, 1))


def batch(seed: int, step: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic regression data, a pure function of (seed, step, rank)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(size, 16, generator=g)
    w = torch.linspace(-1.0, 1.0, 16)
    w = w / w.norm()  # x @ w ~ N(0, 1): a smooth target the MLP learns in a few hundred steps
    y = torch.sin(x @ w).unsqueeze(1) + 0.01 * torch.randn(size, 1, generator=g)
    return x, y


def checksum(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def ordered_mean_hook(world_size, bucket):  # unannotated: DDP checks the annotations
    """DDP's gradient averaging, summed in rank order: bit for bit the same whatever the
    bucket layout. DDP lays its buckets out again after the first step of every run, and a
    ring all-reduce over more than two ranks rounds each element by where it falls in the
    ring's chunks; so with the default hook a run resumed from step k (its first step there)
    would drift from an uninterrupted one in the last bits, and checksums would differ."""
    grad = bucket.buffer()
    parts = [torch.empty_like(grad) for _ in range(world_size)]
    fut = dist.all_gather(parts, grad, async_op=True).get_future()

    def mean(done: torch.futures.Future) -> torch.Tensor:
        value = done.value()
        gathered = value[0] if isinstance(value[0], list) else value
        total = gathered[0].clone()
        for g in gathered[1:]:
            total += g
        return total.div_(world_size)

    return fut.then(mean)


def ckpt_path(folder: Path, step: int) -> Path:
    return folder / f"{CKPT_PREFIX}{step:09d}{CKPT_SUFFIX}"


def latest_checkpoint(folder: Path | None) -> Path | None:
    """Newest complete checkpoint: only renamed (finished) files carry the final name."""
    if folder is None or not folder.is_dir():
        return None
    done = sorted(
        p
        for p in folder.iterdir()
        if p.name.startswith(CKPT_PREFIX) and p.name.endswith(CKPT_SUFFIX)
    )
    return done[-1] if done else None


def save_checkpoint(folder: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    final = ckpt_path(folder, step)
    tmp = folder / f".{final.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final


def hang(rt: Runtime, hang_file: str, step: int) -> None:
    """The --hang-file fault: take the file (so a restart does not hang again) and stop
    making progress for good, as a rank stuck in a driver call or a deadlock would."""
    try:
        os.remove(hang_file)
    except FileNotFoundError:
        pass
    rt.log(f"hanging step={step} time={time.time():.3f}")
    while True:
        time.sleep(3600)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    stop_requested = False

    def on_usr1(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGUSR1, on_usr1)

    rt = Runtime(args.backend)
    ckpt_dir = Path(args.ckpt_dir) if args.ckpt_dir else None
    stamp = f" time={time.time():.3f}" if args.log_time else ""
    rt.log(
        f"start host={rt.host} world_size={rt.world_size} local_rank={rt.local_rank} "
        f"backend={rt.backend if rt.distributed else 'none'} device={rt.device} pid={os.getpid()}"
        f"{stamp}"
    )

    model = make_model(args.hidden, args.seed).to(rt.device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start_step = 0
    # herd names the newest complete checkpoint of earlier attempts; without herd, look.
    resume_from = os.environ.get("HERD_RESUME_FROM")
    resume = Path(resume_from) if resume_from else latest_checkpoint(ckpt_dir)
    if resume is not None:
        state = torch.load(resume, map_location=rt.device, weights_only=WEIGHTS_ONLY)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_step = int(state["step"])
        rt.log(f"resumed from={resume} step={start_step}")
    if rt.distributed:
        # DDP broadcasts rank 0's parameters, so every rank starts from the same state.
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=[rt.device.index] if rt.device.type == "cuda" else None
        )
        ddp.register_comm_hook(rt.world_size, ordered_mean_hook)
    else:
        ddp = model
    loss_fn = nn.MSELoss()

    def checkpoint(step: int) -> None:
        if ckpt_dir is None:
            return
        if rt.rank == 0:
            path = save_checkpoint(ckpt_dir, step, model, opt)
            rt.log(f"checkpoint step={step} path={path}")
        rt.barrier()  # nobody runs ahead of (or exits before) a checkpoint being complete

    step = start_step
    window_start, window_samples = time.perf_counter(), 0
    while step < args.steps:
        # All ranks stop at the same step: the signal may reach them at different moments.
        if rt.all_max(1 if stop_requested else 0):
            checkpoint(step)
            rt.log(f"stopping on SIGUSR1 step={step}")
            rt.close()
            leave(0)
        if args.hang_file and rt.rank == rt.world_size - 1 and os.path.exists(args.hang_file):
            hang(rt, args.hang_file, step)
        x, y = batch(args.seed, step, rt.rank, args.batch_size)
        x, y = x.to(rt.device), y.to(rt.device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        step += 1
        window_samples += args.batch_size
        if args.step_time > 0:
            time.sleep(args.step_time)
        if step % args.log_every == 0 or step == args.steps:
            now = time.perf_counter()
            rate = window_samples / max(now - window_start, 1e-9)
            # The convention first: a reader that sees it reads nothing else.
            rt.metrics(step=step, loss=round(loss.item(), 6), samples_per_s=round(rate, 1))
            stamp = f" time={time.time():.3f}" if args.log_time else ""
            rt.log(f"step={step} loss={loss.item():.6f} samples_per_s={rate:.1f}{stamp}")
            window_start, window_samples = now, 0
        if step % args.ckpt_every == 0 and step < args.steps:
            checkpoint(step)

    checkpoint(step)
    rt.log(f"done steps={step} checksum={checksum(model)}")
    rt.close()
    leave(0)
    return 0  # not reached


def leave(code: int) -> None:
    """End the process with `code` once everything is written, skipping the interpreter's
    and the C++ libraries' teardown.

    A DDP model keeps its gloo process group, and gloo's threads with it (two workers and a
    socket loop per rank, the store's server on rank 0), alive after destroy_process_group()
    until the process ends (torch 2.15), so that teardown runs beside live gloo threads while
    the peers close their sockets; once in a few dozen runs a rank aborted there
    ("terminate called without an active exception") after its work was done. With torch
    1.13 (Debian 12's python3-torch) the model's destructor, run when main() returns, joined
    a gloo thread that never ended: rank 0 hung after `done` in a few runs of ten. So main()
    leaves from inside, before its locals are destroyed.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
