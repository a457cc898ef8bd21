//! Classification speed on crafted cycles (issue 18: a 20,000-transaction cycle took ~19 s
//! when components were searched with a BFS per member), and the check alone on flat serial
//! histories (the end-to-end figures, reading included, are `benches/checker.rs`').
//! `cargo bench -p txbed-checker --bench classify`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use txbed_checker::{check_flat, Access, Flat, History, Level, Options, Status, Txn};

fn txn(id: u64, reads: Vec<Access>, writes: Vec<Access>, end_ns: u64) -> Txn {
    Txn {
        id,
        node: 0,
        worker: 0,
        coroutine: 0,
        start_ns: 0,
        end_ns,
        status: Status::Committed,
        label: String::new(),
        reads,
        writes,
        predicates: Vec::new(),
    }
}

/// One anti-dependency cycle through `n` transactions (G2-item), commit order reversed.
fn ring(n: u64) -> Flat {
    let txns = (0..n)
        .map(|i| {
            txn(
                i + 1,
                vec![Access { key: i, version: 0 }],
                vec![Access { key: (i + n - 1) % n, version: 1 }],
                (n - i) * 10,
            )
        })
        .collect();
    Flat::from_history(&History { txns, ..Default::default() })
}

/// A read-dependency chain through `n` transactions closed by one anti-dependency (G-single).
fn chain(n: u64) -> Flat {
    let txns = (0..n)
        .map(|i| {
            let mut reads = if i > 0 { vec![Access { key: i - 1, version: 1 }] } else { vec![] };
            let mut writes = vec![Access { key: i, version: 1 }];
            if i == 0 {
                writes.push(Access { key: u64::MAX, version: 1 });
            }
            if i == n - 1 {
                reads.push(Access { key: u64::MAX, version: 0 });
            }
            txn(i + 1, reads, writes, (i + 1) * 10)
        })
        .collect();
    Flat::from_history(&History { txns, ..Default::default() })
}

fn classify(c: &mut Criterion) {
    let mut g = c.benchmark_group("classify");
    g.sample_size(10);
    for n in [2_000u64, 20_000] {
        for (name, f, want) in [("G2-item ring", ring(n), "G2-item"), ("G-single chain", chain(n), "G-single")] {
            g.throughput(Throughput::Elements(n));
            g.bench_with_input(BenchmarkId::new(name, n), &f, |b, f| {
                b.iter(|| {
                    let r = check_flat(f, &Options { level: Level::Serializable, max_explained: 1 });
                    assert!(r.counts.contains_key(want), "{:?}", r.counts);
                    r.committed
                })
            });
        }
    }
    g.finish();
}

fn check_only(c: &mut Criterion) {
    let mut g = c.benchmark_group("check only");
    g.sample_size(10);
    for n in [1_000_000usize, 10_000_000] {
        let f = Flat::from_history(&txbed_checker::history::generate_serial(n, 100_000, 1));
        g.throughput(Throughput::Elements(n as u64));
        for level in [Level::Serializable, Level::StrictSerializable] {
            g.bench_with_input(BenchmarkId::new(level.name(), n), &f, |b, f| {
                b.iter(|| {
                    let r = check_flat(f, &Options { level, max_explained: 1 });
                    assert!(r.clean());
                    r.committed
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, classify, check_only);
criterion_main!(benches);
