//! TAPIR (Zhang et al., SOSP 2015), as RedT Sec. 4.3 compares it: inconsistent replication with
//! OCC validation at every replica. No leader: the coordinator reads from every replica of
//! what it touches (execution), asks every replica to validate (prepare: TAPIR-OCC-CHECK
//! against the replica's committed versions and its prepared transactions), commits on the
//! fast path when a super-quorum of each partition's replicas (ceil(3f/2) + 1 of 2f + 1)
//! answered OK, on the slow path after one more round (IR's consensus finalize) when only a
//! majority did, and sends the decision to every replica, which installs the writes.
//!
//! Replicas are tuples in registered memory (`Protocol::stores_replicas`, placed by
//! `txn::placement`), read and written by the replicas' own RPC handlers; a replica's prepared
//! transactions are in its memory. Messages are per node, as Table 1 counts them.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use txbed_transport::{Ctx, Handled, HandlerCtx, HandlerFn, HostMemory};
use txbed_txn::attempt::{cause, execute, new_history, settle, Attempt};
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_txn::placement::Placement;
use txbed_txn::protocol::{handler_id, in_id_order, Bug, LocalBoxFuture, Protocol};
use txbed_txn::quorum::{self, decode, encode, Entry, Holds};
use txbed_txn::stage::Stage;
use txbed_txn::store::{split_version_word, VERSION};
use txbed_txn::TxnError;
use txbed_workloads::TxnSpec;

pub struct Tapir;

/// Replicas validate only against prepared transactions, not the versions read: a
/// transaction that read an overwritten version commits (lost update).
pub const SKIP_VERSION_CHECK: Bug = Bug {
    name: "TapirSkipVersionCheck",
    about: "replicas validate reads only against prepared transactions, not committed versions: a stale read commits (lost update)",
};

pub const H_READ: u16 = handler_id(0);
pub const H_PREPARE: u16 = handler_id(1);
pub const H_FINALIZE: u16 = handler_id(2);
pub const H_COMMIT: u16 = handler_id(3);
pub const HANDLER_NAMES: [&str; 4] = ["TAPIR_READ", "TAPIR_PREPARE", "TAPIR_FINALIZE", "TAPIR_COMMIT"];

pub const ABORTED: &str = "tapir: a read was overwritten";
pub const NO_QUORUM: &str = "tapir: under a majority of replicas prepared";

/// A replica's prepare answers.
const OK: u8 = 0;
const ABSTAIN: u8 = 1;
const ABORT: u8 = 2;

/// A replica's prepared transactions, per record (copy table, key).
#[derive(Default)]
pub struct Part {
    prepared: Holds,
    placement: OnceCell<Placement>,
}

fn part(n: &NodeState) -> &Part {
    n.participant()
}

fn placement(n: &NodeState) -> &Placement {
    part(n).placement.get_or_init(|| Placement::new(&n.dc_of, n.nodes))
}

impl Protocol for Tapir {
    fn name(&self) -> &'static str {
        "TAPIR"
    }
    fn description(&self) -> &'static str {
        "inconsistent replication with OCC validation at every replica, fast and slow paths: 3 inter-DC round trips (TAPIR, SOSP 2015; RedT Sec. 4.3)"
    }
    fn stages(&self) -> &'static [Stage] {
        &[Stage::Read, Stage::Validate, Stage::Commit]
    }
    fn stores_replicas(&self) -> bool {
        true
    }
    fn bugs(&self) -> &'static [Bug] {
        &[SKIP_VERSION_CHECK]
    }
    fn participant(&self, _options: &txbed_txn::protocol::OptionValues) -> Box<dyn std::any::Any> {
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
            (H_PREPARE, h(prepare_handler)),
            (H_FINALIZE, h(|_, _, _| Handled::Reply)),
            (H_COMMIT, h(commit_handler)),
        ])
    }
    fn survives_crashes(&self) -> Result<(), &'static str> {
        Err("TAPIR's replica recovery and coordinator recovery are not built")
    }
    fn survives_lost_messages(&self, _hybrid: txbed_txn::stage::Hybrid) -> Result<(), &'static str> {
        Err("TAPIR's coordinator recovery is not built: a lost decision leaves prepared transactions")
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id))
    }
}

fn find(n: &NodeState, mem: &dyn HostMemory, table: u16, key: u64) -> Option<(u64, u64)> {
    txbed_txn::participant::find(n, mem, table, key).map(|(place, off)| (off, place.tuple_bytes))
}

/// PREPARE: TAPIR-OCC-CHECK at this replica. A read of an overwritten version aborts; a
/// replica behind (it has not applied the version read yet) or a prepared conflict abstains;
/// otherwise the transaction is prepared here.
fn prepare_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    let Ok((tid, _, entries)) = decode(req) else { return Handled::Reply };
    h.memory_misses(2 * entries.len() as u64);
    let prepared = &part(n).prepared;
    let mut verdict = OK;
    {
        for e in &entries {
            let have = find(n, h.mem, e.table, e.key)
                .map(|(off, _)| split_version_word(h.mem.load_u64(n.base() + off + VERSION).unwrap_or(0)).1);
            let Some(have) = have else {
                verdict = ABSTAIN;
                continue;
            };
            if n.bug != Some(SKIP_VERSION_CHECK) {
                if have > e.version {
                    verdict = ABORT;
                    break;
                }
                if have < e.version {
                    verdict = verdict.max(ABSTAIN);
                }
            }
            if prepared.conflicts(tid, e.table, e.key, e.write) {
                verdict = verdict.max(ABSTAIN);
            }
        }
    }
    if verdict == OK {
        for e in &entries {
            prepared.hold(tid, e.table, e.key, e.write);
        }
    }
    h.reply.push(verdict);
    Handled::Reply
}

/// COMMIT: install the writes (if newer than what the replica has) and forget the prepared
/// transaction; an abort only forgets it.
fn commit_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    let Ok((tid, commit, entries)) = decode(req) else { return Handled::Reply };
    if commit {
        h.memory_misses(2 * entries.len() as u64);
    }
    part(n).prepared.finish(n, h.mem, tid, commit, &entries);
    Handled::Reply
}

async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, &mut recs).await;
    settle(ctx, n, r, &recs, id, id).await
}

async fn run(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, recs: &mut [Rec]) -> Result<Attempt, TxnError> {
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    // Every replica of every record: node -> (record, copy's table).
    let at = quorum::copies_by_node(placement(n), recs, n.replication)?;
    let entries = |node: u16, recs: &[Rec], values: Option<&[Option<Vec<u8>>]>| -> Vec<Entry> {
        at[&node]
            .iter()
            .map(|&(i, table)| Entry {
                table,
                key: recs[i].key,
                // Nothing read yet for the execution's READ requests.
                version: match recs[i].tuple.is_empty() {
                    true => 0,
                    false => recs[i].version().1 + (values.is_some() && recs[i].write) as u64,
                },
                write: recs[i].write,
                value: values.and_then(|v| v[i].clone()).unwrap_or_default(),
            })
            .collect()
    };

    // Execution: read every replica; each record's freshest version is the one read.
    let t0 = ctx.now();
    let reqs: BTreeMap<u16, Vec<u8>> =
        at.keys().map(|&node| (node, encode(id, false, &entries(node, recs, None)))).collect();
    let replies = quorum::to_nodes(ctx, n, H_READ, "TAPIR", &reqs).await?;
    for (&node, rep) in at.keys().zip(&replies) {
        quorum::take_freshest(recs, &at[&node], rep)?;
    }
    ops::account(ctx, n, Stage::Read, t0, 1, 0, quorum::local_of(n, &reqs));
    if recs.iter().any(|r| r.tuple.is_empty()) {
        return Err(TxnError::Unsupported("a TAPIR replica lacks a record"));
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        let waits = n.wait_cause.borrow_mut().remove(&(ctx.me().worker, ctx.coroutine()));
        return Ok(waits.map_or(Attempt::UserAbort, Attempt::Conflict));
    };

    // Prepare: every replica validates.
    let t1 = ctx.now();
    let reqs: BTreeMap<u16, Vec<u8>> =
        at.keys().map(|&node| (node, encode(id, false, &entries(node, recs, None)))).collect();
    let replies = quorum::to_nodes(ctx, n, H_PREPARE, "TAPIR", &reqs).await?;
    let prepared_locally = quorum::local_of(n, &reqs);
    let verdict: BTreeMap<u16, u8> =
        at.keys().copied().zip(replies.iter().map(|r| r.first().copied().unwrap_or(ABSTAIN))).collect();
    // Quorums of R = 2f + 1 replicas (an even R has a majority of R/2 + 1 all the same: two
    // transactions must not both prepare on disjoint halves).
    let r_count = n.replication as usize;
    let f = (r_count - 1) / 2;
    let majority = r_count / 2 + 1;
    let super_quorum = ((3 * f).div_ceil(2) + 1).max(majority);
    let mut homes: Vec<u16> = recs.iter().map(|r| r.home).collect();
    homes.sort_unstable();
    homes.dedup();
    let mut commit = !verdict.values().any(|&v| v == ABORT);
    let mut slow = Vec::new();
    for &h in &homes {
        let nodes = placement(n).replicas(h, n.replication).unwrap_or_default();
        let oks = nodes.iter().filter(|m| verdict.get(m) == Some(&OK)).count();
        if oks < majority {
            commit = false;
        } else if oks < super_quorum.min(r_count) {
            slow.extend(nodes);
        }
    }
    let why = match verdict.values().any(|&v| v == ABORT) {
        true => ABORTED,
        false => NO_QUORUM,
    };
    if commit && !slow.is_empty() {
        // The slow path: IR's consensus round to finalize the prepare result.
        slow.sort_unstable();
        slow.dedup();
        let reqs: BTreeMap<u16, Vec<u8>> = slow.iter().map(|&m| (m, encode(id, true, &[]))).collect();
        quorum::to_nodes(ctx, n, H_FINALIZE, "TAPIR", &reqs).await?;
        // Two waits in a row: the second's inter-DC round trip beyond the stage's one.
        if slow.iter().any(|&m| n.other_dc(m)) && at.keys().any(|&m| n.other_dc(m)) {
            n.note_nested_inter_dc((ctx.me().worker, ctx.coroutine()), 0, 1);
        }
    }
    ops::account(ctx, n, Stage::Validate, t1, 1, 0, prepared_locally);
    let mut values: Vec<Option<Vec<u8>>> = vec![None; recs.len()];
    let mut result = Attempt::Conflict(why);
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

    // Commit: the decision to every replica.
    let t2 = ctx.now();
    let reqs: BTreeMap<u16, Vec<u8>> =
        at.keys().map(|&node| (node, encode(id, commit, &entries(node, recs, Some(&values))))).collect();
    quorum::to_nodes(ctx, n, H_COMMIT, "TAPIR", &reqs).await?;
    ops::account(ctx, n, Stage::Commit, t2, 1, 0, quorum::local_of(n, &reqs));
    if commit {
        ops::complete(ctx, n, id);
    }
    Ok(result)
}
