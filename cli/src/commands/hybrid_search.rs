//! `txbed hybrid-search SCENARIO`: every valid hybrid code of the scenario's protocol over
//! several seeds, ranked by throughput and latency with 95% confidence intervals (RCC Sec. 5.1).

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_report::csv::{write_csvs, RunRow};
use txbed_report::output::prepare_dir;
use txbed_report::rank::rank;
use txbed_runner::parallel::run_points;
use txbed_scenario::sweep::hybrid_search;

use super::fail;
use crate::progress::runs_bar;

#[derive(clap::Args)]
pub struct Args {
    pub scenario: PathBuf,
    /// Simulations at once (default: all cores).
    #[arg(long, value_parser = super::parse_jobs)]
    pub jobs: Option<usize>,
    /// Seeds per code.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub seeds: Vec<u64>,
    /// Output directory for results.csv, summary.csv and plots (default:
    /// results/hybrid-<protocol>); new or empty, see --force.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Reuse a non-empty output directory: remove txbed's earlier outputs from it first (a
    /// directory holding other files is refused).
    #[arg(long)]
    pub force: bool,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn run(a: Args) -> ExitCode {
    let (file, seeds, out, quiet) = (a.scenario.as_path(), &a.seeds[..], a.out, a.quiet);
    if seeds.is_empty() {
        return fail("--seeds: give at least one seed");
    }
    let (sweep, points, refused) = match hybrid_search(file, seeds) {
        Ok(x) => x,
        Err(e) => return fail(e.to_string()),
    };
    // One line per distinct reason.
    let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
    for (code, why) in &refused {
        let code = code.split(' ').next().unwrap_or(code);
        match reasons.iter_mut().find(|(w, _)| *w == why.as_str()) {
            Some((_, codes)) => codes.push(code),
            None => reasons.push((why, vec![code])),
        }
    }
    for (why, codes) in reasons {
        eprintln!("skipped {} codes ({}): {why}", codes.len(), codes.join(", "));
    }
    if points.is_empty() {
        return fail("no hybrid code of this protocol can run on this NIC setup");
    }
    let dir = out.unwrap_or_else(|| PathBuf::from("results").join(&sweep.name));
    if let Err(e) = prepare_dir(&dir, a.force) {
        return fail(e);
    }
    let rows: Vec<Vec<String>> = points.iter().map(|p| p.values.clone()).collect();
    if let Err(e) = txbed_plot::check_plottable(&[sweep.axes[0].path.clone()], &rows, None, &dir) {
        return fail(format!("the plots cannot be made: {e}"));
    }
    let provenance = super::provenance("sim");
    let jobs = super::jobs(a.jobs);
    if !quiet {
        eprintln!("{}: {} codes x {} seeds on {jobs} threads", sweep.name, sweep.axes[0].values.len(), seeds.len());
    }
    let bar = runs_bar(points.len(), quiet);
    let reports = run_points(&points, jobs, &|| bar.inc(1));
    bar.finish_and_clear();
    let runs: Vec<RunRow> = points.iter().zip(&reports).map(|(p, r)| RunRow::of(p, r, &provenance)).collect();
    let axes: Vec<String> = sweep.axes.iter().map(|x| x.path.clone()).collect();
    let written = match write_csvs(&axes, &runs, &dir).and_then(|w| {
        provenance.write(&dir)?;
        Ok(w)
    }) {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    if seeds.len() < 2 {
        eprintln!("warning: one seed per code: no confidence intervals (n/a below and empty in summary.csv)");
    }
    if let Err(e) = txbed_plot::plot_csv(&written.summary, &dir, None) {
        return fail(format!("plotting {}: {e}", written.summary.display()));
    }
    if let Err(e) = super::html_page(&dir, quiet) {
        return fail(e);
    }
    let ranked = rank(&points, &reports);
    println!("rank  code  one-sided stages                               throughput (txn/s, 95% CI)     p50 us          p99 us   aborts  checked");
    for (i, r) in ranked.iter().enumerate() {
        let h = txbed_txn::stage::Hybrid(r.code);
        let stages: Vec<&str> =
            txbed_txn::stage::Stage::ALL.iter().filter(|s| h.onesided(**s)).map(|s| s.name()).collect();
        // One seed has no interval: "n/a", never a made-up 0.
        let ci = |x: f64, prec: usize| if x.is_nan() { "n/a".to_string() } else { format!("{x:.prec$}") };
        println!(
            "{:>4}  {:>4}  {:<45}  {:>12.0} +- {:<10}  {:>6.2} +- {:<5}  {:>7.2}  {:>5.1}%  {}",
            i + 1,
            r.code,
            if stages.is_empty() { "(all RPC)".to_string() } else { stages.join(", ") },
            r.throughput.0,
            ci(r.throughput.1, 0),
            r.p50.0,
            ci(r.p50.1, 2),
            r.p99.0,
            r.abort_rate * 100.0,
            if r.clean { "serializable" } else { "CHECK FAILED" }
        );
    }
    println!("{}", dir.display());
    if ranked.iter().all(|r| r.clean) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
