//! A data item's auxiliary information (RedT Sec. 4.1), in every replica's tuple:
//!
//! ```text
//! [ latch 8 | version 8 | writer 8 | record | lock 8 | lockOwners OWNERS x 8 | wts 8 ]
//! ```
//!
//! The latch is the store's lock word (`store::LOCK`, CASed by the executor: 0 free, else the
//! transaction holding it for one round trip); `lock` is {lockType NULL/SH/EX in the top two
//! bits, lockNum below}; `lockOwners` is a fixed-size list of transaction ids, 0 a free
//! entry ("when the list is full, any transaction that applies to acquire the lock aborts");
//! `wts` is the largest commit timestamp that wrote the item. The ext follows the record
//! (`Protocol::ext_bytes`), so the executor reads the whole tuple with one READ.

use txbed_txn::wire::{put_u64_at, u64_at};

/// Entries of `lockOwners`.
pub const OWNERS: usize = 4;
/// Bytes after the record: lock, owners, wts.
pub const EXT_BYTES: u64 = 8 + 8 * OWNERS as u64 + 8;

/// Offsets inside the ext.
const LOCK_AT: usize = 0;
const OWNERS_AT: usize = 8;
const WTS_AT: usize = 8 + 8 * OWNERS;

/// `x.lock.lockType`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LockType {
    Null,
    Sh,
    Ex,
}

/// `x.lock`, decoded.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    pub kind: LockType,
    pub num: u32,
}

impl Lock {
    pub fn word(self) -> u64 {
        let t = match self.kind {
            LockType::Null => 0u64,
            LockType::Sh => 1,
            LockType::Ex => 2,
        };
        (t << 62) | self.num as u64
    }

    pub fn of(word: u64) -> Lock {
        let kind = match word >> 62 {
            1 => LockType::Sh,
            2 => LockType::Ex,
            _ => LockType::Null,
        };
        Lock { kind, num: word as u32 }
    }
}

/// The auxiliary information of one replica, as read with its tuple.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub lock: Lock,
    pub owners: [u64; OWNERS],
    pub wts: u64,
}

impl Item {
    /// Reads it from a tuple whose ext starts at `ext_at`.
    pub fn read(tuple: &[u8], ext_at: usize) -> Item {
        let mut owners = [0; OWNERS];
        for (i, o) in owners.iter_mut().enumerate() {
            *o = u64_at(tuple, ext_at + OWNERS_AT + 8 * i);
        }
        Item { lock: Lock::of(u64_at(tuple, ext_at + LOCK_AT)), owners, wts: u64_at(tuple, ext_at + WTS_AT) }
    }

    /// Writes it into a tuple image.
    pub fn write(&self, tuple: &mut [u8], ext_at: usize) {
        put_u64_at(tuple, ext_at + LOCK_AT, self.lock.word());
        for (i, &o) in self.owners.iter().enumerate() {
            put_u64_at(tuple, ext_at + OWNERS_AT + 8 * i, o);
        }
        put_u64_at(tuple, ext_at + WTS_AT, self.wts);
    }

    /// AcqLock's test and update (Algorithm 1, lines 9-13): whether `tid` may take a lock of
    /// `kind` (no conflict, a free owner entry), and if so the item with it taken.
    pub fn acquire(&self, kind: LockType, tid: u64) -> Option<Item> {
        let conflict = !matches!((self.lock.kind, kind), (LockType::Null, _) | (LockType::Sh, LockType::Sh));
        let free = self.owners.iter().position(|&o| o == 0);
        match (conflict, free) {
            (false, Some(i)) => {
                let mut next = self.clone();
                next.lock = Lock { kind, num: self.lock.num + 1 };
                next.owners[i] = tid;
                Some(next)
            }
            _ => None,
        }
    }

    /// RlsLock's update (lines 19-21): `tid` leaves the owners; the lock is NULL once nobody
    /// holds it. An item `tid` does not hold is returned unchanged.
    pub fn release(&self, tid: u64) -> Item {
        let mut next = self.clone();
        if let Some(i) = self.owners.iter().position(|&o| o == tid) {
            next.owners[i] = 0;
            next.lock.num = self.lock.num.saturating_sub(1);
            if next.lock.num == 0 {
                next.lock.kind = LockType::Null;
            }
        }
        next
    }

    pub fn holds(&self, tid: u64) -> bool {
        self.owners.contains(&tid)
    }
}

/// The ext's bytes of an item (what a lock's WRITE carries), for a tuple whose ext is at
/// `ext_at`.
pub fn ext_image(item: &Item) -> Vec<u8> {
    let mut b = vec![0u8; EXT_BYTES as usize];
    item.write(&mut b, 0);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_locks_share_exclusive_ones_exclude_and_a_full_owner_list_aborts() {
        let free = Item { lock: Lock { kind: LockType::Null, num: 0 }, owners: [0; OWNERS], wts: 3 };
        let a = free.acquire(LockType::Sh, 1).unwrap();
        let b = a.acquire(LockType::Sh, 2).unwrap();
        assert_eq!(b.lock, Lock { kind: LockType::Sh, num: 2 });
        assert!(b.acquire(LockType::Ex, 3).is_none());
        let mut full = b.clone();
        for t in 3..=OWNERS as u64 {
            full = full.acquire(LockType::Sh, t).unwrap();
        }
        assert!(full.acquire(LockType::Sh, 99).is_none(), "the owner list is full");
        let x = free.acquire(LockType::Ex, 7).unwrap();
        assert!(x.acquire(LockType::Sh, 8).is_none() && x.acquire(LockType::Ex, 8).is_none());
        let back = b.release(1).release(2);
        assert_eq!(back.lock.kind, LockType::Null);
        assert_eq!(back.release(5), back, "releasing a lock not held changes nothing");
        let mut t = vec![0u8; 100];
        x.write(&mut t, 40);
        assert_eq!(Item::read(&t, 40), x);
    }
}
