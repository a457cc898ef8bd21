//! What every node of a transaction run shares: the catalog, the location cache, the
//! workload, the history it records, and the participant's RPC handlers.

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use txbed_checker::Txn;
use txbed_transport::{Handled, HandlerCtx, HandlerFn, HostMemory};
use txbed_workloads::Workload;

use crate::locate::{Catalog, LocationCache};
use crate::protocol::{handler_id, Bug, ProtocolRef, Rdma, FIRST_PROTOCOL_HANDLER};
use crate::stage::{Hybrid, Stage};
use crate::store::{self, TablePlace, LOCK, META_BYTES, VERSION, WRITER};

/// RPC handler ids.
pub const H_LOCK: u16 = 10;
pub const H_RELEASE: u16 = 11;
pub const H_COMMIT: u16 = 12;
pub const H_LOG: u16 = 13;
pub const H_RECLAIM: u16 = 14;
pub const H_FETCH: u16 = 15;
pub const H_VALIDATE: u16 = 16;
pub const H_LOOKUP: u16 = 17;
const _: () = assert!(H_LOOKUP < FIRST_PROTOCOL_HANDLER);

/// Handler names, for traces.
pub const HANDLER_NAMES: [(u16, &str); 8] = [
    (H_LOCK, "LOCK"),
    (H_RELEASE, "RELEASE"),
    (H_COMMIT, "COMMIT"),
    (H_LOG, "LOG"),
    (H_RECLAIM, "RECLAIM"),
    (H_FETCH, "FETCH"),
    (H_VALIDATE, "VALIDATE"),
    (H_LOOKUP, "LOOKUP"),
];

pub const OK: u8 = 0;
pub const BUSY: u8 = 1;
pub const MISSING: u8 = 2;

/// Counters of one node's transactions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnStats {
    pub committed: u64,
    pub aborted_conflict: u64,
    pub aborted_user: u64,
    pub log_records: u64,
    pub log_bytes: u64,
    /// Sum of committed transactions' external deltas (money in minus money out).
    pub external_delta: i64,
    /// Per stage (index = position of the bit, RCC numbering): time spent, round trips
    /// (waits for the network), and bytes sent.
    pub stage_ns: [u64; Stage::COUNT],
    pub stage_round_trips: [u64; Stage::COUNT],
    pub stage_bytes: [u64; Stage::COUNT],
    pub stage_calls: [u64; Stage::COUNT],
}

impl TxnStats {
    /// Folds another node's counters in.
    pub fn add(&mut self, o: &TxnStats) {
        self.committed += o.committed;
        self.aborted_conflict += o.aborted_conflict;
        self.aborted_user += o.aborted_user;
        self.log_records += o.log_records;
        self.log_bytes += o.log_bytes;
        self.external_delta += o.external_delta;
        for i in 0..Stage::COUNT {
            self.stage_ns[i] += o.stage_ns[i];
            self.stage_round_trips[i] += o.stage_round_trips[i];
            self.stage_bytes[i] += o.stage_bytes[i];
            self.stage_calls[i] += o.stage_calls[i];
        }
    }
}

/// Index of a stage's counters.
pub fn stage_index(s: Stage) -> usize {
    (s.bit().trailing_zeros()) as usize
}

pub struct NodeState {
    pub me: u16,
    pub nodes: u16,
    pub catalog: Rc<Catalog>,
    pub cache: RefCell<LocationCache>,
    pub workload: Arc<dyn Workload>,
    /// The protocol the node runs.
    pub protocol: ProtocolRef,
    pub hybrid: Hybrid,
    pub rdma: Rdma,
    /// Committed (and user-aborted) transactions, in completion order.
    pub history: RefCell<Vec<Txn>>,
    pub stats: RefCell<TxnStats>,
    /// Replicas including the primary (log to `replication - 1` backups).
    pub replication: u16,
    /// A planted bug (the protocol's or `log::SKIP_LOG`), for the checker's own tests: never
    /// set in real runs.
    pub bug: Option<Bug>,
    /// Sender side, per (worker, backup): where this worker writes in its ring there.
    pub rings: RefCell<Vec<RingTail>>,
    /// Backup side, per (sender node, sender worker) ring: where this node reads.
    pub readers: RefCell<Vec<RingHead>>,
    /// Backup side: the version of every record this node keeps a replica of.
    pub replica: RefCell<std::collections::BTreeMap<u64, u64>>,
    /// The protocol's own per-node state (`Protocol::participant`): wait lists, sequencer
    /// buffers, clocks.
    pub participant: Box<dyn Any>,
    /// The ordered index lookups are answered from (`index`).
    pub index: crate::index::NodeIndex,
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
                "{}'s participant state is not a {}: Protocol::participant and the protocol's code disagree",
                self.protocol.name(),
                std::any::type_name::<T>()
            ),
        }
    }

    /// Accounts one execution of a stage: elapsed time, round trips and bytes.
    pub fn account(&self, s: Stage, ns: u64, round_trips: u64, bytes: u64) {
        let i = stage_index(s);
        let mut st = self.stats.borrow_mut();
        st.stage_ns[i] += ns;
        st.stage_round_trips[i] += round_trips;
        st.stage_bytes[i] += bytes;
        st.stage_calls[i] += 1;
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
            let reclaim = r.since * 2 >= ring;
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

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]))
}

/// LOCK: CAS the owner into the tuple's lock word (so a one-sided RELEASE can later clear
/// it, RCC Sec. 5.2) and reply with the tuple's offset and bytes.
/// Request: table u16 | pad 6 | key u64 | owner u64. Reply: status u8 | offset u64 | tuple.
/// The table and tuple offset a request's `table u16 | pad 6 | key u64` prefix names, or
/// `MISSING` in the reply.
fn find<'a>(
    n: &'a NodeState,
    mem: &dyn HostMemory,
    req: &[u8],
    reply: &mut Vec<u8>,
) -> Option<(&'a TablePlace, u64, u64)> {
    let table = u16::from_le_bytes([req[0], req[1]]);
    let key = u64_at(req, 8);
    let found = n.catalog.layout.table(table).and_then(|p| Some((p, store::find_local(mem, n.base(), p, key)?, key)));
    if found.is_none() {
        reply.push(MISSING);
    }
    found
}

fn lock(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let owner = u64_at(req, 16);
    let Some((place, off, _)) = find(n, mem, req, reply) else { return };
    let old = mem.cas_u64(n.base() + off + LOCK, 0, owner).unwrap_or(u64::MAX);
    if old != 0 {
        reply.push(BUSY);
        return;
    }
    reply.push(OK);
    reply.extend_from_slice(&off.to_le_bytes());
    let mut t = vec![0u8; place.tuple_bytes as usize];
    let _ = mem.read(n.base() + off, &mut t);
    reply.extend_from_slice(&t);
}

/// FETCH (OCC's execution by RPC): the tuple, its offset, and the key's main bucket so the
/// caller's location cache fills even over RPC (DrTM+H Sec. 5.1).
/// Request: table u16 | pad 6 | key u64. Reply: status | offset | bucket offset | bucket | tuple.
fn fetch(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Some((place, off, key)) = find(n, mem, req, reply) else { return };
    let bucket_at = place.buckets_at + store::bucket_of(key, place.buckets) * store::BUCKET_BYTES;
    let mut b = [0u8; store::BUCKET_BYTES as usize];
    let _ = mem.read(n.base() + bucket_at, &mut b);
    let mut t = vec![0u8; place.tuple_bytes as usize];
    let _ = mem.read(n.base() + off, &mut t);
    reply.push(OK);
    reply.extend_from_slice(&off.to_le_bytes());
    reply.extend_from_slice(&bucket_at.to_le_bytes());
    reply.extend_from_slice(&b);
    reply.extend_from_slice(&t);
}

/// VALIDATE: the tuple's lock and version words. Request: offset u64.
fn validate(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let off = u64_at(req, 0);
    let lock = mem.load_u64(n.base() + off + LOCK).unwrap_or(u64::MAX);
    let ver = mem.load_u64(n.base() + off + VERSION).unwrap_or(u64::MAX);
    reply.extend_from_slice(&lock.to_le_bytes());
    reply.extend_from_slice(&ver.to_le_bytes());
}

/// RELEASE: clear the lock if `owner` holds it. Request: offset u64 | owner u64.
fn release(n: &NodeState, mem: &dyn HostMemory, req: &[u8]) {
    let (off, owner) = (u64_at(req, 0), u64_at(req, 8));
    let _ = mem.cas_u64(n.base() + off + LOCK, owner, 0);
}

/// COMMIT: write back version, writer and record, then clear the lock.
/// Request: offset u64 | version word u64 | writer u64 | record.
fn commit(n: &NodeState, mem: &dyn HostMemory, req: &[u8]) {
    let off = u64_at(req, 0);
    let base = n.base() + off;
    let _ = mem.write(base + META_BYTES, &req[24..]);
    let _ = mem.store_u64(base + VERSION, u64_at(req, 8));
    let _ = mem.store_u64(base + WRITER, u64_at(req, 16));
    let _ = mem.store_u64(base + LOCK, 0);
}

/// A handler that runs `f` on the node's state and replies with what it wrote.
fn replying(n: &Rc<NodeState>, f: fn(&NodeState, &dyn HostMemory, &[u8], &mut Vec<u8>)) -> Rc<HandlerFn> {
    let n = n.clone();
    Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
        f(&n, ctx.mem, req, ctx.reply);
        Handled::Reply
    })
}

/// Every handler node `n` serves, with its id and its name (for traces): the common ones
/// (ids 10..=16), the index's lookup (17), then its protocol's at `handler_id(0)`, ...
pub fn handlers(n: &Rc<NodeState>) -> Vec<(u16, &'static str, Rc<HandlerFn>)> {
    let mut hs: Vec<(u16, &'static str, Rc<HandlerFn>)> =
        common_handlers(n).into_iter().chain(crate::index::handlers(n)).map(|(id, h)| (id, name_of(id), h)).collect();
    let names = n.protocol.handler_names();
    let own = n.protocol.handlers(n);
    assert_eq!(
        names.len(),
        own.len(),
        "{}: handler_names() and handlers() must list the same handlers",
        n.protocol.name()
    );
    for (i, (name, h)) in names.iter().zip(own).enumerate() {
        hs.push((handler_id(i), name, h));
    }
    hs
}

/// The name of a shared handler.
fn name_of(id: u16) -> &'static str {
    match HANDLER_NAMES.iter().find(|(i, _)| *i == id) {
        Some((_, name)) => name,
        None => panic!("shared handler {id} has no name in HANDLER_NAMES"),
    }
}

/// The handlers every protocol shares (ids 10..=16).
fn common_handlers(n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    let log_node = n.clone();
    let reclaim_node = n.clone();
    vec![
        (H_LOCK, replying(n, lock)),
        (H_RELEASE, replying(n, |n, mem, req, _| release(n, mem, req))),
        (H_COMMIT, replying(n, |n, mem, req, _| commit(n, mem, req))),
        (H_FETCH, replying(n, fetch)),
        (H_VALIDATE, replying(n, validate)),
        (
            H_LOG,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                // The RPC log handler copies the record and applies it (DrTM+H Sec. 5.4).
                ctx.compute((req.len() as u64).div_ceil(10));
                crate::log::apply(&log_node, req);
                Handled::Reply
            }),
        ),
        (
            H_RECLAIM,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                // Applies what the ring holds; a caller waiting for room (not a lazy one-way
                // reclaim) hears how many bytes are now consumed.
                if req.len() < 4 {
                    return Handled::NoReply;
                }
                let sender = u16::from_le_bytes([req[0], req[1]]);
                let worker = u16::from_le_bytes([req[2], req[3]]);
                let consumed = crate::log::drain_ring(&reclaim_node, ctx.mem, sender, worker);
                ctx.reply.extend_from_slice(&consumed.to_le_bytes());
                Handled::Reply
            }),
        ),
    ]
}
