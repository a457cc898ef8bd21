//! The runner: what a run is (`spec`), the node every backend builds (`node`), the simulated
//! cluster that runs them (`sim`), what a run measured and what the checker found (`outcome`),
//! the report as data (`report`), runs described by scenario files (`from_scenario`), many
//! simulations at once (`parallel`), sensitivity analyses over the NIC profile
//! (`sensitivity`), and the primitive microbenchmarks (`bench_verbs`).
//!
//! The real runtime (txbed-real) hosts the same `node` on sockets or verbs.

pub mod bench_verbs;
pub mod breakdown;
pub mod campaign;
pub mod faults;
pub mod from_scenario;
pub mod node;
pub mod outcome;
pub mod parallel;
pub mod report;
pub mod sensitivity;
pub mod sim;
pub mod spec;

pub use from_scenario::{run_txn, run_verbs, txn_spec, ScenarioRun};
pub use outcome::{Measured, TxnRunResult};
pub use sim::{run_txns, run_txns_with};
pub use spec::{layout, TxnRunSpec};
