//! What recovery does to one node's store and replica (docs/faults.md): read and install a
//! record's committed version, release the locks a crashed node's transactions held, keep a
//! backup's replica. The runner's membership service sequences these (which node, when, from
//! where); the protocol says what its own metadata needs (`Protocol::recover_tuple`) and how
//! its lock words name a node (`Protocol::lock_owner_node`).
//!
//! A tuple is `lock | version word | writer | record | protocol extension` (`store`); records
//! are loaded in key order, so a key's tuple sits at its row's position on its home.

use txbed_transport::HostMemory;
use txbed_workloads::Key;

use crate::node::{Bug, NodeState, Replica};
use crate::protocol::{ProtocolRef, RecoveryFloor};
use crate::store::{history_key, split_version_word, version_word, TablePlace, LOCK, META_BYTES, VERSION, WRITER};

/// Planted bug shared by every protocol: the recovery of a restarted node ignores its
/// write-ahead log, so the transactions it had committed but not completed are neither
/// rolled forward nor recorded; backups that got their log records hold versions no
/// committed transaction wrote (the checker's lost writes).
pub const FORGET_WAL: Bug = Bug {
    name: "ForgetWal",
    about: "recovery ignores a crashed node's write-ahead log: its committed but unfinished transactions vanish while their log records survive on backups",
};

/// Where `key`'s tuple is on `n`, if `n` is its home: the table and the offset from the
/// store region's base.
pub fn tuple_at(n: &NodeState, key: Key) -> Option<(&TablePlace, u64)> {
    let place = n.catalog.layout.table(key.table)?;
    let per = place.spec.rows_per_node;
    let first = n.me as u64 * per;
    if key.row < first || key.row >= first + per {
        return None;
    }
    Some((place, place.tuples_at + (key.row - first) * place.tuple_bytes))
}

/// The key of the history key `k` (table in the top 16 bits).
pub fn key_of(k: u64) -> Key {
    Key { table: (k >> 48) as u16, row: k & ((1 << 48) - 1) }
}

/// The committed version of `key` on its home `n`: (version, writer, record).
pub fn committed(n: &NodeState, mem: &dyn HostMemory, key: Key) -> Option<(u64, u64, Vec<u8>)> {
    let (place, off) = tuple_at(n, key)?;
    let base = n.base() + off;
    let version = split_version_word(mem.load_u64(base + VERSION).ok()?).1;
    let writer = mem.load_u64(base + WRITER).ok()?;
    let mut rec = vec![0u8; place.spec.record_bytes as usize];
    mem.read(base + META_BYTES, &mut rec).ok()?;
    Some((version, writer, rec))
}

/// Installs `version` of `key` (written by `writer`) on its home `n` if the tuple holds an
/// older one, then lets the protocol make its metadata safe; with `unlock`, the lock is
/// cleared whether or not it wrote. Returns whether it wrote.
#[allow(clippy::too_many_arguments)]
pub fn install(
    protocol: ProtocolRef,
    n: &NodeState,
    mem: &dyn HostMemory,
    key: Key,
    version: u64,
    writer: u64,
    value: &[u8],
    unlock: bool,
    floor: &RecoveryFloor,
) -> bool {
    let Some((place, off)) = tuple_at(n, key) else { return false };
    let base = n.base() + off;
    let mut tuple = vec![0u8; place.tuple_bytes as usize];
    if mem.read(base, &mut tuple).is_err() {
        return false;
    }
    let (inc, have) =
        split_version_word(u64::from_le_bytes(tuple[VERSION as usize..][..8].try_into().expect("8 bytes")));
    let newer = version > have;
    if newer {
        tuple[VERSION as usize..][..8].copy_from_slice(&version_word(inc, version).to_le_bytes());
        tuple[WRITER as usize..][..8].copy_from_slice(&writer.to_le_bytes());
        let rec = &mut tuple[META_BYTES as usize..][..place.spec.record_bytes as usize];
        let len = value.len().min(rec.len());
        rec[..len].copy_from_slice(&value[..len]);
        protocol.recover_tuple(place, &mut tuple, floor);
    }
    if unlock {
        tuple[LOCK as usize..][..8].copy_from_slice(&0u64.to_le_bytes());
    }
    if newer || unlock {
        let _ = mem.write(base, &tuple);
    }
    newer
}

/// Every tuple of `n`: (key, offset from the base).
fn tuples(n: &NodeState) -> impl Iterator<Item = (Key, &TablePlace, u64)> + '_ {
    let me = n.me as u64;
    n.catalog.layout.tables.iter().flat_map(move |place| {
        let per = place.spec.rows_per_node;
        (0..per).map(move |i| {
            (Key { table: place.spec.id, row: me * per + i }, place, place.tuples_at + i * place.tuple_bytes)
        })
    })
}

/// Releases every lock on `n` that a transaction of node `dead` holds (its coordinators are
/// gone, and its write-ahead log was resolved); returns how many.
pub fn release_locks_of(protocol: ProtocolRef, n: &NodeState, mem: &dyn HostMemory, dead: u16, workers: u16) -> u64 {
    let mut released = 0;
    for (_, _, off) in tuples(n) {
        let at = n.base() + off + LOCK;
        let word = mem.load_u64(at).unwrap_or(0);
        if word != 0 && protocol.lock_owner_node(word, workers) == Some(dead) {
            let _ = mem.store_u64(at, 0);
            released += 1;
        }
    }
    released
}

/// Clears the locks on `n` and lets the protocol make each tuple's metadata safe: a
/// restarted node's store that survived its crash holds no lock of its past, except those
/// of transactions of the nodes in `held_by` (crashed, not yet rebuilt: what such a lock
/// guards may be a committed write only that node's write-ahead log holds; its own rebuild
/// installs it and releases the lock, DrTM Sec. 5.6, Fig. 11(b)). `workers` per node.
pub fn reset_store(
    protocol: ProtocolRef,
    n: &NodeState,
    mem: &dyn HostMemory,
    floor: &RecoveryFloor,
    held_by: &[u16],
    workers: u16,
) {
    for (_, place, off) in tuples(n) {
        let base = n.base() + off;
        let mut tuple = vec![0u8; place.tuple_bytes as usize];
        if mem.read(base, &mut tuple).is_ok() {
            let word = u64::from_le_bytes(tuple[LOCK as usize..][..8].try_into().expect("8 bytes"));
            let keep = word != 0 && protocol.lock_owner_node(word, workers).is_some_and(|o| held_by.contains(&o));
            if keep {
                protocol.recover_tuple(place, &mut tuple, floor);
                tuple[LOCK as usize..][..8].copy_from_slice(&word.to_le_bytes());
                let _ = mem.write(base, &tuple);
                continue;
            }
            tuple[LOCK as usize..][..8].copy_from_slice(&0u64.to_le_bytes());
            protocol.recover_tuple(place, &mut tuple, floor);
            let _ = mem.write(base, &tuple);
        }
    }
}

/// Every record of `n` written since the load: (history key, version, writer, record).
pub fn written(n: &NodeState, mem: &dyn HostMemory) -> Vec<(u64, u64, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for (key, place, off) in tuples(n) {
        let base = n.base() + off;
        let version = split_version_word(mem.load_u64(base + VERSION).unwrap_or(0)).1;
        if version == 0 {
            continue;
        }
        let writer = mem.load_u64(base + WRITER).unwrap_or(0);
        let mut rec = vec![0u8; place.spec.record_bytes as usize];
        let _ = mem.read(base + META_BYTES, &mut rec);
        out.push((history_key(key.table, key.row), version, writer, rec));
    }
    out
}

/// Whether `n` keeps a replica of `key` (the k-th backup of a key is its home + k, for k in
/// 1..replication).
pub fn backs(n: &NodeState, key: Key) -> bool {
    let home = n.workload.home(key, n.nodes);
    let nth = (n.me + n.nodes - home) % n.nodes;
    nth != 0 && nth < n.replication
}

/// Applies a committed version to `n`'s replica, if `n` backs the key and has an older one.
pub fn replica_apply(n: &NodeState, hkey: u64, version: u64, writer: u64, value: &[u8]) -> bool {
    if !backs(n, key_of(hkey)) {
        return false;
    }
    let mut replica = n.replica.borrow_mut();
    let r = replica.entry(hkey).or_default();
    if version <= r.version {
        return false;
    }
    *r = Replica { version, writer, value: value.to_vec() };
    true
}
