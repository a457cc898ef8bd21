//! The participant's RPC handlers: those every protocol shares (LOCK, RELEASE, COMMIT, LOG,
//! RECLAIM, FETCH, VALIDATE), the index's LOOKUP, and the registration of a protocol's own.

use std::rc::Rc;

use txbed_transport::{Handled, HandlerCtx, HandlerFn, HostMemory};

use crate::node::{
    NodeState, BUSY, HANDLER_NAMES, H_COMMIT, H_FETCH, H_LOCK, H_LOG, H_RECLAIM, H_RELEASE, H_VALIDATE, MISSING, OK,
};
use crate::protocol::{handler_id, ProtocolRef};
use crate::store::{self, TablePlace, LOCK, META_BYTES, VERSION, WRITER};

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]))
}

/// LOCK: CAS the owner into the tuple's lock word (so a one-sided RELEASE can later clear
/// it, RCC Sec. 5.2) and reply with the tuple's offset and bytes.
/// Request: table u16 | pad 6 | key u64 | owner u64. Reply: status u8 | offset u64 | tuple.
/// The table and tuple offset a request's `table u16 | pad 6 | key u64` prefix names, or
/// `MISSING` in the reply.
fn find<'a>(
    n: &'a NodeState,
    mem: &dyn HostMemory,
    req: &[u8],
    reply: &mut Vec<u8>,
) -> Option<(&'a TablePlace, u64, u64)> {
    let table = u16::from_le_bytes([req[0], req[1]]);
    let key = u64_at(req, 8);
    let found = n.catalog.layout.table(table).and_then(|p| Some((p, store::find_local(mem, n.base(), p, key)?, key)));
    if found.is_none() {
        reply.push(MISSING);
    }
    found
}

fn lock(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let owner = u64_at(req, 16);
    let Some((place, off, _)) = find(n, mem, req, reply) else { return };
    let old = mem.cas_u64(n.base() + off + LOCK, 0, owner).unwrap_or(u64::MAX);
    if old != 0 {
        reply.push(BUSY);
        return;
    }
    reply.push(OK);
    reply.extend_from_slice(&off.to_le_bytes());
    let mut t = vec![0u8; place.tuple_bytes as usize];
    let _ = mem.read(n.base() + off, &mut t);
    reply.extend_from_slice(&t);
}

/// FETCH (OCC's execution by RPC): the tuple, its offset, and the key's main bucket so the
/// caller's location cache fills even over RPC (DrTM+H Sec. 5.1).
/// Request: table u16 | pad 6 | key u64. Reply: status | offset | bucket offset | bucket | tuple.
fn fetch(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Some((place, off, key)) = find(n, mem, req, reply) else { return };
    let bucket_at = place.buckets_at + store::bucket_of(key, place.buckets) * store::BUCKET_BYTES;
    let mut b = [0u8; store::BUCKET_BYTES as usize];
    let _ = mem.read(n.base() + bucket_at, &mut b);
    let mut t = vec![0u8; place.tuple_bytes as usize];
    let _ = mem.read(n.base() + off, &mut t);
    reply.push(OK);
    reply.extend_from_slice(&off.to_le_bytes());
    reply.extend_from_slice(&bucket_at.to_le_bytes());
    reply.extend_from_slice(&b);
    reply.extend_from_slice(&t);
}

/// VALIDATE: the tuple's lock and version words. Request: offset u64.
fn validate(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let off = u64_at(req, 0);
    let lock = mem.load_u64(n.base() + off + LOCK).unwrap_or(u64::MAX);
    let ver = mem.load_u64(n.base() + off + VERSION).unwrap_or(u64::MAX);
    reply.extend_from_slice(&lock.to_le_bytes());
    reply.extend_from_slice(&ver.to_le_bytes());
}

/// RELEASE: clear the lock if `owner` holds it. Request: offset u64 | owner u64.
fn release(n: &NodeState, mem: &dyn HostMemory, req: &[u8]) {
    let (off, owner) = (u64_at(req, 0), u64_at(req, 8));
    let _ = mem.cas_u64(n.base() + off + LOCK, owner, 0);
}

/// COMMIT: write back version, writer and record, then clear the lock.
/// Request: offset u64 | version word u64 | writer u64 | record.
fn commit(n: &NodeState, mem: &dyn HostMemory, req: &[u8]) {
    let off = u64_at(req, 0);
    let base = n.base() + off;
    let _ = mem.write(base + META_BYTES, &req[24..]);
    let _ = mem.store_u64(base + VERSION, u64_at(req, 8));
    let _ = mem.store_u64(base + WRITER, u64_at(req, 16));
    let _ = mem.store_u64(base + LOCK, 0);
}

/// A handler that runs `f` on the node's state and replies with what it wrote.
fn replying(n: &Rc<NodeState>, f: fn(&NodeState, &dyn HostMemory, &[u8], &mut Vec<u8>)) -> Rc<HandlerFn> {
    let n = n.clone();
    Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
        f(&n, ctx.mem, req, ctx.reply);
        Handled::Reply
    })
}

/// Every handler node `n` serves, with its id and its name (for traces): the common ones
/// (ids 10..=16), the index's lookup (17), then its protocol's at `handler_id(0)`, ...
pub fn handlers(protocol: ProtocolRef, n: &Rc<NodeState>) -> Vec<(u16, &'static str, Rc<HandlerFn>)> {
    let mut hs: Vec<(u16, &'static str, Rc<HandlerFn>)> =
        common_handlers(n).into_iter().chain(crate::index::handlers(n)).map(|(id, h)| (id, name_of(id), h)).collect();
    let names = protocol.handler_names();
    let own = protocol.handlers(n);
    assert_eq!(
        names.len(),
        own.len(),
        "{}: handler_names() and handlers() must list the same handlers",
        protocol.name()
    );
    for (i, (name, h)) in names.iter().zip(own).enumerate() {
        hs.push((handler_id(i), name, h));
    }
    hs
}

/// The name of a shared handler.
fn name_of(id: u16) -> &'static str {
    match HANDLER_NAMES.iter().find(|(i, _)| *i == id) {
        Some((_, name)) => name,
        None => panic!("shared handler {id} has no name in HANDLER_NAMES"),
    }
}

/// The handlers every protocol shares (ids 10..=16).
fn common_handlers(n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    let log_node = n.clone();
    let reclaim_node = n.clone();
    vec![
        (H_LOCK, replying(n, lock)),
        (H_RELEASE, replying(n, |n, mem, req, _| release(n, mem, req))),
        (H_COMMIT, replying(n, |n, mem, req, _| commit(n, mem, req))),
        (H_FETCH, replying(n, fetch)),
        (H_VALIDATE, replying(n, validate)),
        (
            H_LOG,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                // The RPC log handler copies the record and applies it (DrTM+H Sec. 5.4).
                ctx.compute((req.len() as u64).div_ceil(10));
                crate::log::apply(&log_node, req);
                Handled::Reply
            }),
        ),
        (
            H_RECLAIM,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                // Applies what the ring holds; a caller waiting for room (not a lazy one-way
                // reclaim) hears how many bytes are now consumed.
                if req.len() < 4 {
                    return Handled::NoReply;
                }
                let sender = u16::from_le_bytes([req[0], req[1]]);
                let worker = u16::from_le_bytes([req[2], req[3]]);
                let consumed = crate::log::drain_ring(&reclaim_node, ctx.mem, sender, worker);
                ctx.reply.extend_from_slice(&consumed.to_le_bytes());
                Handled::Reply
            }),
        ),
    ]
}
