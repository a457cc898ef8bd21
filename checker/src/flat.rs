//! A history as flat arrays, what [`crate::check`] runs on: one fixed-size row per
//! transaction and every access in one vector, so a 10 M-transaction history costs no
//! per-transaction allocation and is scanned in cache-friendly order. [`History`] (one
//! `Txn` with its own vectors each) is the convenient form for building and recording;
//! the file readers fill a `Flat` directly.

use std::collections::HashMap;

use crate::history::{Access, Final, History, Invariant, PredicateRead, Status, Txn};

/// One transaction. Its reads are `access[at..at + reads]`, its writes follow them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub id: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub at: u64,
    pub reads: u32,
    pub writes: u32,
    pub coroutine: u32,
    /// Index into `Flat::labels` (0 is the empty label).
    pub label: u32,
    pub node: u16,
    pub worker: u16,
    pub status: Status,
}

impl Row {
    /// The row of `t`, with its label's index; offsets are set by [`Flat::push`].
    pub fn of(t: &Txn, label: u32) -> Row {
        Row {
            id: t.id,
            start_ns: t.start_ns,
            end_ns: t.end_ns,
            coroutine: t.coroutine,
            label,
            node: t.node,
            worker: t.worker,
            status: t.status,
            ..Row::default()
        }
    }
}

impl Default for Row {
    fn default() -> Self {
        Row {
            id: 0,
            start_ns: 0,
            end_ns: 0,
            at: 0,
            reads: 0,
            writes: 0,
            coroutine: 0,
            label: 0,
            node: 0,
            worker: 0,
            status: Status::Committed,
        }
    }
}

/// A predicate read of transaction `txn` (an index into `Flat::txns`): keys `lo..=hi`, the
/// versions observed listed in `vset[vset_at..vset_at + vset_len]` (keys not listed were
/// observed at version 0).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PredRow {
    pub txn: u32,
    pub lo: u64,
    pub hi: u64,
    pub vset_at: u64,
    pub vset_len: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Flat {
    pub txns: Vec<Row>,
    pub access: Vec<Access>,
    /// Sorted by `txn`.
    pub preds: Vec<PredRow>,
    pub vset: Vec<Access>,
    pub labels: Vec<String>,
    pub finals: Vec<Final>,
    pub invariants: Vec<Invariant>,
    pub meta: serde_json::Map<String, serde_json::Value>,
    label_index: HashMap<String, u32>,
}

impl Default for Flat {
    fn default() -> Self {
        Flat {
            txns: Vec::new(),
            access: Vec::new(),
            preds: Vec::new(),
            vset: Vec::new(),
            labels: vec![String::new()],
            finals: Vec::new(),
            invariants: Vec::new(),
            meta: serde_json::Map::new(),
            label_index: HashMap::new(),
        }
    }
}

impl Flat {
    pub fn reads(&self, i: usize) -> &[Access] {
        let r = &self.txns[i];
        &self.access[r.at as usize..r.at as usize + r.reads as usize]
    }
    pub fn writes(&self, i: usize) -> &[Access] {
        let r = &self.txns[i];
        let w = r.at as usize + r.reads as usize;
        &self.access[w..w + r.writes as usize]
    }
    pub fn label(&self, i: usize) -> &str {
        &self.labels[self.txns[i].label as usize]
    }
    /// The predicate reads of transaction `i`.
    pub fn preds_of(&self, i: usize) -> &[PredRow] {
        let a = self.preds.partition_point(|p| (p.txn as usize) < i);
        let b = self.preds.partition_point(|p| (p.txn as usize) <= i);
        &self.preds[a..b]
    }
    pub fn vset_of(&self, p: &PredRow) -> &[Access] {
        &self.vset[p.vset_at as usize..p.vset_at as usize + p.vset_len as usize]
    }

    /// The index of `label`, interned.
    pub fn intern(&mut self, label: &str) -> u32 {
        if label.is_empty() {
            return 0;
        }
        if let Some(&i) = self.label_index.get(label) {
            return i;
        }
        let i = self.labels.len() as u32;
        self.labels.push(label.to_string());
        self.label_index.insert(label.to_string(), i);
        i
    }

    /// Appends a transaction; `row.at`, `row.reads` and `row.writes` are set from the slices.
    pub fn push(&mut self, mut row: Row, reads: &[Access], writes: &[Access], preds: &[PredicateRead]) {
        row.at = self.access.len() as u64;
        row.reads = reads.len() as u32;
        row.writes = writes.len() as u32;
        self.access.extend_from_slice(reads);
        self.access.extend_from_slice(writes);
        let txn = self.txns.len() as u32;
        for p in preds {
            self.preds.push(PredRow {
                txn,
                lo: p.lo,
                hi: p.hi,
                vset_at: self.vset.len() as u64,
                vset_len: p.vset.len() as u32,
            });
            self.vset.extend_from_slice(&p.vset);
        }
        self.txns.push(row);
    }

    /// Appends a transaction given as a [`Txn`].
    pub fn push_txn(&mut self, t: &Txn) {
        let label = self.intern(&t.label);
        self.push(Row::of(t, label), &t.reads, &t.writes, &t.predicates);
    }

    pub fn from_history(h: &History) -> Flat {
        let mut f = Flat::default();
        f.txns.reserve(h.txns.len());
        f.access.reserve(h.txns.iter().map(|t| t.reads.len() + t.writes.len()).sum());
        for t in &h.txns {
            f.push_txn(t);
        }
        f.finals = h.finals.clone();
        f.invariants = h.invariants.clone();
        f.meta = h.meta.clone();
        f
    }

    pub fn to_history(&self) -> History {
        let txns = (0..self.txns.len())
            .map(|i| {
                let r = &self.txns[i];
                Txn {
                    id: r.id,
                    node: r.node,
                    worker: r.worker,
                    coroutine: r.coroutine,
                    start_ns: r.start_ns,
                    end_ns: r.end_ns,
                    status: r.status,
                    label: self.label(i).to_string(),
                    reads: self.reads(i).to_vec(),
                    writes: self.writes(i).to_vec(),
                    predicates: self
                        .preds_of(i)
                        .iter()
                        .map(|p| PredicateRead { lo: p.lo, hi: p.hi, vset: self.vset_of(p).to_vec() })
                        .collect(),
                }
            })
            .collect();
        History { txns, finals: self.finals.clone(), invariants: self.invariants.clone(), meta: self.meta.clone() }
    }
}
