//! The `txbed` command-line tool.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use txbed::{bench_verbs, check, run, scenario};

/// txbed: a testbed for RDMA-enabled distributed transactions.
#[derive(Parser)]
#[command(name = "txbed", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    Sim,
    Sockets,
    Verbs,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario (on the simulator unless the scenario or --backend says otherwise) and
    /// print its report.
    Run {
        /// Scenario file (RON).
        scenario: PathBuf,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Change a field by its path in the scenario file, e.g. --set protocol.name=occ
        /// --set protocol.mode=onesided --set workload.name=ycsb --set cluster.nodes=8.
        #[arg(long = "set", value_name = "PATH=VALUE")]
        sets: Vec<String>,
        /// Write report.json, history.jsonl and the resolved scenario.ron into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
        /// More detail: the resolved scenario before the report.
        #[arg(short, long, conflicts_with = "quiet")]
        verbose: bool,
        /// Print nothing but errors (the exit code and --out files still tell the outcome).
        #[arg(short, long)]
        quiet: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Write the run's history (JSON Lines, for `txbed check`) to this file.
        #[arg(long)]
        history: Option<PathBuf>,
        /// Where to run: the simulator, or real processes (one per node) over sockets or verbs.
        /// Default: the scenario's `backend` (sim unless it says otherwise).
        #[arg(long, value_enum)]
        backend: Option<Backend>,
        /// This process's rank (else from mpirun/srun's environment).
        #[arg(long)]
        rank: Option<u32>,
        /// Number of processes (else from the launcher's environment).
        #[arg(long)]
        size: Option<u32>,
        /// Rank 0's rendezvous address (else TXBED_COORDINATOR, else 127.0.0.1:7821).
        #[arg(long)]
        coordinator: Option<String>,
        /// Address to bind this process's NIC and UDP sockets to.
        #[arg(long, default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// Override the scenario's warm-up (us). Real backends count wall-clock time.
        #[arg(long)]
        warmup_us: Option<u64>,
        /// Override the scenario's measured window (us), e.g. longer for a real backend.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        measure_us: Option<u64>,
        /// RDMA device for --backend verbs (default: the first one).
        #[arg(long)]
        device: Option<String>,
        /// GID index on port 1 for --backend verbs (default: first RoCE v2 IPv4 GID, else 0).
        #[arg(long)]
        gid_index: Option<u32>,
    },
    /// Run every combination of a sweep file's axes and seeds in parallel; write results.csv,
    /// summary.csv (mean and 95% CI across seeds) and plots.
    Sweep {
        /// Sweep file (RON): a base scenario, axes and seeds (docs/scenarios.md).
        sweep: PathBuf,
        /// Simulations at once (default: all cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Output directory (default: results/<sweep name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// No progress bar, no table.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Run every valid hybrid code of a scenario's protocol over several seeds and rank the
    /// codes by throughput and latency, with 95% confidence intervals (RCC Sec. 5.1).
    HybridSearch {
        scenario: PathBuf,
        /// Simulations at once (default: all cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Seeds per code.
        #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
        seeds: Vec<u64>,
        /// Output directory for results.csv, summary.csv and plots (default: results/hybrid-<protocol>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// No progress bar.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Re-run the scenario and seed of a report (`txbed run --out DIR`) and check the digest.
    Replay {
        /// DIR/report.json of a simulated run.
        report: PathBuf,
        /// Also write a Chrome/Perfetto trace of the run (open it in ui.perfetto.dev).
        #[arg(long)]
        trace: Option<PathBuf>,
    },
    /// Plot a sweep's summary.csv or results.csv (SVG and PNG next to it, or in --out).
    Plot {
        csv: PathBuf,
        /// The axis on x (a column such as protocol.mode; default: the first numeric axis).
        #[arg(long)]
        x: Option<String>,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// List every protocol: description, isolation, stages and modes, options with their
    /// defaults, presets, planted bugs and RPC handlers.
    Protocols {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List RDMA devices, their ports and GIDs (needs a build with the "verbs" feature).
    Devices,
    /// Two nodes in this process exchange WRITE, WRITE_WITH_IMM and RC SEND over a real
    /// backend and check ordering and delivery. Exit code 0: all checks pass; 1: one failed;
    /// 2: the backend cannot be used.
    Selftest {
        /// sockets (loopback) or verbs (an RDMA device; needs the "verbs" feature).
        #[arg(long, value_enum, default_value_t = Backend::Sockets)]
        backend: Backend,
        /// RDMA device for --backend verbs (default: the first one).
        #[arg(long)]
        device: Option<String>,
        /// GID index on port 1 for --backend verbs (default: first RoCE v2 IPv4 GID, else 0).
        #[arg(long)]
        gid_index: Option<u32>,
    },
    /// Check a scenario file without running it.
    Validate { scenario: PathBuf },
    /// Check a history (JSON Lines) for serializability, lost writes and invariants.
    /// Exit code 0: clean; 1: anomalies found; 2: the file cannot be read.
    Check {
        history: PathBuf,
        /// Also require real-time order (strict serializability).
        #[arg(long)]
        strict: bool,
        /// Also write the history in Elle's list-append JSON form to this file.
        #[arg(long)]
        export_elle: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Explain at most this many anomalies (all are counted).
        #[arg(long, default_value_t = 10)]
        max_explained: usize,
    },
    /// Primitive microbenchmarks on the simulated NIC (DrTM+H Fig. 5 and 6).
    BenchVerbs {
        /// NIC profile: a built-in name (cx3, cx4, cx5, roce-cx4) or a RON file.
        #[arg(long, default_value = "cx4")]
        nic: String,
        /// Simulate this many nodes instead of the 16-node and emulated 80-node settings.
        #[arg(long)]
        nodes: Option<u16>,
        /// RC QPs per remote node per worker (5 emulates 80 nodes on 16).
        #[arg(long)]
        qps_per_node: Option<u16>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Simulations to run at once (default: all cores).
        #[arg(long)]
        jobs: Option<usize>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Measured simulated time per raw simulation, microseconds (after 20 us of warm-up;
        /// multi-object runs warm up 100 us and measure 200 us).
        #[arg(long, default_value_t = 40)]
        measure_us: u64,
        /// Comma-separated payload sizes in bytes.
        #[arg(long, value_delimiter = ',')]
        payloads: Option<Vec<u32>>,
        /// Skip the multi-object benchmark.
        #[arg(long)]
        no_multi_object: bool,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match cli.command {
        Command::Protocols { json } => {
            if json {
                let all: Vec<_> = txbed_protocols::REGISTRY.iter().map(|&p| txbed::listing::protocol_json(p)).collect();
                println!("{}", serde_json::to_string_pretty(&all).expect("JSON"));
            } else {
                print!("{}", txbed::listing::protocols_text());
            }
            ExitCode::SUCCESS
        }
        Command::Run {
            scenario,
            seed,
            sets,
            out,
            verbose,
            quiet,
            json,
            history,
            backend,
            rank,
            size,
            coordinator,
            bind,
            warmup_us,
            measure_us,
            device,
            gid_index,
        } => {
            let (mut s, profile) = match scenario::Scenario::load_with(&scenario, &sets) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            s.run.warmup_us = warmup_us.unwrap_or(s.run.warmup_us);
            s.run.measure_us = measure_us.unwrap_or(s.run.measure_us);
            let seed = seed.unwrap_or(s.run.seed);
            s.run.seed = seed;
            let backend = backend.unwrap_or(match s.backend {
                scenario::BackendName::Sim => Backend::Sim,
                scenario::BackendName::Sockets => Backend::Sockets,
                scenario::BackendName::Verbs => Backend::Verbs,
            });
            if verbose && !quiet {
                eprintln!("resolved scenario:\n{}", s.to_ron());
            }
            let out = run::RunOutput { dir: out.as_deref(), history: history.as_deref(), json, quiet };
            match backend {
                Backend::Sim => run::run_sim(&s, &profile, seed, out),
                Backend::Verbs => {
                    #[cfg(feature = "verbs")]
                    {
                        // Probe first: a missing device or library gets its specific message.
                        if let Err(e) = txbed::verbs::probe(device.as_deref(), gid_index) {
                            eprintln!("error: {e}");
                            return ExitCode::from(2);
                        }
                        let backend = txbed::host::RealBackend::Verbs { device, gid_index };
                        let coord = coordinator.as_deref();
                        run::run_real(&s, &profile, seed, rank, size, coord, backend, out)
                    }
                    #[cfg(not(feature = "verbs"))]
                    {
                        let _ = (rank, size, coordinator);
                        run_verbs(device.as_deref(), gid_index)
                    }
                }
                Backend::Sockets => {
                    let backend = txbed::host::RealBackend::Sockets { bind };
                    run::run_real(&s, &profile, seed, rank, size, coordinator.as_deref(), backend, out)
                }
            }
        }
        Command::Devices => devices(),
        Command::Sweep { sweep, jobs, out, quiet } => sweep_cmd(&sweep, jobs, out, quiet),
        Command::Replay { report, trace } => replay_cmd(&report, trace.as_deref()),
        Command::HybridSearch { scenario, jobs, seeds, out, quiet } => {
            hybrid_search_cmd(&scenario, jobs, &seeds, out, quiet)
        }
        Command::Plot { csv, x, out } => {
            let dir = out.unwrap_or_else(|| csv.parent().unwrap_or(std::path::Path::new(".")).to_path_buf());
            match txbed::plot::plot_csv(&csv, &dir, x.as_deref()) {
                Ok(files) => {
                    for f in files {
                        println!("{}", f.display());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Selftest { backend, device, gid_index } => selftest(backend, device, gid_index),
        Command::Check { history, strict, export_elle, json, max_explained } => {
            check::run(&history, strict, export_elle.as_deref(), json, max_explained)
        }
        Command::Validate { scenario } => match scenario::Scenario::load(&scenario) {
            Ok(_) => {
                println!("{}: ok", scenario.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::BenchVerbs { nic, nodes, qps_per_node, json, jobs, seed, measure_us, payloads, no_multi_object } => {
            if measure_us == 0 {
                eprintln!("error: --measure-us must be at least 1");
                return ExitCode::from(2);
            }
            let payloads = payloads.unwrap_or_else(|| bench_verbs::PAYLOADS.to_vec());
            if let Some(p) = payloads.iter().find(|&&p| p == 0 || p > 1 << 20) {
                eprintln!("error: payload {p} is out of range (1 B to 1 MiB)");
                return ExitCode::from(2);
            }
            let o = bench_verbs::Options {
                nic,
                nodes,
                qps_per_node,
                seed,
                jobs: jobs.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)),
                window: txbed_sim::bench_verbs::Window { warmup_ns: 20_000, measure_ns: measure_us * 1000 },
                multi_window: txbed_sim::bench_verbs::Window::multi_object(),
                payloads,
                multi_object: !no_multi_object,
            };
            let quiet = json;
            let report = bench_verbs::run(&o, |done, total| {
                if !quiet {
                    eprint!("\rsimulations {done}/{total}");
                }
            });
            if !quiet {
                eprintln!();
            }
            match report {
                Ok(r) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&r).expect("report serialises"));
                    } else {
                        print!("{}", bench_verbs::table(&r));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// `txbed sweep`.
fn sweep_cmd(file: &std::path::Path, jobs: Option<usize>, out: Option<PathBuf>, quiet: bool) -> ExitCode {
    use txbed::sweep::{run_points, write_csvs, Sweep};
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
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
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return fail(format!("{}: {e}", dir.display()));
    }
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if !quiet {
        eprintln!("sweep {name:?}: {} runs on {jobs} threads", points.len());
    }
    let reports = run_points(&points, jobs, quiet);
    let (results, summary) = match write_csvs(&sw, &points, &reports, &dir) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let plots = match txbed::plot::plot_csv(&summary, &dir, sw.x.as_deref()) {
        Ok(p) => p,
        Err(e) => return fail(format!("plotting {}: {e}", summary.display())),
    };
    let mut bad = 0;
    for (p, r) in points.iter().zip(&reports) {
        let label = format!("[{}] seed {}", p.values.join(", "), p.seed);
        match r {
            Ok(r) if !r.failures.is_empty() => {
                bad += 1;
                eprintln!("run {label}: {}", txbed::run::failure_summary(&r.failures));
            }
            Ok(r) if r.check.serializable && r.check.nothing_lost != Some(false) && r.check.invariants_ok => {}
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

/// `txbed hybrid-search`.
fn hybrid_search_cmd(
    file: &std::path::Path,
    jobs: Option<usize>,
    seeds: &[u64],
    out: Option<PathBuf>,
    quiet: bool,
) -> ExitCode {
    use txbed::sweep::{hybrid_search, rank, run_points, write_csvs};
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    if seeds.is_empty() {
        return fail("--seeds: give at least one seed".into());
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
        return fail("no hybrid code of this protocol can run on this NIC setup".into());
    }
    let dir = out.unwrap_or_else(|| PathBuf::from("results").join(&sweep.name));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return fail(format!("{}: {e}", dir.display()));
    }
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if !quiet {
        eprintln!("{}: {} codes x {} seeds on {jobs} threads", sweep.name, sweep.axes[0].values.len(), seeds.len());
    }
    let reports = run_points(&points, jobs, quiet);
    if let Err(e) = write_csvs(&sweep, &points, &reports, &dir) {
        return fail(e);
    }
    let _ = txbed::plot::plot_csv(&dir.join("summary.csv"), &dir, None);
    let ranked = rank(&points, &reports);
    println!("rank  code  one-sided stages                               throughput (txn/s, 95% CI)     p50 us          p99 us   aborts  checked");
    for (i, r) in ranked.iter().enumerate() {
        let h = txbed_txn::stage::Hybrid(r.code);
        let stages: Vec<&str> =
            txbed_txn::stage::Stage::ALL.iter().filter(|s| h.onesided(**s)).map(|s| s.name()).collect();
        println!(
            "{:>4}  {:>4}  {:<45}  {:>12.0} +- {:<10.0}  {:>6.2} +- {:<5.2}  {:>7.2}  {:>5.1}%  {}",
            i + 1,
            r.code,
            if stages.is_empty() { "(all RPC)".to_string() } else { stages.join(", ") },
            r.throughput.0,
            r.throughput.1,
            r.p50.0,
            r.p50.1,
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

/// `txbed replay`.
fn replay_cmd(report: &std::path::Path, trace: Option<&std::path::Path>) -> ExitCode {
    let rec = match txbed::replay::load(report) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let digest = if matches!(rec.scenario.workload, scenario::Workload::Verbs(_)) {
        if trace.is_some() {
            eprintln!("error: traces are recorded for transactional runs");
            return ExitCode::from(2);
        }
        run::run(&rec.scenario, &rec.profile, rec.seed).digest
    } else {
        match run::replay_txn(&rec.scenario, &rec.profile, rec.seed, trace) {
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

/// `txbed selftest`.
fn selftest(backend: Backend, device: Option<String>, gid_index: Option<u32>) -> ExitCode {
    use txbed::selftest::SelftestBackend;
    let b = match backend {
        Backend::Sim => {
            eprintln!("error: selftest checks a real backend: --backend sockets or --backend verbs");
            return ExitCode::from(2);
        }
        Backend::Sockets => SelftestBackend::Sockets,
        #[cfg(feature = "verbs")]
        Backend::Verbs => {
            if let Err(e) = txbed::verbs::probe(device.as_deref(), gid_index) {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            SelftestBackend::Verbs { device, gid_index }
        }
        #[cfg(not(feature = "verbs"))]
        Backend::Verbs => return run_verbs(device.as_deref(), gid_index),
    };
    match txbed::selftest::run(b) {
        Ok(lines) => {
            for l in lines {
                println!("ok   {l}");
            }
            println!("selftest passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("selftest failed: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(not(feature = "verbs"))]
const NO_VERBS: &str =
    "error: this txbed was built without the \"verbs\" feature; rebuild with cargo build --release -p txbed --features verbs";

/// `run --backend verbs` in a build without the feature.
#[cfg(not(feature = "verbs"))]
fn run_verbs(_device: Option<&str>, _gid_index: Option<u32>) -> ExitCode {
    eprintln!("{NO_VERBS}");
    ExitCode::from(2)
}

/// `txbed devices`: list RDMA devices, or say why there are none.
#[cfg(feature = "verbs")]
fn devices() -> ExitCode {
    match txbed::verbs::describe_devices() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(not(feature = "verbs"))]
fn devices() -> ExitCode {
    eprintln!("{NO_VERBS}");
    ExitCode::from(2)
}
