//! `txbed run SCENARIO`: one simulated run and its report.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use txbed_sim::bench_verbs::{closed_loop, LoopSpec, Setting, Window};
use txbed_sim::NicProfile;
use txbed_transport::Opcode;
use txbed_txn::node::stage_index;
use txbed_txn::stage::Stage;

use crate::scenario::{Scenario, Workload};
use crate::txn::TxnRunSpec;

#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Latency {
    /// Percentiles and mean in microseconds of a histogram recorded in nanoseconds.
    fn from_ns(h: &hdrhistogram::Histogram<u64>) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            mean: h.mean() / 1000.0,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct SimInfo {
    pub events: u64,
    /// Events per second of wall time (one core).
    pub events_per_s: f64,
    pub simulated_ns: u64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    /// The scenario as run, every default filled in (RON): what `txbed replay` re-runs.
    pub resolved_scenario: String,
    pub seed: u64,
    /// 64-bit digest of every simulated event, as 16 hex digits.
    pub digest: String,
    /// Completed requests per machine per second, in millions.
    pub throughput_mops_per_machine: f64,
    /// Latency of one round of `outstanding` requests, microseconds.
    pub latency_us: Latency,
    pub verbs: BTreeMap<&'static str, u64>,
    pub qp_cache_miss_ratio: f64,
    pub sim: SimInfo,
}

pub fn run(s: &Scenario, profile: &NicProfile, seed: u64) -> Report {
    let Workload::Verbs(v) = &s.workload else { unreachable!("verbs scenarios only") };
    let c = &s.cluster;
    let spec = LoopSpec {
        setting: Setting { label: format!("{}-node", c.nodes), nodes: c.nodes, qps_per_node: c.qps_per_node },
        workers: c.workers,
        coroutines: c.coroutines,
        depth: v.outstanding,
        verb: v.verb.raw(),
        payload: v.payload,
    };
    let w = Window { warmup_ns: s.run.warmup_us * 1000, measure_ns: s.run.measure_us * 1000 };
    let start = Instant::now();
    let out = closed_loop(profile, &spec, seed, w);
    let wall = start.elapsed().as_secs_f64();
    let h = &out.latency_ns;
    let mut verbs = BTreeMap::new();
    for op in Opcode::ALL {
        let n = out.outcome.verbs[op as usize];
        if n > 0 {
            verbs.insert(op.name(), n);
        }
    }
    Report {
        scenario: s.name.clone(),
        resolved_scenario: s.to_ron(),
        seed,
        digest: format!("{:016x}", out.outcome.digest),
        throughput_mops_per_machine: out.outcome.per_machine_per_s / 1e6,
        latency_us: Latency::from_ns(h),
        verbs,
        qp_cache_miss_ratio: out.outcome.qp_miss_ratio,
        sim: SimInfo {
            events: out.outcome.events,
            events_per_s: out.outcome.events as f64 / wall.max(1e-9),
            simulated_ns: w.warmup_ns + w.measure_ns,
        },
    }
}

pub fn text(s: &Scenario, r: &Report) -> String {
    let Workload::Verbs(v) = &s.workload else { unreachable!("verbs scenarios only") };
    let c = &s.cluster;
    let verbs: Vec<String> = r.verbs.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(
        "scenario {:?}, seed {}\n  cluster   {} nodes x {} workers x {} coroutines, NIC {}\n  workload  {:?} {} B, {} outstanding per coroutine, random remote nodes\n  throughput {:.2} M requests/s per machine\n  latency   p50 {:.2} us  p90 {:.2} us  p99 {:.2} us  mean {:.2} us\n  verbs     {}\n  simulator {} events, {:.2} M events/s, {} us simulated\n  digest    {}\n",
        r.scenario,
        r.seed,
        c.nodes,
        c.workers,
        c.coroutines,
        c.nic,
        v.verb,
        v.payload,
        v.outstanding,
        r.throughput_mops_per_machine,
        r.latency_us.p50,
        r.latency_us.p90,
        r.latency_us.p99,
        r.latency_us.mean,
        verbs.join(", "),
        r.sim.events,
        r.sim.events_per_s / 1e6,
        r.sim.simulated_ns / 1000,
        r.digest
    )
}

/// The report of a transactional run (keys as docs/scenarios.md lists them).
#[derive(Debug, Serialize)]
pub struct TxnReport {
    pub scenario: String,
    /// The scenario as run, every default filled in (RON): what `txbed replay` re-runs.
    pub resolved_scenario: String,
    /// `sim`, `sockets` or `verbs`: on a real backend, `sim.simulated_ns` is wall time and
    /// `digest` is zero.
    pub backend: &'static str,
    pub protocol: String,
    pub hybrid: String,
    pub seed: u64,
    pub digest: String,
    /// Committed transactions per second in the measured window, whole cluster.
    pub throughput_tps: f64,
    pub committed: u64,
    pub aborted: u64,
    pub abort_rate: f64,
    pub user_aborts: u64,
    /// Commit latency, first attempt to commit, microseconds.
    pub latency_us: Latency,
    /// Committed transactions in the window and per second, per transaction type.
    pub per_type: BTreeMap<String, TypeReport>,
    /// Per stage: mean time per execution (us), round trips and bytes per execution.
    pub stages: BTreeMap<&'static str, StageReport>,
    pub verbs: BTreeMap<&'static str, u64>,
    pub sim: SimInfo,
    pub check: CheckReport,
    /// Coordinators that stopped on an error (a failed verb or RPC), with the reason.
    pub failures: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct TypeReport {
    pub committed: u64,
    pub tps: f64,
}

#[derive(Debug, Serialize)]
pub struct StageReport {
    pub mean_us: f64,
    pub round_trips: f64,
    pub bytes: f64,
    pub executions: u64,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub serializable: bool,
    pub checked_txns: usize,
    pub nothing_lost: Option<bool>,
    pub invariants_ok: bool,
    pub anomalies: BTreeMap<&'static str, usize>,
    pub explanations: Vec<String>,
}

/// The run spec a transactional scenario describes.
pub fn txn_spec(s: &Scenario, profile: &NicProfile, seed: u64) -> Result<TxnRunSpec, String> {
    let c = &s.cluster;
    let p = s.protocol.as_ref().ok_or("a transactional workload needs a protocol")?;
    let workload: std::sync::Arc<dyn txbed_workloads::Workload> = match &s.workload {
        Workload::SmallBank(w) => std::sync::Arc::new(w.clone()),
        Workload::Ycsb(w) => std::sync::Arc::new(w.prepare(c.nodes)),
        Workload::Tpce(w) => std::sync::Arc::new(w.prepare(c.nodes)),
        Workload::Tpcc(w) => std::sync::Arc::new(w.prepare(c.nodes, c.workers, c.coroutines)),
        Workload::Verbs(_) => return Err("not a transactional workload".into()),
    };
    let mut profile = profile.clone();
    if let Some(k) = c.nics_per_node {
        profile.nics_per_node = k;
    }
    let (hybrid, options, protocol_options) = p.resolve(&profile);
    Ok(TxnRunSpec {
        protocol: p.name.protocol(),
        protocol_options,
        nodes: c.nodes,
        workers: c.workers,
        coroutines: c.coroutines,
        profile,
        seed,
        hybrid,
        replication: p.replication,
        workload,
        warmup_ns: s.run.warmup_us * 1000,
        duration_ns: s.run.measure_us * 1000,
        cache_bytes: p.cache_mb << 20,
        options,
        bug: None,
        allow_unsafe_atomics: false,
        link_delay_ns: c.link_delay_us.iter().flatten().flatten().map(|&d| d as u64 * 1000).collect(),
        trace: false,
    })
}

pub fn run_txn(
    s: &Scenario,
    profile: &NicProfile,
    seed: u64,
    history: Option<&std::path::Path>,
) -> Result<TxnReport, String> {
    run_txn_with(s, profile, seed, history, &mut |_, _| {})
}

/// [`run_txn`] with a progress callback (simulated ns so far, end ns).
pub fn run_txn_with(
    s: &Scenario,
    profile: &NicProfile,
    seed: u64,
    history: Option<&std::path::Path>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TxnReport, String> {
    let spec = txn_spec(s, profile, seed)?;
    let start = Instant::now();
    let mut r = crate::txn::run_txns_with(&spec, progress)?;
    let wall = start.elapsed().as_secs_f64();
    write_history(s, seed, &mut r, history)?;
    Ok(txn_report(s, &spec, seed, &r, wall, "sim"))
}

/// Re-runs a transactional scenario (optionally writing a Chrome trace); returns the digest.
pub fn replay_txn(
    s: &Scenario,
    profile: &NicProfile,
    seed: u64,
    trace: Option<&std::path::Path>,
) -> Result<String, String> {
    let mut spec = txn_spec(s, profile, seed)?;
    spec.trace = trace.is_some();
    let r = crate::txn::run_txns(&spec)?;
    if let Some(path) = trace {
        let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        crate::trace::write_chrome_trace(&r.trace, spec.nodes, spec.workers, std::io::BufWriter::new(f))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(format!("{:016x}", r.digest))
}

/// Where a run's results go besides standard output.
pub struct RunOutput<'a> {
    /// `--out DIR`: report.json, history.jsonl, scenario.ron.
    pub dir: Option<&'a std::path::Path>,
    /// `--history FILE`.
    pub history: Option<&'a std::path::Path>,
    pub json: bool,
    pub quiet: bool,
}

impl RunOutput<'_> {
    /// The history file to write: `--history`, else DIR/history.jsonl.
    fn history_path(&self) -> Option<std::path::PathBuf> {
        self.history.map(|p| p.to_path_buf()).or_else(|| self.dir.map(|d| d.join("history.jsonl")))
    }

    fn prepare(&self) -> Result<(), String> {
        if let Some(d) = self.dir {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: cannot create output directory: {e}", d.display()))?;
        }
        Ok(())
    }

    /// Writes DIR/report.json and DIR/scenario.ron, and prints the report.
    fn finish<R: Serialize>(&self, s: &Scenario, report: &R, text: &str) -> Result<(), String> {
        let json = serde_json::to_string_pretty(report).expect("report serialises");
        if let Some(d) = self.dir {
            let write = |name: &str, body: &str| {
                let p = d.join(name);
                std::fs::write(&p, body).map_err(|e| format!("{}: {e}", p.display()))
            };
            write("report.json", &json)?;
            write("scenario.ron", &s.to_ron())?;
        }
        if !self.quiet {
            if self.json {
                println!("{json}");
            } else {
                print!("{text}");
            }
        }
        Ok(())
    }
}

/// `txbed run` on the simulator: the report, files, and exit code (0 clean, 1 the checker
/// found anomalies, 2 an error).
pub fn run_sim(s: &Scenario, profile: &NicProfile, seed: u64, out: RunOutput<'_>) -> std::process::ExitCode {
    use std::process::ExitCode;
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    if let Err(e) = out.prepare() {
        return fail(e);
    }
    if matches!(s.workload, Workload::Verbs(_)) {
        let r = run(s, profile, seed);
        return match out.finish(s, &r, &text(s, &r)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        };
    }
    let mut bar = Progress::new(out.quiet);
    let history = out.history_path();
    let r = match run_txn_with(s, profile, seed, history.as_deref(), &mut |t, end| bar.update(t, end)) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    bar.done();
    if let Err(e) = out.finish(s, &r, &txn_text(s, &r)) {
        return fail(e);
    }
    if !r.failures.is_empty() {
        return fail(failure_summary(&r.failures));
    }
    // A run the checker rejects is a failed run.
    if r.check.serializable && r.check.nothing_lost != Some(false) && r.check.invariants_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// A progress bar on standard error that appears only once a run has taken a second (and
/// only on a terminal: indicatif hides it otherwise).
pub struct Progress {
    start: Instant,
    bar: Option<indicatif::ProgressBar>,
    off: bool,
}

impl Progress {
    pub fn new(off: bool) -> Progress {
        Progress { start: Instant::now(), bar: None, off }
    }
    pub fn update(&mut self, t: u64, end: u64) {
        if self.off {
            return;
        }
        if self.bar.is_none() && self.start.elapsed().as_secs_f64() >= 1.0 {
            let b = indicatif::ProgressBar::new(end / 1000);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} us simulated, eta {eta}")
                    .expect("template"),
            );
            self.bar = Some(b);
        }
        if let Some(b) = &self.bar {
            b.set_position(t / 1000);
        }
    }
    pub fn done(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

fn write_history(
    s: &Scenario,
    seed: u64,
    r: &mut crate::txn::TxnRunResult,
    history: Option<&std::path::Path>,
) -> Result<(), String> {
    if let Some(path) = history {
        r.history.meta.insert("scenario".into(), s.name.clone().into());
        r.history.meta.insert("seed".into(), seed.into());
        let f = std::fs::File::create(path).map_err(|e| format!("{}: cannot write history: {e}", path.display()))?;
        r.history.write(std::io::BufWriter::new(f)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn txn_report(
    s: &Scenario,
    spec: &TxnRunSpec,
    seed: u64,
    r: &crate::txn::TxnRunResult,
    wall: f64,
    backend: &'static str,
) -> TxnReport {
    let h = &r.measured.latency_ns;
    let mut stages = BTreeMap::new();
    for stage in Stage::ALL {
        let i = stage_index(stage);
        let n = r.stats.stage_calls[i];
        if n > 0 {
            stages.insert(
                stage.name(),
                StageReport {
                    mean_us: r.stats.stage_ns[i] as f64 / n as f64 / 1000.0,
                    round_trips: r.stats.stage_round_trips[i] as f64 / n as f64,
                    bytes: r.stats.stage_bytes[i] as f64 / n as f64,
                    executions: n,
                },
            );
        }
    }
    let mut verbs = BTreeMap::new();
    for op in Opcode::ALL {
        if r.verbs[op as usize] > 0 {
            verbs.insert(op.name(), r.verbs[op as usize]);
        }
    }
    let (committed, aborted) = (r.measured.committed, r.measured.aborted);
    let window_s = (r.measured.window_ns as f64 * 1e-9).max(1e-12);
    TxnReport {
        scenario: s.name.clone(),
        resolved_scenario: s.to_ron(),
        backend,
        protocol: spec.protocol.name().into(),
        hybrid: spec.hybrid.to_string(),
        seed,
        digest: format!("{:016x}", r.digest),
        throughput_tps: r.throughput_tps(),
        committed,
        aborted,
        abort_rate: aborted as f64 / (committed + aborted).max(1) as f64,
        user_aborts: r.stats.aborted_user,
        latency_us: Latency::from_ns(h),
        per_type: r
            .measured
            .per_kind
            .iter()
            .map(|(k, &n)| (k.clone(), TypeReport { committed: n, tps: n as f64 / window_s }))
            .collect(),
        stages,
        verbs,
        sim: SimInfo { events: r.events, events_per_s: r.events as f64 / wall.max(1e-9), simulated_ns: r.simulated_ns },
        failures: r.failures.clone(),
        check: CheckReport {
            serializable: r.report.serializable,
            checked_txns: r.report.checked_txns,
            nothing_lost: r.report.nothing_lost,
            invariants_ok: r.report.invariants_ok,
            anomalies: r.report.counts.clone(),
            explanations: r.report.anomalies.iter().map(|a| a.explanation.clone()).collect(),
        },
    }
}

/// One process of a real run (sockets or verbs); rank 0 prints the report. Exit code: 0 clean, 1 the checker
/// found anomalies, 2 an error (bad input, a dead or unreachable peer).
#[allow(clippy::too_many_arguments)]
pub fn run_real(
    s: &Scenario,
    profile: &NicProfile,
    seed: u64,
    rank: Option<u32>,
    size: Option<u32>,
    coordinator: Option<&str>,
    backend: crate::host::RealBackend,
    out: RunOutput<'_>,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let env = |k: &str| std::env::var(k).ok();
    let me = match crate::bootstrap::rank_from(env, rank, size) {
        Ok(m) => m,
        Err(e) => return fail(e.0),
    };
    let coord =
        coordinator.map(str::to_string).or_else(|| env("TXBED_COORDINATOR")).unwrap_or_else(|| "127.0.0.1:7821".into());
    let addr = match crate::bootstrap::coordinator_from(|_| None, Some(&coord)) {
        Ok(a) => a,
        Err(e) => return fail(e.0),
    };
    if matches!(s.workload, Workload::Verbs(_)) {
        return fail("real backends run transactional scenarios; Verbs workloads run on the simulator".into());
    }
    let spec = match txn_spec(s, profile, seed) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let start = Instant::now();
    let name = match backend {
        crate::host::RealBackend::Sockets { .. } => "sockets",
        #[cfg(feature = "verbs")]
        crate::host::RealBackend::Verbs { .. } => "verbs",
    };
    match crate::host::run_real_node(&spec, me, addr, backend) {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(mut r)) => {
            if let Err(e) = out.prepare().and_then(|_| write_history(s, seed, &mut r, out.history_path().as_deref())) {
                return fail(e);
            }
            let rep = txn_report(s, &spec, seed, &r, start.elapsed().as_secs_f64(), name);
            if let Err(e) = out.finish(s, &rep, &txn_text(s, &rep)) {
                return fail(e);
            }
            if rep.committed == 0 {
                eprintln!(
                    "note: nothing committed in the {} us window; a real backend counts wall-clock time, \
                     so give it a longer one, e.g. --warmup-us 100000 --measure-us 1000000",
                    s.run.measure_us
                );
            }
            if !r.failures.is_empty() {
                return fail(failure_summary(&r.failures));
            }
            let clean = rep.check.serializable && rep.check.nothing_lost != Some(false) && rep.check.invariants_ok;
            if clean {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => fail(format!("rank {}: {e}", me.rank)),
    }
}

/// Coordinator failures, one line per distinct reason (at most five).
pub fn failure_summary(failures: &[String]) -> String {
    let mut distinct: Vec<&String> = failures.iter().collect();
    distinct.sort();
    distinct.dedup();
    let mut out = format!("{} coordinators failed; {} distinct reasons:", failures.len(), distinct.len());
    for f in distinct.iter().take(5) {
        out.push_str(&format!("\n  {f}"));
    }
    out
}

pub fn txn_text(s: &Scenario, r: &TxnReport) -> String {
    let c = &s.cluster;
    let yes = |b: bool| if b { "yes" } else { "NO" };
    let stages: Vec<String> = r
        .stages
        .iter()
        .map(|(k, v)| format!("{k} {:.2} us / {:.1} RTT / {:.0} B", v.mean_us, v.round_trips, v.bytes))
        .collect();
    let verbs: Vec<String> = r.verbs.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let types: Vec<String> = r.per_type.iter().map(|(k, t)| format!("{k} {:.0}/s", t.tps)).collect();
    let mut out = format!(
        "scenario {:?}, seed {}: {} ({}) on {}\n  cluster    {} nodes x {} workers x {} coroutines, NIC {}\n  throughput {:.0} transactions/s ({:.0} per node), {} committed in the window\n  latency    p50 {:.2} us  p90 {:.2} us  p99 {:.2} us  mean {:.2} us\n  aborts     {:.1}% ({} conflicts in the window), {} user aborts\n  types      {}\n  stages     {}\n  verbs      {}\n{}  serializable: {}{}; {} transactions checked, invariants {}\n",
        r.scenario,
        r.seed,
        r.protocol,
        r.hybrid,
        match &s.workload {
            Workload::SmallBank(_) => "SmallBank",
            Workload::Ycsb(_) => "YCSB",
            Workload::Tpce(_) => "TPC-E",
            Workload::Tpcc(_) => "TPC-C",
            Workload::Verbs(_) => "verbs",
        },
        c.nodes,
        c.workers,
        c.coroutines,
        c.nic,
        r.throughput_tps,
        r.throughput_tps / c.nodes as f64,
        r.committed,
        r.latency_us.p50,
        r.latency_us.p90,
        r.latency_us.p99,
        r.latency_us.mean,
        r.abort_rate * 100.0,
        r.aborted,
        r.user_aborts,
        types.join(" | "),
        stages.join(" | "),
        verbs.join(", "),
        if r.backend == "sim" {
            format!(
                "  simulator  {} events, {:.2} M events/s, {} us simulated\n  digest     {}\n",
                r.sim.events,
                r.sim.events_per_s / 1e6,
                r.sim.simulated_ns / 1000,
                r.digest
            )
        } else {
            format!("  backend    {}, {:.2} s wall clock (not deterministic: no digest)\n", r.backend, r.sim.simulated_ns as f64 / 1e9)
        },
        yes(r.check.serializable),
        match r.check.nothing_lost {
            Some(true) => ", nothing lost",
            Some(false) => ", WRITES LOST",
            None => "",
        },
        r.check.checked_txns,
        if r.check.invariants_ok { "hold" } else { "VIOLATED" }
    );
    for e in r.check.explanations.iter().take(3) {
        out.push_str(&format!("\n{e}\n"));
    }
    out
}
