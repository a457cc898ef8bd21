//! txbed's history checker.
//!
//! - [`history`]: the JSON Lines history format (transactions with the versions they read and
//!   installed, the final store per replica, workload invariants).
//! - [`check`]: Adya's direct serialization graph, Tarjan SCC, cycle classification (G0, G1c,
//!   G-single, G2, and real-time with `strict`), G1a/G1b, nothing-lost and invariant checks,
//!   with plain-word explanations of a shortest cycle.
//! - [`elle`]: export to Elle's list-append form so an independent checker can confirm a
//!   verdict.

pub mod check;
pub mod elle;
pub mod history;

pub use check::{check, Anomaly, AnomalyKind, Options, Report};
pub use history::{Access, Final, History, HistoryError, Invariant, Status, Txn};
