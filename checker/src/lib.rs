//! txbed's history checker.
//!
//! - [`history`]: the JSON Lines history format (transactions with the versions they read and
//!   installed, the final store per replica, workload invariants).
//! - [`format`]: history files, JSON Lines or binary, each ending with a trailer, read
//!   straight into a [`Flat`].
//! - [`flat`]: the same history as flat arrays, what the checker runs on.
//! - [`level`]: isolation levels after Adya (PL-1 .. PL-3, PL-SI, strict), each the set of
//!   phenomena it forbids.
//! - [`check`]: Adya's direct serialization graph, Tarjan SCC, classification of every
//!   component by its most severe cycle (G0, G1c, G-single, G2-item, G2, real time), G1a/G1b,
//!   version integrity, nothing-lost and invariant checks, with plain-word explanations.
//! - [`elle`]: export to Elle's list-append form so an independent checker can confirm a
//!   verdict.

pub mod check;
pub mod elle;
pub mod flat;
pub mod format;
pub mod history;
pub mod level;

pub use check::{check, check_flat, Anomaly, AnomalyKind, Options, Report};
pub use flat::Flat;
pub use history::{Access, Final, History, HistoryError, Invariant, PredicateRead, Status, Trailer, Txn};
pub use level::Level;

impl Report {
    /// The one verdict of a check: no anomaly the level forbids, no write lost (or nothing
    /// recorded to tell), every invariant holds. Runs, sweeps, `txbed check` and
    /// hybrid-search all judge by this.
    pub fn clean(&self) -> bool {
        self.isolation_ok && self.nothing_lost != Some(false) && self.invariants_ok
    }
}
