"""Test worker for `herd status`, `logs`, `cancel` and `--wait`.

waiter.py [--lines N] [--go FILE] [--exit CODE] [--fail-rank R] [--first-attempt-only]
          [--others-wait] [--ready DIR] [--term-exit CODE]

Every rank prints N numbered lines on stdout and one on stderr, a few milliseconds apart
(so ranks interleave), then waits for FILE to exist when --go is given (at most 300 s),
then exits: rank R (or every rank, when no --fail-rank) with CODE, the others with 0.
With --first-attempt-only the failure happens only in attempt 0 (HERD_ATTEMPT), so a
`--max-restarts` job fails once and then succeeds. With --others-wait, in an attempt where
rank R fails the other ranks wait (at most 300 s) to be torn down instead of ending first.
With --ready, each rank writes DIR/attempt-K-rank-R once its lines are out, and a failing
rank waits (at most 60 s) until every rank of the attempt has, so no line is lost to the
teardown. With --term-exit, SIGTERM makes a rank exit with CODE (143 is what a shell with a
`trap` or a launcher that catches the signal exits with) instead of dying of it.
"""
import argparse
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--lines", type=int, default=3)
p.add_argument("--go")
p.add_argument("--exit", type=int, default=0)
p.add_argument("--fail-rank", type=int)
p.add_argument("--first-attempt-only", action="store_true")
p.add_argument("--others-wait", action="store_true")
p.add_argument("--ready")
p.add_argument("--term-exit", type=int)
a = p.parse_args()
if a.term_exit is not None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(a.term_exit))

rank = int(os.environ["RANK"])
attempt = int(os.environ.get("HERD_ATTEMPT", "0"))
for i in range(a.lines):
    print(f"rank {rank} attempt {attempt} line {i}", flush=True)
    time.sleep(0.02)
print(f"rank {rank} attempt {attempt} on stderr", file=sys.stderr, flush=True)
world = int(os.environ["WORLD_SIZE"])
if a.ready:
    open(os.path.join(a.ready, f"attempt-{attempt}-rank-{rank}"), "w").close()

if a.go:
    deadline = time.time() + 300
    while not os.path.exists(a.go) and time.time() < deadline:
        time.sleep(0.2)

failing = a.fail_rank is None or a.fail_rank == rank
fails_here = a.exit and not (a.first_attempt_only and attempt != 0)
if not fails_here:
    failing = False
if fails_here and not failing and a.others_wait:
    time.sleep(300)
if failing and a.exit:
    if a.ready:
        deadline = time.time() + 60
        names = [f"attempt-{attempt}-rank-{r}" for r in range(world)]
        while time.time() < deadline and not all(
            os.path.exists(os.path.join(a.ready, n)) for n in names
        ):
            time.sleep(0.05)
    print(f"rank {rank} attempt {attempt} exits {a.exit}", file=sys.stderr, flush=True)
    sys.exit(a.exit)
print(f"rank {rank} attempt {attempt} done", flush=True)
