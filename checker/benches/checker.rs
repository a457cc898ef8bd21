//! `txbed check` speed, end to end (read the file + check) and each part alone, on generated
//! serial histories (2 reads + 2 writes each over 100 k keys, with a final store) of 1 M and
//! 10 M transactions, in the binary form and JSON Lines. Target: >= 2 M transactions/s end to
//! end for 10 M in binary, on one core.
//!
//! `cargo bench -p txbed-checker --bench checker`; "thrpt" is transactions per second.
//! The files are written once per run into a temporary directory (~1.3 GB for 10 M binary,
//! ~2.5 GB for 10 M JSON Lines) and removed at the end. `TXBED_BENCH_10M=0` skips 10 M.
//! JSON Lines at 10 M is read once, outside criterion (a sample would take minutes); its time
//! is printed. Peak memory of one process per case: `examples/history_file.rs`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use txbed_checker::format::{self, Format};
use txbed_checker::{check_flat, Options};

const KEYS: u64 = 100_000;

struct Files(PathBuf);
impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn file(dir: &Path, n: usize, fmt: Format) -> PathBuf {
    let ext = if fmt == Format::Binary { "bin" } else { "jsonl" };
    let p = dir.join(format!("serial-{n}.{ext}"));
    let t = Instant::now();
    format::write_serial(std::fs::File::create(&p).unwrap(), fmt, n, KEYS, 1).unwrap();
    eprintln!("wrote {} in {:.1} s", p.display(), t.elapsed().as_secs_f64());
    p
}

fn read(p: &Path) -> txbed_checker::Flat {
    format::read_path(p).unwrap()
}

fn end_to_end(p: &Path) -> u64 {
    let f = read(p);
    let r = check_flat(&f, &Options::default());
    assert!(r.clean());
    r.committed as u64
}

fn files(c: &mut Criterion) {
    let dir = Files(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-bench"));
    std::fs::create_dir_all(&dir.0).unwrap();
    let mut sizes = vec![1_000_000];
    if std::env::var("TXBED_BENCH_10M").as_deref() != Ok("0") {
        sizes.push(10_000_000);
    }
    for &n in &sizes {
        let mut g = c.benchmark_group(format!("{}M", n / 1_000_000));
        g.sample_size(10);
        g.throughput(Throughput::Elements(n as u64));
        let bin = file(&dir.0, n, Format::Binary);
        g.bench_function("binary: read", |b| b.iter(|| read(&bin).txns.len()));
        g.bench_function("binary: read + check", |b| b.iter(|| end_to_end(&bin)));
        let flat = read(&bin);
        g.bench_function("check alone", |b| {
            b.iter(|| {
                let r = check_flat(&flat, &Options::default());
                assert!(r.clean());
                r.committed
            })
        });
        if n == 1_000_000 {
            // Commit times reversed: commit order is no topological order, so the checker
            // takes the full path (graph and Tarjan SCC).
            let mut rev = flat.clone();
            let last = n as u64;
            for r in rev.txns.iter_mut() {
                r.end_ns = (last - r.id) * 10 + 5;
                r.start_ns = r.end_ns - 5;
            }
            g.bench_function("check alone, commit order reversed (full SCC path)", |b| {
                b.iter(|| {
                    let r = check_flat(&rev, &Options::default());
                    assert!(r.clean());
                    r.committed
                })
            });
        }
        drop(flat);
        let _ = std::fs::remove_file(&bin);
        let jsonl = file(&dir.0, n, Format::Jsonl);
        if n <= 1_000_000 {
            g.bench_function("jsonl: read", |b| b.iter(|| read(&jsonl).txns.len()));
            g.bench_function("jsonl: read + check", |b| b.iter(|| end_to_end(&jsonl)));
        } else {
            let t = Instant::now();
            let f = read(&jsonl);
            let read_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            assert!(check_flat(&f, &Options::default()).clean());
            let check_s = t.elapsed().as_secs_f64();
            eprintln!(
                "{}M/jsonl, measured once: read {read_s:.2} s ({:.2} M/s), read + check {:.2} s ({:.2} M/s)",
                n / 1_000_000,
                n as f64 / read_s / 1e6,
                read_s + check_s,
                n as f64 / (read_s + check_s) / 1e6
            );
        }
        let _ = std::fs::remove_file(&jsonl);
        g.finish();
    }
}

criterion_group!(benches, files);
criterion_main!(benches);
