//! Finding a record: traverse the remote cluster-hashing index with one-sided READs, helped by
//! a per-node location cache that keeps whole buckets (DrTM Sec. 6.3, DrTM+H Sec. 5.1).
//!
//! The cache is direct-mapped by (node, table, bucket offset) with a byte budget; it is filled
//! on every miss, whichever primitive fetched the bucket. An entry can go stale when a key is
//! deleted and re-inserted elsewhere: the tuple's incarnation then differs from the slot's
//! lossy one, which the caller sees on the READ of the tuple (`Located::is_current`), drops the
//! entry and looks again.

use std::cell::RefCell;

use txbed_transport::{Ctx, LocalBuf, MemoryRegion, Op, RemoteBuf};

use crate::error::TxnError;
use crate::store::{bucket_of, incarnation_matches, probe, split_version_word, Layout, Probe, BUCKET_BYTES, VERSION};
use crate::wire::u64_at;

/// Where every node's store region is: known to all nodes after bootstrap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalog {
    pub layout: Layout,
    /// The store region of node `i` at index `i`.
    pub regions: Vec<MemoryRegion>,
}

impl Catalog {
    pub fn remote(&self, node: u16, offset: u64, len: u32) -> RemoteBuf {
        let r = self.regions[node as usize];
        RemoteBuf { rkey: r.rkey, addr: r.addr + offset, len }
    }
}

/// A cache slot's bytes: a tag (1 = holds a bucket), node, table, offset, the bucket. Slots
/// live in one zeroed allocation, so the operating system materializes only the pages of
/// slots ever filled (a cache sized for every bucket of a large cluster costs what is used;
/// `Vec<Option<T>>` would write every slot at start-up).
const SLOT_BYTES: usize = 1 + 2 + 2 + 8 + BUCKET_BYTES as usize;
const AT_NODE: usize = 1;
const AT_TABLE: usize = 3;
const AT_OFFSET: usize = 5;
const AT_BUCKET: usize = 13;
/// The operating system's page, as `LocationCache::written` tracks them.
const PAGE: usize = 4096;

/// Counters of a location cache, and the one-sided READs lookups issued on its misses (round
/// trips no stage reports: a stage counts its own verbs, not the lookups before them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub stale: u64,
    /// Bucket READs to remote nodes (one round trip each).
    pub reads: u64,
    pub read_bytes: u64,
}

impl CacheStats {
    pub fn add(&mut self, o: &CacheStats) {
        self.hits += o.hits;
        self.misses += o.misses;
        self.stale += o.stale;
        self.reads += o.reads;
        self.read_bytes += o.read_bytes;
    }
}

pub struct LocationCache {
    /// `SLOT_BYTES` per slot, direct-mapped.
    entries: txbed_transport::ZeroedBytes,
    /// One bit per 4 KiB page of `entries`: whether a slot in it was ever written. Reading a
    /// page never written maps the kernel's zero page, which the first write then copies: two
    /// page faults instead of one, on most misses of a large cache.
    written: Vec<u64>,
    slots: usize,
    pub stats: CacheStats,
}

impl LocationCache {
    /// Host memory a cache of `capacity_bytes` takes (its slots are allocated up front), or
    /// None if that overflows.
    pub fn bytes_for(capacity_bytes: u64) -> Option<u64> {
        (capacity_bytes / BUCKET_BYTES).checked_mul(SLOT_BYTES as u64)
    }

    /// A cache of `capacity_bytes` worth of buckets (0 disables it).
    pub fn new(capacity_bytes: u64) -> Self {
        let slots = (capacity_bytes / BUCKET_BYTES) as usize;
        LocationCache {
            entries: txbed_transport::ZeroedBytes::new(slots * SLOT_BYTES),
            written: vec![0; (slots * SLOT_BYTES).div_ceil(PAGE * 64)],
            slots,
            stats: CacheStats::default(),
        }
    }

    /// The slot (its bytes) a bucket maps to.
    fn slot(&self, node: u16, table: u16, offset: u64) -> Option<std::ops::Range<usize>> {
        if self.slots == 0 {
            return None;
        }
        let h = bucket_of(((node as u64) << 48) ^ ((table as u64) << 40) ^ offset, self.slots as u64) as usize;
        Some(h * SLOT_BYTES..(h + 1) * SLOT_BYTES)
    }

    /// Whether slot bytes `e` hold this very bucket.
    fn holds(e: &[u8], node: u16, table: u16, offset: u64) -> bool {
        let u16_at = |at: usize| u16::from_le_bytes([e[at], e[at + 1]]);
        e[0] == 1
            && u16_at(AT_NODE) == node
            && u16_at(AT_TABLE) == table
            && e[AT_OFFSET..AT_BUCKET] == offset.to_le_bytes()
    }

    /// Whether the slot's bytes were ever written (else they are zero: an empty slot).
    fn ever_written(&self, r: &std::ops::Range<usize>) -> bool {
        let bit = |at: usize| self.written[at / PAGE / 64] >> (at / PAGE % 64) & 1 == 1;
        bit(r.start) && bit(r.end - 1)
    }

    pub fn get(&mut self, node: u16, table: u16, offset: u64) -> Option<[u8; BUCKET_BYTES as usize]> {
        let r = self.slot(node, table, offset)?;
        if !self.ever_written(&r) {
            self.stats.misses += 1;
            return None;
        }
        let e = &self.entries[r];
        if Self::holds(e, node, table, offset) {
            self.stats.hits += 1;
            let mut b = [0u8; BUCKET_BYTES as usize];
            b.copy_from_slice(&e[AT_BUCKET..]);
            Some(b)
        } else {
            self.stats.misses += 1;
            None
        }
    }

    pub fn put(&mut self, node: u16, table: u16, offset: u64, bytes: &[u8]) {
        if let Some(r) = self.slot(node, table, offset) {
            for at in [r.start, r.end - 1] {
                self.written[at / PAGE / 64] |= 1 << (at / PAGE % 64);
            }
            let e = &mut self.entries[r];
            e[0] = 1;
            e[AT_NODE..AT_TABLE].copy_from_slice(&node.to_le_bytes());
            e[AT_TABLE..AT_OFFSET].copy_from_slice(&table.to_le_bytes());
            e[AT_OFFSET..AT_BUCKET].copy_from_slice(&offset.to_le_bytes());
            e[AT_BUCKET..].copy_from_slice(&bytes[..BUCKET_BYTES as usize]);
        }
    }

    /// Drops every cached bucket of the chain `key` hashes to on `node`.
    pub fn invalidate(&mut self, node: u16, table: u16, offsets: &[u64]) {
        self.stats.stale += 1;
        for &o in offsets {
            if let Some(r) = self.slot(node, table, o) {
                if self.ever_written(&r) && Self::holds(&self.entries[r.clone()], node, table, o) {
                    self.entries[r.start] = 0;
                }
            }
        }
    }
}

/// A located tuple.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    pub node: u16,
    /// Offset of the tuple from the node's region base.
    pub offset: u64,
    pub incarnation: u16,
    /// Bucket offsets walked (to invalidate if stale).
    pub chain: Vec<u64>,
    /// One-sided READs the lookup issued.
    pub reads: u32,
}

impl Located {
    /// Whether a tuple read at this location is still the key's (incarnation check).
    pub fn is_current(&self, tuple: &[u8]) -> bool {
        incarnation_matches(self.incarnation, split_version_word(u64_at(tuple, VERSION as usize)).0)
    }
}

/// Looks `key` up in `table` on `node` with one-sided READs into `scratch` (at least one
/// bucket), using and filling `cache`. Local lookups read local memory directly.
pub async fn locate(
    ctx: &Ctx,
    cat: &Catalog,
    cache: &RefCell<LocationCache>,
    scratch: LocalBuf,
    node: u16,
    table: u16,
    key: u64,
) -> Result<Located, TxnError> {
    let place = cat.layout.table(table).ok_or(TxnError::UnknownTable(table))?;
    let mut offset = place.buckets_at + bucket_of(key, place.buckets) * BUCKET_BYTES;
    let mut chain = Vec::new();
    let mut reads = 0;
    // A chain longer than the pool is corrupt; bound the walk.
    for _ in 0..=place.pool + 1 {
        chain.push(offset);
        let cached = cache.borrow_mut().get(node, table, offset);
        let bucket = match cached {
            Some(b) => b,
            None => {
                let mut b = [0u8; BUCKET_BYTES as usize];
                if node == ctx.me().node.0 {
                    ctx.read_local(cat.regions[node as usize].addr + offset, &mut b)?;
                } else {
                    let local = LocalBuf { len: BUCKET_BYTES as u32, ..scratch };
                    let qp = crate::post::record_qp(ctx, node, table, key)?;
                    let read = Op::Read { local, remote: cat.remote(node, offset, BUCKET_BYTES as u32) };
                    crate::post::room(ctx, qp, 1).await?;
                    ctx.post(qp, [(read, true)])?;
                    ctx.wait().await?;
                    ctx.read_local(scratch.addr, &mut b)?;
                    reads += 1;
                    let mut c = cache.borrow_mut();
                    c.stats.reads += 1;
                    c.stats.read_bytes += BUCKET_BYTES;
                }
                cache.borrow_mut().put(node, table, offset, &b);
                b
            }
        };
        match probe(&bucket, key) {
            Probe::Found { offset: t, incarnation } => {
                return Ok(Located { node, offset: t, incarnation, chain, reads });
            }
            Probe::Next { offset: next } => offset = next,
            Probe::Absent => return Err(TxnError::NotFound { node, table, key }),
        }
    }
    Err(TxnError::NotFound { node, table, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_returns_what_was_put_until_invalidated_or_evicted() {
        let mut c = LocationCache::new(64 * BUCKET_BYTES);
        let bucket: Vec<u8> = (0..BUCKET_BYTES as u8).collect();
        assert_eq!(c.get(3, 7, 4096), None);
        c.put(3, 7, 4096, &bucket);
        assert_eq!(c.get(3, 7, 4096).map(|b| b.to_vec()), Some(bucket.clone()));
        // Same slot bytes, another bucket's identity: a miss.
        assert_eq!(c.get(3, 8, 4096), None);
        assert_eq!(c.get(2, 7, 4096), None);
        c.invalidate(3, 7, &[4096]);
        assert_eq!(c.get(3, 7, 4096), None);
        assert_eq!((c.stats.hits, c.stats.misses, c.stats.stale), (1, 4, 1));
        // A disabled cache holds nothing.
        let mut off = LocationCache::new(0);
        off.put(1, 1, 0, &bucket);
        assert_eq!(off.get(1, 1, 0), None);
    }

    /// Against a model of a direct-mapped cache (the last bucket put in each slot), over
    /// many pages with slots straddling their boundaries: a slot in a page never written is a
    /// miss without being read, and every bucket put is found until it is replaced.
    #[test]
    fn a_large_cache_agrees_with_a_model_across_pages() {
        let mut c = LocationCache::new(4096 * BUCKET_BYTES);
        // A slot across a page boundary, first in a fresh cache: found once put.
        let straddles = (0..).map(|o| o * BUCKET_BYTES).find(|&o| {
            let r = c.slot(0, 1, o).unwrap();
            r.start / PAGE != (r.end - 1) / PAGE
        });
        let o = straddles.expect("some slot straddles a page");
        c.put(0, 1, o, &[9; BUCKET_BYTES as usize]);
        assert_eq!(c.get(0, 1, o), Some([9; BUCKET_BYTES as usize]));
        let mut c = LocationCache::new(4096 * BUCKET_BYTES);
        let mut model = std::collections::BTreeMap::new();
        let mut x = 7u64;
        for i in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let (node, offset) = ((x >> 62) as u16, (x >> 20) % 1500 * BUCKET_BYTES);
            let slot = c.slot(node, 1, offset).unwrap().start;
            if i % 3 == 0 {
                let bucket = [(i % 251) as u8; BUCKET_BYTES as usize];
                c.put(node, 1, offset, &bucket);
                model.insert(slot, (node, offset, bucket));
            } else {
                let want = model.get(&slot).filter(|(n, o, _)| (*n, *o) == (node, offset)).map(|(_, _, b)| *b);
                assert_eq!(c.get(node, 1, offset), want, "node {node} offset {offset}");
            }
        }
        assert!(c.stats.hits > 1000 && c.stats.misses > 1000, "{:?}", c.stats);
    }
}
