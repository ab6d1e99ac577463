"""herd's callback for HF Transformers' ``Trainer``: save and stop at the next step when herd
asks (a time limit or a preemption is near), and resume from that checkpoint.

    import herd
    from herd.transformers import HerdCallback

    args = TrainingArguments(output_dir=herd.checkpoint_dir(), save_steps=..., ...)
    trainer = Trainer(model=model, args=args, ..., callbacks=[HerdCallback()])
    trainer.train(resume_from_checkpoint=herd.resume_from())

Importing this module imports Transformers; ``import herd`` alone never does. See
docs/python.md.
"""

from __future__ import annotations

from typing import Any, Optional

from transformers import TrainerCallback

import herd

__all__ = ["HerdCallback"]


class HerdCallback(TrainerCallback):
    """At the end of each optimizer step, ask ``herd.stop_requested()`` (agreed by every
    rank); once herd asked, set ``control.should_save`` and
    ``control.should_training_stop``, so the Trainer writes its ``checkpoint-N`` folder (into
    ``args.output_dir``: point that at ``HERD_CHECKPOINT_DIR``) and returns from
    ``train()``. Outside a herd job it does nothing."""

    def __init__(self) -> None:
        #: The global step the job stopped at for herd, or ``None``.
        self.stopped_at: Optional[int] = None
        herd._install()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        herd._install()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if herd.in_job() and herd.stop_requested():
            control.should_save = True
            control.should_training_stop = True
            self.stopped_at = state.global_step
        return control
