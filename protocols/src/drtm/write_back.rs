//! REMOTE_WRITE_BACK (Fig. 10a): after the commit point, each remote write (and, in the
//! fallback handler, every write) installed and unlocked.

use txbed_transport::Ctx;
use txbed_txn::error::TxnError;
use txbed_txn::node::{NodeState, H_COMMIT};
use txbed_txn::ops::{self, Rec, Tally};
use txbed_txn::stage::Stage;

/// REMOTE_WRITE_BACK (Fig. 10a) of the written records `which` selects: each new value
/// (version + 1) then the unlock, behind it on the QP. (The paper unlocks by CAS; only the
/// holder ever changes a write-locked state word, so a WRITE of INIT is the same.)
pub async fn write_back(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    new_values: &[Vec<u8>],
    id: u64,
    which: impl Fn(&Rec) -> bool,
) -> Result<(), TxnError> {
    let t0 = ctx.now();
    let mut t = Tally::default();
    let mut staging = ops::staging_at(ctx);
    for (r, v) in recs.iter().filter(|r| r.write).zip(new_values) {
        if which(r) {
            t += ops::write_back_one(ctx, n, r, v, id, &mut staging, true, H_COMMIT).await?;
        }
    }
    let waited = ctx.wait().await;
    ctx.clear_replies();
    waited?;
    if t.sent + t.local > 0 {
        ops::account_tally(ctx, n, Stage::Commit, t0, &t);
    }
    Ok(())
}
