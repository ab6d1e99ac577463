"""herd's callback for PyTorch Lightning: stop at a step boundary with a checkpoint when
herd asks (a time limit or a preemption is near), and resume from it.

    import herd
    from herd.lightning import HerdCallback

    trainer = Trainer(..., callbacks=[HerdCallback()])
    trainer.fit(model, ckpt_path=herd.resume_from())

Importing this module imports Lightning (``lightning``, or the standalone
``pytorch_lightning``); ``import herd`` alone never does. See docs/python.md.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import herd

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import Callback

__all__ = ["HerdCallback"]


class HerdCallback(Callback):
    """After each training batch, ask ``herd.stop_requested()`` (agreed by every rank); once
    herd asked, save the whole training state (``trainer.save_checkpoint``, published
    atomically by ``herd.save_atomic``) as ``dirpath/filename`` (default
    ``HERD_CHECKPOINT_DIR/herd-step=N.ckpt``) and end ``fit`` cleanly
    (``trainer.should_stop``). Outside a herd job it does nothing.

    It also keeps Lightning's own SLURM auto-requeue out of the way: herd's stop handler is
    installed when the callback is made, before ``fit``, and Lightning sets its requeue
    handler (SIGUSR1) only where no handler is set, so herd (not Lightning) saves and
    requeues, once. Lightning's SIGTERM handler, set at ``fit``, calls the one it found
    (herd's); with ``--stop-signal TERM`` both hear the stop once and, after the step this
    callback saved at, Lightning leaves ``fit`` with its ``SIGTERMException`` (a
    ``SystemExit``). See docs/python.md.
    """

    def __init__(
        self, dirpath: Optional[str] = None, filename: str = "herd-step={step}.ckpt"
    ) -> None:
        super().__init__()
        self.dirpath = dirpath
        self.filename = filename
        #: The global step the job stopped at for herd, or ``None``.
        self.stopped_at: Optional[int] = None
        herd._install()

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        herd._install()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not herd.in_job() or not herd.stop_requested():
            return
        folder = self.dirpath or herd.checkpoint_dir()
        step = trainer.global_step
        if folder is not None:
            path = os.path.join(folder, self.filename.format(step=step))
            with herd.save_atomic(path) as tmp:
                trainer.save_checkpoint(tmp)
        self.stopped_at = step
        trainer.should_stop = True
