//! The transaction layer, written against `txbed-transport` only.
//!
//! - [`store`]: tuples and the cluster-hashing index in registered memory (DrTM Sec. 6.2).
//! - [`locate`]: finding records with one-sided READs and a bucket-caching location cache.
//! - [`stage`]: transaction stages and RCC's per-stage hybrid code.
//! - [`node`]: what a node shares (catalog, cache, history) and the participant's handlers.
//! - [`index`]: lookups before a transaction (data-dependent keys), answered by the node that
//!   owns the rows from its records and ordered index.
//! - [`log`]: the LOG stage (ring buffers on backups, or RPC).
//! - [`ops`]: the operations protocols are built from, each in RPC and one-sided form.
//! - [`nowait`]: NOWAIT (RCC Sec. 4.2); [`waitdie`]: WAIT-DIE (4.3); [`mvcc`]: MVCC (4.4);
//!   [`sundial`]: SUNDIAL (4.5); [`calvin`]: CALVIN (4.6); [`occ`]: OCC as in DrTM+H (Sec. 5-6).
//!
//! Every protocol keeps the common tuple words (`store`): lock at 0 (0 = free), the version
//! word at 8 (incarnation, and a counter bumped by every committed write: the history's
//! version order), the writer (id of the transaction that installed the record) at 16, and
//! the latest committed record at 24. Protocol-specific metadata (timestamps, old versions)
//! lives in the tuple's extension after the record (`Protocol::ext_bytes`, `TablePlace::ext_at`).

pub mod calvin;
pub mod index;
pub mod locate;
pub mod log;
pub mod mvcc;
pub mod node;
pub mod nowait;
pub mod occ;
pub mod ops;
pub mod stage;
pub mod store;
pub mod sundial;
pub mod waitdie;

use std::rc::Rc;

use txbed_transport::Ctx;
use txbed_workloads::TxnSpec;

use crate::node::NodeState;
pub use crate::nowait::Attempt;
use crate::stage::Stage;

/// The name of every RPC handler any protocol registers (common, per protocol, index), for
/// traces.
pub fn handler_names() -> impl Iterator<Item = (u16, &'static str)> {
    node::HANDLER_NAMES
        .into_iter()
        .chain(waitdie::HANDLER_NAMES)
        .chain(mvcc::HANDLER_NAMES)
        .chain(sundial::HANDLER_NAMES)
        .chain(calvin::HANDLER_NAMES)
        .chain([(index::H_LOOKUP, "LOOKUP")])
}

/// A concurrency-control protocol.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    NoWait,
    WaitDie,
    Occ,
    Mvcc,
    Sundial,
    Calvin,
}

impl Protocol {
    pub const ALL: [Protocol; 6] =
        [Protocol::NoWait, Protocol::WaitDie, Protocol::Occ, Protocol::Mvcc, Protocol::Sundial, Protocol::Calvin];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::NoWait => "NOWAIT",
            Protocol::WaitDie => "WAITDIE",
            Protocol::Occ => "OCC",
            Protocol::Mvcc => "MVCC",
            Protocol::Sundial => "SUNDIAL",
            Protocol::Calvin => "CALVIN",
        }
    }

    /// The stages the protocol has: the bits its hybrid code may set.
    pub fn stages(self) -> &'static [Stage] {
        match self {
            Protocol::NoWait => &nowait::STAGES,
            Protocol::WaitDie => &waitdie::STAGES,
            Protocol::Occ => &occ::STAGES,
            Protocol::Mvcc => &mvcc::STAGES,
            Protocol::Sundial => &sundial::STAGES,
            Protocol::Calvin => &calvin::STAGES,
        }
    }

    /// Bytes of protocol metadata after a record of `record_bytes` (8-byte aligned) in a tuple.
    pub fn ext_bytes(self, record_bytes: u64) -> u64 {
        match self {
            Protocol::NoWait | Protocol::Occ => 0,
            Protocol::WaitDie => waitdie::ext_bytes(record_bytes),
            Protocol::Mvcc => mvcc::ext_bytes(record_bytes),
            Protocol::Sundial => sundial::ext_bytes(record_bytes),
            Protocol::Calvin => calvin::ext_bytes(record_bytes),
        }
    }

    /// Whether each worker runs a background coroutine ([`background`]) besides its
    /// coordinators (CALVIN's sequencer and executors, WAITDIE's wait-list check).
    pub fn has_background(self) -> bool {
        matches!(self, Protocol::Calvin | Protocol::WaitDie)
    }
}

/// Runs one attempt of `spec` as transaction `id` (nonzero, unique) under `p`.
pub async fn attempt(p: Protocol, ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    match p {
        Protocol::NoWait => nowait::attempt(ctx, n, spec, id).await,
        Protocol::WaitDie => waitdie::attempt(ctx, n, spec, id).await,
        Protocol::Occ => occ::attempt(ctx, n, spec, id).await,
        Protocol::Mvcc => mvcc::attempt(ctx, n, spec, id).await,
        Protocol::Sundial => sundial::attempt(ctx, n, spec, id).await,
        Protocol::Calvin => calvin::attempt(ctx, n, spec, id).await,
    }
}

/// A worker's background coroutine for protocols that have one; returns once the clock
/// passes `end` and its work is drained.
pub async fn background(p: Protocol, ctx: Ctx, n: Rc<NodeState>, end: u64) {
    match p {
        Protocol::Calvin => calvin::background(ctx, n, end).await,
        Protocol::WaitDie => waitdie::background(ctx, n, end).await,
        _ => {}
    }
}

/// The key a history names: table in the top 16 bits, row below (as `workloads::Key`).
pub fn history_key(table: u16, row: u64) -> u64 {
    ((table as u64) << 48) | row
}
