use super::*;

use tokio::io::AsyncReadExt;

fn argv(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn only_a_plain_python_run_of_a_script_or_module_is_warmed() {
    for warm in [
        &["python", "train.py", "--lr", "3"][..],
        &["python3", "train.py"],
        &["/venv/bin/python3.11", "-u", "train.py"],
        &["python", "-B", "-OO", "-m", "pkg.train", "-x"],
        &["python", "-m", "torch.distributed.run", "--help"],
    ] {
        let entry = python_entry(&argv(warm));
        assert!(entry.is_some(), "{warm:?}");
    }
    for cold in [
        &["torchrun", "train.py"][..],
        &["python"],
        &["python", "-c", "print(1)"],
        &["python", "-"],
        &["python", "-m"],
        &["python", "-m", "-x"],
        &["python", "-X", "dev", "train.py"],
        &["python", "-I", "train.py"],
        &["python2", "train.py"],
        &["python3.", "train.py"],
        &["python3.x", "train.py"],
        &["pythonista", "train.py"],
        &["bash", "-c", "python train.py"],
    ] {
        assert_eq!(python_entry(&argv(cold)), None, "{cold:?}");
    }
    // An argument that is not text (a JSON message carries the command line) starts cold.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        let odd = vec![
            OsString::from("python"),
            OsString::from("train.py"),
            OsString::from_vec(vec![0xff, 0xfe]),
        ];
        assert_eq!(python_entry(&odd), None);
    }
}

#[test]
fn the_standby_runs_the_same_interpreter_with_the_same_flags_and_shows_the_script() {
    let entry = python_entry(&argv(&["/v/bin/python", "-u", "-m", "pkg", "a"]))
        .unwrap_or_else(|| panic!("a Python run"));
    assert_eq!(
        entry.standby_argv(),
        argv(&["/v/bin/python", "-u", "-c", LOADER, "-m", "pkg", "a"])
    );
    let payload = String::from_utf8(Entry::payload(
        &["torch".to_owned(), "numpy".to_owned()],
        Path::new("/tmp/herd-standby-7.reads"),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let (len, rest) = payload
        .split_once('\n')
        .unwrap_or_else(|| panic!("{payload}"));
    let len: usize = len.parse().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        &rest[..len],
        STANDBY,
        "the length is the program's, in bytes"
    );
    assert_eq!(&rest[len..], "torch numpy\n/tmp/herd-standby-7.reads\n");
}

#[test]
fn only_the_attempts_own_variables_may_change() {
    let started = env(&[
        ("RANK", "1"),
        ("MASTER_PORT", "29500"),
        ("HERD_ATTEMPT", "0"),
        ("OMP_NUM_THREADS", "4"),
    ]);
    let mut now = started.clone();
    now.insert("MASTER_PORT".into(), "29611".into());
    now.insert("HERD_ATTEMPT".into(), "1".into());
    now.insert("HERD_RESUME_FROM".into(), "/ck/step-100".into());
    assert!(
        misfit(&started, &now, None).is_empty(),
        "{:?}",
        misfit(&started, &now, None)
    );
    // A rank that moved, a thread count read at import, a variable gone: cold.
    now.insert("RANK".into(), "3".into());
    now.remove("OMP_NUM_THREADS");
    now.insert("NEW".into(), "x".into());
    assert_eq!(
        misfit(&started, &now, None),
        ["NEW", "OMP_NUM_THREADS", "RANK"]
    );
}

/// A worker's place (its ranks, its node, the node list) may differ from its standby's
/// only where the standby's imports are known not to have read it; anything else never.
#[test]
fn a_place_the_imports_did_not_read_may_change() {
    let started = env(&[
        ("RANK", "2"),
        ("NODE_RANK", "1"),
        ("SLURM_STEP_NODELIST", "gpu-a[01-02]"),
        ("LOCAL_RANK", "0"),
        ("OMP_NUM_THREADS", "4"),
    ]);
    let mut now = started.clone();
    now.insert("SLURM_STEP_NODELIST".into(), "gpu-a[01,03]".into());
    now.insert("RANK".into(), "0".into());
    now.insert("NODE_RANK".into(), "0".into());
    let none: HashSet<String> = ["HOME", "TORCH_LOGS"].map(String::from).into();
    assert!(misfit(&started, &now, Some(&none)).is_empty());
    // Imports that read RANK (Lightning's rank_zero_only does), or that are not done yet.
    let rank: HashSet<String> = ["RANK"].map(String::from).into();
    assert_eq!(misfit(&started, &now, Some(&rank)), ["RANK"]);
    assert_eq!(
        misfit(&started, &now, None),
        ["NODE_RANK", "RANK", "SLURM_STEP_NODELIST"]
    );
    // Not a place: a local rank or a thread count holds whatever was read.
    now.insert("LOCAL_RANK".into(), "1".into());
    now.insert("OMP_NUM_THREADS".into(), "2".into());
    assert_eq!(
        misfit(&started, &now, Some(&none)),
        ["LOCAL_RANK", "OMP_NUM_THREADS"]
    );
}

#[test]
fn learned_modules_are_read_one_a_line_and_torch_and_the_scripts_imports_are_the_first_guess() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("rank-0.modules");
    assert_eq!(learned(&file), ["torch", "torch._dynamo", "*"]);
    std::fs::write(&file, "numpy\ntorch\n\nbad name\ntorch._dynamo\nyaml\n")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(learned(&file), ["numpy", "torch", "torch._dynamo", "yaml"]);
}

/// Hand `standby` its worker and wait for it: its exit status and everything it printed.
async fn run_to_end(
    standby: Standby,
    entry: &Entry,
    env: &BTreeMap<String, String>,
    learn: &Path,
) -> (std::process::ExitStatus, String) {
    let mut h = standby
        .hand_off(entry, env, learn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = String::new();
    if let Some(o) = h.stdout.as_mut() {
        o.read_to_string(&mut out)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let status = h.child.wait().await.unwrap_or_else(|e| panic!("{e}"));
    (status, out)
}

/// A real standby (this machine's `python3`): it imports what it is told, becomes the
/// script with the attempt's variables and argv, and learns what the script loaded.
#[tokio::test]
async fn a_standby_becomes_the_script_with_the_attempts_variables() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let script = dir.path().join("probe.py");
    std::fs::write(
        &script,
        "import os, sys, json, __main__, time\n\
         print(json.dumps({'argv': sys.argv, 'name': __name__, 'file': __file__,\n\
           'path0': sys.path[0], 'port': os.environ.get('MASTER_PORT'),\n\
           'gone': os.environ.get('HERD_RESUME_FROM'), 'early': 'email' in sys.modules,\n\
           'stdin': os.readlink('/proc/self/fd/0')}))\n\
         sys.stdout.flush()\n\
         time.sleep(3.5)\n\
         sys.exit(3)\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let cmd = argv(&["python3", script.to_str().unwrap_or_default(), "a b", "--x"]);
    let entry = python_entry(&cmd).unwrap_or_else(|| panic!("a Python run"));
    let started = env(&[
        ("RANK", "0"),
        ("MASTER_PORT", "1"),
        ("HERD_RESUME_FROM", "/old"),
    ]);
    let pool = Pool::default();
    let standby = Standby::start(&entry, &cmd, &started, &["email".to_owned()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    pool.put(0, standby);
    // Another command, or a changed rank, does not take it (it is ended).
    let other = argv(&["python3", "other.py"]);
    assert!(pool.take(0, &other, &started).is_err());
    let standby = Standby::start(&entry, &cmd, &started, &["email".to_owned()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    pool.put(0, standby);
    let now = env(&[("RANK", "0"), ("MASTER_PORT", "2")]);
    let standby = pool
        .take(0, &cmd, &now)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("the standby fits"));
    // `ps` and `pgrep -f` see the script and its arguments.
    let shown = std::fs::read(format!("/proc/{}/cmdline", standby.pid)).unwrap_or_default();
    let shown = String::from_utf8_lossy(&shown).replace('\0', " ");
    assert!(
        shown.contains("# herd standby")
            && shown.ends_with(&format!("{} a b --x ", script.display())),
        "{shown}"
    );
    let learn = dir.path().join("rank-0.modules");
    let (status, out) = run_to_end(standby, &entry, &now, &learn).await;
    assert_eq!(status.code(), Some(3), "the script's own exit code: {out}");
    let got: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
    let script_s = script.to_str().unwrap_or_default();
    assert_eq!(got["argv"], serde_json::json!([script_s, "a b", "--x"]));
    assert_eq!(got["name"], "__main__");
    assert_eq!(got["file"], script_s);
    assert_eq!(
        got["path0"],
        std::fs::canonicalize(dir.path())
            .unwrap_or_default()
            .to_str()
            .unwrap_or_default()
    );
    assert_eq!(got["port"], "2", "the attempt's own port");
    assert_eq!(got["gone"], serde_json::Value::Null, "unset when not given");
    assert_eq!(got["early"], true, "imported before the hand-off");
    assert_eq!(got["stdin"], "/dev/null");
    // 3 s in, it wrote the installed modules it had loaded, by full name (`json` and its
    // `json.decoder`), never `__main__`.
    let modules = learned(&learn);
    assert!(
        ["json", "json.decoder"]
            .iter()
            .all(|m| modules.iter().any(|n| n == m)),
        "{modules:?}"
    );
    assert!(!modules.iter().any(|m| m == "__main__" || m == "herd"));
    pool.end().await;
}

/// Before anything is learned (`*`), a real standby imports the installed modules the
/// script imports outside its functions, as its `python` would find them: not one in a
/// function, not the script's own file that shadows an installed module; the same for a
/// `-m` package's `__main__`.
#[tokio::test]
async fn a_first_standby_imports_what_the_script_imports_and_nothing_of_its_own() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let report = "import sys, json\n\
         early = {m: m in sys.modules for m in ('wave', 'fractions', 'tabnanny', 'colorsys')}\n\
         try:\n    import wave\nexcept ImportError:\n    pass\n\
         class C:\n    from fractions import Fraction\n\
         def later():\n    import tabnanny\n\
         import colorsys\n\
         print(json.dumps({'early': early, 'colorsys': colorsys.__file__}))\n";
    let script = dir.path().join("train.py");
    std::fs::write(&script, report).unwrap_or_else(|e| panic!("{e}"));
    // The project's own colorsys.py, beside the script, shadows the standard library's.
    std::fs::write(dir.path().join("colorsys.py"), "X = 1\n").unwrap_or_else(|e| panic!("{e}"));
    let pkg = dir.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(pkg.join("__init__.py"), "").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(pkg.join("__main__.py"), report).unwrap_or_else(|e| panic!("{e}"));
    let here = dir.path().to_str().unwrap_or_default().to_owned();
    let vars = env(&[("PYTHONPATH", &here)]);
    let star = vec!["*".to_owned()];
    for cmd in [
        argv(&["python3", script.to_str().unwrap_or_default()]),
        argv(&["python3", "-m", "pkg"]),
    ] {
        let entry = python_entry(&cmd).unwrap_or_else(|| panic!("a Python run"));
        let standby = Standby::start(&entry, &cmd, &vars, &star)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let (status, out) = run_to_end(standby, &entry, &vars, &dir.path().join("learn")).await;
        assert!(status.success(), "{cmd:?}: {out}");
        let got: serde_json::Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
        assert_eq!(
            got["early"],
            serde_json::json!({"wave": true, "fractions": true, "tabnanny": false, "colorsys": false}),
            "{cmd:?}"
        );
        assert_eq!(
            got["colorsys"],
            format!("{here}/colorsys.py"),
            "{cmd:?}: the script's own module"
        );
    }
}

/// The standby's own record of what its imports read, with this machine's `python3`: a
/// module that reads `RANK` when imported keeps its standby from a worker of another rank
/// (the agent says why); one that reads none of the worker's place (it only passes over
/// every variable) lets the standby become that worker, which sees its own rank.
#[tokio::test]
async fn a_standby_whose_imports_read_the_rank_never_becomes_another_ranks_worker() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let script = dir.path().join("probe.py");
    std::fs::write(
        &script,
        "import json, os, reads_rank\n\
         print(json.dumps({'rank': os.environ['RANK'], 'seen': reads_rank.RANK}))\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.path().join("reads_rank.py"),
        "import os\nRANK = os.environ.get('RANK')\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // A pass over every variable (as tqdm makes when imported) is not a read of each.
    std::fs::write(
        dir.path().join("reads_nothing.py"),
        "import os\nMINE = {k: v for k, v in os.environ.items() if k.startswith('MINE_')}\n\
         os.environ.copy()\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let here = dir.path().to_str().unwrap_or_default().to_owned();
    let cmd = argv(&["python3", script.to_str().unwrap_or_default()]);
    let entry = python_entry(&cmd).unwrap_or_else(|| panic!("a Python run"));
    let started = env(&[("RANK", "3"), ("PYTHONPATH", &here)]);
    let now = env(&[("RANK", "1"), ("PYTHONPATH", &here)]);
    let ready = |standby: &Standby| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while standby.read().is_none() {
            assert!(
                std::time::Instant::now() < until,
                "the standby never said what it read"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let pool = Pool::default();
    for (module, fits) in [("reads_rank", false), ("reads_nothing", true)] {
        let modules = [module.to_owned(), "reads_rank".to_owned()];
        let modules = if fits { &modules[..1] } else { &modules[..] };
        let standby = Standby::start(&entry, &cmd, &started, modules)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        ready(&standby);
        pool.put(0, standby);
        match pool.take(0, &cmd, &now) {
            Err(why) => {
                assert!(!fits, "{module}: {why}");
                assert_eq!(why, "RANK changed; its imports read the worker's place");
            }
            Ok(standby) => {
                assert!(fits, "{module} read RANK, yet its standby was taken");
                let standby = standby.unwrap_or_else(|| panic!("a standby"));
                let (status, out) =
                    run_to_end(standby, &entry, &now, &dir.path().join("learn")).await;
                assert!(status.success(), "{out}");
                // The worker's own rank; its module was imported again by the script (it
                // was not imported early), so it read the worker's rank too.
                assert_eq!(out.trim(), r#"{"rank": "1", "seen": "1"}"#);
            }
        }
    }
}
