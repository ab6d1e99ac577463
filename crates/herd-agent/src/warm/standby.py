# herd's standby worker (docs/launch.md, "Warm starts"). The agent starts
# `python [FLAGS] -c LOADER SCRIPT ARGS...` (so `ps` shows the worker's own command line)
# with the worker's environment; LOADER reads this program from stdin and runs it. It reads
# one line of module names and imports them in turn (what the job's workers had loaded
# before; before anything is learned, torch and the installed modules the script imports,
# `*`), and one line naming the file (the agent's, unnamed) where it tells the agent which
# variables those imports read; then it waits on stdin for one line, {"set": {...}, "unset": [...], "argv": [...],
# "learn": PATH}: the attempt's own variables and the command line after `python`. It then
# runs that script (or `-m` module) as `python ARGV` would: in the real `__main__`, with the
# same sys.argv, sys.path[0], __file__, environment, exit codes and tracebacks. Nothing of
# its own stays in `__main__`, and only the modules it imported (and `json`, `threading`)
# stay loaded; sys.orig_argv is the standby's own.
def _herd_standby():
    import sys, os, importlib, importlib.machinery

    names = sys.stdin.buffer.readline().decode().split()
    reads = sys.stdin.buffer.readline().decode().rstrip("\n")
    # What the imports write into the environment is undone before the script runs (torch's
    # compiler sets TORCHINDUCTOR_CACHE_DIR when imported): it starts with the environment
    # a cold start gets.
    started = dict(os.environ)
    if "*" in names:
        names = [n for n in names if n != "*"] + _herd_script_imports(sys.argv[1:])
    read = _herd_reading(os)
    try:
        for name in names:
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: B036 - an import that fails is the script's to see
                pass
    finally:
        read = read()
    if reads:
        # Written once the imports are done, whole when it ends with a NUL: before, it tells
        # the agent nothing, and it then holds every variable to the worker's. The file is
        # the agent's (a file without a name); the script never inherits it.
        try:
            with open(reads, "w") as f:
                f.write("".join(f"{k}\n" for k in sorted(read)) + "\0")
        except OSError:
            pass
    line = sys.stdin.buffer.readline()
    if not line:
        os._exit(0)  # the agent let it go unused
    import json, threading, builtins

    msg = json.loads(line)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for key in [k for k in os.environ if k not in started]:
        del os.environ[key]
    os.environ.update(started)
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
        if not getattr(sys.flags, "safe_path", False):
            sys.path[0] = os.getcwd()
        main.clear()
        main.update(fresh)
        main["__loader__"] = importlib.machinery.BuiltinImporter
        return lambda: runpy._run_module_as_main(argv[1])
    path = os.path.abspath(argv[0])
    sys.argv = argv
    if not getattr(sys.flags, "safe_path", False):
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


def _herd_reading(os):
    # Record the variables Python code asks os.environ for (environ[k], .get, os.getenv,
    # `k in environ`, whether set or not) until the returned function is called, which
    # stops recording and returns their names. A pass over every variable (tqdm looks for
    # its TQDM_ ones so when imported: .items(), .copy()) is not a read of each. What C
    # code reads with getenv() is not seen either: the agent holds to this record only the
    # variables that give a worker's place in the job, which no library reads from C.
    import sys

    cls = type(os.environ)
    read = set()
    getitem = cls.__getitem__
    scans = {("__iter__", "_collections_abc"), ("copy", "os")}

    def __getitem__(self, key):
        caller = sys._getframe(1).f_code
        where = os.path.basename(caller.co_filename).strip("<>").split(" ")[-1]
        if (caller.co_name, where.removesuffix(".py")) not in scans:
            read.add(key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key))
        return getitem(self, key)

    cls.__getitem__ = __getitem__

    def stop():
        cls.__getitem__ = getitem
        return read

    return stop


def _herd_roots():
    # The interpreter's prefixes: where installed modules (and the standard library) are.
    import sys, os

    return tuple({os.path.join(os.path.realpath(p), "") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def _herd_script_imports(args):
    # What a standby imports before anything is learned, beside torch: the installed
    # top-level modules the script (ARGS: `SCRIPT ...` or `-m MODULE ...`) imports in its
    # own statements outside functions (those run when it starts), each found where
    # `python` will find it (sys.path[0] the script's folder, or the working folder for
    # -m). One found outside the interpreter's prefixes (the user's own code, or a file that
    # shadows an installed module) is never imported early; nothing of the script's runs.
    import sys, os, ast, importlib.machinery

    find = importlib.machinery.PathFinder.find_spec
    # -P (PYTHONSAFEPATH): no sys.path[0] of the script's, and none of `-c`'s.
    safe = getattr(sys.flags, "safe_path", False)
    try:
        if not args:
            return []
        if args[0] == "-m":
            search = sys.path[:] if safe else [os.getcwd()] + sys.path[1:]
            where, parts = search, args[1].split(".")
            for i in range(len(parts)):
                spec = find(".".join(parts[: i + 1]), where)
                where = spec and spec.submodule_search_locations
                if spec is None or (where is None and i + 1 < len(parts)):
                    return []
            if where is not None:
                spec = find(args[1] + ".__main__", where)
            source = spec and spec.origin
        else:
            source = os.path.abspath(args[0])
            search = sys.path[:] if safe else [os.path.dirname(os.path.realpath(source))] + sys.path[1:]
        with open(source, "rb") as f:
            tree = ast.parse(f.read(), source)
    except BaseException:  # noqa: B036 - the script's to find out when it runs
        return []
    tops = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                tops.extend(a.name.partition(".")[0] for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level == 0 and child.module:
                    tops.append(child.module.partition(".")[0])
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            elif isinstance(child, (ast.stmt, ast.excepthandler)) or type(child).__name__ == "match_case":
                visit(child)

    visit(tree)
    roots, found = _herd_roots(), []
    for top in dict.fromkeys(tops):
        if top in ("herd", "__future__", "__main__") or top.startswith("_herd"):
            continue
        try:
            spec = find(top, search)
            where = spec and (spec.origin if spec.has_location else next(iter(spec.submodule_search_locations or []), None))
            if where and os.path.realpath(where).startswith(roots):
                found.append(top)
        except BaseException:  # noqa: B036
            continue
    return found


def _herd_learn(path):
    # The installed modules the script has loaded, 3, 10, 30 and 90 s in, by their full
    # names: what the next standby imports ahead of time (a submodule counts: torch's
    # optimizers import torch._dynamo, seconds, when the first is made). Only those whose
    # file is under the interpreter's prefixes (the script's own code is never imported
    # early) and never herd's (it reads its variables when imported).
    import sys, os, time

    roots = _herd_roots()
    seen = {}
    start = time.monotonic()
    for at in (3, 10, 30, 90):
        time.sleep(max(0.0, start + at - time.monotonic()))
        try:
            names = []
            for name, mod in list(sys.modules.items()):
                ok = seen.get(name)
                if ok is None:
                    top = name.partition(".")[0]
                    where = getattr(mod, "__file__", None)
                    ok = bool(
                        where
                        and isinstance(where, str)
                        and not name.startswith("_herd")
                        and not top.startswith("__")
                        and top != "herd"
                        and os.path.realpath(where).startswith(roots)
                    )
                    seen[name] = ok
                if ok:
                    names.append(name)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write("".join(f"{n}\n" for n in names))
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
