//! `txbed check HISTORY`: the history checker on a history file, JSON Lines or binary
//! (told apart by the binary form's magic bytes).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use txbed_checker::{check_flat, elle, format, Level, Options, Report};

fn parse_level(s: &str) -> Result<Level, String> {
    s.parse()
}

#[derive(clap::Args)]
pub struct Args {
    pub history: PathBuf,
    /// The isolation level to judge the history at (Adya's PL-1 .. PL-3, PL-SI, and PL-3 with
    /// real-time order).
    #[arg(long, default_value = "serializable", value_parser = parse_level)]
    pub level: Level,
    /// Same as `--level strict-serializable`.
    #[arg(long, conflicts_with = "level")]
    pub strict: bool,
    /// Also write the history in Elle's list-append JSON form to this file.
    #[arg(long)]
    pub export_elle: Option<PathBuf>,
    /// Also write the history in Elle's rw-register JSON form to this file.
    #[arg(long)]
    pub export_elle_rw: Option<PathBuf>,
    /// Also write the history read to this file, binary if it ends in `.bin`, JSON Lines
    /// otherwise (to convert between the forms).
    #[arg(long)]
    pub convert: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Explain at most this many anomalies (all are counted).
    #[arg(long, default_value_t = 10)]
    pub max_explained: usize,
}

pub fn run(a: Args) -> ExitCode {
    let (path, strict, export_elle, json, max_explained) =
        (&a.history, a.strict, a.export_elle.as_deref(), a.json, a.max_explained);
    // A file that cannot be read, or is empty, truncated or malformed, is bad input (exit 2);
    // exit 1 is for a history read in full that shows an anomaly.
    let t0 = Instant::now();
    let f = match format::read_path(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let read_s = t0.elapsed().as_secs_f64();
    if let Some(out) = &a.convert {
        let written = std::fs::File::create(out).and_then(|w| match format::Format::for_path(out) {
            format::Format::Binary => format::write_binary_flat(&f, w),
            format::Format::Jsonl => format::write_jsonl_flat(&f, w),
        });
        if let Err(e) = written {
            eprintln!("error: {}: cannot write history: {e}", out.display());
            return ExitCode::from(2);
        }
    }
    for (out, write) in [
        (export_elle, elle::write_list_append as fn(&txbed_checker::Flat, std::fs::File) -> std::io::Result<()>),
        (a.export_elle_rw.as_deref(), elle::write_rw_register),
    ] {
        let Some(out) = out else { continue };
        if let Err(e) = std::fs::File::create(out).and_then(|file| write(&f, file)) {
            eprintln!("error: {}: cannot write Elle history: {e}", out.display());
            return ExitCode::from(2);
        }
    }
    let level = if strict { Level::StrictSerializable } else { a.level };
    let t1 = Instant::now();
    let r = check_flat(&f, &Options { level, max_explained: max_explained.max(1) });
    let check_s = t1.elapsed().as_secs_f64();
    let t = Timing::new(f.txns.len(), read_s, check_s);
    if json {
        let mut v = serde_json::to_value(&r).expect("report serialises");
        if let Some(o) = v.as_object_mut() {
            o.insert("timing".into(), t.json());
        }
        println!("{}", serde_json::to_string_pretty(&v).expect("report serialises"));
    } else {
        print!("{}", text(&r));
        println!("{}", t.text());
    }
    if r.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Where the time went, and the process's peak memory.
pub struct Timing {
    pub txns: usize,
    pub read_s: f64,
    pub check_s: f64,
    /// Transactions per second, reading and checking together.
    pub txns_per_s: f64,
    pub read_txns_per_s: f64,
    pub check_txns_per_s: f64,
    /// VmHWM (Linux); null where unknown.
    pub peak_memory_bytes: Option<u64>,
}

impl Timing {
    fn new(txns: usize, read_s: f64, check_s: f64) -> Timing {
        let rate = |s: f64| if s > 0.0 { txns as f64 / s } else { 0.0 };
        Timing {
            txns,
            read_s,
            check_s,
            txns_per_s: rate(read_s + check_s),
            read_txns_per_s: rate(read_s),
            check_txns_per_s: rate(check_s),
            peak_memory_bytes: peak_memory(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "txns": self.txns,
            "read_s": self.read_s,
            "check_s": self.check_s,
            "txns_per_s": self.txns_per_s,
            "read_txns_per_s": self.read_txns_per_s,
            "check_txns_per_s": self.check_txns_per_s,
            "peak_memory_bytes": self.peak_memory_bytes,
        })
    }

    fn text(&self) -> String {
        let m = |r: f64| format!("{:.2} M/s", r / 1e6);
        let peak = match self.peak_memory_bytes {
            Some(b) => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
            None => "unknown".into(),
        };
        format!(
            "  read {:.3} s ({}), checked {:.3} s ({}): {} transactions/s end to end; peak memory {peak}",
            self.read_s,
            m(self.read_txns_per_s),
            self.check_s,
            m(self.check_txns_per_s),
            m(self.txns_per_s).trim_end_matches("/s"),
        )
    }
}

/// The process's peak resident memory (VmHWM in /proc/self/status), if the OS tells.
pub fn peak_memory() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

pub fn text(r: &Report) -> String {
    let yes = |b: bool| if b { "yes" } else { "NO" };
    let lost = match r.nothing_lost {
        Some(true) => ", nothing lost",
        Some(false) => ", WRITES LOST",
        None => "",
    };
    let mut s = format!(
        "serializable: {}{}{}\n  {} transactions checked ({} committed, {} aborted); invariants {}\n",
        yes(r.serializable),
        lost,
        match r.strict_serializable {
            Some(b) => format!(", strictly serializable: {}", yes(b)),
            None => String::new(),
        },
        r.checked_txns,
        r.committed,
        r.aborted,
        if r.invariants_ok { "hold" } else { "VIOLATED" }
    );
    if !r.counts.is_empty() {
        let counts: Vec<String> = r.counts.iter().map(|(k, n)| format!("{k} x{n}")).collect();
        s.push_str(&format!("  anomalies: {}\n", counts.join(", ")));
    }
    for a in &r.anomalies {
        s.push_str(&format!("\n{}\n", a.explanation));
    }
    s
}
