//! Issue 15, fourth defect: YCSB with 90% of accesses on 400 hot rows and 40 coroutines per
//! worker committed nothing under NOWAIT. What a coordinator does after an abort is now a
//! policy (`run.retry`: `Yield`, the seeds' benchmark loop, or a randomised
//! exponential back-off, the default), and every conflict is reported with its cause.

use txbed_runner::from_scenario::run_txn;
use txbed_runner::outcome::TxnRunResult;
use txbed_scenario::Scenario;

/// 4 nodes x 4 workers x 40 coroutines = C = 640 coroutines; 10 accesses, 90% on
/// H = 1% of 4 x 10,000 rows = 400 hot rows: h = 9 hot accesses, all locked exclusively by
/// NOWAIT.
const HOT: &str = r#"Scenario(
    name: "hot",
    cluster: (nodes: 4, workers: 4, coroutines: 40, nic: "cx4", nics_per_node: Some(1)),
    protocol: Some((name: Nowait, mode: Rpc, replication: 3)),
    workload: Ycsb((rows_per_node: 10000, record_bytes: 64, ops: 10, write_fraction: 0.2,
                    hot_fraction: 0.01, hot_probability: 0.9)),
    run: (warmup_us: 100, measure_us: 3000, seed: 1),
)"#;

fn run(sets: &[&str]) -> TxnRunResult {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let (s, profile) = Scenario::parse(HOT, "hot.ron").unwrap();
    let s = s.apply_sets(&sets).unwrap();
    let r = run_txn(&s, &profile, s.run.seed, false, &mut |_, _| {}).unwrap().result;
    assert!(r.clean(), "{sets:?}: {:?} {:?}", r.report, r.failures);
    r
}

/// Every conflict in the window has a cause, and the causes are the protocol's: NOWAIT
/// aborts only on a busy lock.
#[test]
fn aborts_are_reported_by_cause() {
    for protocol in ["nowait", "occ", "waitdie"] {
        let r = run(&[&format!("protocol.name={protocol}"), "cluster.coroutines=8", "run.measure_us=300"]);
        let m = &r.measured;
        assert!(m.aborted > 0, "{protocol}: no conflicts to classify");
        assert_eq!(m.aborted_by.values().sum::<u64>(), m.aborted, "{protocol}: {:?}", m.aborted_by);
        let causes: Vec<&str> = m.aborted_by.keys().map(String::as_str).collect();
        let allowed: &[&str] = match protocol {
            "nowait" => &["lock busy"],
            "occ" => &["lock busy", "read: locked", "lock: changed since read", "validate: changed or locked"],
            _ => &["lock: died (younger)"],
        };
        assert!(causes.iter().all(|c| allowed.contains(c)), "{protocol}: {causes:?}");
    }
}

/// With immediate retries (the seeds' loop) the fraction f of hot rows locked solves
/// H f = C h (1 - f): f = 640 x 9 / (400 + 640 x 9) = 0.94, and an attempt succeeds with
/// probability (1 - f)^9 ~ 1e-11: nothing commits. A back-off whose window grows to 10 ms
/// (far beyond an attempt's ~100 us) leaves few coroutines awake at a time, so f drops and
/// transactions commit once the windows have grown (the first ~1 ms is all collisions): the
/// policy, not the simulator, decides.
#[test]
fn a_back_off_lets_a_livelocked_configuration_commit() {
    let yielding = run(&["run.retry=Yield"]);
    assert_eq!(yielding.measured.committed, 0, "first principles say NOWAIT livelocks here");
    assert!(yielding.measured.aborted > 1000);
    let backoff = run(&["run.retry=Backoff(first_us: 10, max_us: 10000)"]);
    assert!(backoff.measured.committed > 20, "committed {}", backoff.measured.committed);
    // Sleeping coroutines attempt less: fewer conflicts in the same window.
    assert!(backoff.measured.aborted < yielding.measured.aborted);
}

/// `Yield` retries at once; the old default's windows (2 us doubling to 64 us) and the new
/// policy both round-trip through a scenario file, and a bad window is refused.
#[test]
fn retry_policies_parse_and_bad_ones_are_refused() {
    let (s, _) = Scenario::parse(HOT, "hot.ron").unwrap();
    let b = s.apply_sets(&["run.retry=Backoff(first_us: 2, max_us: 64)".into()]).unwrap();
    let again = Scenario::parse(&b.to_ron(), "again.ron").unwrap().0;
    assert_eq!(again.run.retry, b.run.retry);
    let bad = s.apply_sets(&["run.retry=Backoff(first_us: 100, max_us: 10)".into()]).unwrap();
    let e = bad.check("hot.ron").unwrap_err();
    assert!(e.0.contains("run.retry") && e.0.contains("first_us"), "{e}");
    let e = s.apply_sets(&["run.retry=Backoff(first_us: 1, max: 10)".into()]).unwrap_err();
    assert!(e.0.contains("max"), "{e}");
}
