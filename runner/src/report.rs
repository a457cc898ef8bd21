//! What a run reports, as data (serialised to report.json; rendered as text by txbed-report):
//! throughput, latency percentiles, per-type and per-stage figures, verbs, the simulator's
//! own counters, failures and the checker's verdict.

use std::collections::BTreeMap;

use serde::Serialize;
use txbed_scenario::Scenario;
use txbed_transport::Opcode;
use txbed_txn::node::stage_index;
use txbed_txn::stage::Stage;

use crate::breakdown::{Series, WorkerCounts};
use crate::outcome::TxnRunResult;
use crate::spec::TxnRunSpec;

#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    /// The 99.9th percentile.
    pub p999: f64,
    /// The largest value recorded (to the histogram's 3 significant digits).
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    /// Percentiles and mean in microseconds of a histogram recorded in nanoseconds.
    pub fn from_ns(h: &hdrhistogram::Histogram<u64>) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

/// A transaction type's latency in the window, microseconds.
#[derive(Debug, Serialize)]
pub struct TypeLatency {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
}

/// Server workers' load (`TxnReport::servers`).
#[derive(Debug, Serialize)]
pub struct ServersReport {
    /// Server workers in the cluster.
    pub workers: usize,
    /// CPU busy time over the whole simulated run, mean and largest over the servers
    /// (`None` on real backends, which do not measure it).
    pub utilisation_mean: Option<f64>,
    pub utilisation_max: Option<f64>,
    /// Messages (WRITE_WITH_IMM, FAA, UD SEND) posted over the run per committed transaction.
    pub messages_per_txn: f64,
}

/// HTM regions over the whole run (`TxnReport::htm`), for protocols that use HTM.
#[derive(Debug, Serialize)]
pub struct HtmReport {
    /// Which HTM ran: `simulated (CPU profile <name>)`; real RTM and the emulation on real
    /// backends are not built yet.
    pub mode: String,
    pub regions: u64,
    pub committed: u64,
    /// Aborts by cause: capacity, conflict-local, conflict-rdma, system, explicit.
    pub aborts: std::collections::BTreeMap<&'static str, u64>,
    /// Transactions that ran the fallback handler, and per committed transaction.
    pub fallbacks: u64,
    pub fallbacks_per_txn: f64,
    /// Mean CPU time inside a region, us.
    pub mean_region_us: f64,
}

/// One node's or one worker's counts in the measured window.
#[derive(Clone, Debug, Serialize)]
pub struct UnitReport {
    pub node: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<u16>,
    pub committed: u64,
    pub aborted: u64,
    /// Mean commit latency of its committed transactions, us (null when none).
    pub mean_latency_us: Option<f64>,
}

/// Throughput, aborts and latency over the whole run (warm-up included) by simulated time.
#[derive(Debug, Serialize)]
pub struct TimeSeries {
    /// Width of a bucket, us (the last may be shorter).
    pub bucket_us: f64,
    /// Where the measured window starts, us: buckets before it are warm-up.
    pub window_from_us: f64,
    pub buckets: Vec<TimeBucket>,
}

#[derive(Debug, Serialize)]
pub struct TimeBucket {
    pub start_us: f64,
    pub end_us: f64,
    /// Transactions committed in the bucket, and per second of it.
    pub committed: u64,
    pub tps: f64,
    pub aborted: u64,
    pub abort_rate: f64,
    /// Mean latency of the bucket's commits, us (null when none).
    pub mean_latency_us: Option<f64>,
}

/// Buckets of `series` about `width_ns` wide, and where the window starts.
pub fn time_series(series: &Series, width_ns: u64, window_from_ns: u64) -> TimeSeries {
    let buckets: Vec<TimeBucket> = series
        .coarse(width_ns)
        .into_iter()
        .map(|(start, end, b)| TimeBucket {
            start_us: start as f64 / 1000.0,
            end_us: end as f64 / 1000.0,
            committed: b.committed,
            tps: b.committed as f64 / ((end - start) as f64 * 1e-9).max(1e-12),
            aborted: b.aborted,
            abort_rate: b.aborted as f64 / (b.committed + b.aborted).max(1) as f64,
            mean_latency_us: (b.committed > 0).then(|| b.latency_ns_sum as f64 / b.committed as f64 / 1000.0),
        })
        .collect();
    let bucket_us = buckets.first().map_or(0.0, |b| b.end_us - b.start_us);
    TimeSeries { bucket_us, window_from_us: window_from_ns as f64 / 1000.0, buckets }
}

/// Default time-series bucket: a twentieth of the run, warm-up included.
pub const DEFAULT_BUCKETS: u64 = 20;

/// How this binary was built: what the build put in `TXBED_BUILD` (`pgo/build.sh`: "release,
/// profile-guided"), else "release" or, with debug assertions on, "debug".
pub fn build_kind() -> &'static str {
    match option_env!("TXBED_BUILD") {
        Some(kind) => kind,
        None if cfg!(debug_assertions) => "debug",
        None => "release",
    }
}

#[derive(Debug, Serialize)]
pub struct SimInfo {
    pub events: u64,
    /// Events per second of wall time (one core): of the event loop alone when `wall` says
    /// how long it took, else of the whole run.
    pub events_per_s: f64,
    /// How the binary that ran was built (`build_kind`): speed figures mean little without it.
    pub build: &'static str,
    pub simulated_ns: u64,
    /// A transactional run's wall-clock seconds by phase (set-up, event loop, check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall: Option<crate::outcome::WallTimes>,
    /// Committed transactions of the whole run per wall-clock second of the whole run: how
    /// fast the simulator answers a researcher.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub committed_per_wall_s: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    /// The scenario as run, every default filled in (RON): what `txbed replay` re-runs.
    pub resolved_scenario: String,
    pub seed: u64,
    /// NIC profile fields the scenario's `nic` overrides, by dotted path (`host.mmio_ns`).
    pub nic_overrides: BTreeMap<String, serde_json::Value>,
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

/// Messages that crossed a link between data centers, whole run.
#[derive(Clone, Debug, Serialize)]
pub struct InterDcReport {
    /// Requests and responses, the NIC's and the RPC layer's alike.
    pub messages: u64,
    /// Per transaction committed over the whole run (pieces and retries included: what the
    /// committed work cost).
    pub per_committed: f64,
    pub retransmits: u64,
    pub lost: u64,
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
    /// NIC profile fields the scenario's `nic` overrides, by dotted path (`host.mmio_ns`).
    pub nic_overrides: BTreeMap<String, serde_json::Value>,
    pub digest: String,
    /// Committed transactions per second in the measured window, whole cluster.
    pub throughput_tps: f64,
    pub committed: u64,
    pub aborted: u64,
    pub abort_rate: f64,
    /// Conflicts in the window per cause (`txbed_txn::attempt::cause`, or a protocol's own).
    pub aborts_by_cause: BTreeMap<String, u64>,
    pub user_aborts: u64,
    /// Commit latency, first attempt to commit, microseconds.
    pub latency_us: Latency,
    /// Committed transactions in the window and per second, per transaction type.
    pub per_type: BTreeMap<String, TypeReport>,
    /// Per stage: mean time per execution (us), round trips and bytes per execution.
    pub stages: BTreeMap<&'static str, StageReport>,
    pub verbs: BTreeMap<&'static str, u64>,
    /// Location lookups: cache hits, misses, stale entries, and the bucket READs (round trips)
    /// and bytes misses cost, counted apart from the stages' own round trips.
    pub location_cache: txbed_txn::locate::CacheStats,
    /// Log records and bytes sent to backups (one per backup), whole run.
    pub log: LogReport,
    /// QP-context cache misses per lookup, simulated NICs only (DrTM+H Sec. 4).
    pub qp_cache_miss_ratio: Option<f64>,
    /// Server workers (the lock table's lock-server agents): how busy, and the messages a
    /// committed transaction cost. `None` for protocols without server workers.
    pub servers: Option<ServersReport>,
    /// HTM regions (whole run); `None` for protocols without HTM.
    pub htm: Option<HtmReport>,
    /// The transaction chopping the run executed (`Workload::chopping`); `None`: none.
    pub chopping: Option<String>,
    /// Messages between data centers (simulator, with `cluster.datacenters`); `None`
    /// otherwise.
    pub inter_dc: Option<InterDcReport>,
    pub sim: SimInfo,
    pub check: CheckReport,
    /// Coordinators that stopped on an error (a failed verb or RPC), with the reason.
    pub failures: Vec<String>,
    /// What makes the run's numbers suspect though it is clean: nothing committed in the
    /// window, or a node or worker that committed nothing (`txbed run --strict` fails on any).
    pub warnings: Vec<String>,
    /// Transactions committed over the whole run (warm-up and the tail after the window
    /// included): the denominator of the stages' `per_committed_us`.
    pub run_committed: u64,
    /// Sum of the stages' `per_committed_us`: the time a committed transaction spent in
    /// stages, its aborted attempts included.
    pub stage_us_per_committed: f64,
    /// Committed, aborted and mean latency in the window per node.
    pub per_node: Vec<UnitReport>,
    /// The same per (node, worker).
    pub per_worker: Vec<UnitReport>,
    pub timeseries: TimeSeries,
    /// The window's commit latency histogram, ns (for `latency.hgrm`; not in report.json).
    #[serde(skip)]
    pub latency_hist: hdrhistogram::Histogram<u64>,
    /// The run's fine time series (re-bucket it with `time_series`; not in report.json).
    #[serde(skip)]
    pub series: Series,
    /// What the simulated clocks measured (`cluster.clocks`); absent without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clocks: Option<ClockReport>,
    /// What the faults did (`faults`; docs/faults.md): each applied, each node's crash and
    /// recovery (times in ns), nodes down at the end, messages lost; absent without faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<crate::faults::FaultReport>,
}

/// The simulated clocks: the sync service and what the simulator, which knows the reference
/// time, measured of every reading's error against its bound (docs/clocks.md).
#[derive(Debug, Serialize)]
pub struct ClockReport {
    /// The sync service's interval and master; null: free-running clocks.
    pub sync_interval_us: Option<f64>,
    pub master: Option<u16>,
    /// The drift the bound assumes, ppm.
    pub max_drift_ppm: f64,
    /// Free-running clocks' configured bound (`run.clock_bound_us`); null with sync.
    pub free_bound_us: Option<f64>,
    /// Largest |reading - reference| over the samples, us.
    pub max_abs_error_us: f64,
    /// Largest bound over the samples, us.
    pub max_bound_us: f64,
    /// Samples whose error exceeded their bound (a clock stepped or drifting beyond
    /// `max_drift_ppm`), and when the first was seen (simulated us).
    pub violations: u64,
    pub first_violation_us: Option<f64>,
    /// Readings checked: every one a protocol took, both sides of every estimate update,
    /// clock step and drift change, and every node at the end.
    pub samples: u64,
    /// Readings before a node's first exchange (no bound to check).
    pub unsynced_samples: u64,
    /// Sync requests sent, those never answered (lost: a datagram dropped, or a node down),
    /// replies that came after the next request went out, and replies that became a node's
    /// estimate.
    pub exchanges: u64,
    pub lost: u64,
    pub late: u64,
    pub accepted: u64,
    pub per_node: Vec<NodeClockReport>,
}

#[derive(Debug, Serialize)]
pub struct NodeClockReport {
    pub node: u16,
    /// The clock's offset at the start (us) and its drift (ppm) as configured or drawn.
    pub offset_us: f64,
    pub drift_ppm: f64,
    pub max_abs_error_us: f64,
    pub max_bound_us: f64,
    pub violations: u64,
    pub exchanges: u64,
    pub lost: u64,
    /// Shortest and longest exchange round trip, us (0 without replies).
    pub min_rtt_us: f64,
    pub max_rtt_us: f64,
}

impl ClockReport {
    pub fn from_stats(s: &txbed_sim::clock::ClockStats) -> ClockReport {
        let us = |ns: u64| ns as f64 / 1000.0;
        let c = &s.config;
        ClockReport {
            sync_interval_us: c.sync.map(|y| us(y.interval_ns)),
            master: c.sync.map(|y| y.master),
            max_drift_ppm: c.max_drift_ppb as f64 / 1000.0,
            free_bound_us: c.sync.is_none().then(|| us(c.free_bound_ns)),
            max_abs_error_us: us(s.max_abs_error_ns()),
            max_bound_us: us(s.max_bound_ns()),
            violations: s.violations(),
            first_violation_us: s.first_violation_ns().map(us),
            samples: s.samples(),
            unsynced_samples: s.nodes.iter().map(|n| n.unsynced).sum(),
            exchanges: s.exchanges(),
            lost: s.lost(),
            late: s.nodes.iter().map(|n| n.sync.late).sum(),
            accepted: s.accepted(),
            per_node: s
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| NodeClockReport {
                    node: i as u16,
                    offset_us: c.offset_ns[i] as f64 / 1000.0,
                    drift_ppm: c.drift_ppb[i] as f64 / 1000.0,
                    max_abs_error_us: us(n.max_abs_error_ns),
                    max_bound_us: us(n.max_bound_ns),
                    violations: n.violations,
                    exchanges: n.sync.sent,
                    lost: n.sync.unanswered(),
                    min_rtt_us: us(n.sync.min_rtt_ns),
                    max_rtt_us: us(n.sync.max_rtt_ns),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct LogReport {
    pub records: u64,
    pub bytes: u64,
    /// Times a one-sided writer found its ring full and waited for the backup
    /// (`protocol.log_ring_kib`, `log_reclaim_kib`; docs/transactions.md).
    pub room_waits: u64,
    /// Records and bytes written to nodes' own NVRAM logs (DrTM, Sec. 5.6), whole run.
    pub nvram_records: u64,
    pub nvram_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct TypeReport {
    pub committed: u64,
    pub tps: f64,
    /// Commit latency of this type in the window, us.
    pub latency_us: TypeLatency,
}

#[derive(Debug, Serialize)]
pub struct StageReport {
    pub mean_us: f64,
    pub round_trips: f64,
    pub bytes: f64,
    /// Record accesses served on the local path per execution (CPU only: no round trip, no
    /// wire bytes; `protocol.local_path`).
    pub local: f64,
    pub executions: u64,
    /// Location-lookup bucket READs per execution (round trips apart from `round_trips`).
    pub lookup_reads: f64,
    /// Time in this stage per committed transaction, us: every execution over the run,
    /// aborted attempts included, divided by `run_committed`.
    pub per_committed_us: f64,
    /// Messages to and from other data centers per committed transaction (a request and its
    /// reply are two), every execution over the run included; 0 without data centers.
    pub inter_dc_messages_per_committed: f64,
    /// Executions that waited for another data center, per committed transaction (inter-DC
    /// round trips, RedT's Table 1).
    pub inter_dc_round_trips_per_committed: f64,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    /// The checker's verdict (`txbed_checker::Report::clean`).
    pub clean: bool,
    /// The isolation level the history was checked at (`protocol.isolation`, else the
    /// protocol's), and whether it holds: no anomaly it forbids besides lost writes and
    /// broken invariants, which have their own verdicts.
    pub level: &'static str,
    pub level_holds: bool,
    pub serializable: bool,
    pub checked_txns: usize,
    /// Of `checked_txns`, the aborted attempts (every abort the run counts is recorded).
    pub aborted_txns: usize,
    pub nothing_lost: Option<bool>,
    pub invariants_ok: bool,
    /// Anomalies the level forbids, by class.
    pub anomalies: BTreeMap<&'static str, usize>,
    /// Anomalies present that the level allows, by class: they do not fail the run.
    pub allowed: BTreeMap<&'static str, usize>,
    pub explanations: Vec<String>,
}

/// Whether a check at its level holds apart from lost writes and invariants (`level_holds`).
pub fn level_holds(r: &txbed_checker::Report) -> bool {
    use txbed_checker::AnomalyKind::{Invariant, LostWrite};
    r.counts.keys().all(|k| *k == LostWrite.name() || *k == Invariant.name())
}

impl TxnReport {
    /// The run is clean: no coordinator failed and the checker found nothing wrong.
    pub fn clean(&self) -> bool {
        self.failures.is_empty() && self.check.clean
    }
}

/// Workers named one by one in a warning before the rest are counted.
const NAMED_WORKERS: usize = 8;

/// The warnings of a run's per-worker counts (`TxnReport::warnings`).
pub fn warnings(committed: u64, aborted: u64, per_node: &[UnitReport], per_worker: &[UnitReport]) -> Vec<String> {
    if committed == 0 {
        return vec![format!(
            "no transaction committed in the measured window ({aborted} conflicts): throughput and latency describe nothing"
        )];
    }
    let mut out = Vec::new();
    let idle_nodes: Vec<u16> = per_node.iter().filter(|u| u.committed == 0).map(|u| u.node).collect();
    for u in per_node.iter().filter(|u| u.committed == 0) {
        out.push(format!("node {} committed nothing in the measured window ({} conflicts)", u.node, u.aborted));
    }
    let idle: Vec<&UnitReport> =
        per_worker.iter().filter(|u| u.committed == 0 && !idle_nodes.contains(&u.node)).collect();
    if !idle.is_empty() {
        let named: Vec<String> = idle
            .iter()
            .take(NAMED_WORKERS)
            .map(|u| format!("node {} worker {} ({} conflicts)", u.node, u.worker.unwrap_or(0), u.aborted))
            .collect();
        let more = if idle.len() > NAMED_WORKERS {
            format!(" and {} more", idle.len() - NAMED_WORKERS)
        } else {
            String::new()
        };
        out.push(format!(
            "{} of {} workers committed nothing in the measured window: {}{more}",
            idle.len(),
            per_worker.len(),
            named.join(", ")
        ));
    }
    out
}

/// The report of a finished run of `s`.
pub fn txn_report(
    s: &Scenario,
    spec: &TxnRunSpec,
    seed: u64,
    r: &TxnRunResult,
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
                    local: r.stats.stage_local[i] as f64 / n as f64,
                    executions: n,
                    lookup_reads: r.stats.stage_lookup_reads[i] as f64 / n as f64,
                    per_committed_us: r.stats.stage_ns[i] as f64 / r.stats.committed.max(1) as f64 / 1000.0,
                    inter_dc_messages_per_committed: r.stats.stage_inter_dc_messages[i] as f64
                        / r.stats.committed.max(1) as f64,
                    inter_dc_round_trips_per_committed: r.stats.stage_inter_dc_round_trips[i] as f64
                        / r.stats.committed.max(1) as f64,
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
    let unit = |node: u16, worker: Option<u16>, c: WorkerCounts| UnitReport {
        node,
        worker,
        committed: c.committed,
        aborted: c.aborted,
        mean_latency_us: (c.committed > 0).then(|| c.latency_ns_sum as f64 / c.committed as f64 / 1000.0),
    };
    // Every node and worker, those that never committed or aborted included.
    let mut per_worker = Vec::new();
    let mut per_node = Vec::new();
    for node in 0..spec.nodes {
        let mut sum = WorkerCounts::default();
        for wk in 0..spec.workers {
            let c = r.measured.per_worker.get(&(node, wk)).copied().unwrap_or_default();
            sum.add(&c);
            per_worker.push(unit(node, Some(wk), c));
        }
        per_node.push(unit(node, None, sum));
    }
    let end_ns = spec.warmup_ns + spec.duration_ns;
    let stage_us_per_committed = stages.values().map(|s: &StageReport| s.per_committed_us).sum();
    // Server workers (the lock table's) run no transactions: no warning for them.
    let servers = spec.protocol.server_workers(&spec.protocol_options);
    let agents: Vec<UnitReport> = per_worker.iter().filter(|u| u.worker.unwrap_or(0) >= servers).cloned().collect();
    let mut warns = warnings(committed, aborted, &per_node, &agents);
    if let Some(f) = &r.faults {
        for n in &f.down_at_end {
            warns.push(format!(
                "node {n} was down at the end of the run (crashed, never restarted): it was recovered after the run only for the final check"
            ));
        }
    }
    TxnReport {
        warnings: warns,
        faults: r.faults.clone(),
        run_committed: r.stats.committed,
        stage_us_per_committed,
        per_node,
        per_worker,
        timeseries: time_series(&r.measured.series, end_ns.div_ceil(DEFAULT_BUCKETS), spec.warmup_ns),
        latency_hist: h.clone(),
        series: r.measured.series.clone(),
        clocks: r.clocks.as_ref().map(ClockReport::from_stats),
        scenario: s.name.clone(),
        resolved_scenario: if s.faults.is_some() {
            // With the fault schedule the run drew: the copy replays without drawing again.
            let mut seeded = s.clone();
            seeded.run.seed = seed;
            seeded.with_faults_expanded().to_ron()
        } else {
            s.to_ron()
        },
        backend,
        protocol: spec.protocol.name().into(),
        hybrid: spec.hybrid.to_string(),
        seed,
        nic_overrides: s.nic_overrides().into_iter().collect(),
        digest: format!("{:016x}", r.digest),
        throughput_tps: r.throughput_tps(),
        committed,
        aborted,
        abort_rate: aborted as f64 / (committed + aborted).max(1) as f64,
        aborts_by_cause: r.measured.aborted_by.clone(),
        user_aborts: r.stats.aborted_user,
        latency_us: Latency::from_ns(h),
        per_type: r
            .measured
            .per_kind
            .iter()
            .map(|(k, &n)| {
                let latency_us = match r.measured.per_kind_latency.get(k) {
                    Some(h) => TypeLatency {
                        p50: h.value_at_quantile(0.5) as f64 / 1000.0,
                        p99: h.value_at_quantile(0.99) as f64 / 1000.0,
                        mean: h.mean() / 1000.0,
                    },
                    None => TypeLatency { p50: 0.0, p99: 0.0, mean: 0.0 },
                };
                (k.clone(), TypeReport { committed: n, tps: n as f64 / window_s, latency_us })
            })
            .collect(),
        stages,
        verbs,
        location_cache: r.location,
        log: LogReport {
            records: r.stats.log_records,
            bytes: r.stats.log_bytes,
            room_waits: r.stats.log_room_waits,
            nvram_records: r.stats.nvram_log_records,
            nvram_bytes: r.stats.nvram_log_bytes,
        },
        qp_cache_miss_ratio: r.qp_cache_miss_ratio,
        servers: (servers > 0).then(|| {
            let util: Vec<f64> = r.server_busy_ns.iter().map(|b| *b as f64 / r.simulated_ns.max(1) as f64).collect();
            let messages =
                [Opcode::WriteImm, Opcode::Faa, Opcode::Send].iter().map(|o| r.verbs[*o as usize]).sum::<u64>();
            ServersReport {
                workers: spec.nodes as usize * servers as usize,
                utilisation_mean: (!util.is_empty()).then(|| util.iter().sum::<f64>() / util.len() as f64),
                utilisation_max: util.iter().copied().reduce(f64::max),
                messages_per_txn: messages as f64 / r.stats.committed.max(1) as f64,
            }
        }),
        htm: spec.protocol.needs().htm.then(|| {
            let h = &r.stats.htm;
            HtmReport {
                mode: r.htm_mode.clone().unwrap_or_else(|| "none".into()),
                regions: h.regions,
                committed: h.committed,
                aborts: txbed_txn::htm::CAUSES.iter().copied().zip(h.aborts).collect(),
                fallbacks: h.fallbacks,
                fallbacks_per_txn: h.fallbacks as f64 / r.stats.committed.max(1) as f64,
                mean_region_us: h.region_ns as f64 / h.regions.max(1) as f64 / 1000.0,
            }
        }),
        chopping: spec.workload.chopping(),
        inter_dc: r.inter_dc.map(|d| InterDcReport {
            messages: d.messages,
            per_committed: d.messages as f64 / r.stats.committed.max(1) as f64,
            retransmits: d.retransmits,
            lost: d.lost,
        }),
        sim: {
            let phases = (r.wall.loop_s > 0.0).then_some(r.wall);
            let loop_s = phases.map_or(wall, |p| p.loop_s);
            SimInfo {
                events: r.events,
                events_per_s: r.events as f64 / loop_s.max(1e-9),
                build: build_kind(),
                simulated_ns: r.simulated_ns,
                wall: phases,
                committed_per_wall_s: phases.map(|_| r.stats.committed as f64 / wall.max(1e-9)),
            }
        },
        failures: r.failures.clone(),
        check: CheckReport {
            clean: r.report.clean(),
            level: r.report.level.name(),
            level_holds: level_holds(&r.report),
            serializable: r.report.serializable,
            checked_txns: r.report.checked_txns,
            aborted_txns: r.report.aborted,
            nothing_lost: r.report.nothing_lost,
            invariants_ok: r.report.invariants_ok,
            anomalies: r.report.counts.clone(),
            allowed: r.report.allowed.clone(),
            explanations: r.report.anomalies.iter().map(|a| a.explanation.clone()).collect(),
        },
    }
}
