//! The `herd` binary's command line, run as a user runs it.

use std::process::Command;

fn herd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .output()
        .expect("the herd binary runs")
}

/// SPEC §1's commands, in the order `herd --help` lists them.
const COMMANDS: [&str; 12] = [
    "submit", "run", "launch", "exec", "status", "logs", "cancel", "top", "report", "check",
    "hostlist", "env",
];

#[test]
fn help_lists_every_spec_command() {
    let out = herd(&["--help"]);
    assert!(out.status.success(), "herd --help failed: {out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert_eq!(listed, COMMANDS, "herd --help:\n{help}");
}

#[test]
fn version_prints_package_version() {
    let out = herd(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("herd {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unbuilt_commands_exit_2_and_say_so_without_output() {
    for command in COMMANDS {
        let out = herd(&[command, "--some-flag", "arg with space"]);
        assert_eq!(out.status.code(), Some(2), "herd {command}: {out:?}");
        assert!(
            out.stdout.is_empty(),
            "herd {command} printed on stdout: {out:?}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("`herd {command}` is not implemented")),
            "herd {command} stderr: {stderr}"
        );
    }
}

#[test]
fn unknown_command_is_a_usage_error() {
    let out = herd(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
}
