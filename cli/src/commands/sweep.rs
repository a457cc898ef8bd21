//! `txbed sweep FILE`: every combination of a sweep file's axes and seeds, each an independent
//! simulation, run in parallel on all cores; writes results.csv, summary.csv and plots.

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_report::csv::{write_csvs, RunRow};
use txbed_report::output::prepare_dir;
use txbed_report::shard::{Shard, SweepShard};
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
    /// Run one share of the sweep: I/N (0-based), or `auto` (a Slurm job array's task, else
    /// an MPI rank and size). Writes DIR/shard-I-of-N.json (default DIR: results/<name>-shards)
    /// for `txbed merge` (docs/cluster.md).
    #[arg(long, value_name = "I/N|auto")]
    pub shard: Option<String>,
}

pub fn run(a: Args) -> ExitCode {
    let (file, quiet) = (a.sweep.as_path(), a.quiet);
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
    let axes: Vec<String> = sw.axes.iter().map(|x| x.path.clone()).collect();
    let jobs = super::jobs(a.jobs);
    let provenance = super::provenance("sim");
    if let Some(spec) = a.shard.as_deref() {
        let shard = match spec {
            "auto" => Shard::from_env(|k| std::env::var(k).ok(), &txbed_real::bootstrap::LAUNCHERS),
            s => Shard::parse(s),
        };
        let shard = match shard {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        return run_shard(&a, &sw, &name, &axes, &points, shard, jobs, &provenance);
    }
    let dir = a.out.clone().unwrap_or_else(|| PathBuf::from("results").join(&name));
    // Everything that could fail after the runs is checked before the first starts.
    if let Err(e) = prepare_dir(&dir, a.force) {
        return fail(e);
    }
    let rows: Vec<Vec<String>> = points.iter().map(|p| p.values.clone()).collect();
    if let Err(e) = txbed_plot::check_plottable(&axes, &rows, sw.x.as_deref(), &dir) {
        return fail(format!("{}: the plots cannot be made: {e}", file.display()));
    }
    if !quiet {
        eprintln!("sweep {name:?}: {} runs on {jobs} threads", points.len());
    }
    let bar = runs_bar(points.len(), quiet);
    let reports = run_points(&points, jobs, &|| bar.inc(1));
    bar.finish_and_clear();
    let runs: Vec<RunRow> = points.iter().zip(&reports).map(|(p, r)| RunRow::of(p, r, &provenance)).collect();
    finish(&dir, &axes, sw.x.as_deref(), &runs, &provenance, &[], quiet, a.strict)
}

/// One shard's share of the sweep (`--shard`): its runs into DIR/shard-I-of-N.json, for
/// `txbed merge` (docs/cluster.md).
#[allow(clippy::too_many_arguments)]
fn run_shard(
    a: &Args,
    sw: &Sweep,
    name: &str,
    axes: &[String],
    points: &[txbed_scenario::sweep::Point],
    shard: Shard,
    jobs: usize,
    provenance: &txbed_report::provenance::Provenance,
) -> ExitCode {
    let file = a.sweep.as_path();
    let read = |p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let base = file.parent().unwrap_or(std::path::Path::new(".")).join(&sw.base);
    let (sweep_text, base_text) = match read(file).and_then(|s| Ok((s, read(&base)?))) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let dir = a.out.clone().unwrap_or_else(|| PathBuf::from("results").join(format!("{name}-shards")));
    let path = dir.join(shard.file_name());
    if path.exists() && !a.force {
        return fail(format!("{} exists: pass --force to replace it", path.display()));
    }
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return fail(format!("{}: {e}", dir.display()));
    }
    let mine: Vec<usize> = (0..points.len()).filter(|&k| shard.owns(k)).collect();
    let subset: Vec<txbed_scenario::sweep::Point> = mine.iter().map(|&k| points[k].clone()).collect();
    if !a.quiet {
        eprintln!(
            "sweep {name:?}, shard {} of {}: {} of {} runs on {jobs} threads",
            shard.index,
            shard.count,
            subset.len(),
            points.len()
        );
    }
    let bar = runs_bar(subset.len(), a.quiet);
    let reports = run_points(&subset, jobs, &|| bar.inc(1));
    bar.finish_and_clear();
    let runs: Vec<(usize, RunRow)> =
        mine.iter().zip(subset.iter().zip(&reports)).map(|(&k, (p, r))| (k, RunRow::of(p, r, provenance))).collect();
    let out = SweepShard {
        format: txbed_report::shard::FORMAT.into(),
        index: shard.index,
        count: shard.count,
        name: name.to_string(),
        axes: axes.to_vec(),
        x: sw.x.clone(),
        sweep_text,
        base_text,
        total: points.len(),
        runs,
        provenance: provenance.clone(),
    };
    if let Err(e) = out.write(&path) {
        return fail(e);
    }
    let bad = report_bad(out.runs.iter().map(|(_, r)| r), a.strict);
    if !a.quiet {
        println!("{}", path.display());
    }
    if bad > 0 {
        eprintln!("{bad} of {} runs of this shard failed", out.runs.len());
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// A whole sweep's outputs from its runs (one machine's, or merged shards'): results.csv,
/// summary.csv, latency/*.hgrm, plots, the HTML page and provenance.json (with the shards' own for
/// a merge); then the runs that
/// failed, and the exit code.
pub fn finish(
    dir: &std::path::Path,
    axes: &[String],
    x: Option<&str>,
    runs: &[RunRow],
    provenance: &txbed_report::provenance::Provenance,
    shards: &[txbed_report::provenance::ShardProvenance],
    quiet: bool,
    strict: bool,
) -> ExitCode {
    let written = match write_csvs(axes, runs, dir).and_then(|w| {
        provenance.write_with_shards(dir, shards)?;
        Ok(w)
    }) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    for w in &written.warnings {
        eprintln!("warning: {w}");
    }
    let (results, summary) = (written.results, written.summary);
    if let Err(e) = write_hgrms(runs, &dir.join(txbed_report::output::LATENCY_DIR)) {
        return fail(e);
    }
    let plots = match txbed_plot::plot_csv(&summary, dir, x) {
        Ok(p) => p,
        Err(e) => return fail(format!("plotting {}: {e}", summary.display())),
    };
    if let Err(e) = super::html_page(dir, quiet) {
        return fail(e);
    }
    let bad = report_bad(runs.iter(), strict);
    if !quiet {
        println!("{}", results.display());
        println!("{}", summary.display());
        for p in plots {
            println!("{}", p.display());
        }
    }
    if bad > 0 {
        eprintln!("{bad} of {} runs failed", runs.len());
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints each run that failed (an error, a failure, a checker rejection; with `strict`, a
/// warning); returns how many.
fn report_bad<'a>(runs: impl Iterator<Item = &'a RunRow>, strict: bool) -> usize {
    let mut bad = 0;
    for run in runs {
        let label = format!("[{}] seed {}", run.values.join(", "), run.seed);
        match &run.outcome {
            Ok(r) if !r.failures.is_empty() => {
                bad += 1;
                eprintln!("run {label}: {}", failure_summary(&r.failures));
            }
            Ok(r) if strict && !r.warnings.is_empty() => {
                bad += 1;
                eprintln!("run {label}: --strict: {}", r.warnings.join("; "));
            }
            Ok(r) if r.checked_clean => {}
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
    bad
}

/// DIR/latency/<axis values>-seed<N>.hgrm per run: each run's latency distribution, for
/// `txbed plot --cdf DIR/latency`.
fn write_hgrms(runs: &[RunRow], dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for run in runs {
        if let Ok(r) = &run.outcome {
            let label: String = run
                .values
                .join("-")
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
                .collect();
            let path = dir.join(format!("{label}-seed{}.hgrm", run.seed));
            std::fs::write(&path, &r.hgrm).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}
