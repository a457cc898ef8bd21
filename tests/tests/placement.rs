//! Issue 15, mechanism 3 (placement): which warehouses a worker's transactions touch. TPC-C's
//! `home_warehouse` binds worker k of a node to its share of the node's warehouses (`Worker`,
//! the default: DrTM+H's one warehouse per worker thread) or lets any worker draw any of them
//! (`Node`: RCC's clients hand requests to any processing thread). The binding decides whether
//! a node's workers meet on district next-order-id counters.
//!
//! Setting: OCC, new-order only with no remote lines (`remote_item` and `distributed` 0), 2
//! warehouses per node, one coordinator per worker, 100,000 items. A new-order then writes only
//! rows of its home warehouse (its DISTRICT, ORDER, NEW-ORDER and ORDER-LINE rows, STOCK) and
//! reads WAREHOUSE, CUSTOMER and its node's ITEM replica, which no new-order writes, so OCC's
//! validation of those reads always passes (NOWAIT would lock them: ITEM rows are shared by a
//! node's workers). Two new-orders can conflict only if they share a written record.
//!
//! Expected rates, from first principles. Let q be the probability that two new-orders drawn
//! for one node share a written record: the same district (1/(10 W) = 1/20 under `Node`) or a
//! STOCK row of the same warehouse: 1/2 x about 100 line pairs x 1.8e-4, the chance two
//! NURand(8191) items of 100,000 match (13 low bits ORed, each 1 w.p. 3/4, match w.p. (5/8)^13;
//! the high bits take about 12 values), about 0.009. So q is about 0.059; the test draws it.
//! A new-order aborts if one that shares a record with it holds its locks or commits between its
//! lookup of D_NEXT_O_ID and its validation. In a closed loop every other coordinator of the node
//! runs one new-order per cycle, and this one's lookup-to-validation plus the other's
//! lock-to-write-back make about one cycle, so an attempt meets about e = 1 new-order of each
//! other coordinator. Each window is at most a cycle, so e is at most 2, and a retry after a
//! conflict meets its partner again, which adds up to one more: e up to 3. Such new-orders touch
//! only their own node (the local path: CPU time for every record, the LOG to the backups the
//! one round trip), so the lock-to-write-back window, mostly that round trip, is most of a
//! cycle and e is nearer 2 than 1. With c coordinators drawing independently the conflict rate
//! per attempt is r = 1 - (1 - q)^(e (c - 1)): 0.056 for c = 2 and 0.16 for c = 4 at e = 1,
//! three times that at e = 3 (for small q). Bound to its own
//! warehouse (`Worker`, workers <= W) a coordinator is the only writer of its rows and runs one
//! transaction at a time: no conflict at all, r = 0. With 4 workers on 2 warehouses, `Worker`
//! gives workers k and k + 2 one warehouse: each meets exactly one other coordinator, always on
//! its warehouse, so r = 2q = 0.11 (e = 1), below `Node`'s 0.16 for the same 4 workers.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use txbed_runner::TxnRunResult;
use txbed_tests::harness::*;
use txbed_txn::stage::Hybrid;
use txbed_workloads::tpcc::{HomeWarehouse, Tpcc};
use txbed_workloads::{Terminal, Workload};

const W: u32 = 2;

fn tpcc(home: HomeWarehouse) -> Tpcc {
    Tpcc {
        warehouses_per_node: W,
        new_order_only: true,
        distributed: 0.0,
        remote_item: 0.0,
        items: 100_000,
        customers_per_district: 30,
        order_headroom: 3000,
        history_per_terminal: 16,
        home_warehouse: home,
        ..Tpcc::default()
    }
}

/// Conflicts per attempt (committed, conflict and user aborts).
fn rate(r: &TxnRunResult) -> f64 {
    let s = &r.stats;
    s.aborted_conflict as f64 / (s.committed + s.aborted_conflict + s.aborted_user) as f64
}

/// q: how often two new-orders drawn for one node under `Node` share a written record, and
/// how often the same district, from 50,000 pairs of the generator's own draws.
fn overlap() -> (f64, f64) {
    let t = tpcc(HomeWarehouse::Node).prepare(3, 2, 1);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut draw = || {
        let s = t.generate_at(&mut rng, 1, 3, Terminal::default());
        t.resolve(&s, &[vec![1]]).unwrap() // DISTRICT is the last write
    };
    let (n, mut any, mut district) = (50_000, 0, 0);
    for _ in 0..n {
        let (a, b) = (draw(), draw());
        district += (a.writes.last() == b.writes.last()) as u32;
        any += a.writes.iter().any(|k| b.writes.contains(k)) as u32;
    }
    (any as f64 / n as f64, district as f64 / n as f64)
}

// Two tests, one per mode, so they run side by side (each is four TPC-C runs).
#[test]
fn binding_workers_to_warehouses_decides_district_contention_over_rpc() {
    binding_decides_district_contention(Hybrid::RPC);
}

#[test]
fn binding_workers_to_warehouses_decides_district_contention_one_sided() {
    binding_decides_district_contention(Hybrid::full(OCC.stages()));
}

fn binding_decides_district_contention(hybrid: Hybrid) {
    let (q, same_district) = overlap();
    // Uniform over the node's 10 W districts, and STOCK adds a little (about 0.009).
    assert!((same_district - 0.05).abs() < 0.005, "same district {same_district}");
    assert!(q > same_district && q < same_district + 0.02, "q {q}, same district {same_district}");
    let expect = |c: i32| 1.0 - (1.0 - q).powi(c - 1);
    let within = |r: f64, p: f64| r >= 0.5 * p && r <= 3.0 * p;
    let run = |home, workers| {
        let s = Shape { workers, coroutines: 1, duration_ns: 2_000_000, ..Shape::new(OCC, tpcc(home), hybrid, 1) };
        let r = s.run();
        s.assert_clean(&r);
        s.assert_commits(&r, 120);
        (rate(&r), r.stats.aborted_conflict, s.replay())
    };
    let (bound, conflicts, replay) = run(HomeWarehouse::Worker, 2);
    assert_eq!(conflicts, 0, "{replay}: a coordinator alone on its warehouse conflicted");
    let (node2, _, replay) = run(HomeWarehouse::Node, 2);
    assert_eq!(bound, 0.0);
    assert!(within(node2, expect(2)), "{replay}: r = {node2}, expected {}", expect(2));
    let (node4, _, replay) = run(HomeWarehouse::Node, 4);
    assert!(within(node4, expect(4)), "{replay}: r = {node4}, expected {}", expect(4));
    // (c - 1) = 3 against 1: about 2.8 times the rate.
    assert!(node4 > 1.5 * node2, "{replay}: 4 workers {node4}, 2 workers {node2}");
    let (shared, _, replay) = run(HomeWarehouse::Worker, 4);
    assert!(within(shared, 2.0 * q) && shared < node4, "{replay}: r = {shared}, expected {}", 2.0 * q);
    eprintln!("{hybrid}: q {q:.4}, r: Worker/2 {bound}, Node/2 {node2:.4}, Node/4 {node4:.4}, Worker/4 {shared:.4}");
}
