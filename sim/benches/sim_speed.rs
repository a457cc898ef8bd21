//! Simulator speed: events per wall second on one core for a 16-node verbs workload.
//! `cargo bench -p txbed-sim --bench sim_speed`; the figure is "thrpt" in elements (events)/s.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use txbed_sim::bench_verbs::{closed_loop, LoopSpec, RawVerb, Setting, Window};
use txbed_sim::NicProfile;

fn sixteen_node_verbs(c: &mut Criterion) {
    let p = NicProfile::load("cx4").unwrap();
    let w = Window { warmup_ns: 20_000, measure_ns: 280_000 };
    let mut g = c.benchmark_group("sim_speed");
    g.sample_size(10);
    for verb in [RawVerb::Read, RawVerb::Rpc] {
        let spec = LoopSpec { setting: Setting::sixteen(), workers: 24, coroutines: 8, depth: 2, verb, payload: 64 };
        // Events are a deterministic function of the scenario: count them once.
        let events = closed_loop(&p, &spec, 1, w).outcome.events;
        g.throughput(Throughput::Elements(events));
        g.bench_function(format!("16-node {} 64B ({events} events)", verb.name()), |b| {
            b.iter(|| closed_loop(&p, &spec, 1, w).outcome.digest)
        });
    }
    g.finish();
}

criterion_group!(benches, sixteen_node_verbs);
criterion_main!(benches);
