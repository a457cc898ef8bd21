//! Every cross-crate integration test, as one test binary: each module below was a binary of
//! its own, and compiling and linking 32 copies of the workspace took about a minute of CI's
//! 20 (one binary also keeps both cores busy to the end). Run one file's tests with its module
//! name as the filter: `cargo test --release -p txbed-tests --test integration redt::`.

mod calibration;
mod calvin;
mod clocks;
mod cpu_costs;
mod determinism;
mod drtm;
mod emulation;
mod faults;
mod geo;
mod htm;
mod layering;
mod local_path;
mod locktable;
mod log_reclaim;
mod lookups;
mod mvcc;
mod nic_overrides;
mod placement;
mod protocols;
mod redt;
mod retry;
mod rpc_loss;
mod stage_costs;
mod stage_optimizations;
mod store;
mod sundial;
mod swarm;
mod tpcc;
mod tpce;
mod verbs_semantics;
mod waitdie;
mod wan;
