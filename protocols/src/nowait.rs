//! NOWAIT (RCC Sec. 4.2): two-phase locking with exclusive locks that never waits.
//!
//! LOCK locks and reads every record (one-sided: RDMA CAS and READ posted back to back on one
//! QP, the CAS unsignaled, the READ's data ignored if the CAS failed; RPC: the handler CASes
//! locally and replies with the tuple); any busy lock aborts at once. Then the transaction's
//! logic runs, LOG sends the new values to the backups, COMMIT writes back and unlocks (two
//! WRITEs, only the second signaled) and RELEASE unlocks the records only read. The lock word
//! always holds the owner, so an RPC LOCK can be released one-sided (RCC Sec. 5.2).

use txbed_checker::{Status, Txn};
use txbed_transport::Ctx;
use txbed_workloads::{Executed, TxnSpec};

use crate::node::{Bug, NodeState};
use crate::ops::{self, Rec};
use crate::stage::Stage;

/// The stages NOWAIT has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 4] = [Stage::Lock, Stage::Log, Stage::Release, Stage::Commit];

/// How one attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    Committed,
    /// Another transaction held a lock, or a validation failed: retry.
    Conflict,
    /// The transaction's logic aborted: do not retry.
    UserAbort,
    /// A verb or RPC failed (peer dead): the message says which.
    Failed(String),
}

pub(crate) fn new_history(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, start_ns: u64) -> Txn {
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
    }
}

/// Runs the transaction's logic on the records as read.
pub(crate) fn execute(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, recs: &[Rec]) -> Option<(Vec<Vec<u8>>, i64)> {
    let reads: Vec<&[u8]> = recs.iter().filter(|r| !r.write).map(|r| r.record()).collect();
    let olds: Vec<&[u8]> = recs.iter().filter(|r| r.write).map(|r| r.record()).collect();
    ctx.compute(spec.compute_ns);
    match n.workload.execute(spec, &reads, &olds) {
        Executed::Commit { new_values, external_delta } => Some((new_values, external_delta)),
        Executed::UserAbort => None,
    }
}

/// Records a committed transaction.
pub(crate) fn committed(ctx: &Ctx, n: &NodeState, mut h: Txn, delta: i64) {
    h.end_ns = ctx.now();
    n.history.borrow_mut().push(h);
    n.stats.borrow_mut().external_delta += delta;
}

/// Runs one attempt of `spec` as transaction `id` (nonzero; also the lock owner).
pub async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let start_ns = ctx.now();
    let mut recs = ops::records(n, spec);
    match ops::lock_and_read(ctx, n, &mut recs, |_| true, id).await {
        Ok(true) => {}
        Ok(false) => {
            ops::release(ctx, n, &recs, |_| true, id).await;
            return Attempt::Conflict;
        }
        Err(e) => return Attempt::Failed(e),
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, &recs) else {
        ops::release(ctx, n, &recs, |_| true, id).await;
        return Attempt::UserAbort;
    };
    if let Err(e) = ops::log(ctx, n, &recs, &new_values, id).await {
        return Attempt::Failed(e);
    }
    let mut h = new_history(ctx, n, spec, id, start_ns);
    let bug = n.bug == Some(Bug::UnlockBeforeWriteBack);
    if let Err(e) = ops::write_back(ctx, n, &recs, &new_values, id, &mut h, bug).await {
        return Attempt::Failed(e);
    }
    committed(ctx, n, h, delta);
    Attempt::Committed
}
