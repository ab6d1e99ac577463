"""Test worker: HF Accelerate on CPU, record what Accelerate decided.

accelerate_gather.py OUT_DIR

`Accelerator(cpu=True)` finds the job from the environment; every process gathers its
process index from all processes, then a small model is prepared and trained for one epoch
on a fixed synthetic dataset (Accelerate shards it by process). Every process writes
OUT_DIR/accelerate-<process index>.json: Accelerate's distributed type, process index,
number of processes, local process index, the gathered indices and a checksum of the
parameters (equal on all processes when the replicas agree).
"""

import hashlib
import json
import os
import socket
import sys

import torch
from accelerate import Accelerator


def checksum(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    out_dir = sys.argv[1]
    acc = Accelerator(cpu=True)
    gathered = acc.gather(torch.tensor([acc.process_index])).tolist()

    torch.manual_seed(7)
    x = torch.randn(96, 8)
    y = x.sum(dim=1, keepdim=True)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt, data = acc.prepare(model, opt, data)
    steps = 0
    for xb, yb in data:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        steps += 1
    acc.wait_for_everyone()

    record = {
        "host": socket.gethostname(),
        "distributed_type": str(acc.distributed_type).split(".")[-1],
        "backend": acc.state.backend,
        "process_index": acc.process_index,
        "num_processes": acc.num_processes,
        "local_process_index": acc.local_process_index,
        "gathered": gathered,
        "steps": steps,
        "checksum": checksum(acc.unwrap_model(model)),
    }
    name = f"accelerate-{acc.process_index}.json"
    tmp = os.path.join(out_dir, f".{name}.{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(out_dir, name))
    print(f"process {acc.process_index} gathered {gathered}", flush=True)
    acc.wait_for_everyone()
    acc.end_training()


if __name__ == "__main__":
    main()
    # The shutdown docs/launch.md recommends for gloo jobs ("A rank that aborts at exit").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
