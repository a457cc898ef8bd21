//! `txbed replay DIR/report.json`: re-runs the scenario and seed a report recorded and checks
//! the digest is the same; optionally writes a Chrome/Perfetto trace of the run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use txbed_report::replay::load;
use txbed_report::trace::{parse_categories, parse_window, write_chrome_trace, TraceSelect};
use txbed_scenario::{Scenario, Workload};
use txbed_sim::NicProfile;

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    /// DIR/report.json of a simulated run.
    pub report: PathBuf,
    /// Also write a Chrome/Perfetto trace of the run (open it in ui.perfetto.dev).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Keep only the trace's slices that overlap FROM..TO, simulated microseconds (either end
    /// may be left out: ..500, 200..).
    #[arg(long, requires = "trace", value_name = "FROM..TO")]
    pub trace_window: Option<String>,
    /// Keep only these categories of slices, comma-separated: verb, rpc, local, stage, txn.
    #[arg(long, requires = "trace", value_name = "CATEGORY,...")]
    pub trace_filter: Option<String>,
}

pub fn run(a: Args) -> ExitCode {
    let (report, trace) = (a.report.as_path(), a.trace.as_deref());
    let mut select = TraceSelect::default();
    if let Some(w) = &a.trace_window {
        match parse_window(w) {
            Ok(w) => select.window_ns = Some(w),
            Err(e) => return fail(e),
        }
    }
    if let Some(f) = &a.trace_filter {
        match parse_categories(f) {
            Ok(c) => select.categories = Some(c),
            Err(e) => return fail(e),
        }
    }
    let rec = match load(report) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Another build may simulate differently: say so, whatever the digest.
    let me = super::provenance("sim");
    match &rec.provenance {
        Some(p) if p.txbed_version != me.txbed_version || p.git_commit != me.git_commit => eprintln!(
            "warning: {} was written by txbed {}; this is txbed {}: a different build may simulate differently",
            report.display(),
            p.build(),
            me.build()
        ),
        Some(_) => {}
        None => eprintln!(
            "warning: {} records no provenance, so the build that wrote it is unknown; this is txbed {}",
            report.display(),
            me.build()
        ),
    }
    let digest = if matches!(rec.scenario.workload, Workload::Verbs(_)) {
        if trace.is_some() {
            eprintln!("error: traces are recorded for transactional runs");
            return ExitCode::from(2);
        }
        match txbed_runner::run_verbs(&rec.scenario, &rec.profile, rec.seed) {
            Ok(r) => r.digest,
            Err(e) => return fail(e),
        }
    } else {
        match replay_txn(&rec.scenario, &rec.profile, rec.seed, trace, &select) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    };
    if digest == rec.digest {
        println!("replayed {:?} seed {}: digest {digest} matches", rec.scenario.name, rec.seed);
        if let Some(t) = trace {
            println!("trace written to {}", t.display());
            // A run directory's page gains the link to its new trace.
            if let Some(dir) = report.parent().filter(|d| d.join("report.html").is_file()) {
                if let Err(e) = super::html_page(dir, true) {
                    return fail(e);
                }
            }
        }
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "replay of {:?} seed {} DIVERGED: digest {digest}, the report says {}",
            rec.scenario.name, rec.seed, rec.digest
        );
        ExitCode::from(1)
    }
}

/// Re-runs a transactional scenario (optionally writing a Chrome trace); returns the digest.
fn replay_txn(
    s: &Scenario,
    profile: &NicProfile,
    seed: u64,
    trace: Option<&Path>,
    select: &TraceSelect,
) -> Result<String, String> {
    let mut run = txbed_runner::run_txn(s, profile, seed, trace.is_some(), &mut |_, _| {})?;
    run.result.trace = txbed_report::trace::select(std::mem::take(&mut run.result.trace), select);
    if let Some(path) = trace {
        let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (nodes, workers) = (run.spec.nodes, run.spec.workers);
        write_chrome_trace(&run.result.trace, nodes, workers, std::io::BufWriter::new(f))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(format!("{:016x}", run.result.digest))
}
