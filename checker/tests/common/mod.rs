//! Builders for hand-made histories, shared by the checker's test files.

use txbed_checker::{Access, History, Status, Txn};

pub fn a(key: u64, version: u64) -> Access {
    Access { key, version }
}

/// A committed transaction on its own coroutine, at 100 ns per id, lasting 50 ns.
pub fn txn(id: u64, reads: &[Access], writes: &[Access]) -> Txn {
    Txn {
        id,
        node: 0,
        worker: 0,
        coroutine: id as u32,
        start_ns: id * 100,
        end_ns: id * 100 + 50,
        status: Status::Committed,
        label: String::new(),
        reads: reads.to_vec(),
        writes: writes.to_vec(),
        predicates: Vec::new(),
    }
}

pub fn history(txns: Vec<Txn>) -> History {
    History { txns, ..Default::default() }
}
