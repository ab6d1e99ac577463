"""A plain torch DDP loop that stops for herd with `herd.stop_requested()` and writes its
checkpoint with `herd.save_atomic`. Usage: plain_torch.py OUT STEPS STEP_TIME"""

import herd  # first: its stop handler is in place before the slow imports
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import steps

out, total, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
net = steps.model()
ddp = DDP(net)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
done = 0
if herd.resume_from():
    state = torch.load(herd.resume_from())
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    done = state["step"]
    print("resumed step=%d" % done, flush=True)
for step in range(done + 1, total + 1):
    x, y = steps.batch(step, rank)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    opt.step()
    steps.record(out, rank, step)
    herd.log(step, loss=loss)
    time.sleep(pause)
    if herd.stop_requested():
        path = os.path.join(herd.checkpoint_dir(), "step-%d.pt" % step)
        with herd.save_atomic(path) as tmp:
            if rank == 0:
                torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
        dist.barrier()
        print("stopping step=%d" % step, flush=True)
        break
else:
    steps.finish(out, rank, net, total)
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)
