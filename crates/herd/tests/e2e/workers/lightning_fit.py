"""Test worker: fit a small model with PyTorch Lightning's own DDP, record what Lightning decided.

lightning_fit.py OUT_DIR --nodes N --devices G [--cluster auto|slurm]

`Trainer(strategy="ddp", accelerator="cpu", num_nodes=N, devices=G)` fits a linear model on a
fixed synthetic dataset (Lightning's DistributedSampler splits it by rank). With
`--cluster slurm` Lightning is made to read the job through its SLURMEnvironment (as code that
passes `plugins=[SLURMEnvironment()]` does) instead of the environment it detects.

After the fit every rank writes OUT_DIR/lightning-<cluster>-<global rank>.json: the cluster
environment Lightning chose, its global rank, world size, node rank and local rank, the
steps taken and a checksum of the parameters (equal on all ranks when the replicas agree).
"""

import argparse
import hashlib
import json
import os
import socket
import sys

import lightning as L
import torch
from lightning.pytorch.plugins.environments import SLURMEnvironment


class Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _index):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def checksum(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--devices", type=int, required=True)
    p.add_argument("--cluster", choices=["auto", "slurm"], default="auto")
    args = p.parse_args()

    torch.manual_seed(7)
    x = torch.randn(96, 8)
    y = x.sum(dim=1, keepdim=True)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    plugins = [SLURMEnvironment(auto_requeue=False)] if args.cluster == "slurm" else None
    trainer = L.Trainer(
        strategy="ddp",
        accelerator="cpu",
        num_nodes=args.nodes,
        devices=args.devices,
        max_epochs=2,
        plugins=plugins,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.out_dir,
    )
    model = Net()
    trainer.fit(model, data)

    record = {
        "host": socket.gethostname(),
        "cluster_environment": type(trainer.strategy.cluster_environment).__name__,
        "global_rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "node_rank": trainer.node_rank,
        "local_rank": trainer.local_rank,
        "process_group_size": torch.distributed.get_world_size(),
        "global_step": trainer.global_step,
        "checksum": checksum(model),
        "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "SLURM_PROCID")},
    }
    name = f"lightning-{args.cluster}-{trainer.global_rank}.json"
    tmp = os.path.join(args.out_dir, f".{name}.{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(args.out_dir, name))
    print(f"rank {trainer.global_rank} fitted, checksum {record['checksum']}", flush=True)
    # The shutdown docs/launch.md recommends for gloo jobs ("A rank that aborts at exit").
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
