//! `txbed completions SHELL` and `txbed man`: generated from the clap definition
//! (clap_complete, clap_mangen), so they never drift from the real flags.

use std::path::PathBuf;
use std::process::ExitCode;

use super::fail;

#[derive(clap::Args)]
pub struct CompletionArgs {
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args)]
pub struct ManArgs {
    /// Write txbed.1 and txbed-COMMAND.1 for every command here (created if missing);
    /// without it, print txbed.1 to stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn completions(a: CompletionArgs, mut cmd: clap::Command) -> ExitCode {
    clap_complete::generate(a.shell, &mut cmd, "txbed", &mut std::io::stdout());
    ExitCode::SUCCESS
}

pub fn man(a: ManArgs, cmd: clap::Command) -> ExitCode {
    let Some(dir) = a.out else {
        return match clap_mangen::Man::new(cmd).render(&mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        };
    };
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        clap_mangen::generate_to(cmd, &dir)
    };
    match write() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format!("{}: {e}", dir.display())),
    }
}
