//! Registered memory as the real backends hold it: a boxed slice of `AtomicU64` words. Every
//! CPU access is a word-sized atomic, so an 8-byte CAS/FAA is atomic and a NIC (a NIC thread on
//! sockets, the RDMA NIC on verbs) may change words behind Rust's back; a multi-word read racing
//! a write can be torn, as on a real NIC. The slice never moves while it lives.

use std::sync::atomic::{AtomicU64, Ordering};

pub struct Words(Box<[AtomicU64]>);

impl Words {
    /// `bytes` rounded up to whole words (at least one), zeroed.
    pub fn new(bytes: u64) -> Words {
        let n = bytes.div_ceil(8).max(1) as usize;
        Words((0..n).map(|_| AtomicU64::new(0)).collect())
    }

    /// The words' address in this process (what a NIC registers).
    pub fn base(&self) -> u64 {
        self.0.as_ptr() as u64
    }

    pub fn as_slice(&self) -> &[AtomicU64] {
        &self.0
    }

    /// The word at byte offset `off` (a multiple of 8).
    pub fn word(&self, off: u64) -> &AtomicU64 {
        &self.0[(off / 8) as usize]
    }

    /// Copies `out.len()` bytes from byte offset `off`, word by word.
    pub fn read(&self, off: u64, out: &mut [u8]) {
        let (mut off, mut done) = (off, 0);
        while done < out.len() {
            let w = self.word(off).load(Ordering::Acquire).to_le_bytes();
            let from = (off % 8) as usize;
            let n = (8 - from).min(out.len() - done);
            out[done..done + n].copy_from_slice(&w[from..from + n]);
            done += n;
            off += n as u64;
        }
    }

    /// Writes `data` at byte offset `off`; whole words are stored, partial words merged with a
    /// CAS loop so concurrent writers of the word's other bytes are not lost.
    pub fn write(&self, off: u64, data: &[u8]) {
        let (mut off, mut done) = (off, 0);
        while done < data.len() {
            let from = (off % 8) as usize;
            let n = (8 - from).min(data.len() - done);
            let w = self.word(off);
            if n == 8 {
                w.store(u64::from_le_bytes(data[done..done + 8].try_into().expect("8 bytes")), Ordering::Release);
            } else {
                let _ = w.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                    let mut b = old.to_le_bytes();
                    b[from..from + n].copy_from_slice(&data[done..done + n]);
                    Some(u64::from_le_bytes(b))
                });
            }
            done += n;
            off += n as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_writes_and_reads_round_trip_across_words() {
        let w = Words::new(24);
        w.write(3, b"0123456789ab");
        let mut out = [0u8; 12];
        w.read(3, &mut out);
        assert_eq!(&out, b"0123456789ab");
        let mut all = [0u8; 24];
        w.read(0, &mut all);
        assert_eq!(&all[..3], &[0, 0, 0], "bytes before the write untouched");
        assert_eq!(&all[15..], &[0; 9], "bytes after the write untouched");
    }
}
