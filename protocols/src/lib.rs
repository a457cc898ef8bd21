//! Concurrency-control protocols (NOWAIT, WAIT-DIE, OCC, MVCC, SUNDIAL, CALVIN) written against
//! `txbed-transport` only. Not yet implemented: this crate reserves its place in the layout.
