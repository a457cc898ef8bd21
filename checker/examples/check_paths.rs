//! `cargo run --release -p txbed-checker --example check_paths -- 10000000`
//! Times the check alone on a generated serial history of N transactions: as generated (the
//! fast path), with one planted write skew (the long way, a small graph), and with commit
//! times reversed (the long way, every transaction in the graph).
use std::time::Instant;
use txbed_checker::*;
fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}
fn main() {
    let n: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let serial = format::generate_serial_flat(n, 100_000, 1);
    let mut skew = serial.clone();
    // Two transactions near the end read two fresh keys at version 0 and each writes one.
    for (i, (r, w)) in [(0u64, 0u64), (0, 1)].iter().enumerate() {
        let row = skew.txns[n - 10 + i];
        let mut reads = skew.reads(n - 10 + i).to_vec();
        reads.extend([Access { key: 1 << 40, version: *r }, Access { key: (1 << 40) + 1, version: 0 }]);
        let mut writes = skew.writes(n - 10 + i).to_vec();
        writes.push(Access { key: (1 << 40) + w, version: 1 });
        skew.push(flat::Row { id: row.id + (1 << 50), ..row }, &reads, &writes, &[]);
    }
    let mut reversed = serial.clone();
    let m = reversed.txns.len() as u64;
    for r in reversed.txns.iter_mut() {
        r.end_ns = (m - r.id) * 10 + 5;
        r.start_ns = r.end_ns - 5;
    }
    for (name, f) in [("serial", &serial), ("one write skew", &skew), ("commit times reversed", &reversed)] {
        let (t, c) = (Instant::now(), cpu());
        let r = check_flat(f, &Options::default());
        eprintln!("{name}: wall {:?} cpu {:.2}s counts {:?}", t.elapsed(), cpu() - c, r.counts);
    }
}
