//! What every protocol shares, written against `txbed-transport` only: the layer between the
//! transport and the protocols (`txbed-protocols`), which import it and never each other.
//!
//! - [`protocol`]: the [`Protocol`] interface a protocol implements, and what it declares
//!   (stages, isolation, needs, options, presets, planted bugs, handlers).
//! - [`attempt`]: how an attempt ends ([`Attempt`]), the workload's logic and the history.
//! - [`store`]: tuples and the cluster-hashing index in registered memory (DrTM Sec. 6.2).
//! - [`locate`]: finding records with one-sided READs and a bucket-caching location cache.
//! - [`stage`]: transaction stages and RCC's per-stage hybrid code.
//! - [`node`]: what a node shares (catalog, cache, history) and the participant's common
//!   handlers.
//! - [`index`]: lookups before a transaction (data-dependent keys), answered by the node that
//!   owns the rows from its records and ordered index.
//! - [`retry`]: what a coordinator does after a conflict ([`retry::Retry`]).
//! - [`log`]: the LOG stage (ring buffers on backups, or RPC).
//! - [`placement`]: where a partition's copies live across data centers, and RedT's quorums.
//! - [`quorum`]: requests to every replica of a transaction's records (TAPIR, MDCC).
//! - [`ops`]: the operations protocols are built from, each in RPC and one-sided form.
//! - [`msg`]: the shared handlers' request and reply messages; [`wire`]: reading and writing
//!   message fields; [`error`]: why an operation failed ([`TxnError`]).
//!
//! Every protocol keeps the common tuple words (`store`): lock at 0 (0 = free), the version
//! word at 8 (incarnation, and a counter bumped by every committed write: the history's
//! version order), the writer (id of the transaction that installed the record) at 16, and
//! the latest committed record at 24. Protocol-specific metadata (timestamps, old versions)
//! lives in the tuple's extension after the record (`Protocol::ext_bytes`, `TablePlace::ext_at`).

pub mod attempt;
pub mod chop;
pub mod error;
pub mod htm;
pub mod index;
pub mod local;
pub mod locate;
pub mod log;
pub mod msg;
pub mod node;
pub mod ops;
pub mod participant;
pub mod placement;
pub mod post;
pub mod protocol;
pub mod quorum;
pub mod recovery;
pub mod retry;
pub mod serve;
pub mod stage;
pub mod store;
pub mod wire;

pub use crate::attempt::Attempt;
pub use crate::error::TxnError;
pub use crate::protocol::{Bug, Level, Needs, Preset, Protocol, ProtocolRef, Rdma};
pub use crate::store::history_key;
