"""What the stop-and-resume workers share (crates/herd/tests/e2e/frameworks_stop.rs): the
data of each step, each rank's own step log, and the final state.

Every worker trains the same tiny linear model on data that is a function of the global
step and the rank only, so an uninterrupted run and one stopped, requeued and resumed any
number of times end with the same parameters exactly when no step is lost or done twice.
"""

import hashlib
import json
import os
import struct

import torch

FEATURES = 4
BATCH = 8


def batch(step, rank):
    """The batch rank `rank` trains on at global step `step` (from 1)."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(BATCH, FEATURES, generator=g)
    y = x @ torch.arange(1.0, FEATURES + 1).unsqueeze(1) + 0.5
    return x, y


def model():
    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, 1)


def record(out, rank, step):
    """Rank `rank` computed global step `step` (in attempt HERD_ATTEMPT): one line of its own
    step log, written as the step is done (before any checkpoint of it)."""
    with open(os.path.join(out, "rank-%d.steps" % rank), "a") as f:
        f.write("%s %d\n" % (os.environ.get("HERD_ATTEMPT", "-"), step))


def checksum(module):
    """The parameters' exact bits, hashed."""
    h = hashlib.sha256()
    for p in module.parameters():
        for v in p.detach().double().flatten().tolist():
            h.update(struct.pack("<d", v))
    return h.hexdigest()[:16]


def finish(out, rank, module, steps):
    """The run ended with every step done: rank `rank`'s final state."""
    with open(os.path.join(out, "final-%d.json" % rank), "w") as f:
        json.dump({"steps": steps, "checksum": checksum(module)}, f)
