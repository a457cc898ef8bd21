//! What an executor holds of one replica it accesses (`Copy`), and what both of its ways of
//! reaching replicas share (one-sided verbs in `executor`, messages in `messages`): the new
//! values by operation, how a tuple image takes one, and the retry bounds.

use std::collections::BTreeMap;

use txbed_txn::ops::Rec;
use txbed_txn::store::{split_version_word, version_word, META_BYTES, VERSION, WRITER};
use txbed_txn::wire::{put_u64_at, u64_at};

use super::item::Item;

/// Rounds an executor retries a latch held by another executor before its sub-transaction
/// votes no (Algorithm 1 spins on it; a latch is held for one round trip).
pub const LATCH_ROUNDS: u32 = 64;
/// Between those rounds.
pub const LATCH_PAUSE_NS: u64 = 200;
/// How long a writer waits for the replay to free a slot before it gives up.
pub const LOG_FULL_BOUND_NS: u64 = 100_000_000;

/// One replica a sub-transaction accesses.
#[derive(Clone, Debug)]
pub struct Copy {
    /// The operation (index in the sub-transaction).
    pub op: usize,
    pub node: u16,
    pub copy: u16,
    /// The copy's table id (`store::copy_table`).
    pub table: u16,
    pub key: u64,
    pub write: bool,
    pub offset: u64,
    pub ext_at: usize,
    /// The tuple as read under the latch (with the lock this transaction took).
    pub tuple: Vec<u8>,
    pub locked: bool,
}

impl Copy {
    pub fn rec(&self) -> Rec {
        Rec {
            table: self.table,
            key: self.key,
            home: self.node,
            write: self.write,
            offset: self.offset,
            locked: false,
            asked: false,
            tuple: Vec::new(),
        }
    }

    pub fn item(&self) -> Item {
        Item::read(&self.tuple, self.ext_at)
    }

    pub fn version(&self) -> u64 {
        split_version_word(u64_at(&self.tuple, VERSION as usize)).1
    }

    pub fn record(&self) -> &[u8] {
        let len = self.ext_at - META_BYTES as usize;
        &self.tuple[META_BYTES as usize..META_BYTES as usize + len]
    }
}

/// New (version, record) by operation.
pub type Installs = BTreeMap<usize, (u64, Vec<u8>)>;

/// Puts a new version, its writer and its record into a tuple image.
pub fn install_into(tuple: &mut [u8], ext_at: usize, version: u64, writer: u64, value: &[u8]) {
    let (inc, _) = split_version_word(u64_at(tuple, VERSION as usize));
    put_u64_at(tuple, VERSION as usize, version_word(inc, version));
    put_u64_at(tuple, WRITER as usize, writer);
    let room = ext_at - META_BYTES as usize;
    let len = value.len().min(room);
    tuple[META_BYTES as usize..META_BYTES as usize + len].copy_from_slice(&value[..len]);
}
