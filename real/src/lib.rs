//! The real runtime: one process per node, started by the launcher a cluster has (`mpirun`,
//! `srun`; `bootstrap`), hosting the runner's nodes as actix actors (`host`) over real sockets
//! (`sockets`) or RDMA verbs (`verbs`, feature "verbs"); `run` is `txbed run` on them and
//! `selftest` checks a backend's verbs; `wan` emulates data centers and `partitions` network
//! partitions on sockets, or refuse. `words` is registered memory as both backends hold it.

pub mod bootstrap;
pub mod clock;
pub mod host;
pub mod liveness;
pub mod partitions;
pub mod run;
pub mod selftest;
pub mod sockets;
#[cfg(feature = "verbs")]
pub mod verbs;
pub mod wan;
pub mod words;
