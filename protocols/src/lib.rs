//! The transaction layer, written against `txbed-transport` only.
//!
//! - [`store`]: tuples and the cluster-hashing index in registered memory (DrTM Sec. 6.2).
//! - [`locate`]: finding records with one-sided READs and a bucket-caching location cache.
//!
//! The concurrency-control protocols (NOWAIT, OCC, ...) and the stage pipeline build on these.

pub mod locate;
pub mod store;
