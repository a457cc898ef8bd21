//! RedT's fault tolerance (Sec. 5.1), with NVM as the paper assumes (a crashed node keeps its
//! copies and log buffer; `faults.durable`). docs/protocols.md, "RedT: failures", says what
//! is built and how it departs from the paper.
//!
//! - A replica on a node that is not up is absent: executors skip it (`executor::copies_of`),
//!   so with fewer than 5 replicas its partitions wait (the coordinator aborts with
//!   `REPLICA_DOWN` and retries) until the node is restored.
//! - A failed executor is replaced: its coordinator sends the sub-transaction and the decision
//!   to another node of the data center (ADOPT), which releases the transaction's locks there
//!   (installing its writes on a commit) and settles its redo entries (`clean`).
//! - A failed coordinator is replaced by the first live executor of its transaction, which
//!   fences the old coordinator at every executor (RECOVER) and commits if and only if some
//!   executor already received the commit, whose values it then sends to all; otherwise it
//!   aborts (`resolve`). The paper's rule (commit when more than 1/2 of the replicas logged
//!   yes) needs values in the pre-written logs; here they travel with the decision, so a
//!   transaction no executor saw committed has no values anywhere but the dead coordinator,
//!   and was acknowledged to no client.
//! - What a dead coordinator left that no live node knows of (it never passed its commit
//!   point) is released when the membership declares it down (`release_orphans`).
//! - A restarted node's copies take, record by record, the newest tuple (largest wts) among
//!   the live replicas, unlocked (`restore_copy`), once no transaction that committed before
//!   it joined is still completing and no failed coordinator's transaction is unresolved.

use std::collections::{BTreeMap, BTreeSet};

use txbed_transport::{Ctx, Handled, HandlerCtx, HostMemory, NodeStatus};
use txbed_txn::attempt::txn_node;
use txbed_txn::node::NodeState;
use txbed_txn::ops;
use txbed_txn::store::LOCK;
use txbed_txn::wire::{put_u64_at, u64_at};
use txbed_txn::TxnError;

use super::executor::{self, clean, copies_of};
use super::item::{Item, EXT_BYTES};
use super::logbuf;
use super::wire::{Adopt, Decision, Op as SubOp, Status};
use super::{part, placement, thread_of, H_ADOPT, H_DECIDE, H_QUIET, H_RECOVER, J_RESOLVE};

/// How long recovery retries what a failure interrupted before it gives up, ns.
const RETRY_BOUND_NS: u64 = 2_000_000_000;
/// Between retries, ns.
const RETRY_PAUSE_NS: u64 = 20_000;

/// RECOVER (a handler: no verbs): what this executor holds of the transaction; from now on
/// its old coordinator's requests for it are void.
pub fn recover_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    if req.len() != 8 {
        return Handled::Reply;
    }
    let tid = u64_at(req, 0);
    let p = part(n);
    let status = match p.decided.borrow().get(&thread_of(tid)) {
        Some(d) if d.decision.tid == tid => Status::Decided(d.decision.clone()),
        _ if p.subs.borrow().contains_key(&tid) => Status::Voted,
        _ => Status::Unknown,
    };
    p.fenced.borrow_mut().insert(tid);
    h.reply.extend_from_slice(&status.encode());
    Handled::Reply
}

/// Run by each node's replay coroutine: the transactions this node holds whose coordinator
/// is no longer up are queued to be resolved, this node acting as their new coordinator.
pub fn find_orphans(ctx: &Ctx, n: &NodeState) {
    if n.recovery.is_none() {
        return;
    }
    let p = part(n);
    // One resolution at a time, of everything found: it occupies an executor coroutine while
    // it waits for other nodes' executors (DECIDE, ADOPT); many at once could take every one
    // of them on several nodes, each waiting for the others.
    if !p.resolving.borrow().is_empty() {
        return;
    }
    let mut found = Vec::new();
    // Undecided sub-transactions, and decisions whose coordinator may have failed before its
    // own data center (and the history) had them.
    let subs = p.subs.borrow();
    let decided = p.decided.borrow();
    let held = subs.iter().map(|(&tid, _)| tid).chain(decided.values().map(|d| d.decision.tid));
    for tid in held {
        let Some(coord) = txn_node(tid) else { continue };
        if ctx.node_status(coord) == NodeStatus::Up
            || p.resolving.borrow().contains(&tid)
            || p.verdicts.borrow().contains_key(&tid)
        {
            continue;
        }
        // Every executor that holds it acts as a new coordinator: the one the paper would
        // elect may never have received the transaction (its request died with the old
        // coordinator). Concurrent new coordinators agree: each fences every executor before
        // it asks, so the commit is either at some executor for all of them or for none.
        found.push(tid);
    }
    drop((subs, decided));
    found.sort_unstable();
    found.dedup();
    if !found.is_empty() {
        p.resolving.borrow_mut().extend(found.iter().copied());
        let req: Vec<u8> = found.iter().flat_map(|t| t.to_le_bytes()).collect();
        p.jobs.push_local(ctx.me().worker, J_RESOLVE, req);
    }
}

/// QUIET (a handler): the sender is past the run's end with no recovery work in this view.
pub fn quiet_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    if req.len() == 8 {
        part(n).quiet.borrow_mut().insert(h.src.node.0, u64_at(req, 0));
    }
    Handled::Reply
}

/// With faults, executors stay past the run's end until every node not down said, in the
/// current view, that it has no recovery work left: a new coordinator may still need them
/// (DECIDE, ADOPT) after every coordinator is done.
pub fn all_quiet(ctx: &Ctx, n: &NodeState) -> bool {
    if n.recovery.is_none() {
        return true;
    }
    let epoch = ctx.view_epoch();
    let quiet = part(n).quiet.borrow();
    (0..n.nodes).all(|m| ctx.node_status(m) == NodeStatus::Down || quiet.get(&m) == Some(&epoch))
}

/// Says QUIET to every node not down, once per view, when this node is past the end, its
/// coordinators are done and it has no recovery work (run by the replay coroutine).
pub async fn announce_quiet(ctx: &Ctx, n: &NodeState, end: u64) {
    let p = part(n);
    let epoch = ctx.view_epoch();
    if n.recovery.is_none()
        || ctx.now() < end
        || p.announced.get() == Some(epoch)
        || !p.jobs.all_done(ctx, n)
        || !p.subs.borrow().is_empty()
        || has_work(ctx, n)
    {
        return;
    }
    for m in (0..n.nodes).filter(|&m| ctx.node_status(m) != NodeStatus::Down) {
        ops::send(ctx, n, m, H_QUIET, &epoch.to_le_bytes());
    }
    let _ = ctx.wait().await;
    ctx.clear_replies();
    p.announced.set(Some(epoch));
}

/// Whether this node has recovery work left: a resolution under way, or a decision of a
/// coordinator that is not up which it has not resolved (its executors must stay to serve it).
pub fn has_work(ctx: &Ctx, n: &NodeState) -> bool {
    let p = part(n);
    if n.recovery.is_none() {
        return false;
    }
    !p.resolving.borrow().is_empty()
        || p.decided.borrow().values().any(|d| {
            let tid = d.decision.tid;
            txn_node(tid).is_some_and(|c| ctx.node_status(c) != NodeStatus::Up)
                && !p.verdicts.borrow().contains_key(&tid)
        })
}

/// Whether this node still resolves transactions of failed coordinators, or holds
/// sub-transactions of a coordinator that is not up (`up`).
pub fn resolving(n: &NodeState, up: &dyn Fn(u16) -> bool) -> bool {
    let p = part(n);
    !p.resolving.borrow().is_empty() || p.subs.borrow().keys().any(|&tid| txn_node(tid).is_some_and(|c| !up(c)))
}

/// The new coordinator's work (Sec. 5.1.1), for every transaction of failed coordinators
/// this node holds, all at once: RECOVER at every other executor (fencing the old
/// coordinator), the verdicts, the decisions to every executor and to a node of each failed
/// coordinator's data center (whose sub-transaction it ran itself).
pub async fn resolve(ctx: &Ctx, n: &NodeState, tids: &[u64]) -> Result<(), TxnError> {
    let p = part(n);
    // (tid, failed coordinator, executors, its data center's operations)
    let mut items: Vec<(u64, u16, Vec<(u16, u16)>, Vec<SubOp>)> = Vec::new();
    for &tid in tids {
        let held = p.subs.borrow().get(&tid).map(|s| (s.executors.clone(), s.home_ops.clone())).or_else(|| {
            let decided = p.decided.borrow();
            decided
                .get(&thread_of(tid))
                .filter(|d| d.decision.tid == tid)
                .map(|d| (d.executors.clone(), d.home_ops.clone()))
        });
        if let (Some((executors, home_ops)), Some(coord)) = (held, txn_node(tid)) {
            items.push((tid, coord, executors, home_ops));
        }
    }
    let began = ctx.now();
    let mut verdicts: BTreeMap<u64, Decision> = BTreeMap::new();
    // Fence and ask. An executor that is down blocks its transaction's verdict (it may have
    // received the commit): retry until it is back or the bound passes.
    loop {
        let open: Vec<&(u64, u16, Vec<(u16, u16)>, Vec<SubOp>)> =
            items.iter().filter(|it| !verdicts.contains_key(&it.0)).collect();
        if open.is_empty() {
            break;
        }
        let mut committed: BTreeMap<u64, Decision> = BTreeMap::new();
        let mut blocked: BTreeSet<u64> = BTreeSet::new();
        let mut calls = Vec::new();
        for &&(tid, coord, ref executors, _) in &open {
            p.fenced.borrow_mut().insert(tid);
            if let Some(d) =
                p.decided.borrow().get(&thread_of(tid)).filter(|d| d.decision.tid == tid && d.decision.commit)
            {
                committed.insert(tid, d.decision.clone());
            }
            for e in executors.iter().map(|&(_, e)| e).filter(|&e| e != coord && e != n.me) {
                if ctx.node_status(e) != NodeStatus::Up {
                    blocked.insert(tid);
                    continue;
                }
                calls.push((tid, ops::send(ctx, n, e, H_RECOVER, &tid.to_le_bytes())));
            }
        }
        let waited = ctx.wait().await;
        for (tid, call) in calls {
            match ops::reply(ctx, call, "REDT_RECOVER").and_then(|b| Ok(Status::decode(&b)?)) {
                Ok(Status::Decided(d)) if d.commit => {
                    committed.insert(tid, d);
                }
                Ok(_) => {}
                Err(_) => {
                    blocked.insert(tid);
                }
            }
        }
        ctx.clear_replies();
        if n.bug == Some(super::RECOVERY_ABORTS_COMMITTED) {
            committed.clear();
        }
        for &&(tid, ..) in &open {
            if let Some(d) = committed.remove(&tid) {
                verdicts.insert(tid, d);
            } else if !blocked.contains(&tid) && waited.is_ok() {
                verdicts.insert(tid, Decision { tid, commit: false, cts: 0, writes: Vec::new(), recovered: true });
            }
        }
        if items.iter().all(|it| verdicts.contains_key(&it.0)) {
            break;
        }
        if ctx.now() - began > RETRY_BOUND_NS {
            return Err(TxnError::Unsupported(
                "RedT's recovery of a failed coordinator's transaction waited 2 s for a failed executor",
            ));
        }
        ctx.sleep(RETRY_PAUSE_NS).await;
    }
    // The decisions everywhere: to the other executors, and to a node of each failed
    // coordinator's data center for the part that coordinator ran itself.
    let mut targets: Vec<Target> = Vec::new();
    for (tid, coord, executors, home_ops) in &items {
        let decision = Decision { recovered: true, ..verdicts[tid].clone() };
        let req = decision.encode();
        for &(dc, e) in executors.iter().filter(|&&(_, e)| e != *coord && e != n.me) {
            targets.push(Target { dc, executor: Some(e), decide: req.clone(), adopt: None });
        }
        if !home_ops.is_empty() {
            let adopt = Adopt { decision, ops: home_ops.clone() }.encode();
            targets.push(Target {
                dc: placement(n).dc_of(*coord),
                executor: None,
                decide: Vec::new(),
                adopt: Some(adopt),
            });
        }
    }
    deliver(ctx, n, targets).await?;
    for (tid, ..) in &items {
        let decision = Decision { recovered: true, ..verdicts[tid].clone() };
        executor::decide(ctx, n, &decision).await?;
        p.verdicts.borrow_mut().insert(*tid, (decision.commit, ctx.now()));
    }
    p.resolving.borrow_mut().clear();
    Ok(())
}

/// Where a decision goes: a data center's executor (DECIDE), and, should it be down or fail,
/// another up node of the data center carrying the sub-transaction out (ADOPT).
pub struct Target {
    pub dc: u16,
    pub executor: Option<u16>,
    pub decide: Vec<u8>,
    pub adopt: Option<Vec<u8>>,
}

/// Delivers each target's decision and waits for the acknowledgements. A data center with
/// no node up gets nothing: its copies are restored when its nodes restart. An executor
/// that fails with no ADOPT to fall back on (a second failure during a recovery) is left.
pub async fn deliver(ctx: &Ctx, n: &NodeState, targets: Vec<Target>) -> Result<(), TxnError> {
    let began = ctx.now();
    let mut todo: Vec<(Target, BTreeSet<u16>)> = targets.into_iter().map(|t| (t, BTreeSet::new())).collect();
    while !todo.is_empty() {
        let mut calls = Vec::new();
        for (t, mut tried) in todo {
            let to_executor = t.executor.filter(|&e| !tried.contains(&e) && ctx.node_status(e) == NodeStatus::Up);
            let (node, handler, req) = match (to_executor, &t.adopt) {
                (Some(e), _) => (e, H_DECIDE, t.decide.clone()),
                (None, Some(adopt)) => {
                    let dc_of = |m: u16| placement(n).dc_of(m);
                    let other = (0..n.nodes)
                        .find(|&m| dc_of(m) == t.dc && !tried.contains(&m) && ctx.node_status(m) == NodeStatus::Up);
                    match other {
                        Some(m) => (m, H_ADOPT, adopt.clone()),
                        None => continue,
                    }
                }
                (None, None) => continue,
            };
            tried.insert(node);
            calls.push((ops::send(ctx, n, node, handler, &req), (t, tried)));
        }
        let _ = ctx.wait().await;
        let mut next = Vec::new();
        for (call, rest) in calls {
            if ops::reply(ctx, call, "REDT_DECIDE").is_err() {
                next.push(rest);
            }
        }
        ctx.clear_replies();
        if !next.is_empty() {
            if ctx.now() - began > RETRY_BOUND_NS {
                return Err(TxnError::Unsupported("RedT could not deliver a decision for 2 s"));
            }
            ctx.sleep(RETRY_PAUSE_NS).await;
        }
        todo = next;
    }
    Ok(())
}

/// ADOPT: carry out a failed executor's sub-transaction with its decision, on the live
/// copies of this data center.
pub async fn adopt(ctx: &Ctx, n: &NodeState, a: &Adopt) -> Result<(), TxnError> {
    let p = part(n);
    // Whatever this node held of it as an executor is settled by the clean-up below.
    p.subs.borrow_mut().remove(&a.decision.tid);
    let copies = copies_of(ctx, n, &a.ops).await.unwrap_or_default();
    clean(ctx, n, &a.decision, &a.ops, &copies).await
}

/// The membership declared `dead` down (a step of its service, as the generic rebuild is):
/// on the live nodes, what its transactions hold that no live node knows of is released:
/// latches, lock owners, LOGGED redo entries. Such a transaction never passed its commit point
/// (a commit reaches an executor, which records it, before any of it is carried out), so
/// nothing of it is installed. Returns the locks released.
pub fn release_orphans(dead: u16, live: &[(&NodeState, &dyn HostMemory)]) -> u64 {
    let mut known: BTreeSet<u64> = BTreeSet::new();
    let mut reserved: BTreeSet<(u16, u64)> = BTreeSet::new();
    for (n, _) in live {
        let p = part(n);
        p.jobs.forget(dead);
        reserved.extend(p.reserved.borrow().iter().copied());
        known.extend(p.subs.borrow().keys().copied());
        known.extend(p.decided.borrow().values().map(|d| d.decision.tid));
        known.extend(p.resolving.borrow().iter().copied());
        p.jobs.for_each(|_, req| {
            if req.len() >= 8 {
                known.insert(u64_at(req, 0));
            }
        });
    }
    // An ADOPT's id is inside its decision, after the operations: ADOPTs come from live
    // coordinators about their own transactions, never the dead node's.
    let orphan = |tid: u64| tid != 0 && txn_node(tid) == Some(dead) && !known.contains(&tid);
    let mut released = 0;
    for (n, mem) in live {
        let layout = &n.catalog.layout;
        let base = n.base();
        for place in layout.tables.iter().chain(layout.copies.iter()) {
            let ext_at = place.ext_at as usize;
            let mut tuple = vec![0u8; place.tuple_bytes as usize];
            for row in 0..place.spec.rows_per_node {
                let at = base + place.tuples_at + row * place.tuple_bytes;
                if mem.read(at, &mut tuple).is_err() {
                    continue;
                }
                let latch = u64_at(&tuple, LOCK as usize);
                let mut item = Item::read(&tuple, ext_at);
                let owners: Vec<u64> = item.owners.iter().copied().filter(|&o| orphan(o)).collect();
                if !orphan(latch) && owners.is_empty() {
                    continue;
                }
                for o in owners {
                    item = item.release(o);
                    released += 1;
                }
                if orphan(latch) {
                    put_u64_at(&mut tuple, LOCK as usize, 0);
                }
                item.write(&mut tuple, ext_at);
                let _ = mem.write(at + LOCK, &tuple[LOCK as usize..LOCK as usize + 8]);
                let _ = mem.write(at + place.ext_at, &tuple[ext_at..ext_at + EXT_BYTES as usize]);
            }
        }
        let area = base + layout.area_at;
        let (head, tail) =
            (mem.load_u64(area + logbuf::HEAD).unwrap_or(0), mem.load_u64(area + logbuf::TAIL).unwrap_or(0));
        for idx in head..tail.min(head + logbuf::SLOTS) {
            let at = area + logbuf::slot_at(idx);
            let tid = mem.load_u64(at).unwrap_or(0);
            let status = mem.load_u64(at + logbuf::STATUS_AT).unwrap_or(0);
            // A slot taken and never written that no live executor is writing: the failed
            // node's (its FAA landed, its WRITE never left). A hole, finished so the head moves.
            let hole = status == logbuf::INITED && !reserved.contains(&(n.me, idx));
            if hole || (orphan(tid) && status == logbuf::LOGGED) {
                let _ = mem.write(at, &0u64.to_le_bytes());
                let _ = mem.write(at + logbuf::STATUS_AT, &logbuf::ABORTED.to_le_bytes());
            }
        }
    }
    released
}

/// A restarted node's copy of a record: the live replicas' tuple with the largest wts, with
/// its latch, lock and owners cleared.
pub fn restore_copy(ext_at: usize, candidates: &[Vec<u8>]) -> Option<Vec<u8>> {
    let mut best = candidates.iter().max_by_key(|t| Item::read(t, ext_at).wts)?.clone();
    let wts = Item::read(&best, ext_at).wts;
    put_u64_at(&mut best, LOCK as usize, 0);
    let clear = Item {
        lock: super::item::Lock { kind: super::item::LockType::Null, num: 0 },
        owners: [0; super::item::OWNERS],
        wts,
    };
    clear.write(&mut best, ext_at);
    Some(best)
}

/// An up copy's record after its restoration (5+ replicas commit without a restored copy
/// until every transaction that excluded it has completed): the live replicas' newest write
/// if it is newer than the copy's (version, writer, record and wts, the Thomas rule), the
/// copy's own latch, lock and owners kept (transactions that include it hold them).
pub fn catch_up_copy(ext_at: usize, own: &[u8], candidates: &[Vec<u8>]) -> Option<Vec<u8>> {
    let best = candidates.iter().max_by_key(|t| Item::read(t, ext_at).wts)?;
    let mine = Item::read(own, ext_at);
    let theirs = Item::read(best, ext_at);
    if theirs.wts <= mine.wts {
        return None;
    }
    let mut t = own.to_vec();
    let latch = LOCK as usize + 8;
    t[latch..ext_at].copy_from_slice(&best[latch..ext_at]);
    Item { wts: theirs.wts, ..mine }.write(&mut t, ext_at);
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::super::item::{Lock, LockType, OWNERS};
    use super::*;

    /// A tuple: latch, version, writer, a 16-byte record of `fill`, then the ext.
    fn tuple(latch: u64, version: u64, fill: u8, item: &Item) -> (Vec<u8>, usize) {
        let ext_at = 24 + 16;
        let mut t = vec![fill; ext_at + EXT_BYTES as usize];
        put_u64_at(&mut t, LOCK as usize, latch);
        put_u64_at(&mut t, 8, version);
        put_u64_at(&mut t, 16, 0);
        item.write(&mut t, ext_at);
        (t, ext_at)
    }

    #[test]
    fn a_caught_up_copy_takes_the_newest_write_and_keeps_its_own_locks() {
        let locked = Item { lock: Lock { kind: LockType::Ex, num: 1 }, owners: [9, 0, 0, 0], wts: 5 };
        let (own, ext_at) = tuple(0, 2, 0xaa, &locked);
        let free = |wts| Item { lock: Lock { kind: LockType::Null, num: 0 }, owners: [0; OWNERS], wts };
        let (older, _) = tuple(0, 1, 0x11, &free(4));
        let (newer, _) = tuple(7, 3, 0xbb, &free(8));
        let got = catch_up_copy(ext_at, &own, &[older.clone(), newer.clone()]).expect("a newer write");
        assert_eq!(u64_at(&got, LOCK as usize), 0, "its own latch stays");
        assert_eq!(&got[8..ext_at], &newer[8..ext_at], "version, writer and record of the newest");
        assert_eq!(
            Item::read(&got, ext_at),
            Item { wts: 8, ..locked },
            "its lock and owners stay, the wts is the newest"
        );
        assert_eq!(catch_up_copy(ext_at, &own, &[older]), None, "nothing newer: nothing taken");
        assert_eq!(catch_up_copy(ext_at, &own, &[]), None);
    }
}
