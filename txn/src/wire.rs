//! Reading and writing message fields, little-endian: [`Put`] appends them, [`Reader`] takes
//! them in order and fails with a [`WireError`] where a message is short or holds a value its
//! kind does not allow. Every RPC payload is a struct with `encode` and `decode` beside the
//! code that sends it: the shared handlers' in [`crate::msg`], a protocol's in its module.

use std::fmt;

/// Why a message did not decode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The message ends before a field: it needs `need` more bytes and has `have`.
    Short { need: usize, have: usize },
    /// Bytes after the last field.
    Trailing { extra: usize },
    /// A status byte no reply of this kind carries.
    Status(u8),
    /// The participant could not decode the request (it replied `node::MALFORMED`).
    Rejected,
    /// A field holds a value its message does not allow.
    Invalid(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Short { need, have } => write!(f, "message too short: a field needs {need} B, {have} B left"),
            WireError::Trailing { extra } => write!(f, "{extra} B after the message's last field"),
            WireError::Status(s) => write!(f, "unexpected reply status {s}"),
            WireError::Rejected => write!(f, "the participant could not decode the request"),
            WireError::Invalid(what) => write!(f, "malformed message: {what}"),
        }
    }
}

impl std::error::Error for WireError {}

/// `x` rounded up to a multiple of 8.
pub fn align8(x: usize) -> usize {
    x.div_ceil(8) * 8
}

/// Takes a message's fields in order.
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Reader { b, at: 0 }
    }

    /// Bytes not taken yet.
    pub fn remaining(&self) -> usize {
        self.b.len() - self.at
    }

    pub fn done(&self) -> bool {
        self.at == self.b.len()
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let have = self.remaining();
        if n > have {
            return Err(WireError::Short { need: n, have });
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    /// Skips `n` bytes of padding.
    pub fn skip(&mut self, n: usize) -> Result<(), WireError> {
        self.bytes(n).map(|_| ())
    }

    /// `n` bytes, then the padding to the next multiple of 8.
    pub fn padded(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let s = self.bytes(n)?;
        self.skip(align8(n) - n)?;
        Ok(s)
    }

    /// Everything left (a message's variable-length tail).
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, WireError> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, WireError> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, WireError> {
        self.array().map(u64::from_le_bytes)
    }

    pub fn i64(&mut self) -> Result<i64, WireError> {
        self.array().map(i64::from_le_bytes)
    }

    /// Fails if bytes are left: a fixed-size message ends here.
    pub fn finish(self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(WireError::Trailing { extra }),
        }
    }
}

/// Appends little-endian fields to a message.
pub trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_i64(&mut self, v: i64);
    fn put_zeros(&mut self, n: usize);
    fn put_bytes(&mut self, b: &[u8]);
    /// Zeros up to the next multiple of 8.
    fn pad8(&mut self);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_zeros(&mut self, n: usize) {
        self.resize(self.len() + n, 0);
    }
    fn put_bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn pad8(&mut self) {
        self.resize(align8(self.len()), 0);
    }
}

/// The word at byte `at` of a buffer whose size is an invariant (a tuple or a scratch copy of
/// a known layout, never a message): panics if the buffer is too short.
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    match b.get(at..at + 8) {
        Some(w) => u64::from_le_bytes(w.try_into().expect("8 bytes")),
        None => panic!("word at {at} of a {} B buffer: the buffer's layout is broken", b.len()),
    }
}

/// Writes the word at byte `at` of a buffer whose size is an invariant.
pub fn put_u64_at(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_short_input_is_an_error() {
        let mut m = Vec::new();
        m.put_u64(u64::MAX - 1);
        m.put_i64(-42);
        m.put_u32(0xdead_beef);
        m.put_u16(0x1234);
        m.put_u8(7);
        m.put_zeros(1);
        m.put_bytes(b"abc");
        m.pad8();
        assert_eq!(m.len(), 32);
        let mut r = Reader::new(&m);
        assert_eq!(r.u64(), Ok(u64::MAX - 1));
        assert_eq!(r.i64(), Ok(-42));
        assert_eq!(r.u32(), Ok(0xdead_beef));
        assert_eq!(r.u16(), Ok(0x1234));
        assert_eq!(r.u8(), Ok(7));
        r.skip(1).unwrap();
        assert_eq!(r.padded(3), Ok(&b"abc"[..]));
        assert!(r.done());
        assert_eq!(r.u8(), Err(WireError::Short { need: 1, have: 0 }));
        let mut r = Reader::new(&m[..5]);
        r.u8().unwrap();
        assert_eq!(r.u64(), Err(WireError::Short { need: 8, have: 4 }));
        let mut r = Reader::new(&m[..9]);
        r.u64().unwrap();
        assert_eq!(r.finish(), Err(WireError::Trailing { extra: 1 }));
    }

    #[test]
    fn fixed_offsets() {
        let mut b = vec![0u8; 16];
        put_u64_at(&mut b, 8, 99);
        assert_eq!(u64_at(&b, 8), 99);
    }

    #[test]
    #[should_panic(expected = "layout is broken")]
    fn a_word_past_the_end_is_a_broken_layout() {
        u64_at(&[0u8; 16], 9);
    }
}
