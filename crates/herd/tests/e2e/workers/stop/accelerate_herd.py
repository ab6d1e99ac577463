"""HF Accelerate with herd's recipe: `herd.stop_requested()` each step, `save_state` into
`herd.save_atomic`, `load_state(herd.resume_from())`, `end_training()`.
Usage: accelerate_herd.py OUT STEPS STEP_TIME"""

import herd  # first: its stop handler is in place before the slow imports
import json
import os
import sys
import time

import torch
from accelerate import Accelerator

import steps

out, total, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
accelerator = Accelerator(cpu=True)
rank = accelerator.process_index
net = steps.model()
opt = torch.optim.SGD(net.parameters(), lr=0.01)
model, opt = accelerator.prepare(net, opt)
done = 0
if herd.resume_from():
    accelerator.load_state(herd.resume_from())
    with open(os.path.join(herd.resume_from(), "step.json")) as f:
        done = json.load(f)["step"]
    print("resumed step=%d" % done, flush=True)
for step in range(done + 1, total + 1):
    x, y = steps.batch(step, rank)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    opt.step()
    steps.record(out, rank, step)
    time.sleep(pause)
    if herd.stop_requested():
        with herd.save_atomic(os.path.join(herd.checkpoint_dir(), "step-%d" % step)) as tmp:
            accelerator.save_state(tmp)
            if accelerator.is_main_process:
                with open(os.path.join(tmp, "step.json"), "w") as f:
                    json.dump({"step": step}, f)
            accelerator.wait_for_everyone()
        print("stopping step=%d" % step, flush=True)
        break
else:
    steps.finish(out, rank, accelerator.unwrap_model(model), total)
accelerator.wait_for_everyone()
accelerator.end_training()
