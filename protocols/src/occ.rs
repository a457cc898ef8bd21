//! OCC as in DrTM+H (Sec. 5-6): Execution, Validation, Logging, Commit.
//!
//! - E (READ stage): fetch every record without locking; one-sided, the location cache turns
//!   a lookup into one READ (a miss refills the cache; by RPC the reply carries the bucket).
//! - V: LOCK the write set (CAS + READ doorbelled on one QP, or RPC lock + read) and check
//!   each locked record still has the version E saw; VALIDATE the read set (READ of lock and
//!   version, or RPC): unchanged and not locked by another transaction.
//! - L: the new values to every backup; C: write back and unlock (COMMIT), and on any abort
//!   unlock what was locked (RELEASE).
//! - Read-only transactions run R + V only (DrTM+H Sec. 5.5).
//! - With `lock_in_execution` (FaSST), E locks and reads the write set right away and fetches
//!   only the read set; V then validates the read set alone.
//!
//! A multi-line tuple READ in E can be torn by a concurrent write-back; V then sees the lock
//! or the new version and aborts, so a torn read never commits.

use txbed_transport::Ctx;
use txbed_workloads::TxnSpec;

use crate::node::{Bug, NodeState};
use crate::nowait::{committed, execute, new_history, Attempt};
use crate::ops;
use crate::stage::Stage;

/// The stages OCC has: READ, LOCK, VALIDATE, LOG, COMMIT, RELEASE.
pub const STAGES: [Stage; 6] = [Stage::Lock, Stage::Read, Stage::Log, Stage::Release, Stage::Commit, Stage::Validate];

pub async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let start_ns = ctx.now();
    let mut recs = ops::records(n, spec);
    let early = n.options.lock_in_execution && !spec.read_only();
    if early {
        // FaSST: lock + read the write set now (records() puts reads first).
        match ops::lock_and_read(ctx, n, &mut recs, |r| r.write, id).await {
            Ok(true) => {}
            Ok(false) => {
                ops::release(ctx, n, &recs, |r| r.write, id).await;
                return Attempt::Conflict;
            }
            Err(e) => return Attempt::Failed(e),
        }
    }
    // E: fetch. A record caught locked (by another) is being written: abort early.
    let fetched = if early { spec.reads.len() } else { recs.len() };
    if let Err(e) = ops::fetch(ctx, n, &mut recs[..fetched]).await {
        return Attempt::Failed(e);
    }
    if recs[..fetched].iter().any(|r| r.lock_word() != 0 && r.lock_word() != id) {
        if early {
            ops::release(ctx, n, &recs, |r| r.write, id).await;
        }
        return Attempt::Conflict;
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, &recs) else {
        if early {
            ops::release(ctx, n, &recs, |r| r.write, id).await;
        }
        return Attempt::UserAbort;
    };
    // V: lock the write set, then check it and validate the read set.
    let seen: Vec<(u16, u64)> = recs.iter().map(|r| r.version()).collect();
    if !spec.read_only() && !early {
        let locked = match ops::lock_and_read(ctx, n, &mut recs, |r| r.write, id).await {
            Ok(all) => all,
            Err(e) => return Attempt::Failed(e),
        };
        let unchanged = recs.iter().zip(&seen).filter(|(r, _)| r.write && r.locked).all(|(r, v)| r.version() == *v);
        if !locked || !unchanged {
            ops::release(ctx, n, &recs, |r| r.write, id).await;
            return Attempt::Conflict;
        }
    }
    if n.bug != Some(Bug::SkipValidation) {
        match ops::validate(ctx, n, &recs, |r| !r.write, id).await {
            Ok(true) => {}
            Ok(false) => {
                ops::release(ctx, n, &recs, |r| r.write, id).await;
                return Attempt::Conflict;
            }
            Err(e) => return Attempt::Failed(e),
        }
    }
    if let Err(e) = ops::log(ctx, n, &recs, &new_values, id).await {
        return Attempt::Failed(e);
    }
    let mut h = new_history(ctx, n, spec, id, start_ns);
    if let Err(e) = ops::write_back(ctx, n, &recs, &new_values, id, &mut h, false).await {
        return Attempt::Failed(e);
    }
    committed(ctx, n, h, delta);
    Attempt::Committed
}
