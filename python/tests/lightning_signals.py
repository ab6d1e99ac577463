"""herd's stop handler beside PyTorch Lightning's real signal handlers (its
`_SignalConnector`, and `Trainer.fit` with `herd.lightning.HerdCallback`), in one process.

Lightning is not in the standard library, so this module is not named `test_*.py`: plain
`python3 -m unittest discover -s python/tests` leaves it out, and `crates/herd/tests/python.rs`
runs it with the python of the venv `testbed/venv` makes (Lightning pinned in
`testbed/requirements-frameworks.txt`):

    python -m unittest discover -v -s python/tests -p 'lightning_*.py'

Without Lightning it fails at once, saying so; it never skips."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

if importlib.util.find_spec("lightning") is None:
    raise ImportError(
        "PyTorch Lightning is not installed for %s: run these tests with the python that "
        "`testbed/venv` prints (it installs the pinned frameworks), as "
        "crates/herd/tests/python.rs does" % sys.executable
    )

# What Lightning or torch would take for a cluster or a launcher around the test process.
_LAUNCHER_VARIABLES = ("HERD_", "SLURM_", "TORCHELASTIC_", "MASTER_", "PL_")
_LAUNCHER_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "NODE_RANK")


def run_python(code, signame, extra=None, prelude=""):
    """Run `prelude` then `code` in a fresh interpreter (this one's, with Lightning) that
    imports herd from this checkout, as a herd worker whose stop signal is `signame`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_LAUNCHER_VARIABLES) and k not in _LAUNCHER_NAMES
    }
    env.update({"HERD_ATTEMPT": "0", "HERD_STOP_SIGNAL": signame})
    env.update(extra or {})
    env["PYTHONPATH"] = os.path.dirname(HERE)
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# Counts the calls of Lightning's real SIGTERM handler (`_sigterm_notifier_fn`) by the line
# it logs, and checks herd's state.
PRELUDE = """
import logging, os, signal, sys
from lightning.pytorch import Trainer
from lightning.pytorch.trainer.connectors.signal_connector import (
    _HandlersCompose,
    _SignalConnector,
)

lightning_calls = []

class Count(logging.Handler):
    def emit(self, record):
        if "Received SIGTERM" in record.getMessage():
            lightning_calls.append(record.getMessage())

connector_log = logging.getLogger("lightning.pytorch.trainer.connectors.signal_connector")
connector_log.setLevel(logging.INFO)
connector_log.addHandler(Count())

def connector():
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    assert isinstance(trainer._signal_connector, _SignalConnector)
    return trainer._signal_connector

def step(deliver):
    # The rest of the step must run: the signal never raises in the middle of it.
    try:
        deliver(signal.SIGTERM)
        done = sum(range(1000))
    except BaseException as e:
        print("raised mid-step:", type(e).__name__, e)
        sys.exit(3)
    assert done == 499500

def kill(sig):
    os.kill(os.getpid(), sig)
"""


class LightningsSignalConnector(unittest.TestCase):
    """`--stop-signal TERM`: the signal Lightning handles itself, chaining the handler it
    found."""

    def assert_ran_well(self, out):
        text = out.stdout + out.stderr
        self.assertFalse("RecursionError" in text, "it recursed:\n" + text[-3000:])
        self.assertEqual(out.returncode, 0, text[-3000:])
        self.assertEqual(out.stdout.strip().splitlines()[-1:], ["ok"], text[-3000:])

    def test_its_handlers_over_herds_chain_to_herd_and_nothing_recurses(self):
        out = run_python(
            """
            import herd
            ours = signal.getsignal(signal.SIGTERM)
            sc = connector()
            sc.register_signal_handlers()
            theirs = signal.getsignal(signal.SIGTERM)
            assert isinstance(theirs, _HandlersCompose), theirs
            assert ours in theirs.signal_handlers, "Lightning chains herd's handler"
            for _ in range(3):                     # herd asks at every step
                assert herd.stop_requested() is False
            step(kill)
            assert herd.stop_requested() is True
            assert sc.received_sigterm
            assert len(lightning_calls) == 1, lightning_calls
            step(signal.raise_signal)              # a second SIGTERM: once more
            assert len(lightning_calls) == 2, lightning_calls

            # After fit, Lightning puts back the handler it found: herd's, which still
            # hears the stop and no longer calls Lightning's.
            sc.teardown()
            assert signal.getsignal(signal.SIGTERM) is ours
            herd._agreed = herd._received = False
            assert herd.stop_requested() is False
            step(kill)
            assert herd.stop_requested() is True
            assert len(lightning_calls) == 2, lightning_calls
            print("ok")
            """,
            "TERM",
            prelude=PRELUDE,
        )
        self.assert_ran_well(out)

    def test_its_handlers_installed_before_herd_are_chained_once(self):
        out = run_python(
            """
            sc = connector()
            sc.register_signal_handlers()
            import herd
            for _ in range(3):
                assert herd.stop_requested() is False
            step(kill)
            assert herd.stop_requested() is True
            assert sc.received_sigterm
            assert len(lightning_calls) == 1, lightning_calls
            step(signal.raise_signal)
            assert len(lightning_calls) == 2, lightning_calls
            print("ok")
            """,
            "TERM",
            prelude=PRELUDE,
        )
        self.assert_ran_well(out)


# A tiny LightningModule whose third training step is interrupted by the stop signal, fit
# with herd's callback; prints what happened as one JSON line.
FIT = """
import herd
import json, os, signal
import torch
import lightning.pytorch as pl
from herd.lightning import HerdCallback

sig = getattr(signal, "SIG" + os.environ["HERD_STOP_SIGNAL"])

class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(2, 1)
        self.completed = []

    def training_step(self, batch, batch_idx):
        loss = self.net(batch).pow(2).mean()
        if self.global_step == 2:
            signal.raise_signal(sig)           # in the middle of the third step
        self.completed.append(self.global_step + 1)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(32, 2), batch_size=2)

callback = HerdCallback()
trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=10, callbacks=[callback],
                     logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)
module = Module()
ended = "returned"
try:
    trainer.fit(module)
except BaseException as e:
    ended = type(e).__name__
print(json.dumps({"ended": ended, "stopped_at": callback.stopped_at,
                  "global_step": trainer.global_step, "completed": module.completed,
                  "checkpoints": sorted(os.listdir(herd.checkpoint_dir())),
                  "stop_requested": herd.stop_requested()}))
"""


class FitWithHerdsCallback(unittest.TestCase):
    """`Trainer.fit` with `HerdCallback`: the stop signal arrives in the middle of a step;
    the step ends, herd's callback saves and stops, with each stop signal."""

    def fit(self, signame):
        with tempfile.TemporaryDirectory() as d:
            out = run_python(FIT, signame, {"HERD_CHECKPOINT_DIR": d})
        text = out.stdout + out.stderr
        self.assertFalse("RecursionError" in text, "it recursed:\n" + text[-3000:])
        self.assertEqual(out.returncode, 0, text[-3000:])
        return json.loads(out.stdout.strip().splitlines()[-1])

    def assert_stopped_after_the_third_step(self, seen):
        self.assertEqual(seen["completed"], [1, 2, 3], "the interrupted step ran to its end")
        self.assertEqual(seen["stopped_at"], 3)
        self.assertEqual(seen["global_step"], 3)
        self.assertEqual(seen["checkpoints"], ["herd-step=3.ckpt"])
        self.assertTrue(seen["stop_requested"])

    def test_usr1_stops_fit_cleanly(self):
        seen = self.fit("USR1")
        self.assertEqual(seen["ended"], "returned", seen)
        self.assert_stopped_after_the_third_step(seen)

    def test_int_stops_fit_cleanly_without_keyboard_interrupt(self):
        seen = self.fit("INT")
        self.assertEqual(seen["ended"], "returned", seen)
        self.assert_stopped_after_the_third_step(seen)

    def test_term_is_heard_by_herd_and_lightning_which_then_exits_fit(self):
        # Lightning hears SIGTERM too (its handler chains herd's) and, after the step in
        # which herd's callback saved, leaves fit with its SIGTERMException (a SystemExit).
        seen = self.fit("TERM")
        self.assertEqual(seen["ended"], "SIGTERMException", seen)
        self.assert_stopped_after_the_third_step(seen)


if __name__ == "__main__":
    unittest.main()
