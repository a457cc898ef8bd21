//! `txbed merge SHARDS...`: the shards of a sweep (`txbed sweep --shard I/N`, run on a
//! cluster's nodes) into the outputs one machine's sweep writes: results.csv, summary.csv,
//! latency/, plots and the HTML page (docs/cluster.md). Each row keeps the provenance of the
//! shard that ran it; provenance.json is this command's.

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_report::output::prepare_dir;
use txbed_report::shard::{merge, shard_files, SweepShard};

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    /// Shard files (shard-I-of-N.json), or directories holding them.
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// Output directory (default: results/<sweep name>); new or empty, see --force.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Reuse a non-empty output directory: remove txbed's earlier outputs from it first.
    #[arg(long)]
    pub force: bool,
    /// No list of the files written.
    #[arg(short, long)]
    pub quiet: bool,
    /// Count a run with warnings as failed: exit 1 (as `txbed sweep --strict`).
    #[arg(long)]
    pub strict: bool,
}

pub fn run(a: Args) -> ExitCode {
    let files = match shard_files(&a.shards) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let mut shards = Vec::with_capacity(files.len());
    for f in files {
        match SweepShard::read(&f) {
            Ok(s) => shards.push((f, s)),
            Err(e) => return fail(e),
        }
    }
    let (sweep, runs) = match merge(shards) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let dir = a.out.unwrap_or_else(|| PathBuf::from("results").join(&sweep.name));
    if let Err(e) = prepare_dir(&dir, a.force) {
        return fail(e);
    }
    let rows: Vec<Vec<String>> = runs.iter().map(|r| r.values.clone()).collect();
    if let Err(e) = txbed_plot::check_plottable(&sweep.axes, &rows, sweep.x.as_deref(), &dir) {
        return fail(format!("sweep {:?}: the plots cannot be made: {e}", sweep.name));
    }
    if !a.quiet {
        eprintln!("sweep {:?}: {} runs from {} shards", sweep.name, runs.len(), sweep.count);
    }
    let provenance = super::provenance("sim");
    super::sweep::finish(&dir, &sweep.axes, sweep.x.as_deref(), &runs, &provenance, a.quiet, a.strict)
}
