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
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % buckets
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

/// Loads a node's partition of a table: tuples for `keys` (incarnation 1, version 0, their
/// initial records, which `initial(key, record)` writes into the zeroed record) and the index over them, written through the node's own memory. Returns
/// the number of indirect buckets used, or `None` if the pool ran out (raise the layout's
/// load factor headroom).
pub fn load_table(
    mem: &dyn HostMemory,
    region: MemoryRegion,
    place: &TablePlace,
    keys: &[u64],
    initial: &dyn Fn(u64, &mut [u8]),
) -> Result<Option<u64>, MemError> {
    if keys.len() as u64 > place.spec.rows_per_node {
        return Ok(None);
    }
    // Buckets, pool and tuples are contiguous (`Layout`): one pass over them in place (a
    // memory that can lend its bytes is filled without copies; others copy in and out). A
    // write per tuple and a read per bucket probe once made loading most of a large run's
    // wall time.
    let index_len = ((place.buckets + place.pool) * BUCKET_BYTES) as usize;
    let len = index_len + keys.len() * place.tuple_bytes as usize;
    let mut used = None;
    mem.update(region.addr + place.buckets_at, len, &mut |area| {
        let (index, tuples) = area.split_at_mut(index_len);
        let fresh = index.iter().all(|&b| b == 0);
        used = fill_table(place, keys, initial, index, tuples, fresh);
    })?;
    Ok(used)
}

/// `load_table` on the table's memory: `index` its buckets then its pool, `tuples` its first
/// `keys.len()` tuples. `by_bucket` (a fresh, zero index): insert bucket by bucket.
fn fill_table(
    place: &TablePlace,
    keys: &[u64],
    initial: &dyn Fn(u64, &mut [u8]),
    index: &mut [u8],
    tuples: &mut [u8],
    by_bucket: bool,
) -> Option<u64> {
    let tb = place.tuple_bytes as usize;
    for (row, &key) in keys.iter().enumerate() {
        let tuple = &mut tuples[row * tb..(row + 1) * tb];
        tuple.fill(0);
        tuple[VERSION as usize..VERSION as usize + 8].copy_from_slice(&version_word(1, 0).to_le_bytes());
        initial(key, &mut tuple[META_BYTES as usize..META_BYTES as usize + place.spec.record_bytes as usize]);
    }
    // The index: keys inserted bucket by bucket (each bucket's keys in key order) touch the
    // index in address order instead of at random, the cache misses that were most of a
    // large run's set-up; the pool buckets chains overflow into are numbered as inserting in
    // key order numbers them (`pool_order`), so the index is byte for byte the same.
    let (order, pool_of) = match by_bucket {
        true => pool_order(keys, place.buckets),
        false => (keys.iter().enumerate().map(|(row, &k)| (k, row as u32)).collect(), Vec::new()),
    };
    // Offsets in `index`: the pool follows the buckets.
    let image_at = |offset: u64| (offset - place.buckets_at) as usize;
    let mut pool_used = 0u64;
    for &(key, row) in &order {
        let row = row as usize;
        let toff = place.tuples_at + row as u64 * place.tuple_bytes;
        // Insert into the chain of the key's bucket.
        let mut bucket = place.buckets_at + bucket_of(key, place.buckets) * BUCKET_BYTES;
        'insert: loop {
            let at = image_at(bucket);
            for i in 0..BUCKET_SLOTS {
                match decode_slot(&index[at + i * 16..at + i * 16 + 16]) {
                    Slot::Empty => {
                        let s = encode_slot(Slot::Entry { key, offset: toff, incarnation: 1 });
                        index[at + i * 16..at + i * 16 + 16].copy_from_slice(&s);
                        break 'insert;
                    }
                    Slot::Link { offset } => {
                        bucket = offset;
                        continue 'insert;
                    }
                    Slot::Entry { .. } => {}
                }
            }
            // Full: move the last entry into a fresh indirect bucket and link to it.
            let next = match pool_of.get(row) {
                Some(&p) => p as u64,
                None => pool_used,
            };
            if next >= place.pool {
                return None;
            }
            let fresh = place.pool_at + next * BUCKET_BYTES;
            pool_used += 1;
            let last = at + (BUCKET_SLOTS - 1) * 16;
            let moved: [u8; 16] = index[last..last + 16].try_into().expect("16 bytes");
            let f = image_at(fresh);
            index[f..f + 16].copy_from_slice(&moved);
            index[last..last + 16].copy_from_slice(&encode_slot(Slot::Link { offset: fresh }));
            bucket = fresh;
        }
    }
    Some(pool_used)
}

/// For loading `keys` into a fresh index of `buckets` buckets: (key, row) in bucket order
/// (stable: a bucket's rows in key order), and, per row, the pool bucket its insertion
/// takes if it overflows its chain, numbered in key order as `load_table` used to insert.
/// A chain's tail bucket fills to `BUCKET_SLOTS`; the next key moves the last entry into a
/// fresh pool bucket, which then holds that entry and the new key.
fn pool_order(keys: &[u64], buckets: u64) -> (Vec<(u64, u32)>, Vec<u32>) {
    let bucket: Vec<u32> = keys.iter().map(|&k| bucket_of(k, buckets) as u32).collect();
    let mut tail_filled = vec![0u8; buckets as usize];
    let mut pool_of = vec![u32::MAX; keys.len()];
    let mut next_pool = 0u32;
    for (row, &b) in bucket.iter().enumerate() {
        let f = &mut tail_filled[b as usize];
        if (*f as usize) < BUCKET_SLOTS {
            *f += 1;
        } else {
            pool_of[row] = next_pool;
            next_pool += 1;
            *f = 2;
        }
    }
    // A counting sort by bucket.
    let mut start = vec![0u32; buckets as usize + 1];
    for &b in &bucket {
        start[b as usize + 1] += 1;
    }
    for i in 0..buckets as usize {
        start[i + 1] += start[i];
    }
    // (key, row): the insertion reads both without going back to `keys` at random.
    let mut order = vec![(0u64, 0u32); keys.len()];
    for (row, (&b, &key)) in bucket.iter().zip(keys).enumerate() {
        order[start[b as usize] as usize] = (key, row as u32);
        start[b as usize] += 1;
    }
    (order, pool_of)
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

    /// Loading bucket by bucket gives the index, byte for byte, that inserting in key order
    /// gives, chains spilling into the pool included (a full table: many overflow).
    #[test]
    fn loading_by_bucket_builds_the_same_index_as_in_key_order() {
        for (rows, load_factor) in [(1000u64, 0.9), (5000, 1.0), (64, 0.5)] {
            let layout = Layout::new(&[TableSpec { id: 1, record_bytes: 8, rows_per_node: rows }], load_factor);
            let place = &layout.tables[0];
            let keys: Vec<u64> = (0..rows).map(|i| (3u64 << 40) | (i * 7 + 3)).collect();
            let index_len = ((place.buckets + place.pool) * BUCKET_BYTES) as usize;
            let load = |by_bucket: bool| {
                let (mut index, mut tuples) =
                    (vec![0u8; index_len], vec![0u8; rows as usize * place.tuple_bytes as usize]);
                let init = |k: u64, r: &mut [u8]| r.copy_from_slice(&k.to_le_bytes());
                let used = fill_table(place, &keys, &init, &mut index, &mut tuples, by_bucket);
                (used, index, tuples)
            };
            let (a, b) = (load(true), load(false));
            assert!(a.0.is_some_and(|u| rows < 100 || u > 0), "{rows} rows: some chains overflow ({:?})", a.0);
            assert_eq!(a.0, b.0, "{rows} rows: pool buckets used");
            assert!(a.1 == b.1, "{rows} rows: the index differs");
            assert!(a.2 == b.2, "{rows} rows: the tuples differ");
        }
    }
}
