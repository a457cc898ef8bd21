//! `txbed check HISTORY`: the history checker on a JSON Lines file.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use txbed_checker::{check, elle, History, Level, Options, Report};

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
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {}: cannot read history: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let h = match History::read(BufReader::new(file)) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let flat = txbed_checker::Flat::from_history(&h);
    for (out, write) in [
        (export_elle, elle::write_list_append as fn(&txbed_checker::Flat, File) -> std::io::Result<()>),
        (a.export_elle_rw.as_deref(), elle::write_rw_register),
    ] {
        let Some(out) = out else { continue };
        if let Err(e) = File::create(out).and_then(|file| write(&flat, file)) {
            eprintln!("error: {}: cannot write Elle history: {e}", out.display());
            return ExitCode::from(2);
        }
    }
    let level = if strict { Level::StrictSerializable } else { a.level };
    let r = check(&h, &Options { level, max_explained: max_explained.max(1) });
    if json {
        println!("{}", serde_json::to_string_pretty(&r).expect("report serialises"));
    } else {
        print!("{}", text(&r));
    }
    if r.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
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
