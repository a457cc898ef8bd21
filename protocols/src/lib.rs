//! The concurrency-control protocols, one module each, written against `txbed-txn` (the
//! shared transaction machinery) and never against each other, and [`REGISTRY`], the one list
//! the scenario schema, the CLI, sweeps, `hybrid-search` and the tests read.
//!
//! - [`nowait`]: NOWAIT (RCC Sec. 4.2); [`waitdie`]: WAIT-DIE (4.3); [`occ`]: OCC as in
//!   DrTM+H (Sec. 5-6), with its presets emulating prior systems; [`mvcc`]: MVCC (4.4);
//!   [`sundial`]: SUNDIAL (4.5); [`calvin`]: CALVIN (4.6); [`locktable`]: the distributed
//!   lock table (strict 2PL with multi-granularity locks, or TO, and 2PC, at thousands of
//!   agents); [`drtm`]: DrTM (HTM for local records glued to RDMA 2PL with leases);
//!   [`redt`]: RedT (one executor per data center, pre-written redo logs, 3/4 quorums);
//!   [`paxos2pc`]: 2PC-Paxos and EP-Paxos, RedT's baselines over Paxos-replicated partitions;
//!   [`tapir`]: TAPIR (inconsistent replication, OCC at every replica); [`mdcc`]: MDCC
//!   (per-record Paxos with fast rounds).
//!
//! Adding a protocol: a module (a folder when big) implementing `txbed_txn::Protocol`, and
//! one line in `REGISTRY` (docs/writing-a-protocol.md).

pub mod calvin;
pub mod drtm;
pub mod locktable;
pub mod mdcc;
pub mod mvcc;
pub mod nowait;
pub mod occ;
pub mod paxos2pc;
pub mod redt;
pub mod sundial;
pub mod tapir;
pub mod waitdie;

pub use txbed_txn::{Protocol, ProtocolRef};

/// Every protocol, one line each, in the order `txbed protocols` lists them.
pub static REGISTRY: &[ProtocolRef] = &[
    &nowait::NoWait,
    &waitdie::WaitDie,
    &occ::Occ,
    &mvcc::Mvcc,
    &sundial::Sundial,
    &calvin::Calvin,
    &locktable::LockTable,
    &drtm::Drtm,
    &redt::RedT,
    &paxos2pc::TwoPcPaxos,
    &paxos2pc::EpPaxos,
    &tapir::Tapir,
    &mdcc::Mdcc,
];

/// The protocol a scenario names, matched ignoring case and punctuation (`occ`, `WAIT-DIE`).
pub fn named(name: &str) -> Option<ProtocolRef> {
    let want = txbed_txn::protocol::fold_name(name);
    REGISTRY.iter().copied().find(|p| txbed_txn::protocol::fold_name(p.name()) == want)
}

/// The registered protocols' names, for error messages.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|p| p.name()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found_in_any_spelling() {
        for p in REGISTRY {
            assert_eq!(named(p.name()).map(|q| q.name()), Some(p.name()));
            assert_eq!(named(&p.name().to_lowercase()).map(|q| q.name()), Some(p.name()));
            let same = REGISTRY
                .iter()
                .filter(|q| txbed_txn::protocol::fold_name(q.name()) == txbed_txn::protocol::fold_name(p.name()));
            assert_eq!(same.count(), 1, "{} is registered twice", p.name());
        }
        assert!(named("no-such-protocol").is_none());
    }

    #[test]
    fn every_protocol_declares_consistent_handlers_and_bugs() {
        for p in REGISTRY {
            assert!(!p.stages().is_empty(), "{} has no stages", p.name());
            assert!(p.check_options(&p.default_options()).is_ok(), "{}: its defaults fail its own check", p.name());
            let mut bugs: Vec<&str> = p.bugs().iter().map(|b| b.name).collect();
            bugs.sort();
            bugs.dedup();
            assert_eq!(bugs.len(), p.bugs().len(), "{} lists a planted bug twice", p.name());
        }
    }
}
