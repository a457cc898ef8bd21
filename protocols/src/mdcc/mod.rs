//! MDCC (Kraska et al., EuroSys 2013), as RedT Sec. 4.3 compares it: one Paxos instance per
//! record, under serializability and without the commutative-update optimization (as RedT's
//! analysis sets it). The coordinator (MDCC's app server) reads each record from a replica in
//! its own data center (the primary where none is), runs the transaction's logic, then
//! proposes an *option* for every record it read or wrote straight to every replica (a fast
//! round, Fast Paxos): a replica accepts an option when the version read is its current one
//! and no other transaction's option conflicts (a write option excludes all others, read
//! options share), and keeps it pending until the transaction's outcome is visible. An option
//! is learned on a fast quorum (ceil(3R/4) of R replicas). A collision (fewer accepted, no
//! replica newer than the read) goes to the record's master (its primary), which runs a
//! classic round with every replica and learns the option on a majority: two more round trips,
//! as Table 1 counts. The transaction commits when every option is learned; the outcome then
//! goes to every replica (visibility), which installs the writes and drops the options.
//!
//! Acceptors here never switch an accepted option for another in a later ballot: an option is
//! held until visibility, so a record's replicas hold at most one write option at a time, and a
//! fast quorum (more than half) and a classic majority can never both hold conflicting options.
//! Collision recovery is therefore the master's majority round, not Fast Paxos's full choice
//! among the values a quorum reports (docs/protocols.md, "MDCC").

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use txbed_transport::{Ctx, Handled, HandlerCtx, HandlerFn, HostMemory};
use txbed_txn::attempt::{cause, execute, new_history, settle, Attempt};
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_txn::placement::Placement;
use txbed_txn::protocol::{handler_id, in_id_order, BackgroundFn, Bug, LocalBoxFuture, OptionValues, Protocol};
use txbed_txn::quorum::{self, decode, encode, Entry, Holds};
use txbed_txn::serve::{Job, Jobs, Trips};
use txbed_txn::stage::Stage;
use txbed_txn::wire::{Put, Reader, WireError};
use txbed_txn::TxnError;
use txbed_workloads::TxnSpec;

pub struct Mdcc;

/// Replicas accept an option whatever version it read: a transaction that read an overwritten
/// version commits (lost update).
pub const SKIP_VERSION_CHECK: Bug = Bug {
    name: "MdccSkipVersionCheck",
    about: "replicas accept an option without checking the version it read: a stale read commits (lost update)",
};

/// READ: tuples at this replica.
pub const H_READ: u16 = handler_id(0);
/// PROPOSE: a fast round's options at this replica; a verdict per record.
pub const H_PROPOSE: u16 = handler_id(1);
/// CLASSIC: to a record's master, which runs a classic round (served by a coroutine).
pub const H_CLASSIC: u16 = handler_id(2);
/// ACCEPT: a classic round's phase 2 at a replica, from the master; a verdict per record.
pub const H_ACCEPT: u16 = handler_id(3);
/// VISIBLE: the outcome; the replica installs the writes and drops the options.
pub const H_VISIBLE: u16 = handler_id(4);
/// DONE: a coordinator ran its last transaction.
pub const H_DONE: u16 = handler_id(5);
pub const HANDLER_NAMES: [&str; 6] =
    ["MDCC_READ", "MDCC_PROPOSE", "MDCC_CLASSIC", "MDCC_ACCEPT", "MDCC_VISIBLE", "MDCC_DONE"];

pub const STALE: &str = "mdcc: a read was overwritten";
pub const COLLISION: &str = "mdcc: an option lost its classic round";

/// A replica's verdict on an option.
const ACCEPTED: u8 = 0;
/// Another transaction's option conflicts.
const BUSY: u8 = 1;
/// The replica has not yet applied the version read (or lacks the record).
const BEHIND: u8 = 2;
/// The replica has a newer version than the one read: the option can never be learned.
const NEWER: u8 = 3;

/// The fast quorum of `r` replicas: ceil(3r/4) (Fast Paxos with classic majorities).
pub fn fast_quorum(r: u16) -> usize {
    (3 * r as usize).div_ceil(4)
}

/// A classic quorum: a majority.
pub fn majority(r: u16) -> usize {
    r as usize / 2 + 1
}

/// A replica's pending options, per record (copy table, key), and the masters' queued
/// classic rounds.
#[derive(Default)]
pub struct Part {
    options: Holds,
    jobs: Jobs,
    placement: OnceCell<Placement>,
}

fn part(n: &NodeState) -> &Part {
    n.participant()
}

fn placement(n: &NodeState) -> &Placement {
    part(n).placement.get_or_init(|| Placement::new(&n.dc_of, n.nodes))
}

impl Protocol for Mdcc {
    fn name(&self) -> &'static str {
        "MDCC"
    }
    fn description(&self) -> &'static str {
        "per-record Paxos: options to every replica in a fast round, a master's classic round on a collision: 1 inter-DC round trip, 3 with a conflict (MDCC, EuroSys 2013; RedT Sec. 4.3)"
    }
    fn stages(&self) -> &'static [Stage] {
        &[Stage::Read, Stage::Commit, Stage::Validate, Stage::Release]
    }
    fn stores_replicas(&self) -> bool {
        true
    }
    fn rpc_patience_ns(&self, _options: &OptionValues) -> u64 {
        // A master answers after its classic round across data centers.
        100_000_000
    }
    fn bugs(&self) -> &'static [Bug] {
        &[SKIP_VERSION_CHECK]
    }
    fn participant(&self, _options: &OptionValues) -> Box<dyn std::any::Any> {
        Box::new(Part::default())
    }
    fn handler_names(&self) -> &'static [&'static str] {
        &HANDLER_NAMES
    }
    fn handlers(&self, n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
        let h = |f: fn(&NodeState, &mut HandlerCtx<'_>, &[u8]) -> Handled| -> Rc<HandlerFn> {
            let n = n.clone();
            Rc::new(move |hc: &mut HandlerCtx<'_>, req: &[u8]| f(&n, hc, req))
        };
        in_id_order(vec![
            (H_READ, h(quorum::read_handler)),
            (H_PROPOSE, h(accept_handler)),
            (H_CLASSIC, h(|n, hc, req| part(n).jobs.defer(hc, H_CLASSIC, req))),
            (H_ACCEPT, h(accept_handler)),
            (H_VISIBLE, h(visible_handler)),
            (H_DONE, h(|n, h, _| part(n).jobs.note_done(h))),
        ])
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
        Err("MDCC's master failover and option recovery are not built")
    }
    fn survives_lost_messages(&self, _hybrid: txbed_txn::stage::Hybrid) -> Result<(), &'static str> {
        Err("MDCC's option recovery is not built: a lost visibility message leaves options pending")
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id))
    }
}

/// An acceptor's answer to option `e` of transaction `tid` (a fast round's or a classic
/// round's): accepted, and held, when the version read is the replica's and no other
/// transaction's option conflicts.
fn offer(n: &NodeState, mem: &dyn HostMemory, tid: u64, e: &Entry) -> u8 {
    let Some(have) = quorum::local_version(n, mem, e.table, e.key) else { return BEHIND };
    if n.bug != Some(SKIP_VERSION_CHECK) {
        if have > e.version {
            return NEWER;
        }
        if have < e.version {
            return BEHIND;
        }
    }
    let options = &part(n).options;
    if options.conflicts(tid, e.table, e.key, e.write) {
        return BUSY;
    }
    options.hold(tid, e.table, e.key, e.write);
    ACCEPTED
}

/// PROPOSE and ACCEPT: a verdict per option.
fn accept_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    let Ok((tid, _, entries)) = decode(req) else { return Handled::Reply };
    h.memory_misses(2 * entries.len() as u64);
    for e in &entries {
        let v = offer(n, h.mem, tid, e);
        h.reply.push(v);
    }
    Handled::Reply
}

/// VISIBLE: the transaction's options here go; on a commit, its writes are installed.
fn visible_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    let Ok((tid, commit, entries)) = decode(req) else { return Handled::Reply };
    if commit {
        h.memory_misses(2 * entries.len() as u64);
    }
    part(n).options.finish(n, h.mem, tid, commit, &entries);
    Handled::Reply
}

/// Each worker's servers: the masters' classic rounds, which wait for the replicas.
async fn background(ctx: Ctx, n: Rc<NodeState>, end: u64) -> Result<(), TxnError> {
    let p = part(&n);
    txbed_txn::serve::serve(&ctx, &n, end, &p.jobs, &|| false, serve_job).await
}

/// A classic round's reply: per option whether a majority holds it, then the inter-DC
/// messages and round trips the master's round took.
fn encode_classic(chosen: &[bool], messages: u32, round_trips: u8) -> Vec<u8> {
    let mut b = Vec::new();
    b.put_u16(chosen.len() as u16);
    for &c in chosen {
        b.put_u8(c as u8);
    }
    b.put_u32(messages);
    b.put_u8(round_trips);
    b
}

fn decode_classic(b: &[u8]) -> Result<(Vec<bool>, u64, u64), WireError> {
    let mut r = Reader::new(b);
    let count = r.u16()? as usize;
    let mut chosen = Vec::with_capacity(count.min(r.remaining()));
    for _ in 0..count {
        chosen.push(r.u8()? != 0);
    }
    let (m, rt) = (r.u32()? as u64, r.u8()? as u64);
    r.finish()?;
    Ok((chosen, m, rt))
}

/// CLASSIC at a master: phase 2 of a classic round for each option (of records this node is
/// the primary of, given by their own tables) at every replica; an option is learned when a
/// majority of its record's replicas hold it.
fn serve_job<'a>(ctx: &'a Ctx, n: &'a NodeState, job: &'a Job) -> LocalBoxFuture<'a, Result<Vec<u8>, TxnError>> {
    Box::pin(async move {
        let (tid, _, entries) = decode(&job.req)?;
        let replicas = placement(n)
            .replicas(n.me, n.replication)
            .map_err(|_| TxnError::Unsupported("MDCC's replicas do not fit the data centers"))?;
        let mut reqs: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
        for (k, &node) in replicas.iter().enumerate() {
            let mut mapped = Vec::with_capacity(entries.len());
            for e in &entries {
                mapped.push(Entry { table: quorum::copy_table(e.table, k as u16)?, ..e.clone() });
            }
            reqs.insert(node, encode(tid, false, &mapped));
        }
        let replies = quorum::to_nodes(ctx, n, H_ACCEPT, "MDCC", &reqs).await?;
        let mut holders = vec![0usize; entries.len()];
        for rep in &replies {
            for (j, v) in rep.iter().take(entries.len()).enumerate() {
                holders[j] += (*v == ACCEPTED) as usize;
            }
        }
        let chosen: Vec<bool> = holders.iter().map(|&h| h >= majority(n.replication)).collect();
        let remote = replicas.iter().filter(|&&m| n.other_dc(m)).count() as u32;
        Ok(encode_classic(&chosen, 2 * remote, (remote > 0) as u8))
    })
}

async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, &mut recs).await;
    settle(ctx, n, r, &recs, id, id).await
}

/// Where the coordinator reads record `home`'s partition: a replica in its own data center
/// (itself first), else the primary. Returns (node, copy).
fn read_from(n: &NodeState, home: u16) -> Result<(u16, u16), TxnError> {
    let replicas = placement(n)
        .replicas(home, n.replication)
        .map_err(|_| TxnError::Unsupported("MDCC's replicas do not fit the data centers"))?;
    let near = replicas.iter().position(|&m| m == n.me).or_else(|| replicas.iter().position(|&m| !n.other_dc(m)));
    let k = near.unwrap_or(0);
    Ok((replicas[k], k as u16))
}

async fn run(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, recs: &mut [Rec]) -> Result<Attempt, TxnError> {
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    let at = quorum::copies_by_node(placement(n), recs, n.replication)?;
    let option = |i: usize, table: u16, recs: &[Rec]| Entry {
        table,
        key: recs[i].key,
        version: recs[i].version().1,
        write: recs[i].write,
        value: Vec::new(),
    };

    // Read: each record from the nearest replica (Table 1 counts nothing here: MDCC reads
    // in the coordinator's data center, which holds a replica of everything there).
    let t0 = ctx.now();
    let mut asked: BTreeMap<u16, Vec<(usize, u16)>> = BTreeMap::new();
    for (i, r) in recs.iter().enumerate() {
        let (node, k) = read_from(n, r.home)?;
        asked.entry(node).or_default().push((i, quorum::copy_table(r.table, k)?));
    }
    let reqs: BTreeMap<u16, Vec<u8>> = asked
        .iter()
        .map(|(&node, which)| {
            let e: Vec<Entry> =
                which.iter().map(|&(i, table)| Entry { table, key: recs[i].key, ..Entry::default() }).collect();
            (node, encode(id, false, &e))
        })
        .collect();
    let replies = quorum::to_nodes(ctx, n, H_READ, "MDCC", &reqs).await?;
    for (&node, rep) in asked.keys().zip(&replies) {
        quorum::take_freshest(recs, &asked[&node], rep)?;
    }
    ops::account(ctx, n, Stage::Read, t0, 1, 0, quorum::local_of(n, &reqs));
    if recs.iter().any(|r| r.tuple.is_empty()) {
        return Err(TxnError::Unsupported("an MDCC replica lacks a record"));
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        let waits = n.wait_cause.borrow_mut().remove(&(ctx.me().worker, ctx.coroutine()));
        return Ok(waits.map_or(Attempt::UserAbort, Attempt::Conflict));
    };

    // Fast round: every record's option to every replica.
    let t1 = ctx.now();
    let reqs: BTreeMap<u16, Vec<u8>> = at
        .iter()
        .map(|(&node, which)| {
            let e: Vec<Entry> = which.iter().map(|&(i, table)| option(i, table, recs)).collect();
            (node, encode(id, false, &e))
        })
        .collect();
    let replies = quorum::to_nodes(ctx, n, H_PROPOSE, "MDCC", &reqs).await?;
    let mut accepted = vec![0usize; recs.len()];
    let mut newer = false;
    for (&node, rep) in at.keys().zip(&replies) {
        for (&(i, _), v) in at[&node].iter().zip(rep) {
            accepted[i] += (*v == ACCEPTED) as usize;
            newer |= *v == NEWER;
        }
    }
    ops::account(ctx, n, Stage::Commit, t1, 1, 0, quorum::local_of(n, &reqs));
    let mut learned: Vec<bool> = accepted.iter().map(|&a| a >= fast_quorum(n.replication)).collect();

    // A collision: each unlearned option to its record's master for a classic round.
    let mut why = STALE;
    if !newer && learned.iter().any(|l| !l) {
        why = COLLISION;
        let t2 = ctx.now();
        let mut by_master: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for i in (0..recs.len()).filter(|&i| !learned[i]) {
            by_master.entry(recs[i].home).or_default().push(i);
        }
        let reqs: BTreeMap<u16, Vec<u8>> = by_master
            .iter()
            .map(|(&m, idx)| {
                (m, encode(id, false, &idx.iter().map(|&i| option(i, recs[i].table, recs)).collect::<Vec<_>>()))
            })
            .collect();
        let replies = quorum::to_nodes(ctx, n, H_CLASSIC, "MDCC", &reqs).await?;
        let mut trips = Trips::default();
        let (mut messages, mut longest) = (0, 0);
        for ((_, idx), rep) in by_master.iter().zip(&replies) {
            let (chosen, m, rt) = decode_classic(rep)?;
            messages += m;
            longest = longest.max(rt);
            for (&i, c) in idx.iter().zip(chosen) {
                learned[i] = c;
            }
        }
        let own_remote = by_master.keys().any(|&m| n.other_dc(m));
        trips.wait(own_remote, (messages, longest));
        trips.note(ctx, n, own_remote);
        ops::account(ctx, n, Stage::Validate, t2, 1, 0, quorum::local_of(n, &reqs));
    }

    let mut commit = learned.iter().all(|&l| l);
    let mut result = Attempt::Conflict(why);
    let mut values: Vec<Option<Vec<u8>>> = vec![None; recs.len()];
    if commit {
        let mut h = new_history(ctx, n, spec, id, start_ns);
        ops::history_of(recs, &mut h);
        if ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
            for ((i, _), v) in recs.iter().enumerate().filter(|(_, r)| r.write).zip(new_values) {
                values[i] = Some(v);
            }
            result = Attempt::Committed;
        } else {
            commit = false;
            result = Attempt::Conflict(cause::VIEW_CHANGED);
        }
    }

    // Visibility: the outcome to every replica (MDCC sends it asynchronously; here the
    // coordinator's coroutine waits for it before its next transaction).
    let t3 = ctx.now();
    let reqs: BTreeMap<u16, Vec<u8>> = at
        .iter()
        .map(|(&node, which)| {
            let e: Vec<Entry> = which
                .iter()
                .map(|&(i, table)| Entry {
                    version: recs[i].version().1 + recs[i].write as u64,
                    value: values[i].clone().unwrap_or_default(),
                    ..option(i, table, recs)
                })
                .collect();
            (node, encode(id, commit, &e))
        })
        .collect();
    quorum::to_nodes(ctx, n, H_VISIBLE, "MDCC", &reqs).await?;
    ops::account(ctx, n, Stage::Release, t3, 1, 0, quorum::local_of(n, &reqs));
    if commit {
        ops::complete(ctx, n, id);
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any fast quorum and any majority of the same replicas intersect, and two fast quorums
    /// do: the acceptors' one-option-at-a-time rule then keeps conflicting options apart.
    #[test]
    fn quorums_intersect() {
        for r in 1..=9u16 {
            let (f, m) = (fast_quorum(r), majority(r));
            assert!(f + m > r as usize, "R={r}: fast {f} and majority {m} may miss");
            assert!(2 * f > r as usize, "R={r}: two fast quorums {f} may miss");
            assert!(f >= m, "R={r}: a fast quorum below a majority");
        }
        assert_eq!((fast_quorum(3), fast_quorum(4), fast_quorum(5)), (3, 3, 4));
    }

    #[test]
    fn classic_replies_round_trip() {
        let b = encode_classic(&[true, false, true], 6, 1);
        assert_eq!(decode_classic(&b).unwrap(), (vec![true, false, true], 6, 1));
        for cut in 0..b.len() {
            assert!(decode_classic(&b[..cut]).is_err());
        }
    }
}
