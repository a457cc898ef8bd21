//! Workload generators and their transaction logic, independent of protocol and backend.
//!
//! A workload names its tables (fixed-size records, rows per node), where each key lives, the
//! initial value of every record, and draws transactions whose read set and read-write set are
//! known before execution (RCC Sec. 3.2). `execute` turns the values read into the values to
//! write, or a user abort. Everything random comes from the RNG the caller passes in, so a
//! generator is a pure function of the run's seed.

pub mod smallbank;
pub mod tpce;
pub mod ycsb;

use rand_chacha::ChaCha8Rng;

/// A record's identity: table and row. Rows are numbered cluster-wide.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub table: u16,
    pub row: u64,
}

impl Key {
    /// One u64 for histories: table in the top 16 bits.
    pub fn packed(self) -> u64 {
        ((self.table as u64) << 48) | self.row
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub id: u16,
    pub name: &'static str,
    pub record_bytes: u32,
    pub rows_per_node: u64,
}

/// One transaction to run: what it reads, what it reads and writes, and its inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnSpec {
    /// Transaction type, for reports and explanations.
    pub kind: &'static str,
    /// Read-only accesses.
    pub reads: Vec<Key>,
    /// Read-modify-write accesses.
    pub writes: Vec<Key>,
    /// Workload-specific inputs (amounts, field values).
    pub params: Vec<i64>,
    /// CPU work the transaction body performs, ns (YCSB's compute knob).
    pub compute_ns: u64,
}

impl TxnSpec {
    pub fn read_only(&self) -> bool {
        self.writes.is_empty()
    }
}

/// The outcome of running a transaction's logic on the values it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Executed {
    /// Commit with these new values for `writes` (same order), and the money (or other
    /// conserved quantity) that entered (+) or left (-) the database, for invariants.
    Commit { new_values: Vec<Vec<u8>>, external_delta: i64 },
    /// The logic itself decided to abort (not a conflict): e.g. TPC-C's invalid item.
    UserAbort,
}

pub trait Workload: Send + Sync {
    fn name(&self) -> &'static str;
    fn tables(&self) -> Vec<Table>;
    /// The node that owns `key` (its primary).
    fn home(&self, key: Key, nodes: u16) -> u16 {
        let per = self.tables().iter().find(|t| t.id == key.table).map_or(1, |t| t.rows_per_node.max(1));
        ((key.row / per) % nodes as u64) as u16
    }
    /// The value every record holds before the run.
    fn initial(&self, key: Key) -> Vec<u8>;
    /// Draws the next transaction for a coroutine on `node` of a `nodes`-node cluster.
    fn generate(&self, rng: &mut ChaCha8Rng, node: u16, nodes: u16) -> TxnSpec;
    /// Runs the logic: `read_values` for `spec.reads`, `old_values` for `spec.writes`.
    fn execute(&self, spec: &TxnSpec, read_values: &[&[u8]], old_values: &[&[u8]]) -> Executed;
    /// The conserved quantity of the whole database (e.g. SmallBank's total balance), if any.
    fn conserved(&self, _key: Key, _value: &[u8]) -> i64 {
        0
    }
}

/// A deterministic serial executor over an in-memory map, for tests and as the reference a
/// protocol's results can be compared with.
pub struct SerialStore {
    pub values: std::collections::BTreeMap<Key, Vec<u8>>,
}

impl SerialStore {
    pub fn new() -> Self {
        SerialStore { values: std::collections::BTreeMap::new() }
    }
    fn get(&mut self, w: &dyn Workload, k: Key) -> Vec<u8> {
        self.values.entry(k).or_insert_with(|| w.initial(k)).clone()
    }
    /// Runs one transaction; returns its outcome.
    pub fn run(&mut self, w: &dyn Workload, spec: &TxnSpec) -> Executed {
        let reads: Vec<Vec<u8>> = spec.reads.iter().map(|&k| self.get(w, k)).collect();
        let olds: Vec<Vec<u8>> = spec.writes.iter().map(|&k| self.get(w, k)).collect();
        let r: Vec<&[u8]> = reads.iter().map(|v| v.as_slice()).collect();
        let o: Vec<&[u8]> = olds.iter().map(|v| v.as_slice()).collect();
        let out = w.execute(spec, &r, &o);
        if let Executed::Commit { new_values, .. } = &out {
            for (k, v) in spec.writes.iter().zip(new_values) {
                self.values.insert(*k, v.clone());
            }
        }
        out
    }
}

impl Default for SerialStore {
    fn default() -> Self {
        Self::new()
    }
}

/// Little-endian i64 in the first 8 bytes of a record.
pub fn get_i64(v: &[u8]) -> i64 {
    i64::from_le_bytes(v[..8].try_into().expect("record of at least 8 bytes"))
}

pub fn with_i64(old: &[u8], x: i64) -> Vec<u8> {
    let mut v = old.to_vec();
    v[..8].copy_from_slice(&x.to_le_bytes());
    v
}
