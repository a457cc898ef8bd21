//! RETRY-2PL: two-phase locking that retries a busy lock a few times before it aborts.
//!
//! NOWAIT (RCC Sec. 4.2) aborts as soon as one lock is busy. Under moderate contention many
//! of those locks are free a microsecond later, so RETRY-2PL releases what it got, backs off
//! for `backoff_ns` and tries the whole lock set again, up to `retries` times, before it
//! reports a conflict. Holding no lock while it waits, it cannot deadlock.
//!
//! 1. LOCK: lock and read every record, read set included (`ops::lock_and_read`: RDMA CAS +
//!    READ doorbelled on one QP, or the LOCK RPC); if one is busy, release all, back off and
//!    retry.
//! 2. Run the transaction's logic on the records read (`attempt::execute`).
//! 3. LOG the new values to the backups (`ops::log`).
//! 4. COMMIT: write back and unlock the write set, unlock the read set (`ops::write_back`).
//!
//! It is the example of `docs/writing-a-protocol.md`: written against `txbed-txn` only, from
//! outside the protocols crate, and run under the history checker by `tests/checked.rs`.

use std::any::Any;
use std::cell::Cell;

use serde::{Deserialize, Serialize};
use txbed_transport::Ctx;
use txbed_txn::attempt::{cause, execute, new_history, settle, Attempt};
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_txn::protocol::{parse_options, Bug, LocalBoxFuture, OptionValues, Protocol};
use txbed_txn::stage::Stage;
use txbed_txn::TxnError;
use txbed_workloads::TxnSpec;

/// The protocol. A unit struct: its state lives on the nodes (`Node`).
pub struct Retry2pl;

/// The protocol as the runner takes it (`TxnRunSpec::protocol`).
pub static RETRY_2PL: Retry2pl = Retry2pl;

/// The stages it has: LOCK, LOG, RELEASE (on abort) and COMMIT, each by RPC or one-sided.
pub const STAGES: [Stage; 4] = [Stage::Lock, Stage::Log, Stage::Release, Stage::Commit];

/// Planted bug: reads take no lock (only the write set is locked) and are not validated, so
/// a transaction can commit on a value another overwrote meanwhile (write skew).
pub const UNLOCKED_READS: Bug = Bug {
    name: "UnlockedReads",
    about: "reads take no lock and are never validated: commits on overwritten values (write skew)",
};

/// Its options (`protocol.options` in a scenario, `TxnRunSpec::protocol_options` here).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// Lock rounds after the first before a conflict is reported.
    pub retries: u32,
    /// Back-off between rounds, ns.
    pub backoff_ns: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { retries: 3, backoff_ns: 2_000 }
    }
}

/// Per-node state: its options, and how many lock rounds were retried (a statistic the
/// paper of a real protocol would report).
pub struct Node {
    options: Options,
    pub retried: Cell<u64>,
}

impl Protocol for Retry2pl {
    fn name(&self) -> &'static str {
        "RETRY-2PL"
    }
    fn description(&self) -> &'static str {
        "2PL that retries a busy lock set a few times before it aborts (docs/writing-a-protocol.md)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    fn bugs(&self) -> &'static [Bug] {
        &[UNLOCKED_READS]
    }
    fn check_options(&self, given: &OptionValues) -> Result<(), String> {
        let o: Options = parse_options(given)?;
        if o.retries > 100 {
            return Err(format!("retries must be 0..=100, got {}", o.retries));
        }
        if o.backoff_ns > 1_000_000 {
            return Err(format!("backoff_ns must be at most 1000000 (1 ms), got {}", o.backoff_ns));
        }
        Ok(())
    }
    fn default_options(&self) -> OptionValues {
        serde_json::to_value(Options::default()).expect("options serialise")
    }
    fn participant(&self, options: &OptionValues) -> Box<dyn Any> {
        let options = parse_options(options).expect("the runner checked the options");
        Box::new(Node { options, retried: Cell::new(0) })
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id))
    }
}

/// One attempt of `spec` as transaction `id` (nonzero; also the lock owner). With faults in
/// the run, `settle` turns an error meeting an unreachable node into an abort (after
/// releasing what the attempt may hold); otherwise an error fails the attempt.
async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, &mut recs).await;
    settle(ctx, n, r, &recs, id, id).await
}

/// The attempt, with `?` for the operations' errors (a failed verb or RPC).
async fn run(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, recs: &mut [Rec]) -> Result<Attempt, TxnError> {
    let me: &Node = n.participant();
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    let lock_reads = n.bug != Some(UNLOCKED_READS);
    // 1. LOCK, retried after a back-off while some lock is busy.
    let mut round = 0;
    while !ops::lock_and_read(ctx, n, recs, |r| r.write || lock_reads, id).await? {
        ops::release(ctx, n, recs, |_| true, id).await?;
        if round == me.options.retries {
            return Ok(Attempt::Conflict(cause::LOCK_BUSY));
        }
        round += 1;
        me.retried.set(me.retried.get() + 1);
        ctx.sleep(me.options.backoff_ns).await;
    }
    if !lock_reads {
        // The planted bug: the read set is fetched unlocked (records() puts reads first).
        if let Err(e) = ops::fetch(ctx, n, &mut recs[..spec.reads.len()]).await {
            ops::release(ctx, n, recs, |_| true, id).await?;
            return Err(e);
        }
    }
    // 2. The transaction's logic.
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        ops::release(ctx, n, recs, |_| true, id).await?;
        return Ok(Attempt::UserAbort);
    };
    // 3. The commit point (what it read and wrote go to its history), LOG, then 4. COMMIT.
    let mut h = new_history(ctx, n, spec, id, start_ns);
    ops::history_of(recs, &mut h);
    if !ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
        ops::abandon(ctx, n, recs, id).await;
        return Ok(Attempt::Conflict(cause::VIEW_CHANGED));
    }
    ops::log(ctx, n, recs, &new_values, id).await?;
    ops::write_back(ctx, n, recs, &new_values, id, false).await?;
    ops::complete(ctx, n, id);
    Ok(Attempt::Committed)
}
