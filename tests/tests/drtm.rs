//! DrTM on the simulator with its HTM model: every run checked strict serializable (the level
//! DrTM claims, Sec. 5.5) with nothing lost and the workload's invariants holding, on
//! SmallBank, YCSB and TPC-C, one-sided and by RPC; the fallback handler forced by a tiny
//! cache; random shapes; each planted bug caught, and a DELTA set below the clocks' real
//! disagreement caught. Failures print the shape to replay.

use proptest::prelude::*;
use serde_json::json;
use txbed_checker::Level;
use txbed_runner::campaign::{self, Kind};
use txbed_runner::{run_txns, TxnRunResult, TxnRunSpec};
use txbed_sim::clock::ClockConfig;
use txbed_sim::cpu::CpuProfile;
use txbed_tests::harness::{problems, Load, Protocol, Shape, W, WORKLOADS};
use txbed_txn::stage::Hybrid;
use txbed_workloads::tpcc::{Chopping, Tpcc, PIECE_KINDS};

const DRTM: Protocol = &txbed_protocols::drtm::Drtm;

/// 3 nodes x 2 workers x 4 coroutines, 200 us. Leases scaled to these short runs: the paper's
/// 0.4 ms (1 ms read-only) would hold a hot record against every writer for two whole runs.
fn shape<L: Load>(w: L, hybrid: Hybrid, seed: u64) -> Shape<L> {
    Shape {
        replication: 1,
        duration_ns: 200_000,
        protocol_options: json!({ "lease_us": 10.0, "ro_lease_us": 25.0 }),
        ..Shape::new(DRTM, w, hybrid, seed)
    }
}

fn tpcc() -> Tpcc {
    Tpcc { warehouses_per_node: 2, items: 1000, customers_per_district: 60, order_headroom: 200, ..Tpcc::default() }
}

const MODES: [Hybrid; 2] = [Hybrid::RPC, Hybrid(1 | 4 | 16)];

/// Runs a spec built from a shape (a CPU profile or clocks changed) and checks it.
#[track_caller]
fn run_spec(spec: &TxnRunSpec, what: &str) -> TxnRunResult {
    run_txns(spec).unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[test]
fn every_workload_runs_strict_serializable_one_sided_and_by_rpc() {
    assert_eq!(Hybrid::full(DRTM.stages()), MODES[1]);
    for hybrid in MODES {
        for w in WORKLOADS {
            for seed in [1, 2] {
                let s = shape(w, hybrid, seed);
                let r = s.run();
                s.assert_clean(&r);
                s.assert_commits(&r, 20);
                assert_eq!(r.report.level, Level::StrictSerializable, "{}", s.replay());
                let h = &r.stats.htm;
                assert!(h.regions > 0 && h.committed > 0, "{}: no HTM region committed: {h:?}", s.replay());
            }
        }
        let s = shape(tpcc(), hybrid, 1);
        let r = s.run();
        s.assert_clean(&r);
        s.assert_commits(&r, 10);
    }
}

/// Remote reads and writes really happen (a run of local transactions only would prove
/// little): with half of SmallBank's SP/AMG cross-node, START posts CASes and both local and
/// RDMA conflicts abort regions.
#[test]
fn distributed_transactions_lock_remotely_and_conflicts_abort_regions() {
    let s = Shape { coroutines: 4, workers: 3, duration_ns: 400_000, ..shape(W::YcsbHigh, MODES[1], 3) };
    let r = s.run();
    s.assert_clean(&r);
    let cas = r.verbs[txbed_transport::Opcode::Cas as usize];
    assert!(cas > 50, "{}: only {cas} CASes", s.replay());
    let h = &r.stats.htm;
    assert!(h.aborts[1] + h.aborts[2] > 0, "{}: no conflict aborted a region: {h:?}", s.replay());
}

/// A CPU whose L1 holds one line per set and way: every region writing two lines of one set
/// aborts for capacity, so transactions run the fallback handler (Sec. 7.2), which locks
/// everything in a global order and updates outside HTM: still strict serializable.
#[test]
fn capacity_aborts_take_the_fallback_handler_and_stay_serializable() {
    for hybrid in MODES {
        for w in [W::SmallBank, W::YcsbHigh] {
            let s = shape(w, hybrid, 4);
            let mut spec = s.spec();
            spec.cpu = CpuProfile { l1_sets: 1, l1_ways: 1, ..CpuProfile::load("haswell").unwrap() };
            let r = run_spec(&spec, &s.replay());
            assert!(r.clean(), "{}\n{}", s.replay(), problems(&r));
            let h = &r.stats.htm;
            assert!(h.aborts[0] > 0 && h.fallbacks > 0, "{}: {h:?}", s.replay());
            assert!(r.stats.committed > 20, "{}: {} commits", s.replay(), r.stats.committed);
        }
        let s = shape(tpcc(), hybrid, 4);
        let mut spec = s.spec();
        spec.cpu = CpuProfile { l1_sets: 1, l1_ways: 1, ..CpuProfile::load("haswell").unwrap() };
        let r = run_spec(&spec, &s.replay());
        assert!(r.clean(), "{}\n{}", s.replay(), problems(&r));
        assert!(r.stats.htm.fallbacks > 0, "{}", s.replay());
    }
}

/// Interrupts at a high rate and no retries: most regions die, the fallback carries the load.
#[test]
fn system_aborts_and_no_retries_stay_serializable() {
    let s =
        Shape { protocol_options: json!({ "htm_retries": 0, "lease_us": 10.0 }), ..shape(W::SmallBank, MODES[1], 6) };
    let mut spec = s.spec();
    spec.cpu = CpuProfile { system_aborts_per_ms: 2000.0, ..CpuProfile::load("haswell").unwrap() };
    let r = run_spec(&spec, &s.replay());
    assert!(r.clean(), "{}\n{}", s.replay(), problems(&r));
    assert!(r.stats.htm.aborts[3] > 0 && r.stats.htm.fallbacks > 0, "{:?}", r.stats.htm);
}

#[test]
fn every_hybrid_code_is_strict_serializable() {
    let codes = Hybrid::all_codes(DRTM.stages());
    assert_eq!(codes.len(), 8);
    for code in codes {
        for w in [W::SmallBank, W::YcsbHigh] {
            let s = Shape { replication: 2, ..shape(w, code, 7) };
            let r = s.run();
            s.assert_clean(&r);
            s.assert_commits(&r, 10);
        }
    }
}

/// Cooperative logging (Sec. 5.6) writes a lock-ahead record per transaction with remote
/// writes and a write-ahead record per region or fallback; off, nothing. The write-ahead log
/// sits in the region's write set: on TPC-C it costs capacity aborts. Clean either way.
#[test]
fn logging_writes_nvram_records_and_costs_capacity() {
    let mut with = Vec::new();
    for logging in [true, false] {
        let s = Shape {
            protocol_options: json!({ "lease_us": 10.0, "ro_lease_us": 25.0, "logging": logging }),
            duration_ns: 400_000,
            ..shape(tpcc(), MODES[1], 2)
        };
        let r = s.run();
        s.assert_clean(&r);
        if logging {
            assert!(
                r.stats.nvram_log_records > r.stats.committed / 2,
                "{}: {:?}",
                s.replay(),
                r.stats.nvram_log_records
            );
            assert!(r.stats.nvram_log_bytes > 100 * r.stats.nvram_log_records, "{}", s.replay());
        } else {
            assert_eq!(r.stats.nvram_log_records, 0, "{}", s.replay());
        }
        with.push(r.stats.htm.aborts[0] as f64 / r.stats.htm.regions.max(1) as f64);
    }
    assert!(with[0] > with[1], "capacity aborts per region with logging {} <= without {}", with[0], with[1]);
}

#[test]
fn runs_are_deterministic() {
    let s = shape(W::YcsbHigh, MODES[1], 9);
    assert_eq!(s.run().digest, s.run().digest);
}

/// Transaction chopping (Sec. 4): TPC-C chopped by the default and by the optimized
/// analysis, one-sided and by RPC. Every piece is checked strict serializable as a
/// transaction of its own, and the whole transactions' invariants (TPC-C 3.3.2, the money)
/// hold, which a transaction left half done would break; the pieces ran as regions of their
/// own.
#[test]
fn chopped_tpcc_is_strict_serializable_and_finishes_every_transaction() {
    for chopping in [Chopping::Default, Chopping::Optimized] {
        for hybrid in MODES {
            let s = shape(Tpcc { chopping, ..tpcc() }, hybrid, 3);
            let r = s.run();
            s.assert_clean(&r);
            s.assert_commits(&r, 10);
            let committed = |kind: &str| {
                r.history
                    .txns
                    .iter()
                    .filter(|t| t.label == kind && t.status == txbed_checker::Status::Committed)
                    .count()
            };
            assert!(committed(PIECE_KINDS[0]) >= 2 * committed("new-order"), "{}: new-order not chopped", s.replay());
            if chopping == Chopping::Optimized {
                assert!(
                    committed(PIECE_KINDS[1]) > 0 && committed("payment") == 0,
                    "{}: payment not chopped",
                    s.replay()
                );
            }
            assert!(r.stats.htm.regions > r.stats.committed, "{}: {:?}", s.replay(), r.stats.htm);
        }
    }
}

/// The planted GivesUpPiece (a later piece dropped after a conflict) leaves payments half
/// done: W_YTD without its district's D_YTD. One warehouse per machine, so payments meet.
#[test]
fn a_dropped_piece_is_caught() {
    let t = Tpcc { warehouses_per_node: 1, chopping: Chopping::Optimized, ..tpcc() };
    let caught = (1..=4).any(|seed| {
        let s = Shape { bug: Some(txbed_txn::chop::GIVES_UP_PIECE), ..shape(t.clone(), MODES[1], seed) };
        let r = s.run();
        !r.report.invariants_ok
    });
    assert!(caught, "GivesUpPiece not caught in 4 seeds");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_shapes_are_strict_serializable(
        nodes in 1u16..=4,
        workers in 1u16..=3,
        coroutines in 1u32..=4,
        code in 0usize..8,
        w in 0usize..4,
        retries in 0u32..4,
        lease_us in prop::sample::select(vec![2.0, 20.0, 400.0]),
        chopping in prop::sample::select(vec![Chopping::Off, Chopping::Default, Chopping::Optimized]),
        seed in 0u64..1_000_000,
    ) {
        let hybrid = Hybrid::all_codes(DRTM.stages())[code];
        let opts = json!({ "htm_retries": retries, "lease_us": lease_us, "ro_lease_us": lease_us });
        if w < 3 {
            let s = Shape { nodes, workers, coroutines, protocol_options: opts, replication: 1, ..shape(WORKLOADS[w], hybrid, seed) };
            let r = s.run();
            prop_assert!(s.check(&r).is_ok(), "{}", s.check(&r).unwrap_err());
        } else {
            let t = Tpcc { chopping, ..tpcc() };
            let s = Shape { nodes, workers, coroutines, protocol_options: opts, replication: 1, ..shape(t, hybrid, seed) };
            let r = s.run();
            prop_assert!(s.check(&r).is_ok(), "{}", s.check(&r).unwrap_err());
        }
    }
}

/// YCSB over 2 rows per node, 2 operations of which half write: every transaction reads or
/// writes a record of another node, and many of them share records.
#[derive(Clone, Debug)]
struct TinyYcsb;

impl Load for TinyYcsb {
    fn workload(&self, nodes: u16, _: u16, _: u32) -> std::sync::Arc<dyn txbed_workloads::Workload> {
        let y = txbed_workloads::ycsb::Ycsb {
            rows_per_node: 2,
            ops: 2,
            write_fraction: 0.5,
            hot_probability: 0.0,
            ..txbed_workloads::ycsb::Ycsb::default()
        };
        std::sync::Arc::new(y.prepare(nodes))
    }
}

/// A run where leases matter: 3 nodes, node 0 far (10 us one way) from node 2 and near (1 us)
/// to node 1, which is near node 2. A read-only transaction on node 0 of a record on node 1
/// and one on node 2 reads the first ~10 us before the second; in that time a transaction on
/// node 1 can write its local record and the one on node 2, unless the reader's lease on the
/// first stops it. A lease broken there is a torn read, which the checker sees.
fn torn_read_spec(lease_us: f64, bug: Option<txbed_txn::protocol::Bug>, seed: u64) -> (TxnRunSpec, String) {
    let s = Shape {
        workers: 2,
        coroutines: 2,
        duration_ns: 2_000_000,
        bug,
        protocol_options: json!({ "lease_us": lease_us, "ro_lease_us": lease_us }),
        ..shape(TinyYcsb, MODES[1], seed)
    };
    let mut spec = s.spec();
    spec.link_delay_ns = vec![0, 1000, 10_000, 1000, 0, 1000, 10_000, 1000, 0];
    // Short back-off: the conflicting pairs must keep meeting.
    spec.retry = txbed_txn::retry::Retry::Backoff { first_us: 1, max_us: 4 };
    (spec, s.replay())
}

#[test]
fn planted_bugs_are_caught() {
    use txbed_protocols::drtm::*;
    // Leases that outlive the far read (60 us): local writes must respect them; a read must
    // not count on a lease it did not renew. Leases that do not (5 us): the confirmation
    // before commit is all that catches the expiry.
    for (lease_us, bugs) in
        [(60.0, vec![LOCAL_WRITE_IGNORES_LEASE, SHARES_EXPIRED_LEASE]), (5.0, vec![COMMIT_WITHOUT_LEASE_CONFIRMATION])]
    {
        for seed in 0..2 {
            let (spec, replay) = torn_read_spec(lease_us, None, seed);
            let r = run_spec(&spec, &replay);
            assert!(r.clean() && r.stats.committed > 5, "{replay}: {} commits\n{}", r.stats.committed, problems(&r));
        }
        for bug in bugs {
            let caught =
                (0..6).filter(|&seed| !run_spec(&torn_read_spec(lease_us, Some(bug), seed).0, bug.name).clean());
            assert!(caught.count() >= 1, "{} escaped in 6 runs", bug.name);
        }
    }
}

/// Free-running clocks 80 us apart (node 0 slow, node 1 fast), honestly bounded (45 us each):
/// with DELTA from the bound, leases hold (the torn-read run above stays clean); with DELTA
/// set to 0 (the planted mis-configuration) node 1 sees node 0's leases expired long before
/// node 0 stops relying on them, and the checker catches the torn reads.
#[test]
fn delta_below_the_clock_skew_is_caught() {
    let run = |delta: Option<u64>, seed: u64| {
        let (mut spec, replay) = torn_read_spec(70.0, None, seed);
        spec.protocol_options = json!({ "lease_us": 70.0, "ro_lease_us": 70.0, "delta_ns": delta });
        spec.clocks.sim = Some(ClockConfig {
            offset_ns: vec![-40_000, 40_000, 0],
            drift_ppb: vec![0; 3],
            max_drift_ppb: 0,
            sync: None,
            free_bound_ns: 45_000,
        });
        let r = run_spec(&spec, &replay);
        (r.clean(), r.stats.committed, replay, problems(&r))
    };
    for seed in 0..2 {
        let (clean, committed, replay, why) = run(None, seed);
        assert!(clean && committed > 5, "{replay}: {committed} commits\n{why}");
    }
    let flagged = (0..6).filter(|&seed| !run(Some(0), seed).0).count();
    assert!(flagged >= 1, "a DELTA of 0 under 80 us of skew went unnoticed in 6 runs");
}

/// The sockets backend (every node a thread of this process, real clocks, real threads) runs
/// DrTM with the emulated HTM: checked serializable, and the report names the mode. (Not strict
/// serializable: a real backend's history times are each process's own monotonic clock, so
/// real-time order across nodes is not comparable there.)
#[test]
fn sockets_run_drtm_with_the_emulated_htm() {
    for w in [W::SmallBank, W::YcsbLow] {
        let s = Shape {
            // 60 ms: in 30, a run beside the rest of the suite on 2 cores once made 96 commits.
            duration_ns: 60_000_000,
            // Round trips over loopback TCP on a loaded 2-core machine can take a millisecond:
            // leases of the simulator's scale would expire before START ends.
            protocol_options: json!({ "lease_us": 5000.0, "ro_lease_us": 10000.0 }),
            ..shape(w, MODES[1], 1)
        };
        let mut spec = s.spec();
        // One host: every process reads the same clock.
        spec.clocks.host_bound_ns = 1_000;
        spec.warmup_ns = 5_000_000;
        let r = txbed_tests::harness::run_sockets(&spec);
        assert_eq!(r.report.level, Level::Serializable, "real backends check strict claims at serializable");
        assert!(r.clean(), "{}\n{}", s.replay(), problems(&r));
        assert!(
            r.stats.committed > 100 && r.stats.htm.committed > 0,
            "{}: {} commits, {:?}",
            s.replay(),
            r.stats.committed,
            r.stats.htm
        );
        assert!(r.htm_mode.as_deref().is_some_and(|m| m.starts_with("emulated")), "{:?}", r.htm_mode);
    }
}

/// The crash campaign of `file` (its own random crashes) over `seeds`, with `bug` planted.
fn crash_campaign(file: &str, seeds: std::ops::RangeInclusive<u64>, bug: Option<&str>) -> Vec<campaign::Row> {
    crash_campaign_set(file, &[], seeds, bug)
}

/// [`crash_campaign`] with `sets` applied to the scenario (`--set` syntax).
fn crash_campaign_set(
    file: &str,
    sets: &[&str],
    seeds: std::ops::RangeInclusive<u64>,
    bug: Option<&str>,
) -> Vec<campaign::Row> {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let (s, _) = txbed_scenario::Scenario::load(&root.join(file)).unwrap();
    let sets: Vec<String> = sets.iter().map(|x| x.to_string()).collect();
    let s = txbed_scenario::set::apply(&s, &sets).unwrap();
    let (targets, profile, bug) = campaign::prepare(&s, file, None, &campaign::Protocols::Scenario, bug).unwrap();
    let setup = campaign::Setup { targets, profile, seeds: seeds.collect(), bug };
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    campaign::run_all(&setup, jobs, &|_| {})
}

fn replay_line(file: &str, r: &campaign::Row) -> String {
    format!(
        "seed {}: {:?} {} (txbed campaign {file} --from-seed {} --seeds 1)",
        r.seed, r.outcome.kind, r.outcome.detail, r.seed
    )
}

/// Sec. 5.6: machines crash at random points of SmallBank and TPC-C and restart (no
/// replication, memory in NVRAM); every run ends with nothing committed lost, strict
/// serializable, invariants holding. The runs exercise recovery: crashed machines' committed
/// transactions rolled forward from their write-ahead logs (Fig. 11b) and their locks on
/// surviving machines released (Fig. 11a). CI-sized; the 500-seed campaigns are
/// `txbed campaign scenarios/drtm/campaign-{smallbank,tpcc}.ron --seeds 500`.
#[test]
fn crashes_at_random_points_lose_nothing() {
    let mut rolled = 0;
    let mut released = 0;
    for (file, seeds) in [("scenarios/drtm/campaign-smallbank.ron", 16), ("scenarios/drtm/campaign-tpcc.ron", 8)] {
        let rows = crash_campaign(file, 1..=seeds, None);
        let bad: Vec<String> =
            rows.iter().filter(|r| r.outcome.kind != Kind::Clean).map(|r| replay_line(file, r)).collect();
        assert!(bad.is_empty(), "{file}:\n{}", bad.join("\n"));
        assert!(rows.iter().map(|r| r.outcome.faults_applied).sum::<usize>() >= seeds as usize, "{file}: few crashes");
        rolled += rows.iter().map(|r| r.outcome.rolled_forward).sum::<u64>();
        released += rows.iter().map(|r| r.outcome.locks_released).sum::<u64>();
    }
    assert!(rolled > 0 && released > 0, "recovery not exercised: {rolled} rolled forward, {released} locks released");
}

/// A recovery that ignores the crashed machine's write-ahead log (the shared planted bug
/// ForgetWal): transactions it had committed at XEND, visible on their machines, are never
/// written back to the others; the checker finds it.
#[test]
fn a_recovery_that_forgets_the_write_ahead_log_is_caught() {
    let file = "scenarios/drtm/campaign-smallbank.ron";
    let rows = crash_campaign(file, 1..=16, Some("forget-wal"));
    let caught = rows.iter().filter(|r| r.outcome.kind.is_failure()).count();
    assert!(caught >= 1, "ForgetWal caught in none of {} runs", rows.len());
    for r in rows.iter().filter(|r| r.outcome.kind.is_failure()) {
        assert!(
            matches!(r.outcome.kind, Kind::NotSerializable | Kind::LostWrites | Kind::Invariant),
            "{}",
            replay_line(file, r)
        );
    }
}

/// Sec. 5.6's chopping information: machines crash at random points of chopped TPC-C; a
/// coordinator that crashed between two pieces finishes its transaction when its machine
/// restarts (or after the run, for one still down), so every run ends with TPC-C's
/// consistency conditions and the money intact, nothing lost, strict serializable.
/// CI-sized; the 500-seed campaign is
/// `txbed campaign scenarios/drtm/campaign-tpcc-chopped.ron --seeds 500`.
#[test]
fn crashes_in_chopped_tpcc_lose_nothing() {
    let file = "scenarios/drtm/campaign-tpcc-chopped.ron";
    let rows = crash_campaign(file, 1..=8, None);
    let bad: Vec<String> =
        rows.iter().filter(|r| r.outcome.kind != Kind::Clean).map(|r| replay_line(file, r)).collect();
    assert!(bad.is_empty(), "{file}:\n{}", bad.join("\n"));
    assert!(rows.iter().map(|r| r.outcome.faults_applied).sum::<usize>() >= 8, "{file}: few crashes");
}

/// A restart that ignores the chopping information (the shared planted bug ForgetChopping)
/// leaves a transaction half done (a payment's W_YTD without its D_YTD): the consistency
/// conditions catch it. Seeds 5-8 include two whose crash falls between two pieces (8 of the
/// first 100 seeds do).
#[test]
fn a_restart_that_forgets_the_chopping_log_is_caught() {
    let file = "scenarios/drtm/campaign-tpcc-chopped.ron";
    let rows = crash_campaign(file, 5..=8, Some("forget-chopping"));
    let caught: Vec<&campaign::Row> = rows.iter().filter(|r| r.outcome.kind.is_failure()).collect();
    assert!(!caught.is_empty(), "ForgetChopping caught in none of {} runs", rows.len());
    for r in caught {
        assert_eq!(r.outcome.kind, Kind::Invariant, "{}", replay_line(file, r));
    }
}

/// Deliveries and order-status made frequent and the epoch long (1 ms), so machines crash
/// with deferred pieces queued: the restarted machine publishes them from its durable queue
/// (nothing lost, every delivery published, 3.3.2.10 holds), and the planted
/// ForgetPublication (the queue lost at the restart) is caught by that condition.
const DEFERRING: [&str; 2] = ["workload.mix=[30,30,10,20,10]", "workload.publish_epoch_ns=1000000"];

#[test]
fn crashes_with_deferred_pieces_queued_lose_nothing_and_a_lost_queue_is_caught() {
    let file = "scenarios/drtm/campaign-tpcc-chopped.ron";
    let rows = crash_campaign_set(file, &DEFERRING, 1..=4, None);
    let bad: Vec<String> =
        rows.iter().filter(|r| r.outcome.kind != Kind::Clean).map(|r| replay_line(file, r)).collect();
    assert!(bad.is_empty(), "{file} {DEFERRING:?}:\n{}", bad.join("\n"));
    let rows = crash_campaign_set(file, &DEFERRING, 1..=4, Some("forget-publication"));
    let caught: Vec<&campaign::Row> = rows.iter().filter(|r| r.outcome.kind.is_failure()).collect();
    assert!(!caught.is_empty(), "ForgetPublication caught in none of {} runs", rows.len());
    for r in caught {
        assert!(r.outcome.detail.contains("3.3.2.10"), "{}", replay_line(file, r));
    }
}

/// Few customers, many deliveries and order-status, a 50 us epoch: delivery's deferred
/// balances are published (after the epoch, and the rest at the end), order-status waits
/// out unpublished orders (Sec. 4.4; counted as aborts of their own cause), and the run is
/// clean: no transaction saw a delivery half done, every balance published.
fn deferring_tpcc() -> Tpcc {
    Tpcc {
        warehouses_per_node: 1,
        customers_per_district: 6,
        mix: [20, 20, 30, 30, 0],
        publish_epoch_ns: 50_000,
        chopping: Chopping::Optimized,
        ..tpcc()
    }
}

#[test]
fn deferred_balances_are_published_and_order_status_waits_for_them() {
    let mut waits = 0;
    for seed in 1..=2 {
        for hybrid in MODES {
            let s = shape(deferring_tpcc(), hybrid, seed);
            let r = s.run();
            s.assert_clean(&r);
            s.assert_commits(&r, 10);
            let deferred = r.history.txns.iter().filter(|t| {
                t.label == PIECE_KINDS[2]
                    && t.status == txbed_checker::Status::Committed
                    && t.writes.iter().all(|w| w.key >> 48 == 5 || w.key >> 48 == 2)
            });
            assert!(deferred.count() > 0, "{}: no deferred piece published", s.replay());
            let half = r.history.invariants.iter().find(|i| i.name.contains("half done")).expect("the check ran");
            assert!(!half.name.contains("among 0 checked"), "{}: {}", s.replay(), half.name);
            waits += r.measured.aborted_by.get(txbed_workloads::tpcc::UNPUBLISHED).copied().unwrap_or(0);
        }
    }
    assert!(waits > 0, "no order-status waited for a publication");
}

/// TPC-C whose order-status ignores the unpublished mark (a planted bug of the workload's
/// logic): it reads a delivered order and its customer's balance before the deferred piece
/// published it, which the half-done check catches.
#[derive(Clone, Debug)]
struct IgnoresUnpublished(Tpcc);

struct IgnoringTpcc(txbed_workloads::tpcc::PreparedTpcc);

impl Load for IgnoresUnpublished {
    fn workload(&self, nodes: u16, workers: u16, coroutines: u32) -> std::sync::Arc<dyn txbed_workloads::Workload> {
        std::sync::Arc::new(IgnoringTpcc(self.0.prepare(nodes, workers, coroutines)))
    }
}

impl txbed_workloads::Workload for IgnoringTpcc {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn tables(&self) -> Vec<txbed_workloads::Table> {
        self.0.tables()
    }
    fn home(&self, key: txbed_workloads::Key, nodes: u16) -> u16 {
        self.0.home(key, nodes)
    }
    fn initial(&self, key: txbed_workloads::Key) -> Vec<u8> {
        self.0.initial(key)
    }
    fn generate(&self, rng: &mut rand_chacha::ChaCha8Rng, node: u16, nodes: u16) -> txbed_workloads::TxnSpec {
        self.0.generate(rng, node, nodes)
    }
    fn generate_at(
        &self,
        rng: &mut rand_chacha::ChaCha8Rng,
        node: u16,
        nodes: u16,
        t: txbed_workloads::Terminal,
    ) -> txbed_workloads::TxnSpec {
        self.0.generate_at(rng, node, nodes, t)
    }
    fn execute(&self, spec: &txbed_workloads::TxnSpec, reads: &[&[u8]], old: &[&[u8]]) -> txbed_workloads::Executed {
        match self.0.execute(spec, reads, old) {
            txbed_workloads::Executed::Wait(_) => {
                txbed_workloads::Executed::Commit { new_values: Vec::new(), external_delta: 0 }
            }
            other => other,
        }
    }
    fn conserved(&self, key: txbed_workloads::Key, value: &[u8]) -> i64 {
        self.0.conserved(key, value)
    }
    fn lookups(&self, spec: &txbed_workloads::TxnSpec) -> Vec<txbed_workloads::Lookup> {
        self.0.lookups(spec)
    }
    fn answer(
        &self,
        args: &[i64],
        index: &mut txbed_workloads::OrderedIndex,
        read: &dyn Fn(txbed_workloads::Key) -> Option<Vec<u8>>,
    ) -> Vec<i64> {
        self.0.answer(args, index, read)
    }
    fn build_index(
        &self,
        node: u16,
        nodes: u16,
        index: &mut txbed_workloads::OrderedIndex,
        read: &dyn Fn(txbed_workloads::Key) -> Option<Vec<u8>>,
    ) {
        self.0.build_index(node, nodes, index, read)
    }
    fn resolve(
        &self,
        spec: &txbed_workloads::TxnSpec,
        answers: &[Vec<i64>],
    ) -> Result<txbed_workloads::TxnSpec, String> {
        self.0.resolve(spec, answers)
    }
    fn chop(&self, spec: &txbed_workloads::TxnSpec) -> Vec<txbed_workloads::TxnSpec> {
        self.0.chop(spec)
    }
    fn chopping(&self) -> Option<String> {
        self.0.chopping()
    }
    fn deferred(&self, piece: &txbed_workloads::TxnSpec) -> bool {
        self.0.deferred(piece)
    }
    fn publish_epoch_ns(&self) -> u64 {
        self.0.publish_epoch_ns()
    }
    fn retry_on_user_abort(&self, spec: &txbed_workloads::TxnSpec) -> bool {
        self.0.retry_on_user_abort(spec)
    }
    fn lock_group(&self, key: txbed_workloads::Key) -> Option<u64> {
        self.0.lock_group(key)
    }
    fn max_accesses(&self) -> Vec<(u16, u32)> {
        self.0.max_accesses()
    }
    fn check_consistency(
        &self,
        node: u16,
        nodes: u16,
        read: txbed_workloads::ReadInto,
    ) -> Vec<txbed_workloads::Consistency> {
        self.0.check_consistency(node, nodes, read)
    }
}

#[test]
fn an_order_status_that_reads_an_unpublished_delivery_is_caught() {
    let caught = (1..=4).any(|seed| {
        let s = shape(IgnoresUnpublished(deferring_tpcc()), MODES[1], seed);
        let r = s.run();
        let half = r.history.invariants.iter().find(|i| i.name.contains("half done")).expect("the check ran");
        half.actual > 0
    });
    assert!(caught, "an order-status that ignores the unpublished mark went unnoticed in 4 seeds");
}

/// Where the logs are volatile, the chopping information dies with the machine: a crash in
/// a chopped run is refused (unsupported), never reported clean.
#[test]
fn a_crash_in_a_chopped_run_with_volatile_logs_is_refused() {
    let file = "scenarios/drtm/campaign-tpcc-chopped.ron";
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let (s, _) = txbed_scenario::Scenario::load(&root.join(file)).unwrap();
    let s = txbed_scenario::set::apply(&s, &["faults.durable=[Store]".to_string()]).unwrap();
    let (targets, profile, bug) = campaign::prepare(&s, file, None, &campaign::Protocols::Scenario, None).unwrap();
    let rows = campaign::run_all(&campaign::Setup { targets, profile, seeds: vec![1, 2], bug }, 2, &|_| {});
    for r in &rows {
        assert_eq!(r.outcome.kind, Kind::Unsupported, "{}", replay_line(file, r));
        assert!(r.outcome.detail.contains("chopped"), "{}", r.outcome.detail);
    }
}
