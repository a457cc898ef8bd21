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
//! Records homed on the coordinator's own node take the local path (`NodeState::local_path`):
//! the one-sided form's requests are done by the CPU on local memory (`local::on_cpu`; a list
//! that CASes stays on the NIC where its atomics are not the CPU's, `local::by_cpu`), the RPC
//! form calls the handler in place (`Ctx::call_local`). Either way the access costs CPU time
//! only: stages count it in `Tally::local`, with no round trip and no wire bytes.
//!
//! Scratch layout per coroutine (`buffers_end`, `log_area`, `staging_at`): the first half
//! lock/fetch/validate buffers and index buckets, the third quarter the log record, the last
//! write-back staging ([0, 8), [8, 12), [12, 16) KiB of the default 16 KiB).

use std::ops::AddAssign;

use txbed_checker::{Access, Txn};
use txbed_transport::{CallId, Ctx, LocalBuf, NodeStatus, Op, Payload, QpId};
use txbed_workloads::TxnSpec;

use crate::error::TxnError;
pub use crate::local::Path;
use crate::local::{by_cpu, on_cpu};
use crate::locate::locate;
use crate::msg::{
    CommitIfReq, CommitReq, FetchReply, KeyReq, LockReply, LockReq, LogEntry, LogRecord, ReleaseReq, UnlockKeyReq,
    ValidateReply, ValidateReq,
};
use crate::node::{
    NodeState, Pending, BUSY, H_COMMIT, H_COMMIT_IF, H_FETCH, H_LOCK, H_RELEASE, H_UNLOCK_KEY, H_VALIDATE,
};
use crate::post::check_buffers;
pub use crate::post::{buffers_end, endpoint, inline_or_staged, log_area, qp, room, staging_at};
use crate::stage::Stage;
use crate::store::history_key;
use crate::store::{split_version_word, version_word, LOCK, LOCK_AND_VERSION, META_BYTES, VERSION};
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
    /// A lock request was sent for it: with faults, its outcome may be unknown (`abandon`).
    pub asked: bool,
    /// The tuple as fetched or read under lock.
    pub tuple: Vec<u8>,
}

/// The QP for requests about `r` at its home (`post::record_qp`).
pub fn rec_qp(ctx: &Ctx, r: &Rec) -> Result<QpId, TxnError> {
    crate::post::record_qp(ctx, r.home, r.table, r.key)
}

/// What one execution of a stage cost outside the CPU: requests that went through the NIC
/// (verbs, RPCs) and the bytes they carried, and the record accesses served on the local path
/// (CPU time only: no round trip, no wire bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub sent: u64,
    pub bytes: u64,
    pub local: u64,
}

impl Tally {
    /// One access that took `path`, carrying `bytes` if it went through the NIC.
    pub fn add(&mut self, path: Path, bytes: u64) {
        match path {
            Path::Local => self.local += 1,
            Path::Nic => {
                self.sent += 1;
                self.bytes += bytes;
            }
        }
    }

    /// One round trip if anything went through the NIC (the stage waited for it), none if
    /// every access was local.
    pub fn round_trips(&self) -> u64 {
        (self.sent > 0) as u64
    }
}

impl AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.sent += o.sent;
        self.bytes += o.bytes;
        self.local += o.local;
    }
}

/// The path an RPC about a record homed on `home` takes (`send`).
pub fn rpc_path(n: &NodeState, home: u16) -> Path {
    if n.local(home) {
        Path::Local
    } else {
        Path::Nic
    }
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
            Rec { table: k.table, key: k.row, home, write, offset: 0, locked: false, asked: false, tuple: Vec::new() }
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

/// With faults in the run, a record may only be used while its home is up in this worker's
/// membership view: a node that is down, or rejoining with its store not yet rebuilt, makes
/// the attempt fail with `Unavailable` (it is then abandoned and retried).
pub fn check_up(ctx: &Ctx, n: &NodeState, home: u16) -> Result<(), TxnError> {
    if n.recovery.is_some() && ctx.node_status(home) != NodeStatus::Up {
        return Err(TxnError::Unavailable { node: home });
    }
    Ok(())
}

/// Issues `ops` about record `r`. On the local path the CPU does them now (`local::by_cpu`);
/// otherwise they are posted on `r`'s QP as the options say: one doorbell for the list
/// (doorbell batching) or one per request, and with outstanding requests off, waited for
/// before returning.
pub async fn issue(ctx: &Ctx, n: &NodeState, r: &Rec, ops: Vec<(Op, bool)>) -> Result<Path, TxnError> {
    check_up(ctx, n, r.home)?;
    if by_cpu(n, r.home, &ops) {
        on_cpu(ctx, &ops)?;
        return Ok(Path::Local);
    }
    let q = rec_qp(ctx, r)?;
    room(ctx, q, ops.len() as u32).await?;
    for _ in &ops {
        n.note_send((ctx.me().worker, ctx.coroutine()), r.home, true);
    }
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
    Ok(Path::Nic)
}

/// [`issue`] without waiting for send-queue room: fails with `SendQueueFull` instead.
pub fn issue_now(ctx: &Ctx, n: &NodeState, r: &Rec, ops: Vec<(Op, bool)>) -> Result<Path, TxnError> {
    check_up(ctx, n, r.home)?;
    if by_cpu(n, r.home, &ops) {
        on_cpu(ctx, &ops)?;
        return Ok(Path::Local);
    }
    for _ in &ops {
        n.note_send((ctx.me().worker, ctx.coroutine()), r.home, true);
    }
    ctx.post(rec_qp(ctx, r)?, ops)?;
    Ok(Path::Nic)
}

/// Sends `req` to `handler` about a record homed on `node`, without waiting: on the local
/// path a direct call of this worker's handler (which charges its own memory accesses, as
/// when it serves a datagram); otherwise an RPC to the same worker there.
pub fn send(ctx: &Ctx, n: &NodeState, node: u16, handler: u16, req: &[u8]) -> CallId {
    n.note_send((ctx.me().worker, ctx.coroutine()), node, true);
    if n.local(node) {
        ctx.call_local(handler, req)
    } else {
        ctx.call(endpoint(ctx, node), handler, req)
    }
}

/// [`send`] without a reply.
pub fn send_oneway(ctx: &Ctx, n: &NodeState, node: u16, handler: u16, req: &[u8]) {
    n.note_send((ctx.me().worker, ctx.coroutine()), node, false);
    if n.local(node) {
        ctx.call_local_oneway(handler, req);
    } else {
        ctx.call_oneway(endpoint(ctx, node), handler, req);
    }
}

/// [`send`]; with outstanding requests off, waits for the reply first.
pub async fn call(ctx: &Ctx, n: &NodeState, node: u16, handler: u16, req: &[u8]) -> Result<CallId, TxnError> {
    check_up(ctx, n, node)?;
    let id = send(ctx, n, node, handler, req);
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
        check_up(ctx, n, r.home)?;
        let at = locate(ctx, &n.catalog, &n.cache, scratch, r.home, r.table, r.key).await?;
        r.offset = at.offset;
        reads += at.reads as u64;
    }
    if reads > 0 {
        *n.pending_lookups.borrow_mut().entry((ctx.me().worker, ctx.coroutine())).or_default() += reads;
    }
    Ok(())
}

/// Accounts one execution of stage `s` begun at `t0` (round trips, bytes sent, record
/// accesses served locally) and, when the worker traces, records it as a slice on the
/// coroutine's track.
pub fn account(ctx: &Ctx, n: &NodeState, s: Stage, t0: u64, round_trips: u64, bytes: u64, local: u64) {
    let now = ctx.now();
    n.account((ctx.me().worker, ctx.coroutine()), s, now - t0, round_trips, bytes, local);
    ctx.trace_slice_args(
        s.name(),
        txbed_transport::trace::STAGE,
        t0,
        now,
        &[("round_trips", round_trips), ("bytes", bytes), ("local", local)],
    );
}

/// [`account`] of what `t` tallied.
pub fn account_tally(ctx: &Ctx, n: &NodeState, s: Stage, t0: u64, t: &Tally) {
    account(ctx, n, s, t0, t.round_trips(), t.bytes, t.local);
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
    lock(ctx, n, recs, which, id, false).await
}

/// LOCK of records already read: locks them and reads only their lock and version words
/// into the tuples held (one-sided, CAS + a 16-byte READ; by RPC, a reply without the
/// record), for a protocol that then checks the version is the one it read (OCC's
/// validation, DrTM+H Sec. 5.2: "lock the record and then read its version").
pub async fn lock_and_check(
    ctx: &Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    which: impl Fn(&Rec) -> bool,
    id: u64,
) -> Result<bool, TxnError> {
    lock(ctx, n, recs, which, id, true).await
}

/// Puts the lock and version words read under a lock into `r`'s tuple (a tuple not read
/// before is its table's size, zero beyond them).
fn set_lock_and_version(n: &NodeState, r: &mut Rec, words: &[u8]) -> Result<(), TxnError> {
    if words.len() != LOCK_AND_VERSION as usize {
        return Err(WireError::Invalid("a lock reply's words are not lock and version").into());
    }
    if r.tuple.is_empty() {
        r.tuple = vec![0; tuple_bytes(n, r.table) as usize];
    }
    r.tuple[..words.len()].copy_from_slice(words);
    Ok(())
}

async fn lock(
    ctx: &Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    which: impl Fn(&Rec) -> bool,
    id: u64,
    meta_only: bool,
) -> Result<bool, TxnError> {
    let read_len = |r: &Rec| if meta_only { LOCK_AND_VERSION as u32 } else { tuple_bytes(n, r.table) };
    let scratch = ctx.scratch();
    let t0 = ctx.now();
    let mut t = Tally::default();
    if n.hybrid.onesided(Stage::Lock) {
        locate_all(ctx, n, recs, |r| which(r) && r.tuple.is_empty()).await?;
        let need: u64 = recs.iter().filter(|r| which(r)).map(|r| 8 + read_len(r) as u64).sum();
        check_buffers(ctx, need)?;
        let mut at = scratch.addr;
        let mut slots = Vec::new();
        for (i, r) in recs.iter_mut().enumerate().filter(|(_, r)| which(r)) {
            let len = read_len(r);
            let cas_out = LocalBuf { lkey: scratch.lkey, addr: at, len: 8 };
            // A sentinel, so a result that never arrived cannot read as "was free".
            ctx.store_local(at, u64::MAX)?;
            let read_out = LocalBuf { lkey: scratch.lkey, addr: at + 8, len };
            slots.push((i, at));
            at += 8 + len as u64;
            let cas =
                Op::Cas { local: cas_out, remote: n.catalog.remote(r.home, r.offset + LOCK, 8), compare: 0, swap: id };
            let read = Op::Read { local: read_out, remote: n.catalog.remote(r.home, r.offset, len) };
            r.asked = true;
            let path = issue(ctx, n, r, vec![(cas, false), (read, true)]).await?;
            t.add(path, 8 + len as u64);
        }
        ctx.wait().await?;
        for (i, at) in slots {
            let r = &mut recs[i];
            r.locked = ctx.load_local(at)? == 0;
            let mut got = vec![0; read_len(r) as usize];
            ctx.read_local(at + 8, &mut got)?;
            if meta_only {
                set_lock_and_version(n, r, &got)?;
            } else {
                r.tuple = got;
            }
        }
    } else {
        let mut calls = Vec::new();
        for (i, r) in recs.iter_mut().enumerate().filter(|(_, r)| which(r)) {
            let req = LockReq { table: r.table, key: r.key, owner: id, meta_only }.encode();
            r.asked = true;
            calls.push((i, call(ctx, n, r.home, H_LOCK, &req).await?));
            t.add(rpc_path(n, r.home), 8 + read_len(r) as u64);
        }
        ctx.wait().await?;
        for (i, call) in calls {
            let r = &mut recs[i];
            match LockReply::decode(&reply(ctx, call, "LOCK")?)? {
                LockReply::Locked { offset, tuple } => {
                    if meta_only {
                        set_lock_and_version(n, r, &tuple)?;
                    } else {
                        r.tuple = tuple_for(n, r, tuple)?;
                    }
                    r.locked = true;
                    r.offset = offset;
                }
                // Held by another: not ours, whatever an earlier round of this attempt got.
                LockReply::Busy => r.locked = false,
                LockReply::Missing => return Err(TxnError::NotFound { node: r.home, table: r.table, key: r.key }),
            }
        }
    }
    account_tally(ctx, n, Stage::Lock, t0, &t);
    Ok(recs.iter().filter(|r| which(r)).all(|r| r.locked))
}

/// READ (execution): fetches every record's tuple without locking. One-sided: locate (the
/// location cache makes this free when warm) and one READ; RPC: the participant looks the
/// key up and also returns the key's bucket, filling the cache (DrTM+H Sec. 5.1).
pub async fn fetch(ctx: &Ctx, n: &NodeState, recs: &mut [Rec]) -> Result<(), TxnError> {
    let scratch = ctx.scratch();
    let t0 = ctx.now();
    let mut t = Tally::default();
    if n.hybrid.onesided(Stage::Read) {
        locate_all(ctx, n, recs, |_| true).await?;
        check_buffers(ctx, recs.iter().map(|r| tuple_bytes(n, r.table) as u64).sum())?;
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
            let path = issue(ctx, n, r, vec![(read, true)]).await?;
            t.add(path, len as u64);
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
            t.add(rpc_path(n, r.home), tuple_bytes(n, r.table) as u64);
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
    account_tally(ctx, n, Stage::Read, t0, &t);
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
    let mut t = Tally::default();
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
            t.add(issue(ctx, n, r, vec![(read, true)]).await?, 16);
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
            t.add(rpc_path(n, r.home), 16);
        }
        ctx.wait().await?;
        for (i, call) in calls {
            let ValidateReply { lock, version } = ValidateReply::decode(&reply(ctx, call, "VALIDATE")?)?;
            now.push((i, lock, version));
        }
    }
    account_tally(ctx, n, Stage::Validate, t0, &t);
    Ok(now.into_iter().all(|(i, lock, ver)| {
        let r = &recs[i];
        (lock == 0 || lock == id) && split_version_word(ver) == r.version()
    }))
}

/// LOG: the new values to the backups of every written record's primary. A backup that is
/// this node takes its copy on the local path (`log::append`).
pub async fn log(ctx: &Ctx, n: &NodeState, recs: &[Rec], new_values: &[Vec<u8>], id: u64) -> Result<(), TxnError> {
    if n.replication <= 1 || new_values.is_empty() || n.bug == Some(crate::log::SKIP_LOG) {
        return Ok(());
    }
    debug_assert_eq!(new_values.len(), recs.iter().filter(|r| r.write).count(), "a new value per write");
    let record = log_record(recs, new_values, id);
    let mut backups: Vec<u16> = Vec::new();
    for r in recs.iter().filter(|r| r.write) {
        for k in 1..n.replication {
            let b = (r.home + k) % n.nodes;
            if !backups.contains(&b) {
                backups.push(b);
            }
        }
    }
    let t0 = ctx.now();
    crate::log::append(ctx, n, &backups, &record).await?;
    let mut t = Tally::default();
    for &b in &backups {
        t.add(rpc_path(n, b), record.len() as u64);
    }
    account_tally(ctx, n, Stage::Log, t0, &t);
    Ok(())
}

/// What a transaction of `recs` read and wrote, for its history entry: each record's version
/// as read, and the next version of each record written.
pub fn history_of(recs: &[Rec], history: &mut Txn) {
    for r in recs.iter().filter(|r| r.write) {
        let key = history_key(r.table, r.key);
        let ver = r.version().1;
        history.reads.push(Access { key, version: ver });
        history.writes.push(Access { key, version: ver + 1 });
    }
    for r in recs.iter().filter(|r| !r.write) {
        history.reads.push(Access { key: history_key(r.table, r.key), version: r.version().1 });
    }
}

/// What an attempt that aborted had read and would have written, from its records: the
/// version of each record it observed, and for a write the next version. A record it asked
/// to lock and did not get is left out: what came back with the failed lock was not read
/// under it (a one-sided READ beside a failed CAS).
pub fn accesses_of(recs: &[Rec]) -> crate::node::Accesses {
    let mut a = crate::node::Accesses::default();
    let seen = |r: &&Rec| r.tuple.len() >= META_BYTES as usize && (r.locked || !r.asked);
    for r in recs.iter().filter(|r| r.write).filter(seen) {
        let key = history_key(r.table, r.key);
        let ver = r.version().1;
        a.reads.push(Access { key, version: ver });
        a.writes.push(Access { key, version: ver + 1 });
    }
    for r in recs.iter().filter(|r| !r.write).filter(seen) {
        a.reads.push(Access { key: history_key(r.table, r.key), version: r.version().1 });
    }
    a
}

/// The commit point of a transaction that writes (after its validation, before LOG): from
/// here it commits, whatever fails later. `history` (what it read and wrote, `history_of`)
/// and `delta` wait in `NodeState::pending` until [`complete`]. With faults in the run, the
/// commit record first goes to the write-ahead log (DrTM Sec. 5.6), and an attempt that saw
/// the membership change since `epoch0` (its start) aborts instead: a lock it holds on a node
/// that crashed may be gone. Returns whether the transaction committed.
pub fn commit_point(
    ctx: &Ctx,
    n: &NodeState,
    epoch0: u64,
    recs: &[Rec],
    new_values: &[Vec<u8>],
    history: Txn,
    delta: i64,
) -> bool {
    let epoch = ctx.view_epoch();
    if n.recovery.is_some() && recs.iter().any(|r| r.write) {
        if !commit_allowed(ctx, n, epoch0, recs) {
            return false;
        }
        let record = log_record(recs, new_values, history.id);
        // The record is copied into the log area (NVRAM where the logs are durable).
        let copy_ns = ctx.costs().copy_ns(record.len());
        ctx.compute(copy_ns);
        n.wal.borrow_mut().insert(history.id, record);
    }
    crate::chop::mark_committed(n, history.id);
    *n.committing.borrow_mut().entry(epoch).or_default() += 1;
    n.pending.borrow_mut().insert(history.id, Pending { history, delta, epoch });
    true
}

/// Whether a transaction that began under view `epoch0` may pass its commit point now
/// ([`commit_point`]'s test): without faults always; with them, only if the membership has
/// not changed and every home of its records is up. A protocol whose commit point is
/// irrevocable (DrTM's XEND) tests this just before it, where it can still abort.
pub fn commit_allowed(ctx: &Ctx, n: &NodeState, epoch0: u64, recs: &[Rec]) -> bool {
    // A protocol that keeps its own replicas counts them itself (RedT commits with a home
    // down when more than 3/4 of its replicas are up).
    let own_replicas = !n.catalog.layout.copies.is_empty();
    n.recovery.is_none()
        || !recs.iter().any(|r| r.write)
        || (ctx.view_epoch() == epoch0
            && (own_replicas || recs.iter().all(|r| ctx.node_status(r.home) == NodeStatus::Up)))
}

/// A committed transaction is complete (logged and written back everywhere): its history
/// entry is recorded and its write-ahead log record dropped.
pub fn complete(ctx: &Ctx, n: &NodeState, id: u64) {
    let p = n.pending.borrow_mut().remove(&id).expect("complete: a transaction past its commit point");
    // A record a write-back gave up on (its home was down) is kept for that home's rebuild.
    if !n.skipped.borrow().contains_key(&id) {
        n.wal.borrow_mut().remove(&id);
    }
    let mut c = n.committing.borrow_mut();
    let left = c.get_mut(&p.epoch).expect("counted at the commit point");
    *left -= 1;
    if *left == 0 {
        c.remove(&p.epoch);
    }
    drop(c);
    let mut h = p.history;
    h.end_ns = ctx.now();
    n.history.borrow_mut().push(h);
    n.stats.borrow_mut().external_delta += p.delta;
}

/// The log record of a transaction writing `new_values` over the write set of `recs`.
pub fn log_record(recs: &[Rec], new_values: &[Vec<u8>], id: u64) -> Vec<u8> {
    let mut record = LogRecord::start(id);
    for (r, v) in recs.iter().filter(|r| r.write).zip(new_values) {
        LogEntry { table: r.table, key: r.key, version: r.version().1 + 1, value: v }.encode_into(&mut record);
    }
    record
}

/// Releases what an attempt that failed on an unreachable node may hold: every record it
/// asked to lock, by key, with `owner`'s lock word (a CAS to 0: a record it never got is left
/// as it is), by RPC to each home until it answers or is declared down (a down node's locks
/// are gone with it). Returns once every such record is released.
pub async fn abandon(ctx: &Ctx, n: &NodeState, recs: &[Rec], owner: u64) {
    let retry = n.recovery.map_or(100_000, |r| r.retry_ns);
    let mut todo: Vec<&Rec> = recs.iter().filter(|r| r.asked || r.locked).collect();
    while !todo.is_empty() {
        todo.retain(|r| ctx.node_status(r.home) != NodeStatus::Down);
        let calls: Vec<(&Rec, CallId)> = todo
            .iter()
            .map(|r| {
                let req = UnlockKeyReq { table: r.table, key: r.key, owner }.encode();
                (*r, send(ctx, n, r.home, H_UNLOCK_KEY, &req))
            })
            .collect();
        let _ = ctx.wait().await;
        todo = calls.into_iter().filter(|(_, c)| !matches!(ctx.take_reply(*c), Some(Ok(_)))).map(|(r, _)| r).collect();
        ctx.clear_replies();
        if !todo.is_empty() {
            ctx.sleep(retry).await;
        }
    }
}

/// COMMIT: writes back the new values (version + 1, writer) and unlocks; with `and_release`,
/// also RELEASEs the records only read. Returns once everything is acknowledged. With faults
/// in the run a write-back that failed is done again until its home answers (or is no longer
/// up: a rejoining node rebuilds the record from the backups, which have it).
pub async fn write_back(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    new_values: &[Vec<u8>],
    id: u64,
    unlock_first: bool,
) -> Result<(), TxnError> {
    debug_assert_eq!(new_values.len(), recs.iter().filter(|r| r.write).count(), "a new value per write");
    if unlock_first {
        release(ctx, n, recs, |_| true, id).await?;
    }
    let t0 = ctx.now();
    let mut t = Tally::default();
    let mut staging = staging_at(ctx);
    let mut failed = None;
    for (r, v) in recs.iter().filter(|r| r.write).zip(new_values) {
        match write_back_one(ctx, n, r, v, id, &mut staging, !unlock_first, H_COMMIT).await {
            Ok(sent) => t += sent,
            Err(e) if n.recovery.is_some() && e.unreachable_node().is_some() => failed = Some(e),
            Err(e) => return Err(e),
        }
    }
    if !unlock_first {
        // The read set's unlocks ride in this stage: counted, their bytes not.
        let unlocks = release_posts(ctx, n, recs, |r| !r.write, id);
        t.sent += unlocks.sent;
        t.local += unlocks.local;
    }
    let waited = ctx.wait().await;
    // A COMMIT by RPC that got no answer failed as much as a WRITE that gave up.
    let unanswered = ctx.failed_reply().map(TxnError::from);
    ctx.clear_replies();
    match waited.err().map(TxnError::from).or(failed).or(unanswered) {
        Some(e) if n.recovery.is_some() && e.unreachable_node().is_some() => {
            finish_write_back(ctx, n, recs, new_values, id, id, !unlock_first).await;
        }
        Some(e) => return Err(e),
        None => {}
    }
    account_tally(ctx, n, Stage::Commit, t0, &t);
    Ok(())
}

/// Completes a write-back that failed somewhere (a node out of reach, a connection broken):
/// every written record is committed again by `H_COMMIT_IF`, which installs it only while
/// `owner` still holds its lock (so a write-back that did land is not repeated over a later
/// transaction), and with `unlock_reads` every record only read is released by key; each is
/// tried until its home answers or is no longer up.
pub async fn finish_write_back(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    new_values: &[Vec<u8>],
    id: u64,
    owner: u64,
    unlock_reads: bool,
) {
    finish_write_back_of(ctx, n, recs, new_values, id, owner, unlock_reads, |_| true).await
}

/// [`finish_write_back`] of the written records `which` selects (the others were written back
/// by the CPU, or are not this step's).
#[allow(clippy::too_many_arguments)]
pub async fn finish_write_back_of(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    new_values: &[Vec<u8>],
    id: u64,
    owner: u64,
    unlock_reads: bool,
    which: impl Fn(&Rec) -> bool,
) {
    let mut calls = Vec::new();
    for (r, v) in recs.iter().filter(|r| r.write).zip(new_values).filter(|(r, _)| which(r)) {
        let (inc, ver) = r.version();
        let commit = CommitReq { offset: r.offset, version: version_word(inc, ver + 1), writer: id, record: v };
        calls.push((r.home, H_COMMIT_IF, CommitIfReq { owner, commit }.encode()));
    }
    for r in recs.iter().filter(|r| !r.write && r.locked && unlock_reads) {
        calls.push((r.home, H_UNLOCK_KEY, UnlockKeyReq { table: r.table, key: r.key, owner }.encode()));
    }
    until_answered(ctx, n, id, calls).await;
}

/// Sends each `(home, handler, request)` of committed transaction `id` by RPC (a direct call
/// for this node) until its home answers, or is no longer up: steps past a commit point that
/// must get through. The handlers must be idempotent (a request whose reply was lost is sent
/// again). A home given up on gets the transaction's values when it is rebuilt, from this
/// node's write-ahead log, which keeps the record until then (`NodeState::skipped`).
pub async fn until_answered(ctx: &Ctx, n: &NodeState, id: u64, mut todo: Vec<(u16, u16, Vec<u8>)>) {
    let retry = n.recovery.map_or(100_000, |r| r.retry_ns);
    while !todo.is_empty() {
        todo.retain(|(home, _, _)| {
            let up = ctx.node_status(*home) == NodeStatus::Up;
            if !up {
                n.skipped.borrow_mut().entry(id).or_default().insert(*home);
            }
            up
        });
        let calls: Vec<CallId> = todo.iter().map(|(home, h, req)| send(ctx, n, *home, *h, req)).collect();
        let _ = ctx.wait().await;
        let answered: Vec<bool> = calls.iter().map(|c| matches!(ctx.take_reply(*c), Some(Ok(_)))).collect();
        ctx.clear_replies();
        let mut k = 0;
        todo.retain(|_| {
            k += 1;
            !answered[k - 1]
        });
        if !todo.is_empty() {
            ctx.sleep(retry).await;
        }
    }
}

/// Writes back one locked record (version + 1, writer `id`, new value) and, with `unlock`,
/// clears its lock: a WRITE (and the unlock WRITE behind it on the QP), or the protocol's
/// COMMIT RPC `handler`; on the local path, the CPU's stores or a direct call. Returns what
/// it sent.
#[allow(clippy::too_many_arguments)]
pub async fn write_back_one(
    ctx: &Ctx,
    n: &NodeState,
    r: &Rec,
    value: &[u8],
    id: u64,
    staging: &mut u64,
    unlock: bool,
    handler: u16,
) -> Result<Tally, TxnError> {
    let (inc, ver) = r.version();
    let commit = CommitReq { offset: r.offset, version: version_word(inc, ver + 1), writer: id, record: value };
    let mut t = Tally::default();
    let bytes = 16 + value.len() as u64 + 8;
    if n.hybrid.onesided(Stage::Commit) {
        let body = commit.body();
        let len = body.len() as u32;
        // The CPU stores the body from where it is; the NIC needs it inline or staged.
        let src = if n.local(r.home) { Payload::Inline(body) } else { inline_or_staged(ctx, &body, staging)? };
        let write = Op::Write { src, remote: n.catalog.remote(r.home, r.offset + VERSION, len) };
        // Passive ACK: the commit is confirmed by a later signaled request on the QP
        // (DrTM+H Sec. 3.2); signal anyway before the send queue fills.
        let signal = !n.rdma.passive_ack || {
            let q = rec_qp(ctx, r)?;
            let depth = ctx.qp_info(q).map_or(2, |i| i.max_outstanding);
            ctx.outstanding(q) + 4 >= depth / 2
        };
        let ops = if unlock {
            let unlock = Op::Write {
                src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
            };
            vec![(write, false), (unlock, signal)]
        } else {
            vec![(write, signal)]
        };
        t.add(issue(ctx, n, r, ops).await?, bytes);
    } else {
        let req = commit.encode();
        if n.rdma.passive_ack {
            send_oneway(ctx, n, r.home, handler, &req);
        } else {
            call(ctx, n, r.home, handler, &req).await?;
        }
        t.add(rpc_path(n, r.home), bytes);
    }
    Ok(t)
}

/// Posts the unlocks of the locked records `which` selects, by the RELEASE stage's primitive
/// (a local record's by the CPU or a direct call); returns what it sent.
pub fn release_posts(ctx: &Ctx, n: &NodeState, recs: &[Rec], which: impl Fn(&Rec) -> bool, id: u64) -> Tally {
    let mut t = Tally::default();
    for r in recs.iter().filter(|r| r.locked && which(r)) {
        if n.hybrid.onesided(Stage::Release) {
            let unlock = Op::Write {
                src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
            };
            // A full send queue must not leave the lock held: the lock word names its owner,
            // so an RPC can release it instead (RCC Sec. 5.2).
            if let Ok(path) = issue_now(ctx, n, r, vec![(unlock, true)]) {
                t.add(path, 8);
                continue;
            }
        }
        send(ctx, n, r.home, H_RELEASE, &ReleaseReq { offset: r.offset, owner: id }.encode());
        t.add(rpc_path(n, r.home), 8);
    }
    t
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
    let t = release_posts(ctx, n, recs, which, id);
    let waited = ctx.wait().await;
    ctx.clear_replies();
    waited?;
    account_tally(ctx, n, Stage::Release, t0, &t);
    Ok(())
}
