//! The participant's RPC handlers: those every protocol shares (LOCK, RELEASE, COMMIT, LOG,
//! RECLAIM, FETCH, VALIDATE), the index's LOOKUP, and the registration of a protocol's own.

use std::rc::Rc;

use txbed_transport::{Endpoint, Handled, HandlerCtx, HandlerFn, HostMemory, NodeId};

use crate::msg::{
    CommitIfReq, CommitReq, FetchReply, KeyReq, LockReply, LockReq, ReclaimReply, ReclaimReq, Reclaimed, ReleaseReq,
    UnlockKeyReq, ValidateReply, ValidateReq,
};
use crate::node::{
    NodeState, HANDLER_NAMES, H_COMMIT, H_COMMIT_IF, H_FETCH, H_LOCK, H_LOG, H_RECLAIM, H_RECLAIMED, H_RELEASE,
    H_UNLOCK_KEY, H_VALIDATE, MALFORMED,
};
use crate::protocol::{handler_id, ProtocolRef};
use crate::store::{self, TablePlace, LOCK, META_BYTES, VERSION, WRITER};

/// The table and tuple offset of a key on this node (its own partition or a copy).
pub fn find<'a>(n: &'a NodeState, mem: &dyn HostMemory, table: u16, key: u64) -> Option<(&'a TablePlace, u64)> {
    let place = n.catalog.layout.table(table)?;
    Some((place, store::find_local(mem, n.base(), place, key)?))
}

/// Installs `version` of a key (its record and writer) on this node if it is newer than the
/// version there: a replica applying writes that may arrive out of order. Whether it did.
pub fn install_if_newer(
    n: &NodeState,
    mem: &dyn HostMemory,
    table: u16,
    key: u64,
    version: u64,
    writer: u64,
    record: &[u8],
) -> bool {
    let Some((_, off)) = find(n, mem, table, key) else { return false };
    let at = n.base() + off;
    let (inc, have) = store::split_version_word(mem.load_u64(at + VERSION).unwrap_or(0));
    if version <= have {
        return false;
    }
    let _ = mem.write(at + META_BYTES, record);
    let _ = mem.store_u64(at + VERSION, store::version_word(inc, version));
    let _ = mem.store_u64(at + WRITER, writer);
    true
}

/// LOCK: CAS the owner into the tuple's lock word (so a one-sided RELEASE can later clear
/// it, RCC Sec. 5.2) and reply with the tuple's offset and bytes.
fn lock(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Ok(LockReq { table, key, owner, meta_only }) = LockReq::decode(req) else { return reply.push(MALFORMED) };
    let Some((place, off)) = find(n, mem, table, key) else { return LockReply::Missing.encode_into(reply) };
    let old = mem.cas_u64(n.base() + off + LOCK, 0, owner).unwrap_or(u64::MAX);
    if old != 0 {
        return LockReply::Busy.encode_into(reply);
    }
    let len = if meta_only { store::LOCK_AND_VERSION } else { place.tuple_bytes };
    let mut tuple = vec![0u8; len as usize];
    let _ = mem.read(n.base() + off, &mut tuple);
    LockReply::Locked { offset: off, tuple }.encode_into(reply);
}

/// FETCH (OCC's execution by RPC): the tuple, its offset, and the key's main bucket so the
/// caller's location cache fills even over RPC (DrTM+H Sec. 5.1).
fn fetch(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Ok(KeyReq { table, key }) = KeyReq::decode(req) else { return reply.push(MALFORMED) };
    let Some((place, off)) = find(n, mem, table, key) else { return FetchReply::Missing.encode_into(reply) };
    let bucket_at = place.buckets_at + store::bucket_of(key, place.buckets) * store::BUCKET_BYTES;
    let mut bucket = [0u8; store::BUCKET_BYTES as usize];
    let _ = mem.read(n.base() + bucket_at, &mut bucket);
    let mut tuple = vec![0u8; place.tuple_bytes as usize];
    let _ = mem.read(n.base() + off, &mut tuple);
    FetchReply::Found { offset: off, bucket_at, bucket, tuple }.encode_into(reply);
}

/// VALIDATE: the tuple's lock and version words. A request that does not decode gets an
/// empty reply, which does not decode either.
fn validate(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Ok(ValidateReq { offset }) = ValidateReq::decode(req) else { return };
    let lock = mem.load_u64(n.base() + offset + LOCK).unwrap_or(u64::MAX);
    let version = mem.load_u64(n.base() + offset + VERSION).unwrap_or(u64::MAX);
    ValidateReply { lock, version }.encode_into(reply);
}

/// RELEASE: clear the lock if `owner` holds it.
fn release(n: &NodeState, mem: &dyn HostMemory, req: &[u8]) {
    // Nobody reads the reply: a request that does not decode releases nothing.
    let Ok(ReleaseReq { offset, owner }) = ReleaseReq::decode(req) else { return };
    let _ = mem.cas_u64(n.base() + offset + LOCK, owner, 0);
}

/// COMMIT: write back version, writer and record, then clear the lock.
fn commit(n: &NodeState, mem: &dyn HostMemory, req: &[u8]) {
    // Nobody reads the reply: a request that does not decode writes nothing.
    let Ok(c) = CommitReq::decode(req) else { return };
    let base = n.base() + c.offset;
    let _ = mem.write(base + META_BYTES, c.record);
    let _ = mem.store_u64(base + VERSION, c.version);
    let _ = mem.store_u64(base + WRITER, c.writer);
    let _ = mem.store_u64(base + LOCK, 0);
}

/// UNLOCK_KEY: clear the lock of a key if the owner named holds it. The reply (empty) says
/// the request was served.
fn unlock_key(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Ok(UnlockKeyReq { table, key, owner }) = UnlockKeyReq::decode(req) else { return reply.push(MALFORMED) };
    if let Some((_, off)) = find(n, mem, table, key) {
        let _ = mem.cas_u64(n.base() + off + LOCK, owner, 0);
    }
}

/// COMMIT_IF: a COMMIT done only while the owner named holds the lock (a write-back sent again
/// after a failure: if the first one landed and the lock moved on, nothing is written). The
/// reply (empty) says the request was served.
fn commit_if(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Ok(CommitIfReq { owner, commit: c }) = CommitIfReq::decode(req) else { return reply.push(MALFORMED) };
    if mem.load_u64(n.base() + c.offset + LOCK).ok() != Some(owner) {
        return;
    }
    let base = n.base() + c.offset;
    let _ = mem.write(base + META_BYTES, c.record);
    let _ = mem.store_u64(base + VERSION, c.version);
    let _ = mem.store_u64(base + WRITER, c.writer);
    let _ = mem.store_u64(base + LOCK, 0);
}

/// Cache-missing memory accesses a shared handler makes per request: by key, the index bucket
/// then the tuple (LOCK, FETCH); by offset, the tuple (VALIDATE, RELEASE, COMMIT).
pub const BY_KEY: u64 = 2;
pub const BY_OFFSET: u64 = 1;

/// A handler that charges `misses` memory accesses, runs `f` on the node's state and replies
/// with what it wrote.
fn replying(n: &Rc<NodeState>, misses: u64, f: fn(&NodeState, &dyn HostMemory, &[u8], &mut Vec<u8>)) -> Rc<HandlerFn> {
    let n = n.clone();
    Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
        ctx.memory_misses(misses);
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

/// The handlers every protocol shares (ids 10..=16 and 18; the index's is 17).
fn common_handlers(n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    let log_node = n.clone();
    let reclaim_node = n.clone();
    let reclaimed_node = n.clone();
    vec![
        (H_LOCK, replying(n, BY_KEY, lock)),
        (H_RELEASE, replying(n, BY_OFFSET, |n, mem, req, _| release(n, mem, req))),
        (H_COMMIT, replying(n, BY_OFFSET, |n, mem, req, _| commit(n, mem, req))),
        (H_FETCH, replying(n, BY_KEY, fetch)),
        (H_VALIDATE, replying(n, BY_OFFSET, validate)),
        (H_UNLOCK_KEY, replying(n, BY_KEY, unlock_key)),
        (H_COMMIT_IF, replying(n, BY_OFFSET, commit_if)),
        (
            H_LOG,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                // The RPC log handler copies the record and applies it (DrTM+H Sec. 5.4), finding
                // each entry's record by key; an empty reply says it did.
                ctx.copy(req.len());
                match crate::log::apply(&log_node, req) {
                    Ok(applied) => ctx.memory_misses(BY_KEY * applied as u64),
                    Err(_) => ctx.reply.push(MALFORMED),
                }
                Handled::Reply
            }),
        ),
        (
            H_RECLAIM,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                // Applies what the ring holds; a caller waiting for room hears how many bytes
                // are now consumed in the reply, the writer of a lazy one-way reclaim by a
                // one-way RECLAIMED (its own node's directly), so that reclaiming stays off the
                // critical path (DrTM+H Sec. 5.4). A request that does not decode gets an empty
                // reply, which does not decode either.
                let Ok(ReclaimReq { sender, worker, notify }) = ReclaimReq::decode(req) else {
                    return Handled::Reply;
                };
                let d = crate::log::drain_ring(&reclaim_node, ctx.mem, sender, worker);
                ctx.copy(d.bytes as usize);
                ctx.memory_misses(BY_KEY * d.entries);
                if !notify {
                    ReclaimReply { consumed: d.consumed }.encode_into(ctx.reply);
                    return Handled::Reply;
                }
                let me = reclaim_node.me;
                if sender == me {
                    reclaim_node.log_confirmed(worker, me, d.consumed);
                } else {
                    let m = Reclaimed { backup: me, worker, consumed: d.consumed }.encode();
                    ctx.notify(Endpoint { node: NodeId(sender), worker }, H_RECLAIMED, m);
                }
                Handled::NoReply
            }),
        ),
        (
            H_RECLAIMED,
            Rc::new(move |_: &mut HandlerCtx<'_>, req: &[u8]| {
                // A backup's report after a lazy reclaim: room in that ring again.
                if let Ok(Reclaimed { backup, worker, consumed }) = Reclaimed::decode(req) {
                    reclaimed_node.log_confirmed(worker, backup, consumed);
                }
                Handled::NoReply
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::Arc;

    use txbed_transport::{MemError, MemoryRegion};
    use txbed_workloads::smallbank::SmallBank;

    use super::*;
    use crate::locate::{Catalog, LocationCache};
    use crate::node::{NodeState, MALFORMED};
    use crate::protocol::Rdma;
    use crate::stage::Hybrid;
    use crate::store::{Layout, TableSpec};

    /// One node's registered memory, plain bytes.
    struct Mem(MemoryRegion, RefCell<Vec<u8>>);

    impl Mem {
        fn at(&self, addr: u64, len: usize) -> Result<usize, MemError> {
            let r = self.0;
            if addr < r.addr || addr + len as u64 > r.addr + r.len {
                return Err(MemError::OutOfBounds { addr, len: len as u64 });
            }
            Ok((addr - r.addr) as usize)
        }
    }

    impl HostMemory for Mem {
        fn regions(&self) -> Vec<MemoryRegion> {
            vec![self.0]
        }
        fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
            let i = self.at(addr, out.len())?;
            out.copy_from_slice(&self.1.borrow()[i..i + out.len()]);
            Ok(())
        }
        fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
            let i = self.at(addr, data.len())?;
            self.1.borrow_mut()[i..i + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn cas_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
            let old = self.load_u64(addr)?;
            if old == compare {
                self.store_u64(addr, swap)?;
            }
            Ok(old)
        }
        fn faa_u64(&self, addr: u64, add: u64) -> Result<u64, MemError> {
            let old = self.load_u64(addr)?;
            self.store_u64(addr, old.wrapping_add(add))?;
            Ok(old)
        }
    }

    /// A node holding keys 5, 6 and 7 of table 1 (8-byte records holding the key).
    fn node() -> (NodeState, Mem) {
        let layout = Layout::new(&[TableSpec { id: 1, record_bytes: 8, rows_per_node: 16 }], store::LOAD_FACTOR);
        let region = MemoryRegion { addr: 0x1000, len: layout.bytes, rkey: 1, lkey: 1 };
        let mem = Mem(region, RefCell::new(vec![0; layout.bytes as usize]));
        store::load_table(
            &mem,
            region,
            &layout.tables[0],
            store::Keys::List(vec![5, 6, 7]),
            Rc::new(|k, rec| rec.copy_from_slice(&k.to_le_bytes())),
            &store::Partitions::default(),
        )
        .unwrap();
        let n = NodeState {
            me: 0,
            nodes: 1,
            coroutines: 1,
            catalog: Rc::new(Catalog { layout, regions: vec![region] }),
            cache: RefCell::new(LocationCache::new(0)),
            workload: Arc::new(SmallBank::default()),
            hybrid: Hybrid::RPC,
            rdma: Rdma::default(),
            local_path: crate::node::LocalPath::OFF,
            history: RefCell::default(),
            aborted_accesses: RefCell::default(),
            stats: RefCell::default(),
            pending_lookups: RefCell::default(),
            dc_of: Vec::new(),
            pending_inter_dc: RefCell::default(),
            replication: 1,
            bug: None,
            rings: RefCell::default(),
            readers: RefCell::default(),
            replica: RefCell::default(),
            recovery: None,
            incarnation: 0,
            pending: RefCell::default(),
            wal: RefCell::default(),
            skipped: RefCell::default(),
            chopped: RefCell::default(),
            deferred: RefCell::default(),
            pieces: RefCell::default(),
            wait_cause: RefCell::default(),
            committing: RefCell::default(),
            participant: Box::new(()),
            index: Default::default(),
        };
        (n, mem)
    }

    fn call(f: fn(&NodeState, &dyn HostMemory, &[u8], &mut Vec<u8>), n: &NodeState, mem: &Mem, req: &[u8]) -> Vec<u8> {
        let mut reply = Vec::new();
        f(n, mem, req, &mut reply);
        reply
    }

    #[test]
    fn lock_fetch_validate_commit_release() {
        let (n, mem) = node();
        let lock = |key, owner| {
            LockReply::decode(&call(lock, &n, &mem, &LockReq { table: 1, key, owner, meta_only: false }.encode()))
        };
        let Ok(LockReply::Locked { offset, tuple }) = lock(5, 9) else { panic!("key 5 is free") };
        assert_eq!((crate::wire::u64_at(&tuple, 0), &tuple[24..32]), (9, &5u64.to_le_bytes()[..]));
        assert_eq!(lock(5, 10), Ok(LockReply::Busy));
        assert_eq!(lock(99, 10), Ok(LockReply::Missing));
        let fetched = FetchReply::decode(&call(fetch, &n, &mem, &KeyReq { table: 1, key: 5 }.encode()));
        assert!(matches!(fetched, Ok(FetchReply::Found { offset: o, .. }) if o == offset));
        let fetched = FetchReply::decode(&call(fetch, &n, &mem, &KeyReq { table: 2, key: 5 }.encode()));
        assert_eq!(fetched, Ok(FetchReply::Missing));
        let validated =
            |n: &NodeState| ValidateReply::decode(&call(validate, n, &mem, &ValidateReq { offset }.encode()));
        assert_eq!(validated(&n).map(|v| v.lock), Ok(9));
        super::commit(&n, &mem, &CommitReq { offset, version: 77, writer: 9, record: &[1; 8] }.encode());
        assert_eq!(validated(&n), Ok(ValidateReply { lock: 0, version: 77 }));
        assert_eq!(lock(5, 10).map(|r| matches!(r, LockReply::Locked { .. })), Ok(true));
        super::release(&n, &mem, &ReleaseReq { offset, owner: 9 }.encode());
        assert_eq!(validated(&n).map(|v| v.lock), Ok(10), "only the owner releases");
        super::release(&n, &mem, &ReleaseReq { offset, owner: 10 }.encode());
        assert_eq!(validated(&n).map(|v| v.lock), Ok(0));
    }

    /// Requests of every length up to 48 bytes, of bytes that name nothing: no handler
    /// panics, and one whose reply has a status says MALFORMED when the request does not
    /// decode.
    #[test]
    fn requests_that_do_not_decode_are_refused() {
        let (n, mem) = node();
        let before = mem.1.borrow().clone();
        for len in 0..48 {
            let req = vec![0xab; len];
            let lock_reply = call(lock, &n, &mem, &req);
            assert_eq!(lock_reply == [MALFORMED], len != 24, "LOCK of {len} B");
            assert_eq!(call(fetch, &n, &mem, &req) == [MALFORMED], len != 16, "FETCH of {len} B");
            assert_eq!(ValidateReply::decode(&call(validate, &n, &mem, &req)).is_ok(), len == 8, "VALIDATE of {len} B");
            super::release(&n, &mem, &req);
            super::commit(&n, &mem, &req);
            assert!(crate::log::apply(&n, &req).is_err() || len == 8, "LOG of {len} B");
        }
        assert!(*mem.1.borrow() == before, "a request that names nothing changed the store");
    }
}
