//! The history checker (serialisation graph, anomaly classification, invariants). Not yet
//! implemented: this crate reserves its place in the layout.
