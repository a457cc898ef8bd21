//! START (Fig. 9a) and START_RO (Fig. 10c): REMOTE_WRITE and REMOTE_READ (Fig. 10a) of the
//! records a transaction locks before its HTM region. Each try is a CAS of the state word
//! followed by a READ of the tuple on the same QP (the READ's data is used only if the CAS
//! won; per-QP FIFO makes it the tuple as of the lock); a CAS that found an expired lease
//! is tried again expecting that state. By RPC the home does the same CAS and read with its
//! CPU (`cas_read_handler`) and the caller decides alike.

use std::rc::Rc;

use txbed_transport::{Handled, HandlerCtx, HandlerFn, LocalBuf, Op};
use txbed_txn::error::TxnError;
use txbed_txn::node::{NodeState, MALFORMED};
use txbed_txn::ops::{self, Rec, Tally};
use txbed_txn::protocol::handler_id;
use txbed_txn::stage::Stage;
use txbed_txn::store::{self, LOCK};
use txbed_txn::wire::{Put, Reader, WireError};

use super::state::{self, Refusal, RemoteRead, RemoteWrite};
use super::{options, SHARES_EXPIRED_LEASE};

/// The RPC form of one CAS + READ: `table u16 | key u64 | expected u64 | swap u64` ->
/// `OK | found u64 | offset u64 | tuple`, or `MISSING`.
pub const H_CAS_READ: u16 = handler_id(0);
const OK: u8 = 0;
const MISSING: u8 = 2;

/// The state word DELTA is applied to: the reading's own error bound, or the option.
pub fn delta(n: &NodeState, bound_ns: u64) -> u64 {
    options(n).delta_ns.unwrap_or(bound_ns)
}

/// What [`acquire_all`] got.
pub struct Acquired {
    /// The earliest end of the leases taken or shared (the wanted end if none).
    pub end: u64,
    /// The first refusal met, if any.
    pub refused: Option<Refusal>,
}

/// Locks the records `which` selects, in their order: REMOTE_WRITE for writes, REMOTE_READ
/// with a lease until `want_end` for reads. Returns the earliest end of the leases taken or
/// shared (`want_end` if none), or the first refusal; either way every record locked is
/// marked `locked` (its write lock to be released on an abort) and every record locked or
/// leased holds its tuple.
pub async fn acquire(
    ctx: &txbed_transport::Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    which: impl Fn(&Rec) -> bool,
    me: u64,
    want_end: u64,
) -> Result<Result<u64, Refusal>, TxnError> {
    let a = acquire_all(ctx, n, recs, which, me, want_end).await?;
    Ok(a.refused.map_or(Ok(a.end), Err))
}

/// [`acquire`], saying both the leases' end and the first refusal (after which no record is
/// tried again: those found with an expired lease stay unlocked).
pub async fn acquire_all(
    ctx: &txbed_transport::Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    which: impl Fn(&Rec) -> bool,
    me: u64,
    want_end: u64,
) -> Result<Acquired, TxnError> {
    let t0 = ctx.now();
    let mut t = Tally::default();
    let onesided = n.hybrid.onesided(Stage::Lock);
    if onesided {
        ops::locate_all(ctx, n, recs, &which).await?;
    }
    let mut end = want_end;
    let mut refused = None;
    let mut todo: Vec<(usize, u64)> =
        recs.iter().enumerate().filter(|(_, r)| which(r)).map(|(i, _)| (i, state::INIT)).collect();
    while !todo.is_empty() {
        let found = if onesided {
            cas_read_onesided(ctx, n, recs, &todo, me, want_end, &mut t).await?
        } else {
            cas_read_rpc(ctx, n, recs, &todo, me, want_end, &mut t).await?
        };
        let c = ctx.clock();
        let (now, delta) = (c.now_ns.max(0) as u64, delta(n, c.bound_ns));
        let mut next = Vec::new();
        for ((i, expected), (got, tuple)) in todo.into_iter().zip(found) {
            let r = &mut recs[i];
            if r.write {
                match state::remote_write(expected, got, now, delta) {
                    RemoteWrite::Locked => {
                        r.locked = true;
                        r.tuple = tuple;
                    }
                    RemoteWrite::Retry(s) => next.push((i, s)),
                    RemoteWrite::Abort(x) => {
                        refused.get_or_insert(x);
                    }
                }
            } else {
                let expired_lease = !state::write_locked(got) && state::expired(state::end_time(got), now, delta);
                let decision = if n.bug == Some(SHARES_EXPIRED_LEASE) && got != expected && expired_lease {
                    RemoteRead::Leased(want_end)
                } else {
                    state::remote_read(expected, got, now, delta, want_end)
                };
                match decision {
                    RemoteRead::Leased(e) => {
                        end = state::earlier(end, e);
                        r.tuple = tuple;
                    }
                    RemoteRead::Retry(s) => next.push((i, s)),
                    RemoteRead::Abort(x) => {
                        refused.get_or_insert(x);
                    }
                }
            }
        }
        todo = if refused.is_some() { Vec::new() } else { next };
    }
    ops::account_tally(ctx, n, Stage::Lock, t0, &t);
    Ok(Acquired { end, refused })
}

/// The state word a try swaps in: the owner's lock for a write, the lease for a read.
fn swap_for(r: &Rec, me: u64, want_end: u64) -> u64 {
    if r.write {
        me
    } else {
        state::leased(want_end)
    }
}

/// One round of one-sided tries: CAS (unsignaled) + READ per record, all posted, then one
/// wait. Returns (state found, tuple) per try.
async fn cas_read_onesided(
    ctx: &txbed_transport::Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    todo: &[(usize, u64)],
    me: u64,
    want_end: u64,
    t: &mut Tally,
) -> Result<Vec<(u64, Vec<u8>)>, TxnError> {
    let scratch = ctx.scratch();
    let need: u64 = todo.iter().map(|&(i, _)| 8 + ops::tuple_bytes(n, recs[i].table) as u64).sum();
    txbed_txn::post::check_buffers(ctx, need)?;
    let mut at = scratch.addr;
    let mut slots = Vec::with_capacity(todo.len());
    for &(i, expected) in todo {
        let r = &mut recs[i];
        let len = ops::tuple_bytes(n, r.table);
        // A sentinel, so a result that never arrived cannot read as the expected state.
        ctx.store_local(at, u64::MAX)?;
        let cas = Op::Cas {
            local: LocalBuf { lkey: scratch.lkey, addr: at, len: 8 },
            remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
            compare: expected,
            swap: swap_for(r, me, want_end),
        };
        let read = Op::Read {
            local: LocalBuf { lkey: scratch.lkey, addr: at + 8, len },
            remote: n.catalog.remote(r.home, r.offset, len),
        };
        r.asked = true;
        let path = ops::issue(ctx, n, r, vec![(cas, false), (read, true)]).await?;
        t.add(path, 8 + len as u64);
        slots.push((at, len));
        at += 8 + len as u64;
    }
    ctx.wait().await?;
    let mut out = Vec::with_capacity(slots.len());
    for (at, len) in slots {
        let mut tuple = vec![0; len as usize];
        ctx.read_local(at + 8, &mut tuple)?;
        out.push((ctx.load_local(at)?, tuple));
    }
    Ok(out)
}

/// One round of tries by RPC (a direct call for this node's records).
async fn cas_read_rpc(
    ctx: &txbed_transport::Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    todo: &[(usize, u64)],
    me: u64,
    want_end: u64,
    t: &mut Tally,
) -> Result<Vec<(u64, Vec<u8>)>, TxnError> {
    let mut calls = Vec::with_capacity(todo.len());
    for &(i, expected) in todo {
        let r = &mut recs[i];
        let mut req = Vec::with_capacity(26);
        req.put_u16(r.table);
        req.put_u64(r.key);
        req.put_u64(expected);
        req.put_u64(swap_for(r, me, want_end));
        r.asked = true;
        calls.push(ops::call(ctx, n, r.home, H_CAS_READ, &req).await?);
        t.add(ops::rpc_path(n, r.home), 8 + ops::tuple_bytes(n, r.table) as u64);
    }
    ctx.wait().await?;
    let mut out = Vec::with_capacity(calls.len());
    for (&(i, _), call) in todo.iter().zip(calls) {
        let reply = ops::reply(ctx, call, "DRTM_CAS_READ")?;
        let r = &mut recs[i];
        let mut rd = Reader::new(&reply);
        match rd.u8()? {
            OK => {
                let found = rd.u64()?;
                r.offset = rd.u64()?;
                let tuple = ops::tuple_for(n, r, rd.rest().to_vec())?;
                out.push((found, tuple));
            }
            MISSING => return Err(TxnError::NotFound { node: r.home, table: r.table, key: r.key }),
            _ => return Err(WireError::Invalid("a DRTM_CAS_READ reply's status").into()),
        }
    }
    Ok(out)
}

/// The home's side of `cas_read_rpc`: its CPU CASes the state word and reads the tuple
/// (both seen by its HTM regions, as any CPU access).
pub fn cas_read_handler(n: &Rc<NodeState>) -> Rc<HandlerFn> {
    let n = n.clone();
    Rc::new(move |h: &mut HandlerCtx<'_>, req: &[u8]| {
        // Finding the key: a bucket and the tuple (`participant::BY_KEY`).
        h.memory_misses(2);
        let mut rd = Reader::new(req);
        let parsed = (|| Ok::<_, WireError>((rd.u16()?, rd.u64()?, rd.u64()?, rd.u64()?)))();
        let Ok((table, key, expected, swap)) = parsed else {
            h.reply.push(MALFORMED);
            return Handled::Reply;
        };
        let Some(place) = n.catalog.layout.table(table) else {
            h.reply.push(MISSING);
            return Handled::Reply;
        };
        let Some(off) = store::find_local(h.mem, n.base(), place, key) else {
            h.reply.push(MISSING);
            return Handled::Reply;
        };
        let found = h.mem.cas_u64(n.base() + off + LOCK, expected, swap).unwrap_or(u64::MAX);
        let mut tuple = vec![0u8; place.tuple_bytes as usize];
        let _ = h.mem.read(n.base() + off, &mut tuple);
        h.reply.push(OK);
        h.reply.put_u64(found);
        h.reply.put_u64(off);
        h.reply.put_bytes(&tuple);
        Handled::Reply
    })
}
