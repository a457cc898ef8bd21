//! The sans-IO rule, enforced: nothing under protocols/ or workloads/ names a backend (the
//! simulator, sockets, verbs), a runtime, threads, the wall clock, or std's randomly ordered
//! hash containers. Protocol code sees only the transport interface, a clock and an RNG.

use std::path::{Path, PathBuf};

/// Lower-case fragments that mark a backend, a runtime or nondeterminism.
const FORBIDDEN: &[&str] = &[
    "txbed_sim",
    "txbed-sim",
    "simulat",
    "socket",
    "tcp",
    "udp",
    "ibverbs",
    "sideway",
    "rdma-mummy",
    "rdma_mummy",
    "actix",
    "tokio",
    "std::thread",
    "instant::now",
    "systemtime",
    "hashmap",
    "hashset",
];

fn violations(text: &str) -> Vec<(usize, &'static str)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.to_ascii_lowercase();
        for f in FORBIDDEN {
            if l.contains(f) {
                out.push((i + 1, *f));
            }
        }
    }
    out
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs" || x == "toml" || x == "md") {
            out.push(p);
        }
    }
}

#[test]
fn protocols_and_workloads_name_no_backend() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut all = Vec::new();
    for part in ["protocols", "workloads"] {
        files(&root.join(part), &mut all);
    }
    assert!(all.len() >= 10, "found only {} files: wrong root?", all.len());
    let mut bad = Vec::new();
    for f in &all {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, what) in violations(&text) {
            bad.push(format!("{}:{line}: {what}", f.strip_prefix(root).unwrap().display()));
        }
    }
    assert!(bad.is_empty(), "protocol/workload code names a backend or runtime:\n{}", bad.join("\n"));
}

#[test]
fn the_scan_catches_a_backend_name() {
    assert_eq!(violations("let s = std::net::TcpStream::connect(a);"), vec![(1, "tcp")]);
    assert_eq!(violations("ok\nuse txbed_sim::Sim;"), vec![(2, "txbed_sim")]);
    assert!(violations("let t = Instant::now();").contains(&(1, "instant::now")));
    assert!(violations("post(ctx, Op::Read { .. })").is_empty());
}
