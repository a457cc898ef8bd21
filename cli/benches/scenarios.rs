//! What a user feels, per reference scenario: the whole `txbed run` (set-up, event loop,
//! results and check) in simulated committed transactions per wall second, and the event loop
//! alone in events per wall second. `cargo bench -p txbed --bench scenarios`; each figure is
//! criterion's "thrpt" (elements per second: committed transactions, or events). A primitive
//! scenario (verbs-read) is all event loop: its two figures count operations and events over
//! the same time.
//!
//! tpcc-no-16 runs scaled to seconds: 4 workers and 4 warehouses per node (one each, as the
//! file has 24 of both), a 200 us window after 300 us.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use txbed_runner::from_scenario::{run_txn, run_verbs};
use txbed_scenario::{Scenario, Workload};
use txbed_sim::NicProfile;

/// As the binary: the benchmark measures what `txbed run` runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// (name, scenario file, `--set` changes).
const SCENARIOS: &[(&str, &str, &[&str])] = &[
    ("quickstart", "scenarios/quickstart.ron", &[]),
    ("smallbank-16", "scenarios/drtmh/smallbank-16.ron", &[]),
    (
        "tpcc-no-16-scaled",
        "scenarios/drtmh/tpcc-no-16.ron",
        &["cluster.workers=4", "workload.warehouses_per_node=4", "run.warmup_us=300", "run.measure_us=200"],
    ),
    ("verbs-read", "scenarios/verbs-read.ron", &[]),
];

fn load(file: &str, sets: &[&str]) -> (Scenario, NicProfile) {
    // Benches run in the package's directory; scenarios are at the workspace root.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::load_with(&path, &sets).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// One run: (whole wall time, event-loop wall time, committed transactions or operations,
/// events).
fn run_once(s: &Scenario, p: &NicProfile) -> (Duration, Duration, u64, u64) {
    let seed = s.run.seed;
    if matches!(s.workload, Workload::Verbs(_)) {
        let began = Instant::now();
        let r = run_verbs(s, p, seed).expect("the verbs scenario runs");
        let t = began.elapsed();
        let ops = r.verbs.values().sum();
        return (t, t, ops, r.sim.events);
    }
    let run = run_txn(s, p, seed, false, &mut |_, _| {}).expect("the scenario runs");
    let w = &run.result.wall;
    let whole = Duration::from_secs_f64(w.setup_s + w.loop_s + w.finish_s);
    (whole, Duration::from_secs_f64(w.loop_s), run.result.stats.committed, run.result.events)
}

fn scenarios(c: &mut Criterion) {
    for &(name, file, sets) in SCENARIOS {
        let (s, p) = load(file, sets);
        // Counts are a deterministic function of the scenario: take them once.
        let (_, _, done, events) = run_once(&s, &p);
        let mut g = c.benchmark_group("scenario");
        g.sample_size(10).warm_up_time(Duration::from_millis(1));
        g.throughput(Throughput::Elements(done.max(1)));
        g.bench_function(BenchmarkId::new("committed per wall second", name), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| run_once(&s, &p).0).sum())
        });
        g.throughput(Throughput::Elements(events));
        g.bench_function(BenchmarkId::new("event loop events per second", name), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| run_once(&s, &p).1).sum())
        });
        g.finish();
    }
}

criterion_group!(benches, scenarios);
criterion_main!(benches);
