//! NOWAIT (RCC Sec. 4.2): two-phase locking with exclusive locks that never waits.
//!
//! LOCK locks and reads every record (one-sided: RDMA CAS and READ posted back to back on one
//! QP, the CAS unsignaled, the READ's data ignored if the CAS failed; RPC: the handler CASes
//! locally and replies with the tuple); any busy lock aborts at once. Then the transaction's
//! logic runs, LOG sends the new values to the backups, COMMIT writes back and unlocks (two
//! WRITEs, only the second signaled) and, within the same stage, unlocks the records only read
//! by RELEASE's primitive; the RELEASE stage itself runs on an abort. The lock word always
//! holds the owner, so an RPC LOCK can be released one-sided (RCC Sec. 5.2).

use txbed_transport::Ctx;
use txbed_txn::attempt::{cause, execute, new_history, settle, Attempt};
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_txn::protocol::{Bug, LocalBoxFuture, Protocol};
use txbed_txn::stage::Stage;
use txbed_txn::TxnError;
use txbed_workloads::TxnSpec;

pub struct NoWait;

impl Protocol for NoWait {
    fn name(&self) -> &'static str {
        "NOWAIT"
    }
    fn description(&self) -> &'static str {
        "2PL with exclusive locks that aborts at once on a busy lock (RCC Sec. 4.2)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    fn bugs(&self) -> &'static [Bug] {
        &[UNLOCK_BEFORE_WRITE_BACK, ABORT_AFTER_WRITE_BACK]
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id))
    }
}

/// Releases the locks before writing back (RCC Sec. 4.2 done wrong): another transaction
/// reads the old value after this one's lock is gone (lost updates).
pub const UNLOCK_BEFORE_WRITE_BACK: Bug = Bug {
    name: "UnlockBeforeWriteBack",
    about: "releases its locks before writing back: another transaction reads the old value (lost update)",
};

/// Writes back, then aborts one attempt in eight without restoring what it wrote (an abort
/// path that forgets its undo): the next transaction reads, and builds on, a version an
/// aborted one installed (G1a).
pub const ABORT_AFTER_WRITE_BACK: Bug = Bug {
    name: "AbortAfterWriteBack",
    about: "aborts some attempts after writing back, without restoring the old values: others read what an aborted transaction wrote (G1a)",
};

/// The attempts `ABORT_AFTER_WRITE_BACK` aborts: one in eight, by sequence number.
const fn aborts_after_write_back(id: u64) -> bool {
    id & 7 == 0
}

/// The stages NOWAIT has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 4] = [Stage::Lock, Stage::Log, Stage::Release, Stage::Commit];

/// Runs one attempt of `spec` as transaction `id` (nonzero; also the lock owner).
async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, &mut recs).await;
    settle(ctx, n, r, &recs, id, id).await
}

async fn run(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, recs: &mut [Rec]) -> Result<Attempt, TxnError> {
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    if !ops::lock_and_read(ctx, n, recs, |_| true, id).await? {
        ops::release(ctx, n, recs, |_| true, id).await?;
        return Ok(Attempt::Conflict(cause::LOCK_BUSY));
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        ops::release(ctx, n, recs, |_| true, id).await?;
        return Ok(Attempt::UserAbort);
    };
    if n.bug == Some(ABORT_AFTER_WRITE_BACK) && aborts_after_write_back(id) && !spec.read_only() {
        // Installed and unlocked, never logged nor undone: its history entry (`settle`)
        // lists the versions it installed.
        ops::write_back(ctx, n, recs, &new_values, id, false).await?;
        return Ok(Attempt::Conflict("bug: aborted after write-back"));
    }
    let mut h = new_history(ctx, n, spec, id, start_ns);
    ops::history_of(recs, &mut h);
    if !ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
        ops::abandon(ctx, n, recs, id).await;
        return Ok(Attempt::Conflict(cause::VIEW_CHANGED));
    }
    ops::log(ctx, n, recs, &new_values, id).await?;
    let bug = n.bug == Some(UNLOCK_BEFORE_WRITE_BACK);
    ops::write_back(ctx, n, recs, &new_values, id, bug).await?;
    ops::complete(ctx, n, id);
    Ok(Attempt::Committed)
}
