//! `txbed run SCENARIO`: one run, on the simulator or as one process of a real run, and its
//! report. Exit code 0 clean, 1 the checker found anomalies, 2 an error.

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_report::output::{write_history, RunOutput};
use txbed_report::text::{failure_summary, txn_text, verbs_text};
use txbed_scenario::{BackendName, Scenario, Workload};
use txbed_sim::NicProfile;

use super::{fail, Backend};
use crate::progress::Progress;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario file (RON).
    pub scenario: PathBuf,
    /// Override the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Change a field by its path in the scenario file, e.g. --set protocol.name=occ
    /// --set protocol.mode=onesided --set workload.name=ycsb --set cluster.nodes=8.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub sets: Vec<String>,
    /// Write report.json, history.jsonl and the resolved scenario.ron into this directory
    /// (new or empty; see --force).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Reuse a non-empty --out directory: remove txbed's earlier outputs from it first (a
    /// directory holding other files is refused).
    #[arg(long, requires = "out")]
    pub force: bool,
    /// More detail: the resolved scenario before the report.
    #[arg(short, long, conflicts_with = "quiet")]
    pub verbose: bool,
    /// Print nothing but errors (the exit code and --out files still tell the outcome).
    #[arg(short, long)]
    pub quiet: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the run's history (for `txbed check`) to this file: binary if it ends in `.bin`,
    /// JSON Lines otherwise.
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// Where to run: the simulator, or real processes (one per node) over sockets or verbs.
    /// Default: the scenario's `backend` (sim unless it says otherwise).
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// This process's rank (else from mpirun/srun's environment).
    #[arg(long)]
    pub rank: Option<u32>,
    /// Number of processes (else from the launcher's environment).
    #[arg(long)]
    pub size: Option<u32>,
    /// Rank 0's rendezvous address (else TXBED_COORDINATOR, else 127.0.0.1:7821).
    #[arg(long)]
    pub coordinator: Option<String>,
    /// Address to bind this process's NIC and UDP sockets to.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: std::net::IpAddr,
    /// Override the scenario's warm-up (us). Real backends count wall-clock time.
    #[arg(long)]
    pub warmup_us: Option<u64>,
    /// Override the scenario's measured window (us), e.g. longer for a real backend.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub measure_us: Option<u64>,
    /// RDMA device for --backend verbs (default: the first one).
    #[arg(long)]
    pub device: Option<String>,
    /// GID index on port 1 for --backend verbs (default: first RoCE v2 IPv4 GID, else 0).
    #[arg(long)]
    pub gid_index: Option<u32>,
    /// Exit 1 when the report has warnings (nothing committed in the window, or a node or
    /// worker that committed nothing), not only when the checker rejects the run.
    #[arg(long)]
    pub strict: bool,
    /// Width of the report's time-series buckets, simulated us (default: a twentieth of
    /// warm-up plus window; rounded to a thousandth of the run).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub bucket_us: Option<u64>,
    /// Plant a bug (the protocol's, or SkipLog, CpuCasOnHca, ForgetWal, GivesUpPiece, ForgetChopping, ForgetPublication; `txbed protocols`
    /// lists them), as `txbed campaign --bug` does; simulator only.
    #[arg(long, value_name = "NAME")]
    pub bug: Option<String>,
}

pub fn run(a: Args) -> ExitCode {
    let (mut s, profile) = match Scenario::load_with(&a.scenario, &a.sets) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    s.run.warmup_us = a.warmup_us.unwrap_or(s.run.warmup_us);
    s.run.measure_us = a.measure_us.unwrap_or(s.run.measure_us);
    let seed = a.seed.unwrap_or(s.run.seed);
    s.run.seed = seed;
    let backend = a.backend.unwrap_or(match s.backend {
        BackendName::Sim => Backend::Sim,
        BackendName::Sockets => Backend::Sockets,
        BackendName::Verbs => Backend::Verbs,
    });
    if a.verbose && !a.quiet {
        eprintln!("resolved scenario:\n{}", s.to_ron());
    }
    let mut provenance = super::provenance(match backend {
        Backend::Sim => "sim",
        Backend::Sockets => "sockets",
        Backend::Verbs => "verbs",
    });
    // Before a device is probed: verbs refuses faults on any machine.
    if matches!(backend, Backend::Verbs) {
        if let Err(e) = txbed_real::run::check_faults(&s, &profile, seed, true) {
            return fail(e);
        }
    }
    let real = match backend {
        Backend::Sim => None,
        Backend::Sockets => {
            provenance.device = Some(format!("sockets bound to {}", a.bind));
            Some(txbed_real::host::RealBackend::Sockets { bind: a.bind })
        }
        #[cfg(feature = "verbs")]
        Backend::Verbs => {
            // Probe first: a missing device or library gets its specific message.
            let info = match txbed_real::verbs::probe(a.device.as_deref(), a.gid_index) {
                Ok(i) => i,
                Err(e) => return fail(e),
            };
            provenance.device = Some(info.to_string().replace('\n', "; "));
            Some(txbed_real::host::RealBackend::Verbs { device: a.device, gid_index: a.gid_index })
        }
        #[cfg(not(feature = "verbs"))]
        Backend::Verbs => return fail(super::NO_VERBS),
    };
    let out = RunOutput {
        dir: a.out.as_deref(),
        history: a.history.as_deref(),
        json: a.json,
        quiet: a.quiet,
        force: a.force,
        provenance: Some(&provenance),
        strict: a.strict,
    };
    let bug = match (&a.bug, &s.protocol, &real) {
        (None, _, _) => None,
        (Some(_), _, Some(_)) => return fail("--bug plants a bug in simulated runs only"),
        (Some(_), None, _) => return fail("--bug needs a transactional scenario (a protocol to plant it in)"),
        (Some(b), Some(p), None) => match txbed_runner::campaign::find_bug(p.name.protocol(), b) {
            Ok(b) => Some(b),
            Err(e) => return fail(format!("--bug: {e}")),
        },
    };
    match real {
        None => run_sim(&s, &profile, seed, out, &Extras { strict: a.strict, bucket_us: a.bucket_us, bug }),
        Some(backend) => {
            txbed_real::run::run_real(&s, &profile, seed, a.rank, a.size, a.coordinator.as_deref(), backend, out)
        }
    }
}

/// `--strict`, `--bucket-us` and `--bug`.
struct Extras {
    strict: bool,
    bucket_us: Option<u64>,
    bug: Option<txbed_txn::node::Bug>,
}

/// `txbed run` on the simulator: the report, files, and exit code.
fn run_sim(s: &Scenario, profile: &NicProfile, seed: u64, out: RunOutput<'_>, x: &Extras) -> ExitCode {
    if let Err(e) = out.prepare() {
        return fail(e);
    }
    if matches!(s.workload, Workload::Verbs(_)) {
        let done = txbed_runner::run_verbs(s, profile, seed)
            .and_then(|r| out.finish(s, &r, &verbs_text(s, &r)))
            .and_then(|()| out.dir.map_or(Ok(()), |d| super::html_page(d, out.quiet)));
        return match done {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        };
    }
    let mut bar = Progress::new(out.quiet);
    let mut progress = |t, end| bar.update(t, end);
    let ran = match x.bug {
        // The scenario's seed is `seed` here (`run` set it).
        Some(bug) => txbed_runner::campaign::run_scenario(s, profile, Some(bug), &mut progress),
        None => txbed_runner::run_txn(s, profile, seed, false, &mut progress),
    };
    let mut run = match ran {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    bar.done();
    if let Err(e) = write_history(s, seed, &mut run.result.history, out.history_path().as_deref()) {
        return fail(e);
    }
    let mut r = run.report(s, seed);
    if let Some(us) = x.bucket_us {
        r.timeseries = txbed_runner::report::time_series(&r.series, us * 1000, run.spec.warmup_ns);
    }
    if let Err(e) = out.finish(s, &r, &txn_text(s, &r)) {
        return fail(e);
    }
    if let Some(dir) = out.dir {
        if let Err(e) = write_run_figures(dir, &r) {
            return fail(e);
        }
        if let Err(e) = super::html_page(dir, out.quiet) {
            return fail(e);
        }
    }
    if x.strict && !r.warnings.is_empty() {
        eprintln!("--strict: {} warning(s): {}", r.warnings.len(), r.warnings.join("; "));
        return ExitCode::from(1);
    }
    if !r.failures.is_empty() {
        return fail(failure_summary(&r.failures));
    }
    // A run the checker rejects is a failed run.
    if run.result.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// DIR/latency.hgrm (the window's latency distribution) and DIR/timeseries.{svg,png}.
fn write_run_figures(dir: &std::path::Path, r: &txbed_runner::report::TxnReport) -> Result<(), String> {
    txbed_report::latency::write_hgrm(&dir.join("latency.hgrm"), &r.latency_hist)?;
    let buckets: Vec<_> =
        r.timeseries.buckets.iter().map(|b| (b.start_us, b.end_us, b.tps, b.abort_rate, b.mean_latency_us)).collect();
    let subtitle =
        format!("{} ({}), seed {}, buckets of {:.0} us", r.protocol, r.hybrid, r.seed, r.timeseries.bucket_us);
    let title = format!("{}: over simulated time", r.scenario);
    let plot = txbed_plot::cdf::TimeSeriesPlot {
        title: &title,
        subtitle: &subtitle,
        buckets: &buckets,
        window_from_us: r.timeseries.window_from_us,
    };
    txbed_plot::cdf::timeseries(&plot, dir, "timeseries").map(|_| ())
}
