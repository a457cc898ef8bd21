//! One attempt of a DrTM transaction (Fig. 9a): START locks and fetches the remote records,
//! the HTM region runs LocalTX and confirms the leases, XEND is the commit point, then
//! REMOTE_WRITE_BACK installs and unlocks the remote writes. Read-only transactions take
//! START_RO without HTM (Fig. 10c, Sec. 5.4).

use txbed_transport::htm::Abort;
use txbed_transport::Ctx;
use txbed_txn::attempt::{committed, execute, new_history, settle, Attempt};
use txbed_txn::error::TxnError;
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_workloads::TxnSpec;

use super::state::{self, Refusal};
use super::{local_tx, options, COMMIT_WITHOUT_LEASE_CONFIRMATION};

/// Runs one attempt of `spec` as transaction `id`.
pub async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    // Real-time order (strict serializability): the attempt starts, and reads, at its own time.
    ctx.catch_up().await;
    let mut recs = ops::records(n, spec);
    // The state word keeps 8 bits of owner machine (Fig. 9b).
    let Ok(machine) = u8::try_from(n.me) else {
        return Attempt::Failed(TxnError::Unsupported("DrTM's state word names at most 256 machines"));
    };
    let me = state::locked(machine);
    let r = if spec.read_only() {
        run_read_only(ctx, n, spec, id, me, &mut recs).await
    } else {
        run(ctx, n, spec, id, me, &mut recs).await
    };
    settle(ctx, n, r, &recs, id, me).await
}

/// The cause reported for a refusal during START.
pub fn refused(x: Refusal) -> &'static str {
    match x {
        Refusal::WriteLocked => "remote: write locked",
        Refusal::ReadLeased => "remote: read leased",
    }
}

async fn run(
    ctx: &Ctx,
    n: &NodeState,
    spec: &TxnSpec,
    id: u64,
    me: u64,
    recs: &mut [Rec],
) -> Result<Attempt, TxnError> {
    let o = options(n);
    // The world's time, not the worker's (ahead by CPU charged this step): the instant its
    // first reads see (real-time order).
    let start_ns = ctx.world_now();
    let epoch0 = ctx.view_epoch();
    let local = |r: &Rec| n.local(r.home);
    // Index searching stays outside the region (Sec. 4.3): the local records' offsets first.
    ops::locate_all(ctx, n, recs, local).await?;
    // The lock-ahead log names the remote write set before anything is locked (Sec. 5.6).
    if o.logging {
        super::log::lock_ahead(ctx, n, recs, id, &|r| !local(r))?;
    }
    // START: lock the remote write set, lease the remote read set, all with one end time.
    let start = ctx.clock();
    let want_end = start.now_ns.max(0) as u64 + o.lease_ns(false);
    let end = match super::start::acquire(ctx, n, recs, |r| !local(r), me, want_end).await? {
        Ok(end) => end,
        Err(x) => {
            ops::release(ctx, n, recs, |r| r.locked, me).await?;
            return Ok(Attempt::Conflict(refused(x)));
        }
    };
    let lease_end = recs.iter().any(|r| !local(r) && !r.write).then_some(end);
    // LocalTX inside HTM, retried after conflicts and interrupts up to the budget.
    let mut retries = 0;
    let out = loop {
        let r = txbed_txn::htm::region(ctx, n, |tx| {
            local_tx::body(ctx, n, spec, recs, id, &local, lease_end, start, epoch0, tx)
        })
        .await;
        match r {
            Ok(Some(out)) => break Some(out),
            Err(Abort::Explicit(code)) => {
                forget_local_reads(recs, &local);
                ops::release(ctx, n, recs, |r| r.locked, me).await?;
                if code == local_tx::LOG_FULL {
                    return Err(TxnError::Unsupported(
                        "DrTM's write-ahead log slot (60 KiB) is too small for this transaction",
                    ));
                }
                return Ok(if code == local_tx::USER_ABORT {
                    Attempt::UserAbort
                } else {
                    Attempt::Conflict(local_tx::cause(code))
                });
            }
            // RTM clears the retry bit on a capacity abort: straight to the fallback.
            Err(Abort::Capacity) => break None,
            Err(_) | Ok(None) if retries < o.htm_retries => {
                forget_local_reads(recs, &local);
                retries += 1;
            }
            Err(_) | Ok(None) => break None,
        }
    };
    let Some((new_values, delta)) = out else {
        forget_local_reads(recs, &local);
        txbed_txn::htm::fallback(n);
        return super::fallback::run(ctx, n, spec, id, me, recs, start_ns, epoch0).await;
    };
    // XEND: the local part is committed and visible; the transaction commits.
    let mut h = new_history(ctx, n, spec, id, start_ns);
    ops::history_of(recs, &mut h);
    // XEND has run: the region checked the view before it, and a change since would have
    // aborted it, so the commit point cannot refuse.
    if !ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
        return Err(TxnError::Unsupported("DrTM passed XEND under a changed membership view (the HTM model broke)"));
    }
    ops::log(ctx, n, recs, &new_values, id).await?;
    super::write_back::write_back(ctx, n, recs, &new_values, id, me, |r| !local(r)).await?;
    ops::complete(ctx, n, id);
    Ok(Attempt::Committed)
}

/// An aborted region read nothing the transaction may keep.
fn forget_local_reads(recs: &mut [Rec], local: &dyn Fn(&Rec) -> bool) {
    for r in recs.iter_mut().filter(|r| local(r)) {
        r.tuple.clear();
    }
}

/// A read-only transaction (Sec. 5.4), without HTM: the remote records leased under one end
/// time (START_RO, Fig. 10c); the local ones read twice by the CPU (Sec. 4.4's two rounds),
/// and if any changed or was write-locked in between, all of them leased like remote ones
/// (the fallback of Sec. 5.4); then the leases confirmed valid. Every value read was current at the end of the first round's last
/// read, while every lease was held.
async fn run_read_only(
    ctx: &Ctx,
    n: &NodeState,
    spec: &TxnSpec,
    id: u64,
    me: u64,
    recs: &mut [Rec],
) -> Result<Attempt, TxnError> {
    // The world's time, not the worker's (ahead by CPU charged this step): the instant its
    // first reads see (real-time order).
    let start_ns = ctx.world_now();
    let epoch0 = ctx.view_epoch();
    let local = |r: &Rec| n.local(r.home);
    let want_end = ctx.clock().now_ns.max(0) as u64 + options(n).lease_ns(true);
    let mut end = match super::start::acquire(ctx, n, recs, |r| !local(r), me, want_end).await? {
        Ok(end) => end,
        Err(x) => return Ok(Attempt::Conflict(refused(x))),
    };
    let mut leases = recs.iter().any(|r| !local(r));
    ops::locate_all(ctx, n, recs, local).await?;
    let mut first = Vec::new();
    for r in recs.iter_mut().filter(|r| local(r)) {
        // Found by offset: one cache miss (the second round finds it cached).
        ctx.memory_misses(1);
        let mut tuple = vec![0u8; ops::tuple_bytes(n, r.table) as usize];
        ctx.read_local(n.base() + r.offset, &mut tuple)?;
        first.push(tuple);
    }
    // The second round: a record write-locked in either round, or whose version moved, is
    // leased instead (the fallback of Sec. 5.4).
    let mut changed = Vec::new();
    for ((i, r), tuple) in recs.iter_mut().enumerate().filter(|(_, r)| local(r)).zip(first) {
        let mut again = [0u8; txbed_txn::store::LOCK_AND_VERSION as usize];
        ctx.read_local(n.base() + r.offset, &mut again)?;
        let same = again[..] == tuple[..again.len()];
        if same && !state::write_locked(txbed_txn::wire::u64_at(&tuple, 0)) {
            r.tuple = tuple;
        } else {
            changed.push(i);
        }
    }
    if !changed.is_empty() {
        // Every local record then, not only those that changed: a record read in the first
        // round may change right after the second, and must agree with the newer reads.
        for r in recs.iter_mut().filter(|r| local(r)) {
            r.tuple.clear();
        }
        leases = true;
        match super::start::acquire(ctx, n, recs, |r| r.tuple.is_empty(), me, want_end).await? {
            Ok(e) => end = state::earlier(end, e),
            Err(x) => return Ok(Attempt::Conflict(refused(x))),
        }
    }
    let c = ctx.clock();
    if leases
        && n.bug != Some(COMMIT_WITHOUT_LEASE_CONFIRMATION)
        && !state::valid(end, c.now_ns.max(0) as u64, super::start::delta(n, c.bound_ns))
    {
        return Ok(Attempt::Conflict(local_tx::cause(local_tx::LEASE_INVALID)));
    }
    // A machine it leased from may have crashed and been rebuilt, its leases gone with it.
    if n.recovery.is_some() && ctx.view_epoch() != epoch0 {
        return Ok(Attempt::Conflict(local_tx::cause(local_tx::VIEW_CHANGED)));
    }
    let Some((_, delta)) = execute(ctx, n, spec, recs) else {
        return Ok(Attempt::UserAbort);
    };
    let mut h = new_history(ctx, n, spec, id, start_ns);
    ops::history_of(recs, &mut h);
    committed(ctx, n, h, delta);
    Ok(Attempt::Committed)
}
