//! Workload generators (SmallBank, YCSB, TPC-C, TPC-E). Not yet implemented: this crate
//! reserves its place in the layout.
