//! SUNDIAL (RCC Sec. 4.5, after Yu et al., VLDB 2018): logical leases order transactions by a
//! commit timestamp instead of by real time, so a reader need not block or abort a writer.
//!
//! Every tuple carries a lease `[wts, rts]` in its extension ([`WTS`], [`RTS`]): the version
//! at 24 was written at logical time `wts` and may be read up to `rts`. An attempt:
//!
//! 1. READ the read set (RS) atomically: two doorbelled READs of the tuple that must agree
//!    (everything but `rts`, which concurrent renewals move), or the `H_SD_READ` handler;
//!    `commit_ts = max(commit_ts, wts)`. A tuple locked by another writer aborts.
//! 2. LOCK the write set (WS): CAS + READ, or `H_LOCK` (as NOWAIT); a record also read must
//!    still have the `wts` READ saw; `commit_ts = max(commit_ts, rts + 1)` (and `wts + 1`:
//!    an HCA-level CAS racing a write-back can leave `rts` below `wts`).
//! 3. Run the logic.
//! 4. RENEW every RS lease that does not cover `commit_ts` (`rts < commit_ts`): fails if
//!    `wts` changed or another transaction holds the lock, else `rts = commit_ts`. One-sided:
//!    CAS `rts` (the `rts` last seen -> `commit_ts`) with READs of lock, version and lease
//!    doorbelled behind it, retried while only `rts` moved; RPC: `H_SD_RENEW` does it.
//! 5. LOG, then COMMIT: write back with `wts = rts = commit_ts`, bump the version word, set
//!    the writer, unlock (two WRITEs, only the second signaled; or `H_COMMIT`). RELEASE
//!    unlocks the WS on abort; SUNDIAL takes no read locks.
//!
//! Why it is serializable (the order is `commit_ts`, ties broken by real time): a reader's
//! `commit_ts >= wts` of the version it read (wr edges go forward); a writer's `commit_ts`
//! exceeds the `rts` it read under its lock, and no lease of the old version can grow after
//! that lock is taken (rw edges go forward); versions' `wts` increase (ww edges go forward).
//!
//! Deviation from RCC: its one-sided renewal checks the lock and `wts`, then writes `rts`; a
//! writer can lock and read the old `rts` between the check and the write, and then commit
//! before a reader whose lease it invalidated. Here the lock and lease are READ again behind
//! the CAS on the same QP (they execute after it, no extra round trip): a writer that read
//! `rts` before the CAS had locked before it, so the READ sees its lock (or its new `wts`)
//! and the renewal fails (RCC's order is caught by the checker: a G2-item cycle in 15 of 200
//! YCSB seeds at high contention). A failed renewal may leave `rts` raised, which only makes
//! later writers pick larger timestamps; so a renewal never trusts `rts` alone while the tuple
//! is locked, and READ aborts on a tuple locked by another. The `H_SD_RENEW` handler
//! re-checks the same way, for real backends where NIC atomics and the handler's CPU are not
//! atomic with each other.

use std::rc::Rc;

use txbed_checker::Access;
use txbed_transport::{Ctx, Handled, HandlerCtx, HandlerFn, HostMemory, LocalBuf, Op};
use txbed_workloads::TxnSpec;

use txbed_txn::attempt::{cause, committed, new_history, settle, Attempt};
use txbed_txn::history_key;
use txbed_txn::msg::KeyReq;
use txbed_txn::node::{NodeState, BUSY, MALFORMED, MISSING, OK};
use txbed_txn::ops::{self, Rec, Tally};
use txbed_txn::participant::{BY_KEY, BY_OFFSET};
use txbed_txn::protocol::{handler_id, in_id_order, Bug, LocalBoxFuture, Protocol, RecoveryFloor};
use txbed_txn::stage::Stage;
use txbed_txn::store::{self, LOCK, META_BYTES, VERSION};
use txbed_txn::wire::{u64_at, Put, Reader, WireError};
use txbed_txn::TxnError;

pub struct Sundial;

impl Protocol for Sundial {
    fn name(&self) -> &'static str {
        "SUNDIAL"
    }
    fn description(&self) -> &'static str {
        "leases [wts, rts] renewed at commit, commit timestamps from the leases (RCC Sec. 4.5)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    fn bugs(&self) -> &'static [Bug] {
        &[RENEW_IGNORES_LOCK]
    }
    /// A recovered tuple's lease was in volatile memory: `[wts, rts]` is set beyond every
    /// logical timestamp issued before, so every later reader and writer is ordered after
    /// every transaction that read or wrote it before.
    fn recover_tuple(&self, place: &store::TablePlace, tuple: &mut [u8], floor: &RecoveryFloor) {
        let at = place.ext_at as usize;
        let safe = floor.logical();
        tuple[at + WTS as usize..][..8].copy_from_slice(&safe.to_le_bytes());
        tuple[at + RTS as usize..][..8].copy_from_slice(&safe.to_le_bytes());
    }
    fn ext_bytes(&self, record_bytes: u64) -> u64 {
        ext_bytes(record_bytes)
    }
    fn handler_names(&self) -> &'static [&'static str] {
        &HANDLER_NAMES
    }
    fn handlers(&self, n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
        in_id_order(handlers(n))
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id))
    }
}

/// Renews a read lease without checking the tuple's lock (RCC Sec. 4.5's renewal condition
/// (2) dropped): a lease grows under a writer that already fixed its commit timestamp, so two
/// transactions can each read what the other overwrites (write skew).
pub const RENEW_IGNORES_LOCK: Bug = Bug {
    name: "SundialRenewIgnoresLock",
    about: "renews a lease without checking the lock: the lease grows under a committing writer (write skew)",
};

/// The stages SUNDIAL has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 6] = [Stage::Lock, Stage::Read, Stage::Log, Stage::Release, Stage::Commit, Stage::Renew];

/// READ: request `msg::KeyReq`; reply [`ReadReply`] (the tuple once two copies agree).
pub const H_SD_READ: u16 = handler_id(0);
/// RENEW: request [`RenewReq`]; reply [`RenewReply`].
pub const H_SD_RENEW: u16 = handler_id(1);

/// Handler names, for traces.
pub const HANDLER_NAMES: [&str; 2] = ["SD_READ", "SD_RENEW"];

/// Offsets of the lease words in the tuple extension.
pub const WTS: u64 = 0;
pub const RTS: u64 = 8;

/// How many times a read set is read again when its two copies disagree, and a renewal CAS
/// is retried when only `rts` moved, before the attempt aborts.
const READ_TRIES: u32 = 4;
const RENEW_TRIES: u32 = 4;

/// Tuple extension bytes for a record of `record_bytes`: `wts u64 | rts u64` (RCC Fig. 3).
pub fn ext_bytes(_record_bytes: u64) -> u64 {
    16
}

/// RENEW's request: `offset u64 | ext_at u64 | wts u64 | commit_ts u64 | id u64`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RenewReq {
    /// The tuple, and its extension's offset in it.
    pub offset: u64,
    pub ext_at: u64,
    /// The `wts` the reader saw.
    pub wts: u64,
    pub commit_ts: u64,
    /// The renewing transaction (its own lock does not fail the renewal).
    pub id: u64,
}

impl RenewReq {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40);
        for w in [self.offset, self.ext_at, self.wts, self.commit_ts, self.id] {
            out.put_u64(w);
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let req = RenewReq { offset: r.u64()?, ext_at: r.u64()?, wts: r.u64()?, commit_ts: r.u64()?, id: r.u64()? };
        r.finish()?;
        Ok(req)
    }
}

/// RENEW's reply: `status u8`, OK when the lease covers `commit_ts`, BUSY when the renewal
/// failed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RenewReply {
    pub renewed: bool,
}

impl RenewReply {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.put_u8(if self.renewed { OK } else { BUSY });
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let renewed = match r.u8()? {
            OK => true,
            BUSY => false,
            MALFORMED => return Err(WireError::Rejected),
            s => return Err(WireError::Status(s)),
        };
        r.finish()?;
        Ok(RenewReply { renewed })
    }
}

/// READ's reply: `OK u8 | offset u64 | tuple` (the offset for later one-sided stages, RCC
/// Sec. 5.2), `BUSY` when two copies of the tuple kept disagreeing, or `MISSING`. Unlike
/// `H_FETCH` (DrTM+H's OCC) it carries no index bucket: RCC's read returns the tuple only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadReply {
    Found { offset: u64, tuple: Vec<u8> },
    Busy,
    Missing,
}

impl ReadReply {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            ReadReply::Found { offset, tuple } => {
                out.put_u8(OK);
                out.put_u64(*offset);
                out.put_bytes(tuple);
            }
            ReadReply::Busy => out.put_u8(BUSY),
            ReadReply::Missing => out.put_u8(MISSING),
        }
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let reply = match r.u8()? {
            OK => return Ok(ReadReply::Found { offset: r.u64()?, tuple: r.rest().to_vec() }),
            BUSY => ReadReply::Busy,
            MISSING => ReadReply::Missing,
            MALFORMED => return Err(WireError::Rejected),
            s => return Err(WireError::Status(s)),
        };
        r.finish()?;
        Ok(reply)
    }
}

/// Whether two reads of a tuple with its extension at `ext_at` agree on everything but `rts`
/// (a renewal may move it between the reads; any value read is a valid lower bound).
pub fn same_but_rts(a: &[u8], b: &[u8], ext_at: usize) -> bool {
    let r = ext_at + RTS as usize;
    a.len() == b.len() && a.len() >= r + 8 && a[..r] == b[..r] && a[r + 8..] == b[r + 8..]
}

/// The lease `(wts, rts)` of a tuple read with its extension at `ext_at`.
pub fn lease(tuple: &[u8], ext_at: u64) -> (u64, u64) {
    (u64_at(tuple, (ext_at + WTS) as usize), u64_at(tuple, (ext_at + RTS) as usize))
}

/// Renews a lease in local memory (the participant's side of RENEW): fails if `wts` changed or
/// the tuple is locked by another than `id` (unless `ignore_lock`, the planted bug); else
/// raises `rts` to `ts` by CAS, retrying while only `rts` moves. The checks are repeated after
/// the CAS: a lock taken in between (a NIC CAS, not atomic with this CPU) fails the renewal.
pub fn renew_local(
    mem: &dyn HostMemory,
    tuple: u64,
    ext_at: u64,
    wts: u64,
    ts: u64,
    id: u64,
    ignore_lock: bool,
) -> bool {
    let holds = || {
        let lock = mem.load_u64(tuple + LOCK).unwrap_or(u64::MAX);
        (ignore_lock || lock == 0 || lock == id) && mem.load_u64(tuple + ext_at + WTS).ok() == Some(wts)
    };
    if !holds() {
        return false;
    }
    for _ in 0..RENEW_TRIES {
        let Ok(rts) = mem.load_u64(tuple + ext_at + RTS) else { return false };
        if rts >= ts || mem.cas_u64(tuple + ext_at + RTS, rts, ts) == Ok(rts) {
            return holds();
        }
    }
    false
}

/// The table and tuple offset of a key on this node.
fn find<'a>(n: &'a NodeState, mem: &dyn HostMemory, table: u16, key: u64) -> Option<(&'a store::TablePlace, u64)> {
    let place = n.catalog.layout.table(table)?;
    Some((place, store::find_local(mem, n.base(), place, key)?))
}

/// READ handler: the tuple, read until two copies agree (atomic on real backends too), and
/// its offset.
fn read_handler(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Ok(KeyReq { table, key }) = KeyReq::decode(req) else { return reply.push(MALFORMED) };
    let Some((place, off)) = find(n, mem, table, key) else { return ReadReply::Missing.encode_into(reply) };
    let len = place.tuple_bytes as usize;
    let (mut first, mut second) = (vec![0u8; len], vec![0u8; len]);
    let _ = mem.read(n.base() + off, &mut first);
    let stable = (0..READ_TRIES).any(|_| {
        let _ = mem.read(n.base() + off, &mut second);
        let same = same_but_rts(&first, &second, place.ext_at as usize);
        std::mem::swap(&mut first, &mut second);
        same
    });
    if !stable {
        return ReadReply::Busy.encode_into(reply);
    }
    ReadReply::Found { offset: off, tuple: first }.encode_into(reply);
}

fn renew_handler(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Ok(RenewReq { offset, ext_at, wts, commit_ts, id }) = RenewReq::decode(req) else {
        return reply.push(MALFORMED);
    };
    let ignore_lock = n.bug == Some(RENEW_IGNORES_LOCK);
    let renewed = renew_local(mem, n.base() + offset, ext_at, wts, commit_ts, id, ignore_lock);
    RenewReply { renewed }.encode_into(reply);
}

/// SUNDIAL's RPC handlers (ids 40..=49).
pub fn handlers(n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    let replying = |misses: u64, f: fn(&NodeState, &dyn HostMemory, &[u8], &mut Vec<u8>)| -> Rc<HandlerFn> {
        let n = n.clone();
        Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
            ctx.memory_misses(misses);
            f(&n, ctx.mem, req, ctx.reply);
            Handled::Reply
        })
    };
    vec![(H_SD_READ, replying(BY_KEY, read_handler)), (H_SD_RENEW, replying(BY_OFFSET, renew_handler))]
}

fn ext_at(n: &NodeState, table: u16) -> u64 {
    n.catalog.layout.table(table).map_or(0, |p| p.ext_at)
}

fn record_bytes(n: &NodeState, table: u16) -> usize {
    n.catalog.layout.table(table).map_or(0, |p| p.spec.record_bytes as usize)
}

/// The record bytes of a tuple (without the lease after them).
fn record<'a>(n: &NodeState, r: &'a Rec) -> &'a [u8] {
    &r.tuple[META_BYTES as usize..META_BYTES as usize + record_bytes(n, r.table)]
}

fn lease_of(n: &NodeState, r: &Rec) -> (u64, u64) {
    lease(&r.tuple, ext_at(n, r.table))
}

/// Whether a lock word leaves the tuple free for transaction `id`.
fn free(lock: u64, id: u64) -> bool {
    lock == 0 || lock == id
}

/// READ (RCC Sec. 4.5, atomic tuple read as MVCC's double read, Sec. 4.4): fills every RS
/// record's tuple. Returns false (abort) if one is locked by another transaction or its two
/// copies keep disagreeing.
async fn read_set(ctx: &Ctx, n: &NodeState, recs: &mut [Rec], id: u64) -> Result<bool, TxnError> {
    let rs: Vec<usize> = (0..recs.len()).filter(|&i| !recs[i].write).collect();
    if rs.is_empty() {
        return Ok(true);
    }
    let t0 = ctx.now();
    // `waits`: batches that went through the NIC (round trips).
    let (mut rounds, mut waits, mut t) = (0u64, 0u64, Tally::default());
    let mut stable = true;
    if n.hybrid.onesided(Stage::Read) {
        ops::locate_all(ctx, n, recs, |r| !r.write).await?;
        let s = ctx.scratch();
        // The first half of the scratch holds the copies (as ops.rs lays it out); a read set
        // too large for it goes in batches.
        let end = s.addr + s.len as u64 / 2;
        let mut todo = rs.clone();
        while !todo.is_empty() {
            if rounds == READ_TRIES as u64 {
                stable = false;
                break;
            }
            rounds += 1;
            let mut again = Vec::new();
            let mut k = 0;
            while k < todo.len() {
                let mut at = s.addr;
                let mut slots = Vec::new();
                let batch_from = t.sent;
                while let Some(&i) = todo.get(k) {
                    let r = &recs[i];
                    let len = ops::tuple_bytes(n, r.table);
                    if at + 2 * len as u64 > end {
                        if slots.is_empty() {
                            let (bytes, limit) = (2 * len as u64, end - s.addr);
                            return Err(TxnError::TooBig {
                                what: "two tuple copies",
                                bytes,
                                limit,
                                within: "scratch half",
                            });
                        }
                        break;
                    }
                    let remote = n.catalog.remote(r.home, r.offset, len);
                    let first = Op::Read { local: LocalBuf { lkey: s.lkey, addr: at, len }, remote };
                    let second = Op::Read { local: LocalBuf { lkey: s.lkey, addr: at + len as u64, len }, remote };
                    // Two doorbelled READs; the second executes after the first (per-QP order).
                    let path = ops::issue(ctx, n, r, vec![(first, false), (second, true)]).await?;
                    t.add(path, 2 * len as u64);
                    if !n.rdma.speculative {
                        ctx.wait().await?;
                    }
                    slots.push((i, at, len as usize));
                    at += 2 * len as u64;
                    k += 1;
                }
                ctx.wait().await?;
                waits += (t.sent > batch_from) as u64;
                for (i, at, len) in slots {
                    let mut two = vec![0u8; 2 * len];
                    ctx.read_local(at, &mut two)?;
                    if same_but_rts(&two[..len], &two[len..], ext_at(n, recs[i].table) as usize) {
                        two.truncate(len);
                        recs[i].tuple = two;
                    } else {
                        again.push(i);
                    }
                }
            }
            todo = again;
        }
    } else {
        let mut calls = Vec::new();
        for &i in &rs {
            let r = &recs[i];
            let req = KeyReq { table: r.table, key: r.key }.encode();
            calls.push((i, ops::call(ctx, n, r.home, H_SD_READ, &req).await?));
            if !n.rdma.speculative {
                ctx.wait().await?;
            }
            t.add(ops::rpc_path(n, r.home), req.len() as u64);
        }
        waits = t.round_trips();
        ctx.wait().await?;
        for (i, call) in calls {
            let r = &mut recs[i];
            let rep = ops::reply(ctx, call, "SD_READ")?;
            if ops::rpc_path(n, r.home) == ops::Path::Nic {
                t.bytes += rep.len() as u64;
            }
            match ReadReply::decode(&rep)? {
                ReadReply::Found { offset, tuple } => {
                    r.tuple = ops::tuple_for(n, r, tuple)?;
                    r.offset = offset;
                }
                ReadReply::Busy => stable = false,
                ReadReply::Missing => return Err(TxnError::NotFound { node: r.home, table: r.table, key: r.key }),
            }
        }
    }
    ops::account(ctx, n, Stage::Read, t0, waits, t.bytes, t.local);
    Ok(stable && rs.iter().all(|&i| free(recs[i].lock_word(), id)))
}

/// RENEW (RCC Sec. 4.5): extends every RS lease that ends before `ts`. Returns false (abort)
/// if a record was overwritten since READ or is locked by another transaction.
async fn renew(ctx: &Ctx, n: &NodeState, recs: &[Rec], ts: u64, id: u64) -> Result<bool, TxnError> {
    // (record, rts last seen): the leases that do not cover `ts`.
    let mut todo: Vec<(usize, u64)> = (0..recs.len())
        .filter(|&i| !recs[i].write)
        .map(|i| (i, lease_of(n, &recs[i]).1))
        .filter(|&(_, rts)| rts < ts)
        .collect();
    if todo.is_empty() {
        return Ok(true);
    }
    let ignore_lock = n.bug == Some(RENEW_IGNORES_LOCK);
    let t0 = ctx.now();
    // `round_trips`: rounds that went through the NIC.
    let (mut rounds, mut round_trips, mut t) = (0u64, 0u64, Tally::default());
    let mut renewed = true;
    if n.hybrid.onesided(Stage::Renew) {
        let s = ctx.scratch();
        if 40 * todo.len() as u64 > s.len as u64 / 2 {
            let (bytes, limit) = (40 * todo.len() as u64, s.len as u64 / 2);
            return Err(TxnError::TooBig { what: "lease renewal buffers", bytes, limit, within: "scratch half" });
        }
        while !todo.is_empty() {
            if rounds == RENEW_TRIES as u64 {
                renewed = false;
                break;
            }
            rounds += 1;
            let round_from = t.sent;
            // Per record, 40 bytes: CAS result | lock | version | wts | rts.
            let mut slots = Vec::new();
            for (k, &(i, seen)) in todo.iter().enumerate() {
                let r = &recs[i];
                let at = s.addr + 40 * k as u64;
                // A sentinel, so a result that never arrived cannot read as a won CAS.
                ctx.store_local(at, !seen)?;
                let e = ext_at(n, r.table);
                let cas = Op::Cas {
                    local: LocalBuf { lkey: s.lkey, addr: at, len: 8 },
                    remote: n.catalog.remote(r.home, r.offset + e + RTS, 8),
                    compare: seen,
                    swap: ts,
                };
                // Executed after the CAS (per-QP order): did a writer lock, or commit, first?
                let head = Op::Read {
                    local: LocalBuf { lkey: s.lkey, addr: at + 8, len: 16 },
                    remote: n.catalog.remote(r.home, r.offset + LOCK, 16),
                };
                let lease = Op::Read {
                    local: LocalBuf { lkey: s.lkey, addr: at + 24, len: 16 },
                    remote: n.catalog.remote(r.home, r.offset + e, 16),
                };
                let path = ops::issue(ctx, n, r, vec![(cas, false), (head, false), (lease, true)]).await?;
                t.add(path, 8 + 32);
                slots.push((i, seen, at));
            }
            round_trips += (t.sent > round_from) as u64;
            ctx.wait().await?;
            todo.clear();
            for (i, seen, at) in slots {
                let mut b = [0u8; 40];
                ctx.read_local(at, &mut b)?;
                let (old, lock, version, wts, rts) =
                    (u64_at(&b, 0), u64_at(&b, 8), u64_at(&b, 16), u64_at(&b, 24), u64_at(&b, 32));
                let r = &recs[i];
                let same = wts == lease_of(n, r).0 && version == u64_at(&r.tuple, VERSION as usize);
                if !same || !(ignore_lock || free(lock, id)) {
                    renewed = false;
                } else if old != seen && rts < ts {
                    todo.push((i, rts)); // only rts moved (another reader renewed): again
                }
            }
            if !renewed {
                break;
            }
        }
    } else {
        let mut calls = Vec::new();
        for &(i, _) in &todo {
            let r = &recs[i];
            let req =
                RenewReq { offset: r.offset, ext_at: ext_at(n, r.table), wts: lease_of(n, r).0, commit_ts: ts, id };
            calls.push((i, ops::call(ctx, n, r.home, H_SD_RENEW, &req.encode()).await?));
            t.add(ops::rpc_path(n, r.home), 40);
        }
        round_trips = t.round_trips();
        ctx.wait().await?;
        for (i, call) in calls {
            let rep = ops::reply(ctx, call, "SD_RENEW")?;
            if ops::rpc_path(n, recs[i].home) == ops::Path::Nic {
                t.bytes += rep.len() as u64;
            }
            renewed &= RenewReply::decode(&rep)?.renewed;
        }
    }
    ops::account(ctx, n, Stage::Renew, t0, round_trips, t.bytes, t.local);
    Ok(renewed)
}

/// Runs the transaction's logic on the records as read (the record bytes only).
fn execute(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, recs: &[Rec]) -> Option<(Vec<Vec<u8>>, i64)> {
    let reads: Vec<&[u8]> = recs.iter().filter(|r| !r.write).map(|r| record(n, r)).collect();
    let olds: Vec<&[u8]> = recs.iter().filter(|r| r.write).map(|r| record(n, r)).collect();
    ctx.compute(spec.compute_ns);
    txbed_txn::attempt::logic(ctx, n, spec, &reads, &olds)
}

/// Abort causes of SUNDIAL's own: a read-set record locked by a writer (or its two copies
/// kept disagreeing), and a read lease that could not be extended to the commit timestamp.
const READ_FAILED: &str = "read: locked or torn";
const RENEW_FAILED: &str = "renew: lease not extended";

/// Runs one attempt of `spec` as transaction `id` (nonzero; also the lock owner).
async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, &mut recs).await;
    settle(ctx, n, r, &recs, id, id).await
}

async fn run(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, recs: &mut [Rec]) -> Result<Attempt, TxnError> {
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    let mut commit_ts = 0u64;
    // READ: the reader is ordered after the version's writer.
    if !read_set(ctx, n, recs, id).await? {
        return Ok(Attempt::Conflict(READ_FAILED));
    }
    for r in recs.iter().filter(|r| !r.write) {
        commit_ts = commit_ts.max(lease_of(n, r).0);
    }
    // LOCK: the writer is ordered after every lease granted on the version it replaces.
    if !spec.read_only() {
        let locked = ops::lock_and_read(ctx, n, recs, |r| r.write, id).await?;
        // A record also read must not have been overwritten since.
        let unchanged = recs.iter().filter(|w| w.write && w.locked).all(|w| {
            recs.iter()
                .filter(|r| !r.write && r.table == w.table && r.key == w.key)
                .all(|r| lease_of(n, r).0 == lease_of(n, w).0)
        });
        if !locked || !unchanged {
            ops::release(ctx, n, recs, |r| r.write, id).await?;
            return Ok(Attempt::Conflict(if locked { cause::CHANGED } else { cause::LOCK_BUSY }));
        }
        for w in recs.iter().filter(|r| r.write) {
            // rts + 1; wts too, in case a CAS racing a write-back left rts below wts.
            let (wts, rts) = lease_of(n, w);
            commit_ts = commit_ts.max(wts.max(rts) + 1);
        }
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        ops::release(ctx, n, recs, |r| r.write, id).await?;
        return Ok(Attempt::UserAbort);
    };
    // Validation: every read lease must cover commit_ts.
    if !renew(ctx, n, recs, commit_ts, id).await? {
        ops::release(ctx, n, recs, |r| r.write, id).await?;
        return Ok(Attempt::Conflict(RENEW_FAILED));
    }
    let mut h = new_history(ctx, n, spec, id, start_ns);
    if spec.read_only() {
        for r in recs {
            h.reads.push(Access { key: history_key(r.table, r.key), version: r.version().1 });
        }
        committed(ctx, n, h, delta);
        return Ok(Attempt::Committed);
    }
    ops::history_of(recs, &mut h);
    if !ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
        ops::abandon(ctx, n, recs, id).await;
        return Ok(Attempt::Conflict(cause::VIEW_CHANGED));
    }
    ops::log(ctx, n, recs, &new_values, id).await?;
    // COMMIT writes the record and the new lease [commit_ts, commit_ts] after it.
    let with_lease: Vec<Vec<u8>> = recs
        .iter()
        .filter(|r| r.write)
        .zip(&new_values)
        .map(|(r, v)| {
            let mut b = v.clone();
            b.resize((ext_at(n, r.table) - META_BYTES) as usize, 0);
            b.put_u64(commit_ts);
            b.put_u64(commit_ts);
            b
        })
        .collect();
    ops::write_back(ctx, n, recs, &with_lease, id, false).await?;
    ops::complete(ctx, n, id);
    Ok(Attempt::Committed)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use txbed_transport::{MemError, MemoryRegion};

    use super::*;

    /// Plain memory for the handler's logic.
    struct Mem(RefCell<Vec<u8>>);

    impl HostMemory for Mem {
        fn regions(&self) -> Vec<MemoryRegion> {
            Vec::new()
        }
        fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
            out.copy_from_slice(&self.0.borrow()[addr as usize..addr as usize + out.len()]);
            Ok(())
        }
        fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
            self.0.borrow_mut()[addr as usize..addr as usize + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn cas_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
            let old = self.load_u64(addr)?;
            if old == compare {
                self.store_u64(addr, swap)?;
            }
            Ok(old)
        }
        fn faa_u64(&self, addr: u64, add: u64) -> Result<u64, MemError> {
            let old = self.load_u64(addr)?;
            self.store_u64(addr, old + add)?;
            Ok(old)
        }
    }

    const EXT: u64 = 32;

    /// A tuple at 0: lock, version, writer, 8-byte record, lease.
    fn tuple(lock: u64, wts: u64, rts: u64) -> Mem {
        let m = Mem(RefCell::new(vec![0; 48]));
        m.store_u64(LOCK, lock).unwrap();
        m.store_u64(EXT + WTS, wts).unwrap();
        m.store_u64(EXT + RTS, rts).unwrap();
        m
    }

    #[test]
    fn renewal_raises_rts_only_when_wts_is_unchanged_and_unlocked() {
        let m = tuple(0, 5, 7);
        assert!(renew_local(&m, 0, EXT, 5, 9, 1, false));
        assert_eq!(m.load_u64(EXT + RTS).unwrap(), 9);
        // Already covered: unchanged.
        assert!(renew_local(&m, 0, EXT, 5, 8, 1, false));
        assert_eq!(m.load_u64(EXT + RTS).unwrap(), 9);
        // Overwritten since the read.
        assert!(!renew_local(&m, 0, EXT, 4, 12, 1, false));
        assert_eq!(m.load_u64(EXT + RTS).unwrap(), 9);
        // Locked by another: fails even when the lease already covers; the owner may renew.
        let m = tuple(3, 5, 20);
        assert!(!renew_local(&m, 0, EXT, 5, 10, 1, false));
        assert!(renew_local(&m, 0, EXT, 5, 25, 3, false));
        assert_eq!(m.load_u64(EXT + RTS).unwrap(), 25);
        // The planted bug ignores the lock.
        assert!(renew_local(&m, 0, EXT, 5, 30, 1, true));
    }

    #[test]
    fn renewal_messages_round_trip() {
        let req = RenewReq { offset: 64, ext_at: 32, wts: 5, commit_ts: 9, id: 3 };
        assert_eq!(req.encode().len(), 40);
        assert_eq!(RenewReq::decode(&req.encode()), Ok(req));
        assert!(RenewReq::decode(&req.encode()[..39]).is_err());
        for renewed in [true, false] {
            let mut b = Vec::new();
            RenewReply { renewed }.encode_into(&mut b);
            assert_eq!(RenewReply::decode(&b), Ok(RenewReply { renewed }));
        }
        assert_eq!(RenewReply::decode(&[MALFORMED]), Err(WireError::Rejected));
        assert_eq!(RenewReply::decode(&[]), Err(WireError::Short { need: 1, have: 0 }));
    }

    #[test]
    fn read_replies_carry_the_tuple_and_its_offset_only() {
        let found = ReadReply::Found { offset: 64, tuple: vec![3; 48] };
        let mut b = Vec::new();
        found.encode_into(&mut b);
        assert_eq!(b.len(), 1 + 8 + 48, "status, offset, tuple: no index bucket");
        assert_eq!(ReadReply::decode(&b), Ok(found));
        for r in [ReadReply::Busy, ReadReply::Missing] {
            let mut b = Vec::new();
            r.encode_into(&mut b);
            assert_eq!(ReadReply::decode(&b), Ok(r));
        }
        assert_eq!(ReadReply::decode(&[MALFORMED]), Err(WireError::Rejected));
        assert_eq!(ReadReply::decode(&[BUSY, 0]), Err(WireError::Trailing { extra: 1 }));
    }

    #[test]
    fn reads_agree_except_for_rts() {
        let a = tuple(0, 5, 7).0.into_inner();
        let mut b = a.clone();
        assert!(same_but_rts(&a, &b, EXT as usize));
        b[(EXT + RTS) as usize] = 9;
        assert!(same_but_rts(&a, &b, EXT as usize));
        assert_eq!(lease(&b, EXT), (5, 9));
        for i in [0, 8, 24, (EXT + WTS) as usize] {
            let mut c = a.clone();
            c[i] ^= 1;
            assert!(!same_but_rts(&a, &c, EXT as usize), "byte {i}");
        }
    }
}
