//! Cooperative logging (Sec. 5.6), the writing half: each coroutine has a log slot in the
//! node's NVRAM-backed area. Before START locks anything remote, the **lock-ahead log** names
//! the remote write set (so a recovered machine knows what to unlock); inside the HTM region,
//! just before XEND, the **write-ahead log** holds every update, local and remote (so it is in
//! NVRAM exactly when the region commits: HTM's all-or-nothing covers it, and it counts in the
//! region's write set); the fallback handler writes it before updating outside HTM. The
//! reading half, recovery (Fig. 11), is not built yet: DrTM refuses crashes until it is.

use txbed_transport::{Ctx, Tx};
use txbed_txn::error::TxnError;
use txbed_txn::node::NodeState;
use txbed_txn::ops::Rec;
use txbed_txn::wire::Put;

/// Bytes of one coroutine's slot: the lock-ahead part, then the write-ahead part.
pub const SLOT: u64 = 64 << 10;
const LOCK_AHEAD: u64 = 4 << 10;

/// Record kinds, the first word of each part.
const LOCK_AHEAD_RECORD: u64 = 1;
const WRITE_AHEAD_RECORD: u64 = 2;

/// The protocol area's size: a slot per (worker, coroutine).
pub fn area_bytes(workers: u16, coroutines: u32) -> u64 {
    workers as u64 * coroutines as u64 * SLOT
}

/// This coroutine's slot's address.
fn slot(ctx: &Ctx, n: &NodeState) -> u64 {
    let l = &n.catalog.layout;
    let coroutines = l.area_bytes / (l.log_workers as u64 * SLOT).max(1);
    let index = ctx.me().worker as u64 * coroutines + ctx.coroutine() as u64;
    n.base() + l.area_at + index * SLOT
}

/// Counts one record of `bytes` in the node's logging cost.
fn count(n: &NodeState, bytes: usize) {
    let mut s = n.stats.borrow_mut();
    s.nvram_log_records += 1;
    s.nvram_log_bytes += bytes as u64;
}

/// The lock-ahead log of transaction `id`: `kind | id | count | (home u16, table u16, pad,
/// key u64) per remote write`. Nothing when it writes nothing remote.
pub fn lock_ahead(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    id: u64,
    remote: &dyn Fn(&Rec) -> bool,
) -> Result<(), TxnError> {
    let writes: Vec<&Rec> = recs.iter().filter(|r| r.write && remote(r)).collect();
    if writes.is_empty() {
        return Ok(());
    }
    let mut b = Vec::with_capacity(24 + 16 * writes.len());
    b.put_u64(LOCK_AHEAD_RECORD);
    b.put_u64(id);
    b.put_u64(writes.len() as u64);
    for r in writes {
        b.put_u16(r.home);
        b.put_u16(r.table);
        b.put_u32(0);
        b.put_u64(r.key);
    }
    if b.len() as u64 > LOCK_AHEAD {
        return Err(TxnError::Unsupported("DrTM's lock-ahead log slot (4 KiB) is too small for this transaction"));
    }
    ctx.write_local(slot(ctx, n), &b)?;
    count(n, b.len());
    Ok(())
}

/// The write-ahead record of transaction `id` (`ops::log_record`'s format: every written
/// record's key, next version and value), framed `kind | length`.
fn write_ahead_record(recs: &[Rec], new_values: &[Vec<u8>], id: u64) -> Option<Vec<u8>> {
    let body = txbed_txn::ops::log_record(recs, new_values, id);
    let mut b = Vec::with_capacity(16 + body.len());
    b.put_u64(WRITE_AHEAD_RECORD);
    b.put_u64(body.len() as u64);
    b.put_bytes(&body);
    (b.len() as u64 <= SLOT - LOCK_AHEAD).then_some(b)
}

/// The write-ahead log inside the region, just before XEND; `false` (the caller XABORTs) if
/// it does not fit the slot.
pub fn write_ahead_in_region(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    new_values: &[Vec<u8>],
    id: u64,
    tx: &mut Tx<'_>,
) -> bool {
    let Some(b) = write_ahead_record(recs, new_values, id) else { return false };
    tx.write(slot(ctx, n) + LOCK_AHEAD, &b);
    count(n, b.len());
    true
}

/// The write-ahead log of the fallback handler, before it updates anything.
pub fn write_ahead(ctx: &Ctx, n: &NodeState, recs: &[Rec], new_values: &[Vec<u8>], id: u64) -> Result<(), TxnError> {
    let b = write_ahead_record(recs, new_values, id)
        .ok_or(TxnError::Unsupported("DrTM's write-ahead log slot (60 KiB) is too small for this transaction"))?;
    ctx.write_local(slot(ctx, n) + LOCK_AHEAD, &b)?;
    count(n, b.len());
    Ok(())
}
