//! The executor of a data center (RedT Sec. 4.2): Algorithm 1's locking over every replica
//! of the data center with one-sided verbs (latch by CAS, lock read and written back, No-Wait),
//! Algorithm 2's redo-log writes into the replicas' nodes' circular buffers (FAA on the tail,
//! lazy head, WRITE of the entry), the vote, and the commit phase (commit/abort log, writes
//! installed by the Thomas write rule, locks released). And the log replay each node runs.

use std::collections::BTreeMap;

use txbed_transport::{Ctx, LocalBuf, NodeStatus, Op, Payload};
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Path, Rec};
use txbed_txn::store::{self, LOCK, VERSION};
use txbed_txn::wire::{put_u64_at, WireError};
use txbed_txn::TxnError;

use super::copy::{install_into, Copy, Installs, LATCH_PAUSE_NS, LATCH_ROUNDS, LOG_FULL_BOUND_NS};
use super::item::{ext_image, Item, LockType};
use super::logbuf::{self, Change, Entry};
use super::wire::{Decision, Seen, SubTxn, Vote};
use super::{part, IntraDc, Sub, IGNORE_THOMAS_RULE};

/// The replicas of `sub`'s operations, located (location cache, then index READs).
/// With faults, only the replicas on nodes the view shows up: one on a failed node is
/// absent (no lock, no redo entry, no vote) until its restoration.
pub async fn copies_of(ctx: &Ctx, n: &NodeState, ops: &[super::wire::Op]) -> Result<Vec<Copy>, TxnError> {
    let mut out = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        for &(node, copy) in &o.replicas {
            if n.recovery.is_some() && ctx.node_status(node) != txbed_transport::NodeStatus::Up {
                continue;
            }
            let table = match copy {
                0 => o.table,
                k => store::copy_table(o.table, k).ok_or(TxnError::UnknownTable(o.table))?,
            };
            let place = n.catalog.layout.table(table).ok_or(TxnError::UnknownTable(table))?;
            out.push(Copy {
                op: i,
                node,
                copy,
                table,
                key: o.key,
                write: o.write,
                offset: 0,
                ext_at: place.ext_at as usize,
                tuple: Vec::new(),
                locked: false,
            });
        }
    }
    let mut recs: Vec<Rec> = out.iter().map(Copy::rec).collect();
    ops::locate_all(ctx, n, &mut recs, |_| true).await?;
    for (c, r) in out.iter_mut().zip(recs) {
        c.offset = r.offset;
    }
    Ok(out)
}

/// Posts `list` about copy `c` (the local path where it is this node's).
/// A list done by this node's CPU counts as a local access of the coroutine's next stage.
async fn post(ctx: &Ctx, n: &NodeState, c: &Copy, list: Vec<(Op, bool)>) -> Result<Path, TxnError> {
    let path = ops::issue(ctx, n, &c.rec(), list).await?;
    if path == Path::Local {
        *part(n).local.borrow_mut().entry((ctx.me().worker, ctx.coroutine())).or_default() += 1;
    }
    Ok(path)
}

fn tuple_len(n: &NodeState, c: &Copy) -> u64 {
    n.catalog.layout.table(c.table).map_or(0, |p| p.tuple_bytes)
}

/// Round 1 of AcqLock and RlsLock for the copies `which` (lines 7-8, 17-18): CAS the latch
/// from 0 to `tid` and READ the tuple, back to back on one QP, as many at once as the
/// scratch's first half holds. Returns, per copy, the tuple if the latch was won.
async fn latch_and_read(
    ctx: &Ctx,
    n: &NodeState,
    copies: &[Copy],
    which: &[usize],
    tid: u64,
    steal: bool,
) -> Result<Vec<(usize, Option<Vec<u8>>)>, TxnError> {
    let scratch = ctx.scratch();
    let end = ops::buffers_end(ctx);
    let mut out = Vec::new();
    let mut i = 0;
    while i < which.len() {
        let mut at = scratch.addr;
        let mut batch = Vec::new();
        while i < which.len() {
            let c = &copies[which[i]];
            let len = tuple_len(n, c);
            if at + 8 + len > end {
                if batch.is_empty() {
                    return Err(TxnError::TooBig {
                        what: "a RedT tuple",
                        bytes: 8 + len,
                        limit: end - scratch.addr,
                        within: "scratch half",
                    });
                }
                break;
            }
            let cas_buf = LocalBuf { lkey: scratch.lkey, addr: at, len: 8 };
            let tuple_buf = LocalBuf { lkey: scratch.lkey, addr: at + 8, len: len as u32 };
            ctx.store_local(at, u64::MAX)?;
            let cas =
                Op::Cas { local: cas_buf, remote: n.catalog.remote(c.node, c.offset + LOCK, 8), compare: 0, swap: tid };
            let read = Op::Read { local: tuple_buf, remote: n.catalog.remote(c.node, c.offset, len as u32) };
            post(ctx, n, c, vec![(cas, false), (read, true)]).await?;
            batch.push((which[i], at, len));
            at += 8 + len;
            i += 1;
        }
        ctx.wait().await?;
        for (k, at, len) in batch {
            // With `steal`, a latch held under this transaction's id is taken over: an
            // executor that failed holding it is replaced (ADOPT) under the same id. Nothing
            // else latches under a transaction's id (the replay uses `REPLAY_LATCH`).
            let old = ctx.load_local(at)?;
            let won = old == 0 || (steal && old == tid);
            let tuple = if won {
                let mut t = vec![0u8; len as usize];
                ctx.read_local(at + 8, &mut t)?;
                let ns = ctx.costs().copy_ns(t.len());
                ctx.compute(ns);
                Some(t)
            } else {
                None
            };
            out.push((k, tuple));
        }
    }
    Ok(out)
}

/// A WRITE's payload: inline up to 64 bytes, else staged at `*at` in the scratch's second
/// half; `None` when the staging area is full (wait for what was posted, then start over).
fn stage(ctx: &Ctx, bytes: &[u8], at: &mut u64) -> Result<Option<Payload>, TxnError> {
    if bytes.len() <= 64 {
        return Ok(Some(Payload::Inline(bytes.to_vec())));
    }
    let s = ctx.scratch();
    if *at + bytes.len() as u64 > s.addr + s.len as u64 {
        return Ok(None);
    }
    ops::inline_or_staged(ctx, bytes, at).map(Some)
}

/// [`stage`], waiting for what was posted (and starting the staging area over) when it is
/// full.
async fn stage_or_wait(ctx: &Ctx, bytes: &[u8], at: &mut u64, half: u64) -> Result<Payload, TxnError> {
    if let Some(p) = stage(ctx, bytes, at)? {
        return Ok(p);
    }
    ctx.wait().await?;
    *at = half;
    Ok(stage(ctx, bytes, at)?.ok_or(WireError::Invalid("a RedT write larger than the scratch's second half"))?)
}

/// AcqLock over every copy (Algorithm 1, lines 5-14), No-Wait: a conflicting lock or a full
/// owner list makes the sub-transaction vote no. Returns `Err(cause)` then, with the copies
/// it did lock marked `locked`.
pub async fn lock_all(
    ctx: &Ctx,
    n: &NodeState,
    tid: u64,
    copies: &mut [Copy],
) -> Result<Result<(), &'static str>, TxnError> {
    if part(n).options.intra_dc == IntraDc::Messages {
        return super::messages::lock_all(ctx, n, tid, copies).await;
    }
    let mut pending: Vec<usize> = (0..copies.len()).collect();
    let mut conflict = None;
    for round in 0.. {
        let got = latch_and_read(ctx, n, copies, &pending, tid, false).await?;
        pending.clear();
        for (k, tuple) in got {
            let Some(mut tuple) = tuple else {
                pending.push(k);
                continue;
            };
            let c = &mut copies[k];
            let kind = if c.write { LockType::Ex } else { LockType::Sh };
            let unlatch = Op::Write {
                src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                remote: n.catalog.remote(c.node, c.offset + LOCK, 8),
            };
            match Item::read(&tuple, c.ext_at).acquire(kind, tid) {
                Some(next) => {
                    next.write(&mut tuple, c.ext_at);
                    let lock = Op::Write {
                        src: Payload::Inline(ext_image(&next)),
                        remote: n.catalog.remote(c.node, c.offset + c.ext_at as u64, super::item::EXT_BYTES as u32),
                    };
                    put_u64_at(&mut tuple, LOCK as usize, 0);
                    c.tuple = tuple;
                    c.locked = true;
                    let c = &copies[k];
                    post(ctx, n, c, vec![(lock, false), (unlatch, true)]).await?;
                }
                None => {
                    conflict = Some(super::cause::LOCK_CONFLICT);
                    post(ctx, n, &copies[k], vec![(unlatch, true)]).await?;
                }
            }
        }
        ctx.wait().await?;
        if conflict.is_some() {
            break;
        }
        if pending.is_empty() {
            return Ok(Ok(()));
        }
        if round >= LATCH_ROUNDS {
            conflict = Some(super::cause::LATCH_BUSY);
            break;
        }
        ctx.sleep(LATCH_PAUSE_NS).await;
    }
    Ok(Err(conflict.unwrap_or(super::cause::LOCK_CONFLICT)))
}

/// RlsLock over the locked copies (lines 15-24): the lock and the owner entry go, and with a
/// commit each written copy takes its new value if `x.wts < cts` (the Thomas write rule).
/// `installs`: per operation, (new version, new record).
pub async fn release_all(
    ctx: &Ctx,
    n: &NodeState,
    tid: u64,
    copies: &[Copy],
    commit: Option<(u64, &Installs)>,
) -> Result<(), TxnError> {
    release(ctx, n, tid, copies, commit, false).await
}

/// [`release_all`]; with `steal`, taking over latches held under `tid` (recovery's ADOPT).
pub async fn release(
    ctx: &Ctx,
    n: &NodeState,
    tid: u64,
    copies: &[Copy],
    commit: Option<(u64, &Installs)>,
    steal: bool,
) -> Result<(), TxnError> {
    if part(n).options.intra_dc == IntraDc::Messages {
        return super::messages::release_all(ctx, n, tid, copies, commit).await;
    }
    let mut pending: Vec<usize> = (0..copies.len()).filter(|&k| copies[k].locked).collect();
    let half = ops::log_area(ctx).0;
    let began = ctx.now();
    while !pending.is_empty() {
        let got = latch_and_read(ctx, n, copies, &pending, tid, steal).await?;
        pending.clear();
        let mut at = half;
        for (k, tuple) in got {
            let Some(mut tuple) = tuple else {
                pending.push(k);
                continue;
            };
            let c = &copies[k];
            let item = Item::read(&tuple, c.ext_at);
            let mut next = item.release(tid);
            let install = commit.and_then(|(cts, w)| Some((cts, w.get(&c.op)?)));
            let unlatch = Op::Write {
                src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                remote: n.catalog.remote(c.node, c.offset + LOCK, 8),
            };
            let mut list = Vec::new();
            match install {
                Some((cts, (version, value))) if item.wts < cts || n.bug == Some(IGNORE_THOMAS_RULE) => {
                    next.wts = cts;
                    install_into(&mut tuple, c.ext_at, *version, tid, value);
                    next.write(&mut tuple, c.ext_at);
                    let body = &tuple[VERSION as usize..];
                    let src = stage_or_wait(ctx, body, &mut at, half).await?;
                    list.push((
                        Op::Write { src, remote: n.catalog.remote(c.node, c.offset + VERSION, body.len() as u32) },
                        false,
                    ));
                }
                _ => {
                    let lock = Op::Write {
                        src: Payload::Inline(ext_image(&next)),
                        remote: n.catalog.remote(c.node, c.offset + c.ext_at as u64, super::item::EXT_BYTES as u32),
                    };
                    list.push((lock, false));
                }
            }
            list.push((unlatch, true));
            post(ctx, n, c, list).await?;
        }
        ctx.wait().await?;
        if !pending.is_empty() {
            if ctx.now() - began > LOG_FULL_BOUND_NS {
                return Err(TxnError::Unsupported("a RedT latch stayed held for 100 ms"));
            }
            ctx.sleep(LATCH_PAUSE_NS).await;
        }
    }
    Ok(())
}

/// WriteLog (Algorithm 2, lines 9-21): the changes go to the nodes holding the written
/// copies, one entry (or several, a slot each) per node: FAA on the node's tail for a slot,
/// the lazy head check, a WRITE of the entry. Returns (node, slot, entry) of each.
pub async fn write_log(
    ctx: &Ctx,
    n: &NodeState,
    tid: u64,
    cts: u64,
    status: u64,
    changes: BTreeMap<u16, Vec<Change>>,
) -> Result<Vec<(u16, u64, Entry)>, TxnError> {
    if part(n).options.intra_dc == IntraDc::Messages {
        return super::messages::write_log(ctx, n, tid, cts, status, changes).await;
    }
    let mut entries = Vec::new();
    for (node, chs) in changes {
        for part in logbuf::split(chs)? {
            entries.push((node, Entry { tid, cts, status, changes: part }));
        }
    }
    let area = n.catalog.layout.area_at;
    let scratch = ctx.scratch();
    // The FAAs, all at once; their old values land in the scratch's first half. A slot whose
    // FAA landed is known by its value replacing the sentinel, even when another FAA of the
    // batch failed: it must be finished then (`finish_slots`), or each replay's head stops.
    const NO_SLOT: u64 = u64::MAX;
    let mut slots = Vec::with_capacity(entries.len());
    let mut taken: Vec<(u16, u64)> = Vec::with_capacity(entries.len());
    for chunk in entries.chunks((ctx.scratch().len as usize / 16).max(1)) {
        let mut failed = None;
        for (i, (node, _)) in chunk.iter().enumerate() {
            let local = LocalBuf { lkey: scratch.lkey, addr: scratch.addr + 8 * i as u64, len: 8 };
            ctx.store_local(local.addr, NO_SLOT)?;
            let faa = Op::Faa { local, remote: n.catalog.remote(*node, area + logbuf::TAIL, 8), add: 1 };
            if let Err(e) = ops::issue(ctx, n, &log_rec(*node), vec![(faa, true)]).await {
                failed.get_or_insert(e);
            }
        }
        if let Err(e) = ctx.wait().await {
            failed.get_or_insert(e.into());
        }
        for (i, (node, _)) in chunk.iter().enumerate() {
            let idx = ctx.load_local(scratch.addr + 8 * i as u64)?;
            if idx != NO_SLOT {
                part(n).reserved.borrow_mut().insert((*node, idx));
                taken.push((*node, idx));
                slots.push(idx);
            }
        }
        if let Some(e) = failed {
            finish_slots(ctx, n, &taken).await;
            return Err(e);
        }
    }
    let half = ops::log_area(ctx).0;
    let mut at = half;
    let mut out = Vec::with_capacity(entries.len());
    let written = async {
        for ((node, entry), idx) in entries.into_iter().zip(slots) {
            wait_for_room(ctx, n, node, idx).await?;
            let bytes = entry.encode();
            let src = stage_or_wait(ctx, &bytes, &mut at, half).await?;
            let write =
                Op::Write { src, remote: n.catalog.remote(node, area + logbuf::slot_at(idx), bytes.len() as u32) };
            ops::issue(ctx, n, &log_rec(node), vec![(write, true)]).await?;
            out.push((node, idx, entry));
        }
        ctx.wait().await?;
        Ok::<(), TxnError>(())
    }
    .await;
    if let Err(e) = written {
        // A failure (a copy's node died) stopped the writes: the slots taken and not written
        // would stop each replay's head for good. They are finished as empty aborted entries
        // where the node is up, and left to the membership's hole check elsewhere.
        let unwritten: Vec<(u16, u64)> =
            taken.into_iter().filter(|&(node, idx)| !out.iter().any(|o| o.0 == node && o.1 == idx)).collect();
        finish_slots(ctx, n, &unwritten).await;
        return Err(e);
    }
    for (node, idx) in taken {
        part(n).reserved.borrow_mut().remove(&(node, idx));
    }
    Ok(out)
}

/// Best effort, after a failure: the log slots `taken` by FAA and never written get an empty
/// ABORTED header on the nodes that are up.
async fn finish_slots(ctx: &Ctx, n: &NodeState, taken: &[(u16, u64)]) {
    let area = n.catalog.layout.area_at;
    let mut header = vec![0u8; logbuf::ENTRY_HEADER as usize];
    txbed_txn::wire::put_u64_at(&mut header, logbuf::STATUS_AT as usize, logbuf::ABORTED);
    for &(node, idx) in taken {
        if ctx.node_status(node) == NodeStatus::Up {
            let write = Op::Write {
                src: Payload::Inline(header.clone()),
                remote: n.catalog.remote(node, area + logbuf::slot_at(idx), header.len() as u32),
            };
            let _ = ops::issue(ctx, n, &log_rec(node), vec![(write, true)]).await;
        }
    }
    let _ = ctx.wait().await;
    ctx.clear_replies();
    for key in taken {
        part(n).reserved.borrow_mut().remove(key);
    }
}

/// The lazy head check (lines 16-18): only when slot `idx` is a whole buffer ahead of the
/// head last seen on `node`, READ the head again, until the replay there freed the slot.
async fn wait_for_room(ctx: &Ctx, n: &NodeState, node: u16, idx: u64) -> Result<(), TxnError> {
    let began = ctx.now();
    let seen = |n: &NodeState| part(n).log_head.borrow().get(&node).copied().unwrap_or(0);
    while idx >= seen(n) + logbuf::SLOTS {
        let scratch = ctx.scratch();
        let local = LocalBuf { lkey: scratch.lkey, addr: scratch.addr, len: 8 };
        let read = Op::Read { local, remote: n.catalog.remote(node, n.catalog.layout.area_at + logbuf::HEAD, 8) };
        ops::issue(ctx, n, &log_rec(node), vec![(read, true)]).await?;
        ctx.wait().await?;
        let head = ctx.load_local(scratch.addr)?;
        part(n).log_head.borrow_mut().insert(node, head);
        if idx >= head + logbuf::SLOTS {
            if ctx.now() - began > LOG_FULL_BOUND_NS {
                return Err(TxnError::Unsupported("a RedT log buffer stayed full for 100 ms (its replay stalled)"));
            }
            ctx.sleep(1_000).await;
        }
    }
    Ok(())
}

/// What log verbs are posted as: a record of `node` (its QP, the local path on this node).
fn log_rec(node: u16) -> Rec {
    Rec { table: 0, key: 0, home: node, write: true, offset: 0, locked: false, asked: false, tuple: Vec::new() }
}

/// CommitLog (lines 22-25): each entry takes the commit timestamp and status; on a commit the
/// changes' contents too (the decision carries the values: docs/protocols.md, "RedT"). The
/// entry's body goes before its status word, on one QP, so the replay never sees a
/// committed entry without its contents.
pub async fn commit_log(
    ctx: &Ctx,
    n: &NodeState,
    slots: &mut [(u16, u64, Entry)],
    cts: u64,
    status: u64,
    installs: &BTreeMap<(u16, u64), (u64, Vec<u8>)>,
) -> Result<(), TxnError> {
    if part(n).options.intra_dc == IntraDc::Messages {
        return super::messages::commit_log(ctx, n, slots, cts, status, installs).await;
    }
    let area = n.catalog.layout.area_at;
    let half = ops::log_area(ctx).0;
    let mut at = half;
    for (node, idx, entry) in slots.iter_mut() {
        let at_slot = area + logbuf::slot_at(*idx);
        let mut list = Vec::new();
        if status == logbuf::COMMITTED {
            entry.cts = cts;
            for c in entry.changes.iter_mut() {
                let (t, _) = store::copy_of(c.table);
                if let Some((version, value)) = installs.get(&(t, c.key)) {
                    c.version = *version;
                    c.content = value.clone();
                }
            }
            let bytes = entry.encode();
            let src = stage_or_wait(ctx, &bytes, &mut at, half).await?;
            list.push((Op::Write { src, remote: n.catalog.remote(*node, at_slot, bytes.len() as u32) }, false));
        }
        entry.status = status;
        let word = Payload::Inline(status.to_le_bytes().to_vec());
        list.push((Op::Write { src: word, remote: n.catalog.remote(*node, at_slot + logbuf::STATUS_AT, 8) }, true));
        ops::issue(ctx, n, &log_rec(*node), list).await?;
    }
    ctx.wait().await?;
    Ok(())
}

/// The execution phase of a sub-transaction at its executor: lock every copy in the data
/// center, pre-write the redo log to the nodes of the written copies, vote. The state the
/// commit phase needs stays with the node (`Sub`).
pub async fn execute(ctx: &Ctx, n: &NodeState, sub: &SubTxn) -> Result<Vote, TxnError> {
    let tid = sub.tid;
    if part(n).fenced.borrow().contains(&tid) {
        // A new coordinator resolved it (Sec. 5.1.1): its failed coordinator's request is void.
        return Ok(Vote { yes: false, cause: super::cause::code(super::cause::REPLICA_DOWN), ops: Vec::new() });
    }
    match execute_on_live(ctx, n, sub).await {
        Ok(v) => Ok(v),
        Err(e) if n.recovery.is_none() => Err(e),
        Err(_) => {
            // A replica's node failed under a verb: vote no. What was locked or logged is
            // found again by the transaction's id when the abort comes (`recovery::clean`).
            let copies = copies_of(ctx, n, &sub.ops).await.unwrap_or_default();
            let sub_state = Sub::orphan(sub, copies);
            part(n).subs.borrow_mut().insert(tid, sub_state);
            Ok(Vote { yes: false, cause: super::cause::code(super::cause::REPLICA_DOWN), ops: Vec::new() })
        }
    }
}

async fn execute_on_live(ctx: &Ctx, n: &NodeState, sub: &SubTxn) -> Result<Vote, TxnError> {
    let tid = sub.tid;
    let mut copies = copies_of(ctx, n, &sub.ops).await?;
    let locked = lock_all(ctx, n, tid, &mut copies).await?;
    if let Err(cause) = locked {
        release_all(ctx, n, tid, &copies, None).await?;
        copies.iter_mut().for_each(|c| c.locked = false);
        part(n).subs.borrow_mut().insert(tid, Sub::new(sub, copies, Vec::new(), false));
        return Ok(Vote { yes: false, cause: super::cause::code(cause), ops: Vec::new() });
    }
    // Redo log replication (Sec. 4.2.2): an entry per node of the written copies, its
    // contents filled in with the decision.
    let mut changes: BTreeMap<u16, Vec<Change>> = BTreeMap::new();
    for c in copies.iter().filter(|c| c.write) {
        let content = vec![0u8; c.record().len()];
        changes.entry(c.node).or_default().push(Change { table: c.table, key: c.key, version: 0, content });
    }
    let slots = write_log(ctx, n, tid, 0, logbuf::LOGGED, changes).await?;
    let mut ops_seen: Vec<(u16, Vec<Seen>, Vec<u8>)> = Vec::new();
    for (i, _) in sub.ops.iter().enumerate() {
        let mine: Vec<&Copy> = copies.iter().filter(|c| c.op == i).collect();
        let seen =
            mine.iter().map(|c| Seen { node: c.node, copy: c.copy, wts: c.item().wts, version: c.version() }).collect();
        let freshest =
            mine.iter().max_by_key(|c| (c.item().wts, c.version())).map(|c| c.record().to_vec()).unwrap_or_default();
        ops_seen.push((i as u16, seen, freshest));
    }
    part(n).subs.borrow_mut().insert(tid, Sub::new(sub, copies, slots, true));
    Ok(Vote { yes: true, cause: 0, ops: ops_seen })
}

/// The commit phase at an executor (Sec. 4.2.2): on a commit, the commit log and the writes
/// (a sub-transaction that voted no writes fresh redo entries, committed, for the replay to
/// install); on an abort, the abort log; then the locks go.
pub async fn decide(ctx: &Ctx, n: &NodeState, d: &Decision) -> Result<(), TxnError> {
    let p = part(n);
    if !d.recovered && p.fenced.borrow().contains(&d.tid) {
        // Its coordinator failed and a new one took the transaction over (Sec. 5.1.1).
        return Ok(());
    }
    let Some(mut sub) = p.subs.borrow_mut().remove(&d.tid) else { return Ok(()) };
    // What a new coordinator asks (RECOVER) should this transaction's coordinator fail: the
    // decision, with every write's value, before any of it is carried out.
    let decided =
        super::Decided { decision: d.clone(), executors: sub.executors.clone(), home_ops: sub.home_ops.clone() };
    p.decided.borrow_mut().insert(super::thread_of(d.tid), decided);
    if sub.orphan {
        // Its execution failed part way: clean up by the transaction's id.
        return clean(ctx, n, d, &sub.ops, &sub.copies).await;
    }
    match carry_out(ctx, n, d, &mut sub).await {
        // A replica's node failed under a verb: finish on the live copies, by the id.
        Err(_) if n.recovery.is_some() => clean(ctx, n, d, &sub.ops, &sub.copies).await,
        r => r,
    }
}

/// New values by operation of a sub-transaction, and by (table, key) for log entries.
pub fn new_values(ops: &[super::wire::Op], d: &Decision) -> (Installs, BTreeMap<(u16, u64), (u64, Vec<u8>)>) {
    let mut by_op: Installs = BTreeMap::new();
    let mut by_key: BTreeMap<(u16, u64), (u64, Vec<u8>)> = BTreeMap::new();
    for (i, o) in ops.iter().enumerate() {
        if let Some((_, v, value)) = d.writes.iter().find(|(idx, _, _)| *idx == o.idx) {
            by_op.insert(i, (*v, value.clone()));
            by_key.insert((o.table, o.key), (*v, value.clone()));
        }
    }
    (by_op, by_key)
}

async fn carry_out(ctx: &Ctx, n: &NodeState, d: &Decision, sub: &mut Sub) -> Result<(), TxnError> {
    let (by_op, by_key) = new_values(&sub.ops, d);
    match (d.commit, sub.yes) {
        (true, true) => {
            commit_log(ctx, n, &mut sub.slots, d.cts, logbuf::COMMITTED, &by_key).await?;
            release_all(ctx, n, d.tid, &sub.copies, Some((d.cts, &by_op))).await?;
        }
        (true, false) => {
            let mut changes: BTreeMap<u16, Vec<Change>> = BTreeMap::new();
            for c in sub.copies.iter().filter(|c| c.write) {
                if let Some((version, value)) = by_op.get(&c.op) {
                    let ch = Change { table: c.table, key: c.key, version: *version, content: value.clone() };
                    changes.entry(c.node).or_default().push(ch);
                }
            }
            write_log(ctx, n, d.tid, d.cts, logbuf::COMMITTED, changes).await?;
        }
        (false, true) => {
            commit_log(ctx, n, &mut sub.slots, 0, logbuf::ABORTED, &by_key).await?;
            release_all(ctx, n, d.tid, &sub.copies, None).await?;
        }
        (false, false) => {}
    }
    Ok(())
}

/// What the replay latches with: its entry's id with the top bit set, never a transaction's
/// id (node + 1 < 2048 in the top 12 bits), so recovery never takes a replay's latch over.
const REPLAY_LATCH: u64 = 1 << 63;

/// One scan of this node's buffer (ReplayLog, lines 26-37): committed entries' changes are
/// applied by the Thomas write rule, finished entries become Flushed, and the head moves over
/// the finished prefix. Returns whether the buffer is empty (head = tail).
pub async fn replay_once(ctx: &Ctx, n: &NodeState) -> Result<bool, TxnError> {
    let area = n.base() + n.catalog.layout.area_at;
    let head = ctx.load_local(area + logbuf::HEAD)?;
    let tail = ctx.load_local(area + logbuf::TAIL)?;
    let stop = tail.min(head + logbuf::SLOTS);
    let mut moving = true;
    let mut new_head = head;
    for idx in head..stop {
        let at = area + logbuf::slot_at(idx);
        let status = ctx.load_local(at + logbuf::STATUS_AT)?;
        ctx.memory_misses(1);
        if status == logbuf::COMMITTED {
            let mut slot = vec![0u8; logbuf::SLOT_BYTES as usize];
            ctx.read_local(at, &mut slot)?;
            let entry = Entry::decode(&slot)?;
            if !apply(ctx, n, &entry).await? {
                // A latch held by an executor: leave this entry (and the head) for the next scan.
                moving = false;
                continue;
            }
        }
        match status {
            logbuf::COMMITTED | logbuf::ABORTED | logbuf::FLUSHED => {
                ctx.store_local(at + logbuf::STATUS_AT, logbuf::FLUSHED)?;
                if moving {
                    ctx.store_local(at + logbuf::STATUS_AT, logbuf::INITED)?;
                    new_head += 1;
                }
            }
            _ => moving = false,
        }
    }
    if new_head != head {
        ctx.store_local(area + logbuf::HEAD, new_head)?;
    }
    Ok(new_head == tail)
}

/// Applies a committed entry's changes to this node's copies, each under its latch, by the
/// Thomas write rule (a change is applied only if its cts is larger than the item's wts).
/// False if a latch was busy (nothing of the entry is lost: applying again is idempotent).
async fn apply(ctx: &Ctx, n: &NodeState, e: &Entry) -> Result<bool, TxnError> {
    let me = n.me;
    for ch in &e.changes {
        let place = n.catalog.layout.table(ch.table).ok_or(TxnError::UnknownTable(ch.table))?;
        let Some(off) = ctx.with_memory(|m| store::find_local(m, n.base(), place, ch.key)) else {
            return Err(TxnError::NotFound { node: me, table: ch.table, key: ch.key });
        };
        ctx.memory_misses(2);
        let c = Copy {
            op: 0,
            node: me,
            copy: store::copy_of(ch.table).1,
            table: ch.table,
            key: ch.key,
            write: true,
            offset: off,
            ext_at: place.ext_at as usize,
            tuple: Vec::new(),
            locked: false,
        };
        let got = latch_and_read(ctx, n, std::slice::from_ref(&c), &[0], e.tid | REPLAY_LATCH, false).await?;
        let Some(Some(mut tuple)) = got.into_iter().next().map(|(_, t)| t) else { return Ok(false) };
        let mut item = Item::read(&tuple, c.ext_at);
        let unlatch = Op::Write {
            src: Payload::Inline(0u64.to_le_bytes().to_vec()),
            remote: n.catalog.remote(me, off + LOCK, 8),
        };
        if item.wts < e.cts || n.bug == Some(IGNORE_THOMAS_RULE) {
            item.wts = e.cts;
            install_into(&mut tuple, c.ext_at, ch.version, e.tid, &ch.content);
            item.write(&mut tuple, c.ext_at);
            ctx.write_local(n.base() + off + VERSION, &tuple[VERSION as usize..])?;
            let ns = ctx.costs().copy_ns(tuple.len());
            ctx.compute(ns);
        }
        post(ctx, n, &c, vec![(unlatch, true)]).await?;
        ctx.wait().await?;
    }
    Ok(true)
}

/// How long a clean-up retries what a failure interrupted before it gives up, ns.
const RETRY_BOUND_NS: u64 = 2_000_000_000;
/// Between retries, ns.
const RETRY_PAUSE_NS: u64 = 20_000;

/// Settles a transaction on the live copies by its id alone: its locks released (its writes
/// installed by the Thomas rule on a commit), its latches taken back, its redo entries on the
/// copies' nodes finished. Idempotent; retried while failures interrupt it.
pub async fn clean(
    ctx: &Ctx,
    n: &NodeState,
    d: &Decision,
    sub_ops: &[super::wire::Op],
    copies: &[Copy],
) -> Result<(), TxnError> {
    let (by_op, _) = new_values(sub_ops, d);
    let began = ctx.now();
    loop {
        let live: Vec<Copy> = copies
            .iter()
            .filter(|c| ctx.node_status(c.node) == txbed_transport::NodeStatus::Up)
            .cloned()
            .map(|c| Copy { locked: true, ..c })
            .collect();
        let commit = d.commit.then_some((d.cts, &by_op));
        let mut nodes: Vec<u16> = live.iter().map(|c| c.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let status = if d.commit { logbuf::FLUSHED } else { logbuf::ABORTED };
        let done = match release(ctx, n, d.tid, &live, commit, true).await {
            Ok(()) => settle_entries(ctx, n, d.tid, &nodes, status).await,
            Err(e) => Err(e),
        };
        match done {
            Ok(()) => return Ok(()),
            Err(_) if ctx.now() - began < RETRY_BOUND_NS => ctx.sleep(RETRY_PAUSE_NS).await,
            Err(e) => return Err(e),
        }
    }
}

/// Finishes the transaction's LOGGED redo entries in the buffers of `nodes` (their contents
/// were never filled: a commit installed its writes directly), so the replay's head moves on.
async fn settle_entries(ctx: &Ctx, n: &NodeState, tid: u64, nodes: &[u16], status: u64) -> Result<(), TxnError> {
    let area = n.catalog.layout.area_at;
    let scratch = ctx.scratch();
    const BATCH: u64 = 32;
    for &node in nodes {
        let rec = log_rec(node);
        let local = LocalBuf { lkey: scratch.lkey, addr: scratch.addr, len: 16 };
        let read = Op::Read { local, remote: n.catalog.remote(node, area + logbuf::HEAD, 16) };
        ops::issue(ctx, n, &rec, vec![(read, true)]).await?;
        ctx.wait().await?;
        let (head, tail) = (ctx.load_local(scratch.addr)?, ctx.load_local(scratch.addr + 8)?);
        let mut idx = head;
        while idx < tail.min(head + logbuf::SLOTS) {
            let end = (idx + BATCH).min(tail);
            for (i, k) in (idx..end).enumerate() {
                let local = LocalBuf { lkey: scratch.lkey, addr: scratch.addr + 32 * i as u64, len: 32 };
                let read = Op::Read { local, remote: n.catalog.remote(node, area + logbuf::slot_at(k), 32) };
                ops::issue(ctx, n, &rec, vec![(read, true)]).await?;
            }
            ctx.wait().await?;
            for (i, k) in (idx..end).enumerate() {
                let at = scratch.addr + 32 * i as u64;
                let (entry_tid, entry_status) = (ctx.load_local(at)?, ctx.load_local(at + logbuf::STATUS_AT)?);
                if entry_tid == tid && entry_status == logbuf::LOGGED {
                    let word = Payload::Inline(status.to_le_bytes().to_vec());
                    let remote = n.catalog.remote(node, area + logbuf::slot_at(k) + logbuf::STATUS_AT, 8);
                    ops::issue(ctx, n, &rec, vec![(Op::Write { src: word, remote }, true)]).await?;
                }
            }
            ctx.wait().await?;
            idx = end;
        }
    }
    Ok(())
}
