//! Transaction histories: what every transaction read and wrote, the final store, and
//! workload invariants, as JSON Lines.
//!
//! Each line is one object with a `type`:
//!
//! ```json
//! {"type":"txn","id":7,"node":0,"worker":1,"coroutine":2,"start_ns":100,"end_ns":900,
//!  "status":"committed","label":"amalgamate",
//!  "reads":[{"key":42,"version":3}],"writes":[{"key":42,"version":4}]}
//! {"type":"final","replica":"primary","key":42,"version":4}
//! {"type":"invariant","name":"total balance","expected":1000,"actual":1000}
//! {"type":"meta","scenario":"quickstart","seed":1,"replicas":["primary","backup1"]}
//! {"type":"end","txns":1,"committed":1,"aborted":0,"finals":1,"invariants":1}
//! ```
//!
//! The `end` trailer is the last line of every history, with the counts of what precedes it,
//! so an empty or truncated file is rejected instead of passing as "0 transactions, clean"
//! ([`crate::format`] reads and writes files, JSON Lines and binary).
//!
//! `meta.replicas` declares every replica, so one that lists no key at all (it lost every
//! write) is still checked.
//!
//! A key is a u64 (table in the high bits by convention); versions count the committed writes
//! of a key, 0 being the initial load. Reads name the version observed; writes the version
//! installed. Aborted transactions may be listed with the writes they made visible, so reads
//! of them (G1a) can be named.

use std::fmt;
use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Access {
    pub key: u64,
    pub version: u64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Committed,
    Aborted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Txn {
    pub id: u64,
    #[serde(default)]
    pub node: u16,
    #[serde(default)]
    pub worker: u16,
    #[serde(default)]
    pub coroutine: u32,
    #[serde(default)]
    pub start_ns: u64,
    #[serde(default)]
    pub end_ns: u64,
    pub status: Status,
    /// Transaction type (e.g. "send-payment"), for explanations.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    #[serde(default)]
    pub reads: Vec<Access>,
    #[serde(default)]
    pub writes: Vec<Access>,
    /// Predicate reads (range or index scans), for anti-dependencies on the rows a scan did
    /// not return (phantoms).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub predicates: Vec<PredicateRead>,
}

/// A predicate read over keys `lo..=hi`: the version it observed of each key listed in
/// `vset`; keys of the range not listed were observed at version 0 (initial load, or not
/// there). A committed write of any key in the range changes what the scan returns, so it
/// gives predicate edges (Adya's predicate read- and anti-dependencies) besides the item
/// edges of the rows read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredicateRead {
    pub lo: u64,
    pub hi: u64,
    #[serde(default)]
    pub vset: Vec<Access>,
}

/// The version a replica holds for a key at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Final {
    #[serde(default = "primary")]
    pub replica: String,
    pub key: u64,
    pub version: u64,
}

fn primary() -> String {
    "primary".into()
}

/// A workload invariant evaluated at the end of the run (e.g. SmallBank's total balance).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invariant {
    pub name: String,
    pub expected: i64,
    pub actual: i64,
}

/// The last line of a history file: counts of the records before it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trailer {
    pub txns: u64,
    pub committed: u64,
    pub aborted: u64,
    pub finals: u64,
    pub invariants: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum Line {
    Txn(Txn),
    Final(Final),
    Invariant(Invariant),
    Meta(serde_json::Map<String, serde_json::Value>),
    End(Trailer),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub txns: Vec<Txn>,
    pub finals: Vec<Final>,
    pub invariants: Vec<Invariant>,
    pub meta: serde_json::Map<String, serde_json::Value>,
}

/// A history file that cannot be read, with the line it failed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for HistoryError {}

impl History {
    /// Reads JSON Lines ([`crate::format::read_jsonl`]; blank lines are skipped, the trailer
    /// is required). Errors name the line and the problem.
    pub fn read(r: impl BufRead) -> Result<History, HistoryError> {
        crate::format::read_jsonl(r).map(|f| f.to_history())
    }

    /// Writes JSON Lines, trailer last.
    pub fn write(&self, w: impl Write) -> std::io::Result<()> {
        crate::format::write_jsonl(self, w)
    }

    /// Writes the binary form ([`crate::format`]), trailer last.
    pub fn write_binary(&self, w: impl Write) -> std::io::Result<()> {
        crate::format::write_binary(self, w)
    }
}

/// A serial, hence serializable, history: `txns` transactions each reading two keys and
/// writing two (read-modify-write), over `keys` keys, with a final store. Used by the
/// checker's benchmark and tests. Deterministic in `seed` (a xorshift stream, so the
/// checker crate needs no RNG dependency).
pub fn generate_serial(txns: usize, keys: u64, seed: u64) -> History {
    crate::format::generate_serial_flat(txns, keys, seed).to_history()
}
