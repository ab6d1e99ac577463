"""herd's side inside a training process: stop when herd asks, resume where the last
attempt stopped, write checkpoints herd can trust, show progress.

Everything here reads what herd gives each worker (docs/env.md) and nothing else; outside
a herd job every function is a harmless no-op or returns ``None``, so code that uses it
runs unchanged under ``python train.py`` or torchrun. No dependencies; Python 3.8 or newer;
torch is used only when the program has imported it already.

    import herd

    start = 0
    if herd.resume_from():
        start = load(herd.resume_from())
    for step in range(start, steps):
        train_one_step()
        herd.log(step + 1, loss=loss)
        if herd.stop_requested():          # on every rank, once per step
            with herd.save_atomic(os.path.join(herd.checkpoint_dir(), f"step-{step + 1}.pt")) as tmp:
                if rank == 0:
                    torch.save(state, tmp)
            break

Callbacks for frameworks: ``herd.lightning.HerdCallback`` (PyTorch Lightning) and
``herd.transformers.HerdCallback`` (HF Transformers' Trainer); see docs/python.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Union, cast

__all__ = [
    "checkpoint_dir",
    "heartbeat",
    "in_job",
    "log",
    "resume_from",
    "save_atomic",
    "stop_requested",
    "stop_signal",
]

__version__ = "0.1.0"

_lock = threading.Lock()
# The stop signal arrived in this process.
_received = False
# Every rank agreed that it did (sticky: once agreed, the answer stays true everywhere).
_agreed = False
_last_beat = 0.0

_SignalHandler = Callable[[int, Optional[FrameType]], Any]


def in_job() -> bool:
    """Whether this process is a worker herd started (``HERD_ATTEMPT`` is set)."""
    return "HERD_ATTEMPT" in os.environ


def stop_signal() -> Optional[signal.Signals]:
    """The signal herd sends to ask this worker to checkpoint and stop
    (``HERD_STOP_SIGNAL``, default SIGUSR1); ``None`` outside a herd job."""
    if not in_job():
        return None
    name = os.environ.get("HERD_STOP_SIGNAL", "USR1").strip().upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return signal.Signals[name]
    except KeyError:
        return signal.SIGUSR1


class _StopHandler:
    """herd's handler of the stop signal: notes the stop, then calls the handler that was in
    place when this one was installed (``previous``), once.

    Each installation makes a new one and its ``previous`` never changes. That keeps the
    chain finite: a handler installed later may chain to this one (Lightning's does), and
    herd may then install a newer one in front of it, but a handler that keeps what it
    replaced never chains to one installed after it, so the chain cannot loop back."""

    def __init__(self, previous: Optional[_SignalHandler]) -> None:
        self.previous = previous
        self._running = False

    def __call__(self, signum: int, frame: Optional[FrameType]) -> None:
        global _received
        _received = True
        # Re-entered while calling `previous`: a chain that leads back here (a library
        # that re-points its saved handler at a newer one of ours) or the signal again
        # before the chain finished; the stop is noted, the chain is not run again.
        if self._running or self.previous is None:
            return
        self._running = True
        try:
            self.previous(signum, frame)
        finally:
            self._running = False


def _chainable(handler: Any) -> Optional[_SignalHandler]:
    """The handler herd's calls after its own, or ``None``: never Python's default for
    SIGINT (it raises KeyboardInterrupt), SIG_DFL (it ends the process), SIG_IGN or
    ``None`` (a handler set outside Python, which Python cannot call): each would end or
    break the step the signal arrived in, which is what herd's handler is there to avoid."""
    if not callable(handler) or handler is signal.default_int_handler:
        return None
    return cast(_SignalHandler, handler)


def _install() -> None:
    """Put herd's stop handler in front of whatever handles the stop signal now, which it
    then calls after its own (``_chainable``). Only in a herd job, only from the main
    thread; called again at every ``stop_requested()``.

    When the handler in place is one of herd's, nothing changes (a library that restored
    the handler it found puts back one of herd's, with what that one chained). When it is
    not, a library replaced herd's since: it may chain to herd's (Lightning does) or not
    (Transformers' JIT checkpointing keeps herd's only to restore it later), and nothing
    in a handler says which, so herd goes in front again and chains it. Either way every
    handler runs once per signal and herd hears the stop; see ``_StopHandler``."""
    sig = stop_signal()
    if sig is None or threading.current_thread() is not threading.main_thread():
        return
    with _lock:
        current = signal.getsignal(sig)
        if isinstance(current, _StopHandler):
            return
        try:
            signal.signal(sig, _StopHandler(_chainable(current)))
        except (ValueError, OSError):
            pass


def _distributed() -> Any:
    """torch.distributed when the program has imported it and initialised a process group
    of more than one rank; else ``None``."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist
    except (RuntimeError, ValueError):
        return None
    return None


def stop_requested() -> bool:
    """Whether herd asked this job to checkpoint and stop (a time limit or a preemption is
    near). Once torch.distributed is initialised the answer is agreed across ranks (an
    all-reduce of one number), so every rank stops at the same step: call it on **every**
    rank at the same point of each step. Always ``False`` outside a herd job."""
    global _agreed
    _install()
    if _agreed:
        return True
    dist = _distributed()
    if dist is None:
        _agreed = _received
        return _agreed
    torch = sys.modules["torch"]
    device = "cpu"
    backend = str(dist.get_backend()).lower()
    if "nccl" in backend and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    flag = torch.tensor([1 if _received else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    _agreed = bool(flag.item())
    return _agreed


def resume_from() -> Optional[str]:
    """The checkpoint this attempt resumes from (``HERD_RESUME_FROM``: the newest complete
    one in the checkpoint folder when the attempt started), or ``None``."""
    return os.environ.get("HERD_RESUME_FROM") or None


def checkpoint_dir() -> Optional[str]:
    """Where this job writes its checkpoints (``HERD_CHECKPOINT_DIR``, created if missing),
    or ``None`` when herd was not given one."""
    path = os.environ.get("HERD_CHECKPOINT_DIR")
    if not path:
        return None
    os.makedirs(path, exist_ok=True)
    return path


def _temporary(path: str) -> str:
    head, tail = os.path.split(os.path.abspath(path))
    # A leading `.` and a `.tmp` ending: a name herd never resumes from. The same on every
    # rank, so ranks that write one checkpoint together (torch.distributed.checkpoint,
    # Accelerate's save_state) write into the same place, and new in every attempt
    # (HERD_ATTEMPT), so nothing a killed attempt left half-written mixes in.
    attempt = os.environ.get("HERD_ATTEMPT", "0")
    return os.path.join(head, ".%s.%s.tmp" % (tail, attempt))


def _leftovers(path: str) -> List[str]:
    """What earlier attempts left half-written for ``path`` (their temporary paths)."""
    head, tail = os.path.split(os.path.abspath(path))
    prefix = ".%s." % tail
    try:
        names = os.listdir(head)
    except OSError:
        return []
    return [os.path.join(head, n) for n in names if n.startswith(prefix) and n.endswith(".tmp")]


def _rank() -> int:
    """This process's global rank: torch.distributed's when initialised, else ``RANK``."""
    dist = _distributed()
    if dist is not None:
        return int(dist.get_rank())
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)


def _fsync(path: str) -> None:
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if os.path.isdir(path) else os.O_RDONLY
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def save_atomic(path: Union[str, os.PathLike[str]]) -> Iterator[str]:
    """Write a checkpoint (a file or a folder) so that it appears under ``path`` only when
    complete: yields a temporary path beside it (``.NAME.ATTEMPT.tmp``: the same on every
    rank, new in every attempt, a name herd never resumes from); when the block ends without an exception, rank 0 renames what was
    written there to ``path`` (replacing an older ``path``); when it raises, rank 0 removes
    it. Enter it on rank 0 alone (``torch.save`` by rank 0) or on every rank (a save that
    every rank takes part in, such as Lightning's ``trainer.save_checkpoint`` or
    ``torch.distributed.checkpoint.save``, which return once the whole checkpoint is
    written); nothing written, nothing renamed.

        with herd.save_atomic(os.path.join(herd.checkpoint_dir(), "step-100.pt")) as tmp:
            torch.save(state, tmp)
    """
    path = os.fspath(path)
    tmp = _temporary(path)
    publish = _rank() == 0
    started, clock = time.time(), time.monotonic()
    try:
        yield tmp
    except BaseException:
        if publish:
            _remove(tmp)
        raise
    if not publish or not os.path.lexists(tmp):
        return
    if os.path.isdir(tmp):
        for root, _dirs, files in os.walk(tmp):
            for name in files:
                _fsync(os.path.join(root, name))
    _fsync(tmp)
    target = os.path.abspath(path)
    if os.path.isdir(target) and not os.path.islink(target):
        # A folder cannot replace a non-empty folder in one step: move the old one aside.
        old = tmp[: -len(".tmp")] + ".old.tmp"
        _remove(old)
        os.rename(target, old)
        os.replace(tmp, target)
        _remove(old)
    else:
        os.replace(tmp, target)
    _fsync(os.path.dirname(target))
    for stale in _leftovers(path):
        _remove(stale)
    _record_save(target, started, time.monotonic() - clock)


def _record_save(path: str, started: float, seconds: float) -> None:
    """One line for herd's report (its checkpoint advice): when a save began and how long
    it took, written, published and synced, into this attempt's log folder
    (``HERD_LOG_DIR/checkpoints.jsonl``). Nothing outside a herd job; a failed write is
    no error."""
    folder = os.environ.get("HERD_LOG_DIR")
    if not folder:
        return
    line = json.dumps({"path": path, "started": round(started, 3), "seconds": round(seconds, 4)})
    try:
        with open(os.path.join(folder, "checkpoints.jsonl"), "a") as f:
            f.write(line + "\n")
    except OSError:
        pass


def heartbeat() -> None:
    """Tell herd's hang watchdog this rank is making progress without printing a line
    (touches ``HERD_HEARTBEAT_FILE``; at most once a second, so it is cheap to call every
    step). Nothing outside a herd job."""
    global _last_beat
    path = os.environ.get("HERD_HEARTBEAT_FILE")
    if not path:
        return
    now = time.monotonic()
    if now - _last_beat < 1.0:
        return
    _last_beat = now
    try:
        with open(path, "a"):
            os.utime(path, None)
    except OSError:
        pass


def log(step: int, **values: Any) -> None:
    """Print one line of herd's metrics convention (docs/metrics.md), read by ``herd top``
    and ``herd report``: ``{"step": STEP, "loss": …}``. Non-finite numbers are left out
    (JSON has none); tensors and numpy numbers are turned into Python numbers."""
    record: Dict[str, Union[int, float]] = {"step": int(step)}
    for key, value in values.items():
        if hasattr(value, "item"):
            try:
                value = value.item()
            except (ValueError, RuntimeError):
                continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
            continue
        record[key] = value
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# The handler is in place from the first `import herd`, before any step can be lost to the
# signal's default action (which ends the process).
_install()
