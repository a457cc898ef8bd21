//! The RDMA-friendly circular log buffer (RedT Sec. 4.1, Fig. 4; Algorithm 2): one per node,
//! in the protocol's area, written by the executors of its data center with one-sided verbs.
//!
//! ```text
//! [ head 8 | tail 8 | pad to 64 ][ slot 0 ][ slot 1 ] ... [ slot SLOTS-1 ]
//! slot: [ tid 8 | changeCnt 8 | cts 8 | status 8 | changes... ]
//! change: [ table 8 | key 8 | version 8 | size 8 | content, padded to 8 ]
//! ```
//!
//! `tail` counts slots ever taken (FAA by writers), `head` slots ever released (by the node's
//! replay); slot `i` is at `i % SLOTS`. A writer that finds its slot a whole round ahead of
//! the head it last saw re-reads the head (the lazy check, lines 16-18) until the replay
//! freed it.

use txbed_txn::wire::{put_u64_at, u64_at, Put, Reader, WireError};

pub const HEAD: u64 = 0;
pub const TAIL: u64 = 8;
pub const SLOTS_AT: u64 = 64;
/// Slots per buffer.
pub const SLOTS: u64 = 1024;
/// Bytes per slot: an entry's header and changes; a sub-transaction writing more to one node
/// writes several entries.
pub const SLOT_BYTES: u64 = 2048;
/// Bytes of the area: the buffer.
pub const AREA_BYTES: u64 = SLOTS_AT + SLOTS * SLOT_BYTES;

pub const ENTRY_HEADER: u64 = 32;
pub const STATUS_AT: u64 = 24;
pub const CTS_AT: u64 = 16;
const CHANGE_HEADER: u64 = 32;

/// An entry's status (Algorithm 2).
pub const INITED: u64 = 0;
pub const LOGGED: u64 = 1;
pub const COMMITTED: u64 = 2;
pub const ABORTED: u64 = 3;
pub const FLUSHED: u64 = 4;

/// Offset of slot `idx` (a position counted from 0 forever) from the area's start.
pub fn slot_at(idx: u64) -> u64 {
    SLOTS_AT + (idx % SLOTS) * SLOT_BYTES
}

/// One change of a redo entry: the copy's table and key, and the version and content the
/// write installs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub table: u16,
    pub key: u64,
    pub version: u64,
    pub content: Vec<u8>,
}

impl Change {
    pub fn bytes(&self) -> u64 {
        CHANGE_HEADER + (self.content.len() as u64).next_multiple_of(8)
    }
}

/// A redo entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub tid: u64,
    pub cts: u64,
    pub status: u64,
    pub changes: Vec<Change>,
}

impl Entry {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u64(self.tid);
        b.put_u64(self.changes.len() as u64);
        b.put_u64(self.cts);
        b.put_u64(self.status);
        for c in &self.changes {
            b.put_u64(c.table as u64);
            b.put_u64(c.key);
            b.put_u64(c.version);
            b.put_u64(c.content.len() as u64);
            b.put_bytes(&c.content);
            b.pad8();
        }
        b
    }

    /// Decodes a slot's bytes (from this node's own memory: a corrupt entry is an error,
    /// never a panic).
    pub fn decode(b: &[u8]) -> Result<Entry, WireError> {
        let mut r = Reader::new(b);
        let (tid, cnt, cts, status) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let mut changes = Vec::new();
        for _ in 0..cnt.min(SLOT_BYTES / CHANGE_HEADER) {
            let (table, key, version, size) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            let content = r.padded(size.min(SLOT_BYTES) as usize)?.to_vec();
            changes.push(Change { table: table as u16, key, version, content });
        }
        Ok(Entry { tid, cts, status, changes })
    }
}

/// The entries (each at most a slot) that carry `changes`, in order.
pub fn split(changes: Vec<Change>) -> Result<Vec<Vec<Change>>, WireError> {
    let mut out: Vec<Vec<Change>> = Vec::new();
    let mut used = ENTRY_HEADER;
    for c in changes {
        if ENTRY_HEADER + c.bytes() > SLOT_BYTES {
            return Err(WireError::Invalid("a record larger than a RedT log slot"));
        }
        if out.is_empty() || used + c.bytes() > SLOT_BYTES {
            out.push(Vec::new());
            used = ENTRY_HEADER;
        }
        used += c.bytes();
        out.last_mut().expect("pushed").push(c);
    }
    Ok(out)
}

/// The status and cts words of a slot image.
pub fn status_of(slot: &[u8]) -> u64 {
    u64_at(slot, STATUS_AT as usize)
}

pub fn set_status(slot: &mut [u8], status: u64) {
    put_u64_at(slot, STATUS_AT as usize, status);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_large_change_sets_split_into_slots() {
        let c = |k: u64, len: usize| Change { table: 3, key: k, version: k + 1, content: vec![k as u8; len] };
        let e = Entry { tid: 9, cts: 77, status: LOGGED, changes: vec![c(1, 5), c(2, 100)] };
        let b = e.encode();
        assert_eq!(Entry::decode(&b).unwrap(), e);
        assert_eq!(status_of(&b), LOGGED);
        let many: Vec<Change> = (0..40).map(|k| c(k, 300)).collect();
        let parts = split(many.clone()).unwrap();
        assert!(parts.len() > 1);
        for p in &parts {
            let bytes = ENTRY_HEADER + p.iter().map(Change::bytes).sum::<u64>();
            assert!(bytes <= SLOT_BYTES, "{bytes}");
        }
        assert_eq!(parts.concat(), many);
        assert!(split(vec![c(0, SLOT_BYTES as usize)]).is_err());
        assert_eq!(slot_at(SLOTS + 2), slot_at(2));
    }
}
