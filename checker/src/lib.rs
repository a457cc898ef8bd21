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

impl Report {
    /// The one verdict of a check: serializable, strictly so when asked, no write lost (or
    /// nothing recorded to tell), every invariant holds. Runs, sweeps, `txbed check` and
    /// hybrid-search all judge by this.
    pub fn clean(&self) -> bool {
        self.serializable
            && self.nothing_lost != Some(false)
            && self.invariants_ok
            && self.strict_serializable != Some(false)
    }
}
