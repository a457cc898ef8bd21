//! RETRY-2PL under the history checker: every hybrid code on a contended and an
//! uncontended workload is serializable with nothing lost, its options work, and the
//! checker catches the planted bug.

use std::sync::Arc;

use retry_2pl::{RETRY_2PL, STAGES, UNLOCKED_READS};
use txbed_runner::{run_txns, TxnRunResult, TxnRunSpec};
use txbed_txn::stage::Hybrid;
use txbed_workloads::smallbank::SmallBank;
use txbed_workloads::ycsb::Ycsb;
use txbed_workloads::Workload;

fn hot_ycsb() -> Arc<dyn Workload> {
    let y = Ycsb { rows_per_node: 2_000, ops: 4, write_fraction: 0.5, hot_probability: 0.5, ..Ycsb::default() };
    Arc::new(y.prepare(3))
}

fn smallbank() -> Arc<dyn Workload> {
    Arc::new(SmallBank { accounts_per_node: 400, distributed: 0.5, ..SmallBank::default() })
}

fn run(spec: &TxnRunSpec) -> TxnRunResult {
    run_txns(spec).unwrap_or_else(|e| panic!("{e}"))
}

fn verdict(r: &TxnRunResult) -> String {
    format!(
        "serializable={} nothing_lost={:?} invariants_ok={} failures={:?} committed={}",
        r.report.serializable, r.report.nothing_lost, r.report.invariants_ok, r.failures, r.stats.committed
    )
}

#[test]
fn every_hybrid_code_is_serializable() {
    for workload in [hot_ycsb(), smallbank()] {
        for hybrid in Hybrid::all_codes(&STAGES) {
            let spec = TxnRunSpec { hybrid, ..TxnRunSpec::new(&RETRY_2PL, workload.clone()) };
            let r = run(&spec);
            assert!(r.clean(), "{} code {hybrid}: {}", workload.name(), verdict(&r));
            assert!(r.stats.committed > 20, "{} code {hybrid}: {}", workload.name(), verdict(&r));
        }
    }
}

#[test]
fn retries_trade_aborts_for_waiting() {
    let with = |retries: u32| {
        let options = serde_json::json!({ "retries": retries, "backoff_ns": 1000 });
        let r = run(&TxnRunSpec { protocol_options: options, ..TxnRunSpec::new(&RETRY_2PL, hot_ycsb()) });
        assert!(r.clean(), "{}", verdict(&r));
        r.stats.aborted_conflict as f64 / (r.stats.committed + r.stats.aborted_conflict) as f64
    };
    let (none, some) = (with(0), with(8));
    assert!(some < none, "abort rate {none:.3} without retries, {some:.3} with 8");
    // Bad options are refused before anything runs.
    let bad =
        TxnRunSpec { protocol_options: serde_json::json!({ "retry": 1 }), ..TxnRunSpec::new(&RETRY_2PL, hot_ycsb()) };
    let err = run_txns(&bad).err().expect("an unknown option is refused");
    assert!(err.contains("unknown field `retry`"), "{err}");
}

#[test]
fn the_checker_catches_the_planted_bug() {
    let mut caught = 0;
    for hybrid in [Hybrid::RPC, Hybrid::full(&STAGES)] {
        for seed in 1..=3 {
            let spec =
                TxnRunSpec { hybrid, seed, bug: Some(UNLOCKED_READS), ..TxnRunSpec::new(&RETRY_2PL, hot_ycsb()) };
            let r = run(&spec);
            if !r.report.serializable {
                caught += 1;
            }
        }
    }
    assert!(caught >= 4, "the checker caught UnlockedReads in {caught} of 6 runs");
}
