//! `txbed sweep FILE`: every combination of a sweep file's axes and seeds, each an independent
//! simulation, run in parallel on all cores; writes results.csv, summary.csv and plots.

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_report::csv::write_csvs;
use txbed_report::output::prepare_dir;
use txbed_report::text::failure_summary;
use txbed_runner::parallel::run_points;
use txbed_scenario::sweep::Sweep;

use super::fail;
use crate::progress::runs_bar;

#[derive(clap::Args)]
pub struct Args {
    /// Sweep file (RON): a base scenario, axes and seeds (docs/scenarios.md).
    pub sweep: PathBuf,
    /// Simulations at once (default: all cores).
    #[arg(long, value_parser = super::parse_jobs)]
    pub jobs: Option<usize>,
    /// Output directory (default: results/<sweep name>); new or empty, see --force.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Reuse a non-empty output directory: remove txbed's earlier outputs from it first (a
    /// directory holding other files is refused).
    #[arg(long)]
    pub force: bool,
    /// No progress bar, no table.
    #[arg(short, long)]
    pub quiet: bool,
    /// Count a run with warnings (nothing committed in its window, or a node or worker that
    /// committed nothing) as failed: exit 1.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(a: Args) -> ExitCode {
    let (file, out, quiet) = (a.sweep.as_path(), a.out, a.quiet);
    let sw = match Sweep::load(file) {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    let points = match sw.points(file) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    let name = if sw.name.is_empty() {
        file.file_stem().map_or("sweep".into(), |s| s.to_string_lossy().into_owned())
    } else {
        sw.name.clone()
    };
    let dir = out.unwrap_or_else(|| PathBuf::from("results").join(&name));
    // Everything that could fail after the runs is checked before the first starts.
    if let Err(e) = prepare_dir(&dir, a.force) {
        return fail(e);
    }
    let axes: Vec<String> = sw.axes.iter().map(|x| x.path.clone()).collect();
    let rows: Vec<Vec<String>> = points.iter().map(|p| p.values.clone()).collect();
    if let Err(e) = txbed_plot::check_plottable(&axes, &rows, sw.x.as_deref(), &dir) {
        return fail(format!("{}: the plots cannot be made: {e}", file.display()));
    }
    let provenance = super::provenance("sim");
    let jobs = super::jobs(a.jobs);
    if !quiet {
        eprintln!("sweep {name:?}: {} runs on {jobs} threads", points.len());
    }
    let bar = runs_bar(points.len(), quiet);
    let reports = run_points(&points, jobs, &|| bar.inc(1));
    bar.finish_and_clear();
    let written = match write_csvs(&sw, &points, &reports, &dir, &provenance).and_then(|w| {
        provenance.write(&dir)?;
        Ok(w)
    }) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    for w in &written.warnings {
        eprintln!("warning: {w}");
    }
    let (results, summary) = (written.results, written.summary);
    if let Err(e) = write_hgrms(&points, &reports, &dir.join(txbed_report::output::LATENCY_DIR)) {
        return fail(e);
    }
    let plots = match txbed_plot::plot_csv(&summary, &dir, sw.x.as_deref()) {
        Ok(p) => p,
        Err(e) => return fail(format!("plotting {}: {e}", summary.display())),
    };
    if let Err(e) = super::html_page(&dir, quiet) {
        return fail(e);
    }
    let mut bad = 0;
    for (p, r) in points.iter().zip(&reports) {
        let label = format!("[{}] seed {}", p.values.join(", "), p.seed);
        match r {
            Ok(r) if !r.failures.is_empty() => {
                bad += 1;
                eprintln!("run {label}: {}", failure_summary(&r.failures));
            }
            Ok(r) if a.strict && !r.warnings.is_empty() => {
                bad += 1;
                eprintln!("run {label}: --strict: {}", r.warnings.join("; "));
            }
            Ok(r) if r.check.clean => {}
            Ok(_) => {
                bad += 1;
                eprintln!("run {label}: the checker rejected it (see results.csv)");
            }
            Err(e) => {
                bad += 1;
                eprintln!("run {label}: {e}");
            }
        }
    }
    if !quiet {
        println!("{}", results.display());
        println!("{}", summary.display());
        for p in plots {
            println!("{}", p.display());
        }
    }
    if bad > 0 {
        eprintln!("{bad} of {} runs failed", points.len());
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// DIR/latency/<axis values>-seed<N>.hgrm per run: each run's latency distribution, for
/// `txbed plot --cdf DIR/latency`.
fn write_hgrms(
    points: &[txbed_scenario::sweep::Point],
    reports: &[Result<txbed_runner::report::TxnReport, String>],
    dir: &std::path::Path,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (p, r) in points.iter().zip(reports) {
        if let Ok(r) = r {
            let label: String = p
                .values
                .join("-")
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
                .collect();
            txbed_report::latency::write_hgrm(&dir.join(format!("{label}-seed{}.hgrm", p.seed)), &r.latency_hist)?;
        }
    }
    Ok(())
}
