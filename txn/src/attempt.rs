//! How one attempt of a transaction ends, and the steps every protocol takes around its own:
//! run the workload's logic on the records read, start the history entry, record a commit.

use txbed_checker::{Status, Txn};
use txbed_transport::Ctx;
use txbed_workloads::{Executed, TxnSpec};

use crate::error::TxnError;
use crate::node::{Accesses, NodeState};
use crate::ops::Rec;

/// A transaction id: nonzero, unique per (node, incarnation, worker, coroutine, sequence):
/// node + 1 in the top 12 bits; then the node's incarnation (4 bits, wrapping) and the
/// worker (8 bits: at most 256 workers); the coroutine (12 bits); a 28-bit sequence number.
pub fn txn_id(node: u16, incarnation: u32, worker: u16, coro: u32, seq: u64) -> u64 {
    debug_assert!(worker < 256, "worker {worker} does not fit a transaction id");
    ((node as u64 + 1) << 52)
        | ((incarnation as u64 & 0xf) << 48)
        | ((worker as u64 & 0xff) << 40)
        | ((coro as u64 & 0xfff) << 28)
        | (seq & 0xfff_ffff)
}

/// The node of transaction `id` (`txn_id`); `None` for 0.
pub fn txn_node(id: u64) -> Option<u16> {
    ((id >> 52) as u16).checked_sub(1)
}

/// How one attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    Committed,
    /// Another transaction held a lock, or a validation failed: retry. The cause is reported
    /// (aborts by cause): one of [`cause`]'s, or a protocol's own words.
    Conflict(&'static str),
    /// The transaction's logic aborted: do not retry.
    UserAbort,
    /// A verb or RPC failed (peer dead), or a message did not decode.
    Failed(TxnError),
}

/// Causes of conflicts several protocols share; a protocol may name its own.
pub mod cause {
    /// A lock was held by another transaction (NOWAIT; OCC and SUNDIAL locking the write set).
    pub const LOCK_BUSY: &str = "lock busy";
    /// A record read during execution was locked by a writer (OCC).
    pub const READ_LOCKED: &str = "read: locked";
    /// A record changed between its read and the lock or validation (OCC, SUNDIAL).
    pub const CHANGED: &str = "lock: changed since read";
    /// Validation found a record read changed or locked (OCC).
    pub const VALIDATION: &str = "validate: changed or locked";
    /// The index's answers went stale before the transaction read its rows (data-dependent
    /// keys): the workload's logic asked for a retry.
    pub const STALE_LOOKUP: &str = "stale lookup";
    /// A node the attempt used did not answer, or is down or rejoining (faults).
    pub const UNAVAILABLE: &str = "node unavailable";
    /// The membership changed during the attempt, before its commit point (faults).
    pub const VIEW_CHANGED: &str = "membership changed";
}

/// How an attempt that ended with `r` ends. With faults in the run, an error that says a
/// node is out of reach, met before the commit point, aborts it: what it may have locked is
/// released (`ops::abandon`, with its lock word `owner`) and the coordinator retries it.
/// Otherwise an error fails it. `id` is the transaction's.
pub async fn settle(
    ctx: &Ctx,
    n: &NodeState,
    r: Result<Attempt, TxnError>,
    recs: &[Rec],
    id: u64,
    owner: u64,
) -> Attempt {
    let a = match r {
        Ok(a) => a,
        Err(e) if n.recovery.is_some() && e.unreachable_node().is_some() => {
            if n.pending.borrow().contains_key(&id) {
                // Past the commit point nothing may fail this way (log and write-back retry).
                return Attempt::Failed(e);
            }
            crate::ops::abandon(ctx, n, recs, owner).await;
            Attempt::Conflict(cause::UNAVAILABLE)
        }
        Err(e) => Attempt::Failed(e),
    };
    if matches!(a, Attempt::Conflict(_) | Attempt::UserAbort) {
        // What the protocol noted itself (`note_accesses`) wins over what `recs` show.
        n.aborted_accesses.borrow_mut().entry(id).or_insert_with(|| crate::ops::accesses_of(recs));
    }
    a
}

/// Notes what attempt `id` read and wrote so far, for its history entry should it abort: for
/// a protocol whose records (`ops::Rec`) do not show the versions it read (MVCC reads old
/// versions). Replaces an earlier note.
pub fn note_accesses(n: &NodeState, id: u64, accesses: Accesses) {
    n.aborted_accesses.borrow_mut().insert(id, accesses);
}

/// The history entry of attempt `id`, which aborted (a conflict or a user abort): started at
/// `start_ns`, ended now, with what `settle` or the protocol noted it read and wrote (nothing
/// if neither did: CALVIN's scheduler runs the logic elsewhere, an index lookup failed
/// before the attempt). Every abort the run counts has one, so G1a is checkable.
pub fn aborted(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, start_ns: u64) {
    let acc = n.aborted_accesses.borrow_mut().remove(&id).unwrap_or_default();
    let mut h = new_history(ctx, n, spec, id, start_ns);
    h.status = Status::Aborted;
    h.reads = acc.reads;
    h.writes = acc.writes;
    h.end_ns = ctx.now();
    n.history.borrow_mut().push(h);
}

/// A history entry for transaction `id`, started at `start_ns`, not yet ended.
pub fn new_history(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, start_ns: u64) -> Txn {
    Txn {
        id,
        node: n.me,
        worker: ctx.me().worker,
        coroutine: ctx.coroutine(),
        start_ns,
        end_ns: 0,
        status: Status::Committed,
        label: spec.kind.to_string(),
        reads: Vec::new(),
        writes: Vec::new(),
        predicates: Vec::new(),
    }
}

/// Runs the transaction's logic on the records as read: the new values of the write set (in
/// its order) and the external delta, or `None` for a user abort.
pub fn execute(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, recs: &[Rec]) -> Option<(Vec<Vec<u8>>, i64)> {
    let reads: Vec<&[u8]> = recs.iter().filter(|r| !r.write).map(|r| r.record()).collect();
    let olds: Vec<&[u8]> = recs.iter().filter(|r| r.write).map(|r| r.record()).collect();
    ctx.compute(spec.compute_ns);
    logic(ctx, n, spec, &reads, &olds)
}

/// The workload's logic on `reads` and `olds`: the new values and external delta, or `None`
/// for an abort by the logic; one that must wait (`Executed::Wait`) leaves its cause in
/// `NodeState::wait_cause` for the coordinator, which retries it under that cause.
pub fn logic(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, reads: &[&[u8]], olds: &[&[u8]]) -> Option<(Vec<Vec<u8>>, i64)> {
    match n.workload.execute(spec, reads, olds) {
        Executed::Commit { new_values, external_delta } => Some((new_values, external_delta)),
        Executed::UserAbort => None,
        Executed::Wait(why) => {
            n.wait_cause.borrow_mut().insert((ctx.me().worker, ctx.coroutine()), why);
            None
        }
    }
}

/// Records a committed transaction.
pub fn committed(ctx: &Ctx, n: &NodeState, mut h: Txn, delta: i64) {
    assert!(h.end_ns == 0, "transaction {} recorded twice", h.id);
    h.end_ns = ctx.now();
    n.history.borrow_mut().push(h);
    n.stats.borrow_mut().external_delta += delta;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_id_names_its_node_and_coordinator() {
        for (node, inc, worker, coro, seq) in [(0, 0, 0, 0, 1), (3, 17, 255, 4095, (1 << 28) - 1), (4094, 2, 7, 1, 5)] {
            let id = txn_id(node, inc, worker, coro, seq);
            assert_eq!(txn_node(id), Some(node));
            assert_eq!(crate::chop::txn_coordinator(id), (worker, coro));
        }
    }
}
