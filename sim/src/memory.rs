//! A node's registered memory in the simulator, shared by its CPU (workers) and its NIC.
//!
//! A one-sided READ is atomic only within each 64-byte cache line: the NIC DMA-reads the lines
//! one after another. The simulator models this by giving every line of an in-flight READ a
//! sample time. Any write (by a NIC or a CPU) first saves, for each pending READ it overlaps,
//! the old contents of the lines that READ had already sampled; lines sampled later see the new
//! bytes. When the READ completes, lines never saved are taken from memory as it is then.
//! A READ racing a WRITE can therefore return a torn record, but never a torn cache line.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use txbed_transport::{HostMemory, LazyFill, MemError, MemoryRegion, ZeroedBytes};

pub const CACHE_LINE: u64 = 64;

struct Region {
    mr: MemoryRegion,
    data: ZeroedBytes,
    /// Per `CHUNK` bytes of `data`: 0 when its bytes are real, else 1 + the index in `fills`
    /// of the filler that makes them on first touch (`HostMemory::load_lazily`), plus
    /// `READ` times the reads that took bytes from the filler (`FILLER`: the filler's part).
    lazy: Vec<u32>,
    /// Fillers and where their ranges start (offsets in `data`).
    fills: Vec<(u64, LazyFill)>,
}

/// Bytes a lazily loaded region materialises at a time: a quarter page, so a write makes a
/// few records or index chains, not a page of them (TPC-C's stock and order-line pages were
/// most of a large run's first touches); what a run never touches is never faulted in.
const CHUNK: u64 = 1024;

/// Reads of a lazy chunk are served from its filler, only the bytes read; the `MAKE_AFTER`-th
/// read makes the chunk, and a write makes it at once. Most pages a run touches it reads a few
/// times (an index bucket on lookup, lock and write-back; a random record) and never writes,
/// and making a page cost a page fault and a page of records or chains, where a read from the
/// filler makes only what it reads; a page read again and again (a hot read-only table) is
/// still made once.
const MAKE_AFTER: u32 = 8;
/// The count of filler reads, in a lazy entry's top bits.
const READ: u32 = 1 << 24;
const FILLER: u32 = READ - 1;

impl Region {
    /// Fills the chunks of `[off, off+len)` still lazy, but those a write (`overwrite`) is
    /// about to replace whole.
    fn materialise(&mut self, off: u64, len: u64, overwrite: bool) {
        if self.fills.is_empty() || len == 0 {
            return;
        }
        for c in off / CHUNK..=(off + len - 1) / CHUNK {
            let f = std::mem::take(&mut self.lazy[c as usize]);
            if f == 0 {
                continue;
            }
            let (a, b) = (c * CHUNK, ((c + 1) * CHUNK).min(self.data.len() as u64));
            if overwrite && off <= a && b <= off + len {
                continue;
            }
            let (at, fill) = &self.fills[(f & FILLER) as usize - 1];
            fill(a - at, &mut self.data[a as usize..b as usize]);
        }
    }

    /// The bytes from `off` into `out`: a lazy chunk gives them from its filler and stays lazy
    /// but for its `MAKE_AFTER`-th read, which makes it first.
    fn read(&mut self, off: u64, out: &mut [u8]) {
        let (mut at, end) = (off, off + out.len() as u64);
        while at < end {
            let next = ((at / CHUNK + 1) * CHUNK).min(end);
            let part = &mut out[(at - off) as usize..(next - off) as usize];
            let c = (at / CHUNK) as usize;
            match self.lazy.get(c).copied().unwrap_or(0) {
                0 => {}
                f if f / READ + 1 < MAKE_AFTER => {
                    self.lazy[c] = f + READ;
                    let (base, fill) = &self.fills[(f & FILLER) as usize - 1];
                    fill(at - base, part);
                    at = next;
                    continue;
                }
                _ => self.materialise(at, next - at, false),
            }
            part.copy_from_slice(&self.data[at as usize..next as usize]);
            at = next;
        }
    }

    /// The bytes from `off` into `out`, lazy pages' from their fill and left lazy.
    fn peek(&self, off: u64, out: &mut [u8]) {
        let (mut at, end) = (off, off + out.len() as u64);
        while at < end {
            let next = ((at / CHUNK + 1) * CHUNK).min(end);
            let part = &mut out[(at - off) as usize..(next - off) as usize];
            match self.lazy.get((at / CHUNK) as usize).copied().unwrap_or(0) {
                0 => part.copy_from_slice(&self.data[at as usize..next as usize]),
                f => {
                    let (base, fill) = &self.fills[(f & FILLER) as usize - 1];
                    fill(at - base, part);
                }
            }
            at = next;
        }
    }
}

struct PendingRead {
    id: u64,
    addr: u64,
    len: u64,
    /// Sample time of the first line and spacing between lines (picoseconds).
    t0_ps: u64,
    gap_ps: u64,
    saved: Vec<u8>,
    /// One bit per line: saved before a later write changed it.
    saved_mask: Vec<u64>,
}

impl PendingRead {
    fn first_line(&self) -> u64 {
        self.addr / CACHE_LINE
    }
}

/// The memory of one simulated node.
pub struct NodeMemory {
    /// The node's HTM regions, when the run models HTM: every NIC access is shown to it.
    htm: RefCell<Option<txbed_transport::htm::SharedHtm>>,
    regions: RefCell<Vec<Region>>,
    pending: RefCell<Vec<PendingRead>>,
    /// Current simulated time in picoseconds (shared clock of the simulation).
    clock_ps: Rc<Cell<u64>>,
    /// Counts of lines saved because a write raced a READ (observability for tests).
    pub torn_saves: Cell<u64>,
}

/// Address space layout: region `i` of a node starts at `REGION_BASE * (i + 1)`.
pub const REGION_BASE: u64 = 1 << 40;

impl NodeMemory {
    pub fn new(clock_ps: Rc<Cell<u64>>) -> Self {
        NodeMemory {
            htm: RefCell::new(None),
            regions: RefCell::new(Vec::new()),
            pending: RefCell::new(Vec::new()),
            clock_ps,
            torn_saves: Cell::new(0),
        }
    }

    /// Registers a zeroed region of `len` bytes with the given keys.
    pub fn register(&self, len: u64, rkey: u32, lkey: u32) -> MemoryRegion {
        let mut r = self.regions.borrow_mut();
        // Regions are REGION_BASE apart: a longer one would overlap the next.
        assert!(len <= REGION_BASE, "region of {len} bytes");
        let addr = REGION_BASE * (r.len() as u64 + 1);
        let mr = MemoryRegion { addr, len, rkey, lkey };
        r.push(Region { mr, data: ZeroedBytes::new(len as usize), lazy: Vec::new(), fills: Vec::new() });
        mr
    }

    /// Finds the region that holds `[addr, addr+len)`, checking the key if given.
    fn locate(&self, addr: u64, len: u64, rkey: Option<u32>, lkey: Option<u32>) -> Option<(usize, usize)> {
        let r = self.regions.borrow();
        let idx = (addr / REGION_BASE).checked_sub(1)? as usize;
        let reg = r.get(idx)?;
        if rkey.is_some_and(|k| k != reg.mr.rkey) || lkey.is_some_and(|k| k != reg.mr.lkey) {
            return None;
        }
        reg.mr.contains(addr, len).then(|| (idx, (addr - reg.mr.addr) as usize))
    }

    /// Whether a remote access with `rkey` to `[addr, addr+len)` is allowed.
    pub fn check_remote(&self, rkey: u32, addr: u64, len: u64) -> bool {
        self.locate(addr, len, Some(rkey), None).is_some()
    }

    /// Whether a local buffer with `lkey` is valid.
    pub fn check_local(&self, lkey: u32, addr: u64, len: u64) -> bool {
        self.locate(addr, len, None, Some(lkey)).is_some()
    }

    fn raw_read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        let (i, off) = self
            .locate(addr, out.len() as u64, None, None)
            .ok_or(MemError::OutOfBounds { addr, len: out.len() as u64 })?;
        self.regions.borrow_mut()[i].read(off as u64, out);
        Ok(())
    }

    /// Every write goes through here so in-flight READs can save what they already sampled.
    fn raw_write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let len = data.len() as u64;
        let (i, off) = self.locate(addr, len, None, None).ok_or(MemError::OutOfBounds { addr, len })?;
        // A READ in flight may save these lines' old bytes: they must be real then.
        let overwrite = self.pending.borrow().is_empty();
        self.regions.borrow_mut()[i].materialise(off as u64, len, overwrite);
        self.save_raced_lines(addr, len);
        self.regions.borrow_mut()[i].data[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn save_raced_lines(&self, addr: u64, len: u64) {
        let mut pending = self.pending.borrow_mut();
        if pending.is_empty() {
            return;
        }
        let now = self.clock_ps.get();
        let regions = self.regions.borrow();
        for p in pending.iter_mut() {
            let lo = addr.max(p.addr);
            let hi = (addr + len).min(p.addr + p.len);
            if lo >= hi {
                continue;
            }
            let first = p.first_line();
            for line in lo / CACHE_LINE..=(hi - 1) / CACHE_LINE {
                let k = (line - first) as usize;
                let sampled_at = p.t0_ps + k as u64 * p.gap_ps;
                if sampled_at >= now || p.saved_mask[k / 64] & (1 << (k % 64)) != 0 {
                    continue;
                }
                p.saved_mask[k / 64] |= 1 << (k % 64);
                // Copy the part of this line that the READ covers, as it was before the write.
                let a = (line * CACHE_LINE).max(p.addr);
                let b = ((line + 1) * CACHE_LINE).min(p.addr + p.len);
                let idx = (a / REGION_BASE - 1) as usize;
                let reg = &regions[idx];
                let src = (a - reg.mr.addr) as usize;
                let dst = (a - p.addr) as usize;
                p.saved[dst..dst + (b - a) as usize].copy_from_slice(&reg.data[src..src + (b - a) as usize]);
                self.torn_saves.set(self.torn_saves.get() + 1);
            }
        }
    }

    /// Shows the NIC's accesses to `htm` from now on (HTM's strong atomicity: a one-sided
    /// access to a line a region tracks aborts it).
    pub fn set_htm(&self, htm: txbed_transport::htm::SharedHtm) {
        *self.htm.borrow_mut() = Some(htm);
    }

    fn nic_access(&self, addr: u64, len: u64, write: bool) {
        if let Some(h) = self.htm.borrow().as_ref() {
            h.borrow_mut().access(txbed_transport::htm::Accessor::Nic, addr, len, write);
        }
    }

    /// Starts a READ whose lines are sampled from `t0_ps`, `gap_ps` apart. A READ inside one
    /// line is sampled at once and needs no tracking: its bytes go to `out` and this returns
    /// true.
    pub fn begin_read(&self, id: u64, addr: u64, len: u64, t0_ps: u64, gap_ps: u64, out: &mut Vec<u8>) -> bool {
        self.nic_access(addr, len, false);
        if addr / CACHE_LINE == (addr + len.max(1) - 1) / CACHE_LINE {
            out.clear();
            out.resize(len as usize, 0);
            self.raw_read(addr, out).expect("the NIC checks a READ's range first");
            return true;
        }
        debug_assert!(self.pending.borrow().iter().all(|p| p.id != id), "READ {id} begun twice");
        let lines = ((addr + len - 1) / CACHE_LINE - addr / CACHE_LINE + 1) as usize;
        self.pending.borrow_mut().push(PendingRead {
            id,
            addr,
            len,
            t0_ps,
            gap_ps,
            saved: vec![0; len as usize],
            saved_mask: vec![0; lines.div_ceil(64)],
        });
        false
    }

    /// Finishes a tracked READ: saved lines as they were, the rest from memory now.
    pub fn finish_read(&self, id: u64, out: &mut Vec<u8>) {
        let mut pending = self.pending.borrow_mut();
        let pos = pending.iter().position(|p| p.id == id).expect("finish_read of a READ begin_read tracks");
        let p = pending.swap_remove(pos);
        drop(pending);
        out.clear();
        out.resize(p.len as usize, 0);
        self.raw_read(p.addr, out).expect("checked at begin_read");
        let first = p.first_line();
        let lines = ((p.addr + p.len - 1) / CACHE_LINE - first + 1) as usize;
        for k in 0..lines {
            if p.saved_mask[k / 64] & (1 << (k % 64)) != 0 {
                let a = ((first + k as u64) * CACHE_LINE).max(p.addr);
                let b = ((first + k as u64 + 1) * CACHE_LINE).min(p.addr + p.len);
                let (s, e) = ((a - p.addr) as usize, (b - p.addr) as usize);
                out[s..e].copy_from_slice(&p.saved[s..e]);
            }
        }
    }

    /// NIC-side write (WRITE, atomic result, READ data landing in the requester's buffer).
    pub fn nic_write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.nic_access(addr, data.len() as u64, true);
        self.raw_write(addr, data)
    }

    pub fn nic_read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.nic_access(addr, out.len() as u64, false);
        self.raw_read(addr, out)
    }

    pub fn nic_load_u64(&self, addr: u64) -> u64 {
        self.nic_access(addr, 8, false);
        let mut b = [0u8; 8];
        self.raw_read(addr, &mut b).expect("the NIC checks an atomic's word first");
        u64::from_le_bytes(b)
    }
}

fn aligned(addr: u64) -> Result<(), MemError> {
    if addr % 8 == 0 {
        Ok(())
    } else {
        Err(MemError::Misaligned { addr })
    }
}

impl HostMemory for NodeMemory {
    fn regions(&self) -> Vec<MemoryRegion> {
        self.regions.borrow().iter().map(|r| r.mr).collect()
    }
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.raw_read(addr, out)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.raw_write(addr, data)
    }
    fn update(&self, addr: u64, len: usize, f: &mut dyn FnMut(&mut [u8])) -> Result<(), MemError> {
        let (i, off) =
            self.locate(addr, len as u64, None, None).ok_or(MemError::OutOfBounds { addr, len: len as u64 })?;
        self.regions.borrow_mut()[i].materialise(off as u64, len as u64, false);
        // As every write: in-flight READs first save what they sampled of these lines.
        self.save_raced_lines(addr, len as u64);
        f(&mut self.regions.borrow_mut()[i].data[off..off + len]);
        Ok(())
    }
    fn load_lazily(&self, addr: u64, len: u64, fill: LazyFill) -> Result<(), MemError> {
        let (i, off) = self.locate(addr, len, None, None).ok_or(MemError::OutOfBounds { addr, len })?;
        let off = off as u64;
        if len == 0 {
            return Ok(());
        }
        // READs in flight save the old bytes of lines they sampled: those must be real.
        if !self.pending.borrow().is_empty() {
            self.regions.borrow_mut()[i].materialise(off, len, false);
            self.save_raced_lines(addr, len);
        }
        let mut regions = self.regions.borrow_mut();
        let r = &mut regions[i];
        if r.lazy.is_empty() {
            r.lazy = vec![0; (r.data.len() as u64).div_ceil(CHUNK) as usize];
        }
        r.fills.push((off, fill.clone()));
        let id = r.fills.len() as u32;
        assert!(id <= FILLER, "more than 2^24 lazily loaded ranges in a region");
        // Chunks the range covers whole become lazy; one it shares with other bytes at either
        // end is filled now, so a lazy chunk always belongs to one filler alone.
        let (first, last) = (off / CHUNK, (off + len - 1) / CHUNK);
        for c in first..=last {
            let (a, b) = (c * CHUNK, ((c + 1) * CHUNK).min(r.data.len() as u64));
            if off <= a && b <= off + len {
                r.lazy[c as usize] = id;
            } else {
                r.materialise(a, b - a, false);
                let (lo, hi) = (a.max(off), b.min(off + len));
                fill(lo - off, &mut r.data[lo as usize..hi as usize]);
            }
        }
        Ok(())
    }
    fn peek(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        let (i, off) = self
            .locate(addr, out.len() as u64, None, None)
            .ok_or(MemError::OutOfBounds { addr, len: out.len() as u64 })?;
        self.regions.borrow()[i].peek(off as u64, out);
        Ok(())
    }
    fn untouched_since_load(&self, addr: u64, len: u64) -> bool {
        let Some((i, off)) = self.locate(addr, len, None, None) else { return false };
        let r = &self.regions.borrow()[i];
        let off = off as u64;
        !r.lazy.is_empty() && len > 0 && (off / CHUNK..=(off + len - 1) / CHUNK).all(|c| r.lazy[c as usize] != 0)
    }
    fn cas_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        aligned(addr)?;
        let old = self.load_u64(addr)?;
        if old == compare {
            self.raw_write(addr, &swap.to_le_bytes())?;
        }
        Ok(old)
    }
    fn faa_u64(&self, addr: u64, add: u64) -> Result<u64, MemError> {
        aligned(addr)?;
        let old = self.load_u64(addr)?;
        self.raw_write(addr, &old.wrapping_add(add).to_le_bytes())?;
        Ok(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte `i` of a lazily loaded range is `i * 7 % 251`.
    fn pattern(from: u64, out: &mut [u8]) {
        for (i, b) in out.iter_mut().enumerate() {
            *b = ((from + i as u64) * 7 % 251) as u8;
        }
    }

    /// A lazily loaded range reads as its fill whether read, peeked or partly written; a
    /// peek and reads leave pages lazy until the `MAKE_AFTER`-th read makes them, and a write
    /// lands in a made page.
    #[test]
    fn lazy_pages_read_as_their_fill_and_a_peek_leaves_them_lazy() {
        let mem = NodeMemory::new(Rc::new(Cell::new(0)));
        let r = mem.register(10 * CHUNK, 1, 1);
        // From 100 bytes in to 300 before the end: the first and last pages are made now.
        let (at, len) = (r.addr + 100, 10 * CHUNK - 400);
        mem.load_lazily(at, len, Rc::new(pattern)).unwrap();
        let expect = |from: u64, n: usize| {
            let mut v = vec![0u8; n];
            pattern(from, &mut v);
            v
        };
        assert!(!mem.untouched_since_load(at, 10), "a page shared with other bytes is made at once");
        assert!(mem.untouched_since_load(r.addr + CHUNK, CHUNK));
        // A peek over three pages, straddling two boundaries.
        let mut out = vec![0u8; 2 * CHUNK as usize + 10];
        let from = 2 * CHUNK - 5;
        mem.peek(r.addr + from, &mut out).unwrap();
        assert_eq!(out, expect(from - 100, out.len()));
        assert!(mem.untouched_since_load(r.addr + CHUNK, 4 * CHUNK), "a peek makes nothing");
        // A write in page 3 makes it; reads and peeks across it see the write and the fill.
        mem.write(r.addr + 3 * CHUNK + 8, b"written").unwrap();
        assert!(!mem.untouched_since_load(r.addr + 3 * CHUNK, 1));
        assert!(mem.untouched_since_load(r.addr + 4 * CHUNK, CHUNK));
        let mut want = expect(3 * CHUNK - 16 - 100, 2 * CHUNK as usize);
        want[24..31].copy_from_slice(b"written");
        let (mut peeked, mut read) = (vec![0u8; want.len()], vec![0u8; want.len()]);
        mem.peek(r.addr + 3 * CHUNK - 16, &mut peeked).unwrap();
        assert!(mem.untouched_since_load(r.addr + 2 * CHUNK, CHUNK));
        mem.read(r.addr + 3 * CHUNK - 16, &mut read).unwrap();
        assert!(mem.untouched_since_load(r.addr + 2 * CHUNK, CHUNK), "a read leaves its page lazy");
        assert_eq!(peeked, want);
        assert_eq!(read, want);
        for _ in 1..MAKE_AFTER - 1 {
            read.fill(0);
            mem.read(r.addr + 3 * CHUNK - 16, &mut read).unwrap();
            assert_eq!(read, want);
        }
        assert!(mem.untouched_since_load(r.addr + 2 * CHUNK, CHUNK), "read from the filler until the last read");
        read.fill(0);
        mem.read(r.addr + 3 * CHUNK - 16, &mut read).unwrap();
        assert!(!mem.untouched_since_load(r.addr + 2 * CHUNK, CHUNK), "the MAKE_AFTER-th read makes its page");
        assert!(mem.untouched_since_load(r.addr + 5 * CHUNK, CHUNK));
        assert_eq!(read, want);
        // A page read once, then written: the write lands on the fill, and reads see both.
        let mut once = vec![0u8; 32];
        mem.read(r.addr + 5 * CHUNK + 100, &mut once).unwrap();
        assert_eq!(once, expect(5 * CHUNK, 32));
        mem.write(r.addr + 5 * CHUNK + 110, b"late").unwrap();
        let mut after = expect(5 * CHUNK, 32);
        after[10..14].copy_from_slice(b"late");
        for _ in 0..MAKE_AFTER + 1 {
            mem.read(r.addr + 5 * CHUNK + 100, &mut once).unwrap();
            assert_eq!(once, after);
        }
        assert_eq!(
            mem.peek(r.addr + 10 * CHUNK - 4, &mut [0u8; 8]),
            Err(MemError::OutOfBounds { addr: r.addr + 10 * CHUNK - 4, len: 8 })
        );
    }
}
