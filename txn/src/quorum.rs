//! Messages to every replica of a transaction's records, for the protocols that talk to
//! replicas rather than to primaries (TAPIR, MDCC): where each record's copies are, one request
//! per node carrying that node's records, and the replies in node order.

use std::collections::BTreeMap;

use txbed_transport::{Ctx, Handled, HandlerCtx, HostMemory};

use crate::node::NodeState;
use crate::ops::{self, Rec};
use crate::placement::Placement;
use crate::store::{self, split_version_word, META_BYTES, VERSION};
use crate::wire::{Put, Reader, WireError};
use crate::TxnError;

/// One record at one replica: its copy's table, key, a version (read, or new), whether the
/// transaction writes it, and a value (new, where one travels).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub table: u16,
    pub key: u64,
    pub version: u64,
    pub write: bool,
    pub value: Vec<u8>,
}

/// A request to one replica: the transaction, a flag (commit, or the protocol's own meaning)
/// and its records there.
pub fn encode(tid: u64, flag: bool, entries: &[Entry]) -> Vec<u8> {
    let mut b = Vec::new();
    b.put_u64(tid);
    b.put_u8(flag as u8);
    b.put_u16(entries.len() as u16);
    for e in entries {
        b.put_u16(e.table);
        b.put_u64(e.key);
        b.put_u64(e.version);
        b.put_u8(e.write as u8);
        b.put_u32(e.value.len() as u32);
        b.put_bytes(&e.value);
    }
    b
}

pub fn decode(b: &[u8]) -> Result<(u64, bool, Vec<Entry>), WireError> {
    let mut r = Reader::new(b);
    let (tid, flag) = (r.u64()?, r.u8()? != 0);
    let n = r.u16()?;
    let mut out = Vec::with_capacity((n as usize).min(r.remaining() / 23));
    for _ in 0..n {
        let (table, key, version, write) = (r.u16()?, r.u64()?, r.u64()?, r.u8()? != 0);
        let len = r.u32()? as usize;
        out.push(Entry { table, key, version, write, value: r.bytes(len)?.to_vec() });
    }
    r.finish()?;
    Ok((tid, flag, out))
}

/// Every replica of every record: node -> (record index, the copy's table), nodes in order.
pub fn copies_by_node(
    p: &Placement,
    recs: &[Rec],
    replication: u16,
) -> Result<BTreeMap<u16, Vec<(usize, u16)>>, TxnError> {
    let mut at: BTreeMap<u16, Vec<(usize, u16)>> = BTreeMap::new();
    for (i, r) in recs.iter().enumerate() {
        let nodes = p
            .replicas(r.home, replication)
            .map_err(|_| TxnError::Unsupported("the replicas do not fit the data centers"))?;
        for (k, node) in nodes.into_iter().enumerate() {
            at.entry(node).or_default().push((i, copy_table(r.table, k as u16)?));
        }
    }
    Ok(at)
}

/// Copy `k`'s table of `table` (copy 0 is the primary's own).
pub fn copy_table(table: u16, k: u16) -> Result<u16, TxnError> {
    match k {
        0 => Ok(table),
        k => store::copy_table(table, k).ok_or(TxnError::UnknownTable(table)),
    }
}

/// Sends one request per node and waits: the replies in node order. A request to this very
/// node takes the local path (a direct call of the handler).
pub async fn to_nodes(
    ctx: &Ctx,
    n: &NodeState,
    handler: u16,
    what: &'static str,
    reqs: &BTreeMap<u16, Vec<u8>>,
) -> Result<Vec<Vec<u8>>, TxnError> {
    let calls: Vec<_> = reqs.iter().map(|(&node, r)| ops::send(ctx, n, node, handler, r)).collect();
    ctx.wait().await?;
    calls.into_iter().map(|c| ops::reply(ctx, c, what)).collect()
}

/// How many of these requests go to this very node (local accesses of the stage).
pub fn local_of<T>(n: &NodeState, reqs: &BTreeMap<u16, T>) -> u64 {
    reqs.keys().filter(|&&m| n.local(m)).count() as u64
}

/// A READ handler (TAPIR's, MDCC's): each asked record's tuple at this replica, empty where it
/// lacks the record; a request that does not decode gets an empty reply.
pub fn read_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    let Ok((_, _, entries)) = decode(req) else { return Handled::Reply };
    h.memory_misses(2 * entries.len() as u64);
    h.reply.put_u16(entries.len() as u16);
    for e in &entries {
        let mut t = Vec::new();
        if let Some((place, off)) = crate::participant::find(n, h.mem, e.table, e.key) {
            t = vec![0u8; place.tuple_bytes as usize];
            let _ = h.mem.read(n.base() + off, &mut t);
        }
        h.reply.put_u32(t.len() as u32);
        h.reply.put_bytes(&t);
    }
    Handled::Reply
}

/// Takes the tuples a READ reply (`read_handler`) from `node` holds into `recs`, keeping each
/// record's freshest version (by the version word).
pub fn take_freshest(recs: &mut [Rec], asked: &[(usize, u16)], reply: &[u8]) -> Result<(), TxnError> {
    let mut r = Reader::new(reply);
    if r.u16()? as usize != asked.len() {
        return Err(WireError::Invalid("a read reply of the wrong length").into());
    }
    for &(i, _) in asked {
        let len = r.u32()? as usize;
        let t = r.bytes(len)?;
        let newer = recs[i].tuple.is_empty() || (t.len() >= META_BYTES as usize && version_of(t) > recs[i].version().1);
        if newer && !t.is_empty() {
            recs[i].tuple = t.to_vec();
        }
    }
    Ok(())
}

/// A tuple's version counter.
pub fn version_of(tuple: &[u8]) -> u64 {
    let at = VERSION as usize;
    split_version_word(u64::from_le_bytes(tuple[at..at + 8].try_into().expect("8 bytes"))).1
}

/// The version counter of a record's copy on this node, if it holds it.
pub fn local_version(n: &NodeState, mem: &dyn HostMemory, table: u16, key: u64) -> Option<u64> {
    crate::participant::find(n, mem, table, key)
        .map(|(_, off)| split_version_word(mem.load_u64(n.base() + off + VERSION).unwrap_or(0)).1)
}

/// What transactions hold at a replica before their outcome reaches it, per record (copy
/// table, key): TAPIR's prepared transactions, MDCC's accepted options. Read holds share; a
/// write hold excludes every other.
#[derive(Default)]
pub struct Holds {
    by_key: std::cell::RefCell<BTreeMap<(u16, u64), Held>>,
    by_tid: std::cell::RefCell<BTreeMap<u64, Vec<(u16, u64)>>>,
}

#[derive(Default)]
struct Held {
    readers: Vec<u64>,
    writer: u64,
}

impl Holds {
    /// Whether another transaction's hold on the record conflicts with `tid` reading or (with
    /// `write`) writing it.
    pub fn conflicts(&self, tid: u64, table: u16, key: u64, write: bool) -> bool {
        self.by_key
            .borrow()
            .get(&(table, key))
            .is_some_and(|h| (h.writer != 0 && h.writer != tid) || (write && h.readers.iter().any(|&r| r != tid)))
    }

    /// `tid` holds the record (again: idempotent).
    pub fn hold(&self, tid: u64, table: u16, key: u64, write: bool) {
        let mut by_key = self.by_key.borrow_mut();
        let h = by_key.entry((table, key)).or_default();
        let held = h.writer == tid || h.readers.contains(&tid);
        match write {
            true => h.writer = tid,
            false if !h.readers.contains(&tid) => h.readers.push(tid),
            false => {}
        }
        if !held {
            self.by_tid.borrow_mut().entry(tid).or_default().push((table, key));
        }
    }

    /// The outcome of `tid` reached this replica: its holds go, and on a commit its writes
    /// among `entries` are installed where newer than the replica's version (outcomes of
    /// different transactions may cross).
    pub fn finish(&self, n: &NodeState, mem: &dyn HostMemory, tid: u64, commit: bool, entries: &[Entry]) {
        self.release(tid);
        if commit {
            for e in entries.iter().filter(|e| e.write) {
                crate::participant::install_if_newer(n, mem, e.table, e.key, e.version, tid, &e.value);
            }
        }
    }

    /// Every hold of `tid` goes.
    pub fn release(&self, tid: u64) {
        if let Some(keys) = self.by_tid.borrow_mut().remove(&tid) {
            let mut by_key = self.by_key.borrow_mut();
            for k in keys {
                if let Some(h) = by_key.get_mut(&k) {
                    h.readers.retain(|&r| r != tid);
                    if h.writer == tid {
                        h.writer = 0;
                    }
                    if h.readers.is_empty() && h.writer == 0 {
                        by_key.remove(&k);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_truncations_are_refused() {
        let e = vec![
            Entry { table: 3, key: 9, version: 4, write: true, value: vec![1, 2, 3] },
            Entry { table: 2049, key: 1, version: 0, write: false, value: Vec::new() },
        ];
        let b = encode(77, true, &e);
        assert_eq!(decode(&b).unwrap(), (77, true, e));
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_err(), "a request cut at {cut} bytes decoded");
        }
    }

    #[test]
    fn holds_share_reads_exclude_writes_and_go_with_the_outcome() {
        let h = Holds::default();
        h.hold(1, 3, 9, false);
        h.hold(2, 3, 9, false);
        assert!(!h.conflicts(3, 3, 9, false), "reads share");
        assert!(h.conflicts(3, 3, 9, true), "a write waits for readers");
        assert!(!h.conflicts(1, 3, 10, true), "another record");
        h.hold(1, 3, 9, false);
        h.release(1);
        assert!(h.conflicts(1, 3, 9, true), "2 still reads");
        h.release(2);
        assert!(!h.conflicts(1, 3, 9, true), "nothing held");
        h.hold(4, 3, 9, true);
        assert!(h.conflicts(5, 3, 9, false) && !h.conflicts(4, 3, 9, false), "a write excludes others only");
        h.release(4);
        assert!(h.by_key.borrow().is_empty() && h.by_tid.borrow().is_empty(), "released holds leave nothing");
    }
}
