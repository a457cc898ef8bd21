//! What a run measured and what the checker found: the window's counters and latencies, the
//! history, and assembling every node's results into them.

use hdrhistogram::Histogram;
use txbed_checker::{check, History, Invariant, Options, Report};
use txbed_transport::TraceEvent;
use txbed_txn::node::TxnStats;
use txbed_workloads::Consistency;

use crate::breakdown::{Series, WorkerCounts};
use crate::node::NodeResult;
use crate::spec::TxnRunSpec;

/// What happened inside the measured window.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub committed: u64,
    pub aborted: u64,
    /// Commit latency (first attempt to commit), nanoseconds.
    pub latency_ns: Histogram<u64>,
    pub window_ns: u64,
    /// Committed in the window, per transaction type (`TxnSpec::kind`).
    pub per_kind: std::collections::BTreeMap<String, u64>,
    /// Aborted by a conflict in the window, per cause (`Attempt::Conflict`).
    pub aborted_by: std::collections::BTreeMap<String, u64>,
    /// Commit latency in the window per transaction type, ns.
    pub per_kind_latency: std::collections::BTreeMap<String, Histogram<u64>>,
    /// Committed, aborted and latency in the window per (node, worker).
    pub per_worker: std::collections::BTreeMap<(u16, u16), WorkerCounts>,
    /// Commits, aborts and latency over the whole run (warm-up included), by simulated time.
    pub series: Series,
}

impl Measured {
    /// Nothing measured yet, over a window of `window_ns`.
    pub fn new(window_ns: u64) -> Measured {
        Measured {
            committed: 0,
            aborted: 0,
            latency_ns: Histogram::new(3).expect("3 significant digits is a valid precision"),
            window_ns,
            per_kind: Default::default(),
            aborted_by: Default::default(),
            per_kind_latency: Default::default(),
            per_worker: Default::default(),
            series: Series::default(),
        }
    }

    /// Nothing measured yet, for a run of `warmup_ns` then a window of `window_ns`.
    pub fn for_run(warmup_ns: u64, window_ns: u64) -> Measured {
        Measured { series: Series::over(warmup_ns + window_ns), ..Measured::new(window_ns) }
    }

    /// A commit of a `kind` transaction by `who` (node, worker) at `now`, `latency_ns` after
    /// its first attempt; `in_window`: inside the measured window.
    pub fn commit(&mut self, who: (u16, u16), kind: &str, now: u64, latency_ns: u64, in_window: bool) {
        self.series.commit(now, latency_ns);
        if !in_window {
            return;
        }
        self.committed += 1;
        match self.per_kind.get_mut(kind) {
            Some(k) => *k += 1,
            None => {
                self.per_kind.insert(kind.to_string(), 1);
            }
        }
        let _ = self.latency_ns.record(latency_ns);
        let h = self.per_kind_latency.entry(kind.to_string()).or_insert_with(new_histogram);
        let _ = h.record(latency_ns);
        let w = self.per_worker.entry(who).or_insert(WorkerCounts { node: who.0, worker: who.1, ..Default::default() });
        w.committed += 1;
        w.latency_ns_sum += latency_ns;
    }

    /// A conflict (`why`) of `who` (node, worker) at `now`.
    pub fn abort(&mut self, who: (u16, u16), why: &str, now: u64, in_window: bool) {
        self.series.abort(now);
        if !in_window {
            return;
        }
        self.aborted += 1;
        match self.aborted_by.get_mut(why) {
            Some(k) => *k += 1,
            None => {
                self.aborted_by.insert(why.to_string(), 1);
            }
        }
        let w = self.per_worker.entry(who).or_insert(WorkerCounts { node: who.0, worker: who.1, ..Default::default() });
        w.aborted += 1;
    }
}

/// A latency histogram: nanoseconds, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is a valid precision")
}

/// A histogram as (value, count) pairs (plain data: it crosses processes as JSON).
pub fn histogram_pairs(h: &Histogram<u64>) -> Vec<(u64, u64)> {
    h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect()
}

pub struct TxnRunResult {
    pub measured: Measured,
    pub history: History,
    pub report: Report,
    pub stats: TxnStats,
    pub failures: Vec<String>,
    pub digest: u64,
    pub events: u64,
    pub simulated_ns: u64,
    /// Verbs posted, by `Opcode as usize`.
    pub verbs: [u64; 7],
    /// Every node's location cache and the one-sided READs its lookups issued (apart from
    /// the stages' own round trips).
    pub location: txbed_txn::locate::CacheStats,
    /// QP-context cache misses per lookup on the simulated NICs (None on real backends).
    pub qp_cache_miss_ratio: Option<f64>,
    /// Which HTM ran regions (protocols that need HTM): the simulator's model or the real
    /// backend's emulation, with whether the CPU reports RTM. `None` without HTM.
    pub htm_mode: Option<String>,
    /// Trace events of every worker, by node and worker (empty unless `TxnRunSpec::trace`).
    pub trace: Vec<TraceEvent>,
    /// What the simulated clocks measured (`None` without a clock model or on real backends).
    pub clocks: Option<txbed_sim::clock::ClockStats>,
    /// What the faults did (`None` without faults).
    pub faults: Option<crate::faults::FaultReport>,
    /// CPU time each server worker (`Protocol::server_workers`) was busy, by node then worker;
    /// empty on real backends and for protocols without server workers.
    pub server_busy_ns: Vec<u64>,
    /// Traffic between data centers (simulator, scenarios with `cluster.datacenters`); `None`
    /// otherwise.
    pub inter_dc: Option<InterDc>,
    /// Where the simulator's wall-clock time went (zero on real backends).
    pub wall: WallTimes,
}

/// Wall-clock seconds of a simulated run by phase: building the cluster and loading the
/// stores, the event loop (the run's window, its stragglers and recovery), and collecting the
/// nodes' results and checking the history.
#[derive(Copy, Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WallTimes {
    pub setup_s: f64,
    pub loop_s: f64,
    pub finish_s: f64,
}

/// Messages that crossed a link between data centers, whole run (the simulator's count:
/// every request and response, including the NIC's and the RPC layer's).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InterDc {
    pub messages: u64,
    /// Transmissions a reliable transport (RC, TCP) repeated.
    pub retransmits: u64,
    /// Datagrams lost for good (UD over an RDMA link).
    pub lost: u64,
}

impl TxnRunResult {
    /// Committed transactions per second in the measured window, whole cluster.
    pub fn throughput_tps(&self) -> f64 {
        self.measured.committed as f64 / (self.measured.window_ns as f64 * 1e-9)
    }
    /// The run's verdict: no coordinator failed and the checker found nothing wrong
    /// (`txbed_checker::Report::clean`).
    pub fn clean(&self) -> bool {
        self.failures.is_empty() && self.report.clean()
    }
}

/// Assembles every node's results into the run's history and checks it.
pub fn assemble(spec: &TxnRunSpec, results: Vec<NodeResult>) -> (History, Report, TxnStats, Measured, Vec<String>) {
    let mut h = History::default();
    let names: Vec<serde_json::Value> = std::iter::once("primary".to_string())
        .chain((1..spec.replication).map(|k| match spec.protocol.stores_replicas() {
            true => format!("replica{k}"),
            false => format!("backup{k}"),
        }))
        .map(serde_json::Value::from)
        .collect();
    h.meta.insert("replicas".into(), serde_json::Value::Array(names));
    let mut stats = TxnStats::default();
    let mut measured = Measured::new(spec.duration_ns);
    let (mut conserved, mut initial) = (0i64, 0i64);
    let mut failures = Vec::new();
    let mut consistency: Vec<Consistency> = Vec::new();
    let mut pieces = Vec::new();
    for r in results {
        stats.add(&r.stats());
        pieces.extend(r.pieces);
        h.txns.extend(r.txns);
        h.finals.extend(r.finals);
        conserved += r.conserved;
        initial += r.initial;
        measured.committed += r.measured_committed;
        measured.aborted += r.measured_aborted;
        for (v, c) in r.latency {
            let _ = measured.latency_ns.record_n(v.max(1), c);
        }
        for (k, v) in r.per_kind {
            *measured.per_kind.entry(k).or_default() += v;
        }
        for (k, v) in r.aborted_by {
            *measured.aborted_by.entry(k).or_default() += v;
        }
        for (k, pairs) in r.per_kind_latency {
            let h = measured.per_kind_latency.entry(k).or_insert_with(new_histogram);
            for (v, c) in pairs {
                let _ = h.record_n(v.max(1), c);
            }
        }
        for w in r.per_worker {
            measured
                .per_worker
                .entry((w.node, w.worker))
                .or_insert(WorkerCounts { node: w.node, worker: w.worker, ..Default::default() })
                .add(&w);
        }
        measured.series.add(&r.series);
        for c in r.consistency {
            match consistency.iter_mut().find(|x| x.name == c.name) {
                Some(x) => {
                    x.checked += c.checked;
                    x.violations += c.violations;
                    x.first = x.first.take().or(c.first);
                }
                None => consistency.push(c),
            }
        }
        failures.extend(r.failures);
    }
    if !pieces.is_empty() {
        let (checked, violations, first) = txbed_txn::chop::half_done(&h.txns, &pieces);
        consistency.push(Consistency {
            name: "DrTM Sec. 4: no transaction saw a chopped transaction half done".into(),
            checked,
            violations,
            first,
        });
    }
    // Each consistency condition is an invariant: zero violations expected.
    for c in consistency {
        let first = c.first.map(|f| format!(" (first: {f})")).unwrap_or_default();
        h.invariants.push(Invariant {
            name: format!("{}: violations among {} checked{first}", c.name, c.checked),
            expected: 0,
            actual: c.violations as i64,
        });
    }
    h.invariants.push(Invariant {
        name: format!("{}: conserved total", spec.workload.name()),
        expected: initial + stats.external_delta,
        actual: conserved,
    });
    let report = check(&h, &Options { level: spec.level(), ..Options::default() });
    // The replicas are named in the history, so the checker always judges lost writes.
    assert!(report.nothing_lost.is_some(), "a run's history must let the checker look for lost writes");
    (h, report, stats, measured, failures)
}

/// The location caches of every node, summed.
pub fn location_total(results: &[NodeResult]) -> txbed_txn::locate::CacheStats {
    let mut t = txbed_txn::locate::CacheStats::default();
    for r in results {
        t.add(&r.location);
    }
    t
}
