//! Runs a transactional workload with a protocol on the simulated cluster, then checks the
//! history: every committed transaction's reads and writes, each record's final version, and
//! the workload's conserved quantity.

use std::cell::RefCell;
use std::rc::Rc;

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
    pub workload: Rc<dyn Workload>,
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
#[derive(Clone, Debug)]
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

pub fn run_txns(spec: &TxnRunSpec) -> Result<TxnRunResult, String> {
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
    let w = spec.workload.clone();
    let mut cfg = SimConfig::new(spec.nodes, spec.workers, spec.profile.clone(), spec.seed);
    cfg.max_coroutines = spec.coroutines;
    cfg.scratch_per_coroutine = 16 << 10;
    cfg.loopback = true;
    // Two-sided passive ACK piggybacks replies on requests; doorbell batching applies to the
    // RPC layer's datagrams too.
    cfg.rpc.piggyback = spec.options.passive_ack;
    cfg.rpc.doorbell_batching = spec.options.doorbell;
    let mut sim = Sim::new(cfg)?;
    let tables: Vec<TableSpec> = w
        .tables()
        .iter()
        .map(|t| TableSpec { id: t.id, record_bytes: t.record_bytes, rows_per_node: t.rows_per_node })
        .collect();
    let layout = Layout::new(&tables, store::LOAD_FACTOR).with_log(spec.nodes, spec.workers, 64 << 10);
    let mut regions = Vec::new();
    for n in 0..spec.nodes {
        let mr = sim.register_region(n, layout.bytes);
        for place in &layout.tables {
            let per = place.spec.rows_per_node;
            let keys: Vec<u64> = (n as u64 * per..(n as u64 + 1) * per).collect();
            let table = place.spec.id;
            let init = |row: u64| w.initial(Key { table, row });
            match store::load_table(&*sim.memory(n), mr, place, &keys, &init) {
                Ok(Some(_)) => {}
                Ok(None) => return Err("the index's overflow pool is too small for this table".into()),
                Err(e) => return Err(e.to_string()),
            }
        }
        regions.push(mr);
    }
    let catalog = Rc::new(Catalog { layout, regions });
    let states: Vec<Rc<NodeState>> = (0..spec.nodes)
        .map(|n| {
            Rc::new(NodeState {
                me: n,
                nodes: spec.nodes,
                catalog: catalog.clone(),
                cache: RefCell::new(LocationCache::new(spec.cache_bytes)),
                workload: w.clone(),
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
        })
        .collect();
    let failures = Rc::new(RefCell::new(Vec::new()));
    let (from, end) = (spec.warmup_ns, spec.warmup_ns + spec.duration_ns);
    let measured = Rc::new(RefCell::new(Measured {
        committed: 0,
        aborted: 0,
        latency_ns: Histogram::new(3).expect("histogram"),
        window_ns: spec.duration_ns,
    }));
    let protocol = spec.protocol;
    for n in 0..spec.nodes {
        for wk in 0..spec.workers {
            for (id, h) in node::handlers(&states[n as usize]) {
                sim.worker(n, wk).register_handler(id, h);
            }
            for c in 0..spec.coroutines {
                let st = states[n as usize].clone();
                let failures = failures.clone();
                let measured = measured.clone();
                sim.spawn(n, wk, move |ctx| async move {
                    let mut seq = 0u64;
                    while ctx.now() < end {
                        let t = ctx.with_rng(|r| st.workload.generate(r, n, st.nodes));
                        let mut tries = 0u32;
                        let first = ctx.now();
                        let in_window = |now: u64| now >= from && now < end;
                        loop {
                            seq += 1;
                            let id = txn_id(n, wk, c, seq);
                            let outcome = match protocol {
                                Protocol::NoWait => nowait::attempt(&ctx, &st, &t, id).await,
                                Protocol::Occ => txbed_protocols::occ::attempt(&ctx, &st, &t, id).await,
                            };
                            match outcome {
                                Attempt::Committed => {
                                    st.stats.borrow_mut().committed += 1;
                                    let now = ctx.now();
                                    if in_window(now) {
                                        let mut m = measured.borrow_mut();
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
                                        measured.borrow_mut().aborted += 1;
                                    }
                                    tries += 1;
                                    if ctx.now() >= end {
                                        break;
                                    }
                                    // Randomised back-off, growing with the retries.
                                    let pause = ctx.with_rng(|r| r.gen_range(0..1_000u64 << tries.min(6)));
                                    ctx.sleep(pause).await;
                                }
                                Attempt::Failed(e) => {
                                    failures.borrow_mut().push(format!("node {n} worker {wk}: {e}"));
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        }
    }
    // Start nothing after `end`; let transactions in flight finish.
    sim.run_until(end);
    sim.run_to_idle(end + 100_000_000);

    // Backups catch up on the logs still in their rings (a recovering backup would too).
    for (b, st) in states.iter().enumerate() {
        let mem = sim.memory(b as u16);
        for sender in 0..spec.nodes {
            for wk in 0..spec.workers {
                txbed_protocols::log::drain_ring(st, &*mem, sender, wk);
            }
        }
    }

    // The history, each record's final version, and the conserved quantity.
    let mut h = History::default();
    let mut stats = TxnStats::default();
    let mut conserved = 0i64;
    let mut initial = 0i64;
    for (n, st) in states.iter().enumerate() {
        h.txns.extend(st.history.borrow().iter().cloned());
        stats.add(&st.stats.borrow());
        let mem = sim.memory(n as u16);
        let base = catalog.regions[n].addr;
        for place in &catalog.layout.tables {
            let per = place.spec.rows_per_node;
            for row in n as u64 * per..(n as u64 + 1) * per {
                let key = Key { table: place.spec.id, row };
                let off = base + place.tuples_at + (row - n as u64 * per) * place.tuple_bytes;
                let version = split_version_word(mem.nic_load_u64(off + VERSION)).1;
                let mut rec = vec![0u8; place.spec.record_bytes as usize];
                let _ = mem.nic_read(off + store::META_BYTES, &mut rec);
                conserved += w.conserved(key, &rec);
                initial += w.conserved(key, &w.initial(key));
                if version > 0 {
                    h.finals.push(Final { replica: "primary".into(), key: history_key(key.table, row), version });
                }
            }
        }
    }
    let names: Vec<serde_json::Value> = std::iter::once("primary".to_string())
        .chain((1..spec.replication).map(|k| format!("backup{k}")))
        .map(serde_json::Value::from)
        .collect();
    h.meta.insert("replicas".into(), serde_json::Value::Array(names));
    // Every backup's replica: the k-th backup of a key is node (primary + k).
    if spec.replication > 1 {
        for (b, st) in states.iter().enumerate() {
            for (&k, &version) in st.replica.borrow().iter() {
                let key = Key { table: (k >> 48) as u16, row: k & ((1 << 48) - 1) };
                let primary = w.home(key, spec.nodes);
                let nth = (b as u16 + spec.nodes - primary) % spec.nodes;
                h.finals.push(Final { replica: format!("backup{nth}"), key: k, version });
            }
        }
    }
    h.invariants.push(Invariant {
        name: format!("{}: conserved total", w.name()),
        expected: initial + stats.external_delta,
        actual: conserved,
    });
    let report = check(&h, &Options::default());
    let failures = failures.borrow().clone();
    let measured = measured.borrow().clone();
    Ok(TxnRunResult {
        measured,
        history: h,
        report,
        stats,
        failures,
        digest: sim.digest(),
        events: sim.events(),
        simulated_ns: sim.now(),
        verbs: sim.stats().verbs,
    })
}
