//! `txbed plot CSV`: plots of a sweep's summary.csv or results.csv; `txbed plot --cdf RUN...`:
//! latency CDFs of runs from their HdrHistogram percentile distributions (`.hgrm`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    /// A sweep's summary.csv or results.csv (not with --cdf).
    #[arg(required_unless_present = "cdf", conflicts_with = "cdf")]
    pub csv: Option<PathBuf>,
    /// The axis on x (a column such as protocol.mode; default: the first numeric axis).
    #[arg(long)]
    pub x: Option<String>,
    /// Output directory (default: the CSV's directory; with --cdf, the current directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Draw latency CDFs into OUT/cdf.svg and cdf.png, one series per argument: a run
    /// directory (`txbed run --out DIR`: its latency.hgrm, labelled with the directory's
    /// name), an .hgrm file (labelled with its stem), or a directory of .hgrm files (a
    /// sweep's DIR/latency: one series per file).
    #[arg(long, num_args = 1.., value_name = "RUN")]
    pub cdf: Vec<PathBuf>,
}

pub fn run(a: Args) -> ExitCode {
    if !a.cdf.is_empty() {
        return cdf(&a.cdf, a.out.as_deref().unwrap_or(Path::new(".")));
    }
    let Some(csv) = a.csv else { return fail("give a CSV file, or --cdf RUN...") };
    let dir = a.out.unwrap_or_else(|| csv.parent().unwrap_or(std::path::Path::new(".")).to_path_buf());
    match txbed_plot::plot_csv(&csv, &dir, a.x.as_deref()) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// The (label, .hgrm file) series an argument of --cdf stands for.
fn series_of(p: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let name = |p: &Path, stem: bool| {
        let n = if stem { p.file_stem() } else { p.file_name() };
        n.map_or_else(|| p.display().to_string(), |s| s.to_string_lossy().into_owned())
    };
    if p.is_dir() {
        let run = p.join("latency.hgrm");
        if run.is_file() {
            return Ok(vec![(name(p, false), run)]);
        }
        let entries = std::fs::read_dir(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.extension().is_some_and(|x| x == "hgrm") && f.is_file())
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(format!(
                "{}: neither a run directory with latency.hgrm (txbed run --out) nor a directory of .hgrm files",
                p.display()
            ));
        }
        return Ok(files.into_iter().map(|f| (name(&f, true), f)).collect());
    }
    if p.is_file() {
        return Ok(vec![(name(p, true), p.to_path_buf())]);
    }
    Err(format!("{}: no such run directory or .hgrm file", p.display()))
}

fn cdf(args: &[PathBuf], out: &Path) -> ExitCode {
    let mut series = Vec::new();
    for a in args {
        let files = match series_of(a) {
            Ok(f) => f,
            Err(e) => return fail(e),
        };
        for (label, f) in files {
            match txbed_plot::cdf::read_hgrm(&f) {
                Ok(points) => series.push(txbed_plot::cdf::CdfSeries { label, points }),
                Err(e) => return fail(e),
            }
        }
    }
    let subtitle = "from each run's latency.hgrm (the measured window's commits)";
    match txbed_plot::cdf::cdf(&series, subtitle, out, "cdf") {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
