//! `txbed merge SHARDS...`: the shards of a sweep (`txbed sweep --shard I/N`, run on a
//! cluster's nodes) into the outputs one machine's sweep writes: results.csv, summary.csv,
//! latency/, plots and the HTML page (docs/cluster.md), the CSVs byte for byte. provenance.json
//! is this command's, with each shard's (host, start, command line) under `shards`. The shards of a campaign (`txbed
//! campaign --shard I/N`) merge the same way into campaign.csv and failures/.

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_report::output::prepare_dir;
use txbed_report::shard::{campaign_shard_dirs, merge, merge_campaign, shard_files, CampaignShard, SweepShard};
use txbed_runner::campaign::{summary_table, Kind, Summary};

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    /// A sweep's shard files (shard-I-of-N.json) or directories holding them; or a campaign's
    /// shard directories (shard-I-of-N/) or the directory holding them.
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
    match campaign_shard_dirs(&a.shards) {
        Ok(dirs) if !dirs.is_empty() => return merge_campaigns(&a, &dirs),
        Ok(_) => {}
        Err(e) => return fail(e),
    }
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
    let (sweep, runs, origins) = match merge(shards) {
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
    super::sweep::finish(&dir, &sweep.axes, sweep.x.as_deref(), &runs, &provenance, &origins, a.quiet, a.strict)
}

/// A campaign's shards (`txbed campaign --shard I/N`) into campaign.csv and failures/ as one
/// machine's campaign writes them (its wall_s column aside: each run's own wall time).
fn merge_campaigns(a: &Args, dirs: &[PathBuf]) -> ExitCode {
    let name = match CampaignShard::read(&dirs[0]) {
        Ok(s) => s.name,
        Err(e) => return fail(e),
    };
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from("results").join(format!("campaign-{name}")));
    if let Err(e) = prepare_dir(&out, a.force) {
        return fail(e);
    }
    let merged = match merge_campaign(dirs, &out) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    if let Err(e) = super::provenance("sim").write(&out) {
        return fail(e);
    }
    let col = |n: &str| merged.header.iter().position(|c| c == n);
    let (Some(pc), Some(vc), Some(fc), Some(wc)) =
        (col("protocol"), col("verdict"), col("faults_applied"), col("wall_s"))
    else {
        return fail("campaign.csv lacks its protocol, verdict, faults_applied or wall_s column");
    };
    let mut sums: Vec<Summary> = Vec::new();
    for r in &merged.rows {
        let i = match sums.iter().position(|s| s.protocol == r[pc]) {
            Some(i) => i,
            None => {
                sums.push(Summary { protocol: r[pc].clone(), ..Default::default() });
                sums.len() - 1
            }
        };
        let s = &mut sums[i];
        s.runs += 1;
        *s.by_kind.entry(Kind::from_name(&r[vc]).unwrap_or(Kind::Error)).or_default() += 1;
        s.faults_applied += r[fc].parse::<usize>().unwrap_or(0);
        s.wall_s += r[wc].parse::<f64>().unwrap_or(0.0);
    }
    let failing: usize = sums.iter().map(Summary::failures).sum();
    if !a.quiet {
        println!("{}", summary_table(&sums));
        println!("{} runs from {} shards; {}", merged.rows.len(), dirs.len(), out.join("campaign.csv").display());
    }
    if failing > 0 {
        eprintln!("{failing} of {} runs failed", merged.rows.len());
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
