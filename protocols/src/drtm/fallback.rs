//! The fallback handler (Sec. 7.2), run once a transaction's region has used its retry
//! budget or overflowed: no HTM can roll it back, so it first drops the remote locks START
//! took, then locks every record, local ones included, by the ordinary REMOTE_WRITE /
//! REMOTE_READ in a global order (table, key), waiting for a busy lock rather than aborting
//! (the order rules out deadlock: START never waits). With every lease confirmed, it updates
//! the records outside HTM and unlocks them. Its locks on local records abort any region
//! that reads them (strong atomicity), and regions refuse write-locked records (Fig. 10b).

use std::collections::BTreeSet;

use txbed_transport::Ctx;
use txbed_txn::attempt::{execute, new_history, Attempt};
use txbed_txn::error::TxnError;
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_workloads::TxnSpec;

use super::state;
use super::{local_tx, options, COMMIT_WITHOUT_LEASE_CONFIRMATION};

/// Waiting for a busy lock, ns between tries.
const POLL_NS: u64 = 1_000;

#[allow(clippy::too_many_arguments)]
pub async fn run(
    ctx: &Ctx,
    n: &NodeState,
    spec: &TxnSpec,
    id: u64,
    me: u64,
    recs: &mut [Rec],
    start_ns: u64,
    epoch0: u64,
) -> Result<Attempt, TxnError> {
    let o = options(n);
    ops::release(ctx, n, recs, |r| r.locked, me).await?;
    for r in recs.iter_mut() {
        r.locked = false;
        r.tuple.clear();
    }
    let mut order: Vec<usize> = (0..recs.len()).collect();
    order.sort_by_key(|&i| (recs[i].table, recs[i].key, !recs[i].write));
    let want_end = ctx.clock().now_ns.max(0) as u64 + o.lease_ns(false);
    let give_up = ctx.now() + o.fallback_wait_us * 1000;
    let mut end = want_end;
    // Locks are taken in `order`; what is held while waiting is always a prefix of it. Each
    // round tries every record not yet held at once (the common case: one round trip), then
    // keeps the longest prefix that succeeded and drops the write locks beyond it.
    let mut held = 0;
    while held < order.len() {
        let todo: BTreeSet<(u16, u64)> = order[held..].iter().map(|&i| (recs[i].table, recs[i].key)).collect();
        let got = super::start::acquire_all(ctx, n, recs, |r| todo.contains(&(r.table, r.key)), me, want_end).await?;
        end = state::earlier(end, got.end);
        let ok = |i: usize| recs[i].locked || (!recs[i].write && !recs[i].tuple.is_empty());
        let first_failed = order[held..].iter().position(|&i| !ok(i)).map(|k| held + k);
        let Some(f) = first_failed else { break };
        held = f;
        let beyond: BTreeSet<(u16, u64)> = order[f..].iter().map(|&i| (recs[i].table, recs[i].key)).collect();
        ops::release(ctx, n, recs, |r| r.locked && beyond.contains(&(r.table, r.key)), me).await?;
        for &i in &order[f..] {
            recs[i].locked = false;
            recs[i].tuple.clear();
        }
        if ctx.now() >= give_up {
            ops::release(ctx, n, recs, |r| r.locked, me).await?;
            return Ok(Attempt::Conflict(match got.refused {
                Some(state::Refusal::ReadLeased) => "fallback: read leased too long",
                _ => "fallback: write locked too long",
            }));
        }
        ctx.sleep(POLL_NS).await;
    }
    let leases = recs.iter().any(|r| !r.write);
    // Confirm the leases before any update: nothing done outside HTM can be rolled back.
    let c = ctx.clock();
    if leases
        && n.bug != Some(COMMIT_WITHOUT_LEASE_CONFIRMATION)
        && !state::valid(end, c.now_ns.max(0) as u64, super::start::delta(n, c.bound_ns))
    {
        ops::release(ctx, n, recs, |r| r.locked, me).await?;
        return Ok(Attempt::Conflict(local_tx::cause(local_tx::LEASE_INVALID)));
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        ops::release(ctx, n, recs, |r| r.locked, me).await?;
        return Ok(Attempt::UserAbort);
    };
    // Nothing outside HTM can be undone: a changed view aborts here, before the commit point.
    if !ops::commit_allowed(ctx, n, epoch0, recs) {
        ops::release(ctx, n, recs, |r| r.locked, me).await?;
        return Ok(Attempt::Conflict(local_tx::cause(local_tx::VIEW_CHANGED)));
    }
    // Updates outside HTM: logged ahead (Sec. 7.2, 5.6).
    if o.logging {
        super::log::write_ahead(ctx, n, recs, &new_values, id)?;
    }
    let mut h = new_history(ctx, n, spec, id, start_ns);
    ops::history_of(recs, &mut h);
    // Checked just above, in this step: it cannot refuse.
    if !ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
        return Err(TxnError::Unsupported("DrTM's fallback passed its commit point under a changed view"));
    }
    ops::log(ctx, n, recs, &new_values, id).await?;
    super::write_back::write_back(ctx, n, recs, &new_values, id, me, |_| true).await?;
    ops::complete(ctx, n, id);
    Ok(Attempt::Committed)
}
