"""What a worker sees, for the warm-start test: `warm_probe.py OUT wait|nowait`.

Each rank writes OUT/attempt-K-rank-R.json: its whole environment, sys.argv, __main__'s
attributes, sys.path[0], the working folder, stdin, its signal dispositions, whether it
leads its own process group, sys.flags, and what a `multiprocessing` spawn child of the
script computed. It prints one step (so its agent starts the next attempt's standbys),
and in attempt 0 (with `wait`) waits until its agent holds a standby per local rank;
later attempts live 3.5 s, long enough to learn their modules, and write how many standbys
their agent then holds. Then it fails on
purpose with a traceback, so the next attempt starts from those standbys; no rank exits
before every rank of its attempt has printed its traceback (herd ends the others as soon as
one exits, which would cut a slower rank's traceback short).
"""

import json
import multiprocessing
import os
import signal
import sys
import time

import atexit

import __main__
import torch  # noqa: F401 - a module for the standby to learn


def square(x):
    return x * x


def standbys():
    """The agent's standby interpreters now (its children running herd's standby, not yet
    handed an attempt)."""
    agent, found = os.getppid(), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != agent:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                marked = b"# herd standby" in f.read()
            # A warm worker has the mark too, and stdin /dev/null; a standby waits on a pipe.
            if marked and os.readlink(f"/proc/{pid}/fd/0").startswith("pipe:"):
                found += 1
        except (OSError, ValueError, IndexError):
            continue
    return found


def record(out):
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        child = pool.apply(square, (7,))
    seen = {
        "env": dict(os.environ),
        "argv": sys.argv,
        "name": __name__,
        "file": __main__.__file__,
        "spec": repr(__main__.__spec__),
        "package": __main__.__package__,
        "cached": __main__.__cached__,
        "loader": type(__main__.__loader__).__name__,
        "main_names": sorted(vars(__main__)),
        "path0": sys.path[0],
        "cwd": os.getcwd(),
        "stdin": os.readlink("/proc/self/fd/0"),
        "signals": {
            name: str(signal.getsignal(getattr(signal, name)))
            for name in ["SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGCHLD"]
        },
        "own_group": os.getpgid(0) == os.getpid(),
        "flags": str(sys.flags),
        "executable": sys.executable,
        "spawn_child": child,
    }
    name = f"attempt-{os.environ['HERD_ATTEMPT']}-rank-{os.environ['RANK']}.json"
    with open(os.path.join(out, name + ".tmp"), "w") as f:
        json.dump(seen, f, indent=1, sort_keys=True)
    os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))


def wait_for_every_traceback(out):
    """At exit, after Python printed this rank's traceback: say so, and wait (up to 60 s)
    until every rank of the attempt has."""
    attempt, world = os.environ["HERD_ATTEMPT"], int(os.environ["WORLD_SIZE"])
    open(os.path.join(out, f"attempt-{attempt}-rank-{os.environ['RANK']}.printed"), "w").close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = [f for f in os.listdir(out) if f.startswith(f"attempt-{attempt}-") and f.endswith(".printed")]
        if len(done) >= world:
            return
        time.sleep(0.05)


def fail():
    raise RuntimeError("the probe fails on purpose")


if __name__ == "__main__":
    atexit.register(wait_for_every_traceback, sys.argv[1])
    record(sys.argv[1])
    print(json.dumps({"step": 1}), flush=True)
    if os.environ["HERD_ATTEMPT"] == "0" and sys.argv[2] == "wait":
        deadline = time.monotonic() + 120
        while standbys() < int(os.environ["LOCAL_WORLD_SIZE"]) and time.monotonic() < deadline:
            time.sleep(0.2)
    else:
        time.sleep(3.5)  # long enough to learn its modules (3 s in)
        # No restart is left after this attempt: its agent should hold no standby.
        name = f"attempt-{os.environ['HERD_ATTEMPT']}-rank-{os.environ['RANK']}.standbys"
        with open(os.path.join(sys.argv[1], name), "w") as f:
            f.write(f"{standbys()}\n")
    fail()
