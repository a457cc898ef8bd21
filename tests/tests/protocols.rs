//! NOWAIT and OCC on the simulator, every run checked by the history checker: serializable,
//! nothing lost, the workload's conserved quantity intact. Failures print the seed and
//! scenario to replay.

use proptest::prelude::*;
use txbed_runner::{run_txns, TxnRunResult};
use txbed_sim::NicProfile;
use txbed_tests::harness::{rdma_options, Protocol, Shape, NOWAIT, OCC, W};
use txbed_txn::stage::Hybrid;

/// The shared defaults, for 200 us.
fn shape(protocol: Protocol, w: W, hybrid: Hybrid, seed: u64) -> Shape<W> {
    Shape { duration_ns: 200_000, ..Shape::new(protocol, w, hybrid, seed) }
}

#[track_caller]
fn assert_clean(s: &Shape<W>, r: &TxnRunResult) {
    s.assert_clean(r);
    s.assert_commits(r, 20);
}

/// Every valid hybrid code (NOWAIT: 16 combinations of LOCK, LOG, RELEASE, COMMIT; OCC: 64,
/// adding READ and VALIDATE), on both workloads at high contention, is serializable with
/// nothing lost.
#[test]
fn every_hybrid_code_is_serializable() {
    for (protocol, n) in [(NOWAIT, 16), (OCC, 64)] {
        let codes = Hybrid::all_codes(protocol.stages());
        assert_eq!(codes.len(), n);
        for code in codes {
            for w in [W::SmallBank, W::YcsbHigh] {
                let seeds: &[u64] = if protocol == NOWAIT { &[1, 2] } else { &[1] };
                for &seed in seeds {
                    let s = shape(protocol, w, code, seed);
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
        let protocol = if occ { OCC } else { NOWAIT };
        let codes = Hybrid::all_codes(protocol.stages());
        let hybrid = codes[code as usize % codes.len()];
        let w = if ycsb { W::YcsbHigh } else { W::SmallBank };
        let s = Shape { nodes, workers, coroutines, replication: 3.min(nodes), ..shape(protocol, w, hybrid, seed) };
        let r = s.run();
        let res = s.check(&r);
        prop_assert!(res.is_ok(), "{}", res.unwrap_err());
    }
}

/// A planted bug per protocol is caught by the checker within 1000 seeds, in RPC and
/// one-sided form: NOWAIT releasing its locks before writing back, OCC skipping read-set
/// validation.
#[test]
fn planted_bugs_are_caught() {
    // OCC's bug needs read sets: YCSB mixes reads and writes in every transaction.
    let cases = [
        (NOWAIT, txbed_protocols::nowait::UNLOCK_BEFORE_WRITE_BACK, W::SmallBank),
        (OCC, txbed_protocols::occ::SKIP_VALIDATION, W::YcsbHigh),
    ];
    for (protocol, bug, w) in cases {
        for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
            let caught = (1..=1000u64).find(|&seed| {
                let s = Shape { bug: Some(bug), ..shape(protocol, w, hybrid, seed) };
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
    let s = shape(NOWAIT, W::SmallBank, Hybrid::full(NOWAIT.stages()), 1);
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
    let s = shape(OCC, W::YcsbHigh, Hybrid(17), 9);
    let (a, b) = (s.run(), s.run());
    assert_eq!(a.digest, b.digest);
    assert_eq!(a.history, b.history);
    let c = Shape { seed: 10, ..s }.run();
    assert_ne!(a.digest, c.digest);
}

#[test]
fn invalid_hybrid_bits_are_rejected() {
    let err = run_txns(&shape(NOWAIT, W::YcsbHigh, Hybrid(2 | 32), 1).spec()).err().unwrap();
    assert!(err.contains("read (2)") && err.contains("validate (32)") && err.contains("lock (1)"), "{err}");
}

/// Backups hold replicas: every committed write reaches `replication - 1` of them, and a
/// protocol that skips the LOG stage is caught losing writes on the backups.
#[test]
fn backups_hold_every_committed_write() {
    for protocol in [NOWAIT, OCC] {
        for hybrid in [Hybrid::RPC, Hybrid(4)] {
            let s = shape(protocol, W::YcsbHigh, hybrid, 3);
            let r = s.run();
            assert_clean(&s, &r);
            for replica in ["primary", "backup1", "backup2"] {
                assert!(r.history.finals.iter().any(|f| f.replica == replica), "{}: no {replica} finals", s.replay());
            }
            let bad = Shape { bug: Some(txbed_txn::log::SKIP_LOG), ..s };
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
        let options = rdma_options(bits);
        for protocol in [NOWAIT, OCC] {
            for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
                let s = Shape { options, ..shape(protocol, W::YcsbHigh, hybrid, 5) };
                let r = s.run();
                // With everything off, few transactions finish in 200 us: require progress.
                s.assert_clean(&r);
                s.assert_commits(&r, 5);
            }
        }
    }
}

/// Every protocol, in RPC and one-sided form, records each aborted attempt (conflicts and
/// user aborts) in the history: as many as the run counts, each with its own id, those
/// aborted by a conflict with what they read (CALVIN's scheduler runs the logic elsewhere).
#[test]
fn aborted_attempts_are_in_the_history() {
    for &protocol in txbed_tests::harness::REGISTRY {
        for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
            let s = Shape { coroutines: 6, ..shape(protocol, W::SmallBank, hybrid, 4) };
            let r = s.run();
            assert_clean(&s, &r);
            assert_aborts_recorded(&s.replay(), &r, protocol.name() != "CALVIN");
        }
    }
}

/// The history's aborted attempts are the run's aborts, each id once; with conflicts, some
/// aborted attempt read something.
#[track_caller]
fn assert_aborts_recorded(replay: &str, r: &TxnRunResult, reads_expected: bool) {
    use txbed_checker::Status;
    let aborted: Vec<_> = r.history.txns.iter().filter(|t| t.status == Status::Aborted).collect();
    let counted = r.stats.aborted_conflict + r.stats.aborted_user;
    assert!(counted > 0, "{replay}: no abort, nothing tested");
    assert_eq!(aborted.len() as u64, counted, "{replay}: aborted attempts in the history vs the run's aborts");
    assert_eq!(r.report.aborted as u64, counted, "{replay}: the checker's aborted count");
    let mut ids: Vec<u64> = r.history.txns.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), r.history.txns.len(), "{replay}: an attempt id appears twice");
    assert!(aborted.iter().all(|t| t.end_ns >= t.start_ns && t.end_ns > 0), "{replay}: aborted without an end");
    if reads_expected && r.stats.aborted_conflict > 0 {
        assert!(
            aborted.iter().any(|t| !t.reads.is_empty()),
            "{replay}: no aborted attempt read anything ({} conflicts, {} user aborts; first {:?})",
            r.stats.aborted_conflict,
            r.stats.aborted_user,
            aborted.first()
        );
    }
}

/// The real sockets backend records aborted attempts as the simulator does.
#[test]
fn sockets_runs_record_aborted_attempts() {
    // 20 ms of wall clock: enough aborts (SmallBank's user aborts alone are ~1%) to count.
    let s = Shape { coroutines: 6, duration_ns: 20_000_000, ..shape(NOWAIT, W::SmallBank, Hybrid::RPC, 4) };
    let r = txbed_tests::harness::run_sockets(&s.spec());
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    // Which attempts conflict, and on which record, is up to real timing: only counts.
    assert_aborts_recorded("sockets NOWAIT SmallBank", &r, false);
}

/// NOWAIT's planted `AbortAfterWriteBack` (an abort that does not undo its write-back) is
/// caught as G1a, an aborted read, in RPC and one-sided form: the history carries the aborted
/// attempts and the versions they installed.
#[test]
fn aborted_read_is_caught_as_g1a() {
    for hybrid in [Hybrid::RPC, Hybrid::full(NOWAIT.stages())] {
        let s = Shape {
            bug: Some(txbed_protocols::nowait::ABORT_AFTER_WRITE_BACK),
            ..shape(NOWAIT, W::SmallBank, hybrid, 1)
        };
        let r = s.run();
        assert!(!r.clean(), "{}: planted aborted read passed", s.replay());
        assert!(r.report.counts.get("G1a").is_some_and(|&c| c > 0), "{}: no G1a in {:?}", s.replay(), r.report.counts);
        let g1a = r.report.anomalies.iter().find(|a| a.kind == txbed_checker::AnomalyKind::G1a).expect("explained");
        assert!(g1a.explanation.contains("which aborted"), "{}", g1a.explanation);
        // Without the bug the same run is clean.
        let fine = Shape { bug: None, ..s };
        assert_clean(&fine, &fine.run());
    }
}
