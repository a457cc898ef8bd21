//! LocalTX and COMMIT's confirmation (Fig. 9a, 10b): the body of the HTM region. Local
//! records are read and written inside it, checking their state words; the transaction's
//! logic runs on them and on the remote records START fetched; the leases are confirmed
//! valid just before XEND. A refusal is an XABORT with its code.

use txbed_transport::{ClockReading, Ctx, Tx};
use txbed_txn::attempt::execute;
use txbed_txn::msg::CommitReq;
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_txn::store::{version_word, LOCK, VERSION};
use txbed_txn::wire::u64_at;
use txbed_workloads::TxnSpec;

use super::state::{self, Refusal};
use super::{COMMIT_WITHOUT_LEASE_CONFIRMATION, LOCAL_WRITE_IGNORES_LEASE};

/// XABORT codes.
pub const WRITE_LOCKED: u8 = 1;
pub const READ_LEASED: u8 = 2;
pub const LEASE_INVALID: u8 = 3;
pub const USER_ABORT: u8 = 4;
pub const MEMORY: u8 = 5;
pub const LOG_FULL: u8 = 6;
pub const VIEW_CHANGED: u8 = 7;

fn code(x: Refusal) -> u8 {
    match x {
        Refusal::WriteLocked => WRITE_LOCKED,
        Refusal::ReadLeased => READ_LEASED,
    }
}

/// The abort cause reports count for an explicit abort's code.
pub fn cause(code: u8) -> &'static str {
    match code {
        WRITE_LOCKED => "local: write locked",
        READ_LEASED => "local: read leased",
        LEASE_INVALID => "lease expired",
        LOG_FULL => "log slot too small",
        VIEW_CHANGED => "membership changed",
        _ => "htm: explicit abort",
    }
}

/// The region's body. `local` selects the records it accesses itself; `lease_end` is the
/// earliest end of the transaction's remote leases (`None`: it holds none); `start` is the
/// clock read at START, reused for the local writes' lease checks (Sec. 7.1: a stale time is
/// conservative there); `epoch0` is the membership view the attempt began in. Returns the new values of the write set and the external delta, or
/// `None` after an XABORT.
#[allow(clippy::too_many_arguments)]
pub fn body(
    ctx: &Ctx,
    n: &NodeState,
    spec: &TxnSpec,
    recs: &mut [Rec],
    id: u64,
    local: &dyn Fn(&Rec) -> bool,
    lease_end: Option<u64>,
    start: ClockReading,
    epoch0: u64,
    tx: &mut Tx<'_>,
) -> Option<(Vec<Vec<u8>>, i64)> {
    let now0 = start.now_ns.max(0) as u64;
    let delta0 = super::start::delta(n, start.bound_ns);
    let mut clear = Vec::new();
    for (i, r) in recs.iter_mut().enumerate().filter(|(_, r)| local(r)) {
        // The tuple, found by its offset, misses the caches once (as on the local path).
        ctx.memory_misses(1);
        let mut tuple = vec![0u8; ops::tuple_bytes(n, r.table) as usize];
        if tx.read(n.base() + r.offset, &mut tuple).is_err() {
            tx.abort(MEMORY);
            return None;
        }
        let s = u64_at(&tuple, LOCK as usize);
        let checked = if r.write {
            match state::local_write(s, now0, delta0) {
                Err(Refusal::ReadLeased) if n.bug == Some(LOCAL_WRITE_IGNORES_LEASE) => Ok(false),
                Err(x) => Err(x),
                Ok(to) => Ok(to.is_some()),
            }
        } else {
            state::local_read(s).map(|()| false)
        };
        match checked {
            Err(x) => {
                tx.abort(code(x));
                return None;
            }
            Ok(true) => clear.push(i),
            Ok(false) => {}
        }
        r.tuple = tuple;
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        tx.abort(USER_ABORT);
        return None;
    };
    // COMMIT: confirm all leases are still valid (Fig. 9a lines 1-3), with the time now.
    if let Some(end) = lease_end {
        let c = ctx.clock();
        let d = super::start::delta(n, c.bound_ns);
        if n.bug != Some(COMMIT_WITHOUT_LEASE_CONFIRMATION) && !state::valid(end, c.now_ns.max(0) as u64, d) {
            tx.abort(LEASE_INVALID);
            return None;
        }
    }
    // XEND is irrevocable: a transaction whose view changed (a machine it may hold a lock on
    // crashed, Sec. 5.6) aborts here instead; a change after this check interrupts the region.
    if !ops::commit_allowed(ctx, n, epoch0, recs) {
        tx.abort(VIEW_CHANGED);
        return None;
    }
    // The write-ahead log of every update, local and remote, in NVRAM at XEND (Sec. 5.6).
    if super::options(n).logging && !super::log::write_ahead_in_region(ctx, n, recs, &new_values, id, tx) {
        tx.abort(LOG_FULL);
        return None;
    }
    for ((i, r), v) in recs.iter().enumerate().filter(|(_, r)| r.write).zip(&new_values) {
        if !local(r) {
            continue;
        }
        let at = n.base() + r.offset;
        if clear.contains(&i) {
            // The expired lease is cleared (Fig. 10b line 6): the state joins the write set.
            tx.write(at + LOCK, &state::INIT.to_le_bytes());
        }
        let (inc, ver) = r.version();
        let body = CommitReq { offset: r.offset, version: version_word(inc, ver + 1), writer: id, record: v }.body();
        tx.write(at + VERSION, &body);
    }
    Some((new_values, delta))
}
