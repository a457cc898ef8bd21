//! The testbed: runs scenarios on a backend and reports. The `txbed` binary is its CLI.

pub mod bench_verbs;
pub mod bootstrap;
pub mod check;
pub mod host;
pub mod listing;
pub mod plot;
pub mod replay;
pub mod run;
pub mod scenario;
pub mod selftest;
pub mod set;
pub mod sockets;
pub mod sockets_node;
pub mod sweep;
pub mod trace;
pub mod txn;
#[cfg(feature = "verbs")]
pub mod verbs;
pub mod words;
