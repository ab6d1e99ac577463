//! `herd completions SHELL` and `herd man`: shell completions (clap_complete) and the man
//! page (clap_mangen), generated from the same command tree as `--help`, so they never
//! drift from it.

use std::io::Write;

use clap::{Args, CommandFactory};

use crate::{Cli, CliError, ExitStatus};

/// `herd completions` arguments.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `herd man` arguments.
#[derive(Debug, Args)]
pub struct ManArgs {}

/// Print the completion script for `args.shell`.
pub fn completions(args: CompletionsArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "herd", out);
    Ok(ExitStatus::Success)
}

/// Print the man page `herd(1)`, in roff, with a section per command.
pub fn man(_args: ManArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let cmd = Cli::command();
    let page = clap_mangen::Man::new(cmd.clone());
    page.render_title(out)?;
    page.render_name_section(out)?;
    page.render_synopsis_section(out)?;
    page.render_description_section(out)?;
    page.render_options_section(out)?;
    // Each command's own synopsis, description and options, as `herd CMD --help` shows
    // them, and so on for the commands under it (`herd hostlist expand`).
    for sub in cmd.get_subcommands() {
        command_section(sub, "herd", out)?;
    }
    page.render_version_section(out)?;
    Ok(ExitStatus::Success)
}

/// One `.SH` section for `sub` (under `parent`), then one for each command under it.
fn command_section(sub: &clap::Command, parent: &str, out: &mut dyn Write) -> std::io::Result<()> {
    if sub.is_hide_set() {
        return Ok(());
    }
    let path = format!("{parent} {}", sub.get_name());
    writeln!(out, ".SH \"{}\"", path.to_uppercase())?;
    let page = clap_mangen::Man::new(sub.clone().bin_name(path.clone()));
    let mut section = Vec::new();
    page.render_synopsis_section(&mut section)?;
    page.render_description_section(&mut section)?;
    page.render_options_section(&mut section)?;
    // The command's own `.SH` headings become sub-sections of its section.
    let text = String::from_utf8_lossy(&section).replace(".SH ", ".SS ");
    out.write_all(text.as_bytes())?;
    for s in sub.get_subcommands() {
        command_section(s, &path, out)?;
    }
    Ok(())
}
