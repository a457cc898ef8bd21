//! The transaction operations protocols are built from (RCC Sec. 4.1), each in its RPC and
//! one-sided form, chosen by the stage's bit of the hybrid code:
//!
//! | operation | one-sided | RPC |
//! | --- | --- | --- |
//! | fetch (READ) | location cache or index READs, then one READ of the tuple | `H_FETCH` returns tuple, offset and the key's bucket (fills the cache) |
//! | lock + read (LOCK) | CAS (unsignaled) + READ on one QP | `H_LOCK`: CAS at the participant, reply with tuple |
//! | validate (VALIDATE) | READ of lock and version | `H_VALIDATE` returns them |
//! | log (LOG) | WRITE into the backup's ring | `H_LOG` |
//! | write back + unlock (COMMIT) | WRITE body, then WRITE lock = 0, only the second signaled | `H_COMMIT` |
//! | unlock (RELEASE) | WRITE lock = 0 | `H_RELEASE` |
//!
//! Scratch layout per coroutine (`buffers_end`, `log_area`, `staging_at`): the first half
//! lock/fetch/validate buffers and index buckets, the third quarter the log record, the last
//! write-back staging ([0, 8), [8, 12), [12, 16) KiB of the default 16 KiB).

use txbed_checker::{Access, Txn};
use txbed_transport::{CallId, Ctx, LocalBuf, Op, Payload, QpId};
use txbed_workloads::TxnSpec;

use crate::error::TxnError;
use crate::locate::locate;
use crate::msg::{
    CommitReq, FetchReply, KeyReq, LockReply, LockReq, LogEntry, LogRecord, ReleaseReq, ValidateReply, ValidateReq,
};
use crate::node::{NodeState, BUSY, H_COMMIT, H_FETCH, H_LOCK, H_RELEASE, H_VALIDATE};
use crate::post::check_buffers;
pub use crate::post::{buffers_end, endpoint, inline_or_staged, log_area, qp, room, staging_at};
use crate::stage::Stage;
use crate::store::history_key;
use crate::store::{split_version_word, version_word, LOCK, META_BYTES, VERSION};
use crate::wire::{u64_at, WireError};

/// One record a transaction accesses.
pub struct Rec {
    pub table: u16,
    pub key: u64,
    pub home: u16,
    pub write: bool,
    /// Offset of the tuple in its home's store region (known after fetch or lock).
    pub offset: u64,
    pub locked: bool,
    /// The tuple as fetched or read under lock.
    pub tuple: Vec<u8>,
}

/// The QP for requests about `r` at its home (`post::record_qp`).
pub fn rec_qp(ctx: &Ctx, r: &Rec) -> Result<QpId, TxnError> {
    crate::post::record_qp(ctx, r.home, r.table, r.key)
}

impl Rec {
    pub fn record(&self) -> &[u8] {
        &self.tuple[META_BYTES as usize..]
    }
    pub fn lock_word(&self) -> u64 {
        u64_at(&self.tuple, LOCK as usize)
    }
    /// (incarnation, version) of the tuple as read.
    pub fn version(&self) -> (u16, u64) {
        split_version_word(u64_at(&self.tuple, VERSION as usize))
    }
}

/// The records of `spec`: its reads, then its read-modify-writes.
pub fn records(n: &NodeState, spec: &TxnSpec) -> Vec<Rec> {
    spec.reads
        .iter()
        .map(|k| (k, false))
        .chain(spec.writes.iter().map(|k| (k, true)))
        .map(|(k, write)| {
            let home = n.workload.home(*k, n.nodes);
            debug_assert!(home < n.nodes, "{k:?} lives on node {home} of {}", n.nodes);
            Rec { table: k.table, key: k.row, home, write, offset: 0, locked: false, tuple: Vec::new() }
        })
        .collect()
}

/// `tuple` as a reply carried it for `r`, if it has the size of `r`'s table's tuples (the
/// words read from it are at fixed offsets).
pub fn tuple_for(n: &NodeState, r: &Rec, tuple: Vec<u8>) -> Result<Vec<u8>, TxnError> {
    if tuple.len() != tuple_bytes(n, r.table) as usize {
        return Err(WireError::Invalid("a reply's tuple is not its table's size").into());
    }
    Ok(tuple)
}

/// Posts `ops` on `q` as the options say: one doorbell for the list (doorbell batching) or
/// one per request; with outstanding requests off, waits for them before returning.
pub async fn issue(ctx: &Ctx, n: &NodeState, q: QpId, ops: Vec<(Op, bool)>) -> Result<(), TxnError> {
    room(ctx, q, ops.len() as u32).await?;
    if n.rdma.doorbell {
        ctx.post(q, ops)?;
    } else {
        for op in ops {
            ctx.post(q, [op])?;
        }
    }
    if !n.rdma.outstanding {
        ctx.wait().await?;
    }
    Ok(())
}

/// Calls `handler` at `node`; with outstanding requests off, waits for the reply first.
pub async fn call(ctx: &Ctx, n: &NodeState, node: u16, handler: u16, req: &[u8]) -> Result<CallId, TxnError> {
    let id = ctx.call(endpoint(ctx, node), handler, req);
    if !n.rdma.outstanding {
        ctx.wait().await?;
    }
    Ok(id)
}

/// The reply to `call` (after the wait for it); `what` names the call if none arrived.
pub fn reply(ctx: &Ctx, call: CallId, what: &'static str) -> Result<Vec<u8>, TxnError> {
    Ok(ctx.take_reply(call).ok_or(TxnError::NoReply(what))??)
}

/// Finds the tuple offset of every selected record (location cache, then index READs).
pub async fn locate_all(
    ctx: &Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    which: impl Fn(&Rec) -> bool,
) -> Result<(), TxnError> {
    let scratch = ctx.scratch();
    let mut reads = 0u64;
    for r in recs.iter_mut().filter(|r| which(r)) {
        let at = locate(ctx, &n.catalog, &n.cache, scratch, r.home, r.table, r.key).await?;
        r.offset = at.offset;
        reads += at.reads as u64;
    }
    if reads > 0 {
        *n.pending_lookups.borrow_mut().entry((ctx.me().worker, ctx.coroutine())).or_default() += reads;
    }
    Ok(())
}

/// Accounts one execution of stage `s` begun at `t0` and, when the worker traces, records it
/// as a slice on the coroutine's track.
pub fn account(ctx: &Ctx, n: &NodeState, s: Stage, t0: u64, round_trips: u64, bytes: u64) {
    let now = ctx.now();
    n.account((ctx.me().worker, ctx.coroutine()), s, now - t0, round_trips, bytes);
    ctx.trace_slice_args(
        s.name(),
        txbed_transport::trace::STAGE,
        t0,
        now,
        &[("round_trips", round_trips), ("bytes", bytes)],
    );
}

pub fn tuple_bytes(n: &NodeState, table: u16) -> u32 {
    n.catalog.layout.table(table).map(|p| p.tuple_bytes as u32).unwrap_or(0)
}

/// LOCK: locks and reads the selected records. Returns whether all were locked (a record
/// another transaction holds is left unlocked).
pub async fn lock_and_read(
    ctx: &Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    which: impl Fn(&Rec) -> bool,
    id: u64,
) -> Result<bool, TxnError> {
    let scratch = ctx.scratch();
    let t0 = ctx.now();
    let bytes: u64 = recs.iter().filter(|r| which(r)).map(|r| 8 + tuple_bytes(n, r.table) as u64).sum();
    if n.hybrid.onesided(Stage::Lock) {
        locate_all(ctx, n, recs, |r| which(r) && r.tuple.is_empty()).await?;
        check_buffers(ctx, bytes)?;
        let mut at = scratch.addr;
        let mut slots = Vec::new();
        for (i, r) in recs.iter().enumerate().filter(|(_, r)| which(r)) {
            let len = tuple_bytes(n, r.table);
            let cas_out = LocalBuf { lkey: scratch.lkey, addr: at, len: 8 };
            // A sentinel, so a result that never arrived cannot read as "was free".
            ctx.store_local(at, u64::MAX)?;
            let read_out = LocalBuf { lkey: scratch.lkey, addr: at + 8, len };
            slots.push((i, at));
            at += 8 + len as u64;
            let cas =
                Op::Cas { local: cas_out, remote: n.catalog.remote(r.home, r.offset + LOCK, 8), compare: 0, swap: id };
            let read = Op::Read { local: read_out, remote: n.catalog.remote(r.home, r.offset, len) };
            issue(ctx, n, rec_qp(ctx, r)?, vec![(cas, false), (read, true)]).await?;
        }
        ctx.wait().await?;
        for (i, at) in slots {
            let r = &mut recs[i];
            r.locked = ctx.load_local(at)? == 0;
            r.tuple = vec![0; tuple_bytes(n, r.table) as usize];
            ctx.read_local(at + 8, &mut r.tuple)?;
        }
    } else {
        let mut calls = Vec::new();
        for (i, r) in recs.iter().enumerate().filter(|(_, r)| which(r)) {
            let req = LockReq { table: r.table, key: r.key, owner: id }.encode();
            calls.push((i, call(ctx, n, r.home, H_LOCK, &req).await?));
        }
        ctx.wait().await?;
        for (i, call) in calls {
            let r = &mut recs[i];
            match LockReply::decode(&reply(ctx, call, "LOCK")?)? {
                LockReply::Locked { offset, tuple } => {
                    r.tuple = tuple_for(n, r, tuple)?;
                    r.locked = true;
                    r.offset = offset;
                }
                // Held by another: not ours, whatever an earlier round of this attempt got.
                LockReply::Busy => r.locked = false,
                LockReply::Missing => return Err(TxnError::NotFound { node: r.home, table: r.table, key: r.key }),
            }
        }
    }
    account(ctx, n, Stage::Lock, t0, 1, bytes);
    Ok(recs.iter().filter(|r| which(r)).all(|r| r.locked))
}

/// READ (execution): fetches every record's tuple without locking. One-sided: locate (the
/// location cache makes this free when warm) and one READ; RPC: the participant looks the
/// key up and also returns the key's bucket, filling the cache (DrTM+H Sec. 5.1).
pub async fn fetch(ctx: &Ctx, n: &NodeState, recs: &mut [Rec]) -> Result<(), TxnError> {
    let scratch = ctx.scratch();
    let t0 = ctx.now();
    let bytes: u64 = recs.iter().map(|r| tuple_bytes(n, r.table) as u64).sum();
    if n.hybrid.onesided(Stage::Read) {
        locate_all(ctx, n, recs, |_| true).await?;
        check_buffers(ctx, bytes)?;
        // Speculative parallel fetch: every READ posted, one wait (DrTM+H Sec. 6.1).
        let mut at = scratch.addr;
        let mut slots = Vec::new();
        for r in recs.iter() {
            let len = tuple_bytes(n, r.table);
            let read = Op::Read {
                local: LocalBuf { lkey: scratch.lkey, addr: at, len },
                remote: n.catalog.remote(r.home, r.offset, len),
            };
            // Without speculation, each fetch completes before the next is issued.
            issue(ctx, n, rec_qp(ctx, r)?, vec![(read, true)]).await?;
            if !n.rdma.speculative {
                ctx.wait().await?;
            }
            slots.push(at);
            at += len as u64;
        }
        ctx.wait().await?;
        for (r, at) in recs.iter_mut().zip(slots) {
            r.tuple = vec![0; tuple_bytes(n, r.table) as usize];
            ctx.read_local(at, &mut r.tuple)?;
        }
    } else {
        let mut calls = Vec::new();
        for r in recs.iter() {
            let req = KeyReq { table: r.table, key: r.key }.encode();
            calls.push(call(ctx, n, r.home, H_FETCH, &req).await?);
            if !n.rdma.speculative {
                ctx.wait().await?;
            }
        }
        ctx.wait().await?;
        for (r, call) in recs.iter_mut().zip(calls) {
            match FetchReply::decode(&reply(ctx, call, "FETCH")?)? {
                FetchReply::Found { offset, bucket_at, bucket, tuple } => {
                    r.tuple = tuple_for(n, r, tuple)?;
                    r.offset = offset;
                    n.cache.borrow_mut().put(r.home, r.table, bucket_at, &bucket);
                }
                FetchReply::Missing => return Err(TxnError::NotFound { node: r.home, table: r.table, key: r.key }),
                FetchReply::Busy => return Err(WireError::Status(BUSY).into()),
            }
        }
    }
    account(ctx, n, Stage::Read, t0, 1, bytes);
    Ok(())
}

/// VALIDATE: whether each selected record still has the version it was fetched with and is
/// not locked by someone else.
pub async fn validate(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    which: impl Fn(&Rec) -> bool,
    id: u64,
) -> Result<bool, TxnError> {
    let scratch = ctx.scratch();
    let t0 = ctx.now();
    let mut now: Vec<(usize, u64, u64)> = Vec::new();
    if n.hybrid.onesided(Stage::Validate) {
        check_buffers(ctx, 16 * recs.iter().filter(|r| which(r)).count() as u64)?;
        let mut at = scratch.addr;
        let mut slots = Vec::new();
        for (i, r) in recs.iter().enumerate().filter(|(_, r)| which(r)) {
            let read = Op::Read {
                local: LocalBuf { lkey: scratch.lkey, addr: at, len: 16 },
                remote: n.catalog.remote(r.home, r.offset, 16),
            };
            issue(ctx, n, rec_qp(ctx, r)?, vec![(read, true)]).await?;
            slots.push((i, at));
            at += 16;
        }
        ctx.wait().await?;
        for (i, at) in slots {
            now.push((i, ctx.load_local(at)?, ctx.load_local(at + 8)?));
        }
    } else {
        let mut calls = Vec::new();
        for (i, r) in recs.iter().enumerate().filter(|(_, r)| which(r)) {
            calls.push((i, call(ctx, n, r.home, H_VALIDATE, &ValidateReq { offset: r.offset }.encode()).await?));
        }
        ctx.wait().await?;
        for (i, call) in calls {
            let ValidateReply { lock, version } = ValidateReply::decode(&reply(ctx, call, "VALIDATE")?)?;
            now.push((i, lock, version));
        }
    }
    account(ctx, n, Stage::Validate, t0, (!now.is_empty()) as u64, 16 * now.len() as u64);
    Ok(now.into_iter().all(|(i, lock, ver)| {
        let r = &recs[i];
        (lock == 0 || lock == id) && split_version_word(ver) == r.version()
    }))
}

/// LOG: the new values to the backups of every written record's primary.
pub async fn log(ctx: &Ctx, n: &NodeState, recs: &[Rec], new_values: &[Vec<u8>], id: u64) -> Result<(), TxnError> {
    if n.replication <= 1 || new_values.is_empty() || n.bug == Some(crate::log::SKIP_LOG) {
        return Ok(());
    }
    debug_assert_eq!(new_values.len(), recs.iter().filter(|r| r.write).count(), "a new value per write");
    let mut record = LogRecord::start(id);
    let mut backups: Vec<u16> = Vec::new();
    for (r, v) in recs.iter().filter(|r| r.write).zip(new_values) {
        LogEntry { table: r.table, key: r.key, version: r.version().1 + 1, value: v }.encode_into(&mut record);
        for k in 1..n.replication {
            let b = (r.home + k) % n.nodes;
            if !backups.contains(&b) {
                backups.push(b);
            }
        }
    }
    let t0 = ctx.now();
    crate::log::append(ctx, n, &backups, &record).await?;
    account(ctx, n, Stage::Log, t0, 1, (record.len() * backups.len()) as u64);
    Ok(())
}

/// COMMIT: writes back the new values (version + 1, writer) and unlocks; with `and_release`,
/// also RELEASEs the records only read. Fills `history` with what was read and written.
/// Returns once everything is acknowledged.
pub async fn write_back(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    new_values: &[Vec<u8>],
    id: u64,
    history: &mut Txn,
    unlock_first: bool,
) -> Result<(), TxnError> {
    debug_assert_eq!(new_values.len(), recs.iter().filter(|r| r.write).count(), "a new value per write");
    if unlock_first {
        release(ctx, n, recs, |_| true, id).await?;
    }
    let t0 = ctx.now();
    let mut bytes = 0u64;
    let mut staging = staging_at(ctx);
    for (r, v) in recs.iter().filter(|r| r.write).zip(new_values) {
        bytes += write_back_one(ctx, n, r, v, id, history, &mut staging, !unlock_first, H_COMMIT).await?;
    }
    for r in recs.iter().filter(|r| !r.write) {
        history.reads.push(Access { key: history_key(r.table, r.key), version: r.version().1 });
    }
    if !unlock_first {
        release_posts(ctx, n, recs, |r| !r.write, id);
    }
    let waited = ctx.wait().await;
    ctx.clear_replies();
    waited?;
    account(ctx, n, Stage::Commit, t0, 1, bytes);
    Ok(())
}

/// Writes back one locked record (version + 1, writer `id`, new value) and, with `unlock`,
/// clears its lock: a WRITE (and the unlock WRITE behind it on the QP), or the protocol's
/// COMMIT RPC `handler`. Records the access in `history`; returns the bytes sent.
#[allow(clippy::too_many_arguments)]
pub async fn write_back_one(
    ctx: &Ctx,
    n: &NodeState,
    r: &Rec,
    value: &[u8],
    id: u64,
    history: &mut Txn,
    staging: &mut u64,
    unlock: bool,
    handler: u16,
) -> Result<u64, TxnError> {
    let (inc, ver) = r.version();
    let key = history_key(r.table, r.key);
    history.reads.push(Access { key, version: ver });
    history.writes.push(Access { key, version: ver + 1 });
    let commit = CommitReq { offset: r.offset, version: version_word(inc, ver + 1), writer: id, record: value };
    if n.hybrid.onesided(Stage::Commit) {
        let body = commit.body();
        let write = Op::Write {
            src: inline_or_staged(ctx, &body, staging)?,
            remote: n.catalog.remote(r.home, r.offset + VERSION, body.len() as u32),
        };
        let q = rec_qp(ctx, r)?;
        // Passive ACK: the commit is confirmed by a later signaled request on the QP
        // (DrTM+H Sec. 3.2); signal anyway before the send queue fills.
        let depth = ctx.qp_info(q).map_or(2, |i| i.max_outstanding);
        let signal = !n.rdma.passive_ack || ctx.outstanding(q) + 4 >= depth / 2;
        let ops = if unlock {
            let unlock = Op::Write {
                src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
            };
            vec![(write, false), (unlock, signal)]
        } else {
            vec![(write, signal)]
        };
        issue(ctx, n, q, ops).await?;
    } else {
        let req = commit.encode();
        if n.rdma.passive_ack {
            ctx.call_oneway(endpoint(ctx, r.home), handler, &req);
        } else {
            call(ctx, n, r.home, handler, &req).await?;
        }
    }
    Ok(16 + value.len() as u64 + 8)
}

/// Posts the unlocks of the locked records `which` selects, by the RELEASE stage's primitive.
pub fn release_posts(ctx: &Ctx, n: &NodeState, recs: &[Rec], which: impl Fn(&Rec) -> bool, id: u64) {
    for r in recs.iter().filter(|r| r.locked && which(r)) {
        if n.hybrid.onesided(Stage::Release) {
            let unlock = Op::Write {
                src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
            };
            // A full send queue must not leave the lock held: the lock word names its owner,
            // so an RPC can release it instead (RCC Sec. 5.2).
            if rec_qp(ctx, r).is_ok_and(|q| ctx.post(q, [(unlock, true)]).is_ok()) {
                continue;
            }
        }
        ctx.call(endpoint(ctx, r.home), H_RELEASE, &ReleaseReq { offset: r.offset, owner: id }.encode());
    }
}

/// RELEASE and wait.
pub async fn release(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    which: impl Fn(&Rec) -> bool,
    id: u64,
) -> Result<(), TxnError> {
    let t0 = ctx.now();
    let count = recs.iter().filter(|r| r.locked && which(r)).count() as u64;
    release_posts(ctx, n, recs, which, id);
    let waited = ctx.wait().await;
    ctx.clear_replies();
    waited?;
    account(ctx, n, Stage::Release, t0, (count > 0) as u64, 8 * count);
    Ok(())
}
