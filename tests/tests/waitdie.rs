//! WAIT-DIE (RCC Sec. 4.3) on the simulator, every run checked by the history checker:
//! serializable, nothing lost, the workload's conserved quantity intact, and no deadlock (a
//! wait that hits `WAIT_BOUND_NS` keeps the run going past it, so every run must end first).
//! Failures print the scenario to replay.

use proptest::prelude::*;
use txbed_protocols::waitdie::WAIT_BOUND_NS;
use txbed_runner::TxnRunResult;
use txbed_tests::harness::{rdma_options, Protocol, Shape, W, WAITDIE, WORKLOADS};
use txbed_transport::trace::STAGE;
use txbed_txn::node::stage_index;
use txbed_txn::stage::{Hybrid, Stage};

const WD: Protocol = WAITDIE;

/// WAIT-DIE on the shared defaults, traced: the trace shows how long each LOCK stage took
/// (see `check_clean`).
fn shape(w: W, hybrid: Hybrid, seed: u64) -> Shape<W> {
    Shape { trace: true, ..Shape::new(WD, w, hybrid, seed) }
}

/// The longest LOCK stage of the run, from the trace.
fn longest_lock(r: &TxnRunResult) -> u64 {
    r.trace.iter().filter(|e| e.category == STAGE && e.name == "lock").map(|e| e.end_ns - e.start_ns).max().unwrap_or(0)
}

/// Serializable, nothing lost, invariants hold, no failures, some commits, and no wait ran
/// into the bound (a deadlock would: a LOCK stage would then last `WAIT_BOUND_NS`).
fn check_clean(s: &Shape<W>, r: &TxnRunResult, min_commits: u64) -> Result<(), String> {
    s.check(r)?;
    if r.stats.committed < min_commits {
        return Err(format!("{}: only {} commits", s.replay(), r.stats.committed));
    }
    let longest = longest_lock(r);
    if longest >= WAIT_BOUND_NS {
        return Err(format!("{}: a LOCK stage took {longest} ns: a wait hit the bound (deadlock?)", s.replay()));
    }
    Ok(())
}

/// Every hybrid code (16 combinations of LOCK, LOG, RELEASE, COMMIT) on SmallBank and YCSB at
/// low and high contention: serializable, nothing lost, no deadlock.
#[test]
fn every_hybrid_code_is_serializable_and_deadlock_free() {
    let codes = Hybrid::all_codes(WD.stages());
    assert_eq!(codes.len(), 16);
    for code in codes {
        for w in WORKLOADS {
            for seed in [1, 2] {
                let s = shape(w, code, seed);
                let r = s.run();
                check_clean(&s, &r, 20).unwrap();
                if w != W::YcsbLow {
                    assert!(r.stats.aborted_conflict > 0, "{}: no conflicts, so no contention tested", s.replay());
                }
            }
        }
    }
}

proptest! {
    // Random cluster shapes x codes x workloads x seeds, each a full run and check.
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_shapes_are_serializable_and_deadlock_free(
        nodes in 2u16..=4,
        workers in 1u16..=2,
        coroutines in 1u32..=4,
        replication in 1u16..=3,
        code in 0usize..16,
        w in 0usize..3,
        seed in 0u64..1_000_000,
    ) {
        let s = Shape {
            nodes,
            workers,
            coroutines,
            replication: replication.min(nodes),
            ..shape(WORKLOADS[w], Hybrid::all_codes(WD.stages())[code], seed)
        };
        let r = s.run();
        let res = check_clean(&s, &r, 1);
        prop_assert!(res.is_ok(), "{}", res.unwrap_err());
    }
}

/// Transactions do wait: by RPC, some LOCK calls are answered long after the handler ran
/// (deferred, then granted on release); one-sided, LOCK retries its CAS + READ (more round
/// trips than LOCK stages).
#[test]
fn older_transactions_wait() {
    let rpc = shape(W::YcsbHigh, Hybrid::RPC, 2);
    let r = rpc.run();
    check_clean(&rpc, &r, 20).unwrap();
    let mut lock_calls: Vec<u64> = r
        .trace
        .iter()
        .filter(|e| e.coroutine.is_some() && e.name == "WD_LOCK")
        .map(|e| e.end_ns - e.start_ns)
        .collect();
    lock_calls.sort();
    let median = lock_calls[lock_calls.len() / 2];
    let waited = lock_calls.iter().filter(|&&d| d > 4 * median).count();
    assert!(waited > 0, "no LOCK call waited (median {median} ns, {} calls)", lock_calls.len());

    let one = shape(W::YcsbHigh, Hybrid(Stage::Lock.bit()), 2);
    let r = one.run();
    check_clean(&one, &r, 20).unwrap();
    let i = stage_index(Stage::Lock);
    assert!(
        r.stats.stage_round_trips[i] > r.stats.stage_calls[i],
        "{}: one-sided LOCK never retried ({} round trips, {} stages)",
        one.replay(),
        r.stats.stage_round_trips[i],
        r.stats.stage_calls[i]
    );
}

/// The RDMA optimisations switched on and off keep WAIT-DIE serializable and deadlock free,
/// by RPC and one-sided.
#[test]
fn every_option_combination_is_serializable() {
    for bits in 0..16u32 {
        let options = rdma_options(bits);
        for hybrid in [Hybrid::RPC, Hybrid::full(WD.stages())] {
            let s = Shape { options, ..shape(W::YcsbHigh, hybrid, 5) };
            let r = s.run();
            check_clean(&s, &r, 5).unwrap();
        }
    }
}

/// The planted bug (a transaction that waited uses the tuple it saw before the wait, not the
/// holder's write-back) is caught, by RPC (the wait list) and one-sided (CAS retries).
#[test]
fn planted_stale_read_is_caught() {
    for hybrid in [Hybrid::RPC, Hybrid::full(WD.stages())] {
        let caught = (1..=1000u64).find(|&seed| {
            let s = Shape { bug: Some(txbed_protocols::waitdie::STALE_READ), ..shape(W::YcsbHigh, hybrid, seed) };
            let r = s.run();
            if !r.clean() {
                eprintln!(
                    "caught at seed {seed}: {}\n{:?}",
                    s.replay(),
                    r.report.anomalies.first().map(|a| &a.explanation)
                );
            }
            !r.clean()
        });
        assert!(caught.is_some(), "stale read after a wait not caught in 1000 seeds ({hybrid})");
    }
}

/// Runs replay bit for bit.
#[test]
fn runs_are_deterministic() {
    let s = shape(W::SmallBank, Hybrid(1 | 8), 9);
    let (a, b) = (s.run(), s.run());
    assert_eq!(a.digest, b.digest);
    assert_eq!(a.history, b.history);
}
