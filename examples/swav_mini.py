#!/usr/bin/env python3
r"""A small but real SwAV on synthetic images: herd's self-supervised scaling workload.

SwAV (Caron et al., 2020: "Unsupervised Learning of Visual Features by Contrasting Cluster
Assignments") at CPU size: multi-crop views of deterministic synthetic 3x32x32 images, a
small conv encoder, a projection head, L2-normalised features, prototypes, distributed
Sinkhorn-Knopp assignments, the swapped prediction loss, prototypes frozen for the first
iterations and a feature queue. Data parallel over torch.distributed: gloo on CPU, nccl when
GPUs exist. Launched by anything that sets the torchrun variables (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT); with none of them it trains in one process.

Every rank logs SwAV's own line (`Epoch: [e][it]\tTime …\tData …\tLoss …\tLr: …`, with
SwAV's logger prefix) and herd's metrics convention, a JSON object a line (`{"step": …,
"epoch": …, "loss": …, "samples_per_s": …, "lr": …}`, and `{"step": …, "epoch": …,
"epoch_time_s": …}` at the end of each epoch). Rank 0 checkpoints (model, optimizer, every
rank's queue, step) every --ckpt-every steps into --ckpt-dir (temp file, fsync, rename); a
start resumes from $HERD_RESUME_FROM when herd set it, else from the newest complete
checkpoint there. SIGUSR1 makes every rank agree on a step, checkpoint it and exit 0. At the
end every rank prints `rank=R done steps=N checksum=…` of the parameters: equal on all ranks,
and equal between an uninterrupted run and a resumed one, because each step's images and
crops depend only on (seed, epoch, step, rank) and the queue is checkpointed with the model.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import signal
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

CKPT_PREFIX = "ckpt-"
CKPT_SUFFIX = ".pt"
IMAGE_SIZE = 32
# Area fractions of a crop, as RandomResizedCrop's `scale` (SwAV: 0.14-1 and 0.05-0.14 of a
# 224-pixel image; a 32-pixel one needs bigger small crops to show anything).
GLOBAL_SCALE = (0.35, 1.0)
SMALL_SCALE = (0.1, 0.35)
MEAN, STD = 0.5, 0.25


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--iters-per-epoch", type=int, default=50, help="iterations per epoch")
    p.add_argument(
        "--dataset-size",
        type=int,
        default=0,
        help="images in an epoch over all ranks, as SwAV's epochs are passes over a dataset: "
        "iterations per epoch = ceil(N / (batch size x world size)), instead of "
        "--iters-per-epoch (0: not used)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per iteration")
    p.add_argument("--lr", type=float, default=0.3, help="base learning rate (default 0.3)")
    p.add_argument("--final-lr", type=float, default=0.0, help="end of the cosine schedule")
    p.add_argument("--warmup-epochs", type=int, default=0, help="linear warmup from 0")
    p.add_argument("--wd", type=float, default=1e-6, help="weight decay")
    p.add_argument(
        "--nmb-crops",
        type=int,
        nargs="+",
        default=[2, 4],
        help="global crops, then small crops (default 2 4; SwAV's --nmb_crops)",
    )
    p.add_argument(
        "--size-crops",
        type=int,
        nargs=2,
        default=[24, 12],
        help="side of the global and of the small crops in pixels (default 24 12)",
    )
    p.add_argument(
        "--width",
        type=int,
        default=16,
        help="channels of the first conv layer; the encoder has W, 2W, 4W, 4W (default 16)",
    )
    p.add_argument("--feat-dim", type=int, default=64, help="feature dimension")
    p.add_argument("--nmb-prototypes", type=int, default=64, help="number of prototypes")
    p.add_argument("--temperature", type=float, default=0.1)
    p.add_argument("--epsilon", type=float, default=0.05, help="Sinkhorn regularisation")
    p.add_argument("--sinkhorn-iterations", type=int, default=3)
    p.add_argument(
        "--freeze-prototypes-niters",
        type=int,
        default=10,
        help="keep the prototypes fixed for this many iterations from the start",
    )
    p.add_argument(
        "--queue-length",
        type=int,
        default=0,
        help="features kept over all ranks (0: no queue); rounded down to a multiple of "
        "batch-size x world size",
    )
    p.add_argument(
        "--epoch-queue-starts", type=int, default=2, help="the queue is used from this epoch"
    )
    p.add_argument("--num-images", type=int, default=8192, help="size of the synthetic set")
    p.add_argument("--num-classes", type=int, default=32, help="kinds of synthetic images")
    p.add_argument("--seed", type=int, default=31)
    p.add_argument("--log-every", type=int, default=10, help="log every K iterations")
    p.add_argument(
        "--ckpt-dir",
        default=os.environ.get("HERD_CHECKPOINT_DIR"),
        help="checkpoint folder (default $HERD_CHECKPOINT_DIR; none: no checkpoints)",
    )
    p.add_argument(
        "--ckpt-every",
        type=int,
        default=0,
        help="checkpoint every K steps (default: every epoch, --iters-per-epoch)",
    )
    p.add_argument(
        "--step-time",
        type=float,
        default=0.0,
        help="sleep this many seconds per step (stretches a run for time-limit tests)",
    )
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    args = p.parse_args(argv)
    # 0: every epoch, known once the world size is (with --dataset-size).
    args.ckpt_every_epoch = args.ckpt_every == 0
    if args.ckpt_every == 0:
        args.ckpt_every = args.iters_per_epoch
    if len(args.nmb_crops) == 1:
        args.nmb_crops.append(0)
    if (
        args.epochs < 0
        or args.iters_per_epoch < 1
        or args.batch_size < 1
        or args.log_every < 1
        or args.ckpt_every < 1
    ):
        p.error("--epochs must be >= 0; --iters-per-epoch, --batch-size, --log-every, "
                "--ckpt-every >= 1")
    if len(args.nmb_crops) != 2 or args.nmb_crops[0] < 2 or args.nmb_crops[1] < 0:
        p.error("--nmb-crops takes GLOBAL [SMALL]: at least 2 global crops (the assignments "
                "come from crops 0 and 1), small crops >= 0")
    if min(args.size_crops) < 2 or min(args.width, args.nmb_prototypes, args.feat_dim) < 1:
        p.error("--size-crops, --width, --nmb-prototypes and --feat-dim must be positive")
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
            # Resumes reproduce an uninterrupted run only with deterministic kernels.
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
        else:
            self.device = torch.device("cpu")
        self.backend = ("nccl" if use_cuda else "gloo") if backend == "auto" else backend
        if self.distributed:
            dist.init_process_group(backend=self.backend, init_method="env://")
            assert dist.get_rank() == self.rank and dist.get_world_size() == self.world_size
        self.started = time.time()

    def write(self, line: str) -> None:
        # One write(2) per line: ranks that share a stdout file never glue their lines.
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), (line + "\n").encode())

    def log(self, msg: str) -> None:
        self.write(f"rank={self.rank} {msg}")

    def info(self, msg: str) -> None:
        """A line as SwAV's logger writes it (src/logger.py's LogFormatter)."""
        elapsed = timedelta(seconds=round(time.time() - self.started))
        self.write(f"INFO - {time.strftime('%x %X')} - {elapsed} - {msg}")

    def metrics(self, **fields: float) -> None:
        """herd's convention: one JSON object a line with a numeric "step"."""
        body = ", ".join(f'"{k}": {fmt_number(v)}' for k, v in fields.items())
        self.write("{" + body + "}")

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            dist.all_reduce(t)
        return t

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
        """One last barrier, so no rank exits while a peer is still in a collective with it."""
        if self.distributed:
            dist.barrier()
            dist.destroy_process_group()


def fmt_number(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    if not math.isfinite(v):
        return "null"  # JSON has no NaN; a diverged loss still gives a parseable line
    return f"{v:.6g}"


# ----------------------------------------------------------------------------------------
# Data: synthetic images, a pure function of (seed, index); shards from (seed, epoch, step,
# rank); multi-crop augmentation in torch from the same key.


def mixed_seed(*parts: int) -> int:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(int(part).to_bytes(8, "little", signed=True))
    return int.from_bytes(h.digest(), "little") & ((1 << 63) - 1)


class SyntheticImages:
    """`num_classes` kinds of image: each a class's stripes (colours, angle, frequency) with
    a class-coloured blob, varied per image (stripe phase, blob place and size, noise)."""

    def __init__(self, seed: int, num_images: int, num_classes: int) -> None:
        self.seed, self.num_images, self.num_classes = seed, num_images, num_classes
        g = torch.Generator().manual_seed(mixed_seed(seed, -1))
        self.palette = torch.rand(num_classes, 3, 3, generator=g)  # background, stripe, blob
        self.angle = torch.rand(num_classes, generator=g) * math.pi
        self.freq = 1.0 + 3.0 * torch.rand(num_classes, generator=g)  # cycles per image
        self.blob = 0.15 + 0.15 * torch.rand(num_classes, generator=g)  # radius, unit image
        side = torch.linspace(-1.0, 1.0, IMAGE_SIZE)
        self.yy, self.xx = torch.meshgrid(side, side, indexing="ij")
        self.perm_epoch, self.perm = -1, torch.empty(0, dtype=torch.int64)

    def images(self, indices: torch.Tensor) -> torch.Tensor:
        """(B, 3, 32, 32) in [0, 1]."""
        n = indices.numel()
        draws, noises = [], []
        for index in indices.tolist():
            g = torch.Generator().manual_seed(mixed_seed(self.seed, index))
            draws.append(torch.rand(4, generator=g))
            noises.append(torch.randn(3, IMAGE_SIZE, IMAGE_SIZE, generator=g))
        u, noise = torch.stack(draws), torch.stack(noises)
        phase, centre, scale = u[:, 0] * 2 * math.pi, u[:, 1:3] * 1.2 - 0.6, u[:, 3]
        c = indices % self.num_classes
        ang, freq = self.angle[c].view(n, 1, 1), self.freq[c].view(n, 1, 1)
        along = self.xx * torch.cos(ang) + self.yy * torch.sin(ang)
        stripes = 0.5 + 0.5 * torch.sin(math.pi * freq * along + phase.view(n, 1, 1))
        radius = (self.blob[c] * (0.75 + 0.5 * scale)).view(n, 1, 1)
        cx, cy = centre[:, 0].view(n, 1, 1), centre[:, 1].view(n, 1, 1)
        d2 = (self.xx - cx) ** 2 + (self.yy - cy) ** 2
        blob = torch.sigmoid((radius**2 - d2) * 60.0)
        pal = self.palette[c]  # (n, 3 colours, 3 channels)
        bg, fg, spot = (pal[:, k, :, None, None] for k in range(3))
        img = bg * (1 - stripes[:, None]) + fg * stripes[:, None]
        img = img * (1 - blob[:, None]) + spot * blob[:, None]
        return (img + 0.05 * noise).clamp_(0.0, 1.0)

    def shard(self, epoch: int, it: int, rank: int, world: int, bs: int) -> torch.Tensor:
        """This rank's indices for (epoch, it): a slice of the epoch's permutation, as
        DistributedSampler deals them (wrapping round when an epoch wants more images)."""
        if self.perm_epoch != epoch:
            g = torch.Generator().manual_seed(mixed_seed(self.seed, -2, epoch))
            self.perm, self.perm_epoch = torch.randperm(self.num_images, generator=g), epoch
        start = (it * world + rank) * bs
        return self.perm[(start + torch.arange(bs)) % self.num_images]


def random_resized_crops(
    x: torch.Tensor, size: int, scale: tuple[float, float], g: torch.Generator
) -> torch.Tensor:
    """RandomResizedCrop + RandomHorizontalFlip for the whole batch at once: one affine
    grid per image (area fraction in `scale`, aspect ratio 3/4-4/3), bilinear resampling."""
    n = x.shape[0]
    area = scale[0] + (scale[1] - scale[0]) * torch.rand(n, generator=g)
    log_ratio = math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * torch.rand(n, generator=g)
    ratio = torch.exp(log_ratio)
    w = torch.sqrt(area * ratio).clamp(max=1.0)  # fractions of the image's side
    h = torch.sqrt(area / ratio).clamp(max=1.0)
    cx = (1 - w) * (2 * torch.rand(n, generator=g) - 1)
    cy = (1 - h) * (2 * torch.rand(n, generator=g) - 1)
    flip = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2] = w * flip, cx
    theta[:, 1, 1], theta[:, 1, 2] = h, cy
    grid = F.affine_grid(theta, [n, 3, size, size], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def gray(x: torch.Tensor) -> torch.Tensor:
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]).expand_as(x)


def colour_distortion(x: torch.Tensor, g: torch.Generator, s: float = 0.5) -> torch.Tensor:
    """SwAV's get_color_distortion: ColorJitter(0.8s, 0.8s, 0.8s) with p=0.8 (brightness,
    contrast, saturation; no hue), then RandomGrayscale(p=0.2)."""
    n = x.shape[0]

    def factor() -> torch.Tensor:
        return (1 + 0.8 * s * (2 * torch.rand(n, generator=g) - 1)).view(n, 1, 1, 1)

    apply = (torch.rand(n, generator=g) < 0.8).view(n, 1, 1, 1)
    b, c, sat = factor(), factor(), factor()
    j = (x * b).clamp(0, 1)
    mean = gray(j).mean(dim=(1, 2, 3), keepdim=True)
    j = ((j - mean) * c + mean).clamp(0, 1)
    gj = gray(j)
    j = ((j - gj) * sat + gj).clamp(0, 1)
    x = torch.where(apply, j, x)
    to_gray = (torch.rand(n, generator=g) < 0.2).view(n, 1, 1, 1)
    return torch.where(to_gray, gray(x), x)


def multi_crop(
    images: torch.Tensor, args: argparse.Namespace, g: torch.Generator
) -> list[torch.Tensor]:
    """SwAV's MultiCropDataset transforms: nmb_crops[0] global and nmb_crops[1] small crops
    of every image, each resized, flipped, colour-distorted and normalised."""
    crops = []
    for count, size, scale in zip(args.nmb_crops, args.size_crops, (GLOBAL_SCALE, SMALL_SCALE)):
        for _ in range(count):
            crop = colour_distortion(random_resized_crops(images, size, scale, g), g)
            crops.append((crop - MEAN) / STD)
    return crops


def batch(
    data: SyntheticImages, args: argparse.Namespace, epoch: int, it: int, rank: int, world: int
) -> list[torch.Tensor]:
    """The crops of this rank's images at (epoch, it): a pure function of (seed, epoch, it,
    rank) (and of the world size, which deals the shards)."""
    images = data.images(data.shard(epoch, it, rank, world, args.batch_size))
    g = torch.Generator().manual_seed(mixed_seed(args.seed, -3, epoch, it, rank))
    return multi_crop(images, args, g)


# ----------------------------------------------------------------------------------------
# Model: SwAV's ResNet with its head (src/resnet50.py) at toy size.


def conv_bn(cin: int, cout: int, stride: int) -> nn.Sequential:
    # BatchNorm with batch statistics only: no running buffers to keep equal across ranks
    # (SwAV uses SyncBatchNorm; per-rank statistics keep the step's communication to the
    # gradient all-reduce and Sinkhorn's sums).
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout, track_running_stats=False),
        nn.ReLU(inplace=True),
    )


class SwAVNet(nn.Module):
    def __init__(self, width: int, feat_dim: int, nmb_prototypes: int, hidden: int = 256) -> None:
        super().__init__()
        w = width
        self.backbone = nn.Sequential(
            conv_bn(3, w, 1),
            conv_bn(w, 2 * w, 2),
            conv_bn(2 * w, 4 * w, 2),
            conv_bn(4 * w, 4 * w, 1),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        # SwAV's projection head: Linear, BatchNorm1d, ReLU, Linear; then L2 normalisation.
        self.projection_head = nn.Sequential(
            nn.Linear(4 * w, hidden),
            nn.BatchNorm1d(hidden, track_running_stats=False),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, feat_dim),
        )
        self.prototypes = nn.Linear(feat_dim, nmb_prototypes, bias=False)

    def forward(self, crops: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        # As SwAV: one backbone pass per run of equal-sized crops, then one head pass.
        feats, start = [], 0
        while start < len(crops):
            end = start
            while end < len(crops) and crops[end].shape[-1] == crops[start].shape[-1]:
                end += 1
            feats.append(self.backbone(torch.cat(crops[start:end])))
            start = end
        z = F.normalize(self.projection_head(torch.cat(feats)), dim=1, p=2)
        return z, self.prototypes(z)


def make_model(args: argparse.Namespace) -> nn.Module:
    torch.manual_seed(args.seed)  # the same initial parameters on every rank
    return SwAVNet(args.width, args.feat_dim, args.nmb_prototypes)


# ----------------------------------------------------------------------------------------
# SwAV's pieces: Sinkhorn-Knopp, the swapped prediction loss, the schedule.


@torch.no_grad()
def distributed_sinkhorn(
    out: torch.Tensor, rt: Runtime, epsilon: float, iters: int
) -> torch.Tensor:
    """SwAV's distributed_sinkhorn for several sets of scores at once: `out` is (A, B, K),
    one (B, K) block per assignment crop; every sum over the samples is all-reduced over the
    ranks (1 + iters small all-reduces for all A crops together). Returns (A, B, K) codes."""
    Q = torch.exp(out / epsilon).transpose(1, 2)  # (A, K, B): K-by-B, as the paper
    B = Q.shape[2] * rt.world_size  # samples to assign, over all ranks
    K = Q.shape[1]
    sum_Q = rt.all_reduce(torch.sum(Q, dim=(1, 2), keepdim=True))
    Q /= sum_Q
    for _ in range(iters):
        # each prototype's total weight must be 1/K
        sum_of_rows = rt.all_reduce(torch.sum(Q, dim=2, keepdim=True))
        Q /= sum_of_rows
        Q /= K
        # each sample's total weight must be 1/B
        Q /= torch.sum(Q, dim=1, keepdim=True)
        Q /= B
    Q *= B  # the columns must sum to 1, so that Q is an assignment
    return Q.transpose(1, 2)


def swav_loss(
    embedding: torch.Tensor,
    output: torch.Tensor,
    bs: int,
    queue: torch.Tensor | None,
    model: SwAVNet,
    rt: Runtime,
    args: argparse.Namespace,
) -> torch.Tensor:
    """main_swav.py's loss: codes of crops 0 and 1 (with the queue's features before them
    once it is full), each predicted from every other crop."""
    n_crops = sum(args.nmb_crops)
    assign = (0, 1)  # SwAV's --crops_for_assign
    with torch.no_grad():
        outs = []
        for i, crop_id in enumerate(assign):
            out = output[bs * crop_id : bs * (crop_id + 1)].detach()
            if queue is not None:
                if not torch.all(queue[i, -1, :] == 0):  # full: use it
                    out = torch.cat((torch.mm(queue[i], model.prototypes.weight.t()), out))
                queue[i, bs:] = queue[i, :-bs].clone()
                queue[i, :bs] = embedding[crop_id * bs : (crop_id + 1) * bs]
            outs.append(out)
        q_all = distributed_sinkhorn(torch.stack(outs), rt, args.epsilon, args.sinkhorn_iterations)
        codes = q_all[:, -bs:]
    loss = output.new_zeros(())
    for i, crop_id in enumerate(assign):
        subloss = output.new_zeros(())
        for v in range(n_crops):
            if v == crop_id:
                continue
            x = output[bs * v : bs * (v + 1)] / args.temperature
            subloss = subloss - torch.mean(torch.sum(codes[i] * F.log_softmax(x, dim=1), dim=1))
        loss = loss + subloss / (n_crops - 1)
    return loss / len(assign)


def lr_at(step: int, args: argparse.Namespace) -> float:
    """main_swav.py's schedule per iteration: linear warmup, then cosine to --final-lr."""
    warm = args.warmup_epochs * args.iters_per_epoch
    total = args.epochs * args.iters_per_epoch
    if step < warm:
        return args.lr * step / warm
    t, span = step - warm, max(total - warm, 1)
    return args.final_lr + 0.5 * (args.lr - args.final_lr) * (1 + math.cos(math.pi * t / span))


def all_reduce_gradients(params: list[nn.Parameter], rt: Runtime) -> None:
    """The mean of the gradients over the ranks in one all-reduce of one flat buffer, laid
    out the same way at every step of every run. (DDP lays its buckets out again after a
    run's first step, so a resumed run would reduce its first step in another layout and
    drift in the last bits from an uninterrupted one; see docs/train_ddp.md.)"""
    if not rt.distributed:
        return
    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= rt.world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


class SGD:
    """torch.optim.SGD's update (momentum, weight decay, no dampening, no Nesterov), written
    out: torch.optim imports torch._dynamo when it builds its first optimizer, 3 to 4 s of
    CPU per process (torch 2.15), as long as a short run on a small machine trains. Like
    torch.optim.SGD it skips a parameter whose gradient is None (frozen prototypes)."""

    def __init__(self, params: list[nn.Parameter], momentum: float, weight_decay: float) -> None:
        self.params, self.momentum, self.weight_decay = params, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(params)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            d_p = p.grad.add(p, alpha=self.weight_decay) if self.weight_decay else p.grad
            buf = self.buffers[i]
            if buf is None:
                buf = self.buffers[i] = d_p.clone()
            else:
                buf.mul_(self.momentum).add_(d_p)
            p.add_(buf, alpha=-lr)

    def state_dict(self) -> dict:
        return {"momentum_buffers": list(self.buffers)}

    def load_state_dict(self, state: dict) -> None:
        saved = state["momentum_buffers"]
        if len(saved) != len(self.params):
            raise ValueError(f"optimizer state for {len(saved)} parameters, not {len(self.params)}")
        self.buffers = [None if b is None else b.to(p.device) for b, p in zip(saved, self.params)]


class AverageMeter:
    """SwAV's src/utils.py AverageMeter: the last value and the running mean."""

    def __init__(self) -> None:
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val: float, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def checksum(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------------------
# Checkpoints, as examples/train_ddp.py.


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


def save_checkpoint(folder: Path, step: int, state: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    final = ckpt_path(folder, step)
    tmp = folder / f".{final.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final


def gather_queue(queue: torch.Tensor | None, rt: Runtime) -> torch.Tensor | None:
    """Every rank's queue, (world, 2, length/world, feat_dim), for rank 0's checkpoint.
    The queue exists on all ranks or on none (it starts at an epoch)."""
    if queue is None:
        return None
    if not rt.distributed:
        return queue.unsqueeze(0).cpu()
    parts = [torch.empty_like(queue) for _ in range(rt.world_size)]
    dist.all_gather(parts, queue)
    return torch.stack(parts).cpu()


# ----------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    stop_requested = False

    def on_usr1(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGUSR1, on_usr1)

    rt = Runtime(args.backend)
    world, bs = rt.world_size, args.batch_size
    if args.dataset_size > 0:
        # A fixed dataset: more ranks, fewer iterations per epoch (what a scaling table needs).
        args.iters_per_epoch = max(1, -(-args.dataset_size // (bs * world)))
        if args.ckpt_every_epoch:
            args.ckpt_every = args.iters_per_epoch
    ckpt_dir = Path(args.ckpt_dir) if args.ckpt_dir else None
    rt.log(
        f"start host={rt.host} world_size={world} local_rank={rt.local_rank} "
        f"backend={rt.backend if rt.distributed else 'none'} device={rt.device} pid={os.getpid()}"
    )
    # SwAV: "the queue needs to be divisible by the batch size" (over all ranks).
    queue_length = args.queue_length - args.queue_length % (bs * world)

    model = make_model(args).to(rt.device)
    params = list(model.parameters())
    opt = SGD(params, momentum=0.9, weight_decay=args.wd)
    total_steps = args.epochs * args.iters_per_epoch
    step, queue = 0, None
    resume_from = os.environ.get("HERD_RESUME_FROM")
    resume = Path(resume_from) if resume_from else latest_checkpoint(ckpt_dir)
    if resume is not None:
        state = torch.load(resume, map_location=rt.device, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = int(state["step"])
        saved = state.get("queue")
        fits = saved is not None and tuple(saved.shape[:3]) == (world, 2, queue_length // world)
        if fits:
            queue = saved[rt.rank].to(rt.device).clone()
        elif saved is not None:
            want = (world, 2, queue_length // world)
            rt.log(f"queue dropped: saved {tuple(saved.shape[:3])}, this run's {want}")
        rt.log(f"resumed from={resume} step={step}")
    elif rt.distributed:
        # Every rank built the same parameters from the seed; make sure of it.
        for p in params:
            dist.broadcast(p.data, src=0)
    data = SyntheticImages(args.seed, args.num_images, args.num_classes)

    def checkpoint(at: int) -> None:
        if ckpt_dir is None:
            return
        queues = gather_queue(queue, rt)
        if rt.rank == 0:
            state = {
                "step": at,
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "queue": queues,
                "world_size": world,
            }
            path = save_checkpoint(ckpt_dir, at, state)
            rt.log(f"checkpoint step={at} path={path}")
        rt.barrier()  # nobody runs ahead of (or exits before) a checkpoint being complete

    model.train()
    start_epoch = step // args.iters_per_epoch
    for epoch in range(start_epoch, args.epochs):
        epoch_start = time.perf_counter()
        first_it = step - epoch * args.iters_per_epoch
        if first_it == 0:
            rt.info(f"============ Starting epoch {epoch} ... ============")
        # SwAV: optionally start a queue (zeros; used once full).
        if queue_length > 0 and epoch >= args.epoch_queue_starts and queue is None:
            queue = torch.zeros(2, queue_length // world, args.feat_dim, device=rt.device)
        batch_time, data_time, losses = AverageMeter(), AverageMeter(), AverageMeter()
        window_start, window_images = time.perf_counter(), 0
        end = time.perf_counter()
        for it in range(first_it, args.iters_per_epoch):
            # All ranks stop at the same step: the signal may reach them at different moments.
            if rt.all_max(1 if stop_requested else 0):
                checkpoint(step)
                rt.log(f"stopping on SIGUSR1 step={step}")
                rt.close()
                return 0
            crops = batch(data, args, epoch, it, rt.rank, world)
            crops = [c.to(rt.device, non_blocking=True) for c in crops]
            data_time.update(time.perf_counter() - end)

            lr = lr_at(step, args)
            with torch.no_grad():  # normalise the prototypes
                w = F.normalize(model.prototypes.weight.data.clone(), dim=1, p=2)
                model.prototypes.weight.copy_(w)

            embedding, output = model(crops)
            loss = swav_loss(embedding.detach(), output, bs, queue, model, rt, args)
            opt.zero_grad()
            loss.backward()
            all_reduce_gradients(params, rt)
            if step < args.freeze_prototypes_niters:
                model.prototypes.weight.grad = None  # SwAV: cancel the prototypes' gradients
            opt.step(lr)
            step += 1
            if args.step_time > 0:
                time.sleep(args.step_time)

            losses.update(loss.item(), bs)
            batch_time.update(time.perf_counter() - end)
            window_images += bs
            if it % args.log_every == 0 or it == args.iters_per_epoch - 1:
                rt.info(
                    f"Epoch: [{epoch}][{it}]\t"
                    f"Time {batch_time.val:.3f} ({batch_time.avg:.3f})\t"
                    f"Data {data_time.val:.3f} ({data_time.avg:.3f})\t"
                    f"Loss {losses.val:.4f} ({losses.avg:.4f})\t"
                    f"Lr: {lr:.4f}"
                )
                now = time.perf_counter()
                rt.metrics(
                    step=step,
                    epoch=epoch,
                    loss=losses.val,
                    samples_per_s=window_images / max(now - window_start, 1e-9),
                    lr=lr,
                )
                window_start, window_images = now, 0
            if it == args.iters_per_epoch - 1:
                rt.metrics(step=step, epoch=epoch, epoch_time_s=time.perf_counter() - epoch_start)
            if step % args.ckpt_every == 0 and step < total_steps:
                checkpoint(step)
            end = time.perf_counter()

    checkpoint(step)
    rt.log(f"done steps={step} checksum={checksum(model)}")
    rt.close()
    return 0


def leave(code: int) -> None:
    """End the process once everything is written, skipping the interpreter's and the C++
    libraries' teardown beside gloo's live threads (see examples/train_ddp.py)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
