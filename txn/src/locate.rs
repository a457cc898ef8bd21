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

#[derive(Clone)]
struct Cached {
    node: u16,
    table: u16,
    offset: u64,
    bytes: [u8; BUCKET_BYTES as usize],
}

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
    entries: Vec<Option<Cached>>,
    pub stats: CacheStats,
}

impl LocationCache {
    /// Host memory a cache of `capacity_bytes` takes (its slots are allocated up front), or
    /// None if that overflows.
    pub fn bytes_for(capacity_bytes: u64) -> Option<u64> {
        (capacity_bytes / BUCKET_BYTES).checked_mul(std::mem::size_of::<Option<Cached>>() as u64)
    }

    /// A cache of `capacity_bytes` worth of buckets (0 disables it).
    pub fn new(capacity_bytes: u64) -> Self {
        let n = (capacity_bytes / BUCKET_BYTES) as usize;
        LocationCache { entries: vec![None; n], stats: CacheStats::default() }
    }

    fn slot(&self, node: u16, table: u16, offset: u64) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let h = bucket_of(((node as u64) << 48) ^ ((table as u64) << 40) ^ offset, self.entries.len() as u64);
        Some(h as usize)
    }

    pub fn get(&mut self, node: u16, table: u16, offset: u64) -> Option<[u8; BUCKET_BYTES as usize]> {
        let i = self.slot(node, table, offset)?;
        match &self.entries[i] {
            Some(c) if c.node == node && c.table == table && c.offset == offset => {
                self.stats.hits += 1;
                Some(c.bytes)
            }
            _ => {
                self.stats.misses += 1;
                None
            }
        }
    }

    pub fn put(&mut self, node: u16, table: u16, offset: u64, bytes: &[u8]) {
        if let Some(i) = self.slot(node, table, offset) {
            let mut b = [0u8; BUCKET_BYTES as usize];
            b.copy_from_slice(&bytes[..BUCKET_BYTES as usize]);
            self.entries[i] = Some(Cached { node, table, offset, bytes: b });
        }
    }

    /// Drops every cached bucket of the chain `key` hashes to on `node`.
    pub fn invalidate(&mut self, node: u16, table: u16, offsets: &[u64]) {
        self.stats.stale += 1;
        for &o in offsets {
            if let Some(i) = self.slot(node, table, o) {
                if self.entries[i].as_ref().is_some_and(|c| c.node == node && c.table == table && c.offset == o) {
                    self.entries[i] = None;
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
