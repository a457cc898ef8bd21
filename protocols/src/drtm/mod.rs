//! DrTM (issue 20, in progress): HTM-protected local execution glued to RDMA two-phase locking
//! with lease-based shared locks (`../shared/seeds/drtm-design.md`). Not yet in `REGISTRY`: so
//! far the state word and its accesses (`state`); the HTM model is `txbed_transport::htm`.

pub mod state;
