//! Runs a transactional workload with a protocol, on the simulated cluster or as one node of a
//! sockets run, then checks the history: every committed transaction's reads and writes, each
//! record's final version on every replica, and the workload's conserved quantity.
//!
//! The two hosts share everything but the hosting: loading a node's partition, the
//! coordinator coroutine, collecting a node's results and assembling the run's.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use hdrhistogram::Histogram;
use rand::Rng;
use txbed_checker::{check, Final, History, Invariant, Options, Report};
use txbed_sim::{NicProfile, Sim, SimConfig};
use txbed_transport::{Ctx, HostMemory, MemoryRegion, TraceEvent};
use txbed_txn::history_key;
use txbed_txn::locate::{Catalog, LocationCache};
use txbed_txn::node::{NodeState, TxnStats};
use txbed_txn::protocol::{Bug, OptionValues, ProtocolRef, Rdma};
use txbed_txn::stage::{Hybrid, Stage};
use txbed_txn::store::{self, split_version_word, Layout, TableSpec, VERSION};
use txbed_txn::Attempt;
use txbed_workloads::{Consistency, Key, Terminal, Workload};

/// Scratch memory per coroutine: 16 KiB, or four times the record buffers of the workload's
/// largest transaction (`Workload::max_accesses`; `ops::buffers_end` and the areas after it).
pub fn scratch_per_coroutine(spec: &TxnRunSpec, layout: &Layout) -> u32 {
    let need: u64 = spec
        .workload
        .max_accesses()
        .iter()
        .map(|&(t, n)| n as u64 * (8 + layout.table(t).map_or(0, |p| p.tuple_bytes)))
        .sum();
    (4 * need).next_multiple_of(4096).clamp(16 << 10, 64 << 20) as u32
}

/// Coroutines each worker runs: the coordinators, plus the protocol's background one.
pub fn coroutines_per_worker(spec: &TxnRunSpec) -> u32 {
    spec.coroutines + spec.protocol.background().is_some() as u32
}

#[derive(Clone)]
pub struct TxnRunSpec {
    /// The protocol: one of `txbed_protocols::REGISTRY`, or one of your own.
    pub protocol: ProtocolRef,
    /// The protocol's own options (`Protocol::check_options`); `Null` for its defaults.
    pub protocol_options: OptionValues,
    pub nodes: u16,
    pub workers: u16,
    pub coroutines: u32,
    pub profile: NicProfile,
    pub seed: u64,
    pub hybrid: Hybrid,
    pub replication: u16,
    pub workload: Arc<dyn Workload>,
    /// Simulated time before measurement starts (transactions run, but are not counted).
    pub warmup_ns: u64,
    /// Measured simulated time; coroutines start transactions until warm-up plus this.
    pub duration_ns: u64,
    pub cache_bytes: u64,
    pub options: Rdma,
    /// A planted bug: one of the protocol's `bugs()` or `txbed_txn::log::SKIP_LOG`.
    pub bug: Option<Bug>,
    /// Allow one-sided locking across several HCA-atomic NICs per node (unsafe: for tests
    /// that show the checker catching it).
    pub allow_unsafe_atomics: bool,
    /// Extra one-way delay from node i to node j at `[i * nodes + j]`, ns; empty for none.
    pub link_delay_ns: Vec<u64>,
    /// Record trace events on every simulated worker (`TxnRunResult::trace`); changes nothing
    /// else in the run.
    pub trace: bool,
}

impl TxnRunSpec {
    /// A small run of `protocol` on `workload`: 3 nodes x 2 workers x 4 coroutines on the
    /// cx4 profile with one NIC per node, all stages by RPC, 3 replicas, 200 us measured from
    /// the start, seed 1, the protocol's default options, no planted bug. Change any field.
    pub fn new(protocol: ProtocolRef, workload: Arc<dyn Workload>) -> TxnRunSpec {
        let mut profile = NicProfile::load("cx4").expect("built-in profile");
        profile.nics_per_node = 1;
        TxnRunSpec {
            protocol,
            protocol_options: OptionValues::Null,
            nodes: 3,
            workers: 2,
            coroutines: 4,
            profile,
            seed: 1,
            hybrid: Hybrid::RPC,
            replication: 3,
            workload,
            warmup_ns: 0,
            duration_ns: 200_000,
            cache_bytes: 1 << 20,
            options: Rdma::default(),
            bug: None,
            allow_unsafe_atomics: false,
            link_delay_ns: Vec::new(),
            trace: false,
        }
    }
}

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
    /// Trace events of every worker, by node and worker (empty unless `TxnRunSpec::trace`).
    pub trace: Vec<TraceEvent>,
}

impl TxnRunResult {
    /// Committed transactions per second in the measured window, whole cluster.
    pub fn throughput_tps(&self) -> f64 {
        self.measured.committed as f64 / (self.measured.window_ns as f64 * 1e-9)
    }
    /// Whether the checker found nothing wrong.
    pub fn clean(&self) -> bool {
        self.report.serializable
            && self.report.nothing_lost == Some(true)
            && self.report.invariants_ok
            && self.failures.is_empty()
    }
}

/// A transaction id: nonzero, unique per (node, worker, coroutine, sequence).
fn txn_id(node: u16, worker: u16, coro: u32, seq: u64) -> u64 {
    ((node as u64 + 1) << 52) | ((worker as u64) << 40) | ((coro as u64 & 0xfff) << 28) | (seq & 0xfff_ffff)
}

/// Checks a spec before anything is built.
pub(crate) fn check_spec(spec: &TxnRunSpec) -> Result<(), String> {
    let p = spec.protocol;
    spec.hybrid.check(p.name(), p.stages())?;
    p.check_options(&spec.protocol_options).map_err(|e| format!("{} options: {e}", p.name()))?;
    if let Some(bug) = spec.bug {
        if !p.bugs().contains(&bug) && bug != txbed_txn::log::SKIP_LOG {
            return Err(format!("{} has no planted bug {}", p.name(), bug.name));
        }
    }
    // IBV_ATOMIC_HCA makes NIC atomics atomic only among QPs of one HCA: with two NICs per
    // node, two coordinators can CAS the same lock through different NICs and both win.
    if p.nic_atomics(spec.hybrid)
        && spec.profile.atomicity == txbed_sim::profile::Atomicity::Hca
        && spec.profile.nics_per_node > 1
        && !spec.allow_unsafe_atomics
    {
        return Err(format!(
            "one-sided locking is unsafe on NIC profile {:?}: its {} NICs per node have HCA-level atomicity, so CAS through different NICs is not atomic; use a profile with nics_per_node: 1 or atomicity: Glob",
            spec.profile.name, spec.profile.nics_per_node
        ));
    }
    if spec.replication == 0 || spec.replication > spec.nodes {
        return Err(format!("replication {} must be 1..={} (the number of nodes)", spec.replication, spec.nodes));
    }
    Ok(())
}

/// The store layout every node uses.
pub fn layout(spec: &TxnRunSpec) -> Layout {
    let tables: Vec<TableSpec> = spec
        .workload
        .tables()
        .iter()
        .map(|t| TableSpec { id: t.id, record_bytes: t.record_bytes, rows_per_node: t.rows_per_node })
        .collect();
    let p = spec.protocol;
    Layout::with_ext(&tables, store::LOAD_FACTOR, &|r| p.ext_bytes(r))
        .with_log(spec.nodes, spec.workers, spec.options.log_ring_bytes)
        .with_area(p.area_bytes(spec.nodes))
}

/// Loads `node`'s partition of every table into its store region.
pub(crate) fn load_partition(
    mem: &dyn HostMemory,
    mr: MemoryRegion,
    layout: &Layout,
    node: u16,
    w: &dyn Workload,
) -> Result<(), String> {
    for place in &layout.tables {
        let per = place.spec.rows_per_node;
        let keys: Vec<u64> = (node as u64 * per..(node as u64 + 1) * per).collect();
        let table = place.spec.id;
        let init = |row: u64| w.initial(Key { table, row });
        match store::load_table(mem, mr, place, &keys, &init) {
            Ok(Some(_)) => {}
            Ok(None) => return Err("the index's overflow pool is too small for this table".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Simulated time transactions in flight get to finish after the run's end.
const STRAGGLE_NS: u64 = 100_000_000;

pub(crate) fn node_state(spec: &TxnRunSpec, me: u16, catalog: &Rc<Catalog>) -> Rc<NodeState> {
    Rc::new(NodeState {
        me,
        nodes: spec.nodes,
        catalog: catalog.clone(),
        cache: RefCell::new(LocationCache::new(spec.cache_bytes)),
        workload: spec.workload.clone(),
        hybrid: spec.hybrid,
        rdma: spec.options,
        history: RefCell::new(Vec::new()),
        stats: RefCell::new(TxnStats::default()),
        replication: spec.replication,
        bug: spec.bug,
        rings: RefCell::new(Vec::new()),
        readers: RefCell::new(Vec::new()),
        replica: RefCell::new(Default::default()),
        participant: spec.protocol.participant(&spec.protocol_options),
        index: Default::default(),
    })
}

/// The window and counters coordinators of one thread share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) protocol: ProtocolRef,
    pub(crate) from: u64,
    pub(crate) end: u64,
    pub(crate) measured: Rc<RefCell<Measured>>,
    pub(crate) failures: Rc<RefCell<Vec<String>>>,
}

/// A coordinator coroutine: draws transactions until `end`, retrying conflicts after a
/// randomised back-off that grows with the retries.
pub(crate) async fn coordinator(ctx: Ctx, st: Rc<NodeState>, sh: Shared, c: u32) {
    let (n, wk) = (st.me, ctx.me().worker);
    let mut seq = 0u64;
    let mut drawn = 0u64;
    while ctx.now() < sh.end {
        let terminal = Terminal { worker: wk, coroutine: c, seq: drawn };
        drawn += 1;
        let drawn_spec = ctx.with_rng(|r| st.workload.generate_at(r, n, st.nodes, terminal));
        let lookups = st.workload.lookups(&drawn_spec);
        let mut tries = 0u32;
        let first = ctx.now();
        let in_window = |now: u64| now >= sh.from && now < sh.end;
        loop {
            // Data-dependent read and write sets: ask the owners first, on every attempt.
            let resolved = if lookups.is_empty() {
                None
            } else {
                let answers = txbed_txn::index::lookup(&ctx, &st, &lookups).await;
                match answers.and_then(|a| st.workload.resolve(&drawn_spec, &a)) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        sh.failures.borrow_mut().push(format!("node {n} worker {wk}: {e}"));
                        return;
                    }
                }
            };
            let t = resolved.as_ref().unwrap_or(&drawn_spec);
            seq += 1;
            let id = txn_id(n, wk, c, seq);
            let began = ctx.now();
            let mut outcome = sh.protocol.attempt(&ctx, &st, t, id).await;
            // Answers gone stale by the time the transaction read its rows: a conflict.
            if outcome == Attempt::UserAbort && st.workload.retry_on_user_abort(t) {
                outcome = Attempt::Conflict;
            }
            if ctx.tracing() {
                let how = match outcome {
                    Attempt::Committed => "commit",
                    Attempt::Conflict => "abort",
                    Attempt::UserAbort => "user abort",
                    Attempt::Failed(_) => "failed",
                };
                let name = format!("{} {how}", t.kind);
                let args = [("attempt", tries as u64 + 1), ("id", id)];
                ctx.trace_slice_args(name, txbed_transport::trace::TXN, began, ctx.now(), &args);
            }
            match outcome {
                Attempt::Committed => {
                    st.stats.borrow_mut().committed += 1;
                    let now = ctx.now();
                    if in_window(now) {
                        let mut m = sh.measured.borrow_mut();
                        m.committed += 1;
                        match m.per_kind.get_mut(t.kind) {
                            Some(k) => *k += 1,
                            None => {
                                m.per_kind.insert(t.kind.to_string(), 1);
                            }
                        }
                        let _ = m.latency_ns.record((now - first).max(1));
                    }
                    break;
                }
                Attempt::UserAbort => {
                    st.stats.borrow_mut().aborted_user += 1;
                    break;
                }
                Attempt::Conflict => {
                    st.stats.borrow_mut().aborted_conflict += 1;
                    if in_window(ctx.now()) {
                        sh.measured.borrow_mut().aborted += 1;
                    }
                    tries += 1;
                    if ctx.now() >= sh.end {
                        break;
                    }
                    let pause = ctx.with_rng(|r| r.gen_range(0..1_000u64 << tries.min(6)));
                    ctx.sleep(pause).await;
                }
                Attempt::Failed(e) => {
                    sh.failures.borrow_mut().push(format!("node {n} worker {wk}: {e}"));
                    return;
                }
            }
        }
    }
}

/// What one node contributes to the run's result (plain data: it crosses processes as JSON).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct NodeResult {
    pub txns: Vec<txbed_checker::Txn>,
    pub finals: Vec<Final>,
    pub conserved: i64,
    pub initial: i64,
    pub committed: u64,
    pub aborted_conflict: u64,
    pub aborted_user: u64,
    pub external_delta: i64,
    pub measured_committed: u64,
    pub measured_aborted: u64,
    /// Latency histogram as (value ns, count) pairs.
    pub latency: Vec<(u64, u64)>,
    pub failures: Vec<String>,
    pub stage_ns: [u64; Stage::COUNT],
    pub stage_round_trips: [u64; Stage::COUNT],
    pub stage_bytes: [u64; Stage::COUNT],
    pub stage_calls: [u64; Stage::COUNT],
    /// Work requests posted by this node's workers, by opcode (sockets backend only).
    #[serde(default)]
    pub verbs: [u64; 7],
    /// Committed in the window per transaction type.
    #[serde(default)]
    pub per_kind: std::collections::BTreeMap<String, u64>,
    /// The workload's consistency conditions over this node's records.
    #[serde(default)]
    pub consistency: Vec<Consistency>,
    /// Log records and bytes this node sent to backups (one per backup).
    #[serde(default)]
    pub log_records: u64,
    #[serde(default)]
    pub log_bytes: u64,
}

/// Collects a node's history, final versions (its primaries and the replicas it keeps), and
/// the conserved quantity over its records. `states` are its workers' protocol states (one
/// shared in the simulator, one per worker thread on sockets).
pub(crate) fn node_result(
    spec: &TxnRunSpec,
    node: u16,
    mem: &dyn HostMemory,
    base: u64,
    states: &[Rc<NodeState>],
    layout: &Layout,
) -> NodeResult {
    let w = &spec.workload;
    let mut r = NodeResult::default();
    let mut stats = TxnStats::default();
    let mut replica: std::collections::BTreeMap<u64, u64> = Default::default();
    for st in states {
        r.txns.extend(st.history.borrow().iter().cloned());
        stats.add(&st.stats.borrow());
        for (&k, &v) in st.replica.borrow().iter() {
            let e = replica.entry(k).or_insert(0);
            *e = (*e).max(v);
        }
    }
    for place in &layout.tables {
        let per = place.spec.rows_per_node;
        for row in node as u64 * per..(node as u64 + 1) * per {
            let key = Key { table: place.spec.id, row };
            let off = base + place.tuples_at + (row - node as u64 * per) * place.tuple_bytes;
            let version = split_version_word(mem.load_u64(off + VERSION).unwrap_or(0)).1;
            let mut rec = vec![0u8; place.spec.record_bytes as usize];
            let _ = mem.read(off + store::META_BYTES, &mut rec);
            r.conserved += w.conserved(key, &rec);
            r.initial += w.conserved(key, &w.initial(key));
            if version > 0 {
                r.finals.push(Final { replica: "primary".into(), key: history_key(key.table, row), version });
            }
        }
    }
    // The k-th backup of a key is node (primary + k).
    for (&k, &version) in replica.iter() {
        let key = Key { table: (k >> 48) as u16, row: k & ((1 << 48) - 1) };
        let nth = (node + spec.nodes - w.home(key, spec.nodes)) % spec.nodes;
        r.finals.push(Final { replica: format!("backup{nth}"), key: k, version });
    }
    // Records are loaded in key order, so a key's tuple is at its row's position.
    let read = |key: Key| {
        let place = layout.table(key.table)?;
        let per = place.spec.rows_per_node;
        if key.row / per != node as u64 {
            return None;
        }
        let mut rec = vec![0u8; place.spec.record_bytes as usize];
        let off = base + place.tuples_at + (key.row - node as u64 * per) * place.tuple_bytes;
        mem.read(off + store::META_BYTES, &mut rec).ok()?;
        Some(rec)
    };
    r.consistency = w.check_consistency(node, spec.nodes, &read);
    r.committed = stats.committed;
    r.aborted_conflict = stats.aborted_conflict;
    r.aborted_user = stats.aborted_user;
    r.external_delta = stats.external_delta;
    r.stage_ns = stats.stage_ns;
    r.stage_round_trips = stats.stage_round_trips;
    r.stage_bytes = stats.stage_bytes;
    r.stage_calls = stats.stage_calls;
    r.log_records = stats.log_records;
    r.log_bytes = stats.log_bytes;
    r
}

pub(crate) fn add_measured(r: &mut NodeResult, m: &Measured) {
    r.measured_committed += m.committed;
    r.measured_aborted += m.aborted;
    for (k, v) in &m.per_kind {
        *r.per_kind.entry(k.clone()).or_default() += v;
    }
    r.latency.extend(m.latency_ns.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())));
}

/// Assembles every node's results into the run's history and checks it.
pub(crate) fn assemble(
    spec: &TxnRunSpec,
    results: Vec<NodeResult>,
) -> (History, Report, TxnStats, Measured, Vec<String>) {
    let mut h = History::default();
    let names: Vec<serde_json::Value> = std::iter::once("primary".to_string())
        .chain((1..spec.replication).map(|k| format!("backup{k}")))
        .map(serde_json::Value::from)
        .collect();
    h.meta.insert("replicas".into(), serde_json::Value::Array(names));
    let mut stats = TxnStats::default();
    let mut measured = Measured {
        committed: 0,
        aborted: 0,
        latency_ns: Histogram::new(3).expect("histogram"),
        window_ns: spec.duration_ns,
        per_kind: Default::default(),
    };
    let (mut conserved, mut initial) = (0i64, 0i64);
    let mut failures = Vec::new();
    let mut consistency: Vec<Consistency> = Vec::new();
    for r in results {
        h.txns.extend(r.txns);
        h.finals.extend(r.finals);
        conserved += r.conserved;
        initial += r.initial;
        stats.committed += r.committed;
        stats.aborted_conflict += r.aborted_conflict;
        stats.aborted_user += r.aborted_user;
        stats.external_delta += r.external_delta;
        stats.log_records += r.log_records;
        stats.log_bytes += r.log_bytes;
        for i in 0..Stage::COUNT {
            stats.stage_ns[i] += r.stage_ns[i];
            stats.stage_round_trips[i] += r.stage_round_trips[i];
            stats.stage_bytes[i] += r.stage_bytes[i];
            stats.stage_calls[i] += r.stage_calls[i];
        }
        measured.committed += r.measured_committed;
        measured.aborted += r.measured_aborted;
        for (v, c) in r.latency {
            let _ = measured.latency_ns.record_n(v.max(1), c);
        }
        for (k, v) in r.per_kind {
            *measured.per_kind.entry(k).or_default() += v;
        }
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
    let report = check(&h, &Options::default());
    (h, report, stats, measured, failures)
}

/// Runs the transactions on the simulated cluster.
pub fn run_txns(spec: &TxnRunSpec) -> Result<TxnRunResult, String> {
    run_txns_with(spec, &mut |_, _| {})
}

/// [`run_txns`], calling `progress(simulated ns, end ns)` about a hundred times on the way.
/// The run is simulated in slices; the result and digest are the same as in one go.
pub fn run_txns_with(spec: &TxnRunSpec, progress: &mut dyn FnMut(u64, u64)) -> Result<TxnRunResult, String> {
    check_spec(spec)?;
    let mut cfg = SimConfig::new(spec.nodes, spec.workers, spec.profile.clone(), spec.seed);
    cfg.max_coroutines = coroutines_per_worker(spec);
    cfg.scratch_per_coroutine = scratch_per_coroutine(spec, &layout(spec));
    cfg.loopback = true;
    cfg.link_delay_ps = spec.link_delay_ns.iter().map(|d| d * 1000).collect();
    // Two-sided passive ACK piggybacks replies on requests; doorbell batching applies to the
    // RPC layer's datagrams too.
    cfg.rpc.piggyback = spec.options.passive_ack;
    cfg.rpc.doorbell_batching = spec.options.doorbell;
    let mut sim = Sim::new(cfg)?;
    let layout = layout(spec);
    let mut regions = Vec::new();
    for n in 0..spec.nodes {
        let mr = sim.register_region(n, layout.bytes);
        load_partition(&*sim.memory(n), mr, &layout, n, &*spec.workload)?;
        regions.push(mr);
    }
    let catalog = Rc::new(Catalog { layout: layout.clone(), regions });
    // In the simulator a node's workers share one protocol state (one thread runs them all).
    let states: Vec<Rc<NodeState>> = (0..spec.nodes).map(|n| node_state(spec, n, &catalog)).collect();
    for (n, st) in states.iter().enumerate() {
        txbed_txn::index::build(st, &*sim.memory(n as u16));
    }
    let sh = Shared {
        protocol: spec.protocol,
        from: spec.warmup_ns,
        end: spec.warmup_ns + spec.duration_ns,
        measured: Rc::new(RefCell::new(Measured {
            committed: 0,
            aborted: 0,
            latency_ns: Histogram::new(3).expect("histogram"),
            window_ns: spec.duration_ns,
            per_kind: Default::default(),
        })),
        failures: Rc::default(),
    };
    for n in 0..spec.nodes {
        for wk in 0..spec.workers {
            if spec.trace {
                sim.worker(n, wk).enable_trace();
            }
            for (id, name, h) in txbed_txn::participant::handlers(spec.protocol, &states[n as usize]) {
                sim.worker(n, wk).name_handler(id, name);
                sim.worker(n, wk).register_handler(id, h);
            }
            for c in 0..spec.coroutines {
                let (st, sh) = (states[n as usize].clone(), sh.clone());
                sim.spawn(n, wk, move |ctx| coordinator(ctx, st, sh, c));
            }
            if let Some(background) = spec.protocol.background() {
                let (st, end) = (states[n as usize].clone(), sh.end);
                sim.spawn(n, wk, move |ctx| background(ctx, st, end));
            }
        }
    }
    // Start nothing after the end; let transactions in flight finish.
    let slice = (sh.end / 100).max(1);
    let mut t = 0;
    while t < sh.end {
        t = (t + slice).min(sh.end);
        sim.run_until(t);
        progress(t, sh.end);
    }
    sim.run_to_idle(sh.end + STRAGGLE_NS);
    // A coroutine still running this long after the end is stuck (a protocol waiting for
    // something that never comes): say so rather than check a history it never finished.
    for n in 0..spec.nodes {
        for wk in 0..spec.workers {
            if !sim.worker(n, wk).all_finished() {
                sh.failures.borrow_mut().push(format!(
                    "node {n} worker {wk}: coroutines still running {} ms after the end of the run",
                    STRAGGLE_NS / 1_000_000
                ));
            }
        }
    }
    // Backups catch up on the logs still in their rings (a recovering backup would too).
    for (b, st) in states.iter().enumerate() {
        let mem = sim.memory(b as u16);
        for sender in 0..spec.nodes {
            for wk in 0..spec.workers {
                txbed_txn::log::drain_ring(st, &*mem, sender, wk);
            }
        }
    }
    let mut results = Vec::new();
    for n in 0..spec.nodes {
        let mut r = node_result(
            spec,
            n,
            &*sim.memory(n),
            catalog.regions[n as usize].addr,
            &states[n as usize..=n as usize],
            &layout,
        );
        if n == 0 {
            add_measured(&mut r, &sh.measured.borrow());
            r.failures = sh.failures.borrow().clone();
        }
        results.push(r);
    }
    let (history, report, stats, measured, failures) = assemble(spec, results);
    let mut trace = Vec::new();
    for n in 0..spec.nodes {
        for wk in 0..spec.workers {
            trace.append(&mut sim.worker(n, wk).take_trace());
        }
    }
    Ok(TxnRunResult {
        measured,
        history,
        report,
        stats,
        failures,
        digest: sim.digest(),
        events: sim.events(),
        simulated_ns: sim.now(),
        verbs: sim.stats().verbs,
        trace,
    })
}
