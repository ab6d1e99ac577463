"""Unit tests of the `herd` Python module, with the standard library only (no torch): run
by `crates/herd/tests/python.rs` as `python3 -m unittest discover -s python/tests`."""

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from contextlib import redirect_stdout
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import herd  # noqa: E402


def run_python(code, env):
    """Run `code` in a fresh interpreter that imports herd from this folder."""
    full = dict(os.environ)
    for key in list(full):
        if key.startswith("HERD_") or key == "RANK":
            del full[key]
    full.update(env)
    full["PYTHONPATH"] = os.path.dirname(HERE)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


class Python38(unittest.TestCase):
    def test_every_file_parses_as_python_3_8(self):
        import ast

        package = os.path.join(os.path.dirname(HERE), "herd")
        for name in sorted(os.listdir(package)):
            if name.endswith(".py"):
                with open(os.path.join(package, name)) as f:
                    ast.parse(f.read(), name, feature_version=(3, 8))


class OutsideHerd(unittest.TestCase):
    def test_every_function_is_a_harmless_no_op(self):
        out = run_python(
            """
            import os, signal, herd
            assert not herd.in_job()
            assert herd.stop_signal() is None
            assert herd.stop_requested() is False
            assert herd.resume_from() is None and herd.checkpoint_dir() is None
            herd.heartbeat()
            # No handler was installed: SIGUSR1 keeps its default action.
            assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
            print("ok")
            """,
            {},
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "ok")


class TheStop(unittest.TestCase):
    def test_the_stop_signal_sets_the_flag_and_does_not_kill(self):
        out = run_python(
            """
            import os, signal, herd
            assert herd.stop_requested() is False
            os.kill(os.getpid(), signal.SIGUSR2)
            assert herd.stop_requested() is True
            assert herd.stop_requested() is True   # it stays
            print("alive")
            """,
            {"HERD_ATTEMPT": "0", "HERD_STOP_SIGNAL": "USR2"},
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "alive")

    def test_the_default_stop_signal_is_usr1(self):
        out = run_python(
            """
            import os, signal, herd
            assert herd.stop_signal() == signal.SIGUSR1
            os.kill(os.getpid(), signal.SIGUSR1)
            print(herd.stop_requested())
            """,
            {"HERD_ATTEMPT": "3"},
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "True")

    def test_a_handler_set_before_or_after_herd_is_still_called(self):
        out = run_python(
            """
            import os, signal
            seen = []
            signal.signal(signal.SIGUSR1, lambda s, f: seen.append("before"))
            import herd
            os.kill(os.getpid(), signal.SIGUSR1)
            assert herd.stop_requested() and seen == ["before"], seen
            # The program's own handler, set later, replaces herd's: herd chains it again
            # at its next question.
            herd._agreed = herd._received = False
            signal.signal(signal.SIGUSR1, lambda s, f: seen.append("after"))
            assert herd.stop_requested() is False
            os.kill(os.getpid(), signal.SIGUSR1)
            assert herd.stop_requested() and seen == ["before", "after"], seen
            print("ok")
            """,
            {"HERD_ATTEMPT": "0", "HERD_STOP_SIGNAL": "USR1"},
        )
        self.assertEqual(out.returncode, 0, out.stderr)


# Every test below runs once per stop signal a user may pick (`--stop-signal`).
STOP_SIGNALS = ("USR1", "TERM", "INT")

# Put in front of each chaining test's code: `sig` is the stop signal, `lib_calls` counts
# the library handler's calls, `step()` is one training step in which the signal arrives
# (delivered the way `how` says), and `check(n)` asserts that herd saw the stop and the
# library handler ran exactly `n` times in all.
CHAINING_PRELUDE = """
import os, signal, sys
sig = getattr(signal, "SIG" + os.environ["HERD_STOP_SIGNAL"])
lib_calls = []

def deliver(how):
    if how == "kill":
        os.kill(os.getpid(), sig)
    else:
        signal.raise_signal(sig)

def step(how):
    # The rest of the step must run: the signal never raises in the middle of it.
    try:
        deliver(how)
        done = sum(range(1000))
    except BaseException as e:
        print("raised mid-step:", type(e).__name__, e)
        sys.exit(3)
    assert done == 499500

def check(n):
    import herd
    assert herd.stop_requested() is True, "herd saw the stop"
    ran = len(lib_calls)
    assert ran == n, "the library handler ran %d times, not %d" % (ran, n)
"""


def run_chaining(test, code, signame):
    """Run `code` (after CHAINING_PRELUDE) with `signame` as herd's stop signal, for both
    ways of delivering it; assert it ended well: no RecursionError, nothing raised mid-step."""
    for how in ("kill", "raise_signal"):
        with test.subTest(signal=signame, delivered_by=how):
            out = run_python(
                CHAINING_PRELUDE + textwrap.dedent(code).replace("HOW", repr(how)),
                {"HERD_ATTEMPT": "0", "HERD_STOP_SIGNAL": signame},
            )
            test.assertNotIn("RecursionError", out.stdout + out.stderr)
            test.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            test.assertEqual(out.stdout.strip().splitlines()[-1:], ["ok"], out.stdout)


class Chaining(unittest.TestCase):
    """herd's handler and a library's (Lightning's, Transformers', the user's own) in front
    of or behind each other, with herd re-installing at every `stop_requested()`."""

    def test_a_library_handler_over_herds_that_chains_to_it_runs_once_never_recursing(self):
        # What Lightning's _SignalConnector does with SIGTERM: keep the previous handler
        # (herd's) and call it after its own.
        code = """
            import herd
            previous = signal.getsignal(sig)
            def library(signum, frame):
                lib_calls.append(signum)
                if callable(previous):
                    previous(signum, frame)
            signal.signal(sig, library)
            for _ in range(3):                     # herd asks at every step
                assert herd.stop_requested() is False
            step(HOW)
            check(1)
            step(HOW)                              # a second signal: once more
            check(2)
            print("ok")
            """
        for name in STOP_SIGNALS:
            run_chaining(self, code, name)

    def test_a_library_handler_installed_before_herd_is_chained_once(self):
        # The library was first; it chains only a Python handler before it (like
        # Lightning, which never chains SIG_DFL), so it ends the chain.
        code = """
            previous = signal.getsignal(sig)
            def library(signum, frame):
                lib_calls.append(signum)
                if callable(previous) and previous is not signal.default_int_handler:
                    previous(signum, frame)
            signal.signal(sig, library)
            import herd
            for _ in range(3):
                assert herd.stop_requested() is False
            step(HOW)
            check(1)
            print("ok")
            """
        for name in STOP_SIGNALS:
            run_chaining(self, code, name)

    def test_a_library_handler_over_herds_that_does_not_chain_does_not_silence_herd(self):
        # What Transformers' JIT checkpointing does with SIGTERM: replace the handler and
        # keep the previous one only to restore it after training.
        code = """
            import herd
            original = signal.signal(sig, lambda signum, frame: lib_calls.append(signum))
            assert herd.stop_requested() is False  # herd goes in front again, chaining it
            assert herd.stop_requested() is False
            step(HOW)
            check(1)
            signal.signal(sig, original)           # restored after training: herd's again
            herd._agreed = herd._received = False
            assert herd.stop_requested() is False
            step(HOW)
            check(1)
            print("ok")
            """
        for name in STOP_SIGNALS:
            run_chaining(self, code, name)

    def test_herd_twice_in_the_chain_still_chains_the_first_handler_once(self):
        # The user's handler, then herd, then a library that chains herd's, then herd in
        # front again: every handler before herd is still called, once.
        code = """
            first = []
            signal.signal(sig, lambda signum, frame: first.append(signum))
            import herd
            previous = signal.getsignal(sig)
            def library(signum, frame):
                lib_calls.append(signum)
                previous(signum, frame)
            signal.signal(sig, library)
            assert herd.stop_requested() is False
            step(HOW)
            check(1)
            assert first == [sig], first
            print("ok")
            """
        for name in STOP_SIGNALS:
            run_chaining(self, code, name)

    def test_a_library_that_re_chains_itself_at_every_step_never_recurses(self):
        # A library that, like herd, goes back in front at every step, and points its
        # saved previous handler at whatever it found there (herd's, which chains it).
        code = """
            import herd
            class Library:
                previous = None
                def install(self):
                    current = signal.getsignal(sig)
                    if current is not self.handler:
                        self.previous = current
                        signal.signal(sig, self.handler)
                def handler(self, signum, frame):
                    lib_calls.append(signum)
                    if callable(self.previous):
                        self.previous(signum, frame)
            library = Library()
            for _ in range(3):
                library.install()
                assert herd.stop_requested() is False
            library.install()
            step(HOW)
            # Twice, never more: once by Python, once by herd's handler that the library's
            # saved one points at (herd cannot know it leads back); that one ends there.
            check(2)
            print("ok")
            """
        for name in STOP_SIGNALS:
            run_chaining(self, code, name)

    def test_the_default_action_is_never_chained(self):
        # No library: the stop signal's default (end the process; KeyboardInterrupt for
        # INT) never runs, and the step goes on to its end.
        code = """
            import herd
            assert signal.getsignal(sig) is not signal.default_int_handler
            for _ in range(3):
                assert herd.stop_requested() is False
            step(HOW)
            check(0)
            step(HOW)
            check(0)
            print("ok")
            """
        for name in STOP_SIGNALS:
            run_chaining(self, code, name)

    def test_an_ignored_stop_signal_is_still_heard_and_never_chained(self):
        code = """
            signal.signal(sig, signal.SIG_IGN)
            import herd
            step(HOW)
            check(0)
            print("ok")
            """
        for name in STOP_SIGNALS:
            run_chaining(self, code, name)


class Variables(unittest.TestCase):
    def test_resume_from_and_checkpoint_dir_read_herds_variables(self):
        with tempfile.TemporaryDirectory() as d:
            ckpt = os.path.join(d, "ckpts")
            env = {"HERD_CHECKPOINT_DIR": ckpt, "HERD_RESUME_FROM": os.path.join(ckpt, "s-9")}
            with mock.patch.dict(os.environ, env):
                self.assertEqual(herd.resume_from(), os.path.join(ckpt, "s-9"))
                self.assertEqual(herd.checkpoint_dir(), ckpt)
                self.assertTrue(os.path.isdir(ckpt), "created")
            with mock.patch.dict(os.environ, {"HERD_RESUME_FROM": ""}):
                self.assertIsNone(herd.resume_from())


class SaveAtomic(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.d = self.dir.name
        patcher = mock.patch.dict(os.environ, {"RANK": "0"})
        patcher.start()
        self.addCleanup(patcher.stop)

    def names(self):
        return sorted(os.listdir(self.d))

    def test_a_file_appears_only_when_complete(self):
        final = os.path.join(self.d, "step-10.pt")
        with herd.save_atomic(final) as tmp:
            name = os.path.basename(tmp)
            self.assertTrue(name.startswith(".") and name.endswith(".tmp"), name)
            self.assertEqual(os.path.dirname(tmp), self.d)
            with open(tmp, "w") as f:
                f.write("weights")
            self.assertFalse(os.path.exists(final))
        self.assertEqual(self.names(), ["step-10.pt"])
        with open(final) as f:
            self.assertEqual(f.read(), "weights")

    def test_a_folder_replaces_an_older_one(self):
        final = os.path.join(self.d, "step-20")
        os.makedirs(final)
        with open(os.path.join(final, "old"), "w") as f:
            f.write("old")
        with herd.save_atomic(final) as tmp:
            os.makedirs(tmp)
            with open(os.path.join(tmp, "shard-0"), "w") as f:
                f.write("new")
        self.assertEqual(self.names(), ["step-20"])
        self.assertEqual(os.listdir(final), ["shard-0"])

    def test_an_exception_leaves_nothing(self):
        final = os.path.join(self.d, "step-30.pt")
        with self.assertRaises(RuntimeError):
            with herd.save_atomic(final) as tmp:
                with open(tmp, "w") as f:
                    f.write("half")
                raise RuntimeError("disk full")
        self.assertEqual(self.names(), [])

    def test_nothing_written_nothing_published(self):
        with herd.save_atomic(os.path.join(self.d, "x.pt")):
            pass
        self.assertEqual(self.names(), [])

    def test_what_a_killed_attempt_left_is_never_mixed_in_and_goes(self):
        final = os.path.join(self.d, "step-50")
        # Attempt 0 was killed in the middle of writing step-50 together.
        with mock.patch.dict(os.environ, {"HERD_ATTEMPT": "0"}):
            leftover = herd._temporary(final)
        os.makedirs(leftover)
        with open(os.path.join(leftover, "stale-shard"), "w") as f:
            f.write("half")
        with mock.patch.dict(os.environ, {"HERD_ATTEMPT": "1"}):
            with herd.save_atomic(final) as tmp:
                self.assertNotEqual(tmp, leftover, "a new name in a new attempt")
                os.makedirs(tmp)
                with open(os.path.join(tmp, "shard-0"), "w") as f:
                    f.write("whole")
        self.assertEqual(os.listdir(final), ["shard-0"], "nothing stale mixed in")
        self.assertEqual(self.names(), ["step-50"], "the leftover is gone")

    def test_only_rank_0_publishes(self):
        # A save every rank takes part in: rank 1 writes its part into the same temporary
        # path, but only rank 0's exit (after the save returned everywhere) publishes.
        final = os.path.join(self.d, "step-40")
        with herd.save_atomic(final) as tmp:
            os.makedirs(tmp)
            with mock.patch.dict(os.environ, {"RANK": "1"}):
                with herd.save_atomic(final) as tmp1:
                    self.assertEqual(tmp1, tmp, "the same temporary path on every rank")
                    with open(os.path.join(tmp1, "shard-1"), "w") as f:
                        f.write("rank 1")
                self.assertFalse(os.path.exists(final), "rank 1 publishes nothing")
            with open(os.path.join(tmp, "shard-0"), "w") as f:
                f.write("rank 0")
        self.assertEqual(self.names(), ["step-40"])
        self.assertEqual(sorted(os.listdir(final)), ["shard-0", "shard-1"])

    def test_each_published_save_is_timed_into_the_attempts_log_folder(self):
        logs = os.path.join(self.d, "attempt-3")
        os.makedirs(logs)
        final = os.path.join(self.d, "step-60.pt")
        before = time.time()
        with mock.patch.dict(os.environ, {"HERD_LOG_DIR": logs}):
            with herd.save_atomic(final) as tmp:
                with open(tmp, "w") as f:
                    f.write("weights")
                time.sleep(0.05)
            # Nothing written, nothing published: no record.
            with herd.save_atomic(os.path.join(self.d, "empty.pt")):
                pass
            # Rank 1's part of a save every rank takes: rank 0 records it.
            with mock.patch.dict(os.environ, {"RANK": "1"}):
                with herd.save_atomic(os.path.join(self.d, "x.pt")) as tmp:
                    with open(tmp, "w") as f:
                        f.write("part")
        with open(os.path.join(logs, "checkpoints.jsonl")) as f:
            lines = [json.loads(l) for l in f]
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(lines[0]["path"], final)
        self.assertGreaterEqual(lines[0]["seconds"], 0.05)
        self.assertTrue(before - 0.01 <= lines[0]["started"] <= time.time(), lines[0])
        # Outside a herd job (no HERD_LOG_DIR) nothing is written anywhere.
        with herd.save_atomic(os.path.join(self.d, "step-70.pt")) as tmp:
            with open(tmp, "w") as f:
                f.write("w")
        self.assertEqual(sorted(os.listdir(logs)), ["checkpoints.jsonl"])


class Progress(unittest.TestCase):
    def test_heartbeat_touches_the_file_at_most_once_a_second(self):
        with tempfile.TemporaryDirectory() as d:
            beat = os.path.join(d, "rank-0.heartbeat")
            with mock.patch.dict(os.environ, {"HERD_HEARTBEAT_FILE": beat}):
                herd._last_beat = 0.0
                herd.heartbeat()
                first = os.stat(beat).st_mtime_ns
                os.utime(beat, ns=(first - 10**9, first - 10**9))
                herd.heartbeat()  # within the second: nothing
                self.assertEqual(os.stat(beat).st_mtime_ns, first - 10**9)
                herd._last_beat = time.monotonic() - 2
                herd.heartbeat()
                self.assertGreater(os.stat(beat).st_mtime_ns, first - 10**9)

    def test_log_prints_one_line_of_the_convention(self):
        class Scalar:
            def item(self):
                return 0.25

        buf = io.StringIO()
        with redirect_stdout(buf):
            herd.log(7, loss=Scalar(), lr=1e-3, name="x", done=True, bad=float("nan"))
        self.assertEqual(json.loads(buf.getvalue()), {"step": 7, "loss": 0.25, "lr": 0.001})
        self.assertEqual(buf.getvalue().count("\n"), 1)


if __name__ == "__main__":
    unittest.main()
