//! The testbed: runs scenarios on a backend and reports. The `txbed` binary is its CLI.

pub mod bench_verbs;
pub mod bootstrap;
pub mod check;
pub mod host;
pub mod plot;
pub mod run;
pub mod scenario;
pub mod selftest;
pub mod sockets;
pub mod sockets_node;
pub mod trace;
pub mod txn;
#[cfg(feature = "verbs")]
pub mod verbs;
pub mod words;
