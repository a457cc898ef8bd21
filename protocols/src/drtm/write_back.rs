//! REMOTE_WRITE_BACK (Fig. 10a): after the commit point, each remote write (and, in the
//! fallback handler, every write) installed and unlocked.

use txbed_transport::Ctx;
use txbed_txn::error::TxnError;
use txbed_txn::node::{NodeState, H_COMMIT};
use txbed_txn::ops::{self, Rec, Tally};
use txbed_txn::stage::Stage;

/// REMOTE_WRITE_BACK (Fig. 10a) of the written records `which` selects: each new value
/// (version + 1) then the unlock, behind it on the QP; `owner` is the state word of this
/// machine's write lock. (The paper unlocks by CAS; only the
/// holder ever changes a write-locked state word, so a WRITE of INIT is the same.)
pub async fn write_back(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    new_values: &[Vec<u8>],
    id: u64,
    owner: u64,
    which: impl Fn(&Rec) -> bool,
) -> Result<(), TxnError> {
    let t0 = ctx.now();
    let mut t = Tally::default();
    let mut staging = ops::staging_at(ctx);
    let mut failed = None;
    for (r, v) in recs.iter().filter(|r| r.write).zip(new_values) {
        if which(r) {
            match ops::write_back_one(ctx, n, r, v, id, &mut staging, true, H_COMMIT).await {
                Ok(sent) => t += sent,
                Err(e) if n.recovery.is_some() && e.unreachable_node().is_some() => failed = Some(e),
                Err(e) => return Err(e),
            }
        }
    }
    let waited = ctx.wait().await;
    ctx.clear_replies();
    match waited.err().map(TxnError::from).or(failed) {
        // Fig. 11(e): the machine crashed under the write-back. The lock is still this
        // machine's (the state word survives in NVRAM); what does not land now is installed
        // from this machine's write-ahead log when it is rebuilt (`ops::until_answered`).
        Some(e) if n.recovery.is_some() && e.unreachable_node().is_some() => {
            ops::finish_write_back_of(ctx, n, recs, new_values, id, owner, false, &which).await;
        }
        Some(e) => return Err(e),
        None => {}
    }
    if t.sent + t.local > 0 {
        ops::account_tally(ctx, n, Stage::Commit, t0, &t);
    }
    Ok(())
}
