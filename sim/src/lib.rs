//! txbed's deterministic discrete-event simulator of an RDMA cluster.
//!
//! - [`engine`]: the event queue (integer-nanosecond time, (time, sequence) order, digest).
//! - [`profile`]: NIC profiles from `scenarios/nics/*.ron`, converted to integer picoseconds.
//! - [`memory`]: a node's registered memory, with cache-line-granular READ sampling.
//! - [`fabric`]: nodes, worker CPUs, NICs, PCIe, links and the switch; drives the
//!   transport's `WorkerCore`s.
//! - [`wan`]: links between data centers (delay distributions, loss, bandwidth, TCP-like).
//! - [`clock`]: node clocks (offset, drift, steps) and the error of their synchronized readings.
//! - [`bench_verbs`]: the primitive microbenchmarks (DrTM+H Fig. 5 and 6).

pub mod bench_verbs;
pub mod clock;
pub mod cpu;
pub mod engine;
pub mod fabric;
pub mod faults;
pub mod memory;
pub mod profile;
pub mod wan;

pub use fabric::{ConfigError, Sim, SimConfig, SimStats};
pub use profile::NicProfile;
