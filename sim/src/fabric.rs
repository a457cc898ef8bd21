//! The simulated cluster: nodes with worker CPUs, NICs, PCIe, links and one switch.
//!
//! Life of a one-sided request (times in picoseconds, events in nanoseconds):
//! 1. A coroutine posts a doorbell; the worker pays the MMIO in CPU time. The NIC sees it
//!    `mmio_latency` later (event `Doorbell`). One WQE rides in the MMIO itself (BlueFlame);
//!    a batch is DMA-fetched with one PCIe read.
//! 2. The requester NIC spends processing-unit work on each WQE (plus a QP-context miss if the
//!    QP is not cached), DMA-reads a non-inline payload, serialises the packet on its link, and
//!    the switch forwards it to the responder's port (event `ReqArrive`).
//! 3. The responder NIC applies the verb to host memory at that time, with no CPU involved:
//!    WRITEs land, READs sample memory line by line, atomics read, then write `atomic_rmw`
//!    later (HCA) or at once (GLOB). A bad rkey or range is NAKed.
//! 4. The response (data, atomic result or ACK) travels back (event `RespArrive`); the
//!    requester DMA-writes data and, for signaled requests or errors, a CQE. Completions of one
//!    QP are delivered in posting order.
//!
//! Everything is ordered by (time, sequence), every event folds into the digest, and all
//! randomness comes from one seeded ChaCha stream, so a run is a pure function of its inputs.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use rand::SeedableRng;
use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use txbed_transport::*;

use crate::engine::EventQueue;
use crate::faults::{LinkParams, NetFaults};
use crate::memory::{NodeMemory, CACHE_LINE};
use crate::profile::{headers as h, Atomicity, NicModel, NicProfile, VerbClass};
use crate::wan::{unit, Wan, WanTransport};

/// How a simulated cluster is built.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: u16,
    pub workers: u16,
    /// RC QPs each worker opens to each remote node (5 emulates an 80-node cluster on 16
    /// nodes, DrTM+H Sec. 4.2).
    pub qps_per_node: u16,
    pub profile: NicProfile,
    pub seed: u64,
    /// Coroutines per worker the scratch memory must hold.
    pub max_coroutines: u32,
    pub scratch_per_coroutine: u32,
    pub rpc: RpcConfig,
    /// Also connect each worker's RC QPs to its own node (NIC loopback), so local records
    /// can be accessed with NIC atomics like remote ones (DrTM+H Sec. 5.2).
    pub loopback: bool,
    /// Extra one-way delay from node i to node j at `[i * nodes + j]`, picoseconds (long-haul
    /// links between data centers); empty for none.
    pub link_delay_ps: Vec<u64>,
    /// Data centers and the links between them (`crate::wan`); `None`: one data center.
    pub wan: Option<Wan>,
    /// Re-establish an RC connection this long after a network fault broke it (a QP gave up
    /// with `RetryExceeded` between two live nodes: the connection manager's exchange, then
    /// the QPs' transitions), and again each time the peer is still out of reach; `None`:
    /// a broken QP stays broken, as with bare verbs.
    pub reconnect_ns: Option<u64>,
}

impl SimConfig {
    pub fn new(nodes: u16, workers: u16, profile: NicProfile, seed: u64) -> Self {
        let r = &profile.reliability;
        let rpc = RpcConfig {
            mtu: profile.mtu,
            timeout_ns: r.rpc_rto_initial_ns,
            rto_min_ns: r.rpc_rto_min_ns,
            rto_max_ns: r.rpc_rto_max_ns,
            ..RpcConfig::default()
        };
        SimConfig {
            nodes,
            workers,
            qps_per_node: 1,
            profile,
            seed,
            max_coroutines: 32,
            scratch_per_coroutine: 8192,
            rpc,
            loopback: false,
            link_delay_ps: Vec::new(),
            wan: None,
            reconnect_ns: None,
        }
    }
}

/// Why a [`SimConfig`] cannot build a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `nodes`, `workers` or `qps_per_node` is zero.
    Empty,
    /// `link_delay_ps` is neither empty nor one entry per ordered pair of nodes.
    LinkDelays { entries: usize, pairs: usize },
    /// `wan` does not fit the cluster (a node without a data center, a missing link).
    Wan(String),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Empty => f.write_str("nodes, workers and qps_per_node must each be at least 1"),
            ConfigError::LinkDelays { entries, pairs } => {
                write!(f, "link_delay_ps has {entries} entries, not nodes x nodes = {pairs}")
            }
            ConfigError::Wan(m) => write!(f, "wan: {m}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Callers that report errors as text can use `?`.
impl From<ConfigError> for String {
    fn from(e: ConfigError) -> String {
        e.to_string()
    }
}

/// Counters of the whole simulation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Requests by opcode (index = `Opcode as usize`).
    pub verbs: [u64; 7],
    pub wire_bytes: u64,
    pub doorbells: u64,
    pub qp_cache_misses: u64,
    pub qp_cache_lookups: u64,
    pub ud_dropped: u64,
    pub torn_lines: u64,
    /// Messages (requests and responses) that crossed a link between data centers.
    pub wan_messages: u64,
    /// Datagrams lost on a link between data centers (RDMA transport).
    pub wan_lost: u64,
    /// Transmissions a reliable transport (RC, TCP) repeated on such a link.
    pub wan_retransmits: u64,
    /// Messages a partition or a link fault lost (UD datagrams gone; RC transmissions the NIC
    /// repeated).
    pub fault_lost: u64,
    /// Datagrams a link fault delivered twice.
    pub fault_duplicated: u64,
    /// RC requests that gave up (retry budget spent) because of a partition or link fault.
    pub fault_gave_up: u64,
}

#[derive(Copy, Clone, Debug)]
enum Ev {
    Wake {
        node: u16,
        worker: u16,
        gen: u32,
    },
    Doorbell {
        db: u32,
    },
    /// The NIC finished DMA-fetching a batch of WQEs.
    Fetched {
        db: u32,
    },
    /// A packet is ready to leave its NIC: reserve the link and the switch port now, in time
    /// order, then schedule its arrival. `response` selects the direction.
    Depart {
        op: u32,
        response: bool,
    },
    ReqArrive {
        op: u32,
    },
    RespArrive {
        op: u32,
    },
    AtomicCommit {
        op: u32,
    },
    Deliver {
        op: u32,
    },
    Kill {
        node: u16,
    },
    /// A TCP-like inter-DC message costs the receiving worker CPU time.
    Charge {
        node: u16,
        worker: u16,
        ns: u32,
    },
    /// Re-establish the RC connection of worker `worker`'s `k`-th QP between `a` and `b`,
    /// if both are still the incarnations `inc_a`, `inc_b`.
    Reconnect {
        a: u16,
        b: u16,
        worker: u16,
        k: u16,
        inc_a: u32,
        inc_b: u32,
    },
}

/// Host memory the simulator keeps per QP: its state here, the worker's, and its entry in each
/// of the node's `nics` QP caches (`Lru`: prev, next, present). For memory estimates.
pub fn qp_bytes(nics: u32) -> u64 {
    std::mem::size_of::<SimQp>() as u64 + txbed_transport::worker::QP_STATE_BYTES + nics as u64 * 9
}

/// Exact LRU over QP indices of one node (intrusive doubly linked list).
struct Lru {
    cap: u32,
    len: u32,
    head: u32,
    tail: u32,
    prev: Vec<u32>,
    next: Vec<u32>,
    present: Vec<bool>,
}

const NIL: u32 = u32::MAX;

impl Lru {
    fn new(cap: u32, keys: usize) -> Self {
        // A miss evicts the tail, so a full cache must have one.
        assert!(cap >= 1, "QP cache of no entries");
        Lru {
            cap,
            len: 0,
            head: NIL,
            tail: NIL,
            prev: vec![NIL; keys],
            next: vec![NIL; keys],
            present: vec![false; keys],
        }
    }
    fn unlink(&mut self, k: u32) {
        let (p, n) = (self.prev[k as usize], self.next[k as usize]);
        if p != NIL {
            self.next[p as usize] = n
        } else {
            self.head = n
        }
        if n != NIL {
            self.prev[n as usize] = p
        } else {
            self.tail = p
        }
    }
    fn push_front(&mut self, k: u32) {
        self.prev[k as usize] = NIL;
        self.next[k as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = k
        } else {
            self.tail = k
        }
        self.head = k;
    }
    /// Makes room for keys up to `keys` (QPs created after the cluster was built).
    fn grow(&mut self, keys: usize) {
        if self.present.len() < keys {
            self.prev.resize(keys, NIL);
            self.next.resize(keys, NIL);
            self.present.resize(keys, false);
        }
    }

    /// Uses `k`; returns whether it was cached.
    fn touch(&mut self, k: u32) -> bool {
        if self.present[k as usize] {
            if self.head != k {
                self.unlink(k);
                self.push_front(k);
            }
            return true;
        }
        if self.len == self.cap {
            let victim = self.tail;
            self.unlink(victim);
            self.present[victim as usize] = false;
            self.len -= 1;
        }
        self.present[k as usize] = true;
        self.len += 1;
        debug_assert!(self.len <= self.cap);
        self.push_front(k);
        false
    }
}

struct Nic {
    /// When the processing-unit pool is next free (fluid model of `units` parallel units).
    pu_free: u64,
    /// Link out of this NIC, and the switch port into it.
    tx_free: u64,
    port_free: u64,
    /// PCIe bandwidth for the NIC's DMA reads of host memory (WQE batches, payloads).
    pcie_rd_free: u64,
    qp_cache: Lru,
    /// Words with a NIC atomic between its read and write (HCA), and until when.
    atomic_busy: Vec<(u64, u64)>,
}

struct SimQp {
    worker: u16,
    /// The NIC of the owning worker (copied here: most events need it and the QP is at hand).
    nic: u8,
    kind: QpType,
    peer_node: u16,
    /// Index of the connected QP at the peer (RC), unused for UD.
    peer_qp: u32,
    core_qp: QpId,
    /// No new request may start (an error happened or was detected at post).
    error: bool,
    /// The first error completion was delivered; later completions are flushed.
    error_reported: bool,
    /// Requester side: WQEs of this QP start processing, and leave, in posting order.
    issue_order: u64,
    tx_order: u64,
    /// Responder side: requests after an atomic wait for its write (per-QP FIFO).
    ordered_after: u64,
    /// Responder side: responses leave in request order.
    resp_order: u64,
    /// Requester side: completions are delivered in order.
    last_completion: u64,
    /// Requester side: requests posted so far (the next one's `InFlight::seq` is one more).
    posted: u64,
    /// Responder side (RC): `seq` of the last request executed, to assert per-QP FIFO.
    executed: u64,
    /// Responder side: requests deferred behind an atomic, in arrival order; only the head
    /// has an event scheduled, later arrivals queue behind it (per-QP FIFO).
    waiting: std::collections::VecDeque<u32>,
    /// Sender side (RC over an inter-DC RDMA link): when its last packet reached the far DC;
    /// a later one may not overtake it.
    wan_order: u64,
    /// The connection is gone (its peer restarted, or it was replaced after an error): new
    /// requests on it are flushed, and requests reaching it are never acknowledged.
    dead: bool,
    /// Sender side, with network faults in force: when its last packet arrived (a link
    /// fault's delay must not let a later packet overtake it: RC keeps order).
    fault_order: u64,
}

struct Worker {
    core: WorkerCore,
    nic: u8,
    busy_until: u64,
    wake_at: Option<u64>,
    gen: u32,
    /// Worker QP id -> node QP index.
    qps: Vec<u32>,
    ud_qp: u32,
}

struct Node {
    alive: bool,
    /// The RC QP in use per (worker, peer, k), at `(w * nodes + peer) * k + kk`.
    rc_index: Vec<u32>,
    /// Incarnation: grows at every restart. Messages carry the incarnations they were sent
    /// from and to; one from or to an incarnation that is gone is dropped.
    inc: u32,
    /// The membership declared this incarnation down: messages from it are fenced off.
    declared_down: bool,
    mem: Rc<NodeMemory>,
    nics: Vec<Nic>,
    workers: Vec<Worker>,
    qps: Vec<SimQp>,
    scratch: MemoryRegion,
    /// The CPU profile HTM is modelled with (`Sim::enable_htm`): a restart gives the node a
    /// fresh tracker (a crash ends every open region).
    htm: Option<crate::cpu::CpuProfile>,
}

struct InFlight {
    src: u16,
    src_qp: u32,
    /// Position in its QP's posting order (1-based).
    seq: u64,
    dst: u16,
    dst_qp: u32,
    wr: WorkRequest,
    data: Vec<u8>,
    status: WcStatus,
    sent_ps: u64,
    /// READ whose lines are being sampled at the responder.
    tracked_read: bool,
    atomic_new: Option<u64>,
    /// Events still referring to this slot.
    refs: u8,
    /// Target worker of a SEND or WRITE_WITH_IMM delivery.
    dst_worker: u16,
    /// Precise (picosecond) time the next departure is ready, and its wire bytes.
    depart_ps: u64,
    wire: u64,
    /// Response payload bytes DMA-written at the requester (READ data).
    resp_payload: u32,
    dropped: bool,
    /// Incarnations of the requester and the responder when the request started.
    src_inc: u32,
    dst_inc: u32,
}

impl Default for InFlight {
    /// An idle slot; `start_request` overwrites every field.
    fn default() -> Self {
        let none = LocalBuf { lkey: 0, addr: 0, len: 0 };
        InFlight {
            src: 0,
            src_qp: 0,
            seq: 0,
            dst: 0,
            dst_qp: 0,
            wr: WorkRequest { wr_id: 0, op: Op::Send { src: Payload::Local(none), dest: None }, signaled: false },
            data: Vec::new(),
            status: WcStatus::Success,
            sent_ps: 0,
            tracked_read: false,
            atomic_new: None,
            refs: 0,
            dst_worker: 0,
            depart_ps: 0,
            wire: 0,
            resp_payload: 0,
            dropped: false,
            src_inc: 0,
            dst_inc: 0,
        }
    }
}

struct PendingDoorbell {
    node: u16,
    worker: u16,
    /// The node's incarnation when the worker rang it.
    inc: u32,
    db: Doorbell,
}

/// A deterministic simulated RDMA cluster.
pub struct Sim {
    q: EventQueue<Ev>,
    m: NicModel,
    clock_ps: Rc<Cell<u64>>,
    rng: ChaCha8Rng,
    nodes: Vec<Node>,
    ops: Vec<InFlight>,
    free_ops: Vec<u32>,
    dbs: Vec<Option<PendingDoorbell>>,
    free_dbs: Vec<u32>,
    drained: Vec<Doorbell>,
    /// Fetched doorbells' emptied work-request lists, on their way back to the workers.
    spare_wrs: Vec<Vec<WorkRequest>>,
    stats: SimStats,
    cfg: SimConfig,
    /// Inter-DC links: when each (DC a -> DC b) link is next free, at `[a * dcs + b]`.
    wan_free: Vec<u64>,
    /// TCP-like links: when the last message of each (node i -> node j) connection reached
    /// the far DC, at `[i * nodes + j]`.
    wan_conn_order: Vec<u64>,
    /// Inter-DC draws (delay, jitter, loss): a stream of their own, so runs without data
    /// centers draw exactly as before.
    wan_rng: ChaCha8Rng,
    /// Partitions, link faults and CPU slow-downs in force (`crate::faults`).
    net: NetFaults,
    /// Link-fault draws: a stream of their own, as `wan_rng`.
    fault_rng: ChaCha8Rng,
    /// Node clocks (`crate::clock`), once enabled; `None`: every clock is ideal.
    pub(crate) clocks: Option<Box<crate::clock::SimClocks>>,
}

/// What the network faults in force do to one packet (`Sim::fault_leg`).
enum Leg {
    Lost,
    GaveUp,
    /// Delivered this much later than without faults, ps.
    Late(u64),
}

/// How a packet fares on its way.
enum Arrival {
    /// Its last bit arrives then, ps.
    At(u64),
    /// A datagram lost on the way (UD: gone).
    Lost,
    /// A reliable transport spent its retry budget: the requester gives up at `at` (ps).
    GaveUp(u64),
}

fn ceil_ns(ps: u64) -> u64 {
    ps.div_ceil(1000)
}

fn class(op: &Op) -> VerbClass {
    match op {
        Op::Read { .. } => VerbClass::Read,
        Op::Write { .. } | Op::WriteImm { .. } => VerbClass::Write,
        Op::Cas { .. } | Op::Faa { .. } => VerbClass::Atomic,
        Op::Send { .. } => VerbClass::Send,
    }
}

/// Transport headers of the request packet and of the response.
fn request_headers(op: &Op) -> u32 {
    match op {
        Op::Read { .. } => h::BTH + h::RETH,
        Op::Write { .. } => h::BTH + h::RETH,
        Op::WriteImm { .. } => h::BTH + h::RETH + h::IMM,
        Op::Cas { .. } | Op::Faa { .. } => h::BTH + h::ATOMIC_ETH,
        Op::Send { dest: Some(_), .. } => h::BTH + h::DETH,
        Op::Send { dest: None, .. } => h::BTH,
    }
}

/// The checks a requester NIC makes before sending anything: the verb is supported by the QP
/// type, local buffers lie in regions registered with their lkey, payloads fit (inline limit,
/// UD MTU).
fn local_status(op: &Op, kind: QpType, mem: &NodeMemory, m: &NicModel) -> WcStatus {
    if kind == QpType::Ud && !matches!(op, Op::Send { .. }) {
        return WcStatus::LocalQpOperationError;
    }
    match op {
        Op::Read { local, remote } if local.len < remote.len => WcStatus::LocalLengthError,
        Op::Read { local, .. } | Op::Cas { local, .. } | Op::Faa { local, .. }
            if !mem.check_local(local.lkey, local.addr, local.len as u64) =>
        {
            WcStatus::LocalProtectionError
        }
        Op::Cas { local, .. } | Op::Faa { local, .. } if local.len < 8 => WcStatus::LocalLengthError,
        Op::Write { src, .. } | Op::WriteImm { src, .. } | Op::Send { src, .. } => match src {
            Payload::Inline(b) if b.len() as u32 > m.max_inline && kind == QpType::Rc => WcStatus::LocalLengthError,
            Payload::Local(l) if !mem.check_local(l.lkey, l.addr, l.len as u64) => WcStatus::LocalProtectionError,
            _ if kind == QpType::Ud && src.len() > m.mtu => WcStatus::LocalLengthError,
            _ => WcStatus::Success,
        },
        _ => WcStatus::Success,
    }
}

/// A response the responder NIC sends: when it is ready, its payload, its headers.
struct Response {
    ready_ps: u64,
    payload: u32,
    headers: u32,
}

impl Sim {
    pub fn new(cfg: SimConfig) -> Result<Sim, ConfigError> {
        if cfg.nodes == 0 || cfg.workers == 0 || cfg.qps_per_node == 0 {
            return Err(ConfigError::Empty);
        }
        let pairs = cfg.nodes as usize * cfg.nodes as usize;
        if !cfg.link_delay_ps.is_empty() && cfg.link_delay_ps.len() != pairs {
            return Err(ConfigError::LinkDelays { entries: cfg.link_delay_ps.len(), pairs });
        }
        if let Some(w) = &cfg.wan {
            if w.dc_of.len() != cfg.nodes as usize || w.dc_of.iter().any(|&d| d >= w.dcs) {
                return Err(ConfigError::Wan(format!(
                    "dc_of must name one of {} DCs for each of {} nodes",
                    w.dcs, cfg.nodes
                )));
            }
            if w.links.len() != w.dcs as usize * w.dcs as usize {
                return Err(ConfigError::Wan(format!(
                    "{} links, not dcs x dcs = {}",
                    w.links.len(),
                    w.dcs as usize * w.dcs as usize
                )));
            }
        }
        let m = NicModel::new(&cfg.profile);
        let clock_ps = Rc::new(Cell::new(0));
        let nn = cfg.nodes as usize;
        let nics = m.nics_per_node as usize;
        let mut nodes = Vec::with_capacity(nn);
        let rpc = RpcConfig { mtu: m.mtu, ..cfg.rpc.clone() };
        for n in 0..nn {
            let mem = Rc::new(NodeMemory::new(clock_ps.clone()));
            let per_worker = cfg.max_coroutines as u64 * cfg.scratch_per_coroutine as u64;
            let scratch = mem.register(per_worker * cfg.workers as u64, rkey_for(n as u16, 0), lkey_for(n as u16, 0));
            let workers = (0..cfg.workers).map(|w| new_worker(&cfg, &m, &rpc, n as u16, w, &mem, scratch, 0)).collect();
            let node = Node {
                alive: true,
                rc_index: Vec::new(),
                inc: 0,
                declared_down: false,
                mem,
                nics: Vec::new(),
                workers,
                qps: Vec::new(),
                scratch,
                htm: None,
            };
            nodes.push(node);
        }
        // QPs: worker w of node a has K RC QPs to every other node, connected to worker w's
        // k-th QP of that node; plus one UD QP.
        let k = cfg.qps_per_node as u32;
        let idx = |w: usize, b: usize, kk: u32| -> u32 {
            // Node-local QP index layout: per worker, UD first then RC by (peer, k).
            ((w * (1 + nn * k as usize)) + 1 + b * k as usize + kk as usize) as u32
        };
        for a in 0..nn {
            for w in 0..cfg.workers as usize {
                let sq = m.send_queue_depth;
                let base = w * (1 + nn * k as usize);
                let wnic = nodes[a].workers[w].nic;
                let core_ud = nodes[a].workers[w].core.add_qp(QpType::Ud, NodeId(a as u16), sq);
                debug_assert_eq!(nodes[a].qps.len(), base);
                nodes[a].qps.push(SimQp::new(w as u16, wnic, QpType::Ud, a as u16, 0, core_ud));
                nodes[a].workers[w].ud_qp = base as u32;
                nodes[a].workers[w].qps.push(base as u32);
                for b in 0..nn {
                    for kk in 0..k {
                        // Slots for b == a exist so indices are regular; used with `loopback`.
                        let core = if b != a || cfg.loopback {
                            let id = nodes[a].workers[w].core.add_qp(QpType::Rc, NodeId(b as u16), sq);
                            nodes[a].workers[w].qps.push(idx(w, b, kk));
                            id
                        } else {
                            QpId(u32::MAX)
                        };
                        nodes[a].qps.push(SimQp::new(w as u16, wnic, QpType::Rc, b as u16, idx(w, a, kk), core));
                        nodes[a].rc_index.push(idx(w, b, kk));
                    }
                }
            }
            let nq = nodes[a].qps.len();
            for _ in 0..nics {
                nodes[a].nics.push(Nic {
                    pu_free: 0,
                    tx_free: 0,
                    port_free: 0,
                    pcie_rd_free: 0,
                    qp_cache: Lru::new(m.qp_cache_entries, nq),
                    atomic_busy: Vec::new(),
                });
            }
        }
        Ok(Sim {
            q: EventQueue::new(),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x05ee_d0ff_ab1c),
            m,
            clock_ps,
            nodes,
            ops: Vec::new(),
            free_ops: Vec::new(),
            dbs: Vec::new(),
            free_dbs: Vec::new(),
            drained: Vec::new(),
            spare_wrs: Vec::new(),
            stats: SimStats::default(),
            wan_free: vec![0; cfg.wan.as_ref().map_or(0, |w| w.links.len())],
            wan_conn_order: if cfg.wan.is_some() { vec![0; nn * nn] } else { Vec::new() },
            wan_rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x3a4e_d1a7),
            net: NetFaults::default(),
            fault_rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xfa17_0017),
            clocks: None,
            cfg,
        })
    }

    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }
    pub fn model(&self) -> &NicModel {
        &self.m
    }
    pub fn now(&self) -> Nanos {
        self.q.now()
    }
    pub fn digest(&self) -> u64 {
        self.q.digest()
    }
    pub fn events(&self) -> u64 {
        self.q.processed()
    }
    pub fn stats(&self) -> SimStats {
        let mut s = self.stats.clone();
        s.torn_lines = self.nodes.iter().map(|n| n.mem.torn_saves.get()).sum();
        s
    }
    pub fn nodes(&self) -> u16 {
        self.cfg.nodes
    }
    pub fn workers(&self) -> u16 {
        self.cfg.workers
    }

    /// Registers an extra region of `len` bytes on `node` (e.g. the store).
    pub fn register_region(&mut self, node: u16, len: u64) -> MemoryRegion {
        let n = &self.nodes[node as usize];
        let i = n.mem.regions().len() as u16;
        n.mem.register(len, rkey_for(node, i), lkey_for(node, i))
    }

    pub fn memory(&self, node: u16) -> Rc<NodeMemory> {
        self.nodes[node as usize].mem.clone()
    }

    /// Models HTM on every node with `cpu`'s profile (`transport::htm`): one tracker per node, shared by its
    /// workers' CPUs (`Ctx::htm_region`, and their plain accesses) and its NIC, which shows it
    /// every one-sided access at its simulated time. Returns the trackers, by node.
    pub fn enable_htm(&mut self, cpu: &crate::cpu::CpuProfile) -> Vec<txbed_transport::htm::SharedHtm> {
        let workers = self.cfg.workers;
        self.nodes
            .iter_mut()
            .map(|n| {
                n.htm = Some(cpu.clone());
                install_htm(n, cpu, workers)
            })
            .collect()
    }

    pub fn scratch_region(&self, node: u16) -> MemoryRegion {
        self.nodes[node as usize].scratch
    }

    pub fn worker(&mut self, node: u16, worker: u16) -> &mut WorkerCore {
        &mut self.nodes[node as usize].workers[worker as usize].core
    }

    pub fn worker_stats(&self) -> WorkerStats {
        let mut t = WorkerStats::default();
        for n in &self.nodes {
            for w in &n.workers {
                let s = w.core.stats();
                t.doorbells += s.doorbells;
                t.wrs_posted += s.wrs_posted;
                t.completions_polled += s.completions_polled;
                t.rpc_calls += s.rpc_calls;
                t.rpc_handled += s.rpc_handled;
                t.local_calls += s.local_calls;
                t.rpc_retransmits += s.rpc_retransmits;
                t.rpc_timeouts += s.rpc_timeouts;
                t.datagrams_sent += s.datagrams_sent;
                t.datagrams_received += s.datagrams_received;
                t.coroutine_switches += s.coroutine_switches;
                t.cpu_busy_ns += s.cpu_busy_ns;
            }
        }
        t
    }

    /// Starts a coroutine on a worker.
    pub fn spawn<F, Fut>(&mut self, node: u16, worker: u16, f: F)
    where
        F: FnOnce(Ctx) -> Fut,
        Fut: Future<Output = ()> + 'static,
    {
        self.nodes[node as usize].workers[worker as usize].core.spawn(f);
        let now = self.q.now();
        self.ensure_wake(node, worker, now);
    }

    /// Kills `node` at time `at`: its CPUs stop and its NIC stops answering.
    pub fn kill_node_at(&mut self, node: u16, at: Nanos) {
        self.q.schedule(at, Ev::Kill { node });
    }

    pub fn is_alive(&self, node: u16) -> bool {
        self.nodes[node as usize].alive
    }

    /// `node`'s incarnation (0, then one more at each restart).
    pub fn incarnation(&self, node: u16) -> u32 {
        self.nodes[node as usize].inc
    }

    /// Crashes `node` now: its CPUs and NIC stop at once (requests to it are never answered,
    /// datagrams to it vanish). Its memory is left as it was: what survives is the caller's
    /// to decide (`memory`).
    pub fn crash(&mut self, node: u16) {
        self.q.record(7, node as u64, self.nodes[node as usize].inc as u64);
        self.nodes[node as usize].alive = false;
    }

    /// The membership declared crashed `node` down: from now on nothing its dead incarnation
    /// sent is delivered (fencing; what arrived before is kept).
    pub fn declare_down(&mut self, node: u16) {
        assert!(!self.nodes[node as usize].alive, "node {node} declared down while running");
        self.q.record(11, node as u64, self.nodes[node as usize].inc as u64);
        self.nodes[node as usize].declared_down = true;
    }

    /// Gives every worker of the cluster the membership view `v` (the simulator's membership
    /// service delivers it to all at once), and lets the workers whose calls it failed run.
    pub fn set_view(&mut self, v: &View) {
        self.q.record(12, v.epoch, 0);
        let now = self.q.now();
        for n in 0..self.cfg.nodes {
            for w in 0..self.cfg.workers {
                let wk = &mut self.nodes[n as usize].workers[w as usize];
                wk.core.set_view(v);
                if self.nodes[n as usize].alive && self.nodes[n as usize].workers[w as usize].core.has_work() {
                    self.ensure_wake(n, w, now);
                }
            }
        }
    }

    /// Restarts crashed `node` now, as a new incarnation: fresh workers (cores without
    /// coroutines, handlers or state: the caller registers and spawns them), fresh NICs,
    /// and new RC connections to every other node (the old ones, there and here, are dead:
    /// what is posted on them is flushed, what reaches them is never acknowledged).
    /// Memory is left as it is (`memory`): the caller restores what did not survive.
    pub fn restart(&mut self, node: u16) {
        let a = node as usize;
        assert!(!self.nodes[a].alive, "node {node} restarted while running");
        let (nn, k, workers) = (self.cfg.nodes as usize, self.cfg.qps_per_node as usize, self.cfg.workers);
        self.q.record(10, node as u64, self.nodes[a].inc as u64 + 1);
        for q in &mut self.nodes[a].qps {
            q.dead = true;
            q.error = true;
        }
        for b in (0..nn).filter(|&b| b != a) {
            for w in 0..workers as usize {
                for kk in 0..k {
                    let old = self.nodes[b].rc_index[(w * nn + a) * k + kk] as usize;
                    self.nodes[b].qps[old].dead = true;
                    self.nodes[b].qps[old].error = true;
                }
            }
        }
        let rpc = RpcConfig { mtu: self.m.mtu, ..self.cfg.rpc.clone() };
        let (mem, scratch) = (self.nodes[a].mem.clone(), self.nodes[a].scratch);
        let inc = self.nodes[a].inc + 1;
        let mut fresh: Vec<Worker> =
            (0..workers).map(|w| new_worker(&self.cfg, &self.m, &rpc, node, w, &mem, scratch, inc)).collect();
        // Wake-ups the old workers still have scheduled must not match the new ones.
        for (w, old) in fresh.iter_mut().zip(&self.nodes[a].workers) {
            w.gen = old.gen.wrapping_add(1);
        }
        let now_ps = self.q.now() * 1000;
        {
            let n = &mut self.nodes[a];
            n.workers = fresh;
            if let Some(cpu) = n.htm.clone() {
                install_htm(n, &cpu, workers);
            }
            n.alive = true;
            n.inc += 1;
            n.declared_down = false;
            for nic in &mut n.nics {
                nic.pu_free = now_ps;
                nic.tx_free = now_ps;
                nic.port_free = now_ps;
                nic.pcie_rd_free = now_ps;
                nic.atomic_busy.clear();
            }
        }
        let sq = self.m.send_queue_depth;
        for w in 0..workers {
            let wnic = self.nodes[a].workers[w as usize].nic;
            let core_ud = self.nodes[a].workers[w as usize].core.add_qp(QpType::Ud, NodeId(node), sq);
            let ud = self.nodes[a].qps.len() as u32;
            self.nodes[a].qps.push(SimQp::new(w, wnic, QpType::Ud, node, 0, core_ud));
            self.nodes[a].workers[w as usize].ud_qp = ud;
            self.nodes[a].workers[w as usize].qps.push(ud);
            for b in 0..nn {
                for kk in 0..k {
                    let slot = (w as usize * nn + b) * k + kk;
                    if b == a {
                        if self.cfg.loopback {
                            let core = self.nodes[a].workers[w as usize].core.add_qp(QpType::Rc, NodeId(node), sq);
                            let i = self.nodes[a].qps.len() as u32;
                            self.nodes[a].qps.push(SimQp::new(w, wnic, QpType::Rc, node, i, core));
                            self.nodes[a].workers[w as usize].qps.push(i);
                            self.nodes[a].rc_index[slot] = i;
                        }
                        continue;
                    }
                    let core = self.nodes[a].workers[w as usize].core.add_qp(QpType::Rc, NodeId(b as u16), sq);
                    let i = self.nodes[a].qps.len() as u32;
                    self.nodes[a].qps.push(SimQp::new(w, wnic, QpType::Rc, b as u16, 0, core));
                    self.nodes[a].workers[w as usize].qps.push(i);
                    self.nodes[a].rc_index[slot] = i;
                    let j = self.new_peer_qp(b as u16, w, node, kk as u16, i);
                    self.nodes[a].qps[i as usize].peer_qp = j;
                }
            }
        }
        self.grow_qp_caches();
        self.restart_clock(node);
    }

    /// A new QP at `b` for worker `w`'s `kk`-th connection to `a`, connected to `a`'s QP
    /// `peer_qp`; `b`'s core swaps it in for the old one. Returns its index at `b`.
    fn new_peer_qp(&mut self, b: u16, w: u16, a: u16, kk: u16, peer_qp: u32) -> u32 {
        let (nn, k) = (self.cfg.nodes as usize, self.cfg.qps_per_node as usize);
        let slot = (w as usize * nn + a as usize) * k + kk as usize;
        let nb = &mut self.nodes[b as usize];
        let old = nb.rc_index[slot] as usize;
        let j = nb.qps.len() as u32;
        let wk = &mut nb.workers[w as usize];
        let core = wk.core.replace_qp(nb.qps[old].core_qp).expect("an RC QP of the core");
        debug_assert_eq!(core.0 as usize, wk.qps.len(), "core and simulator QP tables in step");
        wk.qps.push(j);
        let wnic = wk.nic;
        nb.qps.push(SimQp::new(w, wnic, QpType::Rc, a, peer_qp, core));
        nb.rc_index[slot] = j;
        j
    }

    fn grow_qp_caches(&mut self) {
        for n in &mut self.nodes {
            let keys = n.qps.len();
            for nic in &mut n.nics {
                nic.qp_cache.grow(keys);
            }
        }
    }

    /// Re-establishes worker `w`'s `kk`-th RC connection between live nodes `a` and `b`
    /// (a fault broke it): new QPs at both ends, the old ones dead.
    fn reconnect(&mut self, a: u16, b: u16, w: u16, kk: u16) {
        let (nn, k) = (self.cfg.nodes as usize, self.cfg.qps_per_node as usize);
        self.q.record(13, ((a as u64) << 32) | ((b as u64) << 16) | w as u64, kk as u64);
        for (x, y) in [(a, b), (b, a)] {
            let old = self.nodes[x as usize].rc_index[(w as usize * nn + y as usize) * k + kk as usize] as usize;
            self.nodes[x as usize].qps[old].dead = true;
            self.nodes[x as usize].qps[old].error = true;
        }
        let i = self.nodes[a as usize].qps.len() as u32;
        // `a`'s side first (its peer index is filled in once `b`'s exists).
        let ia = self.new_peer_qp(a, w, b, kk, 0);
        debug_assert_eq!(ia, i);
        let ib = self.new_peer_qp(b, w, a, kk, ia);
        self.nodes[a as usize].qps[ia as usize].peer_qp = ib;
        self.grow_qp_caches();
    }

    /// A request on `a`'s QP `qp` to `b` gave up (`RetryExceeded`): with reconnection on,
    /// the connection is re-established `reconnect_ns` later if both ends are still there.
    fn schedule_reconnect(&mut self, a: u16, qp: u32) {
        let Some(after) = self.cfg.reconnect_ns else { return };
        let q = &self.nodes[a as usize].qps[qp as usize];
        if q.kind != QpType::Rc || q.dead || q.peer_node == a {
            return;
        }
        let (b, w) = (q.peer_node, q.worker);
        let (nn, k) = (self.cfg.nodes as usize, self.cfg.qps_per_node as usize);
        let Some(kk) =
            (0..k).find(|&kk| self.nodes[a as usize].rc_index[(w as usize * nn + b as usize) * k + kk] == qp)
        else {
            return;
        };
        let (inc_a, inc_b) = (self.nodes[a as usize].inc, self.nodes[b as usize].inc);
        let at = self.q.now() + after;
        self.q.schedule(at, Ev::Reconnect { a, b, worker: w, k: kk as u16, inc_a, inc_b });
    }

    fn on_reconnect(&mut self, a: u16, b: u16, w: u16, kk: u16, inc_a: u32, inc_b: u32) {
        let (na, nb) = (&self.nodes[a as usize], &self.nodes[b as usize]);
        if !na.alive || !nb.alive || na.inc != inc_a || nb.inc != inc_b {
            return; // a restart connects everything anew
        }
        let (nn, k) = (self.cfg.nodes as usize, self.cfg.qps_per_node as usize);
        let cur = na.rc_index[(w as usize * nn + b as usize) * k + kk as usize] as usize;
        if !na.qps[cur].error {
            return; // already re-established
        }
        let now = self.q.now();
        if self.net.cut(a, b, now) || self.net.cut(b, a, now) {
            // The connection manager's exchange cannot get through yet: try again later.
            let after = self.cfg.reconnect_ns.unwrap_or(0).max(1);
            self.q.schedule(now + after, Ev::Reconnect { a, b, worker: w, k: kk, inc_a, inc_b });
            return;
        }
        self.reconnect(a, b, w, kk);
    }

    /// Cuts the network between `a` and `b` now, for `for_ns` (one way: only `a` to `b`).
    pub fn partition(&mut self, a: &[u16], b: &[u16], one_way: bool, for_ns: u64) {
        let now = self.q.now();
        self.q.record(14, a.len() as u64 * 1000 + b.len() as u64, for_ns);
        self.net.partition(self.cfg.nodes, a, b, one_way, now, for_ns);
    }

    /// A link fault on `from -> to` (and back with `both_ways`), now, for `for_ns`.
    pub fn link_fault(&mut self, from: u16, to: u16, both_ways: bool, for_ns: u64, e: LinkParams) {
        let now = self.q.now();
        self.q.record(15, ((from as u64) << 16) | to as u64, for_ns);
        self.net.link(from, to, both_ways, now, for_ns, e);
    }

    /// `node`'s CPUs take `factor` times as long, now, for `for_ns`.
    pub fn slow_cpu(&mut self, node: u16, factor: f64, for_ns: u64) {
        let now = self.q.now();
        self.q.record(16, node as u64, for_ns);
        self.net.slow_cpu(node, factor, now, for_ns);
    }

    /// Runs every event up to and including time `until`.
    pub fn run_until(&mut self, until: Nanos) {
        while let Some(ev) = self.q.pop_until(until) {
            self.clock_ps.set(self.q.now() * 1000);
            self.dispatch(ev);
        }
        self.q.advance_to(until);
        self.clock_ps.set(self.q.now() * 1000);
    }

    /// Runs until no event is left or `limit` is reached; returns whether it went idle.
    /// Runs until no event is left (time stays at the last event) or `limit` is reached;
    /// returns whether it went idle.
    pub fn run_to_idle(&mut self, limit: Nanos) -> bool {
        while let Some(ev) = self.q.pop_until(limit) {
            self.clock_ps.set(self.q.now() * 1000);
            self.dispatch(ev);
        }
        if !self.q.is_empty() {
            self.q.advance_to(limit);
            self.clock_ps.set(self.q.now() * 1000);
        }
        self.q.is_empty()
    }

    fn ensure_wake(&mut self, node: u16, worker: u16, t: Nanos) {
        let w = &mut self.nodes[node as usize].workers[worker as usize];
        // Not before the CPU is free. Callers never ask for a past time (`schedule` asserts).
        let t = t.max(w.busy_until);
        if w.wake_at.is_some_and(|x| x <= t) {
            return;
        }
        w.gen = w.gen.wrapping_add(1);
        w.wake_at = Some(t);
        let gen = w.gen;
        // The new generation voids the worker's earlier wake-up: keyed, a far one (an RPC
        // deadline, pushed back at nearly every step) leaves the queue instead of waiting there.
        let key = node as usize * self.cfg.workers as usize + worker as usize;
        self.q.schedule_keyed(key, t, Ev::Wake { node, worker, gen });
    }

    fn dispatch(&mut self, ev: Ev) {
        if let Ev::Depart { op, .. }
        | Ev::ReqArrive { op }
        | Ev::RespArrive { op }
        | Ev::AtomicCommit { op }
        | Ev::Deliver { op } = ev
        {
            debug_assert!(self.ops[op as usize].refs > 0, "event for a released in-flight slot");
        }
        match ev {
            Ev::Wake { node, worker, gen } => self.on_wake(node, worker, gen),
            Ev::Doorbell { db } => self.on_doorbell(db),
            Ev::Fetched { db } => self.on_fetched(db),
            Ev::Depart { op, response } => self.on_depart(op, response),
            Ev::ReqArrive { op } => self.on_request(op),
            Ev::RespArrive { op } => self.on_response(op),
            Ev::AtomicCommit { op } => self.on_atomic_commit(op),
            Ev::Deliver { op } => self.on_deliver(op),
            Ev::Kill { node } => {
                self.q.record(7, node as u64, 0);
                self.nodes[node as usize].alive = false;
            }
            Ev::Charge { node, worker, ns } => {
                self.q.record(9, ((node as u64) << 16) | worker as u64, ns as u64);
                let now = self.q.now();
                self.charge_cpu(node, worker, now, ns as u64);
            }
            Ev::Reconnect { a, b, worker, k, inc_a, inc_b } => self.on_reconnect(a, b, worker, k, inc_a, inc_b),
        }
    }

    /// Makes `worker` of `node` busy for `ns` more from `from` (or from when it is next
    /// free), moving a wake-up that falls inside that time to its end.
    fn charge_cpu(&mut self, node: u16, worker: u16, from: Nanos, ns: u64) {
        if !self.nodes[node as usize].alive {
            return;
        }
        let ns = self.net.cpu_ns(node, from, ns);
        let w = &mut self.nodes[node as usize].workers[worker as usize];
        w.busy_until = w.busy_until.max(from) + ns;
        if w.wake_at.is_some_and(|t| t < w.busy_until) {
            w.wake_at = None;
            w.gen = w.gen.wrapping_add(1);
            let busy = w.busy_until;
            self.ensure_wake(node, worker, busy);
        }
    }

    fn on_wake(&mut self, node: u16, worker: u16, gen: u32) {
        let now = self.q.now();
        let n = &mut self.nodes[node as usize];
        let w = &mut n.workers[worker as usize];
        if !n.alive || w.gen != gen {
            return;
        }
        self.q.record(1, ((node as u64) << 16) | worker as u64, 0);
        // Wake-ups are scheduled no earlier than the CPU is free, and the worker's clock
        // (which only its steps advance) is then never ahead of the simulation's.
        assert!(now >= w.busy_until, "worker woken at {now} ns, busy until {} ns", w.busy_until);
        debug_assert!(w.core.now() <= now);
        w.wake_at = None;
        // Emptied work-request lists go back as many as were just posted: the pools stay small.
        let StepOutcome { used, has_work, timeout } = w.core.step(now, &mut self.drained, &mut self.spare_wrs);
        // A slowed CPU takes longer for the same work (the worker's own clock does not know).
        w.busy_until = now + self.net.cpu_ns(node, now, used);
        let busy = w.busy_until;
        let slow = self.net.cpu_permille(node, now);
        let mut drained = std::mem::take(&mut self.drained);
        for mut db in drained.drain(..) {
            // A slowed CPU posts later in its step, as it does everything later.
            if slow != 1000 {
                db.at = now + ((db.at - now) * slow).div_ceil(1000);
            }
            let at = ceil_ns(db.at * 1000 + self.m.mmio_latency_ps);
            let slot = match self.free_dbs.pop() {
                Some(s) => s,
                None => {
                    self.dbs.push(None);
                    (self.dbs.len() - 1) as u32
                }
            };
            let inc = self.nodes[node as usize].inc;
            self.dbs[slot as usize] = Some(PendingDoorbell { node, worker, inc, db });
            self.stats.doorbells += 1;
            self.q.schedule(at, Ev::Doorbell { db: slot });
        }
        self.drained = drained;
        if has_work {
            self.ensure_wake(node, worker, busy);
        } else if let Some(t) = timeout {
            self.ensure_wake(node, worker, t.max(busy));
        }
    }

    fn release(&mut self, op: u32) {
        let o = &mut self.ops[op as usize];
        assert!(o.refs > 0, "in-flight slot released more often than referenced");
        o.refs -= 1;
        if o.refs == 0 {
            o.data.clear(); // keep the capacity for the slot's next request
            self.free_ops.push(op);
        }
    }

    /// Processing-unit pool: returns when work started plus the work's own duration.
    fn pu(nic: &mut Nic, units: u64, ready: u64, work: u64) -> u64 {
        let start = ready.max(nic.pu_free);
        nic.pu_free = start + work / units;
        start + work
    }

    /// The NIC of the worker that owns QP `qp` of `node`.
    fn nic_of(&self, node: u16, qp: u32) -> usize {
        self.nodes[node as usize].qps[qp as usize].nic as usize
    }

    /// Sends a packet of `bytes` from (src node, src nic) to (dst node, dst nic), ready at
    /// `ready`, from QP `from_qp` of `src` to QP `to_qp` of `dst`; returns the arrival time
    /// of its last bit, or `None` if a link between data centers lost it (UD over RDMA).
    #[allow(clippy::too_many_arguments)]
    fn transmit(
        &mut self,
        src: u16,
        snic: usize,
        dst: u16,
        dnic: usize,
        ready: u64,
        bytes: u64,
        qps: (u32, u32),
    ) -> Arrival {
        if self.net.is_empty() || (src == dst && snic == dnic) {
            return match self.transmit_clean(src, snic, dst, dnic, ready, bytes, qps) {
                Some(t) => Arrival::At(t),
                None => Arrival::Lost,
            };
        }
        let ud = self.nodes[src as usize].qps[qps.0 as usize].kind == QpType::Ud;
        let extra = match self.fault_leg(src, dst, ready, ud) {
            Leg::Lost => {
                // The packet still takes its turn on the sender's link before it is lost.
                let _ = self.transmit_clean(src, snic, dst, dnic, ready, bytes, qps);
                return Arrival::Lost;
            }
            Leg::GaveUp => {
                self.stats.fault_gave_up += 1;
                return Arrival::GaveUp(ready + self.m.rc_give_up_ps);
            }
            Leg::Late(ps) => ps,
        };
        let Some(t) = self.transmit_clean(src, snic, dst, dnic, ready, bytes, qps) else { return Arrival::Lost };
        let mut t = t + extra;
        if !ud {
            // RC never reorders: a packet delayed by a fault holds up the ones behind it.
            let q = &mut self.nodes[src as usize].qps[qps.0 as usize];
            t = t.max(q.fault_order);
            q.fault_order = t;
        }
        Arrival::At(t)
    }

    /// What the network faults in force when a packet leaves `src` for `dst` at `ready_ps`
    /// do to it. A datagram cut off or dropped is lost; otherwise it is delayed by the link
    /// fault's delay and a reordering draw. A reliable (RC) packet is sent again every
    /// `rc_timeout` while it is cut off or dropped, and the requester gives up after
    /// `rc_retry_count` retransmissions, as the NIC's transport does; it is delayed but never
    /// reordered.
    fn fault_leg(&mut self, src: u16, dst: u16, ready_ps: u64, ud: bool) -> Leg {
        let draw = |rng: &mut ChaCha8Rng, threshold: u64| threshold > 0 && rng.next_u64() < threshold;
        if ud {
            let t = ready_ps / 1000;
            if self.net.cut(src, dst, t) {
                self.stats.fault_lost += 1;
                return Leg::Lost;
            }
            let Some(e) = self.net.link_effect(src, dst, t) else { return Leg::Late(0) };
            if draw(&mut self.fault_rng, e.drop_threshold) {
                self.stats.fault_lost += 1;
                return Leg::Lost;
            }
            let reorder = if e.reorder_ps > 0 { self.fault_rng.gen_range(0..=e.reorder_ps) } else { 0 };
            return Leg::Late(e.delay_ps + reorder);
        }
        let timeout = self.cfg.profile.reliability.rc_timeout_ns * 1000;
        let retries = self.cfg.profile.reliability.rc_retry_count as u64;
        let mut tries = 0;
        loop {
            let t = (ready_ps + tries * timeout) / 1000;
            let effect = self.net.link_effect(src, dst, t);
            let lost = self.net.cut(src, dst, t) || effect.is_some_and(|e| draw(&mut self.fault_rng, e.drop_threshold));
            if !lost {
                return Leg::Late(tries * timeout + effect.map_or(0, |e| e.delay_ps));
            }
            self.stats.fault_lost += 1;
            tries += 1;
            if tries > retries {
                return Leg::GaveUp;
            }
        }
    }

    /// Whether a datagram leaving `src` for `dst` at `ready_ps` is delivered twice (a link
    /// fault's duplication), and how much later the copy arrives.
    fn fault_duplicate(&mut self, src: u16, dst: u16, ready_ps: u64) -> Option<u64> {
        let e = self.net.link_effect(src, dst, ready_ps / 1000)?;
        if e.duplicate_threshold == 0 || self.fault_rng.next_u64() >= e.duplicate_threshold {
            return None;
        }
        self.stats.fault_duplicated += 1;
        Some(1000 + if e.reorder_ps > 0 { self.fault_rng.gen_range(0..=e.reorder_ps) } else { 0 })
    }

    /// The network path without faults: see [`Sim::transmit`].
    #[allow(clippy::too_many_arguments)]
    fn transmit_clean(
        &mut self,
        src: u16,
        snic: usize,
        dst: u16,
        dnic: usize,
        ready: u64,
        bytes: u64,
        (from_qp, to_qp): (u32, u32),
    ) -> Option<u64> {
        self.stats.wire_bytes += bytes;
        let ser = self.m.wire_ps(bytes);
        if src == dst && snic == dnic {
            // NIC loopback: no wire.
            return Some(ready + self.m.pipeline_ps);
        }
        let tcp_cpu = self.wan_tcp_cpu_ns(src, dst);
        // TCP-like: the sender's CPU hands the message to its stack first.
        let ready = match tcp_cpu {
            Some(ns) => {
                let worker = self.nodes[src as usize].qps[from_qp as usize].worker;
                let now = self.q.now();
                self.charge_cpu(src, worker, now, ns);
                ready.max(now * 1000) + ns * 1000
            }
            None => ready,
        };
        let s = &mut self.nodes[src as usize].nics[snic];
        let start = ready.max(s.tx_free);
        s.tx_free = start + ser;
        // Cut-through switch: the head reaches the output port after one hop and the switch.
        let long_haul =
            self.cfg.link_delay_ps.get(src as usize * self.nodes.len() + dst as usize).copied().unwrap_or(0);
        let head = start + self.m.propagation_ps + self.m.switch_ps + long_haul;
        let crosses = self.cfg.wan.as_ref().is_some_and(|w| w.link(src, dst).is_some());
        let arrive = if crosses {
            // The far DC's switch port is not reserved: packets reach it in the order of
            // their delay draws, not of these calls, and reserving it now would hold local
            // traffic back for the whole delay. The inter-DC link is the bottleneck.
            self.cross_wan(src, dst, head, bytes, ser, from_qp)? + self.m.propagation_ps
        } else {
            let d = &mut self.nodes[dst as usize].nics[dnic];
            let out = head.max(d.port_free);
            d.port_free = out + ser;
            out + ser + self.m.propagation_ps
        };
        Some(match tcp_cpu {
            // ... and the receiver's stack hands it on.
            Some(ns) => {
                let worker = self.nodes[dst as usize].qps[to_qp as usize].worker;
                self.q.schedule(ceil_ns(arrive), Ev::Charge { node: dst, worker, ns: ns as u32 });
                arrive + ns * 1000
            }
            None => arrive,
        })
    }

    /// The per-message CPU cost, ns, of a TCP-like link from `src`'s DC to `dst`'s.
    fn wan_tcp_cpu_ns(&self, src: u16, dst: u16) -> Option<u64> {
        match &self.cfg.wan.as_ref()?.link(src, dst)?.1.transport {
            WanTransport::Tcp(c) => Some(c.per_message_cpu_ns as u64),
            WanTransport::Rdma => None,
        }
    }

    /// A packet whose head reaches its DC's border at `head` crosses to `dst`'s DC: it queues for the link's bandwidth, each transmission may be lost (a
    /// datagram over RDMA is then gone: `None`; RC and TCP send it again after the
    /// retransmission wait), and it takes the drawn delay plus jitter. RC keeps its QP's
    /// order, TCP its connection's. Returns when its last bit (`ser` after the head) reaches
    /// the far DC.
    fn cross_wan(&mut self, src: u16, dst: u16, head: u64, bytes: u64, ser: u64, from_qp: u32) -> Option<u64> {
        let (k, link) = self.cfg.wan.as_ref().and_then(|w| w.link(src, dst)).expect("a link between two DCs");
        self.stats.wan_messages += 1;
        let ud = self.nodes[src as usize].qps[from_qp as usize].kind == QpType::Ud;
        let tcp = matches!(link.transport, WanTransport::Tcp(_));
        // Bandwidth: the link carries one message after another (ps = bytes * 8000 / Gbit/s).
        let mut t = head;
        if let Some(g) = link.gbps {
            let ser = (bytes as f64 * 8000.0 / g).ceil() as u64;
            t = t.max(self.wan_free[k]) + ser;
            self.wan_free[k] = t;
        }
        let us_to_ps = |us: f64| (us * 1e6).round() as u64;
        let delay = us_to_ps(link.delay.quantile(unit(self.wan_rng.next_u64())));
        let jitter = if link.jitter_us > 0.0 { us_to_ps(link.jitter_us * unit(self.wan_rng.next_u64())) } else { 0 };
        if link.loss > 0.0 {
            let lost = |rng: &mut ChaCha8Rng| unit(rng.next_u64()) < link.loss;
            if ud && !tcp {
                if lost(&mut self.wan_rng) {
                    self.stats.wan_lost += 1;
                    return None;
                }
            } else {
                let wait = link.retransmit_us.map_or(2 * delay, us_to_ps);
                while lost(&mut self.wan_rng) {
                    self.stats.wan_retransmits += 1;
                    t += wait;
                }
            }
        }
        t += delay + jitter + ser;
        // In-order delivery: RC per QP, TCP per node-pair connection; RDMA datagrams may
        // overtake each other. Ordered by the last bit, which is when a packet is delivered:
        // ordering heads let a small packet land before a larger one sent ahead of it.
        let n = self.nodes.len();
        let last = if tcp {
            Some(&mut self.wan_conn_order[src as usize * n + dst as usize])
        } else if !ud {
            Some(&mut self.nodes[src as usize].qps[from_qp as usize].wan_order)
        } else {
            None
        };
        if let Some(last) = last {
            t = t.max(*last);
            *last = t;
        }
        Some(t)
    }

    fn qp_miss(&mut self, node: u16, nic: usize, qp: u32) -> (u64, u64) {
        self.stats.qp_cache_lookups += 1;
        if self.nodes[node as usize].nics[nic].qp_cache.touch(qp) {
            (0, 0)
        } else {
            self.stats.qp_cache_misses += 1;
            (self.m.qp_miss_ps, self.m.qp_miss_latency_ps)
        }
    }

    fn on_doorbell(&mut self, slot: u32) {
        let (node, worker, n) = {
            let d = self.dbs[slot as usize].as_ref().expect("doorbell slot");
            (d.node, d.worker, d.db.wrs.len() as u32)
        };
        self.q.record(2, ((node as u64) << 16) | worker as u64, n as u64);
        // The worker refuses empty posts and posts beyond the send queue.
        assert!(n >= 1 && n <= self.m.send_queue_depth, "doorbell of {n} WQEs");
        if n == 1 || !self.nodes[node as usize].alive {
            // One WQE arrives inside the MMIO itself (BlueFlame).
            return self.on_fetched(slot);
        }
        // A batch is fetched by one DMA read of all its WQEs.
        let now_ps = self.q.now() * 1000;
        let nic = self.nodes[node as usize].workers[worker as usize].nic as usize;
        let t = self.m.pcie_ps(n * self.m.wqe_bytes);
        let nc = &mut self.nodes[node as usize].nics[nic];
        let start = now_ps.max(nc.pcie_rd_free);
        nc.pcie_rd_free = start + t;
        self.q.schedule(ceil_ns(start + t + self.m.pcie_read_ps), Ev::Fetched { db: slot });
    }

    fn on_fetched(&mut self, slot: u32) {
        let PendingDoorbell { node, worker, inc, mut db } = self.dbs[slot as usize].take().expect("doorbell slot");
        self.free_dbs.push(slot);
        if self.nodes[node as usize].alive && self.nodes[node as usize].inc == inc {
            let ready = self.q.now() * 1000;
            let qp_idx = self.nodes[node as usize].workers[worker as usize].qps[db.qp.0 as usize];
            let nic = self.nodes[node as usize].workers[worker as usize].nic as usize;
            for wr in db.wrs.drain(..) {
                self.start_request(node, worker, nic, qp_idx, wr, ready);
            }
        }
        // The emptied list goes back to a worker at its next wake-up (see `on_wake`).
        db.wrs.clear();
        self.spare_wrs.push(db.wrs);
    }

    /// Takes a free in-flight slot (or a new one); its `data` is empty.
    fn take_slot(&mut self) -> u32 {
        match self.free_ops.pop() {
            Some(i) => {
                debug_assert!(self.ops[i as usize].refs == 0 && self.ops[i as usize].data.is_empty());
                i
            }
            None => {
                self.ops.push(InFlight::default());
                (self.ops.len() - 1) as u32
            }
        }
    }

    /// Requester-side processing of one WQE, ready at `ready` (the current event time).
    fn start_request(&mut self, node: u16, worker: u16, nic: usize, qp_idx: u32, mut wr: WorkRequest, ready: u64) {
        self.stats.verbs[wr.op.opcode() as usize] += 1;
        let qp = &mut self.nodes[node as usize].qps[qp_idx as usize];
        qp.posted += 1;
        let (kind, qp_error, seq) = (qp.kind, qp.error, qp.posted);
        let local_status = local_status(&wr.op, kind, &self.nodes[node as usize].mem, &self.m);
        let (dst, dst_qp, dst_worker) = self.destination(node, qp_idx, worker, &wr.op);
        let failed = qp_error || local_status != WcStatus::Success;
        let cls = class(&wr.op);
        let out_bytes = match &wr.op {
            Op::Read { .. } | Op::Cas { .. } | Op::Faa { .. } => self.m.wire_bytes(request_headers(&wr.op), 0),
            op => self.m.wire_bytes(request_headers(op), op.payload_len()),
        };
        // Inline bytes become the request's data: take the buffer instead of copying it.
        let inline = match &mut wr.op {
            Op::Write { src: Payload::Inline(b), .. }
            | Op::WriteImm { src: Payload::Inline(b), .. }
            | Op::Send { src: Payload::Inline(b), .. }
                if !failed =>
            {
                Some(std::mem::take(b))
            }
            _ => None,
        };
        // The slot is filled in place (no large temporary is moved); a request that ends up
        // with no event gives it straight back, leaving the free list as it was.
        let id = self.take_slot();
        let o = &mut self.ops[id as usize];
        o.src = node;
        o.src_qp = qp_idx;
        o.seq = seq;
        o.dst = dst;
        o.dst_qp = dst_qp;
        o.wr = wr;
        o.status = WcStatus::Success;
        o.sent_ps = ready;
        o.tracked_read = false;
        o.atomic_new = None;
        o.refs = 1;
        o.dst_worker = dst_worker;
        o.depart_ps = 0;
        o.wire = 0;
        o.resp_payload = 0;
        o.dropped = false;
        o.src_inc = self.nodes[node as usize].inc;
        o.dst_inc = self.nodes[dst as usize].inc;
        if failed {
            // Nothing leaves: the request completes with its error, and an RC QP enters the
            // error state.
            o.status = if qp_error { WcStatus::Flushed } else { local_status };
            if kind == QpType::Rc {
                self.nodes[node as usize].qps[qp_idx as usize].error = true;
            }
            return self.schedule_completion(id, ready);
        }
        let t = self.requester_work(node, nic, qp_idx, cls, ready);
        let t = self.load_payload(id, nic, inline, t);
        self.depart_request(id, t, out_bytes);
    }

    /// Where a request goes: the RC QP's peer QP, or the UD destination's UD QP.
    fn destination(&self, node: u16, qp_idx: u32, worker: u16, op: &Op) -> (u16, u32, u16) {
        let qp = &self.nodes[node as usize].qps[qp_idx as usize];
        match (op, qp.kind) {
            (Op::Send { dest: Some(e), .. }, QpType::Ud) => {
                let d = e.node.0.min(self.cfg.nodes - 1);
                let dw = e.worker.min(self.cfg.workers - 1);
                (d, self.nodes[d as usize].workers[dw as usize].ud_qp, dw)
            }
            _ => (qp.peer_node, qp.peer_qp, worker),
        }
    }

    /// The requester NIC's processing-unit work on a WQE (plus a QP-context miss); returns
    /// when the packet could leave. WQEs of one QP start in order and leave in order, but
    /// pipeline in between.
    fn requester_work(&mut self, node: u16, nic: usize, qp_idx: u32, cls: VerbClass, ready: u64) -> u64 {
        let (miss_work, miss_lat) = self.qp_miss(node, nic, qp_idx);
        let work = self.m.requester_ps[cls as usize] + miss_work;
        let qp = &mut self.nodes[node as usize].qps[qp_idx as usize];
        let r = ready.max(qp.issue_order);
        qp.issue_order = r;
        let done = Self::pu(&mut self.nodes[node as usize].nics[nic], self.m.units, r, work);
        done + miss_lat + self.m.pipeline_ps
    }

    /// The payload of request `id`: inline bytes came with the WQE; a local buffer is
    /// DMA-read now, after `t`. Returns when the payload is at the NIC.
    fn load_payload(&mut self, id: u32, nic: usize, inline: Option<Vec<u8>>, t: u64) -> u64 {
        let o = &mut self.ops[id as usize];
        if let Some(b) = inline {
            o.data = b;
            return t;
        }
        let (Op::Write { src: Payload::Local(l), .. }
        | Op::WriteImm { src: Payload::Local(l), .. }
        | Op::Send { src: Payload::Local(l), .. }) = &o.wr.op
        else {
            return t;
        };
        let node = &mut self.nodes[o.src as usize];
        o.data.resize(l.len as usize, 0);
        node.mem.nic_read(l.addr, &mut o.data).expect("checked by local_status");
        let dma = self.m.pcie_ps(l.len);
        let nc = &mut node.nics[nic];
        let start = t.max(nc.pcie_rd_free);
        nc.pcie_rd_free = start + dma;
        start + dma + self.m.pcie_read_ps
    }

    /// Request `id` leaves its QP no earlier than `t` and in posting order; a UD datagram may
    /// be dropped on the way.
    fn depart_request(&mut self, id: u32, t: u64, wire: u64) {
        let o = &mut self.ops[id as usize];
        let qp = &mut self.nodes[o.src as usize].qps[o.src_qp as usize];
        let t = t.max(qp.tx_order);
        qp.tx_order = t;
        let is_ud = qp.kind == QpType::Ud;
        let dropped = is_ud && self.m.ud_drop && self.rng.next_u64() < self.m.ud_drop_threshold;
        if dropped {
            self.stats.ud_dropped += 1;
        }
        o.depart_ps = t;
        o.wire = wire;
        o.dropped = dropped;
        // UD has no acknowledgement: a signaled send completes once it is on the wire.
        o.refs = if is_ud { (!dropped) as u8 + o.wr.signaled as u8 } else { 1 };
        if o.refs == 0 {
            o.data.clear();
            self.free_ops.push(id);
            return;
        }
        self.q.schedule(ceil_ns(t), Ev::Depart { op: id, response: false });
    }

    /// A request reaches the responder NIC. Once its turn on the QP comes, the NIC checks it,
    /// applies it to host memory and sends the response back.
    fn on_request(&mut self, id: u32) {
        let now_ps = self.q.now() * 1000;
        let (src, dst, dst_qp) = {
            let o = &self.ops[id as usize];
            (o.src, o.dst, o.dst_qp)
        };
        self.q.record(3, self.ops[id as usize].wr.wr_id, ((src as u64) << 16) | dst as u64);
        let is_ud = self.nodes[dst as usize].qps[dst_qp as usize].kind == QpType::Ud;
        if self.fenced(src, self.ops[id as usize].src_inc) {
            // From an incarnation the membership declared dead: dropped.
            self.finish_tracked_read(id);
            return self.release(id);
        }
        let gone = self.nodes[dst as usize].inc != self.ops[id as usize].dst_inc
            || self.nodes[dst as usize].qps[dst_qp as usize].dead;
        if !self.nodes[dst as usize].alive || gone {
            // Requests queued behind this one on the QP (per-QP FIFO) have no event of their
            // own: the next is looked at now, and fails the same way.
            let q = &mut self.nodes[dst as usize].qps[dst_qp as usize];
            if q.waiting.front() == Some(&id) {
                q.waiting.pop_front();
                if let Some(&next) = q.waiting.front() {
                    self.q.schedule(self.q.now(), Ev::ReqArrive { op: next });
                }
            }
            return self.request_to_dead_node(id, is_ud, now_ps);
        }
        if !self.takes_its_turn(id, now_ps) {
            return;
        }
        if !is_ud {
            // Per-QP FIFO: an RC responder executes its peer's requests in posting order.
            let (seq, q) = (self.ops[id as usize].seq, &mut self.nodes[dst as usize].qps[dst_qp as usize]);
            debug_assert!(seq > q.executed, "RC request {seq} executed after {}", q.executed);
            q.executed = seq;
        }
        let dnic = self.nic_of(dst, dst_qp);
        let done = self.responder_work(id, dnic, now_ps);
        let ack = Response { ready_ps: done, payload: 0, headers: h::BTH + h::AETH };
        let response = if !self.remote_access_ok(id) {
            self.ops[id as usize].status = WcStatus::RemoteAccessError;
            ack
        } else {
            match self.ops[id as usize].wr.op {
                Op::Write { remote, .. } | Op::WriteImm { remote, .. } => {
                    self.execute_write(id, remote, done);
                    ack
                }
                Op::Read { remote, .. } => self.execute_read(id, remote, dnic, done),
                Op::Cas { remote, .. } | Op::Faa { remote, .. } => self.execute_atomic(id, remote, dnic, done, now_ps),
                Op::Send { .. } => {
                    if !self.execute_receive(id, done, is_ud) {
                        return;
                    }
                    ack
                }
            }
        };
        self.send_response(id, response);
    }

    /// Whether messages from `node`'s incarnation `inc` are dropped: it restarted since, or
    /// the membership declared it dead.
    fn fenced(&self, node: u16, inc: u32) -> bool {
        let n = &self.nodes[node as usize];
        inc != n.inc || (n.declared_down && !n.alive)
    }

    /// A request reached a dead node: a UD datagram is lost; an RC request is never
    /// acknowledged, so the requester retries until it gives up.
    fn request_to_dead_node(&mut self, id: u32, is_ud: bool, now_ps: u64) {
        if is_ud {
            return self.release(id);
        }
        let o = &mut self.ops[id as usize];
        o.status = WcStatus::RetryExceeded;
        // Not before now: a give-up time shorter than the flight has passed already.
        let t = (o.sent_ps + self.m.rc_give_up_ps).max(now_ps);
        self.schedule_completion(id, t);
    }

    /// Per-QP FIFO at the responder: whether request `id` runs now. Otherwise it waits among
    /// the QP's deferred requests and runs again later.
    fn takes_its_turn(&mut self, id: u32, now_ps: u64) -> bool {
        if self.queued_behind_deferred(id) {
            return false;
        }
        let (dst, dst_qp) = (self.ops[id as usize].dst, self.ops[id as usize].dst_qp);
        let ordered_after = self.nodes[dst as usize].qps[dst_qp as usize].ordered_after;
        if now_ps < ordered_after {
            self.defer_request(id, ordered_after);
            return false;
        }
        if let Some(until) = self.atomic_word_busy_until(id) {
            // Deferred: later requests on this QP must wait too, or they would overtake it.
            // Re-deferred at the very picosecond the blocker commits, `until` is now: the
            // followers must still wait past it (the CAS runs again after the commit event).
            let q = &mut self.nodes[dst as usize].qps[dst_qp as usize];
            q.ordered_after = q.ordered_after.max(until.max(now_ps + 1));
            self.defer_request(id, until);
            return false;
        }
        // This request goes ahead: the next one waiting (if any) is looked at after it.
        if let Some(&next) = self.nodes[dst as usize].qps[dst_qp as usize].waiting.front() {
            self.q.schedule(self.q.now(), Ev::ReqArrive { op: next });
        }
        true
    }

    /// Whether request `id` must wait behind its QP's deferred requests (it is queued there
    /// if so): an event already scheduled for the tick a deferred request was moved to would
    /// otherwise run before it. The head of the queue leaves it: its turn has come.
    fn queued_behind_deferred(&mut self, id: u32) -> bool {
        let (dst, dst_qp) = (self.ops[id as usize].dst, self.ops[id as usize].dst_qp);
        let q = &mut self.nodes[dst as usize].qps[dst_qp as usize];
        match q.waiting.front() {
            Some(&head) if head != id => {
                if !q.waiting.contains(&id) {
                    q.waiting.push_back(id);
                }
                true
            }
            Some(_) => {
                q.waiting.pop_front();
                false
            }
            None => false,
        }
    }

    /// Makes request `id` the head of its QP's deferred requests, to run again at `at_ps`.
    fn defer_request(&mut self, id: u32, at_ps: u64) {
        let (dst, dst_qp) = (self.ops[id as usize].dst, self.ops[id as usize].dst_qp);
        self.nodes[dst as usize].qps[dst_qp as usize].waiting.push_front(id);
        self.q.schedule(ceil_ns(at_ps), Ev::ReqArrive { op: id });
    }

    /// For a NIC atomic, until when an earlier one holds the same word: NIC atomics on a word
    /// serialise in the responder NIC. An entry lives until its commit event removes it: a
    /// request arriving at the very nanosecond of the commit, but ordered before it, must
    /// still wait.
    fn atomic_word_busy_until(&self, id: u32) -> Option<u64> {
        let o = &self.ops[id as usize];
        let (Op::Cas { remote, .. } | Op::Faa { remote, .. }) = &o.wr.op else {
            return None;
        };
        let busy = &self.nodes[o.dst as usize].nics[self.nic_of(o.dst, o.dst_qp)].atomic_busy;
        busy.iter().find(|&&(a, _)| a == remote.addr).map(|&(_, until)| until)
    }

    /// Reserves all of request `id`'s work on the responder NIC now, in event order (a
    /// receive also writes a CQE); returns when it is done.
    fn responder_work(&mut self, id: u32, dnic: usize, now_ps: u64) -> u64 {
        let (dst, dst_qp) = (self.ops[id as usize].dst, self.ops[id as usize].dst_qp);
        let cls = class(&self.ops[id as usize].wr.op);
        let (miss_work, miss_lat) = self.qp_miss(dst, dnic, dst_qp);
        let recv_cqe = if cls == VerbClass::Send { self.m.cqe_ps } else { 0 };
        let work = self.m.responder_ps[cls as usize] + miss_work + recv_cqe;
        Self::pu(&mut self.nodes[dst as usize].nics[dnic], self.m.units, now_ps, work) + miss_lat + self.m.pipeline_ps
    }

    /// The responder's checks of request `id`: rkey and bounds (a WRITE's data must fit its
    /// remote range), and alignment for atomics.
    fn remote_access_ok(&self, id: u32) -> bool {
        let o = &self.ops[id as usize];
        let mem = &self.nodes[o.dst as usize].mem;
        match &o.wr.op {
            Op::Read { remote, .. } | Op::Write { remote, .. } | Op::WriteImm { remote, .. } => {
                mem.check_remote(remote.rkey, remote.addr, remote.len as u64)
                    && (matches!(o.wr.op, Op::Read { .. }) || remote.len >= o.data.len() as u32)
            }
            Op::Cas { remote, .. } | Op::Faa { remote, .. } => {
                remote.addr % 8 == 0 && mem.check_remote(remote.rkey, remote.addr, 8)
            }
            Op::Send { .. } => true,
        }
    }

    /// WRITE: the data lands at once. WRITE_WITH_IMM also notifies the target worker, after a
    /// DMA write and a CQE.
    fn execute_write(&mut self, id: u32, remote: RemoteBuf, done: u64) {
        let o = &mut self.ops[id as usize];
        self.nodes[o.dst as usize].mem.nic_write(remote.addr, &o.data).expect("checked by remote_access_ok");
        if let Op::WriteImm { imm, .. } = o.wr.op {
            o.atomic_new = Some(imm as u64);
            o.refs += 1;
            let at = done + self.m.pcie_write_ps + self.m.cqe_ps;
            self.q.schedule(ceil_ns(at), Ev::Deliver { op: id });
        }
    }

    /// READ: the NIC DMA-reads the range from host memory, and the data goes back.
    fn execute_read(&mut self, id: u32, remote: RemoteBuf, dnic: usize, done: u64) -> Response {
        // The DMA reads reach memory half a PCIe round trip after the NIC issues them, one
        // cache line after another.
        let gap = self.m.pcie_ps(CACHE_LINE as u32).max(1);
        let t0 = done + self.m.pcie_read_ps / 2;
        let o = &mut self.ops[id as usize];
        let node = &mut self.nodes[o.dst as usize];
        o.tracked_read = !node.mem.begin_read(id as u64, remote.addr, remote.len as u64, t0, gap, &mut o.data);
        let dma = self.m.pcie_ps(remote.len);
        let nc = &mut node.nics[dnic];
        let start = done.max(nc.pcie_rd_free);
        nc.pcie_rd_free = start + dma;
        Response { ready_ps: start + dma + self.m.pcie_read_ps, payload: remote.len, headers: h::BTH + h::AETH }
    }

    /// CAS and FAA: the NIC reads the word now and returns the old value. GLOB writes the new
    /// value at once; HCA writes it `atomic_rmw` later, and until then holds the word and the
    /// QP's later requests (a CPU write in between is overwritten).
    fn execute_atomic(&mut self, id: u32, remote: RemoteBuf, dnic: usize, done: u64, now_ps: u64) -> Response {
        let o = &mut self.ops[id as usize];
        let node = &mut self.nodes[o.dst as usize];
        let addr = remote.addr;
        let old = node.mem.nic_load_u64(addr);
        let new = match o.wr.op {
            Op::Cas { compare, swap, .. } => (old == compare).then_some(swap),
            Op::Faa { add, .. } => Some(old.wrapping_add(add)),
            _ => None,
        };
        o.data = old.to_le_bytes().to_vec();
        match self.m.atomicity {
            Atomicity::Glob => {
                if let Some(v) = new {
                    node.mem.nic_write(addr, &v.to_le_bytes()).expect("checked by remote_access_ok");
                }
            }
            Atomicity::Hca => {
                let until = now_ps + self.m.atomic_rmw_ps;
                // One atomic at a time per word: later ones were deferred (`takes_its_turn`).
                debug_assert!(node.nics[dnic].atomic_busy.iter().all(|&(a, _)| a != addr));
                node.nics[dnic].atomic_busy.push((addr, until));
                node.qps[o.dst_qp as usize].ordered_after = until;
                o.atomic_new = new;
                o.refs += 1;
                self.q.schedule(ceil_ns(until), Ev::AtomicCommit { op: id });
            }
        }
        let ready_ps = done.max(now_ps + self.m.atomic_rmw_ps);
        Response { ready_ps, payload: 0, headers: h::BTH + h::AETH + h::ATOMIC_ACK_ETH }
    }

    /// SEND: the NIC DMA-writes the payload into a posted RECV buffer, then a CQE, and the
    /// target worker gets it. Returns whether an ACK follows: UD has none, and its slot now
    /// belongs to the delivery alone.
    fn execute_receive(&mut self, id: u32, done: u64, is_ud: bool) -> bool {
        let o = &mut self.ops[id as usize];
        let at = done + self.m.pcie_write_ps + self.m.pcie_ps(o.data.len() as u32);
        if !is_ud {
            o.refs += 1;
        }
        self.q.schedule(ceil_ns(at), Ev::Deliver { op: id });
        !is_ud
    }

    /// Sends the response to request `id` (READ data, atomic result, or ACK/NAK), in request
    /// order per QP.
    fn send_response(&mut self, id: u32, r: Response) {
        let o = &mut self.ops[id as usize];
        let qp = &mut self.nodes[o.dst as usize].qps[o.dst_qp as usize];
        let ready = r.ready_ps.max(qp.resp_order);
        qp.resp_order = ready;
        o.depart_ps = ready;
        o.wire = self.m.wire_bytes(r.headers, r.payload);
        o.resp_payload = r.payload;
        self.q.schedule(ceil_ns(ready), Ev::Depart { op: id, response: true });
    }

    fn on_depart(&mut self, id: u32, response: bool) {
        let o = &self.ops[id as usize];
        let (src, dst, sq, dq, ready, bytes) = (o.src, o.dst, o.src_qp, o.dst_qp, o.depart_ps, o.wire);
        self.q.record(8, o.wr.wr_id, response as u64);
        let snic = self.nic_of(src, sq);
        let dnic = self.nic_of(dst, dq);
        if response {
            let o = &self.ops[id as usize];
            if !self.nodes[dst as usize].alive || self.nodes[dst as usize].inc != o.dst_inc {
                // The responder died before answering: the requester retries, then gives up.
                let o = &mut self.ops[id as usize];
                o.status = WcStatus::RetryExceeded;
                let t = o.sent_ps + self.m.rc_give_up_ps;
                self.schedule_completion(id, t.max(ready));
                return;
            }
            match self.transmit(dst, dnic, src, snic, ready, bytes, (dq, sq)) {
                Arrival::At(arrive) => {
                    // Requester: data DMA-write (READ, atomic result) and CQE.
                    let landed = arrive
                        + self.m.pipeline_ps
                        + self.m.pcie_write_ps
                        + self.m.pcie_ps(self.ops[id as usize].resp_payload);
                    self.schedule_completion(id, landed);
                }
                // Every response to the requester's retransmissions lost: it gives up, though
                // the request was carried out (the outcome of a verb that failed is unknown).
                Arrival::GaveUp(at) => {
                    self.ops[id as usize].status = WcStatus::RetryExceeded;
                    self.schedule_completion(id, at);
                }
                Arrival::Lost => {
                    self.ops[id as usize].status = WcStatus::RetryExceeded;
                    self.schedule_completion(id, ready + self.m.rc_give_up_ps);
                }
            }
            return;
        }
        if !self.nodes[src as usize].alive || self.nodes[src as usize].inc != self.ops[id as usize].src_inc {
            self.release(id);
            return;
        }
        let arrive = self.transmit(src, snic, dst, dnic, ready, bytes, (sq, dq));
        let is_ud = self.nodes[src as usize].qps[sq as usize].kind == QpType::Ud;
        if is_ud {
            let (signaled, dropped) = (self.ops[id as usize].wr.signaled, self.ops[id as usize].dropped);
            match arrive {
                _ if dropped => {}
                Arrival::At(arrive) => {
                    if !self.net.is_empty() {
                        if let Some(later) = self.fault_duplicate(src, dst, ready) {
                            let copy = self.copy_datagram(id);
                            self.q.schedule(ceil_ns(arrive + later), Ev::ReqArrive { op: copy });
                        }
                    }
                    self.q.schedule(ceil_ns(arrive), Ev::ReqArrive { op: id })
                }
                // Lost between data centers or to a fault: the arrival's reference goes.
                Arrival::Lost | Arrival::GaveUp(_) => self.release(id),
            }
            if signaled {
                let c = ready + self.m.wire_ps(bytes) + self.m.pcie_write_ps;
                self.q.schedule(ceil_ns(c), Ev::RespArrive { op: id });
            }
        } else {
            match arrive {
                Arrival::At(arrive) => self.q.schedule(ceil_ns(arrive), Ev::ReqArrive { op: id }),
                // Every transmission lost: the request never ran; the requester gives up.
                Arrival::GaveUp(at) => {
                    self.ops[id as usize].status = WcStatus::RetryExceeded;
                    self.schedule_completion(id, at);
                }
                Arrival::Lost => {
                    self.ops[id as usize].status = WcStatus::RetryExceeded;
                    self.schedule_completion(id, ready + self.m.rc_give_up_ps);
                }
            }
        }
    }

    /// A second in-flight copy of datagram `id` (a link fault duplicated it).
    fn copy_datagram(&mut self, id: u32) -> u32 {
        let c = self.take_slot();
        let (wr, data) = (self.ops[id as usize].wr.clone(), self.ops[id as usize].data.clone());
        let o = &self.ops[id as usize];
        let copy = InFlight {
            src: o.src,
            src_qp: o.src_qp,
            seq: o.seq,
            dst: o.dst,
            dst_qp: o.dst_qp,
            wr,
            data,
            status: WcStatus::Success,
            sent_ps: o.sent_ps,
            tracked_read: false,
            atomic_new: None,
            refs: 1,
            dst_worker: o.dst_worker,
            depart_ps: o.depart_ps,
            wire: o.wire,
            resp_payload: 0,
            dropped: false,
            src_inc: o.src_inc,
            dst_inc: o.dst_inc,
        };
        self.ops[c as usize] = copy;
        c
    }

    /// Schedules the requester-side completion of `id` at `t` or later, keeping per-QP order.
    fn schedule_completion(&mut self, id: u32, t: u64) {
        let (src, sq) = (self.ops[id as usize].src, self.ops[id as usize].src_qp);
        let qp = &mut self.nodes[src as usize].qps[sq as usize];
        let t = t.max(qp.last_completion);
        qp.last_completion = t;
        self.q.schedule(ceil_ns(t), Ev::RespArrive { op: id });
    }

    fn on_atomic_commit(&mut self, id: u32) {
        let o = &self.ops[id as usize];
        self.q.record(4, o.wr.wr_id, o.dst as u64);
        let (Op::Cas { remote, .. } | Op::Faa { remote, .. }) = &o.wr.op else {
            unreachable!("only NIC atomics commit");
        };
        let nic = self.nodes[o.dst as usize].qps[o.dst_qp as usize].nic as usize;
        let busy = &mut self.nodes[o.dst as usize].nics[nic].atomic_busy;
        let p = busy.iter().position(|&(a, _)| a == remote.addr).expect("a committing atomic holds its word");
        busy.swap_remove(p);
        let gone = !self.nodes[o.dst as usize].alive || self.nodes[o.dst as usize].inc != o.dst_inc;
        if let Some(v) = o.atomic_new.filter(|_| !gone) {
            self.nodes[o.dst as usize]
                .mem
                .nic_write(remote.addr, &v.to_le_bytes())
                .expect("checked by remote_access_ok");
        }
        self.release(id);
    }

    fn on_deliver(&mut self, id: u32) {
        let o = &mut self.ops[id as usize];
        let (dst, dw, src) = (o.dst, o.dst_worker, o.src);
        self.q.record(5, o.wr.wr_id, ((src as u64) << 16) | dst as u64);
        let (src_inc, dst_inc) = (o.src_inc, o.dst_inc);
        if self.nodes[dst as usize].alive && self.nodes[dst as usize].inc == dst_inc && !self.fenced(src, src_inc) {
            let o = &mut self.ops[id as usize];
            let src_worker = self.nodes[src as usize].qps[o.src_qp as usize].worker;
            match &o.wr.op {
                Op::WriteImm { imm, .. } => {
                    let imm = *imm;
                    // A routed immediate goes to the worker it names (`verbs::imm`).
                    let dw = txbed_transport::imm::worker(imm).filter(|&w| w < self.cfg.workers).unwrap_or(dw);
                    self.nodes[dst as usize].workers[dw as usize].core.on_imm(NodeId(src), imm);
                    let now = self.q.now();
                    self.ensure_wake(dst, dw, now);
                }
                _ => {
                    let bytes = std::mem::take(&mut o.data);
                    let from = Endpoint { node: NodeId(src), worker: src_worker };
                    self.nodes[dst as usize].workers[dw as usize].core.on_datagram(from, bytes);
                }
            }
            let now = self.q.now();
            self.ensure_wake(dst, dw, now);
        }
        self.release(id);
    }

    fn on_response(&mut self, id: u32) {
        let (src, sq) = (self.ops[id as usize].src, self.ops[id as usize].src_qp);
        self.q.record(6, self.ops[id as usize].wr.wr_id, self.ops[id as usize].status as u64);
        if !self.nodes[src as usize].alive || self.nodes[src as usize].inc != self.ops[id as usize].src_inc {
            self.finish_tracked_read(id);
            self.release(id);
            return;
        }
        let kind = self.nodes[src as usize].qps[sq as usize].kind;
        let mut status = self.ops[id as usize].status;
        if kind == QpType::Rc {
            let qp = &mut self.nodes[src as usize].qps[sq as usize];
            if qp.error_reported {
                status = WcStatus::Flushed;
            } else if status != WcStatus::Success {
                qp.error_reported = true;
                qp.error = true;
                if status == WcStatus::RetryExceeded {
                    self.schedule_reconnect(src, sq);
                }
            }
        }
        // Result bytes (READ data, atomic old value). A SEND's payload stays for its delivery.
        if self.ops[id as usize].tracked_read {
            let mut data = std::mem::take(&mut self.ops[id as usize].data);
            self.finish_tracked_read_into(id, &mut data);
            self.ops[id as usize].data = data;
        }
        if status == WcStatus::Success {
            let o = &self.ops[id as usize];
            if let Op::Read { local, .. } | Op::Cas { local, .. } | Op::Faa { local, .. } = &o.wr.op {
                self.nodes[src as usize].mem.nic_write(local.addr, &o.data).expect("checked by local_status");
            }
        }
        let o = &self.ops[id as usize];
        if o.wr.signaled || status != WcStatus::Success {
            let worker = self.nodes[src as usize].qps[sq as usize].worker;
            let nic = self.nodes[src as usize].qps[sq as usize].nic as usize;
            let now_ps = self.q.now() * 1000;
            let (units, cqe) = (self.m.units, self.m.cqe_ps);
            Self::pu(&mut self.nodes[src as usize].nics[nic], units, now_ps, cqe);
            let c = Completion {
                wr_id: o.wr.wr_id,
                qp: self.nodes[src as usize].qps[sq as usize].core_qp,
                opcode: o.wr.op.opcode(),
                status,
                signaled: o.wr.signaled,
                peer: NodeId(o.dst),
            };
            self.nodes[src as usize].workers[worker as usize].core.on_completion(c);
            let now = self.q.now();
            self.ensure_wake(src, worker, now);
        }
        self.release(id);
    }

    fn finish_tracked_read(&mut self, id: u32) {
        let mut d = Vec::new();
        self.finish_tracked_read_into(id, &mut d);
    }

    fn finish_tracked_read_into(&mut self, id: u32, out: &mut Vec<u8>) {
        let o = &mut self.ops[id as usize];
        if o.tracked_read {
            o.tracked_read = false;
            self.nodes[o.dst as usize].mem.finish_read(id as u64, out);
        }
    }
}

/// Worker `w` of node `n` as a new incarnation builds it: a fresh core, no QPs yet.
#[allow(clippy::too_many_arguments)]
fn new_worker(
    cfg: &SimConfig,
    m: &NicModel,
    rpc: &RpcConfig,
    n: u16,
    w: u16,
    mem: &Rc<NodeMemory>,
    scratch: MemoryRegion,
    incarnation: u32,
) -> Worker {
    let per_worker = cfg.max_coroutines as u64 * cfg.scratch_per_coroutine as u64;
    let wc = WorkerConfig {
        me: Endpoint { node: NodeId(n), worker: w },
        nodes: cfg.nodes,
        workers: cfg.workers,
        costs: m.host.clone(),
        rpc: rpc.clone(),
        seed: cfg.seed,
        scratch: LocalBuf { lkey: scratch.lkey, addr: scratch.addr + w as u64 * per_worker, len: per_worker as u32 },
        scratch_per_coroutine: cfg.scratch_per_coroutine,
        incarnation,
    };
    Worker {
        core: WorkerCore::new(wc, mem.clone()),
        nic: (w as u32 % m.nics_per_node) as u8,
        busy_until: 0,
        wake_at: None,
        gen: 0,
        qps: Vec::new(),
        ud_qp: 0,
    }
}

impl SimQp {
    fn new(worker: u16, nic: u8, kind: QpType, peer_node: u16, peer_qp: u32, core_qp: QpId) -> Self {
        SimQp {
            worker,
            nic,
            kind,
            peer_node,
            peer_qp,
            core_qp,
            error: false,
            error_reported: false,
            issue_order: 0,
            tx_order: 0,
            ordered_after: 0,
            waiting: Default::default(),
            resp_order: 0,
            last_completion: 0,
            posted: 0,
            executed: 0,
            wan_order: 0,
            dead: false,
            fault_order: 0,
        }
    }
}

/// Remote key of region `i` on `node`: distinct across nodes so a key from one node is
/// rejected by another.
pub fn rkey_for(node: u16, i: u16) -> u32 {
    // The index has 12 bits: past them a key would name another node's region.
    assert!(i < 1 << 12, "more than 4096 regions on node {node}");
    0x5000_0000 | ((node as u32) << 12) | i as u32
}

pub fn lkey_for(node: u16, i: u16) -> u32 {
    assert!(i < 1 << 12, "more than 4096 regions on node {node}");
    0x6000_0000 | ((node as u32) << 12) | i as u32
}

/// A fresh HTM tracker for node `n` from `cpu`, shared by its memory (the NIC's accesses) and
/// its workers.
fn install_htm(n: &mut Node, cpu: &crate::cpu::CpuProfile, workers: u16) -> txbed_transport::htm::SharedHtm {
    let h = Rc::new(std::cell::RefCell::new(
        txbed_transport::htm::Htm::new(cpu.geometry(), workers)
            .with_system_aborts(cpu.system_aborts_per_ms)
            .with_costs(cpu.xbegin_ns, cpu.xend_ns, cpu.abort_ns),
    ));
    n.mem.set_htm(h.clone());
    for w in &mut n.workers {
        w.core.set_htm(h.clone());
    }
    h
}
