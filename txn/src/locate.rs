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
    /// Blocks of `BLOCK_SLOTS` slots, `SLOT_BYTES` each, in the order they were first written.
    entries: txbed_transport::ZeroedBytes,
    /// Per block of slots (direct-mapped): 0 while never written, else 1 + its place in
    /// `entries`. Packing the blocks in use makes them share pages: written where they map,
    /// each of a large cache's first puts faulted in a page of its own (a third of a
    /// 16-node run's page faults).
    blocks: Vec<u32>,
    used: usize,
    slots: usize,
    pub stats: CacheStats,
}

/// Slots per block of `LocationCache::entries`: small, so a put makes little of a page its
/// own, and enough that the block index is a small part of the cache.
const BLOCK_SLOTS: usize = 4;
const BLOCK_BYTES: usize = BLOCK_SLOTS * SLOT_BYTES;

impl LocationCache {
    /// Host memory a cache of `capacity_bytes` takes at most (its slots are reserved up
    /// front, made as used), or None if that overflows.
    pub fn bytes_for(capacity_bytes: u64) -> Option<u64> {
        let blocks = (capacity_bytes / BUCKET_BYTES).div_ceil(BLOCK_SLOTS as u64);
        blocks.checked_mul(BLOCK_BYTES as u64 + 4)
    }

    /// A cache of `capacity_bytes` worth of buckets (0 disables it).
    pub fn new(capacity_bytes: u64) -> Self {
        let slots = (capacity_bytes / BUCKET_BYTES) as usize;
        let blocks = slots.div_ceil(BLOCK_SLOTS);
        LocationCache {
            entries: txbed_transport::ZeroedBytes::new(blocks * BLOCK_BYTES),
            blocks: vec![0; blocks],
            used: 0,
            slots,
            stats: CacheStats::default(),
        }
    }

    /// The slot a bucket maps to.
    fn slot(&self, node: u16, table: u16, offset: u64) -> Option<usize> {
        if self.slots == 0 {
            return None;
        }
        Some(bucket_of(((node as u64) << 48) ^ ((table as u64) << 40) ^ offset, self.slots as u64) as usize)
    }

    /// Where slot `h`'s bytes are, if its block was ever written (else they are zero: empty).
    fn bytes_of(&self, h: usize) -> Option<std::ops::Range<usize>> {
        let b = self.blocks[h / BLOCK_SLOTS] as usize;
        let at = b.checked_sub(1)? * BLOCK_BYTES + h % BLOCK_SLOTS * SLOT_BYTES;
        Some(at..at + SLOT_BYTES)
    }

    /// Whether slot bytes `e` hold this very bucket.
    fn holds(e: &[u8], node: u16, table: u16, offset: u64) -> bool {
        let u16_at = |at: usize| u16::from_le_bytes([e[at], e[at + 1]]);
        e[0] == 1
            && u16_at(AT_NODE) == node
            && u16_at(AT_TABLE) == table
            && e[AT_OFFSET..AT_BUCKET] == offset.to_le_bytes()
    }

    pub fn get(&mut self, node: u16, table: u16, offset: u64) -> Option<[u8; BUCKET_BYTES as usize]> {
        let h = self.slot(node, table, offset)?;
        let hit = self.bytes_of(h).filter(|r| Self::holds(&self.entries[r.clone()], node, table, offset));
        let Some(r) = hit else {
            self.stats.misses += 1;
            return None;
        };
        self.stats.hits += 1;
        let mut b = [0u8; BUCKET_BYTES as usize];
        b.copy_from_slice(&self.entries[r][AT_BUCKET..]);
        Some(b)
    }

    pub fn put(&mut self, node: u16, table: u16, offset: u64, bytes: &[u8]) {
        let Some(h) = self.slot(node, table, offset) else { return };
        if self.blocks[h / BLOCK_SLOTS] == 0 {
            self.used += 1;
            self.blocks[h / BLOCK_SLOTS] = self.used as u32;
        }
        let r = self.bytes_of(h).expect("a block just given its place");
        let e = &mut self.entries[r];
        e[0] = 1;
        e[AT_NODE..AT_TABLE].copy_from_slice(&node.to_le_bytes());
        e[AT_TABLE..AT_OFFSET].copy_from_slice(&table.to_le_bytes());
        e[AT_OFFSET..AT_BUCKET].copy_from_slice(&offset.to_le_bytes());
        e[AT_BUCKET..].copy_from_slice(&bytes[..BUCKET_BYTES as usize]);
    }

    /// Drops every cached bucket of the chain `key` hashes to on `node`.
    pub fn invalidate(&mut self, node: u16, table: u16, offsets: &[u64]) {
        self.stats.stale += 1;
        for &o in offsets {
            let Some(r) = self.slot(node, table, o).and_then(|h| self.bytes_of(h)) else { continue };
            if Self::holds(&self.entries[r.clone()], node, table, o) {
                self.entries[r.start] = 0;
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

    /// Against a model of a direct-mapped cache (the last bucket put in each slot, until
    /// invalidated): a slot in a block never written is a miss without being read, every
    /// bucket put is found until replaced or invalidated, and blocks are packed in the order
    /// first written, slots of one block side by side.
    #[test]
    fn a_large_cache_agrees_with_a_model_across_blocks() {
        let mut c = LocationCache::new(4096 * BUCKET_BYTES);
        let mut model = std::collections::BTreeMap::new();
        let mut blocks = Vec::new();
        let mut x = 7u64;
        for i in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let (node, offset) = ((x >> 62) as u16, (x >> 20) % 1500 * BUCKET_BYTES);
            let slot = c.slot(node, 1, offset).unwrap();
            if i % 3 == 0 {
                let bucket = [(i % 251) as u8; BUCKET_BYTES as usize];
                c.put(node, 1, offset, &bucket);
                model.insert(slot, (node, offset, bucket));
                if !blocks.contains(&(slot / BLOCK_SLOTS)) {
                    blocks.push(slot / BLOCK_SLOTS);
                }
                let at = blocks.iter().position(|&b| b == slot / BLOCK_SLOTS).unwrap();
                let r = c.bytes_of(slot).unwrap();
                assert_eq!(
                    r.start,
                    at * BLOCK_BYTES + slot % BLOCK_SLOTS * SLOT_BYTES,
                    "packed in first-written order"
                );
            } else if i % 11 == 1 {
                c.invalidate(node, 1, &[offset]);
                if model.get(&slot).is_some_and(|(n, o, _)| (*n, *o) == (node, offset)) {
                    model.remove(&slot);
                }
            } else {
                let want = model.get(&slot).filter(|(n, o, _)| (*n, *o) == (node, offset)).map(|(_, _, b)| *b);
                assert_eq!(c.get(node, 1, offset), want, "node {node} offset {offset}");
            }
        }
        assert_eq!(c.used, blocks.len());
        assert!(c.used < c.blocks.len(), "some blocks never written: {} of {}", c.used, c.blocks.len());
        assert!(c.stats.hits > 1000 && c.stats.misses > 1000 && c.stats.stale > 100, "{:?}", c.stats);
    }
}
