//! Workload generators and their transaction logic, independent of protocol and backend.
//!
//! A workload names its tables (fixed-size records, rows per node), where each key lives, the
//! initial value of every record, and draws transactions whose read set and read-write set are
//! known before execution (RCC Sec. 3.2). `execute` turns the values read into the values to
//! write, or a user abort. Everything random comes from the RNG the caller passes in, so a
//! generator is a pure function of the run's seed.

pub mod chopping;
pub mod kind;
pub mod smallbank;
pub mod tpcc;
pub mod tpce;
pub mod ycsb;

pub use kind::{Kind, Params, Shape, WorkloadConfig, WorkloadKind, WorkloadKindRef};

/// Every workload a scenario can name, one line each.
pub static REGISTRY: &[WorkloadKindRef] = &[&smallbank::KIND, &ycsb::KIND, &tpce::KIND, &tpcc::KIND];

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
    /// The logic saw state it must wait out before acting on it (DrTM Sec. 4.4: an
    /// order-status whose order's delivery is not yet published): the attempt aborts and the
    /// coordinator retries it, counted under this cause.
    Wait(&'static str),
}

/// What `Workload::check_consistency` reads: the node's records as the run left them.
pub trait Records {
    /// Puts record `key` into `out` (sized to the record) and says whether it is this node's.
    fn read(&self, key: Key, out: &mut Vec<u8>) -> bool;
    /// Whether rows `rows` of `table`, all this node's, hold exactly what loading put there:
    /// nothing wrote them since. False when unknown (the default), so a check that skips
    /// untouched rows only skips what it would have read as loaded.
    fn untouched(&self, _table: u16, _rows: std::ops::Range<u64>) -> bool {
        false
    }
}

/// A closure reading records is `Records` that knows nothing untouched.
impl<F: Fn(Key, &mut Vec<u8>) -> bool> Records for F {
    fn read(&self, key: Key, out: &mut Vec<u8>) -> bool {
        self(key, out)
    }
}

/// How `Workload::check_consistency` reads the node's records.
pub type ReadInto<'a> = &'a dyn Records;

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
    /// `initial(key)` into `record` (zeroed, the table's record size; a longer value is cut
    /// to it): bulk loading calls it once per record of every table, so a workload whose
    /// records are fixed overrides it to skip the allocation.
    fn initial_into(&self, key: Key, record: &mut [u8]) {
        let v = self.initial(key);
        let n = v.len().min(record.len());
        record[..n].copy_from_slice(&v[..n]);
    }
    /// Draws the next transaction for a coroutine on `node` of a `nodes`-node cluster.
    fn generate(&self, rng: &mut ChaCha8Rng, node: u16, nodes: u16) -> TxnSpec;
    /// Runs the logic: `read_values` for `spec.reads`, `old_values` for `spec.writes`.
    fn execute(&self, spec: &TxnSpec, read_values: &[&[u8]], old_values: &[&[u8]]) -> Executed;
    /// The conserved quantity of the whole database (e.g. SmallBank's total balance), if any.
    fn conserved(&self, _key: Key, _value: &[u8]) -> i64 {
        0
    }
    /// `conserved(key, &initial(key))`: a workload that knows it without making the record
    /// overrides it (results sum it over every record a run touched).
    fn initial_conserved(&self, key: Key) -> i64 {
        self.conserved(key, &self.initial(key))
    }
    /// A record's initial value as [`Workload::check_consistency`] reads it, made into a
    /// zeroed `record` as `initial_into` is: every field the check reads as `initial_into`
    /// makes it; a field it never reads may be left zero (TPC-C leaves out its strings, most
    /// of the cost of checking a large run). An empty row (an order slot never used) is all
    /// zeroes, so it writes nothing.
    fn initial_checked_into(&self, key: Key, record: &mut [u8]) {
        self.initial_into(key, record)
    }

    // Extensions for workloads whose read and write sets depend on the data (TPC-C, TPC-E).
    // Every method has a default that keeps a workload without them exactly as before.

    /// [`Workload::generate`] for a known coordinator ("terminal"): lets a workload give each
    /// terminal rows of its own (TPC-C's HISTORY ring). The coordinator calls this one.
    fn generate_at(&self, rng: &mut ChaCha8Rng, node: u16, nodes: u16, _terminal: Terminal) -> TxnSpec {
        self.generate(rng, node, nodes)
    }
    /// Questions to answer before `spec` can run (reconnaissance, Calvin's OLLP): the
    /// coordinator sends each to the node that owns its key, where [`Workload::answer`]
    /// replies, and runs [`Workload::resolve`]'s spec. None (the default): run `spec` as drawn.
    fn lookups(&self, _spec: &TxnSpec) -> Vec<Lookup> {
        Vec::new()
    }
    /// Answers a lookup's `args` at the node that owns its key, from `read` (that node's
    /// committed records: possibly mid-update, so a hint the transaction must validate) and
    /// the node's ordered `index` (one-sided verbs cannot search a sorted structure).
    fn answer(&self, _args: &[i64], _index: &mut OrderedIndex, _read: &dyn Fn(Key) -> Option<Vec<u8>>) -> Vec<i64> {
        Vec::new()
    }
    /// Builds a node's ordered index from its freshly loaded records, before the run (a
    /// database has its secondary indexes when it opens): `read` as in [`Workload::answer`].
    fn build_index(&self, _node: u16, _nodes: u16, _index: &mut OrderedIndex, _read: &dyn Fn(Key) -> Option<Vec<u8>>) {}
    /// The spec to run, from the drawn one and the answers to its lookups (same order).
    /// `Err` stops the coordinator with that message (e.g. pre-allocated rows exhausted).
    fn resolve(&self, spec: &TxnSpec, _answers: &[Vec<i64>]) -> Result<TxnSpec, String> {
        Ok(spec.clone())
    }
    /// Transaction chopping (DrTM Sec. 4): the pieces the resolved `spec` runs as, in order,
    /// each a transaction of its own whose logic is `execute` on the piece. Only pieces that
    /// write nothing may come before the first that writes, and only those and that one may
    /// abort by the logic; every later piece can only conflict. Empty (the default): whole.
    fn chop(&self, _spec: &TxnSpec) -> Vec<TxnSpec> {
        Vec::new()
    }
    /// What `chop` cuts, for reports (`None`: nothing).
    fn chopping(&self) -> Option<String> {
        None
    }
    /// Whether `piece` (of `chop`) is deferred (DrTM Sec. 4.2, publish-subscribe): the
    /// coordinator does not run it but queues it on its machine, in the step its parent's
    /// previous piece commits, and the machine publishes the queue at the next epoch
    /// boundary. Deferred pieces come last and only conflict.
    fn deferred(&self, _piece: &TxnSpec) -> bool {
        false
    }
    /// The publication epoch of deferred pieces, ns (Sec. 4.2's "e.g., 20ms").
    fn publish_epoch_ns(&self) -> u64 {
        20_000_000
    }
    /// Whether a user abort of this resolved spec means its answers went stale (execute saw
    /// other values than the lookups did) rather than a decision of the logic: the coordinator
    /// then counts a conflict and retries with fresh lookups.
    fn retry_on_user_abort(&self, _spec: &TxnSpec) -> bool {
        false
    }
    /// The granule between `key`'s table and the row itself in a lock hierarchy (database >
    /// table > granule > row, multi-granularity locking): TPC-C's warehouse. `None` (the
    /// default): the node's partition of the table the key falls in.
    fn lock_group(&self, _key: Key) -> Option<u64> {
        None
    }
    /// The most records of each table (id, count) one transaction accesses, when more than a
    /// few dozen: the runner sizes each coordinator's scratch memory for them.
    fn max_accesses(&self) -> Vec<(u16, u32)> {
        Vec::new()
    }
    /// Checks the workload's consistency conditions (TPC-C 3.3.2) over the records `node`
    /// owns, at the end of a run; `read.read` puts a record of this node into the buffer
    /// (sized to the record) and says true, or false for a record not on this node. Into a
    /// buffer the check reuses: a TPC-C check reads tens of millions of records, and leaves out
    /// rows `read.untouched` says still hold what loading put there when it knows what those
    /// hold (TPC-C: the empty order slots past a district's next order).
    fn check_consistency(&self, _node: u16, _nodes: u16, _read: ReadInto) -> Vec<Consistency> {
        Vec::new()
    }
}

/// A coordinator and how many transactions it has drawn before this one.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Terminal {
    pub worker: u16,
    pub coroutine: u32,
    pub seq: u64,
}

/// A question for the node that owns `key` (see [`Workload::lookups`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lookup {
    pub key: Key,
    pub args: Vec<i64>,
}

/// A node's ordered secondary indexes, kept by the node that owns the rows and searched by
/// [`Workload::answer`]: entries in byte order (big-endian keys sort numerically), and marks
/// (e.g. how far an index has caught up with inserts it learns of from the store).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderedIndex {
    pub entries: std::collections::BTreeMap<Vec<u8>, u64>,
    pub marks: std::collections::BTreeMap<Vec<u8>, u64>,
}

impl OrderedIndex {
    /// The entries whose key starts with `prefix`, in order.
    pub fn prefixed<'a>(&'a self, prefix: &'a [u8]) -> impl Iterator<Item = (&'a Vec<u8>, &'a u64)> + 'a {
        self.entries.range(prefix.to_vec()..).take_while(move |(k, _)| k.starts_with(prefix))
    }
}

/// One consistency condition over a node's share of the database at the end of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Consistency {
    /// What is checked, e.g. "TPC-C 3.3.2.1: W_YTD = sum(D_YTD)".
    pub name: String,
    /// Units checked (warehouses, districts) and how many violate the condition.
    pub checked: u64,
    pub violations: u64,
    /// The first violation, explained.
    pub first: Option<String>,
}

/// A deterministic serial executor over an in-memory map, for tests and as the reference a
/// protocol's results can be compared with.
pub struct SerialStore {
    pub values: std::collections::BTreeMap<Key, Vec<u8>>,
    /// The ordered index lookups are answered from (one for the whole store).
    pub index: OrderedIndex,
}

impl SerialStore {
    pub fn new() -> Self {
        SerialStore { values: std::collections::BTreeMap::new(), index: OrderedIndex::default() }
    }
    /// The current value of `k` (its initial value until written).
    pub fn value(&self, w: &dyn Workload, k: Key) -> Vec<u8> {
        self.values.get(&k).cloned().unwrap_or_else(|| w.initial(k))
    }
    /// Answers `spec`'s lookups from this store and resolves it (a drawn spec without lookups
    /// comes back unchanged).
    pub fn resolve(&mut self, w: &dyn Workload, spec: &TxnSpec) -> Result<TxnSpec, String> {
        let lookups = w.lookups(spec);
        if lookups.is_empty() {
            return Ok(spec.clone());
        }
        let values = &self.values;
        let read = |k: Key| Some(values.get(&k).cloned().unwrap_or_else(|| w.initial(k)));
        let answers: Vec<Vec<i64>> = lookups.iter().map(|l| w.answer(&l.args, &mut self.index, &read)).collect();
        w.resolve(spec, &answers)
    }
    /// Resolves a drawn spec, then runs it.
    pub fn run_drawn(&mut self, w: &dyn Workload, spec: &TxnSpec) -> Result<(TxnSpec, Executed), String> {
        let t = self.resolve(w, spec)?;
        let out = self.run(w, &t);
        Ok((t, out))
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
