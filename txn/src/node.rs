//! What every node of a transaction run shares: the catalog, the location cache, the
//! workload, the history it records, and the participant's RPC handlers.

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use txbed_checker::Txn;
use txbed_workloads::{OrderedIndex, Workload};

use crate::locate::{Catalog, LocationCache};
use crate::stage::{Hybrid, Stage};

/// RPC handler ids.
pub const H_LOCK: u16 = 10;
pub const H_RELEASE: u16 = 11;
pub const H_COMMIT: u16 = 12;
pub const H_LOG: u16 = 13;
pub const H_RECLAIM: u16 = 14;
pub const H_FETCH: u16 = 15;
pub const H_VALIDATE: u16 = 16;
pub const H_LOOKUP: u16 = 17;
pub const H_RECLAIMED: u16 = 18;
/// With faults: release a lock by key if the given owner holds it (`ops::abandon`), and a
/// write-back that installs only while the writer still holds the lock (a repeated COMMIT).
pub const H_UNLOCK_KEY: u16 = 19;
pub const H_COMMIT_IF: u16 = 20;
/// Ids below this are the shared layer's (the common participant handlers and the index);
/// a protocol's `i`-th handler is `FIRST_PROTOCOL_HANDLER + i` (`protocol::handler_id`).
pub const FIRST_PROTOCOL_HANDLER: u16 = 32;
const _: () = assert!(H_COMMIT_IF < FIRST_PROTOCOL_HANDLER);

/// Handler names, for traces.
pub const HANDLER_NAMES: [(u16, &str); 11] = [
    (H_LOCK, "LOCK"),
    (H_RELEASE, "RELEASE"),
    (H_COMMIT, "COMMIT"),
    (H_LOG, "LOG"),
    (H_RECLAIM, "RECLAIM"),
    (H_FETCH, "FETCH"),
    (H_VALIDATE, "VALIDATE"),
    (H_LOOKUP, "LOOKUP"),
    (H_RECLAIMED, "RECLAIMED"),
    (H_UNLOCK_KEY, "UNLOCK_KEY"),
    (H_COMMIT_IF, "COMMIT_IF"),
];

/// Reply statuses of the shared handlers; protocols' handlers use them too, and their own
/// from 3 up.
pub const OK: u8 = 0;
pub const BUSY: u8 = 1;
pub const MISSING: u8 = 2;
/// The request did not decode (`msg`).
pub const MALFORMED: u8 = 0xff;

/// Counters of one node's transactions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnStats {
    pub committed: u64,
    pub aborted_conflict: u64,
    pub aborted_user: u64,
    pub log_records: u64,
    pub log_bytes: u64,
    /// One-sided LOG: times a writer found its ring full and waited for the backup to apply
    /// entries (flow control; zero while lazy reclaims keep up).
    pub log_room_waits: u64,
    /// Sum of committed transactions' external deltas (money in minus money out).
    pub external_delta: i64,
    /// Per stage (index = position of the bit, RCC numbering): time spent, round trips
    /// (waits for the network), and bytes sent.
    pub stage_ns: [u64; Stage::COUNT],
    pub stage_round_trips: [u64; Stage::COUNT],
    pub stage_bytes: [u64; Stage::COUNT],
    pub stage_calls: [u64; Stage::COUNT],
    /// Per stage: the location lookups' bucket READs its executions issued (round trips
    /// apart from `stage_round_trips`; their bytes are `BUCKET_BYTES` each).
    pub stage_lookup_reads: [u64; Stage::COUNT],
    /// Per stage: record accesses served on the local path (the CPU on the coordinator's own
    /// node: no round trip, no wire bytes).
    pub stage_local: [u64; Stage::COUNT],
    /// Per stage: messages its executions sent to nodes of other data centers, counting a
    /// request that is answered as two (request and reply; RedT's Table 1 counts so), and
    /// the executions that waited for at least one such reply (inter-DC round trips).
    pub stage_inter_dc_messages: [u64; Stage::COUNT],
    pub stage_inter_dc_round_trips: [u64; Stage::COUNT],
    /// HTM regions (`crate::htm`): what ran, and how regions ended.
    pub htm: HtmStats,
    /// Records and bytes written to the node's own NVRAM logs (DrTM's cooperative logging,
    /// Sec. 5.6), aborted HTM regions' included.
    pub nvram_log_records: u64,
    pub nvram_log_bytes: u64,
}

/// How a node's HTM regions ended (`crate::htm::region`), for the report's `htm` line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HtmStats {
    /// Regions begun (XBEGIN).
    pub regions: u64,
    /// Regions that committed (XEND).
    pub committed: u64,
    /// Aborts by cause, in `crate::htm::CAUSES` order (capacity, conflict-local,
    /// conflict-rdma, system, explicit).
    pub aborts: [u64; 5],
    /// Transactions that gave up on HTM and ran their fallback handler.
    pub fallbacks: u64,
    /// CPU time inside regions, committed or not, ns.
    pub region_ns: u64,
}

impl HtmStats {
    pub fn add(&mut self, o: &HtmStats) {
        self.regions += o.regions;
        self.committed += o.committed;
        for i in 0..5 {
            self.aborts[i] += o.aborts[i];
        }
        self.fallbacks += o.fallbacks;
        self.region_ns += o.region_ns;
    }
}

impl TxnStats {
    /// Folds another node's counters in.
    pub fn add(&mut self, o: &TxnStats) {
        self.committed += o.committed;
        self.aborted_conflict += o.aborted_conflict;
        self.aborted_user += o.aborted_user;
        self.log_records += o.log_records;
        self.log_bytes += o.log_bytes;
        self.log_room_waits += o.log_room_waits;
        self.external_delta += o.external_delta;
        self.htm.add(&o.htm);
        self.nvram_log_records += o.nvram_log_records;
        self.nvram_log_bytes += o.nvram_log_bytes;
        for i in 0..Stage::COUNT {
            self.stage_ns[i] += o.stage_ns[i];
            self.stage_round_trips[i] += o.stage_round_trips[i];
            self.stage_bytes[i] += o.stage_bytes[i];
            self.stage_calls[i] += o.stage_calls[i];
            self.stage_lookup_reads[i] += o.stage_lookup_reads[i];
            self.stage_local[i] += o.stage_local[i];
            self.stage_inter_dc_messages[i] += o.stage_inter_dc_messages[i];
            self.stage_inter_dc_round_trips[i] += o.stage_inter_dc_round_trips[i];
        }
    }
}

/// Index of a stage's counters.
pub fn stage_index(s: Stage) -> usize {
    (s.bit().trailing_zeros()) as usize
}

/// A deliberately wrong variant of a protocol, to show the checker catches it. Protocols
/// compare `NodeState::bug` with their own constants; never set in real runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Bug {
    /// The name tests and `txbed protocols` use (`UnlockBeforeWriteBack`).
    pub name: &'static str,
    /// What goes wrong, and which rule of the paper it breaks.
    pub about: &'static str,
}

/// The RDMA optimisations of DrTM+H Sec. 3.2 and the log's sizing: what the shared
/// operations ([`crate::ops`], [`crate::log`]) do for every protocol.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rdma {
    /// Issue all requests of a stage before waiting (otherwise one at a time).
    pub outstanding: bool,
    /// One doorbell for the requests posted together on a QP (otherwise one each).
    pub doorbell: bool,
    /// Do not wait for write-back acknowledgements (commit is decided by the log).
    pub passive_ack: bool,
    /// Fetch all records of a transaction in parallel (DrTM+H Sec. 6.1).
    pub speculative: bool,
    /// Bytes of each one-sided log ring a backup keeps per (sender node, sender worker).
    pub log_ring_bytes: u64,
    /// A writer sends a lazy reclaim after this many bytes of a ring (at most half a ring).
    pub log_reclaim_bytes: u64,
}

/// Default size of a log ring.
pub const DEFAULT_LOG_RING_BYTES: u64 = 64 << 10;
/// Default reclaim batch. The backup applies a batch in one handler run, during which its
/// worker serves nothing else: 4 KiB (about 80 SmallBank records, ~15 us of CPU) keeps that
/// stall near a transaction's own latency, at one reclaim message per 4 KiB logged.
pub const DEFAULT_LOG_RECLAIM_BYTES: u64 = 4 << 10;

impl Default for Rdma {
    fn default() -> Self {
        Rdma {
            outstanding: true,
            doorbell: true,
            passive_ack: false,
            speculative: true,
            log_ring_bytes: DEFAULT_LOG_RING_BYTES,
            log_reclaim_bytes: DEFAULT_LOG_RECLAIM_BYTES,
        }
    }
}

/// How a coordinator reaches the records homed on its own node (`protocol.local_path`).
///
/// On (the default): as RCC's store allows, "either locally or remotely". A one-sided
/// request about a local record is done by the CPU on local memory (loads, stores, CPU
/// atomics: `local::on_cpu`), and an RPC to the coordinator's own worker is a direct call of
/// the handler (`Ctx::call_local`); neither crosses the NIC. Except the HCA rule (DrTM Sec.
/// 5.2, DrTM+H Sec. 5.2): where the NIC's atomics are not atomic with the CPU's, a request
/// list that CASes (or FAAs) a word remote coordinators may CAS through their NICs stays on
/// the NIC (loopback), so every CAS of that word is the NIC's. Off: every request goes through
/// the NIC loopback and every RPC through a datagram, like a remote one.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LocalPath {
    pub on: bool,
    /// The CPU's atomics are atomic with the NIC's (IBV_ATOMIC_GLOB), so a CPU CAS may
    /// stand in for a NIC CAS.
    pub cpu_atomics: bool,
}

impl LocalPath {
    /// Every access through the NIC, as a remote one.
    pub const OFF: LocalPath = LocalPath { on: false, cpu_atomics: false };
}

/// A node's ordered index (`crate::index`), one per protocol state: per node, or per worker
/// where workers keep their own state; each is built from the same store.
#[derive(Default)]
pub struct NodeIndex(pub RefCell<OrderedIndex>);

pub struct NodeState {
    pub me: u16,
    pub nodes: u16,
    /// Coordinator coroutines per worker (every node runs as many): a protocol whose servers
    /// wait for every coordinator to be done counts on it.
    pub coroutines: u32,
    pub catalog: Rc<Catalog>,
    pub cache: RefCell<LocationCache>,
    pub workload: Arc<dyn Workload>,
    pub hybrid: Hybrid,
    pub rdma: Rdma,
    pub local_path: LocalPath,
    /// Every attempt, committed or aborted, in completion order.
    pub history: RefCell<Vec<Txn>>,
    /// What an attempt that aborted read and wrote, by transaction id, from its `settle`
    /// (or the protocol: `attempt::note_accesses`) until the coordinator records it.
    pub aborted_accesses: RefCell<std::collections::BTreeMap<u64, Accesses>>,
    pub stats: RefCell<TxnStats>,
    /// Location-lookup READs a coroutine (worker, coroutine) issued that no stage has counted
    /// yet: the next stage it accounts takes them.
    pub pending_lookups: RefCell<std::collections::BTreeMap<(u16, u32), u64>>,
    /// The data center of each node (empty: one data center).
    pub dc_of: Vec<u16>,
    /// Messages to other data centers a coroutine sent that no stage has counted yet, and
    /// how many of them are answered: the next stage it accounts takes them.
    /// The third count: inter-DC round trips servers waited for on its behalf, beyond its own
    /// (`note_nested_inter_dc`).
    pub pending_inter_dc: RefCell<std::collections::BTreeMap<(u16, u32), InterDcPending>>,
    /// Replicas including the primary (log to `replication - 1` backups).
    pub replication: u16,
    /// A planted bug (the protocol's, `log::SKIP_LOG` or `local::CPU_CAS_ON_HCA`), for the
    /// checker's own tests: never set in real runs.
    pub bug: Option<Bug>,
    /// Sender side, per (worker, backup): where this worker writes in its ring there.
    pub rings: RefCell<Vec<RingTail>>,
    /// Backup side, per (sender node, sender worker) ring: where this node reads.
    pub readers: RefCell<Vec<RingHead>>,
    /// Backup side: every record this node keeps a replica of and has seen written, by
    /// history key.
    pub replica: RefCell<std::collections::BTreeMap<u64, Replica>>,
    /// Faults are scheduled in this run (`None`: none, and nothing below is used).
    pub recovery: Option<Recovery>,
    /// How many times this node restarted (its transaction ids carry it).
    pub incarnation: u32,
    /// Transactions past their commit point and not yet complete (coordinator side).
    pub pending: RefCell<std::collections::BTreeMap<u64, Pending>>,
    /// The write-ahead log (DrTM Sec. 5.6): the commit record of each pending transaction,
    /// written at its commit point, dropped once it is complete. It lives with the logs, so
    /// it survives a crash where the scenario declares the logs durable.
    pub wal: RefCell<std::collections::BTreeMap<u64, Vec<u8>>>,
    /// Chopped transactions in progress, by coordinator (worker, coroutine): the chopping
    /// information of DrTM Sec. 5.6, kept with the logs (`chop::Chopped`).
    pub chopped: RefCell<std::collections::BTreeMap<(u16, u32), Chopped>>,
    /// Deferred pieces waiting for publication on this machine (DrTM Sec. 4.2), kept with
    /// the logs like `chopped` (`chop::publish`).
    pub deferred: RefCell<Deferred>,
    /// The parent of every committed piece of a chopped transaction, (piece id, parent id),
    /// for the check that no transaction saw a parent half done (`chop::half_done`).
    pub pieces: RefCell<Vec<(u64, u64)>>,
    /// Why a coordinator's (worker, coroutine) attempt's logic asked to wait
    /// (`attempt::logic`), until the coordinator takes it.
    pub wait_cause: RefCell<std::collections::BTreeMap<(u16, u32), &'static str>>,
    /// Committed transactions whose write-back gave up on a home that was down, and those
    /// homes: their write-ahead log records stay until each home's rebuild applied them (with
    /// one replica, nothing else holds the values).
    pub skipped: RefCell<std::collections::BTreeMap<u64, std::collections::BTreeSet<u16>>>,
    /// Pending transactions per membership epoch of their commit point: a restarted node
    /// rejoins once none of an earlier epoch is left anywhere.
    pub committing: RefCell<std::collections::BTreeMap<u64, u32>>,
    /// The protocol's own per-node state (`Protocol::participant`): wait lists, sequencer
    /// buffers, clocks.
    pub participant: Box<dyn Any>,
    /// The ordered index lookups are answered from (`index`).
    pub index: NodeIndex,
}

/// A coroutine's inter-DC messages not yet counted: (messages sent, of them answered, round
/// trips servers waited for on its behalf).
pub type InterDcPending = (u64, u64, u64);

/// A chopped transaction in progress, as its coordinator logs it before each piece (Sec.
/// 5.6's chopping information: "which transaction piece to execute after recovery"). It
/// lives with the logs (`NodeState::chopped`): where they are durable, the restarted
/// coordinator finishes the transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct Chopped {
    /// The parent transaction's id (`chop::half_done` groups its pieces by it).
    pub parent: u64,
    pub pieces: Vec<txbed_workloads::TxnSpec>,
    /// The piece running, or the next to run.
    pub next: usize,
    /// The transaction id of that piece's current attempt.
    pub running: u64,
    /// That attempt passed its commit point: set there, in the step that writes its
    /// write-ahead record, so the log never says "not committed" of a committed piece.
    pub committed: bool,
    /// A piece that writes has committed: every later one must run.
    pub wrote: bool,
}

impl Chopped {
    /// The pieces still to run after a crash: none if nothing was written (the transaction
    /// never took effect), else those after the last committed one.
    pub fn remaining(&self) -> &[txbed_workloads::TxnSpec] {
        let done = self.next + self.committed as usize;
        let wrote = self.wrote || (self.committed && self.pieces.get(self.next).is_some_and(|p| !p.writes.is_empty()));
        if wrote {
            &self.pieces[done.min(self.pieces.len())..]
        } else {
            &[]
        }
    }
}

/// A machine's deferred pieces (DrTM Sec. 4.2's publisher results), queued in the step their
/// parent's previous piece committed, applied in queue order, each as a transaction, once
/// an epoch boundary passed (`chop::publish`). The queue lives with the logs (NVRAM where
/// they are durable): a restarted machine publishes what its predecessor queued.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Deferred {
    /// (parent id, piece), oldest first.
    pub queue: std::collections::VecDeque<(u64, txbed_workloads::TxnSpec)>,
    /// The attempt applying the queue's head: its commit point pops the head, so a piece is
    /// applied exactly once across crashes.
    pub running: u64,
    /// The last epoch published (volatile).
    pub epoch: u64,
    /// A coordinator is publishing (volatile): one at a time keeps the queue's order.
    pub publishing: bool,
}

/// An attempt's reads (the version of each record it observed) and writes (the version each
/// would install, or installed if it made it visible), for its history entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accesses {
    pub reads: Vec<txbed_checker::Access>,
    pub writes: Vec<txbed_checker::Access>,
}

/// A backup's copy of a record: the version and writer it last applied, and (with faults in
/// the run) the value, from which a crashed primary is rebuilt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replica {
    pub version: u64,
    pub writer: u64,
    pub value: Vec<u8>,
}

/// What a run with faults needs of the transaction layer (docs/faults.md).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// How long a step that must complete (a write-back, a log record, a release) waits
    /// before it tries a node again that did not answer, ns.
    pub retry_ns: u64,
}

/// A transaction past its commit point: its history entry and external delta, kept until it
/// is complete (or a recovery decides it), and the membership epoch it committed in.
#[derive(Clone, Debug)]
pub struct Pending {
    pub history: Txn,
    pub delta: i64,
    pub epoch: u64,
}

/// Where a log entry goes in a ring.
/// The sender's side of a log ring. Byte counts are monotonic (wrap padding included), so
/// `written - confirmed` is what the backup may not have applied yet.
#[derive(Clone, Copy, Debug, Default)]
pub struct RingTail {
    /// Next ring position.
    pub pos: u64,
    /// Bytes written since the last lazy reclaim.
    pub since: u64,
    /// Next sequence number.
    pub seq: u64,
    pub written: u64,
    /// Bytes the backup reported applied (a synchronous reclaim's reply).
    pub confirmed: u64,
}

/// The backup's side of a log ring: read position, next sequence, bytes consumed (counted
/// as the sender counts `written`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingHead {
    pub pos: u64,
    pub seq: u64,
    pub consumed: u64,
}

pub struct Tail {
    pub pos: u64,
    pub seq: u64,
    /// The writer wrapped: a wrap marker goes at this position first.
    pub wrapped_from: Option<u64>,
    /// Time to tell the backup to reclaim (half a ring written since last time).
    pub reclaim: bool,
}

impl NodeState {
    /// The protocol's per-node state, as its `Protocol::participant` built it.
    pub fn participant<T: 'static>(&self) -> &T {
        match self.participant.downcast_ref::<T>() {
            Some(p) => p,
            None => panic!(
                "the participant state is not a {}: Protocol::participant and the protocol's code disagree",
                std::any::type_name::<T>()
            ),
        }
    }

    /// Counts one execution of stage `s` by coroutine `who` (worker, coroutine): elapsed time,
    /// round trips, bytes sent, record accesses served locally, and the lookup READs that
    /// coroutine issued since its last stage.
    pub fn account(&self, who: (u16, u32), s: Stage, ns: u64, round_trips: u64, bytes: u64, local: u64) {
        let i = stage_index(s);
        let lookups = self.pending_lookups.borrow_mut().remove(&who).unwrap_or(0);
        let (messages, answered, nested) = self.pending_inter_dc.borrow_mut().remove(&who).unwrap_or((0, 0, 0));
        let mut st = self.stats.borrow_mut();
        st.stage_inter_dc_messages[i] += messages + answered;
        st.stage_inter_dc_round_trips[i] += (answered > 0) as u64 + nested;
        st.stage_lookup_reads[i] += lookups;
        st.stage_ns[i] += ns;
        st.stage_round_trips[i] += round_trips;
        st.stage_bytes[i] += bytes;
        st.stage_calls[i] += 1;
        st.stage_local[i] += local;
    }

    /// Whether `node` is in another data center than this one.
    pub fn other_dc(&self, node: u16) -> bool {
        let dc = |x: u16| self.dc_of.get(x as usize).copied().unwrap_or(0);
        dc(node) != dc(self.me)
    }

    /// Coroutine `who` sends a message to `node` (`answered`: one whose reply it will wait
    /// for): counted against its next stage when `node` is in another data center.
    pub fn note_send(&self, who: (u16, u32), node: u16, answered: bool) {
        if self.other_dc(node) {
            let mut p = self.pending_inter_dc.borrow_mut();
            let e = p.entry(who).or_default();
            e.0 += 1;
            e.1 += answered as u64;
        }
    }

    /// Coroutine `who`'s request made a server exchange `messages` with other data centers
    /// (requests and replies), waiting `round_trips` inter-DC round trips in a row before it
    /// answered (a Paxos primary replicating to secondaries): counted against its next stage
    /// with its own. Servers answering in parallel: note the longest chain once.
    pub fn note_nested_inter_dc(&self, who: (u16, u32), messages: u64, round_trips: u64) {
        let mut p = self.pending_inter_dc.borrow_mut();
        let e = p.entry(who).or_default();
        e.0 += messages;
        e.2 += round_trips;
    }

    /// Whether requests about records homed on `node` take the local path.
    pub fn local(&self, node: u16) -> bool {
        self.local_path.on && node == self.me
    }

    pub fn base(&self) -> u64 {
        self.catalog.regions[self.me as usize].addr
    }

    fn ring_tail<R>(&self, worker: u16, backup: u16, f: impl FnOnce(&mut RingTail) -> R) -> R {
        let mut rings = self.rings.borrow_mut();
        let i = worker as usize * self.nodes as usize + backup as usize;
        if rings.len() <= i {
            rings.resize(i + 1, RingTail::default());
        }
        f(&mut rings[i])
    }

    /// Whether `len` more bytes (and any wrap padding) fit in the ring this worker writes on
    /// `backup` without overwriting bytes the backup has not confirmed applied.
    pub fn log_fits(&self, worker: u16, backup: u16, len: u64) -> bool {
        let ring = self.catalog.layout.ring_bytes;
        self.ring_tail(worker, backup, |t| {
            let pad = if t.pos + len + 16 > ring { ring - t.pos } else { 0 };
            t.written + pad + len - t.confirmed <= ring
        })
    }

    pub fn ring_confirmed(&self, worker: u16, backup: u16) -> u64 {
        self.ring_tail(worker, backup, |t| t.confirmed)
    }

    /// Bytes this worker has written to its ring on `backup` so far (wrap padding included).
    pub fn ring_written(&self, worker: u16, backup: u16) -> u64 {
        self.ring_tail(worker, backup, |t| t.written)
    }

    /// Forgets where this node writes in its rings on `backup` and reads the rings `backup`
    /// writes here (the backup restarted, or this node did): both sides start again at 0.
    pub fn reset_rings_with(&self, backup: u16) {
        let workers = self.catalog.layout.log_workers as usize;
        let mut rings = self.rings.borrow_mut();
        for w in 0..workers {
            let i = w * self.nodes as usize + backup as usize;
            if i < rings.len() {
                rings[i] = RingTail::default();
            }
        }
        drop(rings);
        let mut readers = self.readers.borrow_mut();
        for w in 0..workers {
            let slot = backup as usize * workers + w;
            if slot < readers.len() {
                readers[slot] = RingHead::default();
            }
        }
    }

    /// Records the bytes the backup reported applied.
    pub fn log_confirmed(&self, worker: u16, backup: u16, consumed: u64) {
        self.ring_tail(worker, backup, |t| t.confirmed = t.confirmed.max(consumed.min(t.written)));
    }

    /// Reserves `len` bytes in the ring this worker writes on `backup`.
    pub fn log_tail(&self, worker: u16, backup: u16, len: u64) -> Tail {
        let ring = self.catalog.layout.ring_bytes;
        self.ring_tail(worker, backup, |r| {
            let mut wrapped_from = None;
            // An entry never straddles the end; 16 bytes must stay for a wrap marker.
            if r.pos + len + 16 > ring {
                wrapped_from = Some(r.pos);
                r.written += ring - r.pos;
                r.pos = 0;
            }
            let t = Tail { pos: r.pos, seq: r.seq, wrapped_from, reclaim: false };
            r.pos += len;
            r.written += len;
            r.seq += 1;
            r.since += len;
            let reclaim = r.since >= self.rdma.log_reclaim_bytes.min(ring / 2);
            if reclaim {
                r.since = 0;
            }
            Tail { reclaim, ..t }
        })
    }

    pub fn ring_reader(&self, slot: usize) -> RingHead {
        self.readers.borrow().get(slot).copied().unwrap_or_default()
    }

    pub fn set_ring_reader(&self, slot: usize, head: RingHead) {
        let mut r = self.readers.borrow_mut();
        if r.len() <= slot {
            r.resize(slot + 1, RingHead::default());
        }
        r[slot] = head;
    }
}
