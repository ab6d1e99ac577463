"""PyTorch Lightning under herd with `herd.lightning.HerdCallback` (and a periodic
ModelCheckpoint beside it). Usage: lightning_herd.py OUT STEPS STEP_TIME NODES DEVICES"""

import herd  # first: its stop handler is in place before the slow imports
import os
import sys
import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

import steps
from herd.lightning import HerdCallback

out, total, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
nodes, devices = int(sys.argv[4]), int(sys.argv[5])


class Steps(torch.utils.data.Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        return i


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = steps.model()

    def training_step(self, _batch, _idx):
        x, y = steps.batch(self.global_step + 1, self.global_rank)
        return torch.nn.functional.mse_loss(self.net(x), y)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        steps.record(out, self.global_rank, self.global_step)
        herd.log(self.global_step, loss=outputs["loss"])
        time.sleep(pause)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(Steps(), batch_size=1)


stop = HerdCallback()
trainer = pl.Trainer(
    accelerator="cpu",
    strategy="ddp",
    num_nodes=nodes,
    devices=devices,
    max_steps=total,
    callbacks=[stop, ModelCheckpoint(dirpath=herd.checkpoint_dir(), every_n_train_steps=25)],
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    use_distributed_sampler=False,
)
module = Module()
trainer.fit(module, ckpt_path=herd.resume_from())
if stop.stopped_at is None:
    steps.finish(out, trainer.global_rank, module.net, trainer.global_step)
else:
    print("stopping step=%d" % stop.stopped_at, flush=True)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
sys.stdout.flush()
os._exit(0)
