//! The messages of the shared handlers (`participant`, `index`, `log`), also used by
//! protocols whose own handlers take the same requests (WAITDIE's LOCK, RELEASE and COMMIT,
//! SUNDIAL's READ). All integers little-endian.
//!
//! | message | layout |
//! | --- | --- |
//! | [`KeyReq`] (FETCH, SUNDIAL's READ) | `table u16 \| pad 6 \| key u64` |
//! | [`LockReq`] | `table u16 \| pad 6 \| key u64 \| owner u64` |
//! | [`LockReply`] | `status u8`, then on OK `offset u64 \| tuple` |
//! | [`FetchReply`] | `status u8`, then on OK `offset u64 \| bucket offset u64 \| bucket \| tuple` |
//! | [`ValidateReq`] / [`ValidateReply`] | `offset u64` / `lock u64 \| version word u64` |
//! | [`ReleaseReq`] | `offset u64 \| owner u64` |
//! | [`CommitReq`] | `offset u64 \| version word u64 \| writer u64 \| record` |
//! | [`ReclaimReq`] / [`ReclaimReply`] | `sender u16 \| worker u16 \| notify u8` / `consumed u64` |
//! | [`Reclaimed`] (one-way, backup to writer) | `backup u16 \| worker u16 \| consumed u64` |
//! | [`LogRecord`] | `id u64 \| entries`, each `table u16 \| value length u16 \| pad 4 \| key u64 \| version u64 \| value` padded to 8 |
//! | lookup ([`encode_ints`]) | `i64` each, request and reply |
//!
//! A handler that cannot decode a request replies `MALFORMED` where its reply has a status,
//! and otherwise a reply the caller cannot decode either (RELEASE and COMMIT, whose replies
//! nobody reads, do nothing).

use crate::node::{BUSY, MALFORMED, MISSING, OK};
use crate::store::BUCKET_BYTES;
use crate::wire::{align8, Put, Reader, WireError};

/// A reply's status byte, where `MALFORMED` says the request did not decode.
fn status(r: &mut Reader<'_>) -> Result<u8, WireError> {
    match r.u8()? {
        MALFORMED => Err(WireError::Rejected),
        s => Ok(s),
    }
}

/// The record a request names.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KeyReq {
    pub table: u16,
    pub key: u64,
}

impl KeyReq {
    pub const BYTES: usize = 16;

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.put_u16(self.table);
        out.put_zeros(6);
        out.put_u64(self.key);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::BYTES);
        self.encode_into(&mut out);
        out
    }

    /// Takes the fields from a longer request.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let table = r.u16()?;
        r.skip(6)?;
        Ok(KeyReq { table, key: r.u64()? })
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let k = Self::read(&mut r)?;
        r.finish()?;
        Ok(k)
    }
}

/// LOCK: CAS `owner` into the record's lock word (WAITDIE's owner is its timestamp). With
/// `meta_only` (one more byte, 1) the reply carries the lock and version words instead of the
/// whole tuple: OCC's validation only re-checks the version (DrTM+H Sec. 5.2).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LockReq {
    pub table: u16,
    pub key: u64,
    pub owner: u64,
    pub meta_only: bool,
}

impl LockReq {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(25);
        KeyReq { table: self.table, key: self.key }.encode_into(&mut out);
        out.put_u64(self.owner);
        if self.meta_only {
            out.put_u8(1);
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let KeyReq { table, key } = KeyReq::read(&mut r)?;
        let owner = r.u64()?;
        let meta_only = match r.rest() {
            [] => false,
            [1] => true,
            [_] => return Err(WireError::Rejected),
            more => return Err(WireError::Trailing { extra: more.len() - 1 }),
        };
        Ok(LockReq { table, key, owner, meta_only })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockReply {
    /// Locked: the tuple's offset and its bytes, read under the lock.
    Locked {
        offset: u64,
        tuple: Vec<u8>,
    },
    /// Held by another.
    Busy,
    Missing,
}

impl LockReply {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            LockReply::Locked { offset, tuple } => {
                out.put_u8(OK);
                out.put_u64(*offset);
                out.put_bytes(tuple);
            }
            LockReply::Busy => out.put_u8(BUSY),
            LockReply::Missing => out.put_u8(MISSING),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let reply = match status(&mut r)? {
            OK => return Ok(LockReply::Locked { offset: r.u64()?, tuple: r.rest().to_vec() }),
            BUSY => LockReply::Busy,
            MISSING => LockReply::Missing,
            s => return Err(WireError::Status(s)),
        };
        r.finish()?;
        Ok(reply)
    }
}

/// A tuple with its key's main bucket, so the caller's location cache fills over RPC too
/// (DrTM+H Sec. 5.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchReply {
    Found {
        offset: u64,
        bucket_at: u64,
        bucket: [u8; BUCKET_BYTES as usize],
        tuple: Vec<u8>,
    },
    /// No stable copy could be read (no shared handler replies this; a fetch fails on it).
    Busy,
    Missing,
}

impl FetchReply {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            FetchReply::Found { offset, bucket_at, bucket, tuple } => {
                out.put_u8(OK);
                out.put_u64(*offset);
                out.put_u64(*bucket_at);
                out.put_bytes(bucket);
                out.put_bytes(tuple);
            }
            FetchReply::Busy => out.put_u8(BUSY),
            FetchReply::Missing => out.put_u8(MISSING),
        }
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let reply = match status(&mut r)? {
            OK => {
                let (offset, bucket_at) = (r.u64()?, r.u64()?);
                let bucket = r.array()?;
                return Ok(FetchReply::Found { offset, bucket_at, bucket, tuple: r.rest().to_vec() });
            }
            BUSY => FetchReply::Busy,
            MISSING => FetchReply::Missing,
            s => return Err(WireError::Status(s)),
        };
        r.finish()?;
        Ok(reply)
    }
}

/// VALIDATE: the lock and version words of the tuple at `offset`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ValidateReq {
    pub offset: u64,
}

impl ValidateReq {
    pub fn encode(&self) -> Vec<u8> {
        self.offset.to_le_bytes().to_vec()
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let offset = r.u64()?;
        r.finish()?;
        Ok(ValidateReq { offset })
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ValidateReply {
    pub lock: u64,
    pub version: u64,
}

impl ValidateReply {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.put_u64(self.lock);
        out.put_u64(self.version);
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let reply = ValidateReply { lock: r.u64()?, version: r.u64()? };
        r.finish()?;
        Ok(reply)
    }
}

/// RELEASE: clear the lock of the tuple at `offset` if `owner` holds it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReleaseReq {
    pub offset: u64,
    pub owner: u64,
}

impl ReleaseReq {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        out.put_u64(self.offset);
        out.put_u64(self.owner);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let req = ReleaseReq { offset: r.u64()?, owner: r.u64()? };
        r.finish()?;
        Ok(req)
    }
}

/// UNLOCK_KEY: release the lock of `key` if `owner` holds it (`ops::abandon`: the attempt may
/// not know whether it got the lock, nor where the tuple is).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UnlockKeyReq {
    pub table: u16,
    pub key: u64,
    pub owner: u64,
}

impl UnlockKeyReq {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24);
        KeyReq { table: self.table, key: self.key }.encode_into(&mut out);
        out.put_u64(self.owner);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let table = r.u16()?;
        r.skip(6)?;
        let req = UnlockKeyReq { table, key: r.u64()?, owner: r.u64()? };
        r.finish()?;
        Ok(req)
    }
}

/// COMMIT_IF: the COMMIT of `commit`, done only while `owner` holds the tuple's lock (a
/// write-back sent again after a failure must not overwrite a later transaction's).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CommitIfReq<'a> {
    pub owner: u64,
    pub commit: CommitReq<'a>,
}

impl<'a> CommitIfReq<'a> {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.commit.record.len());
        out.put_u64(self.owner);
        out.extend_from_slice(&self.commit.encode());
        out
    }

    pub fn decode(b: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let owner = r.u64()?;
        Ok(CommitIfReq { owner, commit: CommitReq::decode(r.rest())? })
    }
}

/// COMMIT: write back the version word, the writer and the record of the tuple at `offset`,
/// then unlock. [`CommitReq::body`] is also what a one-sided commit WRITEs at the version
/// word.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CommitReq<'a> {
    pub offset: u64,
    pub version: u64,
    pub writer: u64,
    pub record: &'a [u8],
}

impl<'a> CommitReq<'a> {
    /// `version word u64 | writer u64 | record`.
    pub fn body(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.record.len());
        out.put_u64(self.version);
        out.put_u64(self.writer);
        out.put_bytes(self.record);
        out
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.record.len());
        out.put_u64(self.offset);
        out.put_u64(self.version);
        out.put_u64(self.writer);
        out.put_bytes(self.record);
        out
    }

    pub fn decode(b: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let (offset, version, writer) = (r.u64()?, r.u64()?, r.u64()?);
        Ok(CommitReq { offset, version, writer, record: r.rest() })
    }
}

/// RECLAIM: apply what the ring `sender`'s `worker` writes on this node holds; with
/// `notify` (a lazy, one-way reclaim) the backup then tells the writer how far it got by a
/// one-way [`Reclaimed`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReclaimReq {
    pub sender: u16,
    pub worker: u16,
    pub notify: bool,
}

impl ReclaimReq {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(5);
        out.put_u16(self.sender);
        out.put_u16(self.worker);
        out.put_u8(self.notify as u8);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let (sender, worker) = (r.u16()?, r.u16()?);
        let notify = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(WireError::Rejected),
        };
        r.finish()?;
        Ok(ReclaimReq { sender, worker, notify })
    }
}

/// RECLAIMED: the backup's report, after a lazy reclaim, of the bytes of `worker`'s ring it
/// has consumed, as the writer counts them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Reclaimed {
    pub backup: u16,
    pub worker: u16,
    pub consumed: u64,
}

impl Reclaimed {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12);
        out.put_u16(self.backup);
        out.put_u16(self.worker);
        out.put_u64(self.consumed);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let m = Reclaimed { backup: r.u16()?, worker: r.u16()?, consumed: r.u64()? };
        r.finish()?;
        Ok(m)
    }
}

/// The bytes of the ring consumed so far, as the sender counts them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReclaimReply {
    pub consumed: u64,
}

impl ReclaimReply {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.put_u64(self.consumed);
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let reply = ReclaimReply { consumed: r.u64()? };
        r.finish()?;
        Ok(reply)
    }
}

/// One entry of a log record: a record's new value and version.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LogEntry<'a> {
    pub table: u16,
    pub key: u64,
    pub version: u64,
    pub value: &'a [u8],
}

impl<'a> LogEntry<'a> {
    /// Header bytes before the value.
    pub const HEADER: usize = 24;

    /// Bytes an entry with a value of `len` bytes takes, padding included.
    pub fn framed_len(len: usize) -> usize {
        align8(Self::HEADER + len)
    }

    /// Appends the entry to a log record.
    pub fn encode_into(&self, record: &mut Vec<u8>) {
        assert!(self.value.len() <= u16::MAX as usize, "a log value of {} B", self.value.len());
        debug_assert_eq!(record.len() % 8, 0, "log entries start 8-byte aligned");
        record.put_u16(self.table);
        record.put_u16(self.value.len() as u16);
        record.put_zeros(4);
        record.put_u64(self.key);
        record.put_u64(self.version);
        record.put_bytes(self.value);
        record.pad8();
    }

    fn read(r: &mut Reader<'a>) -> Result<Self, WireError> {
        let table = r.u16()?;
        let len = r.u16()? as usize;
        r.skip(4)?;
        let (key, version) = (r.u64()?, r.u64()?);
        Ok(LogEntry { table, key, version, value: r.padded(len)? })
    }
}

/// A log record: transaction `id`'s entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord<'a> {
    pub id: u64,
    pub entries: Vec<LogEntry<'a>>,
}

impl<'a> LogRecord<'a> {
    /// A record of no entries yet; append them with `LogEntry::encode_into`.
    pub fn start(id: u64) -> Vec<u8> {
        id.to_le_bytes().to_vec()
    }

    pub fn decode(b: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let id = r.u64()?;
        let mut entries = Vec::new();
        while !r.done() {
            entries.push(LogEntry::read(&mut r)?);
        }
        Ok(LogRecord { id, entries })
    }
}

/// A lookup's arguments or answer.
pub fn encode_ints(xs: &[i64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 * xs.len());
    for &x in xs {
        out.put_i64(x);
    }
    out
}

pub fn decode_ints(b: &[u8]) -> Result<Vec<i64>, WireError> {
    if b.len() % 8 != 0 {
        return Err(WireError::Invalid("a list of i64 is not a multiple of 8 bytes"));
    }
    let mut r = Reader::new(b);
    (0..b.len() / 8).map(|_| r.i64()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_keep_their_layouts_and_round_trip() {
        let k = KeyReq { table: 3, key: 0x0102_0304_0506_0708 };
        assert_eq!(k.encode(), [3, 0, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(KeyReq::decode(&k.encode()), Ok(k));
        let m = LockReq { table: 3, key: 9, owner: 77, meta_only: true };
        assert_eq!(m.encode().len(), 25);
        assert_eq!(LockReq::decode(&m.encode()), Ok(m));
        assert_eq!(LockReq::decode(&[m.encode(), vec![1]].concat()), Err(WireError::Trailing { extra: 1 }));
        let l = LockReq { table: 3, key: 9, owner: 77, meta_only: false };
        assert_eq!(l.encode().len(), 24);
        assert_eq!(&l.encode()[16..], &77u64.to_le_bytes());
        assert_eq!(LockReq::decode(&l.encode()), Ok(l));
        let v = ValidateReq { offset: 640 };
        assert_eq!(ValidateReq::decode(&v.encode()), Ok(v));
        let rel = ReleaseReq { offset: 64, owner: 5 };
        assert_eq!(ReleaseReq::decode(&rel.encode()), Ok(rel));
        let c = CommitReq { offset: 64, version: 2, writer: 9, record: b"hello" };
        assert_eq!(c.encode().len(), 29);
        assert_eq!(&c.encode()[8..], c.body().as_slice());
        assert_eq!(CommitReq::decode(&c.encode()), Ok(c));
        let rc = ReclaimReq { sender: 2, worker: 1, notify: true };
        assert_eq!(rc.encode(), [2, 0, 1, 0, 1]);
        assert_eq!(ReclaimReq::decode(&rc.encode()), Ok(rc));
        assert_eq!(ReclaimReq::decode(&[2, 0, 1, 0, 2]), Err(WireError::Rejected));
        let m = Reclaimed { backup: 3, worker: 1, consumed: 4096 };
        assert_eq!(m.encode().len(), 12);
        assert_eq!(Reclaimed::decode(&m.encode()), Ok(m));
        assert_eq!(decode_ints(&encode_ints(&[-1, 5])), Ok(vec![-1, 5]));
    }

    #[test]
    fn replies_round_trip_and_carry_their_status() {
        for r in [LockReply::Locked { offset: 8, tuple: vec![1, 2, 3] }, LockReply::Busy, LockReply::Missing] {
            assert_eq!(LockReply::decode(&r.encode()), Ok(r));
        }
        assert_eq!(LockReply::Locked { offset: 8, tuple: vec![1; 40] }.encode().len(), 49);
        let f = FetchReply::Found { offset: 1, bucket_at: 2, bucket: [7; BUCKET_BYTES as usize], tuple: vec![4; 32] };
        let mut b = Vec::new();
        f.encode_into(&mut b);
        assert_eq!(b.len(), 17 + BUCKET_BYTES as usize + 32);
        assert_eq!(FetchReply::decode(&b), Ok(f));
        let mut b = Vec::new();
        ValidateReply { lock: 1, version: 2 }.encode_into(&mut b);
        assert_eq!(ValidateReply::decode(&b), Ok(ValidateReply { lock: 1, version: 2 }));
        assert_eq!(LockReply::decode(&[MALFORMED]), Err(WireError::Rejected));
        assert_eq!(LockReply::decode(&[9]), Err(WireError::Status(9)));
        assert_eq!(FetchReply::decode(&[OK, 1, 2]), Err(WireError::Short { need: 8, have: 2 }));
        assert_eq!(ValidateReply::decode(&[0; 15]), Err(WireError::Short { need: 8, have: 7 }));
    }

    #[test]
    fn short_or_overlong_requests_do_not_decode() {
        assert_eq!(KeyReq::decode(&[1, 0, 0]), Err(WireError::Short { need: 6, have: 1 }));
        assert_eq!(LockReq::decode(&[0; 25]), Err(WireError::Rejected));
        assert_eq!(LockReq::decode(&[0; 27]), Err(WireError::Trailing { extra: 2 }));
        assert!(CommitReq::decode(&[0; 23]).is_err());
        assert!(ReleaseReq::decode(&[0; 8]).is_err());
        assert!(ReclaimReq::decode(&[0; 3]).is_err());
        assert!(decode_ints(&[0; 9]).is_err());
    }

    #[test]
    fn log_records_round_trip() {
        let mut rec = LogRecord::start(42);
        LogEntry { table: 1, key: 5, version: 3, value: b"abc" }.encode_into(&mut rec);
        LogEntry { table: 2, key: 6, version: 4, value: &[9; 16] }.encode_into(&mut rec);
        assert_eq!(rec.len(), 8 + LogEntry::framed_len(3) + LogEntry::framed_len(16));
        let d = LogRecord::decode(&rec).unwrap();
        assert_eq!(d.id, 42);
        assert_eq!(d.entries[0], LogEntry { table: 1, key: 5, version: 3, value: b"abc" });
        assert_eq!(d.entries[1].value, &[9; 16]);
        assert!(LogRecord::decode(&rec[..rec.len() - 8]).is_err());
    }
}
