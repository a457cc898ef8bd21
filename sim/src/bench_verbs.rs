//! Primitive microbenchmarks on the simulator, after DrTM+H Sec. 4 (Fig. 5 and Fig. 6).
//!
//! - `raw`: every worker of every node issues one verb kind (READ, WRITE, ATOMIC) or a UD RPC
//!   to random remote nodes, keeping a few requests outstanding per coroutine; the result is
//!   the per-machine rate. The 80-node setting opens 5 RC QPs per remote node per worker, as
//!   DrTM+H emulates a large cluster on 16 machines.
//! - `multi-object`: each request reads or writes 10 x 64 B objects on random remote nodes,
//!   one-sided or by RPC, with optimisations added cumulatively: coroutines, outstanding
//!   requests, doorbell batching, passive ACK.
//!
//! These functions only build and run simulations; callers time them and run many at once.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use hdrhistogram::Histogram;
use rand::Rng;
use txbed_transport::*;

use crate::fabric::{Sim, SimConfig};
use crate::profile::NicProfile;

/// Workers per node: DrTM+H Sec. 4.1 runs 24 worker threads per machine.
pub const WORKERS: u16 = 24;
/// Coroutines per worker in the raw benchmark, and requests each keeps outstanding.
pub const RAW_COROUTINES: u32 = 8;
pub const RAW_DEPTH: u32 = 2;
/// DrTM+H inlines WRITEs below 64 B (Sec. 3.1).
pub const INLINE_UP_TO: u32 = 64;
pub const MULTI_OBJECTS: u32 = 10;
pub const MULTI_PAYLOAD: u32 = 64;
/// Coroutines per worker once coroutines are enabled ("a small number ... e.g. 8").
pub const MULTI_COROUTINES: u32 = 8;
/// Workers per node in the multi-object benchmark. DrTM+H does not state its thread count for
/// Fig. 6; with 24 workers x 8 coroutines the NIC saturates before outstanding requests or
/// doorbell batching can show any effect, so the benchmark uses 8 (a setting of the
/// experiment, not of the model).
pub const MULTI_WORKERS: u16 = 8;

const ECHO: u16 = 1;
const STORE: u16 = 2;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RawVerb {
    Read,
    Write,
    Atomic,
    Rpc,
}

impl RawVerb {
    pub const ALL: [RawVerb; 4] = [RawVerb::Read, RawVerb::Write, RawVerb::Atomic, RawVerb::Rpc];
    pub fn name(self) -> &'static str {
        match self {
            RawVerb::Read => "READ",
            RawVerb::Write => "WRITE",
            RawVerb::Atomic => "ATOMIC",
            RawVerb::Rpc => "UD RPC",
        }
    }
}

/// One simulated setting: cluster size and QPs per remote node.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    pub label: String,
    pub nodes: u16,
    pub qps_per_node: u16,
}

impl Setting {
    pub fn sixteen() -> Self {
        Setting { label: "16-node".into(), nodes: 16, qps_per_node: 1 }
    }
    /// DrTM+H's emulated 80-node connection setting: 5 QPs per remote node per worker.
    pub fn eighty() -> Self {
        Setting { label: "80-node".into(), nodes: 16, qps_per_node: 5 }
    }
}

/// Simulated measurement window.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Window {
    pub warmup_ns: Nanos,
    pub measure_ns: Nanos,
}

impl Default for Window {
    fn default() -> Self {
        Window { warmup_ns: 20_000, measure_ns: 40_000 }
    }
}

impl Window {
    /// Multi-object requests last ~20 us with one coroutine: warm up and measure longer so the
    /// synchronised first wave of requests does not bias the rate.
    pub fn multi_object() -> Self {
        Window { warmup_ns: 100_000, measure_ns: 200_000 }
    }
}

/// What one benchmark simulation produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Completed operations (verbs or RPCs; for multi-object, requests) per machine per second.
    pub per_machine_per_s: f64,
    pub events: u64,
    pub digest: u64,
    pub qp_miss_ratio: f64,
    /// Verbs posted over the whole run (warm-up included), by `Opcode as usize`.
    pub verbs: [u64; 7],
    /// Whole run: RPC calls, datagrams sent, and mean worker CPU utilisation.
    pub rpc_calls: u64,
    pub datagrams: u64,
    pub cpu_utilisation: f64,
}

/// Largest RPC payload that fits one UD datagram with its frame header.
pub fn rpc_max_payload(p: &NicProfile) -> u32 {
    p.mtu - rpc::FRAME_HEADER as u32
}

fn build(
    profile: &NicProfile,
    setting: &Setting,
    workers: u16,
    seed: u64,
    coroutines: u32,
    scratch: u32,
    rpc: RpcConfig,
) -> Sim {
    let mut cfg = SimConfig::new(setting.nodes, workers, profile.clone(), seed);
    cfg.qps_per_node = setting.qps_per_node;
    cfg.max_coroutines = coroutines;
    cfg.scratch_per_coroutine = scratch.max(64);
    cfg.rpc = RpcConfig { mtu: profile.mtu, ..rpc };
    Sim::new(cfg).expect("benchmark configuration is valid")
}

/// Registers a target region on every node and the RPC handlers the benchmarks use.
fn targets(sim: &mut Sim, len: u64) -> Vec<MemoryRegion> {
    let mut mrs = Vec::new();
    for n in 0..sim.nodes() {
        mrs.push(sim.register_region(n, len));
        for w in 0..sim.workers() {
            // ECHO: the request names the reply size; STORE: copies the object, empty reply.
            let echo: Rc<HandlerFn> = Rc::new(|ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                let len = req.get(..4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).unwrap_or(0);
                ctx.reply.resize(len as usize, 0);
                Handled::Reply
            });
            let store: Rc<HandlerFn> = Rc::new(|_ctx: &mut HandlerCtx<'_>, _req: &[u8]| Handled::Reply);
            sim.worker(n, w).register_handler(ECHO, echo);
            sim.worker(n, w).register_handler(STORE, store);
        }
    }
    mrs
}

fn random_peer(ctx: &Ctx) -> NodeId {
    let (me, n) = (ctx.me().node.0, ctx.nodes());
    let r = ctx.with_rng(|r| r.gen_range(0..n - 1));
    NodeId(if r >= me { r + 1 } else { r })
}

fn in_window(ctx: &Ctx, w: Window) -> bool {
    let t = ctx.now();
    t >= w.warmup_ns && t < w.warmup_ns + w.measure_ns
}

fn finish(sim: &Sim, count: u64, w: Window, nodes: u16) -> Outcome {
    let s = sim.stats();
    let ws = sim.worker_stats();
    let cpus = nodes as f64 * sim.workers() as f64 * (w.warmup_ns + w.measure_ns) as f64;
    Outcome {
        per_machine_per_s: count as f64 / nodes as f64 / (w.measure_ns as f64 * 1e-9),
        events: sim.events(),
        digest: sim.digest(),
        qp_miss_ratio: s.qp_cache_misses as f64 / s.qp_cache_lookups.max(1) as f64,
        verbs: s.verbs,
        rpc_calls: ws.rpc_calls,
        datagrams: ws.datagrams_sent,
        cpu_utilisation: ws.cpu_busy_ns as f64 / cpus,
    }
}

/// A closed-loop verbs workload: every coroutine of every worker keeps `depth` requests of
/// one kind to random remote nodes outstanding, waits for all, and repeats.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopSpec {
    pub setting: Setting,
    pub workers: u16,
    pub coroutines: u32,
    pub depth: u32,
    pub verb: RawVerb,
    pub payload: u32,
}

/// A closed-loop run: rates, and the latency of each round of `depth` requests (ns).
pub struct LoopOutcome {
    pub outcome: Outcome,
    pub latency_ns: Histogram<u64>,
}

/// The raw primitive benchmark (DrTM+H Fig. 5) for one verb, payload and setting.
pub fn raw(profile: &NicProfile, setting: &Setting, verb: RawVerb, payload: u32, seed: u64, w: Window) -> Outcome {
    let spec = LoopSpec {
        setting: setting.clone(),
        workers: WORKERS,
        coroutines: RAW_COROUTINES,
        depth: RAW_DEPTH,
        verb,
        payload,
    };
    closed_loop(profile, &spec, seed, w).outcome
}

pub fn closed_loop(profile: &NicProfile, spec: &LoopSpec, seed: u64, w: Window) -> LoopOutcome {
    let (setting, verb, payload, depth) = (&spec.setting, spec.verb, spec.payload, spec.depth);
    let region: u64 = 4 << 20;
    let rpc = RpcConfig { retries: 0, ..RpcConfig::default() };
    let mut sim = build(profile, setting, spec.workers, seed, spec.coroutines, payload * depth, rpc);
    let mrs = Rc::new(targets(&mut sim, region));
    let count = Rc::new(Cell::new(0u64));
    let hist = Rc::new(RefCell::new(Histogram::<u64>::new(3).expect("histogram")));
    let slots = region / payload.max(8) as u64;
    for n in 0..setting.nodes {
        for wk in 0..spec.workers {
            for _ in 0..spec.coroutines {
                let (mrs, count, hist) = (mrs.clone(), count.clone(), hist.clone());
                sim.spawn(n, wk, move |ctx| async move {
                    let s = ctx.scratch();
                    loop {
                        let t0 = ctx.now();
                        let mut calls = 0;
                        for d in 0..depth {
                            let peer = random_peer(&ctx);
                            let mr = mrs[peer.0 as usize];
                            let off = ctx.with_rng(|r| r.gen_range(0..slots)) * payload.max(8) as u64;
                            let local = LocalBuf { lkey: s.lkey, addr: s.addr + (d * payload) as u64, len: payload };
                            let remote = RemoteBuf { rkey: mr.rkey, addr: mr.addr + off, len: payload };
                            let op = match verb {
                                RawVerb::Read => Op::Read { local, remote },
                                RawVerb::Write if payload <= INLINE_UP_TO => {
                                    Op::Write { src: Payload::Inline(vec![0; payload as usize]), remote }
                                }
                                RawVerb::Write => Op::Write { src: Payload::Local(local), remote },
                                RawVerb::Atomic => Op::Faa {
                                    local: LocalBuf { len: 8, ..local },
                                    remote: RemoteBuf { len: 8, ..remote },
                                    add: 1,
                                },
                                RawVerb::Rpc => {
                                    // Worker i talks to worker i of other nodes (FaSST, DrTM+H).
                                    let dst = Endpoint { node: peer, worker: ctx.me().worker };
                                    ctx.call(dst, ECHO, &payload.to_le_bytes());
                                    calls += 1;
                                    continue;
                                }
                            };
                            let qps = ctx.rc_qp_count(peer);
                            let k = ctx.with_rng(|r| r.gen_range(0..qps));
                            let qp = ctx.rc_qp(peer, k).expect("qp");
                            ctx.post(qp, [(op, true)]).expect("post");
                        }
                        let _ = ctx.wait().await;
                        if calls > 0 {
                            ctx.clear_replies();
                        }
                        if in_window(&ctx, w) {
                            count.set(count.get() + depth as u64);
                            let _ = hist.borrow_mut().record_n((ctx.now() - t0).max(1), depth as u64);
                        }
                    }
                });
            }
        }
    }
    sim.run_until(w.warmup_ns + w.measure_ns);
    let outcome = finish(&sim, count.get(), w, setting.nodes);
    drop(sim);
    let latency_ns = Rc::try_unwrap(hist).map(|h| h.into_inner()).unwrap_or_else(|h| h.borrow().clone());
    LoopOutcome { outcome, latency_ns }
}

/// Cumulative optimisation steps of the multi-object benchmark (DrTM+H Fig. 6).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Baseline,
    Coroutines,
    Outstanding,
    Doorbell,
    PassiveAck,
}

impl Step {
    pub const ALL: [Step; 5] = [Step::Baseline, Step::Coroutines, Step::Outstanding, Step::Doorbell, Step::PassiveAck];
    pub fn label(self) -> &'static str {
        match self {
            Step::Baseline => "baseline",
            Step::Coroutines => "+CO",
            Step::Outstanding => "+OR",
            Step::Doorbell => "+DB",
            Step::PassiveAck => "+PA",
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Primitive {
    OneSided,
    TwoSided,
}

impl Primitive {
    pub fn label(self) -> &'static str {
        match self {
            Primitive::OneSided => "one-sided",
            Primitive::TwoSided => "two-sided",
        }
    }
}

/// The multi-object benchmark: requests of 10 x 64 B reads (or writes) on random remote
/// nodes. Returns requests per machine per second.
pub fn multi_object(
    profile: &NicProfile,
    setting: &Setting,
    prim: Primitive,
    write: bool,
    step: Step,
    seed: u64,
    w: Window,
) -> Outcome {
    let region: u64 = 4 << 20;
    let coroutines = if step >= Step::Coroutines { MULTI_COROUTINES } else { 1 };
    let how = MultiRequest {
        write,
        outstanding: step >= Step::Outstanding,
        doorbell: step >= Step::Doorbell,
        passive: step >= Step::PassiveAck && write,
    };
    let rpc = RpcConfig { retries: 0, doorbell_batching: how.doorbell, piggyback: how.passive, ..RpcConfig::default() };
    let mut sim = build(profile, setting, MULTI_WORKERS, seed, coroutines, MULTI_OBJECTS * MULTI_PAYLOAD, rpc);
    let mrs = Rc::new(targets(&mut sim, region));
    let count = Rc::new(Cell::new(0u64));
    let slots = region / MULTI_PAYLOAD as u64;
    for n in 0..setting.nodes {
        for wk in 0..MULTI_WORKERS {
            for _ in 0..coroutines {
                let (mrs, count) = (mrs.clone(), count.clone());
                sim.spawn(n, wk, move |ctx| async move {
                    let s = ctx.scratch();
                    let obj = vec![7u8; MULTI_PAYLOAD as usize];
                    loop {
                        let objects = pick_objects(&ctx, slots);
                        match prim {
                            Primitive::OneSided => how.one_sided(&ctx, &mrs, s, &obj, &objects).await,
                            Primitive::TwoSided => how.two_sided(&ctx, &obj, &objects).await,
                        }
                        if in_window(&ctx, w) {
                            count.set(count.get() + 1);
                        }
                    }
                });
            }
        }
    }
    sim.run_until(w.warmup_ns + w.measure_ns);
    finish(&sim, count.get(), w, setting.nodes)
}

/// One object of a multi-object request: its node, which of the RC QPs to it, its offset.
type Object = (NodeId, usize, u64);

/// The destinations and offsets of one request's objects.
fn pick_objects(ctx: &Ctx, slots: u64) -> Vec<Object> {
    (0..MULTI_OBJECTS)
        .map(|_| {
            let p = random_peer(ctx);
            let qps = ctx.rc_qp_count(p);
            let k = ctx.with_rng(|r| r.gen_range(0..qps));
            (p, k, ctx.with_rng(|r| r.gen_range(0..slots)) * MULTI_PAYLOAD as u64)
        })
        .collect()
}

/// How a multi-object request is issued at one optimisation step.
#[derive(Copy, Clone)]
struct MultiRequest {
    write: bool,
    /// All objects outstanding at once, instead of one after another.
    outstanding: bool,
    /// One doorbell per QP (and per RPC batch).
    doorbell: bool,
    /// Passive ACK: signal only what must be.
    passive: bool,
}

impl MultiRequest {
    /// The request with one-sided READs or WRITEs.
    async fn one_sided(self, ctx: &Ctx, mrs: &[MemoryRegion], s: LocalBuf, obj: &[u8], objects: &[Object]) {
        let op = |i: usize, (p, _, off): Object| {
            let mr = mrs[p.0 as usize];
            let remote = RemoteBuf { rkey: mr.rkey, addr: mr.addr + off, len: MULTI_PAYLOAD };
            if self.write {
                Op::Write { src: Payload::Inline(obj.to_vec()), remote }
            } else {
                let local =
                    LocalBuf { lkey: s.lkey, addr: s.addr + (i as u32 * MULTI_PAYLOAD) as u64, len: MULTI_PAYLOAD };
                Op::Read { local, remote }
            }
        };
        if !self.outstanding {
            for (i, t) in objects.iter().enumerate() {
                let qp = ctx.rc_qp(t.0, t.1).unwrap();
                ctx.post(qp, [(op(i, *t), true)]).unwrap();
                let _ = ctx.wait().await;
            }
            return;
        }
        if !self.doorbell {
            for (i, t) in objects.iter().enumerate() {
                let qp = ctx.rc_qp(t.0, t.1).unwrap();
                ctx.post(qp, [(op(i, *t), true)]).unwrap();
            }
            let _ = ctx.wait().await;
            return;
        }
        // One doorbell per QP; with passive ACK only the last request of the whole batch is
        // signaled (and any that would fill a send queue).
        let mut by_qp: Vec<(QpId, Vec<(usize, Object)>)> = Vec::new();
        for (i, t) in objects.iter().enumerate() {
            let qp = ctx.rc_qp(t.0, t.1).unwrap();
            match by_qp.iter_mut().find(|(q, _)| *q == qp) {
                Some((_, v)) => v.push((i, *t)),
                None => by_qp.push((qp, vec![(i, *t)])),
            }
        }
        let groups = by_qp.len();
        for (g, (qp, items)) in by_qp.into_iter().enumerate() {
            let depth = ctx.qp_info(qp).unwrap().max_outstanding;
            let near_full = ctx.outstanding(qp) + items.len() as u32 * 2 >= depth;
            let last = items.len() - 1;
            let ops: Vec<(Op, bool)> = items
                .into_iter()
                .enumerate()
                .map(|(j, (i, t))| {
                    let signaled = !self.passive || (g + 1 == groups && j == last) || (near_full && j == last);
                    (op(i, t), signaled)
                })
                .collect();
            ctx.post(qp, ops).unwrap();
        }
        let _ = ctx.wait().await;
    }

    /// The request by RPC: each object read (ECHO) or written (STORE) by the remote worker.
    async fn two_sided(self, ctx: &Ctx, obj: &[u8], objects: &[Object]) {
        let call = |t: &Object| {
            // Worker i talks to worker i of other nodes (FaSST, DrTM+H).
            let dst = Endpoint { node: t.0, worker: ctx.me().worker };
            if self.write {
                ctx.call(dst, STORE, obj);
            } else {
                ctx.call(dst, ECHO, &MULTI_PAYLOAD.to_le_bytes());
            }
        };
        if !self.outstanding {
            for t in objects {
                call(t);
                let _ = ctx.wait().await;
            }
        } else {
            for t in objects {
                call(t);
            }
            let _ = ctx.wait().await;
        }
        ctx.clear_replies();
    }
}
