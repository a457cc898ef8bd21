//! The baselines RedT is measured against that keep 2PC and replicate each partition by Paxos
//! (RedT Sec. 1, 2.1, 4.3, Table 1): **2PC-Paxos** and **EP-Paxos** (Early Prepare extended to
//! replicated partitions). Each partition has a primary (the home) and secondaries (its other
//! replicas, placed by data center as RedT's are: `txn::placement`); concurrency control is
//! 2PL at the primaries (exclusive locks, No-Wait), as the paper's analysis assumes.
//!
//! 2PC-Paxos, Fig. 2: (1) execution: the coordinator locks and reads at each primary;
//! (2) prepare: each written primary (3) replicates its redo log to its secondaries (a Paxos
//! accept) and answers; (4) the coordinator replicates its decision to its backups;
//! (5) commit: each primary (6) replicates the decision to its secondaries, then installs
//! and releases. EP-Paxos merges prepare into execution: each primary locks, reads and
//! replicates at once, and the coordinator's backups follow in the same phase.
//!
//! Messages are per node, as Table 1 counts them: one request to each primary with all its
//! records. Servers' own inter-DC messages (a primary's to its secondaries) are counted
//! against the coordinator's stage (`NodeState::note_nested_inter_dc`).

pub mod wire;

use std::cell::{OnceCell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use txbed_transport::{Ctx, Handled, HandlerCtx, HandlerFn, HostMemory};
use txbed_txn::attempt::{cause, execute, new_history, settle, Attempt};
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_txn::placement::Placement;
use txbed_txn::protocol::{handler_id, in_id_order, BackgroundFn, Bug, LocalBoxFuture, OptionValues, Protocol};
use txbed_txn::serve::{Job, Jobs, Trips};
use txbed_txn::stage::Stage;
use txbed_txn::store::{self, LOCK};
use txbed_txn::TxnError;
use txbed_workloads::TxnSpec;

use wire::{Change, Item, Reply, Req};

/// 2PC over Paxos-replicated partitions.
pub struct TwoPcPaxos;
/// Early Prepare over Paxos-replicated partitions.
pub struct EpPaxos;

/// The primary releases its locks before it installs the writes (while its secondaries
/// apply the decision): another transaction locks and reads the old value (lost update).
pub const UNLOCK_BEFORE_INSTALL: Bug = Bug {
    name: "PaxosUnlockBeforeInstall",
    about: "a primary releases its locks before installing the writes, while its secondaries apply the decision: another transaction reads the old value (lost update)",
};

/// Execution: lock and read a primary's records (2PC-Paxos; a plain handler).
pub const H_EXEC: u16 = handler_id(0);
/// Execution and prepare at once (EP-Paxos): lock, read, replicate the intents.
pub const H_EXEC_PREP: u16 = handler_id(1);
/// Prepare (2PC-Paxos): replicate the redo log to the secondaries.
pub const H_PREPARE: u16 = handler_id(2);
/// The decision at a primary: replicate it, install, release.
pub const H_DECIDE: u16 = handler_id(3);
/// Release a transaction's locks at a primary (an abort before prepare).
pub const H_RELEASE: u16 = handler_id(4);
/// At a secondary: keep a transaction's changes (the Paxos accept).
pub const H_REPLICATE: u16 = handler_id(5);
/// At a secondary: apply (or drop) them.
pub const H_APPLY: u16 = handler_id(6);
/// At a coordinator's backup: keep the decision.
pub const H_BACKUP: u16 = handler_id(7);
pub const H_DONE: u16 = handler_id(8);
pub const HANDLER_NAMES: [&str; 9] = [
    "PX_EXEC",
    "PX_EXEC_PREP",
    "PX_PREPARE",
    "PX_DECIDE",
    "PX_RELEASE",
    "PX_REPLICATE",
    "PX_APPLY",
    "PX_BACKUP",
    "PX_DONE",
];

/// Abort causes.
pub const LOCK_BUSY: &str = "paxos: lock busy";

/// A node's state.
#[derive(Default)]
pub struct Part {
    pub jobs: Jobs,
    /// At a secondary: changes accepted, by transaction.
    pub accepted: RefCell<BTreeMap<u64, Vec<Change>>>,
    /// At a backup: decisions, by transaction.
    pub decisions: RefCell<BTreeMap<u64, bool>>,
    pub placement: OnceCell<Placement>,
}

fn part(n: &NodeState) -> &Part {
    n.participant()
}

fn placement(n: &NodeState) -> &Placement {
    part(n).placement.get_or_init(|| Placement::new(&n.dc_of, n.nodes))
}

/// The secondaries of `home`'s partition: (node, copy number).
fn secondaries(n: &NodeState, home: u16) -> Vec<(u16, u16)> {
    let nodes = placement(n).replicas(home, n.replication).unwrap_or_default();
    nodes.into_iter().enumerate().skip(1).map(|(k, node)| (node, k as u16)).collect()
}

macro_rules! protocol_common {
    () => {
        fn ext_bytes(&self, _record_bytes: u64) -> u64 {
            0
        }
        fn stores_replicas(&self) -> bool {
            true
        }
        fn rpc_patience_ns(&self, _options: &OptionValues) -> u64 {
            100_000_000
        }
        fn bugs(&self) -> &'static [Bug] {
            &[UNLOCK_BEFORE_INSTALL]
        }
        fn participant(&self, _options: &OptionValues) -> Box<dyn std::any::Any> {
            Box::new(Part::default())
        }
        fn handler_names(&self) -> &'static [&'static str] {
            &HANDLER_NAMES
        }
        fn handlers(&self, n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
            handlers(n)
        }
        fn background(&self) -> Option<BackgroundFn> {
            Some(|ctx, n, end| Box::pin(background(ctx, n, end)))
        }
        fn background_coroutines(&self, _options: &OptionValues) -> u32 {
            8
        }
        fn coordinator_done<'a>(&self, ctx: &'a Ctx, n: &'a NodeState) -> Option<LocalBoxFuture<'a, ()>> {
            Some(Box::pin(txbed_txn::serve::announce_done(ctx, n, H_DONE)))
        }
        fn survives_crashes(&self) -> Result<(), &'static str> {
            Err("Paxos leader election and recovery are not built")
        }
        fn survives_lost_messages(&self, _hybrid: txbed_txn::stage::Hybrid) -> Result<(), &'static str> {
            Err("Paxos leader election and recovery are not built: a lost decision leaves locks held")
        }
    };
}

impl Protocol for TwoPcPaxos {
    fn name(&self) -> &'static str {
        "2PC-Paxos"
    }
    fn description(&self) -> &'static str {
        "2PC with Paxos-replicated participants and coordinator backups: up to 6 inter-DC round trips (RedT Sec. 2.1, Fig. 2)"
    }
    fn stages(&self) -> &'static [Stage] {
        &[Stage::Lock, Stage::Vote, Stage::Commit]
    }
    protocol_common!();
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id, false))
    }
}

impl Protocol for EpPaxos {
    fn name(&self) -> &'static str {
        "EP-Paxos"
    }
    fn description(&self) -> &'static str {
        "Early Prepare over Paxos-replicated partitions: prepare merged into execution, 5 inter-DC round trips (RedT Sec. 4.3)"
    }
    fn stages(&self) -> &'static [Stage] {
        &[Stage::Lock, Stage::Commit]
    }
    protocol_common!();
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id, true))
    }
}

fn handlers(n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
    let plain = |f: fn(&NodeState, &mut HandlerCtx<'_>, &[u8]) -> Handled| -> Rc<HandlerFn> {
        let n = n.clone();
        Rc::new(move |h: &mut HandlerCtx<'_>, req: &[u8]| f(&n, h, req))
    };
    let queue = |id: u16| -> Rc<HandlerFn> {
        let n = n.clone();
        Rc::new(move |h: &mut HandlerCtx<'_>, req: &[u8]| part(&n).jobs.defer(h, id, req))
    };
    in_id_order(vec![
        (H_EXEC, plain(exec_handler)),
        (H_EXEC_PREP, queue(H_EXEC_PREP)),
        (H_PREPARE, queue(H_PREPARE)),
        (H_DECIDE, queue(H_DECIDE)),
        (H_RELEASE, plain(release_handler)),
        (H_REPLICATE, plain(replicate_handler)),
        (H_APPLY, plain(apply_handler)),
        (H_BACKUP, plain(backup_handler)),
        (H_DONE, plain(|n, h, _| part(n).jobs.note_done(h))),
    ])
}

/// The tuple offset of a record (own partition or a copy) on this node.
fn find(n: &NodeState, mem: &dyn HostMemory, table: u16, key: u64) -> Option<(u64, u64)> {
    txbed_txn::participant::find(n, mem, table, key).map(|(place, off)| (off, place.tuple_bytes))
}

/// Locks and reads `items` for `tid` at this primary (No-Wait): the tuples, or `None` (what it
/// locked released) if one was busy.
fn lock_items(n: &NodeState, mem: &dyn HostMemory, tid: u64, items: &[Item]) -> Option<Vec<Vec<u8>>> {
    let mut tuples = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        let got = find(n, mem, it.table, it.key).filter(|(off, _)| mem.cas_u64(n.base() + off + LOCK, 0, tid) == Ok(0));
        match got {
            Some((off, len)) => {
                let mut t = vec![0u8; len as usize];
                let _ = mem.read(n.base() + off, &mut t);
                tuples.push(t);
            }
            None => {
                release_items(n, mem, tid, &items[..i]);
                return None;
            }
        }
    }
    Some(tuples)
}

fn release_items(n: &NodeState, mem: &dyn HostMemory, tid: u64, items: &[Item]) {
    for it in items {
        if let Some((off, _)) = find(n, mem, it.table, it.key) {
            let _ = mem.cas_u64(n.base() + off + LOCK, tid, 0);
        }
    }
}

/// Installs a change into a tuple (a primary's or a copy's) if it is newer than what is there.
fn install(n: &NodeState, mem: &dyn HostMemory, c: &Change, writer: u64) {
    txbed_txn::participant::install_if_newer(n, mem, c.table, c.key, c.version, writer, &c.value);
}

fn exec_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    let Ok(r) = Req::decode(req) else { return Handled::Reply };
    h.memory_misses(2 * r.items.len() as u64);
    let reply = match lock_items(n, h.mem, r.tid, &r.items) {
        Some(tuples) => Reply { ok: true, tuples, ..Reply::default() },
        None => Reply::default(),
    };
    h.reply.extend_from_slice(&reply.encode());
    Handled::Reply
}

fn release_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    if let Ok(r) = Req::decode(req) {
        h.memory_misses(2 * r.items.len() as u64);
        release_items(n, h.mem, r.tid, &r.items);
    }
    Handled::Reply
}

fn replicate_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    if let Ok(r) = Req::decode(req) {
        h.copy(req.len());
        part(n).accepted.borrow_mut().insert(r.tid, r.changes);
    }
    Handled::Reply
}

fn apply_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    if let Ok(r) = Req::decode(req) {
        let accepted = part(n).accepted.borrow_mut().remove(&r.tid).unwrap_or_default();
        if r.flag {
            let changes = if r.changes.is_empty() { accepted } else { r.changes };
            h.memory_misses(2 * changes.len() as u64);
            for c in &changes {
                install(n, h.mem, c, r.tid);
            }
        }
    }
    Handled::Reply
}

fn backup_handler(n: &NodeState, _h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    if let Ok(r) = Req::decode(req) {
        part(n).decisions.borrow_mut().insert(r.tid, r.flag);
    }
    Handled::Reply
}

/// Each worker's servers: a primary's replication, which waits for its secondaries.
async fn background(ctx: Ctx, n: Rc<NodeState>, end: u64) -> Result<(), TxnError> {
    let p = part(&n);
    txbed_txn::serve::serve(&ctx, &n, end, &p.jobs, &|| false, serve_job).await
}

/// Sends `changes` (of this primary's own tables) to every secondary, each as its copy's
/// tables, with `handler` and `flag`, and waits: (inter-DC messages, round trips).
async fn to_secondaries(
    ctx: &Ctx,
    n: &NodeState,
    handler: u16,
    tid: u64,
    flag: bool,
    changes: &[Change],
) -> Result<(u32, u8), TxnError> {
    let mut messages = 0;
    for (node, k) in secondaries(n, n.me) {
        let mapped: Vec<Change> = changes
            .iter()
            .map(|c| Change { table: store::copy_table(c.table, k).unwrap_or(c.table), ..c.clone() })
            .collect();
        let req = Req { tid, flag, items: Vec::new(), changes: mapped };
        ctx.call(ops::endpoint(ctx, node), handler, &req.encode());
        messages += 2 * n.other_dc(node) as u32;
    }
    ctx.wait().await?;
    if let Some(e) = ctx.failed_reply() {
        ctx.clear_replies();
        return Err(e.into());
    }
    ctx.clear_replies();
    Ok((messages, (messages > 0) as u8))
}

fn serve_job<'a>(ctx: &'a Ctx, n: &'a NodeState, job: &'a Job) -> LocalBoxFuture<'a, Result<Vec<u8>, TxnError>> {
    Box::pin(async move {
        let r = Req::decode(&job.req)?;
        let mem_op = |f: &dyn Fn(&dyn HostMemory)| ctx.with_memory(|m| f(m));
        let reply = match job.handler {
            H_EXEC_PREP => {
                ctx.memory_misses(2 * r.items.len() as u64);
                match ctx.with_memory(|m| lock_items(n, m, r.tid, &r.items)) {
                    None => Reply::default(),
                    Some(tuples) => {
                        // The intents: which records this transaction writes.
                        let intents: Vec<Change> = r
                            .items
                            .iter()
                            .filter(|i| i.write)
                            .map(|i| Change { table: i.table, key: i.key, version: 0, value: Vec::new() })
                            .collect();
                        let (m, rt) = match intents.is_empty() {
                            true => (0, 0),
                            false => to_secondaries(ctx, n, H_REPLICATE, r.tid, false, &intents).await?,
                        };
                        Reply { ok: true, tuples, inter_dc_messages: m, inter_dc_round_trips: rt }
                    }
                }
            }
            H_PREPARE => {
                let (m, rt) = to_secondaries(ctx, n, H_REPLICATE, r.tid, false, &r.changes).await?;
                Reply { ok: true, tuples: Vec::new(), inter_dc_messages: m, inter_dc_round_trips: rt }
            }
            _ => {
                // H_DECIDE: replicate the decision, install, release (the bug releases first).
                let bug = n.bug == Some(UNLOCK_BEFORE_INSTALL);
                if bug {
                    mem_op(&|m| release_items(n, m, r.tid, &r.items));
                }
                let writes = r.items.iter().any(|i| i.write);
                let (m, rt) = match writes {
                    true => to_secondaries(ctx, n, H_APPLY, r.tid, r.flag, &r.changes).await?,
                    false => (0, 0),
                };
                ctx.memory_misses(2 * r.items.len() as u64);
                if r.flag {
                    mem_op(&|m| {
                        for c in &r.changes {
                            install(n, m, c, r.tid);
                        }
                    });
                }
                if !bug {
                    mem_op(&|m| release_items(n, m, r.tid, &r.items));
                }
                Reply { ok: true, tuples: Vec::new(), inter_dc_messages: m, inter_dc_round_trips: rt }
            }
        };
        Ok(reply.encode())
    })
}

async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, early: bool) -> Attempt {
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, &mut recs, early).await;
    settle(ctx, n, r, &recs, id, id).await
}

/// Sends `req(home)` to each primary in `homes` and waits: the replies in order.
async fn to_primaries(
    ctx: &Ctx,
    n: &NodeState,
    handler: u16,
    homes: &[u16],
    req: &dyn Fn(u16) -> Req,
) -> Result<Vec<Reply>, TxnError> {
    let calls: Vec<_> = homes.iter().map(|&h| ops::send(ctx, n, h, handler, &req(h).encode())).collect();
    ctx.wait().await?;
    let mut out = Vec::with_capacity(calls.len());
    for c in calls {
        out.push(Reply::decode(&ops::reply(ctx, c, "PX")?)?);
    }
    Ok(out)
}

/// Requests to this very node take the local path (a direct call of the handler).
fn local_of(n: &NodeState, nodes: &[u16]) -> u64 {
    nodes.iter().filter(|&&m| n.local(m)).count() as u64
}

fn nested(replies: &[Reply]) -> (u64, u64) {
    let m = replies.iter().map(|r| r.inter_dc_messages as u64).sum();
    let rt = replies.iter().map(|r| r.inter_dc_round_trips as u64).max().unwrap_or(0);
    (m, rt)
}

async fn run(
    ctx: &Ctx,
    n: &NodeState,
    spec: &TxnSpec,
    id: u64,
    recs: &mut [Rec],
    early: bool,
) -> Result<Attempt, TxnError> {
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    let mut by_home: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, r) in recs.iter().enumerate() {
        by_home.entry(r.home).or_default().push(i);
    }
    let homes: Vec<u16> = by_home.keys().copied().collect();
    let remote = |hs: &[u16]| hs.iter().any(|&h| n.other_dc(h));
    // Each primary's records (what its requests name), fixed for the attempt.
    let items_at: BTreeMap<u16, Vec<Item>> = by_home
        .iter()
        .map(|(&h, idx)| {
            (h, idx.iter().map(|&i| Item { table: recs[i].table, key: recs[i].key, write: recs[i].write }).collect())
        })
        .collect();
    let items = |h: u16| -> Vec<Item> { items_at[&h].clone() };

    // Execution (1): lock and read at every primary (EP-Paxos: and replicate the intents).
    let t0 = ctx.now();
    let mut trips = Trips::default();
    let handler = if early { H_EXEC_PREP } else { H_EXEC };
    let replies =
        to_primaries(ctx, n, handler, &homes, &|h| Req { tid: id, items: items(h), ..Req::default() }).await?;
    trips.wait(remote(&homes), nested(&replies));
    for (h, rep) in homes.iter().zip(&replies) {
        for (&i, t) in by_home[h].iter().zip(&rep.tuples) {
            recs[i].tuple = t.clone();
            recs[i].locked = rep.ok;
            recs[i].asked = true;
        }
    }
    let locked: Vec<u16> = homes.iter().zip(&replies).filter(|(_, r)| r.ok).map(|(h, _)| *h).collect();
    let abort = |why: Attempt| async {
        abort_at(ctx, n, id, early, &locked, &|h| items(h)).await?;
        Ok::<Attempt, TxnError>(why)
    };
    if locked.len() < homes.len() {
        trips.note(ctx, n, remote(&homes));
        ops::account(ctx, n, Stage::Lock, t0, 1, 0, local_of(n, &homes));
        return abort(Attempt::Conflict(LOCK_BUSY)).await;
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        trips.note(ctx, n, remote(&homes));
        ops::account(ctx, n, Stage::Lock, t0, 1, 0, local_of(n, &homes));
        let waits = n.wait_cause.borrow_mut().remove(&(ctx.me().worker, ctx.coroutine()));
        return abort(waits.map_or(Attempt::UserAbort, Attempt::Conflict)).await;
    };
    let changes_at = |h: u16| -> Vec<Change> {
        recs.iter()
            .enumerate()
            .filter(|(_, r)| r.write)
            .zip(&new_values)
            .filter(|((_, r), _)| r.home == h)
            .map(|((_, r), v)| Change { table: r.table, key: r.key, version: r.version().1 + 1, value: v.clone() })
            .collect()
    };
    let written: Vec<u16> = homes.iter().copied().filter(|&h| by_home[&h].iter().any(|&i| recs[i].write)).collect();
    let backups: Vec<u16> = secondaries(n, n.me).into_iter().map(|(b, _)| b).collect();
    let mut own_remote = remote(&homes);
    if !early {
        trips.note(ctx, n, own_remote);
        ops::account(ctx, n, Stage::Lock, t0, 1, 0, local_of(n, &homes));
        // Prepare (2, 3): each written primary replicates its redo log; then (4) the decision
        // to the coordinator's backups.
        let t1 = ctx.now();
        trips = Trips::default();
        let replies =
            to_primaries(ctx, n, H_PREPARE, &written, &|h| Req { tid: id, changes: changes_at(h), ..Req::default() })
                .await?;
        trips.wait(remote(&written), nested(&replies));
        own_remote = remote(&written);
        backup(ctx, n, id, &backups).await?;
        trips.wait(remote(&backups), (0, 0));
        own_remote |= remote(&backups);
        trips.note(ctx, n, own_remote);
        ops::account(ctx, n, Stage::Vote, t1, 1, 0, local_of(n, &written) + local_of(n, &backups));
    } else {
        // EP-Paxos: the decision to the backups closes the execution phase.
        backup(ctx, n, id, &backups).await?;
        trips.wait(remote(&backups), (0, 0));
        own_remote |= remote(&backups);
        trips.note(ctx, n, own_remote);
        ops::account(ctx, n, Stage::Lock, t0, 1, 0, local_of(n, &homes) + local_of(n, &backups));
    }
    let mut h = new_history(ctx, n, spec, id, start_ns);
    ops::history_of(recs, &mut h);
    if !ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
        return abort(Attempt::Conflict(cause::VIEW_CHANGED)).await;
    }
    // Commit (5, 6): every primary replicates the decision, installs, releases.
    let t2 = ctx.now();
    let mut trips = Trips::default();
    let replies = to_primaries(ctx, n, H_DECIDE, &homes, &|h| Req {
        tid: id,
        flag: true,
        items: items(h),
        changes: changes_at(h),
    })
    .await?;
    trips.wait(remote(&homes), nested(&replies));
    trips.note(ctx, n, remote(&homes));
    ops::account(ctx, n, Stage::Commit, t2, 1, 0, local_of(n, &homes));
    ops::complete(ctx, n, id);
    Ok(Attempt::Committed)
}

/// The decision to the coordinator's backups (Fig. 2's (4)).
async fn backup(ctx: &Ctx, n: &NodeState, id: u64, backups: &[u16]) -> Result<(), TxnError> {
    for &b in backups {
        ops::send(ctx, n, b, H_BACKUP, &Req { tid: id, flag: true, ..Req::default() }.encode());
    }
    ctx.wait().await?;
    ctx.clear_replies();
    Ok(())
}

/// An abort before the commit point: the primaries that locked release (EP-Paxos: and tell
/// their secondaries to drop the intents, through DECIDE).
async fn abort_at(
    ctx: &Ctx,
    n: &NodeState,
    id: u64,
    early: bool,
    locked: &[u16],
    items: &dyn Fn(u16) -> Vec<Item>,
) -> Result<(), TxnError> {
    let t = ctx.now();
    let handler = if early { H_DECIDE } else { H_RELEASE };
    for &h in locked {
        ops::send(ctx, n, h, handler, &Req { tid: id, flag: false, items: items(h), changes: Vec::new() }.encode());
    }
    ctx.wait().await?;
    ctx.clear_replies();
    ops::account(ctx, n, Stage::Commit, t, 1, 0, local_of(n, locked));
    Ok(())
}
