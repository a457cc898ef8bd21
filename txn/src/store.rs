//! The partitioned store: tuples in registered memory and the cluster-hashing index that
//! one-sided READs can traverse (DrTM Sec. 6.2), laid out identically on every node so any
//! node can compute remote addresses.
//!
//! Per node, one registered region holds, for each table:
//!
//! ```text
//! [ main buckets: buckets x 128 B ][ indirect buckets: pool x 128 B ][ tuples: rows x tuple ]
//! ```
//!
//! A bucket has 8 slots of 16 bytes: word 0 = type (2 bits) | lossy incarnation (14 bits) |
//! offset (48 bits, from the region base), word 1 = key. Type 1 points at a tuple, type 2 at
//! an indirect bucket (the last slot of a full bucket links on). A tuple is
//!
//! ```text
//! [ lock 8 | incarnation 16 bits, version 48 bits | writer 8 | record ]
//! ```
//!
//! `lock` and `version` are RCC Fig. 3's `lock | seq` (OCC uses the version as its sequence
//! number; NOWAIT keeps it for histories). `writer` (the id of the transaction that installed
//! the version) and `version` let a backend without ghost state recover the history from data.
//! The incarnation (DrTM Sec. 6.2) changes when a key is deleted and re-inserted; a location
//! cache entry whose lossy incarnation no longer matches the tuple's is stale, detected on the
//! READ that uses it. Bookkeeping beyond RCC's tuple: the writer word (8 B), the index slot
//! (16 B at 90% occupancy = 17.8 B) and the indirect pool (a third of the buckets, 5.9 B):
//! under 32 B per record.

use std::cell::RefCell;
use std::rc::Rc;

use txbed_transport::{HostMemory, MemError, MemoryRegion};

pub const BUCKET_SLOTS: usize = 8;
pub const SLOT_BYTES: u64 = 16;
pub const BUCKET_BYTES: u64 = BUCKET_SLOTS as u64 * SLOT_BYTES;
pub const META_BYTES: u64 = 24;
pub const LOCK: u64 = 0;
pub const VERSION: u64 = 8;
pub const WRITER: u64 = 16;
/// The lock and version words at the head of a tuple: what a lock that only re-checks a
/// version reads (`ops::lock_and_check`).
pub const LOCK_AND_VERSION: u64 = 16;
/// Default occupancy of main buckets (DrTM Table VI evaluates 50%, 75% and 90%).
pub const LOAD_FACTOR: f64 = 0.9;

/// Indirect buckets to reserve per thousand main buckets at a given occupancy: the chance
/// that a bucket overflows 8 slots (Poisson tail P(N > 8) at 8 x occupancy keys per bucket:
/// 2% at 50%, 15% at 75%, 28% at 90%, 37% at 100%) with ~15% margin. A fixed table rather than
/// `exp()` keeps layouts, hence addresses and digests, identical on every platform.
fn overflow_permille(load_factor: f64) -> u64 {
    match load_factor {
        f if f <= 0.5 => 40,
        f if f <= 0.76 => 190,
        f if f <= 0.91 => 330,
        f if f <= 1.01 => 450,
        _ => 1000,
    }
}

const TYPE_EMPTY: u64 = 0;
const TYPE_ENTRY: u64 = 1;
const TYPE_LINK: u64 = 2;

/// A table as the store sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSpec {
    pub id: u16,
    pub record_bytes: u32,
    /// Rows each node holds (the keys a node owns are given at load time).
    pub rows_per_node: u64,
}

/// Where one table lives inside a node's store region (same on every node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TablePlace {
    pub spec: TableSpec,
    /// Offsets from the region base.
    pub buckets_at: u64,
    pub buckets: u64,
    pub pool_at: u64,
    pub pool: u64,
    pub tuples_at: u64,
    pub tuple_bytes: u64,
    /// Offset of the protocol's extension inside a tuple (after the record).
    pub ext_at: u64,
}

/// The layout of the store region, identical on every node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The node's own partition of each table.
    pub tables: Vec<TablePlace>,
    /// Copies of other nodes' partitions kept in registered memory, for a protocol whose
    /// executors reach every replica with one-sided verbs (RedT; `Protocol::stores_replicas`):
    /// copy k of table t is table [`copy_table`]`(t, k)`, after the own tables.
    pub copies: Vec<TablePlace>,
    /// Log ring buffers: one per (sender node, sender worker), `ring_bytes` each, from
    /// `log_at` (DrTM+H Sec. 5.4).
    pub log_at: u64,
    pub ring_bytes: u64,
    pub log_workers: u16,
    /// The protocol's own area (`with_area`, `Protocol::area_bytes`): from `area_at`,
    /// `area_bytes` long; 0 when the protocol keeps none.
    pub area_at: u64,
    pub area_bytes: u64,
    pub bytes: u64,
}

fn align8(x: u64) -> u64 {
    x.div_ceil(8) * 8
}

fn checked_align8(x: u64) -> Option<u64> {
    x.checked_next_multiple_of(8)
}

/// Bucket of a key: SplitMix64 of the key, modulo the bucket count.
pub fn bucket_of(key: u64, buckets: u64) -> u64 {
    splitmix(key) % buckets
}

fn splitmix(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `bucket_of` for many keys into one bucket count: the modulo by multiplication (a 64-bit
/// division was most of hashing a table's keys at loading).
struct BucketsOf(strength_reduce::StrengthReducedU64);

impl BucketsOf {
    fn new(buckets: u64) -> BucketsOf {
        BucketsOf(strength_reduce::StrengthReducedU64::new(buckets))
    }

    fn of(&self, key: u64) -> u64 {
        splitmix(key) % self.0
    }
}

/// The version word: incarnation in the top 16 bits, version below.
pub fn version_word(incarnation: u16, version: u64) -> u64 {
    ((incarnation as u64) << 48) | (version & ((1 << 48) - 1))
}

pub fn split_version_word(w: u64) -> (u16, u64) {
    ((w >> 48) as u16, w & ((1 << 48) - 1))
}

/// Whether a slot's lossy (14-bit) incarnation matches a tuple's full one.
pub fn incarnation_matches(lossy: u16, full: u16) -> bool {
    lossy == full & 0x3fff
}

impl Layout {
    /// Sizes the region: main buckets at `load_factor` occupancy (DrTM evaluates 50-90%),
    /// and an indirect pool large enough for every overflow.
    pub fn new(tables: &[TableSpec], load_factor: f64) -> Layout {
        Self::with_ext(tables, load_factor, &|_| 0)
    }

    /// A layout whose tuples carry `ext(record_bytes)` bytes of protocol metadata after the
    /// record (rounded up to 8).
    pub fn with_ext(tables: &[TableSpec], load_factor: f64, ext: &dyn Fn(u64) -> u64) -> Layout {
        Self::try_with_ext(tables, load_factor, ext).expect("a store region of at most 2^64 bytes")
    }

    /// [`Layout::with_ext`], or None when a size overflows 64 bits (rows from user input).
    pub fn try_with_ext(tables: &[TableSpec], load_factor: f64, ext: &dyn Fn(u64) -> u64) -> Option<Layout> {
        let mut at: u64 = 0;
        let mut places = Vec::new();
        for t in tables {
            let slots = (t.rows_per_node as f64 / load_factor).ceil() as u64;
            let buckets = slots.div_ceil(BUCKET_SLOTS as u64).max(1);
            let pool = (buckets.checked_mul(overflow_permille(load_factor))? / 1000).checked_add(16)?;
            let ext_at = META_BYTES + align8(t.record_bytes as u64);
            let tuple_bytes = ext_at.checked_add(checked_align8(ext(align8(t.record_bytes as u64)))?)?;
            let buckets_at = at;
            let pool_at = buckets_at.checked_add(buckets.checked_mul(BUCKET_BYTES)?)?;
            let tuples_at = pool_at.checked_add(pool.checked_mul(BUCKET_BYTES)?)?;
            at = tuples_at.checked_add(t.rows_per_node.checked_mul(tuple_bytes)?)?;
            places.push(TablePlace {
                spec: t.clone(),
                buckets_at,
                buckets,
                pool_at,
                pool,
                tuples_at,
                tuple_bytes,
                ext_at,
            });
        }
        Some(Layout {
            tables: places,
            copies: Vec::new(),
            log_at: at,
            ring_bytes: 0,
            log_workers: 0,
            area_at: 0,
            area_bytes: 0,
            bytes: at.max(8),
        })
    }

    /// Adds copies of other partitions: `rows_times[k - 1]` is how many partitions' copy k
    /// one node holds at most (1 when data centers are the same size), so copy k of each
    /// table has room for that many times its rows. Call before `with_log`.
    pub fn try_with_copies(mut self, rows_times: &[u64], ext: &dyn Fn(u64) -> u64) -> Option<Layout> {
        if rows_times.is_empty() {
            return Some(self);
        }
        let mut specs = Vec::new();
        for (i, &times) in rows_times.iter().enumerate() {
            for t in &self.tables {
                let rows_per_node = t.spec.rows_per_node.checked_mul(times)?;
                specs.push(TableSpec { id: copy_table(t.spec.id, i as u16 + 1)?, rows_per_node, ..t.spec.clone() });
            }
        }
        let copies = Layout::try_with_ext(&specs, LOAD_FACTOR, ext)?;
        let at = checked_align8(self.bytes)?;
        for mut place in copies.tables {
            place.buckets_at = place.buckets_at.checked_add(at)?;
            place.pool_at = place.pool_at.checked_add(at)?;
            place.tuples_at = place.tuples_at.checked_add(at)?;
            self.copies.push(place);
        }
        self.bytes = at.checked_add(copies.bytes)?;
        self.log_at = self.bytes;
        Some(self)
    }

    /// Adds log rings for `nodes` x `workers` senders.
    pub fn with_log(self, nodes: u16, workers: u16, ring_bytes: u64) -> Layout {
        self.try_with_log(nodes, workers, ring_bytes).expect("a store region of at most 2^64 bytes")
    }

    /// [`Layout::with_log`], or None on overflow.
    pub fn try_with_log(mut self, nodes: u16, workers: u16, ring_bytes: u64) -> Option<Layout> {
        self.log_at = checked_align8(self.bytes)?;
        self.ring_bytes = checked_align8(ring_bytes)?;
        self.log_workers = workers;
        let rings = (nodes as u64 * workers as u64).checked_mul(self.ring_bytes)?;
        self.bytes = self.log_at.checked_add(rings)?;
        Some(self)
    }

    /// Offset of the ring a sender's worker writes into.
    pub fn ring(&self, sender: u16, worker: u16) -> u64 {
        self.log_at + (sender as u64 * self.log_workers as u64 + worker as u64) * self.ring_bytes
    }

    /// Appends the protocol's own area of `bytes` (64-byte aligned), after everything else.
    pub fn with_area(self, bytes: u64) -> Layout {
        self.try_with_area(bytes).expect("a store region of at most 2^64 bytes")
    }

    /// [`Layout::with_area`], or None on overflow.
    pub fn try_with_area(mut self, bytes: u64) -> Option<Layout> {
        if bytes == 0 {
            return Some(self);
        }
        self.area_at = self.bytes.checked_next_multiple_of(64)?;
        self.area_bytes = bytes;
        self.bytes = self.area_at.checked_add(bytes)?;
        Some(self)
    }

    /// A table by id: an own partition's, or a copy's ([`copy_table`]).
    pub fn table(&self, id: u16) -> Option<&TablePlace> {
        self.tables.iter().chain(&self.copies).find(|t| t.spec.id == id)
    }
}

/// Copies of a table are numbered from 1 in the id's top bits (workloads' table ids stay
/// below this).
pub const COPY_SHIFT: u32 = 11;
/// The most copies a table can have (besides the home's).
pub const MAX_COPIES: u16 = (u16::MAX >> COPY_SHIFT) as u16;

/// The id of copy `k` (1..=MAX_COPIES) of table `table`; copy 0 is the table itself.
pub fn copy_table(table: u16, k: u16) -> Option<u16> {
    (table >> COPY_SHIFT == 0 && k <= MAX_COPIES).then_some(table | (k << COPY_SHIFT))
}

/// (table, copy) of a table id.
pub fn copy_of(id: u16) -> (u16, u16) {
    (id & ((1 << COPY_SHIFT) - 1), id >> COPY_SHIFT)
}

/// A decoded index slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    Empty,
    /// A tuple at `offset` from the region base.
    Entry {
        key: u64,
        offset: u64,
        incarnation: u16,
    },
    /// The chain continues in the indirect bucket at `offset`.
    Link {
        offset: u64,
    },
}

pub fn encode_slot(s: Slot) -> [u8; 16] {
    let (w0, w1) = match s {
        Slot::Empty => (0, 0),
        Slot::Entry { key, offset, incarnation } => {
            ((TYPE_ENTRY << 62) | ((incarnation as u64 & 0x3fff) << 48) | (offset & ((1 << 48) - 1)), key)
        }
        Slot::Link { offset } => ((TYPE_LINK << 62) | (offset & ((1 << 48) - 1)), 0),
    };
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&w0.to_le_bytes());
    b[8..].copy_from_slice(&w1.to_le_bytes());
    b
}

pub fn decode_slot(b: &[u8]) -> Slot {
    let w0 = u64::from_le_bytes(b[..8].try_into().expect("16-byte slot"));
    let w1 = u64::from_le_bytes(b[8..16].try_into().expect("16-byte slot"));
    match w0 >> 62 {
        TYPE_ENTRY => Slot::Entry { key: w1, offset: w0 & ((1 << 48) - 1), incarnation: ((w0 >> 48) & 0x3fff) as u16 },
        TYPE_LINK => Slot::Link { offset: w0 & ((1 << 48) - 1) },
        TYPE_EMPTY => Slot::Empty,
        _ => Slot::Empty,
    }
}

/// What a bucket says about `key`: found (tuple offset, lossy incarnation), follow a link, or
/// absent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    Found { offset: u64, incarnation: u16 },
    Next { offset: u64 },
    Absent,
}

pub fn probe(bucket: &[u8], key: u64) -> Probe {
    for i in 0..BUCKET_SLOTS {
        match decode_slot(&bucket[i * 16..i * 16 + 16]) {
            Slot::Entry { key: k, offset, incarnation } if k == key => return Probe::Found { offset, incarnation },
            Slot::Link { offset } => return Probe::Next { offset },
            _ => {}
        }
    }
    Probe::Absent
}

/// The keys a table is loaded with, in row order.
#[derive(Clone, Debug)]
pub enum Keys {
    List(Vec<u64>),
    /// Runs of consecutive keys (a node's own rows, or those of the partitions it copies):
    /// nothing per key to keep.
    Ranges(Vec<std::ops::Range<u64>>),
}

impl Keys {
    pub fn len(&self) -> usize {
        match self {
            Keys::List(k) => k.len(),
            Keys::Ranges(r) => r.iter().map(|r| (r.end - r.start) as usize).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key of row `row` (< `len()`).
    pub fn get(&self, row: usize) -> u64 {
        match self {
            Keys::List(k) => k[row],
            Keys::Ranges(ranges) => {
                let mut row = row as u64;
                for r in ranges {
                    let n = r.end - r.start;
                    if row < n {
                        return r.start + row;
                    }
                    row -= n;
                }
                panic!("row past the keys")
            }
        }
    }

    /// `f(key)` for every key in row order (no iterator: a boxed one cost a dynamic call per
    /// key when loading).
    pub fn for_each(&self, mut f: impl FnMut(u64)) {
        match self {
            Keys::List(k) => k.iter().for_each(|&k| f(k)),
            Keys::Ranges(r) => r.iter().for_each(|r| r.clone().for_each(&mut f)),
        }
    }
}

/// Loads `keys` (row numbers, in order) into `place`'s table of `region`: the index and the
/// tuples, version 0 of incarnation 1, records from `initial(key, record)`. Returns the pool
/// buckets used, `None` when the keys do not fit (too many, or the overflow pool too small).
///
/// A memory that can defer it fills a part of the table when it is first touched
/// (`HostMemory::load_lazily`; others fill it now): a run reads a few thousand of millions
/// of records, and writing them all was most of a large run's wall time.
///
/// `partitions` keeps the partitions made so far: a table loaded with the keys and bucket
/// and pool counts of one before (a partition's copy on another node, in a process holding
/// every node) shares it.
pub fn load_table(
    mem: &dyn HostMemory,
    region: MemoryRegion,
    place: &TablePlace,
    keys: Keys,
    initial: Rc<dyn Fn(u64, &mut [u8])>,
    partitions: &Partitions,
) -> Result<Option<u64>, MemError> {
    if keys.len() as u64 > place.spec.rows_per_node {
        return Ok(None);
    }
    let Some(part) = partitions.get_or_make(keys, place.buckets, place.pool) else { return Ok(None) };
    let image = TableImage::of(place, part, initial);
    let used = image.part.overflows.len() as u64;
    let len = image.index_len + image.part.rows * place.tuple_bytes;
    let image = Rc::new(image);
    mem.load_lazily(region.addr + place.buckets_at, len, Rc::new(move |off, out| image.fill(off, out)))?;
    Ok(Some(used))
}

/// The partitions `load_table` made, by keys and bucket and pool counts: a run whose nodes
/// share a process makes each once for a partition and all its copies.
#[derive(Default)]
pub struct Partitions(RefCell<Vec<((Vec<std::ops::Range<u64>>, u64, u64), Rc<Partition>)>>);

impl Partitions {
    /// The partition of `keys` into `buckets` buckets and `pool` overflow buckets, made now
    /// unless made before (keys as ranges only: a list is made every time). `None` when the
    /// pool is too small.
    fn get_or_make(&self, keys: Keys, buckets: u64, pool: u64) -> Option<Rc<Partition>> {
        let Keys::Ranges(ranges) = &keys else { return Partition::new(keys, buckets, pool).map(Rc::new) };
        let id = (ranges.clone(), buckets, pool);
        if let Some((_, p)) = self.0.borrow().iter().find(|(k, _)| *k == id) {
            return Some(p.clone());
        }
        let p = Rc::new(Partition::new(keys, buckets, pool)?);
        self.0.borrow_mut().push((id, p.clone()));
        Some(p)
    }
}

/// A table as loading makes it: buckets, then pool, then tuples (contiguous, `Layout`), any
/// part of which `fill` writes on demand. The index is the one inserting the keys in order
/// into an empty table gives, byte for byte (`tests`), built a chain at a time.
struct TableImage {
    place: TablePlace,
    part: Rc<Partition>,
    initial: Rc<dyn Fn(u64, &mut [u8])>,
    index_len: u64,
}

/// A table's keys partitioned by group of `GROUP` buckets, which is all of its index but the
/// offsets of its place in a region: loading only hashes the keys and partitions them (a
/// scatter into a few thousand sequential streams, which caches absorb; a scatter by bucket
/// missed the cache on every key and was most of set-up); a group is sorted by bucket when
/// first filled.
pub struct Partition {
    keys: Keys,
    /// `keys.len()`, and for ranges the row each range starts at: a row's key by binary
    /// search (`key`), where `Keys::get` walks the ranges (a TPC-C node's tables have one per
    /// warehouse and district).
    rows: u64,
    range_rows: Vec<u64>,
    buckets: u64,
    /// Rows by group, ascending within each; a group once sorted holds them by bucket, rows
    /// ascending within each bucket. A row's key is `key(row)`: for ranges, arithmetic.
    entries: RefCell<Vec<u32>>,
    /// The bucket in its group of each entry as loading placed them (sorting reads it once).
    local: Vec<u8>,
    group_start: Vec<u32>,
    /// Where each bucket's entries start, valid for the buckets of sorted groups.
    bucket_start: RefCell<Vec<u32>>,
    sorted: RefCell<Vec<bool>>,
    /// Rows whose insertion found their chain's tail full, ascending: the k-th of them took
    /// pool bucket k (as inserting in key order numbers them).
    overflows: Vec<u32>,
    /// (row, k) of `overflows` by group (`overflow_start[g]..overflow_start[g + 1]`), so
    /// making a chain finds its pool buckets among its group's few, not the whole table's.
    group_overflows: Vec<(u32, u32)>,
    overflow_start: Vec<u32>,
}

/// Host memory a `TableImage` keeps per row (its row and bucket in its group; keys are ranges)
/// and per bucket (where its entries start, its group's flag, loading's count, and the 8 B of
/// each overflow, at most one per pool bucket, a third as many), for memory estimates.
pub const IMAGE_BYTES_PER_ROW: u64 = 5;
pub const IMAGE_BYTES_PER_BUCKET: u64 = 8;

/// Buckets per group (`TableImage`): 4 KiB of buckets.
const GROUP: u64 = 32;

impl TableImage {
    /// `None` when the overflow pool is too small for these keys.
    #[cfg(test)]
    fn new(place: &TablePlace, keys: Keys, initial: Rc<dyn Fn(u64, &mut [u8])>) -> Option<TableImage> {
        let part = Partition::new(keys, place.buckets, place.pool)?;
        Some(TableImage::of(place, Rc::new(part), initial))
    }

    fn of(place: &TablePlace, part: Rc<Partition>, initial: Rc<dyn Fn(u64, &mut [u8])>) -> TableImage {
        debug_assert!(part.buckets == place.buckets);
        let index_len = (place.buckets + place.pool) * BUCKET_BYTES;
        TableImage { place: place.clone(), part, initial, index_len }
    }
}

impl Partition {
    /// `None` when the overflow pool is too small for these keys.
    fn new(keys: Keys, n_buckets: u64, pool: u64) -> Option<Partition> {
        let buckets = n_buckets as usize;
        let groups = n_buckets.div_ceil(GROUP) as usize;
        let buckets_of = BucketsOf::new(n_buckets);
        let mut bucket: Vec<u32> = Vec::with_capacity(keys.len());
        keys.for_each(|k| bucket.push(buckets_of.of(k) as u32));
        // A chain's tail fills to `BUCKET_SLOTS`; the next key moves the tail's last entry into
        // a fresh pool bucket, which then holds that entry and the new key.
        let mut tail_filled = vec![0u8; buckets];
        let mut overflows = Vec::new();
        let mut group_start = vec![0u32; groups + 1];
        for (row, &b) in bucket.iter().enumerate() {
            let f = &mut tail_filled[b as usize];
            if (*f as usize) < BUCKET_SLOTS {
                *f += 1;
            } else {
                overflows.push(row as u32);
                *f = 2;
            }
            group_start[b as usize / GROUP as usize + 1] += 1;
        }
        if overflows.len() as u64 > pool {
            return None;
        }
        for i in 0..groups {
            group_start[i + 1] += group_start[i];
        }
        let mut overflow_start = vec![0u32; groups + 1];
        for &row in &overflows {
            overflow_start[bucket[row as usize] as usize / GROUP as usize + 1] += 1;
        }
        for i in 0..groups {
            overflow_start[i + 1] += overflow_start[i];
        }
        let mut at = overflow_start.clone();
        let mut group_overflows = vec![(0u32, 0u32); overflows.len()];
        for (k, &row) in overflows.iter().enumerate() {
            let g = bucket[row as usize] as usize / GROUP as usize;
            group_overflows[at[g] as usize] = (row, k as u32);
            at[g] += 1;
        }
        let mut next = group_start.clone();
        let mut entries = vec![0u32; keys.len()];
        let mut local = vec![0u8; keys.len()];
        for (row, &b) in bucket.iter().enumerate() {
            let g = b as usize / GROUP as usize;
            let at = next[g] as usize;
            entries[at] = row as u32;
            local[at] = (b as u64 % GROUP) as u8;
            next[g] += 1;
        }
        let range_rows = match &keys {
            Keys::List(_) => Vec::new(),
            Keys::Ranges(r) => r
                .iter()
                .scan(0, |row, r| {
                    let first = *row;
                    *row += r.end - r.start;
                    Some(first)
                })
                .collect(),
        };
        Some(Partition {
            rows: keys.len() as u64,
            range_rows,
            keys,
            buckets: n_buckets,
            entries: RefCell::new(entries),
            local,
            group_start,
            bucket_start: RefCell::new(vec![0; buckets + 1]),
            sorted: RefCell::new(vec![false; groups]),
            overflows,
            group_overflows,
            overflow_start,
        })
    }

    /// The key of row `row`, as `Keys::get`.
    fn key(&self, row: u64) -> u64 {
        match &self.keys {
            Keys::List(k) => k[row as usize],
            Keys::Ranges(r) => {
                let i = self.range_rows.partition_point(|&first| first <= row) - 1;
                r[i].start + (row - self.range_rows[i])
            }
        }
    }

    /// Sorts the group of bucket `b` by bucket (stable) unless done, noting where each of its
    /// buckets starts.
    fn sort_group(&self, b: u64) {
        let g = (b / GROUP) as usize;
        if std::mem::replace(&mut self.sorted.borrow_mut()[g], true) {
            return;
        }
        let (lo, hi) = (self.group_start[g] as usize, self.group_start[g + 1] as usize);
        let first = g as u64 * GROUP;
        let mut entries = self.entries.borrow_mut();
        let group = &mut entries[lo..hi];
        let local = &self.local[lo..hi];
        let mut at = [0u32; GROUP as usize + 1];
        for &l in local {
            at[l as usize + 1] += 1;
        }
        for i in 0..GROUP as usize {
            at[i + 1] += at[i];
        }
        let mut starts = self.bucket_start.borrow_mut();
        for (i, &a) in at.iter().enumerate().take(GROUP.min(self.buckets - first) as usize + 1) {
            starts[first as usize + i] = lo as u32 + a;
        }
        let mut sorted = vec![0u32; group.len()];
        for (e, &l) in group.iter().zip(local) {
            sorted[at[l as usize] as usize] = *e;
            at[l as usize] += 1;
        }
        group.copy_from_slice(&sorted);
    }
}

impl TableImage {
    /// The buckets of bucket `b`'s chain, (offset from the region base, bytes): its main
    /// bucket, then the pool buckets its overflows took.
    fn chain(&self, b: u64, out: &mut Vec<(u64, [u8; BUCKET_BYTES as usize])>) {
        self.part.sort_group(b);
        let p = &self.place;
        out.clear();
        out.push((p.buckets_at + b * BUCKET_BYTES, [0; BUCKET_BYTES as usize]));
        let mut filled = 0;
        let starts = self.part.bucket_start.borrow();
        let entries = self.part.entries.borrow();
        for &row in &entries[starts[b as usize] as usize..starts[b as usize + 1] as usize] {
            let key = self.part.key(row as u64);
            let offset = p.tuples_at + row as u64 * p.tuple_bytes;
            let entry = encode_slot(Slot::Entry { key, offset, incarnation: 1 });
            if filled == BUCKET_SLOTS {
                // Loading counted this insertion's overflow: the k-th took pool bucket k.
                let g = (b / GROUP) as usize;
                let ours = &self.part.group_overflows
                    [self.part.overflow_start[g] as usize..self.part.overflow_start[g + 1] as usize];
                let &(_, pool) = ours.iter().find(|&&(r, _)| r == row).expect("an overflow loading counted");
                let fresh = p.pool_at + pool as u64 * BUCKET_BYTES;
                let tail = &mut out.last_mut().expect("a chain has its main bucket").1;
                let last = (BUCKET_SLOTS - 1) * SLOT_BYTES as usize;
                let mut bucket = [0u8; BUCKET_BYTES as usize];
                bucket[..SLOT_BYTES as usize].copy_from_slice(&tail[last..]);
                tail[last..].copy_from_slice(&encode_slot(Slot::Link { offset: fresh }));
                out.push((fresh, bucket));
                filled = 1;
            }
            let at = filled * SLOT_BYTES as usize;
            out.last_mut().expect("a chain has its main bucket").1[at..at + SLOT_BYTES as usize]
                .copy_from_slice(&entry);
            filled += 1;
        }
    }

    /// Writes the table's bytes from `off` (from its first bucket) into `out`.
    fn fill(&self, off: u64, out: &mut [u8]) {
        let p = &self.place;
        let (lo, hi) = (off, off + out.len() as u64);
        // Main buckets and tuples are written whole below; only unused pool buckets and bytes
        // past the last tuple are zeroed here (a page's first write is its costliest).
        let used_pool = p.buckets * BUCKET_BYTES + self.part.overflows.len() as u64 * BUCKET_BYTES;
        let tuples_end = self.index_len + self.part.rows * p.tuple_bytes;
        for (a, b) in [(used_pool, self.index_len), (tuples_end, u64::MAX)] {
            let (a, b) = (a.max(lo), b.min(hi));
            if a < b {
                out[(a - lo) as usize..(b - lo) as usize].fill(0);
            }
        }
        // Copies the part of `bytes` (at `at` from the first bucket) inside [lo, hi).
        let mut put = |at: u64, bytes: &[u8]| {
            let (a, b) = (at.max(lo), (at + bytes.len() as u64).min(hi));
            if a < b {
                out[(a - lo) as usize..(b - lo) as usize].copy_from_slice(&bytes[(a - at) as usize..(b - at) as usize]);
            }
        };
        let mut chain = Vec::new();
        let mut put_chain = |b: u64, put: &mut dyn FnMut(u64, &[u8])| {
            self.chain(b, &mut chain);
            for (at, bytes) in &chain {
                put(at - p.buckets_at, bytes);
            }
        };
        let main = p.buckets * BUCKET_BYTES;
        if lo < main {
            for b in lo / BUCKET_BYTES..=(hi.min(main) - 1) / BUCKET_BYTES {
                put_chain(b, &mut put);
            }
        }
        if lo < self.index_len && hi > main {
            let first = (lo.max(main) - main) / BUCKET_BYTES;
            let last = (hi.min(self.index_len) - 1 - main) / BUCKET_BYTES;
            // Pool buckets past the used ones stay zero.
            for k in first..=last {
                let Some(&row) = self.part.overflows.get(k as usize) else { break };
                put_chain(bucket_of(self.part.key(row as u64), p.buckets), &mut put);
            }
        }
        if hi > self.index_len {
            let tb = p.tuple_bytes;
            let first = (lo.max(self.index_len) - self.index_len) / tb;
            let last = ((hi - 1 - self.index_len) / tb).min(self.part.rows - 1);
            let mut tuple = vec![0u8; tb as usize];
            let record = META_BYTES as usize..(META_BYTES + p.spec.record_bytes as u64) as usize;
            for row in first..=last {
                tuple.fill(0);
                tuple[VERSION as usize..VERSION as usize + 8].copy_from_slice(&version_word(1, 0).to_le_bytes());
                (self.initial)(self.part.key(row), &mut tuple[record.clone()]);
                put(self.index_len + row * tb, &tuple);
            }
        }
    }
}

/// Looks `key` up in this node's own index, through its memory (participant side).
pub fn find_local(mem: &dyn HostMemory, base: u64, place: &TablePlace, key: u64) -> Option<u64> {
    let mut offset = place.buckets_at + bucket_of(key, place.buckets) * BUCKET_BYTES;
    for _ in 0..=place.pool + 1 {
        let mut b = [0u8; BUCKET_BYTES as usize];
        mem.read(base + offset, &mut b).ok()?;
        match probe(&b, key) {
            Probe::Found { offset, .. } => return Some(offset),
            Probe::Next { offset: next } => offset = next,
            Probe::Absent => return None,
        }
    }
    None
}

/// The key a history names: table in the top 16 bits, row below (as `workloads::Key`).
pub fn history_key(table: u16, row: u64) -> u64 {
    ((table as u64) << 48) | row
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition finds a row's key by binary search among its ranges, empty ones too, as
    /// `Keys::get` does by walking them.
    #[test]
    fn a_partition_finds_the_key_of_every_row() {
        let ranges = vec![100..103, 7..7, 50..51, 1000..1010, 3..3, 20..22];
        let keys = Keys::Ranges(ranges);
        let part = Partition::new(keys.clone(), 4, 16).expect("a pool large enough");
        assert_eq!(part.rows, 16);
        for row in 0..keys.len() {
            assert_eq!(part.key(row as u64), keys.get(row), "row {row}");
        }
        let list = Keys::List(vec![9, 4, 17]);
        let part = Partition::new(list.clone(), 2, 16).expect("a pool large enough");
        assert_eq!((0..3).map(|r| part.key(r)).collect::<Vec<_>>(), vec![9, 4, 17]);
    }

    /// Loading's modulo by multiplication gives `bucket_of`'s bucket for every key, bucket
    /// counts small and large, powers of two or not.
    #[test]
    fn loading_hashes_keys_into_the_buckets_lookups_probe() {
        let counts = [1, 2, 3, 7, 64, 1000, 133_334, (1 << 32) - 5, (1 << 40) + 17, u64::MAX];
        let keys = (0..2000u64).chain([u64::MAX, u64::MAX - 1, 1 << 48, (1 << 48) ^ (3 << 40)]);
        for n in counts {
            let of = BucketsOf::new(n);
            for k in keys.clone() {
                assert_eq!(of.of(k), bucket_of(k, n), "key {k} into {n} buckets");
            }
        }
    }

    /// The loading `load_table` did before images: insert each key in order into the chain of
    /// its bucket in an empty index, walking the chain; a full tail's last entry moves into the
    /// next free pool bucket. Returns (pool buckets used, the table's bytes).
    fn insert_in_key_order(place: &TablePlace, keys: &[u64], init: &dyn Fn(u64, &mut [u8])) -> (Option<u64>, Vec<u8>) {
        let index_len = ((place.buckets + place.pool) * BUCKET_BYTES) as usize;
        let tb = place.tuple_bytes as usize;
        let mut image = vec![0u8; index_len + keys.len() * tb];
        let (index, tuples) = image.split_at_mut(index_len);
        for (row, &key) in keys.iter().enumerate() {
            let tuple = &mut tuples[row * tb..(row + 1) * tb];
            tuple[VERSION as usize..VERSION as usize + 8].copy_from_slice(&version_word(1, 0).to_le_bytes());
            init(key, &mut tuple[META_BYTES as usize..META_BYTES as usize + place.spec.record_bytes as usize]);
        }
        let at = |offset: u64| (offset - place.buckets_at) as usize;
        let mut pool_used = 0u64;
        for (row, &key) in keys.iter().enumerate() {
            let toff = place.tuples_at + row as u64 * place.tuple_bytes;
            let mut bucket = place.buckets_at + bucket_of(key, place.buckets) * BUCKET_BYTES;
            'insert: loop {
                let b = at(bucket);
                for i in 0..BUCKET_SLOTS {
                    match decode_slot(&index[b + i * 16..b + i * 16 + 16]) {
                        Slot::Empty => {
                            let s = encode_slot(Slot::Entry { key, offset: toff, incarnation: 1 });
                            index[b + i * 16..b + i * 16 + 16].copy_from_slice(&s);
                            break 'insert;
                        }
                        Slot::Link { offset } => {
                            bucket = offset;
                            continue 'insert;
                        }
                        Slot::Entry { .. } => {}
                    }
                }
                if pool_used >= place.pool {
                    return (None, image);
                }
                let fresh = place.pool_at + pool_used * BUCKET_BYTES;
                pool_used += 1;
                let last = b + (BUCKET_SLOTS - 1) * 16;
                let moved: [u8; 16] = index[last..last + 16].try_into().expect("16 bytes");
                let f = at(fresh);
                index[f..f + 16].copy_from_slice(&moved);
                index[last..last + 16].copy_from_slice(&encode_slot(Slot::Link { offset: fresh }));
                bucket = fresh;
            }
        }
        (Some(pool_used), image)
    }

    /// A table's image, filled whole or in pieces of any size and alignment (as a memory
    /// filling on first touch asks for it), is byte for byte what inserting the keys in order
    /// gives, chains spilling into the pool included (a full table: many overflow).
    #[test]
    fn a_table_image_in_any_pieces_is_the_index_inserting_in_key_order_builds() {
        // 100,000 rows: thousands of groups, overflows in many of them.
        for (rows, load_factor) in [(1000u64, 0.9), (5000, 1.0), (64, 0.5), (1, 0.9), (100_000, 1.0)] {
            let layout = Layout::new(&[TableSpec { id: 1, record_bytes: 8, rows_per_node: rows }], load_factor);
            let place = &layout.tables[0];
            let keys: Vec<u64> = (0..rows).map(|i| (3u64 << 40) | (i * 7 + 3)).collect();
            let init = |k: u64, r: &mut [u8]| r.copy_from_slice(&k.to_le_bytes());
            let (used, want) = insert_in_key_order(place, &keys, &init);
            let image = TableImage::new(place, Keys::List(keys.clone()), Rc::new(init)).expect("the pool suffices");
            let ranged =
                TableImage::new(place, Keys::Ranges(vec![5..5 + rows]), Rc::new(init)).expect("the pool suffices");
            let ranged_keys: Vec<u64> = (5..5 + rows).collect();
            assert!(used.is_some_and(|u| rows < 100 || u > 0), "{rows} rows: some chains overflow ({used:?})");
            assert_eq!(used, Some(image.part.overflows.len() as u64), "{rows} rows: pool buckets used");
            // Keys given as a range make the image a list of the same keys makes.
            let (_, want_ranged) = insert_in_key_order(place, &ranged_keys, &init);
            for (image, want, what) in [(&image, &want, "a list"), (&ranged, &want_ranged, "a range")] {
                let pieces: &[usize] = if rows > 10_000 { &[4096, 1000] } else { &[want.len(), 4096, 1000, 77, 1] };
                for &piece in pieces {
                    // Pieces over stale bytes: a fill writes every byte of its piece.
                    let mut got = vec![0xa5u8; want.len()];
                    for (i, out) in got.chunks_mut(piece).enumerate() {
                        image.fill((i * piece) as u64, out);
                    }
                    assert!(got == *want, "{rows} rows from {what}, pieces of {piece} bytes: the image differs");
                }
            }
        }
    }

    /// Tables loaded with the same keys into as many buckets (a partition and its copy) share
    /// one partition, and fill, in pieces interleaved between them, what each fills alone.
    #[test]
    fn tables_with_the_same_keys_share_a_partition_and_fill_as_if_alone() {
        let spec = |id| TableSpec { id, record_bytes: 8, rows_per_node: 3000 };
        let layout = Layout::new(&[spec(1), spec(2)], 0.9);
        let (p1, p2) = (&layout.tables[0], &layout.tables[1]);
        assert_ne!(p1.buckets_at, p2.buckets_at);
        let init = |k: u64, r: &mut [u8]| r.copy_from_slice(&k.to_le_bytes());
        let keys = || Keys::Ranges(vec![3000..6000]);
        let parts = Partitions::default();
        let (a, b) = (parts.get_or_make(keys(), p1.buckets, p1.pool), parts.get_or_make(keys(), p2.buckets, p2.pool));
        let (a, b) = (a.expect("the pool suffices"), b.expect("the pool suffices"));
        assert!(Rc::ptr_eq(&a, &b), "one partition for both");
        let other = parts.get_or_make(Keys::Ranges(vec![0..3000]), p1.buckets, p1.pool).unwrap();
        assert!(!Rc::ptr_eq(&a, &other), "other keys, another partition");
        let shared = [TableImage::of(p1, a, Rc::new(init)), TableImage::of(p2, b, Rc::new(init))];
        let alone = [p1, p2].map(|p| TableImage::new(p, keys(), Rc::new(init)).expect("the pool suffices"));
        let len = (shared[0].index_len + 3000 * p1.tuple_bytes) as usize;
        let mut got = [vec![0u8; len], vec![0u8; len]];
        for start in (0..len).step_by(1000) {
            for (image, out) in shared.iter().zip(got.iter_mut()).rev() {
                let end = (start + 1000).min(len);
                image.fill(start as u64, &mut out[start..end]);
            }
        }
        for (image, got) in alone.iter().zip(&got) {
            let mut want = vec![0u8; len];
            image.fill(0, &mut want);
            assert!(want == *got, "a shared partition fills what one alone does");
        }
    }

    /// Keys the overflow pool cannot hold are refused, as inserting them would run out.
    #[test]
    fn a_table_whose_chains_outgrow_the_pool_is_refused() {
        let layout = Layout::new(&[TableSpec { id: 1, record_bytes: 8, rows_per_node: 4000 }], 0.5);
        let place = &layout.tables[0];
        // Four times the rows the layout was sized for, in as many buckets: chains overflow.
        let keys: Vec<u64> = (0..4 * place.buckets * BUCKET_SLOTS as u64).collect();
        let init = |_: u64, _: &mut [u8]| {};
        assert_eq!(insert_in_key_order(place, &keys, &init).0, None);
        assert!(TableImage::new(place, Keys::List(keys), Rc::new(init)).is_none());
    }
}
