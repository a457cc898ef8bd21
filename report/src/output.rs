//! Where a run's results go besides standard output: report.json, scenario.ron and the
//! history (JSON Lines, for `txbed check`).

use std::path::Path;

use serde::Serialize;
use txbed_checker::History;
use txbed_scenario::Scenario;

use crate::provenance::Provenance;

/// Whether a file name is one txbed writes into an output directory: run files, a sweep's or
/// sensitivity analysis's CSVs, provenance, traces and plots (`summary-throughput.svg`,
/// `tornado-throughput.png`). `--force` removes these and nothing else.
pub fn is_txbed_output(name: &str) -> bool {
    const FILES: [&str; 11] = [
        "report.json",
        "report.html",
        "latency.hgrm",
        "history.jsonl",
        "scenario.ron",
        "trace.json",
        "results.csv",
        "summary.csv",
        "sensitivity.csv",
        "provenance.json",
        "campaign.csv",
    ];
    let plot = (name.ends_with(".svg") || name.ends_with(".png"))
        && (["summary-", "results-", "tornado-"].iter().any(|p| name.starts_with(p))
            || ["timeseries", "cdf"].iter().any(|p| name.strip_prefix(p).is_some_and(|x| x == ".svg" || x == ".png")));
    FILES.contains(&name) || plot
}

/// A sweep's per-run latency distributions (`latency/*.hgrm`).
pub const LATENCY_DIR: &str = "latency";

/// A campaign's failing scenarios (`failures/*.ron`).
pub const FAILURES_DIR: &str = "failures";

/// Whether `dir` is a real directory (not a link) holding only `.hgrm` files, so `--force` may
/// remove it whole.
fn only_hgrms(dir: &Path) -> bool {
    only_files(dir, "hgrm")
}

/// Whether `dir` is a real directory (not a link) holding only `.ext` files.
fn only_files(dir: &Path, ext: &str) -> bool {
    let real_dir = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
    real_dir
        && std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.into_iter().all(|e| {
                e.is_ok_and(|e| {
                    e.file_type().is_ok_and(|t| t.is_file()) && e.path().extension().is_some_and(|x| x == ext)
                })
            })
        })
}

/// Readies an output directory: created if missing; an existing one must be empty, so a new
/// run's files never sit beside an earlier run's. With `force`, txbed's earlier outputs in it
/// are removed first; a directory holding anything else is refused, and nothing is removed.
pub fn prepare_dir(dir: &Path, force: bool) -> Result<(), String> {
    let d = dir.display();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return std::fs::create_dir_all(dir).map_err(|e| format!("{d}: cannot create output directory: {e}"));
        }
        Err(e) => return Err(format!("{d}: cannot use as output directory: {e}")),
    };
    let mut names: Vec<(String, bool)> = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("{d}: {e}"))?;
        let is_file = e.file_type().map(|t| t.is_file()).unwrap_or(false);
        names.push((e.file_name().to_string_lossy().into_owned(), is_file));
    }
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    let list = |v: &[&str]| {
        let shown: Vec<&str> = v.iter().take(5).copied().collect();
        let more = if v.len() > 5 { format!(" and {} more", v.len() - 5) } else { String::new() };
        format!("{}{more}", shown.join(", "))
    };
    if !force {
        let all: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
        return Err(format!(
            "output directory {d} is not empty (it holds {}): its files would be overwritten or mixed with this \
             run's; choose another --out, or pass --force to remove txbed's earlier outputs from it first",
            list(&all)
        ));
    }
    let foreign: Vec<&str> = names
        .iter()
        .filter(|(n, f)| {
            let ours_dir = (n == LATENCY_DIR && only_hgrms(&dir.join(n)))
                || (n == FAILURES_DIR && only_files(&dir.join(n), "ron"));
            !((*f && is_txbed_output(n)) || (!*f && ours_dir))
        })
        .map(|(n, _)| n.as_str())
        .collect();
    if !foreign.is_empty() {
        return Err(format!(
            "--force: output directory {d} holds files txbed did not write ({}); refusing to delete them, and \
             nothing was removed: choose another --out",
            list(&foreign)
        ));
    }
    for (n, is_file) in &names {
        let p = dir.join(n);
        let removed = if *is_file { std::fs::remove_file(&p) } else { std::fs::remove_dir_all(&p) };
        removed.map_err(|e| format!("--force: cannot remove {}: {e}", p.display()))?;
    }
    Ok(())
}

/// A report with its provenance last (report.json and `--json`).
#[derive(Serialize)]
struct WithProvenance<'a, R: Serialize> {
    #[serde(flatten)]
    report: &'a R,
    #[serde(skip_serializing_if = "Option::is_none")]
    provenance: Option<&'a Provenance>,
}

/// Where a run's results go besides standard output.
pub struct RunOutput<'a> {
    /// `--out DIR`: report.json, history.jsonl, scenario.ron.
    pub dir: Option<&'a std::path::Path>,
    /// `--history FILE`.
    pub history: Option<&'a std::path::Path>,
    pub json: bool,
    pub quiet: bool,
    /// `--force`: empty an existing DIR of txbed's earlier outputs (see `prepare_dir`).
    pub force: bool,
    /// Added to report.json as `provenance`.
    pub provenance: Option<&'a Provenance>,
    /// `--strict`: a report with warnings fails the run (exit 1).
    pub strict: bool,
}

impl RunOutput<'_> {
    /// The history file to write: `--history`, else DIR/history.jsonl.
    pub fn history_path(&self) -> Option<std::path::PathBuf> {
        self.history.map(|p| p.to_path_buf()).or_else(|| self.dir.map(|d| d.join("history.jsonl")))
    }

    /// Readies DIR (`prepare_dir`); call it before the run, so a refusal costs nothing.
    pub fn prepare(&self) -> Result<(), String> {
        match self.dir {
            Some(d) => prepare_dir(d, self.force),
            None => Ok(()),
        }
    }

    /// Writes DIR/report.json and DIR/scenario.ron, and prints the report.
    pub fn finish<R: Serialize>(&self, s: &Scenario, report: &R, text: &str) -> Result<(), String> {
        let json = serde_json::to_string_pretty(&WithProvenance { report, provenance: self.provenance })
            .expect("report serialises");
        if let Some(d) = self.dir {
            let write = |name: &str, body: &str| {
                let p = d.join(name);
                std::fs::write(&p, body).map_err(|e| format!("{}: {e}", p.display()))
            };
            write("report.json", &json)?;
            // With its random faults drawn: the copy replays without drawing again.
            write("scenario.ron", &s.with_faults_expanded().to_ron())?;
        }
        if !self.quiet {
            if self.json {
                println!("{json}");
            } else {
                print!("{text}");
            }
        }
        Ok(())
    }
}

/// Writes the run's history, with the scenario's name and the seed in its metadata: binary
/// for a `.bin` path (docs/checker.md), JSON Lines otherwise.
pub fn write_history(
    s: &Scenario,
    seed: u64,
    history: &mut History,
    path: Option<&std::path::Path>,
) -> Result<(), String> {
    if let Some(path) = path {
        history.meta.insert("scenario".into(), s.name.clone().into());
        history.meta.insert("seed".into(), seed.into());
        let f = std::fs::File::create(path).map_err(|e| format!("{}: cannot write history: {e}", path.display()))?;
        let w = std::io::BufWriter::new(f);
        match txbed_checker::format::Format::for_path(path) {
            txbed_checker::format::Format::Binary => history.write_binary(w),
            txbed_checker::format::Format::Jsonl => history.write(w),
        }
        .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
