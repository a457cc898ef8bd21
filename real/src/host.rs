//! The real runtime: one process hosts one node. Its memory is served by a NIC thread
//! (`sockets::start_nic`); each worker is an actix actor on its own Arbiter (thread) that runs
//! the coroutine executor and a polling loop re-scheduled with `ctx.notify`, so control
//! messages (start, stats, finish) reach it between steps. Rank 0 gathers and checks.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use txbed_checker::Final;
use txbed_sim::NicProfile;
use txbed_transport::{
    CpuCosts, Endpoint, HostMemory, LocalBuf, MemoryRegion, NodeId, RpcConfig, WorkerConfig, WorkerCore, WorkerStats,
};
use txbed_txn::locate::Catalog;
use txbed_txn::node::NodeState;
use txbed_txn::protocol::{Bug, OptionValues, ProtocolRef, Rdma};
use txbed_txn::retry::Retry;
use txbed_txn::stage::Hybrid;
use txbed_txn::store::Layout;
use txbed_workloads::Workload;

use crate::bootstrap::{Bootstrap, Rank};
use crate::partitions::Partitions;
use crate::sockets::node::{NodeAddrs, SocketsWorker};
use crate::sockets::{start_nic, NicRoutes, SharedMemory};
use txbed_runner::faults::{Emulated, FaultReport};
use txbed_runner::node::{
    add_measured, coordinator, load_partition, node_result, node_state, run_background, NodeResult, Shared,
};
use txbed_runner::outcome::{assemble, Measured, TxnRunResult};
use txbed_runner::spec::{check_spec, layout, TxnRunSpec};
use txbed_sim::faults::Fault;

/// How long a worker's step may wait for input before it yields to its mailbox.
const STEP: Duration = Duration::from_micros(200);
/// Bootstrap, readiness and liveness timeout.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Start the coroutines; the measured clock starts at the instant given (common to the node).
#[derive(Message)]
#[rtype(result = "()")]
struct Start(Instant);

/// Self-sent: one step of the executor and completion polling.
#[derive(Message)]
#[rtype(result = "()")]
struct Poll;

/// Transport counters, answered between steps (the main thread's liveness probe).
#[derive(Message)]
#[rtype(result = "WorkerStats")]
struct Stats;

/// Stop serving, drain the log rings, and return this worker's results.
#[derive(Message)]
#[rtype(result = "Result<NodeResult, String>")]
struct Finish;

/// What the actor needs from a real backend's per-worker transport: the sans-IO core it
/// drives, one step of I/O, the common start, and shutdown.
pub trait WorkerTransport: 'static {
    fn core(&mut self) -> &mut WorkerCore;
    /// Delivers inbound completions and datagrams, runs the core once, posts its doorbells;
    /// waits at most `idle_wait` for input when the core has nothing to do.
    fn step(&mut self, idle_wait: Duration);
    fn set_start(&mut self, t0: Instant);
    fn close(&mut self);
    /// What emulated partitions did (sockets): datagrams dropped, doorbells and completions
    /// held.
    fn partitioned(&self) -> [u64; 3] {
        [0; 3]
    }
}

impl WorkerTransport for SocketsWorker {
    fn core(&mut self) -> &mut WorkerCore {
        &mut self.core
    }
    fn step(&mut self, idle_wait: Duration) {
        SocketsWorker::step(self, idle_wait)
    }
    fn set_start(&mut self, t0: Instant) {
        SocketsWorker::set_start(self, t0)
    }
    fn close(&mut self) {
        SocketsWorker::close(self)
    }
    fn partitioned(&self) -> [u64; 3] {
        let c = self.partitioned;
        [c.datagrams_dropped, c.doorbells_held, c.completions_held]
    }
}

#[cfg(feature = "verbs")]
impl WorkerTransport for crate::verbs::transport::VerbsWorker {
    fn core(&mut self) -> &mut WorkerCore {
        &mut self.core
    }
    fn step(&mut self, idle_wait: Duration) {
        crate::verbs::transport::VerbsWorker::step(self, idle_wait)
    }
    fn set_start(&mut self, t0: Instant) {
        crate::verbs::transport::VerbsWorker::set_start(self, t0)
    }
    fn close(&mut self) {
        crate::verbs::transport::VerbsWorker::close(self)
    }
}

/// One worker thread's actor: transport, protocol state and the coordinators' counters.
struct WorkerActor {
    w: Box<dyn WorkerTransport>,
    st: Rc<NodeState>,
    sh: Shared,
    spec: TxnRunSpec,
    catalog: Rc<Catalog>,
    mem: Rc<dyn HostMemory>,
    node: u16,
    wk: u16,
    running: bool,
    reported: bool,
    done_tx: mpsc::Sender<()>,
}

impl Actor for WorkerActor {
    type Context = Context<Self>;
}

impl Handler<Start> for WorkerActor {
    type Result = ();
    fn handle(&mut self, Start(t0): Start, ctx: &mut Context<Self>) {
        self.w.set_start(t0);
        for c in 0..self.spec.coroutines {
            let (st, sh) = (self.st.clone(), self.sh.clone());
            self.w.core().spawn(move |cx| coordinator(cx, st, sh, c));
        }
        if let Some(background) = self.spec.protocol.background() {
            for _ in 0..self.spec.protocol.background_coroutines(&self.spec.protocol_options) {
                let (st, sh) = (self.st.clone(), self.sh.clone());
                self.w.core().spawn(move |cx| run_background(background, cx, st, sh));
            }
        }
        self.running = true;
        ctx.notify(Poll);
    }
}

impl Handler<Poll> for WorkerActor {
    type Result = ();
    fn handle(&mut self, _: Poll, ctx: &mut Context<Self>) {
        if !self.running {
            return;
        }
        self.w.step(STEP);
        if !self.reported && self.w.core().all_finished() {
            // Coordinators are done; keep serving RPCs until every node is.
            self.reported = true;
            let _ = self.done_tx.send(());
        }
        ctx.notify(Poll);
    }
}

impl Handler<Stats> for WorkerActor {
    type Result = MessageResult<Stats>;
    fn handle(&mut self, _: Stats, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.w.core().stats())
    }
}

impl Handler<Finish> for WorkerActor {
    type Result = Result<NodeResult, String>;
    fn handle(&mut self, _: Finish, ctx: &mut Context<Self>) -> Self::Result {
        self.running = false;
        // Serve the rings other nodes wrote (backup catch-up), then report.
        for sender in 0..self.spec.nodes {
            txbed_txn::log::drain_ring(&self.st, &*self.mem, sender, self.wk);
        }
        self.w.close();
        let base = self.catalog.regions[self.node as usize].addr;
        let mut r =
            node_result(&self.spec, self.node, &*self.mem, base, std::slice::from_ref(&self.st), &self.catalog.layout);
        add_measured(&mut r, &self.sh.measured.borrow());
        r.failures = self.sh.failures.borrow().clone();
        r.verbs = self.w.core().stats().verbs;
        r.partitioned = self.w.partitioned();
        ctx.stop();
        Ok(r)
    }
}

/// A worker's connection to the fabric, before its thread connects it.
enum Link {
    Sockets {
        udp: UdpSocket,
        peers: Vec<NodeAddrs>,
        mem: SharedMemory,
        routes: NicRoutes,
    },
    #[cfg(feature = "verbs")]
    Verbs {
        qps: (
            crate::verbs::transport::WorkerQps,
            crate::verbs::transport::VerbsMemory,
            crate::verbs::transport::WorkerLink,
        ),
        peers: Vec<crate::verbs::transport::NodeDescriptor>,
    },
}

/// What a worker's Arbiter needs to build its actor (all `Send`; the actor itself is not).
struct WorkerSeed {
    spec: SpecForThread,
    node: u16,
    wk: u16,
    link: Link,
    /// Largest datagram the fabric carries (a UD message cannot exceed the port's MTU).
    datagram_mtu: Option<u32>,
    layout: Layout,
    store_regions: Vec<MemoryRegion>,
    scratch: LocalBuf,
    start: Instant,
    done_tx: mpsc::Sender<()>,
    /// Emulated partitions (sockets only; `run_real_node` refuses them elsewhere).
    partitions: Arc<Partitions>,
}

impl WorkerSeed {
    fn build(self) -> Result<WorkerActor, String> {
        let spec = self.spec.spec();
        let (node, wk) = (self.node, self.wk);
        let catalog = Rc::new(Catalog { layout: self.layout, regions: self.store_regions });
        // Each worker has its own protocol state: nothing but memory is shared.
        let st = node_state(&spec, node, &catalog);
        let me = Endpoint { node: NodeId(node), worker: wk };
        let cfg = WorkerConfig {
            me,
            nodes: spec.nodes,
            workers: spec.workers,
            costs: CpuCosts::zero(),
            // Real threads can be descheduled for milliseconds (more so when oversubscribed),
            // far longer than a round trip: a fixed 50 ms RTO (floor = cap), giving up after
            // ~0.5 s of silence.
            rpc: RpcConfig {
                piggyback: spec.options.passive_ack,
                doorbell_batching: spec.options.doorbell,
                timeout_ns: RPC_RTO_NS,
                rto_min_ns: RPC_RTO_NS,
                rto_max_ns: RPC_RTO_NS,
                retries: RPC_RETRIES,
                mtu: self.datagram_mtu.unwrap_or(RpcConfig::default().mtu),
                max_patience_ns: spec.protocol.rpc_patience_ns(&spec.protocol_options),
                ..RpcConfig::default()
            },
            seed: cfg_seed(&spec, node, wk),
            scratch: self.scratch,
            scratch_per_coroutine: txbed_runner::spec::scratch_per_coroutine(&spec, &catalog.layout),
            incarnation: 0,
        };
        let loss = (spec.profile.reliability.ud_drop_probability, cfg_seed(&spec, node, wk) ^ 0x10_55);
        let (mut w, mem): (Box<dyn WorkerTransport>, Rc<dyn HostMemory>) = match self.link {
            Link::Sockets { udp, peers, mem, routes } => {
                let mut core = WorkerCore::new(cfg, Rc::new(mem.clone()));
                if let Some(lock) = mem.htm_lock() {
                    // Each worker thread tracks its own regions (capacity); exclusion is the lock's.
                    let htm = txbed_transport::htm::Htm::new(spec.cpu.geometry(), spec.workers).emulated(lock);
                    core.set_htm(Rc::new(std::cell::RefCell::new(htm)));
                }
                let mut w = SocketsWorker::connect(core, me, udp, peers, mem.clone(), &routes, self.start, 128)?;
                w.set_datagram_loss(loss.0, loss.1);
                let n = spec.nodes as usize;
                if !spec.link_delay_ns.is_empty() {
                    w.set_link_delays(spec.link_delay_ns[node as usize * n..(node as usize + 1) * n].to_vec());
                }
                w.set_partitions(self.partitions);
                (Box::new(w), Rc::new(mem))
            }
            #[cfg(feature = "verbs")]
            Link::Verbs { qps, peers } => {
                let mem = qps.1.clone();
                let core = WorkerCore::new(cfg, Rc::new(mem.clone()));
                let mut w = crate::verbs::transport::VerbsWorker::connect(core, me, qps, peers, self.start, 128)?;
                w.set_datagram_loss(loss.0, loss.1);
                (Box::new(w), Rc::new(mem))
            }
        };
        txbed_txn::index::build(&st, &*mem);
        w.core().set_clock(crate::clock::host_clock(spec.clocks.host_bound_ns));
        for (id, name, h) in txbed_txn::participant::handlers(spec.protocol, &st) {
            w.core().name_handler(id, name);
            w.core().register_handler(id, h);
        }
        let sh = Shared {
            protocol: spec.protocol,
            server_workers: spec.protocol.server_workers(&spec.protocol_options),
            from: spec.warmup_ns,
            end: spec.warmup_ns + spec.duration_ns,
            retry: spec.retry,
            measured: Rc::new(std::cell::RefCell::new(Measured::for_run(spec.warmup_ns, spec.duration_ns))),
            failures: Rc::default(),
            stop: Rc::default(),
        };
        Ok(WorkerActor {
            w,
            st,
            sh,
            spec,
            catalog,
            mem,
            node,
            wk,
            running: false,
            reported: false,
            done_tx: self.done_tx,
        })
    }
}

/// The real backends' RPC retransmission timeout and retries (fixed: see `WorkerSeed::build`).
pub const RPC_RTO_NS: u64 = 50_000_000;
pub const RPC_RETRIES: u32 = 10;

/// A worker's own seed (its RNG draws are independent of other workers').
fn cfg_seed(spec: &TxnRunSpec, node: u16, wk: u16) -> u64 {
    spec.seed ^ ((node as u64) << 32) ^ wk as u64
}

/// Which real fabric a node runs on.
pub enum RealBackend {
    /// RC over TCP to each node's NIC thread, UD over UDP, bound to this address.
    Sockets { bind: IpAddr },
    /// libibverbs: the named (else first) device and GID index (else first RoCE v2 IPv4).
    #[cfg(feature = "verbs")]
    Verbs { device: Option<String>, gid_index: Option<u32> },
}

/// Runs one node of a sockets run (see [`run_real_node`]).
pub fn run_sockets_node(
    spec: &TxnRunSpec,
    me: Rank,
    coordinator_addr: SocketAddr,
    bind: IpAddr,
) -> Result<Option<TxnRunResult>, String> {
    run_real_node(spec, me, coordinator_addr, RealBackend::Sockets { bind }, DEFAULT_FAILURE_TIMEOUT)
}

/// The scenario's default `run.failure_timeout_ms`.
pub const DEFAULT_FAILURE_TIMEOUT: Duration = Duration::from_millis(1000);

/// A store region as bytes, for the rendezvous.
#[cfg(feature = "verbs")]
fn encode_region(r: MemoryRegion) -> Vec<u8> {
    [r.addr.to_le_bytes(), r.len.to_le_bytes()]
        .concat()
        .into_iter()
        .chain(r.rkey.to_le_bytes())
        .chain(r.lkey.to_le_bytes())
        .collect()
}

#[cfg(feature = "verbs")]
fn decode_region(b: &[u8]) -> Result<(MemoryRegion, &[u8]), String> {
    if b.len() < 24 {
        return Err("a peer's descriptor is truncated".into());
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    Ok((MemoryRegion { addr: u64_at(0), len: u64_at(8), rkey: u32_at(16), lkey: u32_at(20) }, &b[24..]))
}

/// Runs one node of a real run: this process's partition, its fabric, and worker actors.
/// Rank 0 returns the run's result; the other ranks `None`.
pub fn run_real_node(
    spec: &TxnRunSpec,
    me: Rank,
    coordinator_addr: SocketAddr,
    backend: RealBackend,
    failure_timeout: Duration,
) -> Result<Option<TxnRunResult>, String> {
    check_spec(spec)?;
    if spec.protocol.needs().htm && !matches!(backend, RealBackend::Sockets { .. }) {
        return Err(format!(
            "{} needs HTM: on the verbs backend neither real RTM nor an emulation exists yet (a real NIC's accesses bypass the emulation's lock); run it on the simulator or the sockets backend",
            spec.protocol.name()
        ));
    }
    if spec.warm_cache {
        return Err(
            "protocol.warm_cache is simulator-only for now: real backends start with empty location caches".into()
        );
    }
    if spec.qps_per_node != 1 {
        return Err(format!(
            "cluster.qps_per_node is {}: emulating a larger cluster's connections is simulator-only for now; real backends open one RC QP per worker and remote node",
            spec.qps_per_node
        ));
    }
    // Faults reach a real node only as partitions the sockets backend emulates (`crate::run`
    // checked them against the scenario); the workers' spec has none.
    let partitions =
        Arc::new(Partitions::new(spec.nodes, spec.faults.as_ref().map(|f| f.schedule.as_slice()).unwrap_or_default()));
    if let Some(f) =
        spec.faults.as_ref().and_then(|f| f.schedule.iter().find(|t| !matches!(t.fault, Fault::Partition { .. })))
    {
        return Err(format!("faults: a real backend cannot emulate {} (docs/faults.md)", f.fault.kind()));
    }
    if !partitions.is_empty() && !matches!(backend, RealBackend::Sockets { .. }) {
        return Err("faults: the verbs backend cannot hold real RDMA traffic, so it cannot emulate partitions; run on the simulator (--backend sim), or on sockets".into());
    }
    if me.size != spec.nodes as u32 {
        return Err(format!("the launcher started {} processes but the scenario has {} nodes", me.size, spec.nodes));
    }
    let node = me.rank as u16;
    let layout = layout(spec);
    let scratch_per_worker = txbed_runner::spec::coroutines_per_worker(spec) as u64
        * txbed_runner::spec::scratch_per_coroutine(spec, &layout) as u64;
    let rkey = |i: u32| 0x5000_0000 | ((node as u32) << 12) | i;
    let keys = [
        (scratch_per_worker * spec.workers as u64, rkey(0), 0x6000_0000 | ((node as u32) << 12)),
        (layout.bytes, rkey(1), 0x6000_0001 | ((node as u32) << 12)),
    ];
    let Connected { regions, mut boot, store_regions, links, datagram_mtu, _device } =
        connect(spec, me, coordinator_addr, backend, &layout, &keys)?;
    // From here to the final gather, a dead or hung rank ends every survivor, named.
    let watch = boot.watch(
        failure_timeout,
        Box::new(|m| {
            eprintln!("error: {m}");
            std::process::exit(2)
        }),
    );
    let start = Instant::now();
    let end = spec.warmup_ns + spec.duration_ns;

    let sys = actix_rt::System::new();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<Addr<WorkerActor>, String>>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut arbiters = Vec::new();
    for (wk, link) in links.into_iter().enumerate() {
        let seed = WorkerSeed {
            spec: SpecForThread::from(spec),
            node,
            wk: wk as u16,
            link,
            datagram_mtu,
            layout: layout.clone(),
            store_regions: store_regions.clone(),
            scratch: LocalBuf {
                lkey: regions[0].lkey,
                addr: regions[0].addr + wk as u64 * scratch_per_worker,
                len: scratch_per_worker as u32,
            },
            start,
            done_tx: done_tx.clone(),
            partitions: partitions.clone(),
        };
        let ready_tx = ready_tx.clone();
        let arbiter = actix_rt::Arbiter::new();
        arbiter.spawn_fn(move || {
            let _ = ready_tx.send(seed.build().map(Actor::start));
        });
        arbiters.push(arbiter);
    }
    drop((done_tx, ready_tx));
    let stop_all = |arbiters: Vec<actix_rt::Arbiter>| {
        for a in arbiters {
            a.stop();
            let _ = a.join();
        }
    };
    // Workers connect and report ready; the common start follows the cluster-wide barrier,
    // so the measured window starts with everyone running.
    let mut workers = Vec::new();
    for _ in 0..spec.workers {
        match ready_rx.recv_timeout(TIMEOUT) {
            Ok(Ok(a)) => workers.push(a),
            Ok(Err(e)) => {
                stop_all(arbiters);
                return Err(e);
            }
            Err(_) => return Err(format!("node {node}: a worker did not get ready")),
        }
    }
    boot.barrier("start").map_err(|e| e.0)?;
    let t0 = Instant::now();
    for a in &workers {
        a.do_send(Start(t0));
    }
    // Every coroutine of this node finishes; meanwhile the workers must keep answering their
    // mailbox (a stuck polling loop would starve it).
    wait_finished(&sys, &workers, &done_rx, Instant::now() + Duration::from_nanos(end) + TIMEOUT, node)?;
    boot.barrier("end").map_err(|e| e.0)?;
    // The node's result: workers' histories and replicas; the store read once.
    let mut results = Vec::new();
    for (wk, a) in workers.iter().enumerate() {
        let r = sys.block_on(a.send(Finish)).map_err(|e| format!("node {node}: worker {wk}: {e}"))??;
        results.push(r);
    }
    stop_all(arbiters);
    let mut merged = merge_workers(results);
    // Replicas of one key kept by several workers: keep the newest.
    dedup_replicas(&mut merged.finals);
    let all = boot.gather(&serde_json::to_vec(&merged).map_err(|e| e.to_string())?).map_err(|e| e.0)?;
    if let Some(w) = watch {
        w.finish();
    }
    let Some(all) = all else { return Ok(None) };
    let results: Vec<NodeResult> =
        all.iter().map(|b| serde_json::from_slice(b).map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
    let mut verbs = [0u64; 7];
    for r in &results {
        for (m, v) in verbs.iter_mut().zip(r.verbs) {
            *m += v;
        }
    }
    let location = txbed_runner::outcome::location_total(&results);
    let faults = (!partitions.is_empty()).then(|| {
        let mut c = [0u64; 3];
        for r in &results {
            for (m, v) in c.iter_mut().zip(r.partitioned) {
                *m += v;
            }
        }
        FaultReport {
            applied: partitions.applied.clone(),
            lost: c[0],
            emulated: Some(Emulated { backend: "sockets".into(), doorbells_held: c[1], completions_held: c[2] }),
            ..FaultReport::default()
        }
    });
    // A real backend's history times are each process's own monotonic clock: real-time order
    // across nodes is not comparable, so a protocol claiming strict serializability is checked
    // at serializability here, and says so.
    let checked;
    let spec = if spec.level() == txbed_checker::Level::StrictSerializable {
        eprintln!(
            "note: {} claims strict serializability; real backends' histories carry per-process clocks, so this run is checked serializable",
            spec.protocol.name()
        );
        checked = TxnRunSpec { isolation: Some(txbed_checker::Level::Serializable), ..spec.clone() };
        &checked
    } else {
        spec
    };
    let (history, report, stats, measured, failures) = assemble(spec, results);
    Ok(Some(TxnRunResult {
        wall: Default::default(),
        measured,
        history,
        report,
        stats,
        failures,
        digest: 0,
        events: 0,
        simulated_ns: start.elapsed().as_nanos() as u64,
        verbs,
        location,
        qp_cache_miss_ratio: None,
        htm_mode: spec.protocol.needs().htm.then(|| {
            format!(
                "emulated: a node-wide lock excludes every other access during a region (this CPU {} RTM; real RTM regions are not built)",
                if cpu_has_rtm() { "reports" } else { "does not report" }
            )
        }),
        server_busy_ns: Vec::new(),
        trace: Vec::new(),
        clocks: None,
        faults,
        // The delayed links (`real::wan`) do not count messages yet.
        inter_dc: None,
    }))
}

/// Waits for every worker's coroutines to finish, checking meanwhile that each still answers
/// its mailbox (a stuck polling loop would starve it) and that none outlives `deadline`.
fn wait_finished(
    sys: &actix_rt::SystemRunner,
    workers: &[Addr<WorkerActor>],
    done_rx: &mpsc::Receiver<()>,
    deadline: Instant,
    node: u16,
) -> Result<(), String> {
    let mut finished = 0;
    while finished < workers.len() {
        match done_rx.recv_timeout(Duration::from_secs(1)) {
            Ok(()) => finished += 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(format!("node {node}: a worker died")),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if Instant::now() > deadline {
                    return Err(format!("node {node}: a worker did not finish"));
                }
                for (wk, a) in workers.iter().enumerate() {
                    sys.block_on(async { actix_rt::time::timeout(TIMEOUT, a.send(Stats)).await })
                        .map_err(|_| format!("node {node}: worker {wk} stopped answering its mailbox"))?
                        .map_err(|e| format!("node {node}: worker {wk}: {e}"))?;
                }
            }
        }
    }
    Ok(())
}

/// A node connected to its peers: its memory regions, the rendezvous (for barriers and the
/// final gather), every node's store region, each worker's link, the datagram MTU (verbs),
/// and, on verbs, the open device, kept for the run.
struct Connected {
    regions: Vec<MemoryRegion>,
    boot: Bootstrap,
    store_regions: Vec<MemoryRegion>,
    links: Vec<Link>,
    datagram_mtu: Option<u32>,
    _device: Option<Box<dyn std::any::Any>>,
}

/// Registers the node's memory, loads its partition, opens the backend and meets the other
/// ranks: what differs between sockets and verbs.
fn connect(
    spec: &TxnRunSpec,
    me: Rank,
    coordinator_addr: SocketAddr,
    backend: RealBackend,
    layout: &Layout,
    keys: &[(u64, u32, u32)],
) -> Result<Connected, String> {
    let node = me.rank as u16;
    match backend {
        RealBackend::Sockets { bind } => {
            let mut mem = SharedMemory::new(keys);
            if spec.protocol.needs().htm {
                mem = mem.with_htm_lock(std::sync::Arc::default());
            }
            let regions = mem.regions();
            load_partition(&mem, regions[1], layout, node, spec, &Default::default())?;
            let routes = NicRoutes::default();
            let nic =
                start_nic(mem.clone(), routes.clone(), SocketAddr::new(bind, 0)).map_err(|e| format!("NIC: {e}"))?;
            let udps: Vec<UdpSocket> = (0..spec.workers)
                .map(|_| UdpSocket::bind(SocketAddr::new(bind, 0)))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("UDP: {e}"))?;
            let udp_addrs =
                udps.iter().map(|u| u.local_addr()).collect::<Result<_, _>>().map_err(|e| format!("UDP: {e}"))?;
            let me_addrs = NodeAddrs { nic, udp: udp_addrs, store: regions[1] };
            let boot = Bootstrap::join(me, coordinator_addr, &me_addrs.encode(), TIMEOUT).map_err(|e| e.0)?;
            let peers: Vec<NodeAddrs> =
                boot.descriptors.iter().map(|d| NodeAddrs::decode(d)).collect::<Result<_, _>>()?;
            let stores = peers.iter().map(|p| p.store).collect();
            let links = udps
                .into_iter()
                .map(|udp| Link::Sockets { udp, peers: peers.clone(), mem: mem.clone(), routes: routes.clone() })
                .collect();
            Ok(Connected { regions, boot, store_regions: stores, links, datagram_mtu: None, _device: None })
        }
        #[cfg(feature = "verbs")]
        RealBackend::Verbs { device, gid_index } => {
            use crate::verbs::transport::{NodeDescriptor, VerbsMemory, VerbsNode};
            let mem = VerbsMemory::new(keys);
            let regions = mem.regions();
            load_partition(&mem, regions[1], layout, node, spec, &Default::default())?;
            let mut dev = VerbsNode::open(device.as_deref(), gid_index, mem, spec.nodes, spec.workers, 128)
                .map_err(|e| e.to_string())?;
            let mut blob = encode_region(regions[1]);
            blob.extend(dev.descriptor().encode());
            let boot = Bootstrap::join(me, coordinator_addr, &blob, TIMEOUT).map_err(|e| e.0)?;
            let mut stores = Vec::new();
            let mut peers = Vec::new();
            for d in &boot.descriptors {
                let (store, rest) = decode_region(d)?;
                stores.push(store);
                peers.push(NodeDescriptor::decode(rest)?);
            }
            let mut links = Vec::new();
            for w in 0..spec.workers {
                let qps = dev.take_worker(w).ok_or_else(|| format!("worker {w}'s queue pairs are missing"))?;
                links.push(Link::Verbs { qps, peers: peers.clone() });
            }
            {
                let mtu = dev.device().active_mtu;
                Ok(Connected {
                    regions,
                    boot,
                    store_regions: stores,
                    links,
                    datagram_mtu: (mtu > 0).then_some(mtu),
                    _device: Some(Box::new(dev)),
                })
            }
        }
    }
}

/// One node's result from its workers': the store (primaries, conserved total, consistency)
/// is the same memory for all, so it is taken once; histories, replicas and counters add up.
fn merge_workers(results: Vec<NodeResult>) -> NodeResult {
    let mut merged = NodeResult::default();
    for (i, r) in results.into_iter().enumerate() {
        let mut stats = merged.stats();
        stats.add(&r.stats());
        merged.set_stats(&stats);
        if i == 0 {
            merged.finals = r.finals.iter().filter(|f| f.replica == "primary").cloned().collect();
            merged.conserved = r.conserved;
            merged.initial = r.initial;
            merged.consistency = r.consistency.clone();
        }
        for (k, v) in &r.per_kind {
            *merged.per_kind.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &r.aborted_by {
            *merged.aborted_by.entry(k.clone()).or_default() += v;
        }
        merged.finals.extend(r.finals.into_iter().filter(|f| f.replica != "primary"));
        merged.txns.extend(r.txns);
        merged.measured_committed += r.measured_committed;
        merged.measured_aborted += r.measured_aborted;
        merged.location.add(&r.location);
        merged.latency.extend(r.latency);
        for (k, v) in r.per_kind_latency {
            merged.per_kind_latency.entry(k).or_default().extend(v);
        }
        merged.per_worker.extend(r.per_worker);
        merged.series.add(&r.series);
        merged.failures.extend(r.failures);
        for (m, v) in merged.verbs.iter_mut().zip(r.verbs) {
            *m += v;
        }
        for (m, v) in merged.partitioned.iter_mut().zip(r.partitioned) {
            *m += v;
        }
    }
    merged
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
    protocol: ProtocolRef,
    protocol_options: OptionValues,
    nodes: u16,
    workers: u16,
    coroutines: u32,
    qps_per_node: u16,
    warm_cache: bool,
    local_path: bool,
    profile: NicProfile,
    seed: u64,
    hybrid: Hybrid,
    replication: u16,
    workload: Arc<dyn Workload>,
    warmup_ns: u64,
    duration_ns: u64,
    cache_bytes: u64,
    options: Rdma,
    bug: Option<Bug>,
    link_delay_ns: Vec<u64>,
    wan: Option<txbed_sim::wan::Wan>,
    retry: Retry,
    clocks: txbed_runner::spec::ClockSpec,
    isolation: Option<txbed_checker::Level>,
}

impl SpecForThread {
    fn from(s: &TxnRunSpec) -> Self {
        SpecForThread {
            protocol: s.protocol,
            protocol_options: s.protocol_options.clone(),
            nodes: s.nodes,
            workers: s.workers,
            coroutines: s.coroutines,
            qps_per_node: s.qps_per_node,
            warm_cache: s.warm_cache,
            local_path: s.local_path,
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
            link_delay_ns: s.link_delay_ns.clone(),
            wan: s.wan.clone(),
            retry: s.retry,
            clocks: s.clocks.clone(),
            isolation: s.isolation,
        }
    }
    fn spec(self) -> TxnRunSpec {
        TxnRunSpec {
            protocol: self.protocol,
            protocol_options: self.protocol_options,
            nodes: self.nodes,
            workers: self.workers,
            coroutines: self.coroutines,
            qps_per_node: self.qps_per_node,
            warm_cache: self.warm_cache,
            local_path: self.local_path,
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
            link_delay_ns: self.link_delay_ns,
            // `crate::run` turned what sockets can emulate into link delays, or refused; the
            // data centers stay for the nodes to know theirs (`NodeState::dc_of`).
            wan: self.wan,
            retry: self.retry,
            trace: false,
            clocks: self.clocks,
            // Partitions are the transport's (`WorkerSeed::partitions`); nothing else reaches here.
            faults: None,
            isolation: self.isolation,
            // Real backends run no HTM model (`run_real_node` refuses protocols needing HTM).
            cpu: txbed_sim::cpu::CpuProfile::load(txbed_scenario::DEFAULT_CPU).expect("built-in CPU profile"),
        }
    }
}

/// Whether this CPU reports Intel RTM (CPUID.07H:EBX.RTM), for the report.
fn cpu_has_rtm() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("rtm")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
