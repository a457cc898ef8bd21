//! CPU access to a node's own registered memory.
//!
//! Protocol code never touches a remote node's memory except through verbs; its own node's
//! memory it reads and writes through this trait, so a backend can enforce the same rules the
//! NIC sees (the simulator records CPU writes that race a multi-line one-sided READ; the
//! sockets backend uses CPU atomics shared with its NIC thread).

use std::fmt;

use crate::verbs::MemoryRegion;

/// The filler `HostMemory::load_lazily` calls: (offset in the range, bytes to fill from it).
pub type LazyFill = std::rc::Rc<dyn Fn(u64, &mut [u8])>;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MemError {
    /// The range is not inside one registered region.
    OutOfBounds { addr: u64, len: u64 },
    /// An 8-byte atomic at an address that is not 8-byte aligned.
    Misaligned { addr: u64 },
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemError::OutOfBounds { addr, len } => {
                write!(f, "local access of {len} bytes at {addr:#x} is outside every registered region")
            }
            MemError::Misaligned { addr } => {
                write!(f, "8-byte atomic at {addr:#x} is not 8-byte aligned")
            }
        }
    }
}

impl std::error::Error for MemError {}

/// The node's registered memory as its CPU sees it.
pub trait HostMemory {
    /// All regions registered on this node, in registration order.
    fn regions(&self) -> Vec<MemoryRegion>;
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError>;
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError>;
    /// CPU compare-and-swap on an aligned word; returns the old value. Whether it is atomic
    /// with respect to NIC atomics depends on the NIC's atomicity level (HCA or GLOB).
    fn cas_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError>;
    /// CPU fetch-and-add on an aligned word; returns the old value.
    fn faa_u64(&self, addr: u64, add: u64) -> Result<u64, MemError>;

    /// `f` on the `len` bytes from `addr`, in place where the memory allows it (bulk loading
    /// without copies); by default they are read, given to `f` and written back.
    fn update(&self, addr: u64, len: usize, f: &mut dyn FnMut(&mut [u8])) -> Result<(), MemError> {
        let mut buf = vec![0u8; len];
        self.read(addr, &mut buf)?;
        f(&mut buf);
        self.write(addr, &buf)
    }

    /// Makes `[addr, addr+len)` hold what `fill` gives: `fill(offset, out)` writes the bytes
    /// from `addr + offset` into `out`. A memory that can defer it (the simulator's) fills a
    /// part when it is first touched, so a run pays for the records it uses, not for every
    /// record loaded; by default the whole range is filled now.
    fn load_lazily(&self, addr: u64, len: u64, fill: LazyFill) -> Result<(), MemError> {
        // In slices, so the default needs no buffer the size of a store.
        const SLICE: u64 = 1 << 20;
        let mut off = 0;
        while off < len {
            let n = SLICE.min(len - off);
            self.update(addr + off, n as usize, &mut |buf| fill(off, buf))?;
            off += n;
        }
        Ok(())
    }

    /// Whether `[addr, addr+len)` is untouched since `load_lazily` filled it, so still holds
    /// exactly what its fill gives (collecting results skips such records). A memory that
    /// does not track it says false.
    fn untouched_since_load(&self, _addr: u64, _len: u64) -> bool {
        false
    }

    /// `read`, leaving lazily loaded parts as they are (collecting results reads records
    /// beside touched ones; making their pages would spread from page to page).
    fn peek(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.read(addr, out)
    }

    fn load_u64(&self, addr: u64) -> Result<u64, MemError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn store_u64(&self, addr: u64, v: u64) -> Result<(), MemError> {
        self.write(addr, &v.to_le_bytes())
    }
}
