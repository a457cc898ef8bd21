//! The sockets backend: a NIC thread per process serving one-sided verbs over TCP (`nic`), and
//! the workers' side, UD datagrams over UDP (`node`).

mod nic;
pub mod node;

pub use nic::*;
