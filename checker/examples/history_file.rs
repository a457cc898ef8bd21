//! Generates a serial history file, or reads and checks one, timing each step and printing
//! the peak memory: what `txbed check` does, without building the whole CLI.
//!
//! ```sh
//! cargo run --release -p txbed-checker --example history_file -- gen 10000000 /tmp/h.bin
//! cargo run --release -p txbed-checker --example history_file -- check /tmp/h.bin
//! cargo run --release -p txbed-checker --example history_file -- read /tmp/h.bin   # no check
//! ```

use std::time::Instant;

use txbed_checker::format::{self, Format};
use txbed_checker::{check_flat, Options};

fn peak_mib() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<u64>().ok()))
        .map_or("unknown".into(), |kb| format!("{:.0} MiB", kb as f64 / 1024.0))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(|s| s.as_str()).collect::<Vec<_>>()[..] {
        ["gen", n, out] => {
            let n: usize = n.parse().expect("a transaction count");
            let path = std::path::Path::new(out);
            let t = Instant::now();
            let f = std::fs::File::create(path).expect("create");
            format::write_serial(f, Format::for_path(path), n, 100_000, 1).expect("write");
            eprintln!("wrote {n} transactions in {:.2} s", t.elapsed().as_secs_f64());
        }
        [cmd @ ("check" | "read"), file] => {
            let t = Instant::now();
            let f = format::read_path(std::path::Path::new(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            let read_s = t.elapsed().as_secs_f64();
            let n = f.txns.len() as f64;
            let mut line = format!("{file}: {n} txns, read {read_s:.3} s ({:.2} M/s)", n / read_s / 1e6);
            if cmd == "check" {
                let t = Instant::now();
                let r = check_flat(&f, &Options::default());
                let check_s = t.elapsed().as_secs_f64();
                assert!(r.clean());
                line += &format!(
                    ", check {check_s:.3} s ({:.2} M/s), end to end {:.2} M/s",
                    n / check_s / 1e6,
                    n / (read_s + check_s) / 1e6
                );
            }
            println!("{line}, peak memory {}", peak_mib());
        }
        _ => eprintln!("usage: history_file gen N OUT(.bin|.jsonl) | check FILE | read FILE"),
    }
}
