//! RedT's coordinator (Sec. 4.2, Fig. 5): one sub-transaction per data center holding a
//! replica of what the transaction touches, sent to that data center's executor (the
//! coordinator is its own data center's); the commit decision when, for every partition,
//! more than 3/4 of its replicas are up to date and voted yes; a commit timestamp; the
//! decision to every executor.

use std::collections::BTreeMap;

use txbed_transport::{Ctx, NodeStatus};
use txbed_txn::attempt::{execute, new_history, settle, Attempt};
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_txn::placement::commit_quorum;
use txbed_txn::stage::Stage;
use txbed_txn::store::{version_word, META_BYTES, VERSION};
use txbed_txn::wire::put_u64_at;
use txbed_txn::TxnError;
use txbed_workloads::TxnSpec;

use super::executor;
use super::recovery::{deliver, Target};
use super::wire::{Adopt, Decision, Op, Seen, SubTxn, Vote};
use super::{cause, placement, H_SUB, STALE_VOTES_COUNT};

pub async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, &mut recs).await;
    settle(ctx, n, r, &recs, id, id).await
}

/// Whether a replica on `node` takes part: with faults, only if the view shows it up (one
/// that is not is absent until its restoration, Sec. 5.1).
fn present(ctx: &Ctx, n: &NodeState, node: u16) -> bool {
    n.recovery.is_none() || ctx.node_status(node) == NodeStatus::Up
}

/// Whether every partition `recs` touch has enough replicas up to commit (more than 3/4 of
/// them): otherwise the transaction waits for their restoration (Sec. 5.1.2).
fn quorums_up(ctx: &Ctx, n: &NodeState, recs: &[Rec]) -> Result<bool, TxnError> {
    let p = placement(n);
    for r in recs {
        let nodes = p
            .replicas(r.home, n.replication)
            .map_err(|_| TxnError::Unsupported("RedT's replicas do not fit the data centers"))?;
        if (nodes.iter().filter(|&&m| present(ctx, n, m)).count() as u16) < commit_quorum(n.replication) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The sub-transactions of `recs`, by data center: each record's replicas there (those
/// present).
pub fn split(ctx: &Ctx, n: &NodeState, recs: &[Rec], tid: u64) -> Result<BTreeMap<u16, SubTxn>, TxnError> {
    let p = placement(n);
    let mut subs: BTreeMap<u16, SubTxn> = BTreeMap::new();
    for (i, r) in recs.iter().enumerate() {
        let nodes = p
            .replicas(r.home, n.replication)
            .map_err(|_| TxnError::Unsupported("RedT's replicas do not fit the data centers"))?;
        for (k, node) in nodes.into_iter().enumerate() {
            if !present(ctx, n, node) {
                continue;
            }
            let sub = subs.entry(p.dc_of(node)).or_insert_with(|| SubTxn {
                tid,
                ops: Vec::new(),
                executors: Vec::new(),
                home_ops: Vec::new(),
            });
            match sub.ops.iter_mut().find(|o| o.idx == i as u16) {
                Some(o) => o.replicas.push((node, k as u16)),
                None => sub.ops.push(Op {
                    idx: i as u16,
                    table: r.table,
                    key: r.key,
                    write: r.write,
                    replicas: vec![(node, k as u16)],
                }),
            }
        }
    }
    // What a new coordinator needs (Sec. 5.1.1): every executor, this data center's first,
    // and this data center's operations. Only with faults (nothing fails otherwise).
    if n.recovery.is_none() {
        return Ok(subs);
    }
    let my_dc = p.dc_of(n.me);
    let mut executors: Vec<(u16, u16)> = subs.keys().map(|&dc| (dc, executor_of(ctx, n, dc, tid))).collect();
    executors.sort_by_key(|&(dc, _)| dc != my_dc);
    let home_ops = subs.get(&my_dc).map(|s| s.ops.clone()).unwrap_or_default();
    for sub in subs.values_mut() {
        sub.executors = executors.clone();
        sub.home_ops = home_ops.clone();
    }
    Ok(subs)
}

/// The executor of data center `dc` for transaction `tid`: this node in its own data center,
/// else one of that data center's nodes (up ones, with faults), spread by transaction.
pub fn executor_of(ctx: &Ctx, n: &NodeState, dc: u16, tid: u64) -> u16 {
    let p = placement(n);
    if dc == p.dc_of(n.me) {
        return n.me;
    }
    let all: Vec<u16> = (0..n.nodes).filter(|&m| p.dc_of(m) == dc).collect();
    let up: Vec<u16> = all.iter().copied().filter(|&m| present(ctx, n, m)).collect();
    let members = if up.is_empty() { all } else { up };
    members[(tid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % members.len()]
}

async fn run(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, recs: &mut [Rec]) -> Result<Attempt, TxnError> {
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    let my_dc = placement(n).dc_of(n.me);
    if !quorums_up(ctx, n, recs)? {
        return Ok(Attempt::Conflict(cause::REPLICA_DOWN));
    }
    let subs = split(ctx, n, recs, id)?;
    let executor =
        |dc: u16| subs[&dc].executors.iter().find(|e| e.0 == dc).map_or_else(|| executor_of(ctx, n, dc, id), |e| e.1);

    // Execution phase: this data center's sub-transaction here, the others' at their
    // executors over the inter-DC links.
    let t0 = ctx.now();
    let mut votes: BTreeMap<u16, Vote> = BTreeMap::new();
    if let Some(sub) = subs.get(&my_dc) {
        votes.insert(my_dc, executor::execute(ctx, n, sub).await?);
    }
    let mut calls = Vec::new();
    for (&dc, sub) in subs.iter().filter(|(&dc, _)| dc != my_dc) {
        calls.push((dc, ops::send(ctx, n, executor(dc), H_SUB, &sub.encode())));
    }
    ctx.wait().await?;
    for (dc, call) in calls {
        let vote = match ops::reply(ctx, call, "REDT_SUB") {
            Ok(b) => Vote::decode(&b)?,
            // Its executor failed: a no; the abort goes to another node there (ADOPT).
            Err(_) if n.recovery.is_some() => {
                Vote { yes: false, cause: cause::code(cause::REPLICA_DOWN), ops: Vec::new() }
            }
            Err(e) => return Err(e),
        };
        votes.insert(dc, vote);
    }
    ctx.clear_replies();
    let sent: u64 = subs.iter().filter(|(&dc, _)| dc != my_dc).map(|(_, s)| s.encode().len() as u64).sum();
    ops::account(ctx, n, Stage::Lock, t0, 1, sent, super::take_local(ctx, n));

    // The decision (Sec. 4.2.1).
    let outcome = decide(ctx, n, spec, recs, &subs, &votes);
    let mut decision = Decision { tid: id, commit: false, cts: 0, writes: Vec::new(), recovered: false };
    let result = match outcome {
        Ok((new_values, delta, cts)) => {
            let mut h = new_history(ctx, n, spec, id, start_ns);
            ops::history_of(recs, &mut h);
            if ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
                decision.commit = true;
                decision.cts = cts;
                for ((i, r), v) in recs.iter().enumerate().filter(|(_, r)| r.write).zip(new_values) {
                    decision.writes.push((i as u16, r.version().1 + 1, v));
                }
                Attempt::Committed
            } else {
                Attempt::Conflict(txbed_txn::attempt::cause::VIEW_CHANGED)
            }
        }
        Err(a) => a,
    };

    // Commit phase: the decision to every executor. With faults, to the other data centers
    // first (a failed executor's data center gets it as an ADOPT) and only then here: should
    // this coordinator fail, a new one finds the commit at some executor before any of it is
    // installed (`recovery`); this holds this data center's locks one inter-DC round trip
    // longer. Without faults, here first, as the paper does.
    let t1 = ctx.now();
    let faults = n.recovery.is_some();
    if !faults && subs.contains_key(&my_dc) {
        executor::decide(ctx, n, &decision).await?;
    }
    let req = decision.encode();
    let targets: Vec<Target> = subs
        .iter()
        .filter(|(&dc, _)| dc != my_dc)
        .map(|(&dc, sub)| Target {
            dc,
            executor: Some(executor(dc)),
            decide: req.clone(),
            adopt: n.recovery.is_some().then(|| Adopt { decision: decision.clone(), ops: sub.ops.clone() }.encode()),
        })
        .collect();
    deliver(ctx, n, targets).await?;
    if faults && subs.contains_key(&my_dc) {
        executor::decide(ctx, n, &decision).await?;
    }
    let sent = req.len() as u64 * subs.keys().filter(|&&dc| dc != my_dc).count() as u64;
    ops::account(ctx, n, Stage::Commit, t1, 1, sent, super::take_local(ctx, n));
    if decision.commit {
        ops::complete(ctx, n, id);
    }
    Ok(result)
}

/// Whether the votes commit the transaction: for every partition it touches, more than
/// 3/4 of its replicas voted yes with up-to-date items (the largest wts seen for each of
/// the partition's records). Then the transaction's logic runs on the freshest values, and
/// the commit timestamp exceeds every wts seen (so the Thomas write rule orders writes as
/// their locks did). Returns (new values, external delta, cts) or how the attempt ends.
fn decide(
    ctx: &Ctx,
    n: &NodeState,
    spec: &TxnSpec,
    recs: &mut [Rec],
    subs: &BTreeMap<u16, SubTxn>,
    votes: &BTreeMap<u16, Vote>,
) -> Result<(Vec<Vec<u8>>, i64, u64), Attempt> {
    if let Some(no) = votes.values().find(|v| !v.yes && n.replication < 5) {
        // Every replica must vote yes below five replicas (more than 3/4 of 1..4 is all).
        return Err(Attempt::Conflict(cause::of_code(no.cause)));
    }
    // What each record's replicas showed (from yes votes), and each DC's freshest record.
    let mut seen: BTreeMap<usize, Vec<(Seen, u16)>> = BTreeMap::new();
    let mut freshest: BTreeMap<(usize, u16), Vec<u8>> = BTreeMap::new();
    for (dc, v) in votes.iter().filter(|(_, v)| v.yes) {
        let sub = &subs[dc];
        for (k, s, rec) in &v.ops {
            let Some(op) = sub.ops.get(*k as usize) else { continue };
            let i = op.idx as usize;
            seen.entry(i).or_default().extend(s.iter().map(|x| (*x, *dc)));
            freshest.insert((i, *dc), rec.clone());
        }
    }
    let stale_counts = n.bug == Some(STALE_VOTES_COUNT);
    let mut max_wts = 0;
    for (i, r) in recs.iter_mut().enumerate() {
        let Some(s) = seen.get(&i) else { return Err(Attempt::Conflict(cause::NO_QUORUM)) };
        let best =
            if stale_counts { s.first().copied() } else { s.iter().copied().max_by_key(|(x, _)| (x.wts, x.version)) };
        let Some((best, dc)) = best else { return Err(Attempt::Conflict(cause::NO_QUORUM)) };
        max_wts = max_wts.max(s.iter().map(|(x, _)| x.wts).max().unwrap_or(0));
        let record = &freshest[&(i, dc)];
        let mut tuple = vec![0u8; META_BYTES as usize + record.len()];
        put_u64_at(&mut tuple, VERSION as usize, version_word(1, best.version));
        tuple[META_BYTES as usize..].copy_from_slice(record);
        r.tuple = tuple;
    }
    // The 3/4 rule, per partition (its home), counting replicas (node, copy) up to date
    // for every record of the partition the transaction touches.
    let quorum = commit_quorum(n.replication) as usize;
    let mut homes: Vec<u16> = recs.iter().map(|r| r.home).collect();
    homes.sort_unstable();
    homes.dedup();
    for home in homes {
        let mine: Vec<usize> = (0..recs.len()).filter(|&i| recs[i].home == home).collect();
        let mut fresh: BTreeMap<(u16, u16), usize> = BTreeMap::new();
        for &i in &mine {
            let s = &seen[&i];
            let top = s.iter().map(|(x, _)| x.wts).max().unwrap_or(0);
            for (x, _) in s.iter().filter(|(x, _)| stale_counts || x.wts == top) {
                *fresh.entry((x.node, x.copy)).or_default() += 1;
            }
        }
        let up_to_date = fresh.values().filter(|&&c| c == mine.len()).count();
        if up_to_date < quorum {
            // Votes of no first: they say why the replicas were short.
            let no = votes.values().find(|v| !v.yes).map(|v| cause::of_code(v.cause));
            return Err(Attempt::Conflict(no.unwrap_or(cause::NO_QUORUM)));
        }
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        let waits = n.wait_cause.borrow_mut().remove(&(ctx.me().worker, ctx.coroutine()));
        return Err(match waits {
            Some(why) => Attempt::Conflict(why),
            None => Attempt::UserAbort,
        });
    };
    // A commit timestamp from the synchronized clock, above every wts the transaction saw,
    // unique by the coordinator's thread in the low bits.
    let clock = ctx.clock().latest().max(0) as u64;
    let thread = (n.me as u64 * ctx.workers() as u64 + ctx.me().worker as u64) * 256 + ctx.coroutine() as u64;
    let cts = ((clock << 20) | (thread & 0xfffff)).max(max_wts + 1);
    Ok((new_values, delta, cts))
}
