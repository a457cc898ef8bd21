//! RedT with messages inside a data center (the kernel-stack variant the paper sets RDMA
//! against, option `intra_dc: "messages"`): the executor reaches the replicas of its data
//! center by messages to their nodes' CPUs instead of one-sided verbs, one request per node
//! carrying all of that node's copies (as a stream-based implementation would batch them). The
//! data node's handler does what the verbs did, under the same latch (the replay still latches
//! items with the CPU), and every message to or from another node costs the stack's CPU on
//! both sides (`message_stack_cpu_ns`, as the WAN's kernel-stack transport charges it). The
//! algorithm is unchanged: No-Wait locks with owner lists, redo entries in the circular
//! buffers, the Thomas write rule.

use std::collections::BTreeMap;

use txbed_transport::{Ctx, Handled, HandlerCtx};
use txbed_txn::node::NodeState;
use txbed_txn::quorum;
use txbed_txn::store::{LOCK, VERSION};
use txbed_txn::wire::{Put, Reader, WireError};
use txbed_txn::TxnError;

use super::copy::{install_into, Copy, Installs, LATCH_PAUSE_NS, LATCH_ROUNDS, LOG_FULL_BOUND_NS};
use super::item::{ext_image, Item, LockType};
use super::logbuf::{self, Change, Entry};
use super::{part, IGNORE_THOMAS_RULE};

/// A copy's answer.
const DONE: u8 = 0;
const CONFLICT: u8 = 1;
/// Its latch is held (by the replay): try again.
const BUSY: u8 = 2;
/// The log buffer has no free slot.
const FULL: u8 = 3;

/// Charges the stack for a message to or from `peer` (nothing on the local path).
fn charge(ctx: &Ctx, n: &NodeState, peer: u16, messages: u64) {
    if peer != n.me {
        ctx.compute(part(n).options.message_stack_cpu_ns * messages);
    }
}

fn charge_handler(n: &NodeState, h: &mut HandlerCtx<'_>) {
    if h.src.node.0 != n.me {
        // The request received and the reply sent.
        h.compute(2 * part(n).options.message_stack_cpu_ns);
    }
}

/// Sends each node its request and waits: the replies in node order, the stack's CPU charged.
async fn exchange(
    ctx: &Ctx,
    n: &NodeState,
    handler: u16,
    reqs: &BTreeMap<u16, Vec<u8>>,
) -> Result<Vec<Vec<u8>>, TxnError> {
    for &node in reqs.keys() {
        // The request sent and the reply received.
        charge(ctx, n, node, 2);
    }
    quorum::to_nodes(ctx, n, handler, "REDT_MSG", reqs).await
}

/// The copies `which` of `copies`, grouped by node: node -> indexes.
fn by_node(copies: &[Copy], which: &[usize]) -> BTreeMap<u16, Vec<usize>> {
    let mut out: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for &k in which {
        out.entry(copies[k].node).or_default().push(k);
    }
    out
}

/// AcqLock over every copy by messages (the one-sided `executor::lock_all`'s contract).
pub async fn lock_all(
    ctx: &Ctx,
    n: &NodeState,
    tid: u64,
    copies: &mut [Copy],
) -> Result<Result<(), &'static str>, TxnError> {
    let mut pending: Vec<usize> = (0..copies.len()).collect();
    for round in 0.. {
        let groups = by_node(copies, &pending);
        let reqs: BTreeMap<u16, Vec<u8>> = groups
            .iter()
            .map(|(&node, ks)| {
                let mut b = Vec::new();
                b.put_u64(tid);
                b.put_u16(ks.len() as u16);
                for &k in ks {
                    b.put_u16(copies[k].table);
                    b.put_u64(copies[k].key);
                    b.put_u8(copies[k].write as u8);
                }
                (node, b)
            })
            .collect();
        let replies = exchange(ctx, n, super::H_MSG_LOCK, &reqs).await?;
        pending.clear();
        let mut conflict = false;
        for (ks, rep) in groups.values().zip(&replies) {
            let mut r = Reader::new(rep);
            for &k in ks {
                match r.u8()? {
                    DONE => {
                        let len = r.u32()? as usize;
                        copies[k].tuple = r.bytes(len)?.to_vec();
                        copies[k].locked = true;
                    }
                    BUSY => pending.push(k),
                    _ => conflict = true,
                }
            }
        }
        if conflict {
            return Ok(Err(super::cause::LOCK_CONFLICT));
        }
        if pending.is_empty() {
            return Ok(Ok(()));
        }
        if round >= LATCH_ROUNDS {
            return Ok(Err(super::cause::LATCH_BUSY));
        }
        ctx.sleep(LATCH_PAUSE_NS).await;
    }
    unreachable!("the loop returns")
}

/// LOCK at a data node: for each copy, under its latch, AcqLock's test and update; the tuple
/// (with the lock taken) back.
pub fn lock_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    charge_handler(n, h);
    let Ok((tid, asks)) = decode_asks(req) else { return Handled::Reply };
    h.memory_misses(2 * asks.len() as u64);
    for (table, key, write) in asks {
        let Some((place, off)) = txbed_txn::participant::find(n, h.mem, table, key) else {
            h.reply.push(CONFLICT);
            continue;
        };
        let at = n.base() + off;
        if h.mem.load_u64(at + LOCK).unwrap_or(1) != 0 {
            h.reply.push(BUSY);
            continue;
        }
        let mut tuple = vec![0u8; place.tuple_bytes as usize];
        let _ = h.mem.read(at, &mut tuple);
        let kind = if write { LockType::Ex } else { LockType::Sh };
        match Item::read(&tuple, place.ext_at as usize).acquire(kind, tid) {
            Some(next) => {
                next.write(&mut tuple, place.ext_at as usize);
                let _ = h.mem.write(at + place.ext_at, &ext_image(&next));
                h.reply.push(DONE);
                h.reply.put_u32(tuple.len() as u32);
                h.reply.put_bytes(&tuple);
            }
            None => h.reply.push(CONFLICT),
        }
    }
    Handled::Reply
}

fn decode_asks(req: &[u8]) -> Result<(u64, Vec<(u16, u64, bool)>), WireError> {
    let mut r = Reader::new(req);
    let tid = r.u64()?;
    let count = r.u16()? as usize;
    let mut out = Vec::with_capacity(count.min(r.remaining() / 11));
    for _ in 0..count {
        out.push((r.u16()?, r.u64()?, r.u8()? != 0));
    }
    r.finish()?;
    Ok((tid, out))
}

/// RlsLock over the locked copies by messages (`executor::release_all`'s contract).
pub async fn release_all(
    ctx: &Ctx,
    n: &NodeState,
    tid: u64,
    copies: &[Copy],
    commit: Option<(u64, &Installs)>,
) -> Result<(), TxnError> {
    let mut pending: Vec<usize> = (0..copies.len()).filter(|&k| copies[k].locked).collect();
    let began = ctx.now();
    while !pending.is_empty() {
        let groups = by_node(copies, &pending);
        let reqs: BTreeMap<u16, Vec<u8>> = groups
            .iter()
            .map(|(&node, ks)| {
                let mut b = Vec::new();
                b.put_u64(tid);
                b.put_u16(ks.len() as u16);
                for &k in ks {
                    let c = &copies[k];
                    b.put_u16(c.table);
                    b.put_u64(c.key);
                    match commit.and_then(|(cts, w)| Some((cts, w.get(&c.op)?))) {
                        Some((cts, (version, value))) => {
                            b.put_u8(1);
                            b.put_u64(cts);
                            b.put_u64(*version);
                            b.put_u32(value.len() as u32);
                            b.put_bytes(value);
                        }
                        None => b.put_u8(0),
                    }
                }
                (node, b)
            })
            .collect();
        let replies = exchange(ctx, n, super::H_MSG_RELEASE, &reqs).await?;
        pending.clear();
        for (ks, rep) in groups.values().zip(&replies) {
            for (&k, &status) in ks.iter().zip(rep.iter()) {
                if status == BUSY {
                    pending.push(k);
                }
            }
        }
        if !pending.is_empty() {
            if ctx.now() - began > LOG_FULL_BOUND_NS {
                return Err(TxnError::Unsupported("a RedT latch stayed held for 100 ms"));
            }
            ctx.sleep(LATCH_PAUSE_NS).await;
        }
    }
    Ok(())
}

/// RELEASE at a data node: for each copy, under its latch, the owner entry goes, and a
/// commit's write is installed if the item's wts is below the commit timestamp.
pub fn release_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    charge_handler(n, h);
    let mut r = Reader::new(req);
    let Ok(tid) = r.u64() else { return Handled::Reply };
    let Ok(count) = r.u16() else { return Handled::Reply };
    h.memory_misses(2 * count as u64);
    for _ in 0..count {
        let Ok((table, key, install)) = decode_release(&mut r) else { return Handled::Reply };
        let Some((place, off)) = txbed_txn::participant::find(n, h.mem, table, key) else {
            h.reply.push(DONE);
            continue;
        };
        let at = n.base() + off;
        if h.mem.load_u64(at + LOCK).unwrap_or(1) != 0 {
            h.reply.push(BUSY);
            continue;
        }
        let ext_at = place.ext_at as usize;
        let mut tuple = vec![0u8; place.tuple_bytes as usize];
        let _ = h.mem.read(at, &mut tuple);
        let item = Item::read(&tuple, ext_at);
        let mut next = item.release(tid);
        match install {
            Some((cts, version, value)) if item.wts < cts || n.bug == Some(IGNORE_THOMAS_RULE) => {
                next.wts = cts;
                install_into(&mut tuple, ext_at, version, tid, &value);
                next.write(&mut tuple, ext_at);
                let _ = h.mem.write(at + VERSION, &tuple[VERSION as usize..]);
                h.copy(tuple.len());
            }
            _ => {
                let _ = h.mem.write(at + place.ext_at, &ext_image(&next));
            }
        }
        h.reply.push(DONE);
    }
    Handled::Reply
}

type Install = Option<(u64, u64, Vec<u8>)>;

fn decode_release(r: &mut Reader<'_>) -> Result<(u16, u64, Install), WireError> {
    let (table, key) = (r.u16()?, r.u64()?);
    let install = match r.u8()? {
        0 => None,
        _ => {
            let (cts, version, len) = (r.u64()?, r.u64()?, r.u32()? as usize);
            Some((cts, version, r.bytes(len)?.to_vec()))
        }
    };
    Ok((table, key, install))
}

/// WriteLog by messages: each node of a written copy appends the entries to its own buffer
/// (its CPU takes the slot from the tail, and refuses when the head would be lapped: the
/// writer waits for the replay, as the lazy head check does).
pub async fn write_log(
    ctx: &Ctx,
    n: &NodeState,
    tid: u64,
    cts: u64,
    status: u64,
    changes: BTreeMap<u16, Vec<Change>>,
) -> Result<Vec<(u16, u64, Entry)>, TxnError> {
    let mut out = Vec::new();
    let began = ctx.now();
    for (node, chs) in changes {
        for part in logbuf::split(chs)? {
            let entry = Entry { tid, cts, status, changes: part };
            let bytes = entry.encode();
            loop {
                let mut req = Vec::new();
                req.put_u32(bytes.len() as u32);
                req.put_bytes(&bytes);
                let reqs = BTreeMap::from([(node, req)]);
                let rep = exchange(ctx, n, super::H_MSG_LOG, &reqs).await?;
                let mut r = Reader::new(&rep[0]);
                if r.u8()? == DONE {
                    out.push((node, r.u64()?, entry));
                    break;
                }
                if ctx.now() - began > LOG_FULL_BOUND_NS {
                    return Err(TxnError::Unsupported("a RedT log buffer stayed full for 100 ms (its replay stalled)"));
                }
                ctx.sleep(1_000).await;
            }
        }
    }
    Ok(out)
}

/// LOG at a data node: the entry into the next slot of this node's buffer.
pub fn log_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    charge_handler(n, h);
    let mut r = Reader::new(req);
    let Ok(len) = r.u32() else { return Handled::Reply };
    let Ok(entry) = r.bytes(len as usize) else { return Handled::Reply };
    if entry.len() as u64 > logbuf::SLOT_BYTES {
        h.reply.push(FULL);
        return Handled::Reply;
    }
    let area = n.base() + n.catalog.layout.area_at;
    let head = h.mem.load_u64(area + logbuf::HEAD).unwrap_or(0);
    let tail = h.mem.load_u64(area + logbuf::TAIL).unwrap_or(0);
    if tail >= head + logbuf::SLOTS {
        h.reply.push(FULL);
        return Handled::Reply;
    }
    let _ = h.mem.store_u64(area + logbuf::TAIL, tail + 1);
    let _ = h.mem.write(area + logbuf::slot_at(tail), entry);
    h.copy(entry.len());
    h.reply.push(DONE);
    h.reply.put_u64(tail);
    Handled::Reply
}

/// CommitLog by messages: each entry takes its final status (and, on a commit, its contents).
pub async fn commit_log(
    ctx: &Ctx,
    n: &NodeState,
    slots: &mut [(u16, u64, Entry)],
    cts: u64,
    status: u64,
    installs: &BTreeMap<(u16, u64), (u64, Vec<u8>)>,
) -> Result<(), TxnError> {
    let mut reqs: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
    let mut counts: BTreeMap<u16, u16> = BTreeMap::new();
    for (node, idx, entry) in slots.iter_mut() {
        let mut body = Vec::new();
        if status == logbuf::COMMITTED {
            entry.cts = cts;
            for c in entry.changes.iter_mut() {
                let (t, _) = txbed_txn::store::copy_of(c.table);
                if let Some((version, value)) = installs.get(&(t, c.key)) {
                    c.version = *version;
                    c.content = value.clone();
                }
            }
            entry.status = status;
            body = entry.encode();
        }
        entry.status = status;
        let b = reqs.entry(*node).or_default();
        b.put_u64(*idx);
        b.put_u64(status);
        b.put_u32(body.len() as u32);
        b.put_bytes(&body);
        *counts.entry(*node).or_default() += 1;
    }
    let reqs: BTreeMap<u16, Vec<u8>> = reqs
        .into_iter()
        .map(|(node, body)| {
            let mut b = Vec::new();
            b.put_u16(counts[&node]);
            b.put_bytes(&body);
            (node, b)
        })
        .collect();
    exchange(ctx, n, super::H_MSG_STATUS, &reqs).await?;
    Ok(())
}

/// STATUS at a data node: each entry's contents (a commit's), then its status word.
pub fn status_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    charge_handler(n, h);
    let area = n.base() + n.catalog.layout.area_at;
    let mut r = Reader::new(req);
    let Ok(count) = r.u16() else { return Handled::Reply };
    for _ in 0..count {
        let Ok((idx, status, body)) = decode_status(&mut r) else { return Handled::Reply };
        let at = area + logbuf::slot_at(idx);
        if !body.is_empty() && body.len() as u64 <= logbuf::SLOT_BYTES {
            let _ = h.mem.write(at, body);
            h.copy(body.len());
        }
        let _ = h.mem.store_u64(at + logbuf::STATUS_AT, status);
    }
    Handled::Reply
}

fn decode_status<'a>(r: &mut Reader<'a>) -> Result<(u64, u64, &'a [u8]), WireError> {
    let (idx, status, len) = (r.u64()?, r.u64()?, r.u32()? as usize);
    Ok((idx, status, r.bytes(len)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_requests_decode_and_truncations_are_refused() {
        let mut b = Vec::new();
        b.put_u64(7);
        b.put_u16(2);
        for (t, k, w) in [(3u16, 9u64, true), (2049, 1, false)] {
            b.put_u16(t);
            b.put_u64(k);
            b.put_u8(w as u8);
        }
        assert_eq!(decode_asks(&b).unwrap(), (7, vec![(3, 9, true), (2049, 1, false)]));
        for cut in 0..b.len() {
            assert!(decode_asks(&b[..cut]).is_err());
        }
    }
}
