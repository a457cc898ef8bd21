//! One module per `txbed` command: its arguments (`Args`) and what it does (`run`).
//! Exit codes everywhere: 0 success, 1 a run or check found a problem, 2 an error.

use std::process::ExitCode;

pub mod bench_verbs;
pub mod campaign;
pub mod check;
pub mod compare;
pub mod devices;
pub mod hybrid_search;
pub mod list;
pub mod merge;
pub mod plot;
pub mod protocols;
pub mod replay;
pub mod run;
pub mod selftest;
pub mod sensitivity;
pub mod shell;
pub mod sweep;
pub mod validate;
pub mod workloads;

/// Where a real run executes: the simulator, or real processes over sockets or verbs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Sim,
    Sockets,
    Verbs,
}

/// Writes DIR/report.html, the page to open first (`txbed_report::html`), and prints its path
/// unless quiet.
pub fn html_page(dir: &std::path::Path, quiet: bool) -> Result<(), String> {
    let page = txbed_report::html::write_page(dir)?;
    if !quiet {
        eprintln!("{}", page.display());
    }
    Ok(())
}

/// The provenance of this command's outputs: this build, the command line, host and start.
pub fn provenance(backend: &str) -> txbed_report::provenance::Provenance {
    let dirty = match env!("TXBED_GIT_DIRTY") {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    };
    txbed_report::provenance::Provenance::capture(env!("CARGO_PKG_VERSION"), env!("TXBED_GIT_COMMIT"), dirty, backend)
}

/// Prints `error: ...` and returns exit code 2.
pub fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(2)
}

#[cfg(not(feature = "verbs"))]
pub const NO_VERBS: &str =
    "this txbed was built without the \"verbs\" feature; rebuild with cargo build --release -p txbed --features verbs";

/// `--jobs N`: at least one simulation at once, at most 4096 (more threads than that only
/// costs memory).
pub fn parse_jobs(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) if n > 4096 => Err(format!("{n} is more than 4096 simulations at once")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a whole number of simulations ({e})")),
    }
}

/// Simulations to run at once: `--jobs`, else every core.
pub fn jobs(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
