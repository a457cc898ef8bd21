//! The `txbed` command-line tool: parses the command line and hands each command to its module
//! under `commands/`.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod commands;
mod progress;

/// A well-kept allocator: allocation was a tenth of the simulator's time with the system's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// txbed: a testbed for RDMA-enabled distributed transactions.
#[derive(Parser)]
#[command(name = "txbed", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario (on the simulator unless the scenario or --backend says otherwise) and
    /// print its report.
    Run(commands::run::Args),
    /// Run every combination of a sweep file's axes and seeds in parallel; write results.csv,
    /// summary.csv (mean and 95% CI across seeds) and plots.
    Sweep(commands::sweep::Args),
    /// Merge the shards of a sweep (`txbed sweep --shard I/N` on a cluster) into the outputs
    /// one machine's sweep writes.
    Merge(commands::merge::Args),
    /// Run every valid hybrid code of a scenario's protocol over several seeds and rank the
    /// codes by throughput and latency, with 95% confidence intervals (RCC Sec. 5.1).
    HybridSearch(commands::hybrid_search::Args),
    /// Lower and raise each NIC/host profile parameter (default by 30%), re-run the scenario at
    /// every point and report how throughput, latency and aborts move; with --compare, whether
    /// a comparison's ranking holds. Writes sensitivity.csv and tornado plots.
    Sensitivity(commands::sensitivity::Args),
    /// Run a scenario over many seeds, each with its own random fault schedule, in parallel;
    /// check every run, shrink each failure to a minimal schedule and print the command that
    /// replays it. Writes campaign.csv and failures/*.ron.
    Campaign(commands::campaign::Args),
    /// Re-run the scenario and seed of a report (`txbed run --out DIR`) and check the digest.
    Replay(commands::replay::Args),
    /// Compare two runs' reports or two sweeps' results: every numeric metric side by side with
    /// the ratio B/A and, across seeds, Welch's t-test (significant at 5% or not).
    Compare(commands::compare::Args),
    /// Plot a sweep's summary.csv or results.csv (SVG and PNG next to it, or in --out).
    Plot(commands::plot::Args),
    /// One line per protocol, preset, hybrid code, workload, NIC profile or scenario file.
    List(commands::list::Args),
    /// List every protocol (the long form of `list protocols`): description, isolation, stages and modes, options with their
    /// defaults, presets, planted bugs and RPC handlers.
    Protocols(commands::protocols::Args),
    /// List every workload (the long form of `list workloads`) a scenario can name, with its default parameters.
    Workloads(commands::workloads::Args),
    /// List RDMA devices, their ports and GIDs (needs a build with the "verbs" feature).
    Devices,
    /// Two nodes in this process exchange WRITE, WRITE_WITH_IMM and RC SEND over a real
    /// backend and check ordering and delivery. Exit code 0: all checks pass; 1: one failed;
    /// 2: the backend cannot be used.
    Selftest(commands::selftest::Args),
    /// Check a scenario file without running it.
    Validate(commands::validate::Args),
    /// Check a history (JSON Lines) for serializability, lost writes and invariants.
    /// Exit code 0: clean; 1: anomalies found; 2: the file cannot be read.
    Check(commands::check::Args),
    /// Primitive microbenchmarks on the simulated NIC (DrTM+H Fig. 5 and 6).
    BenchVerbs(commands::bench_verbs::Args),
    /// Print a shell completion script, e.g. `txbed completions bash > ~/.local/share/bash-completion/completions/txbed`.
    Completions(commands::shell::CompletionArgs),
    /// Write man pages (txbed.1 and one per command) into a directory, or print txbed.1.
    Man(commands::shell::ManArgs),
}

fn main() -> ExitCode {
    #[cfg(unix)]
    // SAFETY: restores the default disposition before any thread or output exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match cli.command {
        Command::Run(a) => commands::run::run(a),
        Command::Sweep(a) => commands::sweep::run(a),
        Command::Merge(a) => commands::merge::run(a),
        Command::HybridSearch(a) => commands::hybrid_search::run(a),
        Command::Sensitivity(a) => commands::sensitivity::run(a),
        Command::Campaign(a) => commands::campaign::run(a),
        Command::Replay(a) => commands::replay::run(a),
        Command::Compare(a) => commands::compare::run(a),
        Command::Plot(a) => commands::plot::run(a),
        Command::Protocols(a) => commands::protocols::run(a),
        Command::Workloads(a) => commands::workloads::run(a),
        Command::Devices => commands::devices::run(),
        Command::Selftest(a) => commands::selftest::run(a),
        Command::Validate(a) => commands::validate::run(a),
        Command::Check(a) => commands::check::run(a),
        Command::BenchVerbs(a) => commands::bench_verbs::run(a),
        Command::List(a) => commands::list::run(a),
        Command::Completions(a) => commands::shell::completions(a, Cli::command()),
        Command::Man(a) => commands::shell::man(a, Cli::command()),
    }
}
