//! A sweep's CSVs: results.csv (one row per run) and summary.csv (per combination of axis
//! values: mean and 95% confidence interval across seeds, Student's t via statrs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};
use txbed_runner::report::TxnReport;
use txbed_scenario::sweep::Point;

use crate::provenance::Provenance;

const METRICS: [&str; 8] =
    ["throughput_tps", "abort_rate", "p50_us", "p90_us", "p99_us", "mean_us", "p999_us", "max_us"];

fn metrics(r: &TxnReport) -> [f64; 8] {
    let l = &r.latency_us;
    [r.throughput_tps, r.abort_rate, l.p50, l.p90, l.p99, l.mean, l.p999, l.max]
}

/// A stage's time per committed transaction (`StageReport::per_committed_us`; not named
/// `stage_*_us`, which are per execution).
fn per_txn_col(stage: &str) -> String {
    format!("per_txn_{stage}_us")
}

/// An `f64` kept exactly through JSON (its bits: JSON has no NaN, and a decimal round trip
/// is only as good as the printer), so a merged sweep computes what a single one does.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Exact(pub f64);

impl Serialize for Exact {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0.to_bits())
    }
}

impl<'de> Deserialize<'de> for Exact {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        u64::deserialize(d).map(|b| Exact(f64::from_bits(b)))
    }
}

/// One run of a sweep, as its CSVs, latency files and verdicts need it: what a shard of a
/// sweep writes and `txbed merge` reads back, so a merged sweep writes what one machine would.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRow {
    /// The point's axis values, in the sweep's axis order.
    pub values: Vec<String>,
    pub seed: u64,
    pub outcome: Result<RunStats, String>,
    /// `Provenance::csv_values` of the command that ran it.
    pub provenance: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunStats {
    /// In `METRICS` order.
    pub metrics: Vec<Exact>,
    pub committed: u64,
    pub aborted: u64,
    /// Stage -> (mean us per execution, us per committed transaction).
    pub stages: BTreeMap<String, (Exact, Exact)>,
    pub warnings: Vec<String>,
    pub failures: Vec<String>,
    /// The checker accepted the history (`CheckReport::clean`).
    pub checked_clean: bool,
    pub digest: String,
    /// The latency distribution, as `latency::hgrm` prints it.
    pub hgrm: String,
}

impl RunStats {
    pub fn of(r: &TxnReport) -> RunStats {
        RunStats {
            metrics: metrics(r).into_iter().map(Exact).collect(),
            committed: r.committed,
            aborted: r.aborted,
            stages: r
                .stages
                .iter()
                .map(|(k, v)| (k.to_string(), (Exact(v.mean_us), Exact(v.per_committed_us))))
                .collect(),
            warnings: r.warnings.clone(),
            failures: r.failures.clone(),
            checked_clean: r.check.clean,
            digest: r.digest.clone(),
            hgrm: crate::latency::hgrm(&r.latency_hist),
        }
    }

    /// No failure and the checker accepted it (`TxnReport::clean`).
    pub fn clean(&self) -> bool {
        self.failures.is_empty() && self.checked_clean
    }

    fn metric(&self, k: usize) -> f64 {
        self.metrics.get(k).map_or(f64::NAN, |x| x.0)
    }
}

impl RunRow {
    pub fn of(p: &Point, r: &Result<TxnReport, String>, provenance: &Provenance) -> RunRow {
        RunRow {
            values: p.values.clone(),
            seed: p.seed,
            outcome: r.as_ref().map(RunStats::of).map_err(Clone::clone),
            provenance: provenance.csv_values().to_vec(),
        }
    }
}

/// What `write_csvs` wrote, and warnings for the user (stderr).
pub struct Written {
    pub results: PathBuf,
    pub summary: PathBuf,
    /// Points whose confidence interval cannot be computed (fewer than two seeds ran).
    pub warnings: Vec<String>,
}

fn csv_error(path: &Path) -> impl Fn(csv::Error) -> String {
    let name = path.display().to_string();
    move |e| format!("{name}: {e}")
}

/// Writes results.csv (one row per run, with the provenance of the command that ran it) and
/// summary.csv (per combination of axis values, in sweep order) into `dir`. `axes`: the
/// sweep's axis paths.
pub fn write_csvs(axes: &[String], runs: &[RunRow], dir: &Path) -> Result<Written, String> {
    let stages: Vec<&str> = runs
        .iter()
        .filter_map(|r| r.outcome.as_ref().ok())
        .flat_map(|r| r.stages.keys().map(String::as_str))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // results.csv
    let results = dir.join("results.csv");
    let err = csv_error(&results);
    let mut w = csv::Writer::from_path(&results).map_err(&err)?;
    let mut head: Vec<String> = axes.to_vec();
    head.push("seed".into());
    head.extend(METRICS.iter().map(|m| m.to_string()));
    head.extend(["committed", "aborted"].map(String::from));
    head.extend(stages.iter().map(|s| format!("stage_{s}_us")));
    head.extend(stages.iter().map(|s| per_txn_col(s)));
    head.push("warnings".into());
    head.extend(["serializable", "digest", "error"].map(String::from));
    head.extend(Provenance::csv_columns().map(String::from));
    w.write_record(&head).map_err(&err)?;
    for run in runs {
        let mut row: Vec<String> = run.values.clone();
        row.push(run.seed.to_string());
        match &run.outcome {
            Ok(r) => {
                row.extend((0..METRICS.len()).map(|k| format!("{}", r.metric(k))));
                row.push(r.committed.to_string());
                row.push(r.aborted.to_string());
                row.extend(stages.iter().map(|s| r.stages.get(*s).map_or(String::new(), |x| format!("{}", x.0 .0))));
                row.extend(stages.iter().map(|s| r.stages.get(*s).map_or(String::new(), |x| format!("{}", x.1 .0))));
                row.push(r.warnings.len().to_string());
                row.push(r.clean().to_string());
                row.push(r.digest.clone());
                row.push(String::new());
            }
            Err(e) => {
                row.extend(std::iter::repeat_n(String::new(), METRICS.len() + 2 + 2 * stages.len() + 1));
                row.extend([String::new(), String::new(), e.clone()]);
            }
        }
        row.extend(run.provenance.iter().cloned());
        w.write_record(&row).map_err(&err)?;
    }
    w.flush().map_err(|e| format!("{}: {e}", results.display()))?;
    // summary.csv: one row per combination, in sweep order.
    let summary = dir.join("summary.csv");
    let err = csv_error(&summary);
    let mut w = csv::Writer::from_path(&summary).map_err(&err)?;
    let mut head: Vec<String> = axes.to_vec();
    head.push("runs".into());
    head.push("n_seeds".into());
    let names: Vec<String> = METRICS
        .iter()
        .map(|m| m.to_string())
        .chain(stages.iter().map(|s| format!("stage_{s}_us")))
        .chain(stages.iter().map(|s| per_txn_col(s)))
        .collect();
    for n in &names {
        head.push(format!("{n}_mean"));
        head.push(format!("{n}_ci95"));
    }
    w.write_record(&head).map_err(&err)?;
    let mut warnings = Vec::new();
    let mut seen: Vec<&Vec<String>> = Vec::new();
    for p in runs {
        if seen.contains(&&p.values) {
            continue;
        }
        seen.push(&p.values);
        let group: Vec<(u64, &RunStats)> = runs
            .iter()
            .filter(|q| q.values == p.values)
            .filter_map(|q| q.outcome.as_ref().ok().map(|r| (q.seed, r)))
            .collect();
        let n_seeds = group.iter().map(|g| g.0).collect::<BTreeSet<_>>().len();
        if n_seeds < 2 {
            let label: Vec<String> = axes.iter().zip(&p.values).map(|(a, v)| format!("{a}={v}")).collect();
            warnings.push(format!(
                "[{}]: {n_seeds} seed{} ran, so summary.csv has no 95% confidence interval for it (ci95 left empty); give at least 2 seeds",
                label.join(", "),
                if n_seeds == 1 { "" } else { "s" }
            ));
        }
        let mut row: Vec<String> = p.values.clone();
        row.push(group.len().to_string());
        row.push(n_seeds.to_string());
        for k in 0..METRICS.len() {
            let xs: Vec<f64> = group.iter().map(|(_, r)| r.metric(k)).collect();
            let (m, ci) = mean_ci95(&xs);
            row.push(fmt_num(m));
            row.push(fmt_num(ci));
        }
        for s in &stages {
            let xs: Vec<f64> = group.iter().filter_map(|(_, r)| r.stages.get(*s).map(|x| x.0 .0)).collect();
            let (m, ci) = mean_ci95(&xs);
            row.push(fmt_num(m));
            row.push(fmt_num(ci));
        }
        for s in &stages {
            let xs: Vec<f64> = group.iter().filter_map(|(_, r)| r.stages.get(*s).map(|x| x.1 .0)).collect();
            let (m, ci) = mean_ci95(&xs);
            row.push(fmt_num(m));
            row.push(fmt_num(ci));
        }
        w.write_record(&row).map_err(&err)?;
    }
    w.flush().map_err(|e| format!("{}: {e}", summary.display()))?;
    Ok(Written { results, summary, warnings })
}

fn fmt_num(x: f64) -> String {
    if x.is_nan() {
        String::new()
    } else {
        format!("{x}")
    }
}

/// Mean and the half-width of its 95% confidence interval (Student's t, n - 1 degrees of
/// freedom); the half-width is NaN (unknown, not 0) for a single value, both NaN for none.
pub fn mean_ci95(xs: &[f64]) -> (f64, f64) {
    let n = xs.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return (mean, f64::NAN);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).expect("n > 1").inverse_cdf(0.975);
    (mean, t * (var / n as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_interval_matches_the_t_table() {
        // n = 3: t(0.975, 2) = 4.303; s = 1, so the half-width is 4.303 / sqrt(3).
        let (m, ci) = mean_ci95(&[1.0, 2.0, 3.0]);
        assert!((m - 2.0).abs() < 1e-12);
        assert!((ci - 4.302_653 / 3f64.sqrt()).abs() < 1e-4, "{ci}");
        let (m, ci) = mean_ci95(&[5.0]);
        assert!(m == 5.0 && ci.is_nan(), "one value has no interval, not a zero-width one");
        assert!(mean_ci95(&[]).0.is_nan());
    }
}
