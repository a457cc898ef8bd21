//! Checker speed on a generated 1 M-transaction history (target: >= 2 M transactions/s).
//! `cargo bench -p txbed-checker --bench checker`; "thrpt" is transactions per second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use txbed_checker::{check, Options};

fn checker(c: &mut Criterion) {
    let h = txbed_checker::history::generate_serial(1_000_000, 100_000, 1);
    let mut g = c.benchmark_group("checker");
    g.sample_size(10);
    g.throughput(Throughput::Elements(h.txns.len() as u64));
    g.bench_function("1M txns, 2 reads + 2 writes each, 100k keys", |b| {
        b.iter(|| {
            let r = check(&h, &Options::default());
            assert!(r.serializable);
            r.committed
        })
    });
    // The same history with commit times reversed: commit order is no topological order, so
    // the checker takes the full path (CSR graph and Tarjan SCC).
    let mut rev = h.clone();
    let n = rev.txns.len() as u64;
    for t in rev.txns.iter_mut() {
        t.end_ns = (n - t.id) * 10 + 5;
        t.start_ns = t.end_ns - 5;
    }
    g.bench_function("same, commit order reversed (full SCC path)", |b| {
        b.iter(|| {
            let r = check(&rev, &Options::default());
            assert!(r.serializable);
            r.committed
        })
    });
    g.finish();
}

criterion_group!(benches, checker);
criterion_main!(benches);
