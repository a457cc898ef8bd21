//! `txbed campaign SCENARIO --seeds N`: the scenario over many seeds, each with its own random
//! fault schedule, in parallel; every run checked; each failure shrunk to a minimal schedule
//! and written as a scenario file with the `txbed run` command that replays it
//! (`txbed_runner::campaign`, docs/campaign.md). Exit 0: every run clean or unsupported; 1:
//! a failure; 2: bad input.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use txbed_report::output::prepare_dir;
use txbed_report::shard::{CampaignShard, Shard};
use txbed_runner::campaign::{self, Kind, Protocols, Setup};
use txbed_scenario::Scenario;

use super::fail;
use crate::progress::counted_bar;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario file (RON) of a transactional workload.
    pub scenario: PathBuf,
    /// Seeds to run (per protocol): K, K+1, ... K+N-1.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    pub from_seed: u64,
    /// Simulations at once (default: all cores).
    #[arg(long, value_parser = super::parse_jobs)]
    pub jobs: Option<usize>,
    /// Random faults: a profile (crash, partition, network, slow, clock, mixed) or a RON file
    /// of generators; default: the scenario's faults.random.
    #[arg(long, value_name = "PROFILE")]
    pub faults: Option<String>,
    /// Change a field by its path in the scenario file (as `txbed run --set`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub sets: Vec<String>,
    /// `all` or a comma-separated list (occ,nowait); each runs the same seeds. Default: the
    /// scenario's protocol.
    #[arg(long)]
    pub protocols: Option<String>,
    /// Output directory (default: results/campaign-<scenario name>); new or empty, see --force.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Reuse a non-empty output directory: remove txbed's earlier outputs from it first (a
    /// directory holding other files is refused).
    #[arg(long)]
    pub force: bool,
    /// Plant a bug in every run (a protocol's, or one every protocol has: SkipLog,
    /// CpuCasOnHca, ForgetWal, GivesUpPiece, ForgetChopping, ForgetPublication), to see the campaign catch it.
    #[arg(long, value_name = "NAME")]
    pub bug: Option<String>,
    /// Write failing runs as they ran, without shrinking them.
    #[arg(long)]
    pub no_shrink: bool,
    /// Runs shrinking may spend on each failure.
    #[arg(long, value_name = "RUNS", default_value_t = campaign::DEFAULT_SHRINK_BUDGET, conflicts_with = "no_shrink")]
    pub shrink_budget: usize,
    /// No progress bar and no table; failures and errors are still printed.
    #[arg(short, long)]
    pub quiet: bool,
    /// Run one share of the seeds: I/N (0-based: the seeds at positions I, I+N, ...), or
    /// `auto` (a Slurm job array's task, else an MPI rank and size). Writes the campaign's
    /// outputs to DIR/shard-I-of-N/ (default DIR: results/campaign-<name>-shards) for
    /// `txbed merge` (docs/cluster.md).
    #[arg(long, value_name = "I/N|auto")]
    pub shard: Option<String>,
}

pub fn run(a: Args) -> ExitCode {
    let source = a.scenario.display().to_string();
    let (s, _) = match Scenario::load_with(&a.scenario, &a.sets) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let faults = match a.faults.as_deref().map(campaign::load_profile).transpose() {
        Ok(f) => f,
        Err(e) => return fail(format!("--faults: {e}")),
    };
    let protocols = match a.protocols.as_deref().map(Protocols::parse).transpose() {
        Ok(p) => p.unwrap_or(Protocols::Scenario),
        Err(e) => return fail(format!("--protocols: {e}")),
    };
    let (targets, profile, bug) = match campaign::prepare(&s, &source, faults, &protocols, a.bug.as_deref()) {
        Ok(x) => x,
        Err(e) => return fail(with_option(e, a.faults.as_deref())),
    };
    let Some(last) = a.from_seed.checked_add(a.seeds - 1) else {
        return fail(format!("--from-seed {} --seeds {}: the seeds run past {}", a.from_seed, a.seeds, u64::MAX));
    };
    let shard = match a.shard.as_deref() {
        None => None,
        Some("auto") => Some(Shard::from_env(|k| std::env::var(k).ok(), &txbed_real::bootstrap::LAUNCHERS)),
        Some(x) => Some(Shard::parse(x)),
    };
    let shard = match shard.transpose() {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let all_seeds: Vec<u64> = (a.from_seed..=last).collect();
    let seeds: Vec<u64> = match shard {
        Some(sh) => all_seeds.iter().enumerate().filter(|(j, _)| sh.owns(*j)).map(|(_, &x)| x).collect(),
        None => all_seeds,
    };
    let protocol_names: Vec<String> = targets.iter().map(|t| t.protocol.name().to_string()).collect();
    let setup = Setup { targets, profile, seeds, bug };
    let stem = a.scenario.file_stem().map_or("campaign".into(), |x| x.to_string_lossy().into_owned());
    let name = if s.name.is_empty() { stem } else { s.name.clone() };
    let dir = match shard {
        Some(sh) => a
            .out
            .unwrap_or_else(|| PathBuf::from("results").join(format!("campaign-{name}-shards")))
            .join(format!("shard-{}-of-{}", sh.index, sh.count)),
        None => a.out.unwrap_or_else(|| PathBuf::from("results").join(format!("campaign-{name}"))),
    };
    if let Err(e) = prepare_dir(&dir, a.force) {
        return fail(e);
    }
    let provenance = super::provenance("sim");
    if let Some(sh) = shard {
        let identity = format!(
            "{}\nfaults {:?}\nprotocols {:?}\nbug {:?}\nseeds {}..={last}\nshrink {:?}",
            s.to_ron(),
            a.faults,
            a.protocols,
            a.bug,
            a.from_seed,
            (!a.no_shrink).then_some(a.shrink_budget)
        );
        let marker = CampaignShard {
            format: txbed_report::shard::CAMPAIGN_FORMAT.into(),
            index: sh.index,
            count: sh.count,
            name: name.clone(),
            identity,
            protocols: protocol_names,
            build: provenance.csv_values().to_vec(),
        };
        if let Err(e) = marker.write(&dir) {
            return fail(e);
        }
    }
    let jobs = super::jobs(a.jobs);
    let runs = setup.targets.len() * setup.seeds.len();
    if !a.quiet {
        let names: Vec<&str> = setup.targets.iter().map(|t| t.protocol.name()).collect();
        let planted = bug.map(|b| format!(", planted bug {}", b.name)).unwrap_or_default();
        eprintln!(
            "campaign {name:?}: {} x seeds {}..={last} = {runs} runs on {jobs} threads{planted}",
            names.join(", "),
            a.from_seed
        );
    }
    let start = Instant::now();
    let bar = counted_bar(runs, "runs", a.quiet);
    let mut rows = campaign::run_all(&setup, jobs, &|_| bar.inc(1));
    bar.finish_and_clear();
    let failing = rows.iter().filter(|r| r.outcome.kind.is_failure()).count();
    let budget = (!a.no_shrink).then_some(a.shrink_budget);
    let what = if budget.is_some() { "failures shrunk" } else { "failures written" };
    let bar = counted_bar(failing, what, a.quiet || failing == 0);
    let failures = match campaign::shrink_and_write(&setup, &mut rows, &dir, budget, jobs, &|| bar.inc(1)) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    bar.finish_and_clear();
    let csv = dir.join("campaign.csv");
    if let Err(e) = campaign::write_csv(&csv, &rows).and_then(|()| provenance.write(&dir)) {
        return fail(e);
    }
    for f in &failures {
        println!("{}", f.line(&rows[f.row]));
    }
    if !a.quiet {
        let sums = campaign::summarize(&rows);
        println!("{}", campaign::summary_table(&sums));
        println!("wall time {:.1} s; {}", start.elapsed().as_secs_f64(), csv.display());
    }
    let unsupported = rows.iter().filter(|r| r.outcome.kind == Kind::Unsupported).count();
    if failing > 0 {
        eprintln!("{failing} of {runs} runs failed ({unsupported} unsupported)");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A profile's generator fields read best under the option that gave them: `--faults mixed:
/// faults.random.crash.down_us: ...`.
fn with_option(e: String, profile: Option<&str>) -> String {
    match profile {
        Some(p) if e.contains("faults.random") => format!("--faults {p}: {e}"),
        _ => e,
    }
}
