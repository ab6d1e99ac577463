# herd's standby worker (docs/launch.md, "Warm starts"). The agent starts
# `python [FLAGS] -c LOADER SCRIPT ARGS...` (so `ps` shows the worker's own command line)
# with the worker's environment; LOADER reads this program from stdin and runs it. It reads
# one line of module names and imports them (torch, and what the job's workers had loaded
# before), then waits on stdin for one line, {"set": {...}, "unset": [...], "argv": [...],
# "learn": PATH}: the attempt's own variables and the command line after `python`. It then
# runs that script (or `-m` module) as `python ARGV` would: in the real `__main__`, with the
# same sys.argv, sys.path[0], __file__, exit codes and tracebacks. Nothing of its own stays
# in `__main__`, and only the modules it imported (and `json`, `threading`) stay loaded;
# sys.orig_argv is the standby's own.
def _herd_standby():
    import sys, os, importlib, importlib.machinery

    for name in sys.stdin.buffer.readline().decode().split():
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: B036 - an import that fails is the script's to see
            pass
    line = sys.stdin.buffer.readline()
    if not line:
        os._exit(0)  # the agent let it go unused
    import json, threading, builtins

    msg = json.loads(line)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for key in msg["unset"]:
        os.environ.pop(key, None)
    os.environ.update(msg["set"])
    argv = msg["argv"]
    learn = msg.get("learn")
    if learn:
        threading.Thread(target=_herd_learn, args=(learn,), name="herd-learn", daemon=True).start()
    main = sys.modules["__main__"].__dict__
    fresh = {
        "__name__": "__main__",
        "__doc__": None,
        "__package__": None,
        "__spec__": None,
        "__annotations__": {},
        "__builtins__": builtins,
    }
    if argv[0] == "-m":
        import runpy

        sys.argv = ["-m"] + argv[2:]
        sys.path[0] = os.getcwd()
        main.clear()
        main.update(fresh)
        main["__loader__"] = importlib.machinery.BuiltinImporter
        return lambda: runpy._run_module_as_main(argv[1])
    path = os.path.abspath(argv[0])
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        print(
            f"{sys.executable}: can't open file {path!r}: [Errno {e.errno}] {e.strerror}",
            file=sys.stderr,
        )
        sys.stderr.flush()
        os._exit(2)
    main.clear()
    main.update(fresh)
    main["__file__"] = path
    main["__cached__"] = None
    main["__loader__"] = importlib.machinery.SourceFileLoader("__main__", path)
    return lambda: exec(compile(source, path, "exec"), main)


def _herd_learn(path):
    # The installed modules the script has loaded, 3, 10, 30 and 90 s in: what the next
    # standby imports ahead of time. Only those under the interpreter's prefixes (the
    # script's own code is never imported early) and never herd's (it reads its variables
    # when imported).
    import sys, os, time

    roots = tuple(
        {os.path.join(os.path.realpath(p), "") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    )
    start = time.monotonic()
    for at in (3, 10, 30, 90):
        time.sleep(max(0.0, start + at - time.monotonic()))
        try:
            names = set()
            for name, mod in list(sys.modules.items()):
                top = name.partition(".")[0]
                where = getattr(mod, "__file__", None)
                if top in names or not where or top.startswith("_herd") or top in ("__main__", "herd"):
                    continue
                if os.path.realpath(where).startswith(roots):
                    names.add(top)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write("".join(f"{n}\n" for n in sorted(names)))
            os.replace(tmp, path)
        except BaseException:  # noqa: B036 - never the script's problem
            return


def _herd_run(run):
    import sys

    try:
        run()
    except (SystemExit, KeyboardInterrupt):
        # Python's own exit for both (a KeyboardInterrupt's traceback shows two lines of
        # this file: Python then ends by SIGINT, as it would have).
        raise
    except BaseException as e:  # noqa: B036 - printed as Python prints an uncaught one
        tb = e.__traceback__
        # This file's frames (`python -c`'s "<string>") are not the script's.
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        sys.exit(1)


_herd_run(_herd_standby())
