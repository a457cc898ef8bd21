//! The LOG stage: every backup gets the transaction's new values before it commits, and keeps
//! a replica of the records it backs.
//!
//! A log record is `id u64 | entries`, each entry `table u16 | value length u16 | pad 4 |
//! key u64 | version u64 | value` padded to 8 bytes.
//!
//! One-sided: a WRITE of `[length u32 | pad | sequence u64 | record | length u32]` into the
//! ring the backup keeps for this sender's worker; the lengths at both ends and the sequence
//! number let the backup tell a complete, current entry from a stale one (DrTM+H Sec. 5.4,
//! after FaRM). A writer that wraps first writes a marker (length u32::MAX) where the entry
//! would not fit. Rings are reclaimed lazily: once half a ring has been written since the last
//! reclaim, a one-way RPC tells the backup, which applies every complete entry in order and
//! answers with a one-way RECLAIMED (bytes consumed) that the writer's event loop records, all
//! off the critical path (DrTM+H Sec. 5.4). A writer never overwrites what the backup has not
//! applied: when the next entry would (the backup's CPU lags, or RECLAIMED is still on its
//! way), it asks the backup (the same RPC, awaited) and waits until there is room. The papers
//! leave this flow control out; a backup whose CPU lags (real backends) would otherwise lose
//! entries. RPC: the backup's handler applies the record at once and replies.
//!
//! A coordinator may be a backup of a record it writes. On the local path
//! (`NodeState::local_path`) its own copy needs no NIC: the CPU writes the entry into its own
//! ring (one-sided form) and calls the reclaim handler in place, or calls the log handler in
//! place (RPC form).

use txbed_transport::{Ctx, Endpoint, HostMemory, LocalBuf, NodeId, NodeStatus, Op, Payload, RpcError};

use crate::error::TxnError;
use crate::msg::{LogEntry, LogRecord, ReclaimReply, ReclaimReq};
use crate::node::Bug;
use crate::node::{NodeState, H_LOG, H_RECLAIM};
use crate::stage::Stage;
use crate::store::history_key;
use crate::wire::{Put, WireError};

/// Planted bug shared by every protocol: commit without logging to the backups (their
/// replicas fall behind, which the checker reports as lost writes).
pub const SKIP_LOG: Bug =
    Bug { name: "SkipLog", about: "commits without logging to the backups: their replicas fall behind (lost writes)" };

const WRAP: u32 = u32::MAX;
/// Header (length, pad, sequence) plus trailer (length).
const FRAME: u64 = 16 + 4;

/// Applies a log record to `n`'s replica: each entry's version, if newer; returns how many
/// entries this node backs (and applied). A record that does not decode applies nothing.
pub fn apply(n: &NodeState, record: &[u8]) -> Result<usize, WireError> {
    let record = LogRecord::decode(record)?;
    let keep_values = n.recovery.is_some();
    let mut replica = n.replica.borrow_mut();
    let mut applied = 0;
    for LogEntry { table, key, version, value } in record.entries {
        // A record carries the entries of every primary it wrote: keep the ones this node
        // backs (the k-th backup of a key is its primary + k, for k in 1..replication).
        let home = n.workload.home(txbed_workloads::Key { table, row: key }, n.nodes);
        let nth = (n.me + n.nodes - home) % n.nodes;
        if nth == 0 || nth >= n.replication {
            continue;
        }
        let r = replica.entry(history_key(table, key)).or_default();
        // Entries may arrive out of order (rings and RPCs of different writers): the newest
        // version wins, so applying one twice or late changes nothing.
        if version > r.version {
            r.version = version;
            r.writer = record.id;
            if keep_values {
                r.value.clear();
                r.value.extend_from_slice(value);
            }
        }
        applied += 1;
    }
    Ok(applied)
}

/// Applies every complete, current entry of the ring `sender`'s `worker` writes on this node
/// (the backup side of a reclaim).
pub fn drain_ring(n: &NodeState, mem: &dyn HostMemory, sender: u16, worker: u16) -> Drained {
    let mut work = Drained::default();
    let layout = &n.catalog.layout;
    let base = n.base() + layout.ring(sender, worker);
    let ring = layout.ring_bytes;
    let slot = sender as usize * layout.log_workers as usize + worker as usize;
    let mut h = n.ring_reader(slot);
    loop {
        // A wrap marker may take the last 16 bytes (the writer keeps them free).
        if h.pos + 16 > ring {
            break;
        }
        let (Ok(len), Ok(s)) = (mem.load_u64(base + h.pos), mem.load_u64(base + h.pos + 8)) else { break };
        let len = len as u32;
        if s != h.seq {
            break;
        }
        if len == WRAP {
            h.consumed += ring - h.pos;
            h.pos = 0;
            continue;
        }
        // A record holds at least its id: a zero length is memory not written yet (the first
        // frame of a ring, whose sequence number 0 zeroed memory matches), not an empty record.
        if len == 0 {
            break;
        }
        let framed = (len as u64 + FRAME).div_ceil(8) * 8;
        if h.pos + framed > ring {
            break;
        }
        let mut rec = vec![0u8; len as usize];
        if mem.read(base + h.pos + 16, &mut rec).is_err() {
            break;
        }
        let trailer = mem.load_u64(base + h.pos + framed - 8).map(|x| (x >> 32) as u32).unwrap_or(0);
        if trailer != len {
            break; // not completely written yet
        }
        // The frame checks passed: these are the bytes the sender's encoder wrote.
        let applied = apply(n, &rec);
        debug_assert!(applied.is_ok(), "log record in ring {sender}/{worker} at {}: {applied:?}", h.pos);
        work.entries += applied.unwrap_or(0) as u64;
        work.bytes += framed;
        h.pos += framed;
        h.consumed += framed;
        h.seq += 1;
    }
    n.set_ring_reader(slot, h);
    work.consumed = h.consumed;
    work
}

/// What a drain of one ring did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Bytes consumed so far, as the sender counts them.
    pub consumed: u64,
    /// Entries this node backs, applied by this drain (each found by key).
    pub entries: u64,
    /// Framed bytes this drain read.
    pub bytes: u64,
}

/// Waits until `len` bytes fit in this worker's ring on `backup`: asks the backup to apply
/// what it holds and report how far it got (a writer must never overwrite entries the
/// backup has not applied; the lazy one-way reclaims alone give no such guarantee when the
/// backup's CPU lags). Entries of this worker's other coroutines may still be in flight,
/// hence the retry; a backup that makes no progress for `RECLAIM_PATIENCE_NS` fails the log.
async fn wait_for_room(ctx: &Ctx, n: &NodeState, backup: u16, len: u64) -> Result<(), TxnError> {
    let worker = ctx.me().worker;
    n.stats.borrow_mut().log_room_waits += 1;
    let mut stalled_since = ctx.now();
    let mut pause = RECLAIM_RETRY_NS;
    while !n.log_fits(worker, backup, len) {
        if ctx.now() - stalled_since > RECLAIM_PATIENCE_NS {
            return Err(TxnError::LogStalled { backup, worker, ms: RECLAIM_PATIENCE_NS / 1_000_000 });
        }
        let req = ReclaimReq { sender: n.me, worker, notify: false }.encode();
        n.note_send((ctx.me().worker, ctx.coroutine()), backup, true);
        let call = if n.local(backup) {
            ctx.call_local(H_RECLAIM, &req)
        } else {
            ctx.call(Endpoint { node: NodeId(backup), worker }, H_RECLAIM, &req)
        };
        // This coroutine's log WRITEs to earlier backups complete in the same wait: their
        // failure is the log's.
        ctx.wait().await?;
        let reply = ctx.take_reply(call).ok_or(TxnError::NoReply("RECLAIM"))??;
        let ReclaimReply { consumed } = ReclaimReply::decode(&reply)?;
        let before = n.ring_confirmed(worker, backup);
        n.log_confirmed(worker, backup, consumed);
        if n.ring_confirmed(worker, backup) == before {
            ctx.sleep(pause).await;
            pause = (pause * 2).min(RECLAIM_RETRY_MAX_NS);
        } else {
            stalled_since = ctx.now();
            pause = RECLAIM_RETRY_NS;
        }
    }
    Ok(())
}

/// How long a writer waits for in-flight entries to land before asking again, doubling up
/// to the maximum while the backup makes no progress.
const RECLAIM_RETRY_NS: u64 = 1_000;
const RECLAIM_RETRY_MAX_NS: u64 = 64_000;
/// How long a writer waits for a backup that applies nothing before it fails the log: long
/// enough for a descheduled NIC or backup thread on a real backend.
const RECLAIM_PATIENCE_NS: u64 = 1_000_000_000;

/// Splits a log record (`id | entries`) into records of at most `max` bytes, at entry
/// boundaries; each applies on its own, since entries carry their key and version.
fn split(record: &[u8], max: usize) -> Result<Vec<Vec<u8>>, TxnError> {
    let LogRecord { id, entries } = LogRecord::decode(record)?;
    let mut out: Vec<Vec<u8>> = Vec::new();
    for entry in entries {
        let e = LogEntry::framed_len(entry.value.len());
        if 8 + e > max {
            return Err(TxnError::TooBig {
                what: "log entry",
                bytes: e as u64,
                limit: max as u64,
                within: "log record",
            });
        }
        if out.last().is_none_or(|c| c.len() + e > max) {
            out.push(LogRecord::start(id));
        }
        entry.encode_into(out.last_mut().expect("a chunk"));
    }
    Ok(out)
}

/// Sends `record` to every node in `backups` and waits until all have it. A record larger
/// than the staging area (one-sided) or a datagram (RPC) goes as several, one after another.
///
/// With faults in the run the transaction is past its commit point here, so the log must
/// get through: a backup that is down is skipped (it rebuilds its replica when it rejoins),
/// and one that does not answer is tried again until it does, or is down, or has restarted
/// since (then it rebuilds too: the membership waits for this transaction first).
pub async fn append(ctx: &Ctx, n: &NodeState, backups: &[u16], record: &[u8]) -> Result<(), TxnError> {
    if n.recovery.is_some() {
        let epoch0 = ctx.view_epoch();
        let live: Vec<u16> = backups.iter().copied().filter(|&b| ctx.node_status(b) != NodeStatus::Down).collect();
        return append_robust(ctx, n, &live, record, epoch0).await;
    }
    if !n.hybrid.onesided(Stage::Log) {
        // One datagram per piece (the UD MTU less the RPC frame header), all in flight at once.
        let max = ctx.max_rpc_payload();
        let pieces = if record.len() <= max { vec![record.to_vec()] } else { split(record, max)? };
        return append_rpc(ctx, n, backups, &pieces).await;
    }
    let copies = backups.len().max(1) as u64;
    let area = crate::post::log_area(ctx).1.min(n.catalog.layout.ring_bytes);
    let framed = (record.len() as u64 + FRAME).div_ceil(8) * 8;
    if framed * copies <= area {
        return append_onesided(ctx, n, backups, record).await;
    }
    for chunk in split(record, (area / copies).saturating_sub(FRAME + 8) as usize)? {
        append_onesided(ctx, n, backups, &chunk).await?;
    }
    Ok(())
}

/// Whether a log record still needs to reach `backup`: not once it is down, nor once the
/// membership changed since the record was first sent (`epoch0`) while it is not up: it
/// rejoins with a replica rebuilt after this transaction completes.
fn still_needed(ctx: &Ctx, backup: u16, epoch0: u64) -> bool {
    match ctx.node_status(backup) {
        NodeStatus::Down => false,
        NodeStatus::Up => true,
        NodeStatus::Joining => ctx.view_epoch() == epoch0,
    }
}

/// [`append`] with faults in the run.
async fn append_robust(ctx: &Ctx, n: &NodeState, backups: &[u16], record: &[u8], epoch0: u64) -> Result<(), TxnError> {
    if !n.hybrid.onesided(Stage::Log) {
        let max = ctx.max_rpc_payload();
        let pieces = if record.len() <= max { vec![record.to_vec()] } else { split(record, max)? };
        return append_rpc_robust(ctx, n, backups, &pieces, epoch0).await;
    }
    let copies = backups.len().max(1) as u64;
    let area = crate::post::log_area(ctx).1.min(n.catalog.layout.ring_bytes);
    let framed = (record.len() as u64 + FRAME).div_ceil(8) * 8;
    if framed * copies <= area {
        return append_onesided_robust(ctx, n, backups, record, epoch0).await;
    }
    for chunk in split(record, (area / copies).saturating_sub(FRAME + 8) as usize)? {
        append_onesided_robust(ctx, n, backups, &chunk, epoch0).await?;
    }
    Ok(())
}

/// RPC LOG with faults: each (piece, backup) sent again until the backup takes it or is no
/// longer needed. A backup applies an entry once however often it gets it (newest version
/// wins), so repeating one that did arrive is harmless.
async fn append_rpc_robust(
    ctx: &Ctx,
    n: &NodeState,
    backups: &[u16],
    pieces: &[Vec<u8>],
    epoch0: u64,
) -> Result<(), TxnError> {
    let worker = ctx.me().worker;
    let retry = n.recovery.map_or(100_000, |r| r.retry_ns);
    let mut todo: Vec<(usize, u16)> = (0..pieces.len()).flat_map(|p| backups.iter().map(move |&b| (p, b))).collect();
    while !todo.is_empty() {
        let calls: Vec<((usize, u16), _)> = todo
            .iter()
            .map(|&(p, b)| {
                n.note_send((ctx.me().worker, ctx.coroutine()), b, true);
                let c = if n.local(b) {
                    ctx.call_local(H_LOG, &pieces[p])
                } else {
                    ctx.call(Endpoint { node: NodeId(b), worker }, H_LOG, &pieces[p])
                };
                ((p, b), c)
            })
            .collect();
        let _ = ctx.wait().await;
        let mut again = Vec::new();
        for (pb, c) in calls {
            match ctx.take_reply(c) {
                Some(Ok(r)) if r.is_empty() => {}
                Some(Ok(_)) => return Err(TxnError::Wire(WireError::Rejected)),
                _ => again.push(pb),
            }
        }
        ctx.clear_replies();
        again.retain(|&(_, b)| still_needed(ctx, b, epoch0));
        todo = again;
        if !todo.is_empty() {
            ctx.sleep(retry).await;
        }
    }
    let mut st = n.stats.borrow_mut();
    for p in pieces {
        st.log_records += backups.len() as u64;
        st.log_bytes += (backups.len() * p.len()) as u64;
    }
    Ok(())
}

/// One-sided LOG of one record with faults: as [`append_onesided`], and if any WRITE failed,
/// each remote copy is written again at the ring position it reserved until it lands, unless
/// the backup already reported applying past it, or is no longer needed. Rewriting the
/// position is safe: a writer reuses ring bytes only after the backup confirmed them, so no
/// later entry can be there yet.
async fn append_onesided_robust(
    ctx: &Ctx,
    n: &NodeState,
    backups: &[u16],
    record: &[u8],
    epoch0: u64,
) -> Result<(), TxnError> {
    let worker = ctx.me().worker;
    let retry = n.recovery.map_or(100_000, |r| r.retry_ns);
    let framed_len = (record.len() as u64 + FRAME).div_ceil(8) * 8;
    let ring = n.catalog.layout.ring_bytes;
    let (area_at, area) = crate::post::log_area(ctx);
    if framed_len > ring || framed_len > area || framed_len * backups.len() as u64 > area {
        let within = "log ring or staging area";
        return Err(TxnError::TooBig { what: "framed log record", bytes: framed_len, limit: ring.min(area), within });
    }
    let s = ctx.scratch();
    let ring_at = n.catalog.layout.ring(n.me, worker);
    let mut copies: Vec<RingCopy> = Vec::new();
    let mut reclaims = Vec::new();
    let mut failed = false;
    for (i, &b) in backups.iter().enumerate() {
        let local = n.local(b);
        loop {
            if n.log_fits(worker, b, framed_len) || !still_needed(ctx, b, epoch0) {
                break;
            }
            if wait_for_room(ctx, n, b, framed_len).await.is_err() {
                failed = true;
                ctx.sleep(retry).await;
            }
        }
        if !still_needed(ctx, b, epoch0) {
            continue;
        }
        let t = n.log_tail(worker, b, framed_len);
        let mut framed = Vec::with_capacity(framed_len as usize);
        framed.put_u32(record.len() as u32);
        framed.put_zeros(4);
        framed.put_u64(t.seq);
        framed.put_bytes(record);
        framed.resize(framed_len as usize - 4, 0);
        framed.put_u32(record.len() as u32);
        let src_at = area_at + i as u64 * framed_len;
        let src = if local { Payload::Inline(framed) } else { staged(ctx, s.lkey, src_at, &framed)? };
        let mut ops = Vec::new();
        if let Some(old) = t.wrapped_from {
            let mut marker = Vec::with_capacity(16);
            marker.put_u64(WRAP as u64);
            marker.put_u64(t.seq);
            ops.push((
                Op::Write { src: Payload::Inline(marker), remote: n.catalog.remote(b, ring_at + old, 16) },
                false,
            ));
        }
        ops.push((Op::Write { src, remote: n.catalog.remote(b, ring_at + t.pos, framed_len as u32) }, true));
        if local {
            crate::local::on_cpu(ctx, &ops)?;
        } else {
            copies.push((b, ops.clone(), n.ring_written(worker, b)));
            if post_ring(ctx, b, ops).await.is_err() {
                failed = true;
            }
        }
        if t.reclaim {
            reclaims.push(b);
        }
    }
    failed |= ctx.wait().await.is_err();
    if failed {
        for (b, ops, end) in copies {
            while still_needed(ctx, b, epoch0) && n.ring_confirmed(worker, b) < end {
                if post_ring(ctx, b, ops.clone()).await.is_ok() && ctx.wait().await.is_ok() {
                    break;
                }
                ctx.sleep(retry).await;
            }
        }
    }
    for b in reclaims.into_iter().filter(|&b| still_needed(ctx, b, epoch0)) {
        let req = ReclaimReq { sender: n.me, worker, notify: true }.encode();
        if n.local(b) {
            ctx.call_local_oneway(H_RECLAIM, &req);
        } else {
            ctx.call_oneway(Endpoint { node: NodeId(b), worker }, H_RECLAIM, &req);
        }
    }
    let mut st = n.stats.borrow_mut();
    st.log_records += backups.len() as u64;
    st.log_bytes += (backups.len() * record.len()) as u64;
    Ok(())
}

/// A record's copy for one backup: the backup, its WRITEs, and the ring bytes written once
/// the frame is in.
type RingCopy = (u16, Vec<(Op, bool)>, u64);

/// Posts a ring copy's WRITEs on this worker's first QP to `backup`, once the send queue
/// has room.
async fn post_ring(ctx: &Ctx, backup: u16, ops: Vec<(Op, bool)>) -> Result<(), TxnError> {
    let q = crate::post::qp(ctx, backup)?;
    crate::post::room(ctx, q, ops.len() as u32).await?;
    ctx.post(q, ops)?;
    Ok(())
}

/// RPC LOG: every piece to every backup, then one wait; each backup applies a piece on its
/// own (entries carry their key and version).
async fn append_rpc(ctx: &Ctx, n: &NodeState, backups: &[u16], pieces: &[Vec<u8>]) -> Result<(), TxnError> {
    let worker = ctx.me().worker;
    let mut calls = Vec::with_capacity(pieces.len() * backups.len());
    for p in pieces {
        for &b in backups {
            n.note_send((ctx.me().worker, ctx.coroutine()), b, true);
            let c = if n.local(b) {
                ctx.call_local(H_LOG, p)
            } else {
                ctx.call(Endpoint { node: NodeId(b), worker }, H_LOG, p)
            };
            calls.push((b, c));
        }
    }
    let waited = ctx.wait().await;
    // A backup that did not take a piece fails the log: committing without it would lose the
    // write there.
    let failed = calls.into_iter().find_map(|(backup, c)| match ctx.take_reply(c) {
        Some(Ok(r)) if r.is_empty() => None,
        Some(Ok(_)) => Some(TxnError::Wire(WireError::Rejected)),
        Some(Err(error)) => Some(TxnError::Log { backup, error }),
        None => Some(TxnError::Log { backup, error: RpcError::Lost }),
    });
    ctx.clear_replies();
    waited?;
    if let Some(e) = failed {
        return Err(e);
    }
    let mut st = n.stats.borrow_mut();
    for p in pieces {
        st.log_records += backups.len() as u64;
        st.log_bytes += (backups.len() * p.len()) as u64;
    }
    Ok(())
}

/// `bytes` copied to `at` in this coroutine's scratch, as the source of a WRITE.
fn staged(ctx: &Ctx, lkey: u32, at: u64, bytes: &[u8]) -> Result<Payload, TxnError> {
    ctx.write_local(at, bytes)?;
    Ok(Payload::Local(LocalBuf { lkey, addr: at, len: bytes.len() as u32 }))
}

/// One-sided LOG of one record (DrTM+H Sec. 5.4): a WRITE into this worker's ring on each
/// backup.
async fn append_onesided(ctx: &Ctx, n: &NodeState, backups: &[u16], record: &[u8]) -> Result<(), TxnError> {
    let worker = ctx.me().worker;
    let framed_len = (record.len() as u64 + FRAME).div_ceil(8) * 8;
    let ring = n.catalog.layout.ring_bytes;
    let (area_at, area) = crate::post::log_area(ctx);
    if framed_len > ring || framed_len > area {
        let within = "log ring or staging area";
        return Err(TxnError::TooBig { what: "framed log record", bytes: framed_len, limit: ring.min(area), within });
    }
    let s = ctx.scratch();
    // The log area stages one framed copy per backup (they differ in the sequence
    // number): the NIC reads each when it runs that WRITE, so copies must not overlap.
    let copies = framed_len * backups.len() as u64;
    if copies > area {
        return Err(TxnError::TooBig { what: "log copies", bytes: copies, limit: area, within: "log staging area" });
    }
    let mut reclaims = Vec::new();
    for (i, &b) in backups.iter().enumerate() {
        let src_at = area_at + i as u64 * framed_len;
        // Room first (a wrap marker and the record), so no other coroutine of this worker
        // reserves and posts a later ring position in between.
        let local = n.local(b);
        let q = crate::post::qp(ctx, b)?;
        loop {
            if !local {
                crate::post::room(ctx, q, 2).await?;
            }
            if n.log_fits(worker, b, framed_len) {
                break;
            }
            wait_for_room(ctx, n, b, framed_len).await?;
        }
        let t = n.log_tail(worker, b, framed_len);
        let mut framed = Vec::with_capacity(framed_len as usize);
        framed.put_u32(record.len() as u32);
        framed.put_zeros(4);
        framed.put_u64(t.seq);
        framed.put_bytes(record);
        framed.resize(framed_len as usize - 4, 0);
        framed.put_u32(record.len() as u32);
        debug_assert_eq!(framed.len() as u64, framed_len);
        let ring_at = n.catalog.layout.ring(n.me, worker);
        // The CPU writes its own ring from the frame (marker first, as the NIC would); the
        // NIC reads a staged copy.
        let src = if local { Payload::Inline(framed) } else { staged(ctx, s.lkey, src_at, &framed)? };
        let mut ops = Vec::new();
        if let Some(old) = t.wrapped_from {
            let mut marker = Vec::with_capacity(16);
            marker.put_u64(WRAP as u64);
            marker.put_u64(t.seq);
            ops.push((
                Op::Write { src: Payload::Inline(marker), remote: n.catalog.remote(b, ring_at + old, 16) },
                false,
            ));
        }
        ops.push((Op::Write { src, remote: n.catalog.remote(b, ring_at + t.pos, framed_len as u32) }, true));
        if local {
            crate::local::on_cpu(ctx, &ops)?;
        } else {
            n.note_send((ctx.me().worker, ctx.coroutine()), b, true);
            ctx.post(q, ops)?;
        }
        if t.reclaim {
            reclaims.push(b);
        }
    }
    ctx.wait().await?;
    for b in reclaims {
        let req = ReclaimReq { sender: n.me, worker, notify: true }.encode();
        if n.local(b) {
            ctx.call_local_oneway(H_RECLAIM, &req);
        } else {
            ctx.call_oneway(Endpoint { node: NodeId(b), worker }, H_RECLAIM, &req);
        }
    }
    let mut st = n.stats.borrow_mut();
    st.log_records += backups.len() as u64;
    st.log_bytes += (backups.len() * record.len()) as u64;
    Ok(())
}
