//! Issue 15: log reclamation stays off the critical path (DrTM+H Sec. 5.4: "log reclaiming is
//! not on the critical path ... the claiming can be done in the background").
//!
//! A one-sided writer sends a lazy, one-way RECLAIM after every `log_reclaim_bytes` of a ring;
//! the backup applies the batch and answers with a one-way RECLAIMED that the writer's event
//! loop records. A writer waits for room (an awaited RECLAIM) only when its ring is full
//! (`tests/tests/tpcc.rs`, `small_log_rings_lose_nothing`, makes them wait). Before
//! RECLAIMED existed, a writer learned what the backup had applied only by waiting, so every
//! lap of a ring cost a wait for the backup to apply half a ring (~130 us on the quickstart),
//! and rings larger than a run's traffic hid the backups' apply work from the window.

use txbed_runner::TxnRunResult;
use txbed_tests::harness::*;
use txbed_txn::protocol::Rdma as Options;
use txbed_txn::stage::Hybrid;

/// OCC on SmallBank with one-sided LOG, 8 coroutines: rings of `ring_kib`, reclaims every
/// `reclaim_kib`, 600 us.
fn run(ring_kib: u64, reclaim_kib: u64) -> (Shape<W>, TxnRunResult) {
    let options =
        Options { log_ring_bytes: ring_kib << 10, log_reclaim_bytes: reclaim_kib << 10, ..Options::default() };
    let s = Shape {
        coroutines: 8,
        options,
        duration_ns: 600_000,
        ..Shape::new(OCC, W::YcsbLow, Hybrid::full(OCC.stages()), 11)
    };
    let r = s.run();
    s.assert_clean(&r);
    (s, r)
}

/// With lazy reclaims every 2 KiB of a 16 KiB ring, the backups' RECLAIMED reports free the
/// rings long before they fill: many laps, no writer ever waits.
#[test]
fn lazy_reclaims_keep_writers_from_waiting() {
    let (s, r) = run(16, 2);
    let rings = s.nodes as u64 * s.workers as u64 * 2;
    let laps = r.stats.log_bytes / (rings * (16 << 10));
    assert!(laps >= 3, "{}: {} B logged, {laps} laps", s.replay(), r.stats.log_bytes);
    assert_eq!(r.stats.log_room_waits, 0, "{}", s.replay());
}

/// The backups' apply work is done in the window whatever the ring size: with reclaims every
/// 4 KiB, 64 KiB and 1 MiB rings commit within 2% of each other (before RECLAIMED, a ring larger
/// than the run's traffic was never reclaimed in the window, and looked 40% faster).
#[test]
fn ring_size_does_not_hide_the_backups_work() {
    let (_, small) = run(64, 4);
    let (s, big) = run(1024, 4);
    let (a, b) = (small.stats.committed as f64, big.stats.committed as f64);
    assert!(a > 1000.0, "{}: {a} commits", s.replay());
    assert!((a - b).abs() / a < 0.02, "{}: 64 KiB rings {a} commits, 1 MiB {b}", s.replay());
}

/// A larger batch stalls the backup's worker longer in one handler run (it serves nothing else
/// meanwhile), which shows in the commit latency's tail.
#[test]
fn a_larger_reclaim_batch_lengthens_the_tail() {
    let (_, small) = run(64, 1);
    let (s, big) = run(64, 32);
    let p99 = |r: &TxnRunResult| r.measured.latency_ns.value_at_quantile(0.99);
    assert!(p99(&big) > p99(&small), "{}: p99 {} ns at 1 KiB, {} ns at 32 KiB", s.replay(), p99(&small), p99(&big));
}
