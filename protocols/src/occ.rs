//! OCC as in DrTM+H (Sec. 5-6): Execution, Validation, Logging, Commit.
//!
//! - E (READ stage): fetch every record without locking; one-sided, the location cache turns
//!   a lookup into one READ (a miss refills the cache; by RPC the reply carries the bucket).
//! - V: LOCK the write set (CAS + a READ of lock and version doorbelled on one QP, or an RPC
//!   lock answered with them) and check each locked record still has the version E saw; VALIDATE the read set (READ of lock and
//!   version, or RPC): unchanged and not locked by another transaction.
//! - L: the new values to every backup; C: write back and unlock (COMMIT), and on any abort
//!   unlock what was locked (RELEASE).
//! - Read-only transactions run R + V only (DrTM+H Sec. 5.5).
//! - With `lock_in_execution` (FaSST), E locks and reads the write set right away and fetches
//!   only the read set; V then validates the read set alone.
//!
//! A multi-line tuple READ in E can be torn by a concurrent write-back; V then sees the lock
//! or the new version and aborts, so a torn read never commits.

use serde::{Deserialize, Serialize};
use txbed_transport::Ctx;
use txbed_txn::attempt::{cause, execute, new_history, settle, Attempt};
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_txn::protocol::{parse_options, Bug, LocalBoxFuture, OptionValues, Preset, Protocol, Rdma};
use txbed_txn::stage::{Hybrid, Stage};
use txbed_txn::TxnError;
use txbed_workloads::TxnSpec;

pub struct Occ;

impl Protocol for Occ {
    fn name(&self) -> &'static str {
        "OCC"
    }
    fn description(&self) -> &'static str {
        "optimistic: execute, lock and validate, log, commit (DrTM+H Sec. 5-6; RCC Sec. 4.1)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    fn bugs(&self) -> &'static [Bug] {
        &[SKIP_VALIDATION]
    }
    fn presets(&self) -> &'static [Preset] {
        &PRESETS
    }
    fn check_options(&self, given: &OptionValues) -> Result<(), String> {
        parse_options::<Options>(given).map(|_| ())
    }
    fn default_options(&self) -> OptionValues {
        serde_json::to_value(Options::default()).expect("options serialise")
    }
    fn participant(&self, options: &OptionValues) -> Box<dyn std::any::Any> {
        Box::new(parse_options::<Options>(options).expect("options were checked"))
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id))
    }
}

/// OCC's options (`protocol.options`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// Lock and read the write set during execution, when the read/write set is known up
    /// front, instead of at validation (FaSST's variant, DrTM+H Sec. 6.3).
    pub lock_in_execution: bool,
}

/// Skips read-set validation: a transaction commits on values another has since overwritten.
pub const SKIP_VALIDATION: Bug =
    Bug { name: "SkipValidation", about: "skips read-set validation: commits on reads another transaction overwrote" };

/// Prior systems' choice of primitives and optimisations per OCC phase (DrTM+H Sec. 6.3,
/// Table 4; docs/protocols.md).
pub const PRESETS: [Preset; 4] = [
    Preset {
        name: "Farm",
        about: "FaRM: one-sided READ to execute and validate, one-sided WRITE to log; lock and commit by RPC",
        resolve: |_| (Hybrid(Stage::Read.bit() | Stage::Log.bit() | Stage::Validate.bit()), preset_base(), no_options()),
    },
    Preset {
        name: "DrtmR",
        about: "DrTM+R: every phase one-sided (RDMA CAS locks, READ, WRITE)",
        resolve: |_| (Hybrid::full(&STAGES), preset_base(), no_options()),
    },
    Preset {
        name: "Fasst",
        about: "FaSST: every phase by doorbell-batched RPC over UD, the write set locked during execution",
        resolve: |_| {
            let lock_early = serde_json::to_value(Options { lock_in_execution: true }).expect("options serialise");
            (Hybrid::RPC, Rdma { doorbell: true, ..preset_base() }, lock_early)
        },
    },
    Preset {
        name: "Drtmh",
        about: "DrTM+H Sec. 6.1: cached one-sided READ and LOG; one-sided lock and commit where NIC atomics are safe; passive ACK, speculative execution",
        resolve: |atomics_safe| {
            let code = if atomics_safe {
                Hybrid::full(&STAGES)
            } else {
                Hybrid(Stage::Read.bit() | Stage::Log.bit() | Stage::Validate.bit())
            };
            (code, Rdma { doorbell: true, passive_ack: true, speculative: true, ..preset_base() }, no_options())
        },
    },
];

/// What the presets start from: outstanding requests only.
fn preset_base() -> Rdma {
    Rdma { outstanding: true, doorbell: false, passive_ack: false, speculative: false, ..Rdma::default() }
}

fn no_options() -> OptionValues {
    OptionValues::Null
}

/// The stages OCC has: READ, LOCK, VALIDATE, LOG, COMMIT, RELEASE.
pub const STAGES: [Stage; 6] = [Stage::Lock, Stage::Read, Stage::Log, Stage::Release, Stage::Commit, Stage::Validate];

async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, &mut recs).await;
    settle(ctx, n, r, &recs, id, id).await
}

async fn run(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64, recs: &mut [Rec]) -> Result<Attempt, TxnError> {
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    let early = n.participant::<Options>().lock_in_execution && !spec.read_only();
    // FaSST: lock + read the write set now (records() puts reads first).
    if early && !ops::lock_and_read(ctx, n, recs, |r| r.write, id).await? {
        ops::release(ctx, n, recs, |r| r.write, id).await?;
        return Ok(Attempt::Conflict(cause::LOCK_BUSY));
    }
    // E: fetch. A record caught locked (by another) is being written: abort early.
    let fetched = if early { spec.reads.len() } else { recs.len() };
    ops::fetch(ctx, n, &mut recs[..fetched]).await?;
    if recs[..fetched].iter().any(|r| r.lock_word() != 0 && r.lock_word() != id) {
        if early {
            ops::release(ctx, n, recs, |r| r.write, id).await?;
        }
        return Ok(Attempt::Conflict(cause::READ_LOCKED));
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        if early {
            ops::release(ctx, n, recs, |r| r.write, id).await?;
        }
        return Ok(Attempt::UserAbort);
    };
    // V: lock the write set, re-reading only lock and version (DrTM+H Sec. 5.2), check the
    // versions are those E read, then validate the read set.
    let seen: Vec<(u16, u64)> = recs.iter().map(|r| r.version()).collect();
    if !spec.read_only() && !early {
        let locked = ops::lock_and_check(ctx, n, recs, |r| r.write, id).await?;
        let unchanged = recs.iter().zip(&seen).filter(|(r, _)| r.write && r.locked).all(|(r, v)| r.version() == *v);
        if !locked || !unchanged {
            ops::release(ctx, n, recs, |r| r.write, id).await?;
            return Ok(Attempt::Conflict(if locked { cause::CHANGED } else { cause::LOCK_BUSY }));
        }
    }
    if n.bug != Some(SKIP_VALIDATION) && !ops::validate(ctx, n, recs, |r| !r.write, id).await? {
        ops::release(ctx, n, recs, |r| r.write, id).await?;
        return Ok(Attempt::Conflict(cause::VALIDATION));
    }
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
