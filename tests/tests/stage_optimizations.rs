//! Issue 15, mechanism 6: doorbell batching, passive ACK and QP-cache misses, visible at the
//! transaction level where the primitives make them visible (bench-verbs reproduces the
//! primitives themselves). One coordinator per node, so no queueing blurs a stage's cost.

use txbed_runner::outcome::TxnRunResult;
use txbed_runner::run_txns;
use txbed_sim::NicProfile;
use txbed_tests::harness::*;
use txbed_txn::node::stage_index;
use txbed_txn::protocol::Rdma;
use txbed_txn::stage::{Hybrid, Stage};

/// YCSB, 4 accesses (half writes), uniform over 2,000 rows per node, 3 nodes x 1 worker x 1
/// coroutine, every stage one-sided.
fn shape(protocol: txbed_txn::ProtocolRef, options: Rdma) -> Shape<W> {
    Shape {
        workers: 1,
        coroutines: 1,
        options,
        duration_ns: 300_000,
        ..Shape::new(protocol, W::YcsbLow, Hybrid::full(protocol.stages()), 1)
    }
}

fn run(s: &Shape<W>, tweak: impl FnOnce(&mut NicProfile)) -> TxnRunResult {
    let mut spec = s.spec();
    tweak(&mut spec.profile);
    let r = run_txns(&spec).unwrap();
    s.assert_clean(&r);
    s.assert_commits(&r, 20);
    r
}

/// Mean time of one execution of `stage`, ns.
fn mean_ns(r: &TxnRunResult, stage: Stage) -> f64 {
    let i = stage_index(stage);
    r.stats.stage_ns[i] as f64 / r.stats.stage_calls[i].max(1) as f64
}

/// Doorbell batching trades CPU for PCIe (docs/nic-model.md, "BlueFlame"): NOWAIT's
/// one-sided LOCK posts a CAS and a READ per record on the record's QP. Batched, they cost one
/// MMIO (`mmio_ns`, 100 ns) instead of two, but the NIC must fetch the two WQEs by a DMA read
/// (`pcie.read_latency_ns`, 400 ns on cx4) instead of finding each in its MMIO. With one
/// coroutine the stage's latency decides: batching makes LOCK slower by about one PCIe read
/// less the MMIOs saved on the way (at most 3 QPs, so between 100 and 400 ns). With 16
/// coroutines per worker the coordinator's CPU decides: each transaction posts ~10 requests
/// in ~6 batches, and saving ~4 MMIOs (400 ns) of its ~2.5 us of CPU work raises throughput.
#[test]
fn doorbell_batching_trades_latency_for_cpu() {
    let cx4 = NicProfile::load("cx4").unwrap();
    let on = run(&shape(NOWAIT, Rdma::default()), |_| {});
    let off = run(&shape(NOWAIT, Rdma { doorbell: false, ..Rdma::default() }), |_| {});
    let saved = mean_ns(&on, Stage::Lock) - mean_ns(&off, Stage::Lock);
    let (read, mmio) = (cx4.pcie.read_latency_ns as f64, cx4.host.mmio_ns as f64);
    assert!(
        saved > read - 3.0 * mmio - 50.0 && saved < read + 50.0,
        "one coroutine: LOCK is {saved:.0} ns faster without batching; expected a PCIe read ({read} ns) less 1-3 MMIOs ({mmio} ns)"
    );
    let busy = |doorbell: bool| {
        let s = Shape { coroutines: 16, ..shape(NOWAIT, Rdma { doorbell, ..Rdma::default() }) };
        run(&s, |_| {}).measured.committed
    };
    let (batched, single) = (busy(true), busy(false));
    assert!(batched as f64 > 1.05 * single as f64, "16 coroutines: {batched} commits batched, {single} not");
}

/// Passive ACK (DrTM+H Sec. 3.2): COMMIT's WRITEs are unsignaled and confirmed by a later
/// signaled request, so the coordinator does not wait a round trip for them: the COMMIT stage
/// shrinks from at least one one-sided round trip (~2 us on cx4: two NIC passes, PCIe and the
/// wire both ways) to the cost of posting (well under 1 us).
#[test]
fn passive_ack_takes_commit_off_the_critical_path() {
    let waited = run(&shape(OCC, Rdma { passive_ack: false, ..Rdma::default() }), |_| {});
    let passive = run(&shape(OCC, Rdma { passive_ack: true, ..Rdma::default() }), |_| {});
    let (w, p) = (mean_ns(&waited, Stage::Commit), mean_ns(&passive, Stage::Commit));
    assert!(w > 1_500.0, "signaled COMMIT {w:.0} ns");
    assert!(p < 1_000.0, "passive COMMIT {p:.0} ns");
}

/// A NIC that keeps fewer QP contexts than the QPs in use misses on most requests and fetches
/// the context over PCIe (DrTM+H Sec. 4). With one context entry and 2 remote QPs per worker
/// plus the peers' QPs arriving at each responder, nearly every request misses; each miss adds
/// `qp_cache.miss_latency_ns` to the request, so one-sided stages slow down by about that much
/// per round trip.
#[test]
fn qp_cache_misses_slow_one_sided_stages() {
    let s = shape(OCC, Rdma::default());
    let fits = run(&s, |_| {});
    let mut miss_latency = 0;
    let thrashes = run(&s, |p| {
        p.qp_cache.entries = 1;
        miss_latency = p.qp_cache.miss_latency_ns;
    });
    assert!(fits.qp_cache_miss_ratio.unwrap() < 0.05, "{:?}", fits.qp_cache_miss_ratio);
    assert!(thrashes.qp_cache_miss_ratio.unwrap() > 0.3, "{:?}", thrashes.qp_cache_miss_ratio);
    let slower = mean_ns(&thrashes, Stage::Read) - mean_ns(&fits, Stage::Read);
    assert!(slower > 0.5 * miss_latency as f64, "READ stage {slower:.0} ns slower; a miss costs {miss_latency} ns");
}
