//! The lock table's messages (Sec. 3.1): fixed-size, so each fits one mailbox slot.
//!
//! ```text
//! kind u8 | mode u8 | level u8 | status u8 | table u16 | pad u16 | agent u32 | txn u64 | item u64 | addr u64
//! ```
//!
//! A request names the data item (table, level, item), the agent, the transaction and the
//! access mode; its response is the same message with a status and, once granted, the item's
//! address in its home's store region.

use txbed_txn::wire::WireError;

use super::modes::Mode;

/// Bytes of a message, hence of a mailbox slot.
pub const SLOT: u64 = 40;

/// Message kinds.
pub const REQUEST: u8 = 1;
pub const RESPONSE: u8 = 2;
/// End of transaction: release every lock (`status`: COMMIT or ABORT).
pub const END: u8 = 3;
/// 2PC: the vote request.
pub const VOTE: u8 = 4;
/// Releases one lock before the end (short read locks under read committed).
pub const RELEASE: u8 = 5;
/// The agent has finished its last transaction (the server serves until every agent has).
pub const DONE: u8 = 6;

/// Response statuses, and END's outcome.
pub const GRANTED: u8 = 0;
/// NO_WAIT: the lock is held in a conflicting mode.
pub const DENIED: u8 = 1;
/// WAIT_DIE: a younger transaction met an older holder.
pub const DIED: u8 = 2;
/// Bounded Wait: not granted within the bound.
pub const TIMEOUT: u8 = 3;
/// Timestamp ordering: the operation came too late.
pub const TOO_LATE: u8 = 4;
/// Votes (the RPC form's reply to VOTE) and END's outcome.
pub const COMMIT: u8 = 0;
pub const ABORT: u8 = 1;

/// Lock hierarchy levels.
pub const DATABASE: u8 = 0;
pub const TABLE: u8 = 1;
pub const GROUP: u8 = 2;
pub const ROW: u8 = 3;

/// Timestamp ordering's access modes (in `mode`).
pub const TO_READ: u8 = 1;
pub const TO_WRITE: u8 = 2;

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Msg {
    pub kind: u8,
    pub mode: u8,
    pub level: u8,
    pub status: u8,
    pub table: u16,
    pub agent: u32,
    pub txn: u64,
    pub item: u64,
    pub addr: u64,
}

impl Msg {
    pub fn encode(&self) -> [u8; SLOT as usize] {
        let mut b = [0u8; SLOT as usize];
        b[0] = self.kind;
        b[1] = self.mode;
        b[2] = self.level;
        b[3] = self.status;
        b[4..6].copy_from_slice(&self.table.to_le_bytes());
        b[8..12].copy_from_slice(&self.agent.to_le_bytes());
        b[16..24].copy_from_slice(&self.txn.to_le_bytes());
        b[24..32].copy_from_slice(&self.item.to_le_bytes());
        b[32..40].copy_from_slice(&self.addr.to_le_bytes());
        b
    }

    /// A message as it arrived: the wrong size, an unknown kind, mode or level is an error
    /// (a peer's bytes, never a panic).
    pub fn decode(b: &[u8]) -> Result<Msg, WireError> {
        if b.len() != SLOT as usize {
            return Err(WireError::Invalid("a lock-table message is not 40 bytes"));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let m = Msg {
            kind: b[0],
            mode: b[1],
            level: b[2],
            status: b[3],
            table: u16::from_le_bytes([b[4], b[5]]),
            agent: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            txn: u64_at(16),
            item: u64_at(24),
            addr: u64_at(32),
        };
        if !(REQUEST..=DONE).contains(&m.kind) {
            return Err(WireError::Invalid("unknown lock-table message kind"));
        }
        if Mode::from_u8(m.mode).is_none() || m.level > ROW {
            return Err(WireError::Invalid("lock-table message with an unknown mode or level"));
        }
        Ok(m)
    }

    /// The lock a request names.
    pub fn lock(&self) -> LockName {
        LockName { level: self.level, table: self.table, item: self.item }
    }
}

/// A lockable granule: the database, a table, a group of a table (TPC-C's warehouse), a row.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockName {
    pub level: u8,
    pub table: u16,
    pub item: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_bad_bytes_are_errors() {
        let m = Msg {
            kind: REQUEST,
            mode: Mode::SIX as u8,
            level: GROUP,
            status: 0,
            table: 7,
            agent: 99,
            txn: 1 << 40,
            item: 3,
            addr: 4096,
        };
        assert_eq!(Msg::decode(&m.encode()), Ok(m));
        assert!(Msg::decode(&m.encode()[..39]).is_err());
        let mut b = m.encode();
        b[0] = 0;
        assert!(Msg::decode(&b).is_err());
        let mut b = m.encode();
        b[1] = 6;
        assert!(Msg::decode(&b).is_err());
        let mut b = m.encode();
        b[2] = 4;
        assert!(Msg::decode(&b).is_err());
    }
}
