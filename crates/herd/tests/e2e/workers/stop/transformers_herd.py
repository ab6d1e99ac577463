"""HF Transformers' Trainer under herd with `herd.transformers.HerdCallback`, a tiny model
defined here (nothing downloaded). Usage: transformers_herd.py OUT STEPS STEP_TIME"""

import herd  # first: its stop handler is in place before the slow imports
import os
import sys
import time

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import steps
from herd.transformers import HerdCallback

out, total, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rank = int(os.environ["RANK"])


class Steps(torch.utils.data.Dataset):
    """Item i: the step and rank its batch is made of (the sampler gives each rank its
    own items in order; the Trainer skips those already trained on when it resumes)."""

    def __len__(self):
        return total * int(os.environ["WORLD_SIZE"])

    def __getitem__(self, i):
        return {"index": i}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = steps.model()

    def forward(self, index):
        i = int(index[0])
        world = int(os.environ["WORLD_SIZE"])
        x, y = steps.batch(i // world + 1, i % world)
        return {"loss": torch.nn.functional.mse_loss(self.net(x), y)}


class Record(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        steps.record(out, rank, state.global_step)
        time.sleep(pause)


stop = HerdCallback()
args = TrainingArguments(
    output_dir=herd.checkpoint_dir(),
    max_steps=total,
    per_device_train_batch_size=1,
    learning_rate=0.01,
    lr_scheduler_type="constant",
    optim="sgd",
    weight_decay=0.0,
    max_grad_norm=0.0,
    save_strategy="steps",
    save_steps=25,
    logging_steps=1,
    report_to=[],
    use_cpu=True,
    seed=0,
    dataloader_drop_last=True,
    disable_tqdm=True,
    remove_unused_columns=False,
    ddp_backend="gloo",
)
model = Net()
trainer = Trainer(model=model, args=args, train_dataset=Steps(), callbacks=[Record(), stop])
trainer.train(resume_from_checkpoint=herd.resume_from())
if stop.stopped_at is None:
    steps.finish(out, rank, model.net, trainer.state.global_step)
else:
    print("stopping step=%d" % stop.stopped_at, flush=True)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
sys.stdout.flush()
os._exit(0)
