"""Kill each framework mid-save, then ask herd which checkpoint the next attempt resumes from
and resume from it with the framework (issue #26, `checkpoints.rs`).

    ckpt_kill.py OUT HERD [STAGE...]

For each stage (default: all of STAGES) a forked child trains a tiny model for 6 steps and
checkpoints at steps 2, 4 and 6 into its own folder OUT/STAGE/ckpt; the save at step 6 is
cut: the stage's real file write is wrapped so that it writes part of what the framework
asked for and then SIGKILLs the process, leaving on disk what a job killed there leaves.
Then `HERD run` (no SLURM) starts one worker with HERD_CHECKPOINT_DIR=that folder, which
writes the HERD_RESUME_FROM herd gave it, and a second forked child resumes the framework
from it and trains on to step 8. Everything heavy is imported once, before any fork.

Writes OUT/STAGE.json: what was saved (step, path, weights checksum), how the saver ended,
what the folder held after the kill, HERD_RESUME_FROM and what herd said, and what the
resumed run saw (its first step, the checksum of the weights it loaded).
"""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import fsspec.implementations.local as fsspec_local
import torch
import torch.distributed.checkpoint as dcp
import torch.distributed.checkpoint.filesystem as dcp_fs
import lightning.pytorch as pl
from transformers import Trainer, TrainerCallback, TrainingArguments

STAGES = ["torch_save", "lightning", "lightning_cross_fs", "hf_trainer", "dcp"]
EVERY, STEPS, RESUMED_STEPS = 2, 6, 8
CUT_STEP = 6

OUT, HERD = sys.argv[1], sys.argv[2]
WANTED = sys.argv[3:] or STAGES


def die():
    """What a preemption without grace does: nothing after this runs."""
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def write_prefix(path, data):
    """Write the first half of `data` to `path`, as a write cut short leaves it, and die."""
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
        f.flush()
        os.fsync(f.fileno())
    die()


class Net(torch.nn.Module):
    """A tiny regression model; `forward` returns the loss as HF's Trainer wants it."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x, labels=None):
        out = self.lin(x)
        loss = torch.nn.functional.mse_loss(out.squeeze(-1), labels)
        return {"loss": loss, "logits": out}


def checksum(model):
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def data(n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return x, x.sum(-1)


class Saved:
    """OUT/STAGE.saved.jsonl: one line per save begun, written before the save."""

    def __init__(self, stage):
        self.path = os.path.join(OUT, f"{stage}.saved.jsonl")

    def add(self, step, path, model):
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, "path": path, "checksum": checksum(model)}) + "\n")
            f.flush()


# ---- plain torch.save, in place ----------------------------------------------------------


def torch_save_train(ckpt, saved):
    real_save = torch.save
    x, y = data()
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        model(x[:8], y[:8])["loss"].backward()
        opt.step()
        if step % EVERY == 0:
            path = os.path.join(ckpt, f"step-{step}.pt")
            saved.add(step, path, model)
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}
            if step == CUT_STEP:
                buf = io.BytesIO()
                real_save(state, buf)
                write_prefix(path, buf.getvalue())
            real_save(state, path)


def torch_save_resume(path):
    state = torch.load(path)
    model = Net()
    model.load_state_dict(state["model"])
    return {"first_step": state["step"] + 1, "checksum": checksum(model)}


# ---- Lightning ModelCheckpoint (fsspec transaction: a temporary file, then a move) ------


class LitNet(pl.LightningModule):
    def __init__(self, saved=None):
        super().__init__()
        self.net = Net()
        self.saved = saved
        self.seen = {}

    def training_step(self, batch, _):
        x, y = batch
        return self.net(x, y)["loss"]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_train_start(self):
        self.seen["checksum"] = checksum(self.net)

    def on_train_batch_end(self, *_):
        self.seen.setdefault("first_step", self.trainer.global_step)

    def on_save_checkpoint(self, checkpoint):
        if self.saved is not None:
            cb = self.trainer.checkpoint_callback
            path = cb.format_checkpoint_name({"epoch": 0, "step": self.trainer.global_step})
            self.saved.add(self.trainer.global_step, path, self.net)


def loader():
    x, y = data()
    return torch.utils.data.DataLoader(list(zip(x, y)), batch_size=4)


def lightning_trainer(root, max_steps, callbacks, checkpointing):
    return pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=checkpointing,
        callbacks=callbacks,
        default_root_dir=root,
    )


def lightning_train(ckpt, saved, tmp):
    """Lightning's `_atomic_save` writes through an fsspec transaction: fsspec's local file
    is a `tempfile.mkstemp()` file in the temporary folder (`tmpXXXXXXXX`), moved onto the
    final name on commit with `shutil.move`. The 3rd save is cut in that temporary file when
    `tmp` is on the checkpoints' file system, in the copy `shutil.move` falls back to
    (`os.sendfile` into the final name) when it is not."""
    tempfile.tempdir = tmp
    cross = os.stat(tmp).st_dev != os.stat(ckpt).st_dev
    writes = {"n": 0}
    opener = fsspec_local.LocalFileOpener
    real_write, real_commit = opener.write, opener.commit
    real_sendfile = os.sendfile

    def write(self, b, *a, **k):
        writes["n"] += 1
        if writes["n"] == 3 and not cross:
            with open(os.path.join(OUT, "lightning.tempfile"), "w") as f:
                f.write(self.temp)
            self.f.write(bytes(b)[: len(b) // 2])
            self.f.flush()
            die()
        return real_write(self, b, *a, **k)

    def commit(self):
        if writes["n"] == 3 and cross:

            def sendfile(out_fd, in_fd, offset, count):
                size = os.fstat(in_fd).st_size
                real_sendfile(out_fd, in_fd, offset, size // 2)
                os.fsync(out_fd)
                die()

            os.sendfile = sendfile
        return real_commit(self)

    opener.write, opener.commit = write, commit
    cb = pl.callbacks.ModelCheckpoint(dirpath=ckpt, every_n_train_steps=EVERY, save_top_k=-1)
    lightning_trainer(os.path.dirname(ckpt), STEPS, [cb], True).fit(LitNet(saved), loader())


def lightning_resume(path):
    model = LitNet()
    root = os.path.join(OUT, "lightning-resumed")
    lightning_trainer(root, RESUMED_STEPS, [], False).fit(model, loader(), ckpt_path=path)
    return model.seen


# ---- HF Transformers' Trainer: checkpoint-N written in place ------------------------------


class Rows(torch.utils.data.Dataset):
    def __init__(self):
        self.x, self.y = data()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


class Seen(TrainerCallback):
    def __init__(self, saved=None, ckpt=None):
        self.saved, self.ckpt, self.seen, self.model = saved, ckpt, {}, None

    def on_train_begin(self, args, state, control, model=None, **kw):
        self.seen["checksum"] = checksum(model)

    def on_step_end(self, args, state, control, model=None, **kw):
        self.seen.setdefault("first_step", state.global_step)
        if self.saved is not None and state.global_step % EVERY == 0:
            path = os.path.join(self.ckpt, f"checkpoint-{state.global_step}")
            self.saved.add(state.global_step, path, model)


def hf_trainer(out, max_steps, seen, save):
    args = TrainingArguments(
        output_dir=out,
        max_steps=max_steps,
        per_device_train_batch_size=4,
        learning_rate=0.01,
        save_strategy="steps" if save else "no",
        save_steps=EVERY,
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        dataloader_num_workers=0,
    )
    return Trainer(model=Net(), args=args, train_dataset=Rows(), callbacks=[seen])


def hf_train(ckpt, saved):
    """The Trainer writes model.safetensors, training_args.bin, optimizer.pt, scheduler.pt,
    rng_state.pth, trainer_state.json into checkpoint-N in that order; the 3rd checkpoint is
    cut in optimizer.pt (its `torch.save`)."""
    real_save = torch.save

    def save(obj, f, *a, **k):
        cut = os.path.join(f"checkpoint-{CUT_STEP}", "optimizer.pt")
        if isinstance(f, str) and f.endswith(cut):
            buf = io.BytesIO()
            real_save(obj, buf, *a, **k)
            write_prefix(f, buf.getvalue())
        return real_save(obj, f, *a, **k)

    torch.save = save
    hf_trainer(ckpt, STEPS, Seen(saved, ckpt), True).train()


def hf_resume(path):
    seen = Seen()
    trainer = hf_trainer(os.path.join(OUT, "hf-resumed"), RESUMED_STEPS, seen, False)
    trainer.train(resume_from_checkpoint=path)
    return seen.seen


# ---- torch.distributed.checkpoint: data files, then .metadata renamed in ------------------


def dcp_train(ckpt, saved):
    real_rename = dcp_fs.FileSystem.rename

    def rename(self, path, new_path):
        if str(path).endswith(os.path.join(f"step-{CUT_STEP}", ".metadata.tmp")):
            die()
        return real_rename(self, path, new_path)

    dcp_fs.FileSystem.rename = rename
    x, y = data()
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        model(x[:8], y[:8])["loss"].backward()
        opt.step()
        if step % EVERY == 0:
            path = os.path.join(ckpt, f"step-{step}")
            saved.add(step, path, model)
            dcp.save({"model": model.state_dict(), "step": torch.tensor(step)}, checkpoint_id=path)


def dcp_resume(path):
    model = Net()
    state = {"model": model.state_dict(), "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=path)
    model.load_state_dict(state["model"])
    return {"first_step": int(state["step"]) + 1, "checksum": checksum(model)}


# ---- the driver ----------------------------------------------------------------------------


def in_child(fn, *args):
    """Run `fn(*args)` in a forked child; its result (JSON) comes back through a file.
    Returns (how the child ended, result)."""
    result = os.path.join(OUT, f".child-{os.getpid()}-{time.monotonic_ns()}.json")
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            got = {"ok": fn(*args)}
        except BaseException:
            got, code = {"error": traceback.format_exc()}, 3
        try:
            with open(result, "w") as f:
                json.dump(got, f)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        ended = {"signal": os.WTERMSIG(status)}
    else:
        ended = {"exit": os.WEXITSTATUS(status)}
    got = {}
    if os.path.exists(result):
        with open(result) as f:
            got = json.load(f)
        os.remove(result)
    return ended, got


def listing(folder):
    """Every path under `folder`, relative, with its size (folders end in /)."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), folder) + "/"] = 0
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, folder)] = os.path.getsize(p)
    return out


def herd_resume_from(ckpt, logs):
    """HERD_RESUME_FROM as `herd run` gives it to a worker, with what herd said."""
    answer = os.path.join(os.path.dirname(ckpt), "resume_from")
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "HERD_RESUME_FROM" and not k.startswith("SLURM_")
    }
    env["HERD_CHECKPOINT_DIR"] = ckpt
    started = time.monotonic()
    run = subprocess.run(
        [HERD, "run", "--nodes", "1", "--nproc-per-node", "1", "--log-dir", logs, "--",
         "/bin/sh", "-c", 'printf %s "${HERD_RESUME_FROM-unset}" > "$0"', answer],
        env=env, capture_output=True, text=True, timeout=120,
    )
    with open(answer) as f:
        value = f.read()
    return {
        "resume_from": value,
        "herd_exit": run.returncode,
        "herd_said": run.stdout + run.stderr,
        "herd_secs": round(time.monotonic() - started, 2),
    }


def stage(name):
    started = time.monotonic()
    base = os.path.join(OUT, name)
    ckpt = os.path.join(base, "ckpt")
    os.makedirs(ckpt)
    saved = Saved(name)
    if name == "torch_save":
        train, resume, args = torch_save_train, torch_save_resume, (ckpt, saved)
    elif name in ("lightning", "lightning_cross_fs"):
        if name == "lightning":
            tmp = os.path.join(base, "tmp")
        else:
            tmp = tempfile.mkdtemp(prefix="herd-ckpt-kill-", dir="/dev/shm")
        os.makedirs(tmp, exist_ok=True)
        train, resume, args = lightning_train, lightning_resume, (ckpt, saved, tmp)
    elif name == "hf_trainer":
        train, resume, args = hf_train, hf_resume, (ckpt, saved)
    else:
        train, resume, args = dcp_train, dcp_resume, (ckpt, saved)
    record = {"stage": name}
    record["saver"], got = in_child(train, *args)
    record["saver_error"] = got.get("error")
    record["left"] = listing(ckpt)
    if name.startswith("lightning"):
        record["tmp_dir"] = args[2]
        record["tmp_left"] = listing(args[2])
        record["cross_fs"] = os.stat(args[2]).st_dev != os.stat(ckpt).st_dev
        if name == "lightning_cross_fs":
            shutil.rmtree(args[2], ignore_errors=True)
    with open(saved.path) as f:
        record["saved"] = [json.loads(line) for line in f]
    record.update(herd_resume_from(ckpt, os.path.join(base, "logs")))
    if os.path.exists(record["resume_from"]):
        record["resumed"], got = in_child(resume, record["resume_from"])
        record["resumed_seen"] = got.get("ok")
        record["resume_error"] = got.get("error")
    record["secs"] = round(time.monotonic() - started, 2)
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(record, f, indent=2)


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in WANTED:
        stage(name)


if __name__ == "__main__":
    main()
