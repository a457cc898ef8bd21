//! The transaction layer, written against `txbed-transport` only.
//!
//! - [`store`]: tuples and the cluster-hashing index in registered memory (DrTM Sec. 6.2).
//! - [`locate`]: finding records with one-sided READs and a bucket-caching location cache.
//! - [`stage`]: transaction stages and RCC's per-stage hybrid code.
//! - [`node`]: what a node shares (catalog, cache, history) and the participant's handlers.
//! - [`log`]: the LOG stage (ring buffers on backups, or RPC).
//! - [`ops`]: the operations protocols are built from, each in RPC and one-sided form.
//! - [`nowait`]: NOWAIT (RCC Sec. 4.2).
//! - [`occ`]: OCC as in DrTM+H (Sec. 5-6).

pub mod locate;
pub mod log;
pub mod node;
pub mod nowait;
pub mod occ;
pub mod ops;
pub mod stage;
pub mod store;

/// The key a history names: table in the top 16 bits, row below (as `workloads::Key`).
pub fn history_key(table: u16, row: u64) -> u64 {
    ((table as u64) << 48) | row
}
