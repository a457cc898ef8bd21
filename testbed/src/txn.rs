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
use txbed_protocols::history_key;
use txbed_protocols::locate::{Catalog, LocationCache};
use txbed_protocols::node::{self, Bug, NodeState, TxnStats};
use txbed_protocols::nowait::{self, Attempt};
use txbed_protocols::stage::Hybrid;
use txbed_protocols::store::{self, split_version_word, Layout, TableSpec, VERSION};
use txbed_sim::{NicProfile, Sim, SimConfig};
use txbed_transport::{
    CpuCosts, Ctx, Endpoint, HostMemory, LocalBuf, MemoryRegion, NodeId, RpcConfig, WorkerConfig, WorkerCore,
};
use txbed_workloads::{Key, Workload};

/// A concurrency-control protocol the runner can drive.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Protocol {
    NoWait,
    Occ,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::NoWait => "NOWAIT",
            Protocol::Occ => "OCC",
        }
    }
    pub fn stages(self) -> &'static [txbed_protocols::stage::Stage] {
        match self {
            Protocol::NoWait => &nowait::STAGES,
            Protocol::Occ => &txbed_protocols::occ::STAGES,
        }
    }
}

pub struct TxnRunSpec {
    pub protocol: Protocol,
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
    pub options: txbed_protocols::node::Options,
    pub bug: Option<Bug>,
    /// Allow one-sided locking across several HCA-atomic NICs per node (unsafe: for tests
    /// that show the checker catching it).
    pub allow_unsafe_atomics: bool,
}

/// What happened inside the measured window.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub committed: u64,
    pub aborted: u64,
    /// Commit latency (first attempt to commit), nanoseconds.
    pub latency_ns: Histogram<u64>,
    pub window_ns: u64,
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
fn check_spec(spec: &TxnRunSpec) -> Result<(), String> {
    spec.hybrid.check(spec.protocol.name(), spec.protocol.stages())?;
    // IBV_ATOMIC_HCA makes NIC atomics atomic only among QPs of one HCA: with two NICs per
    // node, two coordinators can CAS the same lock through different NICs and both win.
    if spec.hybrid.onesided(txbed_protocols::stage::Stage::Lock)
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
    Layout::new(&tables, store::LOAD_FACTOR).with_log(spec.nodes, spec.workers, 64 << 10)
}

/// Loads `node`'s partition of every table into its store region.
fn load_partition(
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

fn node_state(spec: &TxnRunSpec, me: u16, catalog: &Rc<Catalog>) -> Rc<NodeState> {
    Rc::new(NodeState {
        me,
        nodes: spec.nodes,
        catalog: catalog.clone(),
        cache: RefCell::new(LocationCache::new(spec.cache_bytes)),
        workload: spec.workload.clone(),
        hybrid: spec.hybrid,
        options: spec.options,
        history: RefCell::new(Vec::new()),
        stats: RefCell::new(TxnStats::default()),
        replication: spec.replication,
        bug: spec.bug,
        rings: RefCell::new(Vec::new()),
        readers: RefCell::new(Vec::new()),
        replica: RefCell::new(Default::default()),
    })
}

/// The window and counters coordinators of one thread share.
#[derive(Clone)]
struct Shared {
    protocol: Protocol,
    from: u64,
    end: u64,
    measured: Rc<RefCell<Measured>>,
    failures: Rc<RefCell<Vec<String>>>,
}

/// A coordinator coroutine: draws transactions until `end`, retrying conflicts after a
/// randomised back-off that grows with the retries.
async fn coordinator(ctx: Ctx, st: Rc<NodeState>, sh: Shared, c: u32) {
    let (n, wk) = (st.me, ctx.me().worker);
    let mut seq = 0u64;
    while ctx.now() < sh.end {
        let t = ctx.with_rng(|r| st.workload.generate(r, n, st.nodes));
        let mut tries = 0u32;
        let first = ctx.now();
        let in_window = |now: u64| now >= sh.from && now < sh.end;
        loop {
            seq += 1;
            let id = txn_id(n, wk, c, seq);
            let outcome = match sh.protocol {
                Protocol::NoWait => nowait::attempt(&ctx, &st, &t, id).await,
                Protocol::Occ => txbed_protocols::occ::attempt(&ctx, &st, &t, id).await,
            };
            match outcome {
                Attempt::Committed => {
                    st.stats.borrow_mut().committed += 1;
                    let now = ctx.now();
                    if in_window(now) {
                        let mut m = sh.measured.borrow_mut();
                        m.committed += 1;
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
    pub stage_ns: [u64; 9],
    pub stage_round_trips: [u64; 9],
    pub stage_bytes: [u64; 9],
    pub stage_calls: [u64; 9],
    /// Work requests posted by this node's workers, by opcode (sockets backend only).
    #[serde(default)]
    pub verbs: [u64; 7],
}

/// Collects a node's history, final versions (its primaries and the replicas it keeps), and
/// the conserved quantity over its records. `states` are its workers' protocol states (one
/// shared in the simulator, one per worker thread on sockets).
fn node_result(
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
    r.committed = stats.committed;
    r.aborted_conflict = stats.aborted_conflict;
    r.aborted_user = stats.aborted_user;
    r.external_delta = stats.external_delta;
    r.stage_ns = stats.stage_ns;
    r.stage_round_trips = stats.stage_round_trips;
    r.stage_bytes = stats.stage_bytes;
    r.stage_calls = stats.stage_calls;
    r
}

fn add_measured(r: &mut NodeResult, m: &Measured) {
    r.measured_committed += m.committed;
    r.measured_aborted += m.aborted;
    r.latency.extend(m.latency_ns.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())));
}

/// Assembles every node's results into the run's history and checks it.
fn assemble(spec: &TxnRunSpec, results: Vec<NodeResult>) -> (History, Report, TxnStats, Measured, Vec<String>) {
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
    };
    let (mut conserved, mut initial) = (0i64, 0i64);
    let mut failures = Vec::new();
    for r in results {
        h.txns.extend(r.txns);
        h.finals.extend(r.finals);
        conserved += r.conserved;
        initial += r.initial;
        stats.committed += r.committed;
        stats.aborted_conflict += r.aborted_conflict;
        stats.aborted_user += r.aborted_user;
        stats.external_delta += r.external_delta;
        for i in 0..9 {
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
        failures.extend(r.failures);
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
    check_spec(spec)?;
    let mut cfg = SimConfig::new(spec.nodes, spec.workers, spec.profile.clone(), spec.seed);
    cfg.max_coroutines = spec.coroutines;
    cfg.scratch_per_coroutine = 16 << 10;
    cfg.loopback = true;
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
    let sh = Shared {
        protocol: spec.protocol,
        from: spec.warmup_ns,
        end: spec.warmup_ns + spec.duration_ns,
        measured: Rc::new(RefCell::new(Measured {
            committed: 0,
            aborted: 0,
            latency_ns: Histogram::new(3).expect("histogram"),
            window_ns: spec.duration_ns,
        })),
        failures: Rc::default(),
    };
    for n in 0..spec.nodes {
        for wk in 0..spec.workers {
            for (id, h) in node::handlers(&states[n as usize]) {
                sim.worker(n, wk).register_handler(id, h);
            }
            for c in 0..spec.coroutines {
                let (st, sh) = (states[n as usize].clone(), sh.clone());
                sim.spawn(n, wk, move |ctx| coordinator(ctx, st, sh, c));
            }
        }
    }
    // Start nothing after the end; let transactions in flight finish.
    sim.run_until(sh.end);
    sim.run_to_idle(sh.end + 100_000_000);
    // Backups catch up on the logs still in their rings (a recovering backup would too).
    for (b, st) in states.iter().enumerate() {
        let mem = sim.memory(b as u16);
        for sender in 0..spec.nodes {
            for wk in 0..spec.workers {
                txbed_protocols::log::drain_ring(st, &*mem, sender, wk);
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
    })
}

/// Runs one node of a sockets run: this process's partition, NIC, and worker threads. Rank 0
/// returns the run's result; the other ranks `None`.
pub fn run_sockets_node(
    spec: &TxnRunSpec,
    me: crate::bootstrap::Rank,
    coordinator_addr: std::net::SocketAddr,
    bind: std::net::IpAddr,
) -> Result<Option<TxnRunResult>, String> {
    use crate::sockets::{start_nic, SharedMemory};
    use crate::sockets_node::{NodeAddrs, SocketsWorker};
    check_spec(spec)?;
    if me.size != spec.nodes as u32 {
        return Err(format!("the launcher started {} processes but the scenario has {} nodes", me.size, spec.nodes));
    }
    let node = me.rank as u16;
    let layout = layout(spec);
    let scratch_per_worker = spec.coroutines as u64 * (16 << 10);
    let rkey = |i: u32| 0x5000_0000 | ((node as u32) << 12) | i;
    let mem = SharedMemory::new(&[
        (scratch_per_worker * spec.workers as u64, rkey(0), 0x6000_0000 | ((node as u32) << 12)),
        (layout.bytes, rkey(1), 0x6000_0001 | ((node as u32) << 12)),
    ]);
    let regions = mem.regions();
    load_partition(&mem, regions[1], &layout, node, &*spec.workload)?;
    let nic = start_nic(mem.clone(), std::net::SocketAddr::new(bind, 0)).map_err(|e| format!("NIC: {e}"))?;
    let udps: Vec<std::net::UdpSocket> = (0..spec.workers)
        .map(|_| std::net::UdpSocket::bind(std::net::SocketAddr::new(bind, 0)))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("UDP: {e}"))?;
    let me_addrs =
        NodeAddrs { nic, udp: udps.iter().map(|u| u.local_addr().expect("bound")).collect(), store: regions[1] };
    let timeout = std::time::Duration::from_secs(30);
    let mut boot =
        crate::bootstrap::Bootstrap::join(me, coordinator_addr, &me_addrs.encode(), timeout).map_err(|e| e.0)?;
    let peers: Vec<NodeAddrs> = boot.descriptors.iter().map(|d| NodeAddrs::decode(d)).collect::<Result<_, _>>()?;
    let store_regions: Vec<MemoryRegion> = peers.iter().map(|p| p.store).collect();
    let start = std::time::Instant::now();
    let (from, end) = (spec.warmup_ns, spec.warmup_ns + spec.duration_ns);
    // Workers connect, report ready, and wait for the common start (after every node is
    // ready), so the measured window starts with everyone running.
    let go: Arc<(std::sync::Mutex<Option<std::time::Instant>>, std::sync::Condvar)> = Arc::default();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let mut threads = Vec::new();
    for (wk, udp) in udps.into_iter().enumerate() {
        let (spec_w, peers, mem, stop, done_tx) =
            (SpecForThread::from(spec), peers.clone(), mem.clone(), stop.clone(), done_tx.clone());
        let (layout, store_regions) = (layout.clone(), store_regions.clone());
        let (go, ready_tx) = (go.clone(), ready_tx.clone());
        let scratch = LocalBuf {
            lkey: regions[0].lkey,
            addr: regions[0].addr + wk as u64 * scratch_per_worker,
            len: scratch_per_worker as u32,
        };
        threads.push(
            std::thread::Builder::new()
                .name(format!("txbed-worker-{node}-{wk}"))
                .spawn(move || -> Result<NodeResult, String> {
                    let spec = spec_w.spec();
                    let catalog = Rc::new(Catalog { layout: layout.clone(), regions: store_regions });
                    // Each worker thread has its own protocol state: nothing but memory is shared.
                    let st = node_state(&spec, node, &catalog);
                    let me = Endpoint { node: NodeId(node), worker: wk as u16 };
                    let cfg = WorkerConfig {
                        me,
                        nodes: spec.nodes,
                        workers: spec.workers,
                        costs: CpuCosts::zero(),
                        // Real threads can be descheduled for milliseconds (more so when
                        // oversubscribed): retransmit after 50 ms, give up after ~0.5 s.
                        rpc: RpcConfig {
                            piggyback: spec.options.passive_ack,
                            doorbell_batching: spec.options.doorbell,
                            timeout_ns: 50_000_000,
                            retries: 10,
                            ..RpcConfig::default()
                        },
                        seed: spec.seed ^ ((node as u64) << 32) ^ wk as u64,
                        scratch,
                        scratch_per_coroutine: 16 << 10,
                    };
                    let core = WorkerCore::new(cfg, Rc::new(mem.clone()));
                    let mut w = match SocketsWorker::connect(core, me, udp, peers, mem.clone(), start, 128) {
                        Ok(w) => w,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.clone()));
                            return Err(e);
                        }
                    };
                    for (id, h) in node::handlers(&st) {
                        w.core.register_handler(id, h);
                    }
                    let _ = ready_tx.send(Ok(()));
                    let t0 = {
                        let (m, cv) = &*go;
                        let mut g = m.lock().expect("go");
                        while g.is_none() {
                            g = cv.wait(g).expect("go");
                        }
                        g.expect("set")
                    };
                    w.set_start(t0);
                    let sh = Shared {
                        protocol: spec.protocol,
                        from,
                        end,
                        measured: Rc::new(RefCell::new(Measured {
                            committed: 0,
                            aborted: 0,
                            latency_ns: Histogram::new(3).expect("histogram"),
                            window_ns: spec.duration_ns,
                        })),
                        failures: Rc::default(),
                    };
                    for c in 0..spec.coroutines {
                        let (st, sh) = (st.clone(), sh.clone());
                        w.core.spawn(move |ctx| coordinator(ctx, st, sh, c));
                    }
                    let mut reported = false;
                    while !stop.load(std::sync::atomic::Ordering::Acquire) {
                        w.step(std::time::Duration::from_millis(1));
                        if !reported && w.core.all_finished() {
                            reported = true;
                            let _ = done_tx.send(());
                        }
                    }
                    // Serve the rings other nodes wrote (backup catch-up), then report.
                    for sender in 0..spec.nodes {
                        txbed_protocols::log::drain_ring(&st, &mem, sender, wk as u16);
                    }
                    w.close();
                    let mut r = node_result(&spec, node, &mem, catalog.regions[node as usize].addr, &[st], &layout);
                    add_measured(&mut r, &sh.measured.borrow());
                    r.failures = sh.failures.borrow().clone();
                    r.verbs = w.core.stats().verbs;
                    Ok(r)
                })
                .map_err(|e| e.to_string())?,
        );
    }
    drop(done_tx);
    drop(ready_tx);
    for _ in 0..spec.workers {
        match ready_rx.recv_timeout(timeout) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(format!("node {node}: a worker did not get ready")),
        }
    }
    boot.barrier("start").map_err(|e| e.0)?;
    let t0 = std::time::Instant::now();
    {
        let (m, cv) = &*go;
        *m.lock().expect("go") = Some(t0);
        cv.notify_all();
    }
    // Every coroutine of this node finished; then all nodes did; then workers stop serving.
    for _ in 0..spec.workers {
        done_rx
            .recv_timeout(std::time::Duration::from_nanos(end) + timeout)
            .map_err(|_| format!("node {node}: a worker did not finish"))?;
    }
    boot.barrier("end").map_err(|e| e.0)?;
    stop.store(true, std::sync::atomic::Ordering::Release);
    // The node's result: workers' histories and replicas; the store read once.
    let mut merged = NodeResult::default();
    for (i, t) in threads.into_iter().enumerate() {
        let r = t.join().map_err(|_| format!("node {node}: worker {i} panicked"))??;
        if i == 0 {
            merged.finals = r.finals.iter().filter(|f| f.replica == "primary").cloned().collect();
            merged.conserved = r.conserved;
            merged.initial = r.initial;
        }
        merged.finals.extend(r.finals.into_iter().filter(|f| f.replica != "primary"));
        merged.txns.extend(r.txns);
        for (a, b) in [
            (&mut merged.committed, r.committed),
            (&mut merged.aborted_conflict, r.aborted_conflict),
            (&mut merged.aborted_user, r.aborted_user),
            (&mut merged.measured_committed, r.measured_committed),
            (&mut merged.measured_aborted, r.measured_aborted),
        ] {
            *a += b;
        }
        merged.external_delta += r.external_delta;
        merged.latency.extend(r.latency);
        merged.failures.extend(r.failures);
        for k in 0..9 {
            merged.stage_ns[k] += r.stage_ns[k];
            merged.stage_round_trips[k] += r.stage_round_trips[k];
            merged.stage_bytes[k] += r.stage_bytes[k];
            merged.stage_calls[k] += r.stage_calls[k];
        }
        for k in 0..7 {
            merged.verbs[k] += r.verbs[k];
        }
    }
    // Replicas of one key kept by several workers: keep the newest.
    dedup_replicas(&mut merged.finals);
    let all = boot.gather(&serde_json::to_vec(&merged).map_err(|e| e.to_string())?).map_err(|e| e.0)?;
    let Some(all) = all else { return Ok(None) };
    let results: Vec<NodeResult> =
        all.iter().map(|b| serde_json::from_slice(b).map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
    let mut verbs = [0u64; 7];
    for r in &results {
        for k in 0..7 {
            verbs[k] += r.verbs[k];
        }
    }
    let (history, report, stats, measured, failures) = assemble(spec, results);
    Ok(Some(TxnRunResult {
        measured,
        history,
        report,
        stats,
        failures,
        digest: 0,
        events: 0,
        simulated_ns: start.elapsed().as_nanos() as u64,
        verbs,
    }))
}

fn dedup_replicas(finals: &mut Vec<Final>) {
    finals.sort_by(|a, b| {
        (&a.replica, a.key, std::cmp::Reverse(a.version)).cmp(&(&b.replica, b.key, std::cmp::Reverse(b.version)))
    });
    finals.dedup_by(|a, b| a.replica == b.replica && a.key == b.key);
}

/// The parts of a spec a worker thread needs (the spec itself holds no thread-bound state,
/// but is rebuilt per thread so nothing is shared by accident).
struct SpecForThread {
    protocol: Protocol,
    nodes: u16,
    workers: u16,
    coroutines: u32,
    profile: NicProfile,
    seed: u64,
    hybrid: Hybrid,
    replication: u16,
    workload: Arc<dyn Workload>,
    warmup_ns: u64,
    duration_ns: u64,
    cache_bytes: u64,
    options: txbed_protocols::node::Options,
    bug: Option<Bug>,
}

impl SpecForThread {
    fn from(s: &TxnRunSpec) -> Self {
        SpecForThread {
            protocol: s.protocol,
            nodes: s.nodes,
            workers: s.workers,
            coroutines: s.coroutines,
            profile: s.profile.clone(),
            seed: s.seed,
            hybrid: s.hybrid,
            replication: s.replication,
            workload: s.workload.clone(),
            warmup_ns: s.warmup_ns,
            duration_ns: s.duration_ns,
            cache_bytes: s.cache_bytes,
            options: s.options,
            bug: s.bug,
        }
    }
    fn spec(self) -> TxnRunSpec {
        TxnRunSpec {
            protocol: self.protocol,
            nodes: self.nodes,
            workers: self.workers,
            coroutines: self.coroutines,
            profile: self.profile,
            seed: self.seed,
            hybrid: self.hybrid,
            replication: self.replication,
            workload: self.workload,
            warmup_ns: self.warmup_ns,
            duration_ns: self.duration_ns,
            cache_bytes: self.cache_bytes,
            options: self.options,
            bug: self.bug,
            allow_unsafe_atomics: true,
        }
    }
}
