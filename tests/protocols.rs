//! NOWAIT and OCC on the simulator, every run checked by the history checker: serializable,
//! nothing lost, the workload's conserved quantity intact. Failures print the seed and
//! scenario to replay.

use std::sync::Arc;

use proptest::prelude::*;
use txbed::txn::{run_txns, Protocol, TxnRunResult, TxnRunSpec};
use txbed_protocols::node::{Bug, Options};
use txbed_protocols::stage::Hybrid;
use txbed_sim::NicProfile;
use txbed_workloads::smallbank::SmallBank;
use txbed_workloads::ycsb::Ycsb;
use txbed_workloads::Workload;

#[derive(Copy, Clone, Debug)]
enum W {
    SmallBankHot,
    YcsbHot,
}

fn workload(w: W, nodes: u16) -> Arc<dyn Workload> {
    match w {
        // 400 accounts per node, half of SP/AMG cross-node: high contention.
        W::SmallBankHot => Arc::new(SmallBank { accounts_per_node: 400, distributed: 0.5, ..SmallBank::default() }),
        W::YcsbHot => Arc::new(
            Ycsb { rows_per_node: 2_000, ops: 4, write_fraction: 0.5, hot_probability: 0.5, ..Ycsb::default() }
                .prepare(nodes),
        ),
    }
}

/// ConnectX-4 with one NIC per node: with two, HCA-level atomics through different NICs are
/// not atomic (see `two_hca_nics_break_one_sided_locking`).
fn cx4_one_nic() -> NicProfile {
    let mut p = NicProfile::load("cx4").unwrap();
    p.nics_per_node = 1;
    p
}

#[derive(Clone, Debug)]
struct Shape {
    protocol: Protocol,
    w: W,
    nodes: u16,
    workers: u16,
    coroutines: u32,
    hybrid: Hybrid,
    seed: u64,
    bug: Option<Bug>,
    options: Options,
}

impl Shape {
    fn new(protocol: Protocol, w: W, hybrid: Hybrid, seed: u64) -> Shape {
        Shape { protocol, w, nodes: 3, workers: 2, coroutines: 4, hybrid, seed, bug: None, options: Options::default() }
    }
    fn spec(&self) -> TxnRunSpec {
        TxnRunSpec {
            link_delay_ns: Vec::new(),
            protocol: self.protocol,
            nodes: self.nodes,
            workers: self.workers,
            coroutines: self.coroutines,
            profile: cx4_one_nic(),
            seed: self.seed,
            hybrid: self.hybrid,
            replication: 3.min(self.nodes),
            workload: workload(self.w, self.nodes),
            warmup_ns: 0,
            duration_ns: 200_000,
            cache_bytes: 1 << 20,
            options: self.options,
            bug: self.bug,
            allow_unsafe_atomics: false,
            trace: false,
        }
    }
    /// How to replay this run.
    fn replay(&self) -> String {
        format!(
            "replay: {} {:?} nodes={} workers={} coroutines={} hybrid={} seed={} bug={:?} options={:?}",
            self.protocol.name(),
            self.w,
            self.nodes,
            self.workers,
            self.coroutines,
            self.hybrid,
            self.seed,
            self.bug,
            self.options
        )
    }
    fn run(&self) -> TxnRunResult {
        run_txns(&self.spec()).unwrap_or_else(|e| panic!("{e}\n{}", self.replay()))
    }
}

fn assert_clean(s: &Shape, r: &TxnRunResult) {
    assert!(
        r.clean(),
        "{}\nserializable={} nothing_lost={:?} invariants_ok={} failures={:?}\n{}",
        s.replay(),
        r.report.serializable,
        r.report.nothing_lost,
        r.report.invariants_ok,
        r.failures,
        r.report.anomalies.iter().map(|a| a.explanation.as_str()).collect::<Vec<_>>().join("\n")
    );
    assert!(r.stats.committed > 20, "{}: only {} commits", s.replay(), r.stats.committed);
}

/// Every valid hybrid code (NOWAIT: 16 combinations of LOCK, LOG, RELEASE, COMMIT; OCC: 64,
/// adding READ and VALIDATE), on both workloads at high contention, is serializable with
/// nothing lost.
#[test]
fn every_hybrid_code_is_serializable() {
    for (protocol, n) in [(Protocol::NoWait, 16), (Protocol::Occ, 64)] {
        let codes = Hybrid::all_codes(protocol.stages());
        assert_eq!(codes.len(), n);
        for code in codes {
            for w in [W::SmallBankHot, W::YcsbHot] {
                let seeds: &[u64] = if protocol == Protocol::NoWait { &[1, 2] } else { &[1] };
                for &seed in seeds {
                    let s = Shape::new(protocol, w, code, seed);
                    let r = s.run();
                    assert_clean(&s, &r);
                    assert!(r.stats.aborted_conflict > 0, "{}: no conflicts, so no contention tested", s.replay());
                }
            }
        }
    }
}

proptest! {
    // 40 random cluster shapes x codes x workloads x seeds, each a full run and check.
    #![proptest_config(ProptestConfig { cases: 40, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_shapes_are_serializable(
        occ in any::<bool>(),
        nodes in 2u16..=6,
        workers in 1u16..=3,
        coroutines in 1u32..=6,
        code in 0u32..64,
        ycsb in any::<bool>(),
        seed in 0u64..1_000_000,
    ) {
        let protocol = if occ { Protocol::Occ } else { Protocol::NoWait };
        let codes = Hybrid::all_codes(protocol.stages());
        let hybrid = codes[code as usize % codes.len()];
        let w = if ycsb { W::YcsbHot } else { W::SmallBankHot };
        let s = Shape { protocol, w, nodes, workers, coroutines, hybrid, seed, bug: None, options: Options::default() };
        let r = s.run();
        prop_assert!(r.clean(), "{}\n{:?}", s.replay(), r.report.anomalies.first());
    }
}

/// A planted bug per protocol is caught by the checker within 1000 seeds, in RPC and
/// one-sided form: NOWAIT releasing its locks before writing back, OCC skipping read-set
/// validation.
#[test]
fn planted_bugs_are_caught() {
    // OCC's bug needs read sets: YCSB mixes reads and writes in every transaction.
    let cases = [
        (Protocol::NoWait, Bug::UnlockBeforeWriteBack, W::SmallBankHot),
        (Protocol::Occ, Bug::SkipValidation, W::YcsbHot),
    ];
    for (protocol, bug, w) in cases {
        for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
            let caught = (1..=1000u64).find(|&seed| {
                let s = Shape { bug: Some(bug), ..Shape::new(protocol, w, hybrid, seed) };
                let r = s.run();
                if !r.clean() {
                    eprintln!("caught: {}\n{}", s.replay(), r.report.anomalies[0].explanation);
                }
                !r.clean()
            });
            assert!(caught.is_some(), "{} planted bug {bug:?} not caught in 1000 seeds ({hybrid})", protocol.name());
        }
    }
}

/// With two HCA-atomic NICs per node, coordinators on different NICs can both win the CAS on
/// one lock; the runner refuses such a setup unless told to, and the checker catches it.
#[test]
fn two_hca_nics_break_one_sided_locking() {
    let s = Shape::new(Protocol::NoWait, W::SmallBankHot, Hybrid::full(Protocol::NoWait.stages()), 1);
    let mut spec = s.spec();
    spec.profile = NicProfile::load("cx4").unwrap();
    let err = run_txns(&spec).err().expect("refused");
    assert!(err.contains("HCA-level atomicity"), "{err}");
    spec.allow_unsafe_atomics = true;
    let caught = (1..=50u64).any(|seed| {
        spec.seed = seed;
        !run_txns(&spec).unwrap().report.serializable
    });
    assert!(caught, "two NICs with HCA atomics never broke mutual exclusion");
    // RPC locking (CPU CAS at the owner) is safe with any number of NICs.
    spec.hybrid = Hybrid(0);
    spec.allow_unsafe_atomics = false;
    assert!(run_txns(&spec).unwrap().clean());
}

#[test]
fn runs_are_deterministic() {
    let s = Shape::new(Protocol::Occ, W::YcsbHot, Hybrid(17), 9);
    let (a, b) = (s.run(), s.run());
    assert_eq!(a.digest, b.digest);
    assert_eq!(a.history, b.history);
    let c = Shape { seed: 10, ..s }.run();
    assert_ne!(a.digest, c.digest);
}

#[test]
fn invalid_hybrid_bits_are_rejected() {
    let err = run_txns(&Shape::new(Protocol::NoWait, W::YcsbHot, Hybrid(2 | 32), 1).spec()).err().unwrap();
    assert!(err.contains("read (2)") && err.contains("validate (32)") && err.contains("lock (1)"), "{err}");
}

/// Backups hold replicas: every committed write reaches `replication - 1` of them, and a
/// protocol that skips the LOG stage is caught losing writes on the backups.
#[test]
fn backups_hold_every_committed_write() {
    for protocol in [Protocol::NoWait, Protocol::Occ] {
        for hybrid in [Hybrid::RPC, Hybrid(4)] {
            let s = Shape::new(protocol, W::YcsbHot, hybrid, 3);
            let r = s.run();
            assert_clean(&s, &r);
            for replica in ["primary", "backup1", "backup2"] {
                assert!(r.history.finals.iter().any(|f| f.replica == replica), "{}: no {replica} finals", s.replay());
            }
            let bad = Shape { bug: Some(Bug::SkipLog), ..s };
            let r = bad.run();
            assert!(r.report.serializable, "{}", bad.replay());
            assert_eq!(r.report.nothing_lost, Some(false), "{}: skipped logs not detected", bad.replay());
        }
    }
}

/// Every combination of the RDMA optimisations keeps both protocols serializable, in RPC and
/// one-sided form.
#[test]
fn every_option_combination_is_serializable() {
    for bits in 0..16u32 {
        let options = Options {
            outstanding: bits & 1 != 0,
            doorbell: bits & 2 != 0,
            passive_ack: bits & 4 != 0,
            speculative: bits & 8 != 0,
            ..Options::default()
        };
        for protocol in [Protocol::NoWait, Protocol::Occ] {
            for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
                let s = Shape { options, ..Shape::new(protocol, W::YcsbHot, hybrid, 5) };
                let r = s.run();
                // With everything off, few transactions finish in 200 us: require progress.
                assert!(
                    r.clean() && r.stats.committed > 5,
                    "{}: {} commits, {:?}",
                    s.replay(),
                    r.stats.committed,
                    r.report.anomalies.first()
                );
            }
        }
    }
}
