//! `txbed sweep FILE`: a base scenario, axes of `--set` values and seeds; every combination is
//! an independent simulation, run in parallel on all cores. Writes results.csv (one row per
//! run), summary.csv (mean and 95% confidence interval across seeds, Student's t via statrs)
//! and the plots of `crate::plot`.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::run::TxnReport;
use crate::scenario::{Scenario, ScenarioError, Workload};

/// A sweep file (RON), e.g. scenarios/sweeps/protocols-modes.ron.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    #[serde(default)]
    pub name: String,
    /// The base scenario, relative to the sweep file.
    pub base: PathBuf,
    /// Edits applied to every run before the axes (`path=value`).
    #[serde(default)]
    pub set: Vec<String>,
    pub axes: Vec<Axis>,
    /// Seeds: every combination of axis values runs once per seed.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    /// The axis plotted on x (default: the first numeric axis, else the first).
    #[serde(default)]
    pub x: Option<String>,
}

fn default_seeds() -> Vec<u64> {
    vec![1, 2, 3]
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    /// A field path as `--set` takes it, e.g. `protocol.name`.
    pub path: String,
    pub values: Vec<AxisValue>,
}

/// An axis value: written as a number, a boolean or a string (`"occ"`, `"Code(38)"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AxisValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

impl fmt::Display for AxisValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AxisValue::Bool(b) => write!(f, "{b}"),
            AxisValue::Int(i) => write!(f, "{i}"),
            AxisValue::Float(x) => write!(f, "{x}"),
            AxisValue::Text(s) => f.write_str(s),
        }
    }
}

/// One run of a sweep: its axis values, seed and scenario.
pub struct Point {
    pub values: Vec<String>,
    pub seed: u64,
    pub scenario: Scenario,
    pub profile: txbed_sim::NicProfile,
}

impl Sweep {
    pub fn load(path: &Path) -> Result<Sweep, ScenarioError> {
        let source = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| ScenarioError(format!("{source}: cannot read sweep: {e}")))?;
        let sw: Sweep = ron::Options::default()
            .from_str(&text)
            .map_err(|e| ScenarioError(format!("{source}:{}:{}: {}", e.position.line, e.position.col, e.code)))?;
        if sw.axes.is_empty() {
            return Err(ScenarioError(format!("{source}: axes: give at least one axis")));
        }
        for (i, a) in sw.axes.iter().enumerate() {
            if a.values.is_empty() {
                return Err(ScenarioError(format!("{source}: axes[{i}] ({}): no values", a.path)));
            }
            if !a.path.contains('.') && a.path != "name" && a.path != "backend" {
                return Err(ScenarioError(format!("{source}: axes[{i}]: {:?} is not a field path", a.path)));
            }
        }
        if sw.seeds.is_empty() {
            return Err(ScenarioError(format!("{source}: seeds: give at least one seed")));
        }
        if let Some(x) = &sw.x {
            if !sw.axes.iter().any(|a| &a.path == x) {
                return Err(ScenarioError(format!("{source}: x: {x:?} is not one of the axes")));
            }
        }
        Ok(sw)
    }

    /// Every run, checked before any starts: a bad combination fails the sweep up front.
    pub fn points(&self, file: &Path) -> Result<Vec<Point>, ScenarioError> {
        let base_path = file.parent().unwrap_or(Path::new(".")).join(&self.base);
        let text = std::fs::read_to_string(&base_path)
            .map_err(|e| ScenarioError(format!("{}: base {}: {e}", file.display(), base_path.display())))?;
        let base = Scenario::parse_unchecked(&text, &base_path.display().to_string())?;
        if matches!(base.workload, Workload::Verbs(_)) {
            return Err(ScenarioError(format!("{}: sweeps run transactional scenarios", base_path.display())));
        }
        let mut combos: Vec<Vec<String>> = vec![Vec::new()];
        for a in &self.axes {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    a.values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push(v.to_string());
                        c
                    })
                })
                .collect();
        }
        let mut out = Vec::new();
        for values in combos {
            for &seed in &self.seeds {
                let mut sets = self.set.clone();
                sets.extend(self.axes.iter().zip(&values).map(|(a, v)| format!("{}={v}", a.path)));
                sets.push(format!("run.seed={seed}"));
                let s = base.apply_sets(&sets).map_err(|e| ScenarioError(format!("{}: {e}", file.display())))?;
                let label: Vec<String> =
                    self.axes.iter().zip(&values).map(|(a, v)| format!("{}={v}", a.path)).collect();
                let profile = s.check(&format!("{} [{}]", file.display(), label.join(", ")))?;
                out.push(Point { values: values.clone(), seed, scenario: s, profile });
            }
        }
        Ok(out)
    }
}

/// Runs `points` on `jobs` threads (each run is its own simulation); results in point order.
pub fn run_points(points: &[Point], jobs: usize, quiet: bool) -> Vec<Result<TxnReport, String>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<TxnReport, String>>>> = Mutex::new((0..points.len()).map(|_| None).collect());
    let bar = if quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(points.len() as u64) };
    bar.set_style(indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} runs, eta {eta}").expect("template"));
    std::thread::scope(|sc| {
        for _ in 0..jobs.max(1).min(points.len().max(1)) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(p) = points.get(i) else { break };
                let r = crate::run::run_txn(&p.scenario, &p.profile, p.seed, None);
                results.lock().expect("results")[i] = Some(r);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    results.into_inner().expect("results").into_iter().map(|r| r.expect("every run ran")).collect()
}

const METRICS: [&str; 6] = ["throughput_tps", "abort_rate", "p50_us", "p90_us", "p99_us", "mean_us"];

fn metrics(r: &TxnReport) -> [f64; 6] {
    [r.throughput_tps, r.abort_rate, r.latency_us.p50, r.latency_us.p90, r.latency_us.p99, r.latency_us.mean]
}

/// Writes results.csv and summary.csv into `dir`; returns their paths.
pub fn write_csvs(
    sweep: &Sweep,
    points: &[Point],
    reports: &[Result<TxnReport, String>],
    dir: &Path,
) -> Result<(PathBuf, PathBuf), String> {
    let stages: Vec<&str> =
        reports.iter().flatten().flat_map(|r| r.stages.keys().copied()).collect::<BTreeSet<_>>().into_iter().collect();
    let axes: Vec<&str> = sweep.axes.iter().map(|a| a.path.as_str()).collect();
    // results.csv
    let mut head: Vec<String> = axes.iter().map(|s| s.to_string()).collect();
    head.push("seed".into());
    head.extend(METRICS.iter().map(|m| m.to_string()));
    head.extend(["committed", "aborted"].map(String::from));
    head.extend(stages.iter().map(|s| format!("stage_{s}_us")));
    head.extend(["serializable", "digest", "error"].map(String::from));
    let mut rows = vec![head.join(",")];
    for (p, r) in points.iter().zip(reports) {
        let mut row: Vec<String> = p.values.iter().map(|v| csv_field(v)).collect();
        row.push(p.seed.to_string());
        match r {
            Ok(r) => {
                row.extend(metrics(r).iter().map(|x| format!("{x}")));
                row.push(r.committed.to_string());
                row.push(r.aborted.to_string());
                row.extend(stages.iter().map(|s| r.stages.get(s).map_or(String::new(), |x| format!("{}", x.mean_us))));
                let clean = r.check.serializable
                    && r.check.nothing_lost != Some(false)
                    && r.check.invariants_ok
                    && r.failures.is_empty();
                row.push(clean.to_string());
                row.push(r.digest.clone());
                row.push(String::new());
            }
            Err(e) => {
                row.extend(std::iter::repeat_n(String::new(), METRICS.len() + 2 + stages.len()));
                row.extend([String::new(), String::new(), csv_field(e)]);
            }
        }
        rows.push(row.join(","));
    }
    let results = dir.join("results.csv");
    std::fs::write(&results, rows.join("\n") + "\n").map_err(|e| format!("{}: {e}", results.display()))?;
    // summary.csv: one row per combination, in sweep order.
    let mut head: Vec<String> = axes.iter().map(|s| s.to_string()).collect();
    head.push("runs".into());
    let names: Vec<String> =
        METRICS.iter().map(|m| m.to_string()).chain(stages.iter().map(|s| format!("stage_{s}_us"))).collect();
    for n in &names {
        head.push(format!("{n}_mean"));
        head.push(format!("{n}_ci95"));
    }
    let mut rows = vec![head.join(",")];
    let mut seen: Vec<&Vec<String>> = Vec::new();
    for p in points {
        if seen.contains(&&p.values) {
            continue;
        }
        seen.push(&p.values);
        let group: Vec<&TxnReport> = points
            .iter()
            .zip(reports)
            .filter(|(q, _)| q.values == p.values)
            .filter_map(|(_, r)| r.as_ref().ok())
            .collect();
        let mut row: Vec<String> = p.values.iter().map(|v| csv_field(v)).collect();
        row.push(group.len().to_string());
        for (k, _) in METRICS.iter().enumerate() {
            let xs: Vec<f64> = group.iter().map(|r| metrics(r)[k]).collect();
            let (m, ci) = mean_ci95(&xs);
            row.push(fmt_num(m));
            row.push(fmt_num(ci));
        }
        for s in &stages {
            let xs: Vec<f64> = group.iter().filter_map(|r| r.stages.get(s).map(|x| x.mean_us)).collect();
            let (m, ci) = mean_ci95(&xs);
            row.push(fmt_num(m));
            row.push(fmt_num(ci));
        }
        rows.push(row.join(","));
    }
    let summary = dir.join("summary.csv");
    std::fs::write(&summary, rows.join("\n") + "\n").map_err(|e| format!("{}: {e}", summary.display()))?;
    Ok((results, summary))
}

fn fmt_num(x: f64) -> String {
    if x.is_nan() {
        String::new()
    } else {
        format!("{x}")
    }
}

/// CSV fields never hold commas or line breaks: replaced, so the files need no quoting.
fn csv_field(s: &str) -> String {
    s.replace([',', '\n', '\r'], ";")
}

/// Mean and the half-width of its 95% confidence interval (Student's t, n - 1 degrees of
/// freedom); the half-width is 0 for a single value, both NaN for none.
pub fn mean_ci95(xs: &[f64]) -> (f64, f64) {
    let n = xs.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return (mean, 0.0);
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
        assert_eq!(mean_ci95(&[5.0]), (5.0, 0.0));
        assert!(mean_ci95(&[]).0.is_nan());
    }
}

/// `txbed hybrid-search`: every valid hybrid code of the scenario's protocol, each over
/// `seeds`, as a one-axis sweep on `protocol.mode`. Codes the scenario's NIC setup refuses
/// (one-sided LOCK on unsafe atomics) are returned separately with the reason.
pub fn hybrid_search(file: &Path, seeds: &[u64]) -> Result<(Sweep, Vec<Point>, Vec<(String, String)>), ScenarioError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| ScenarioError(format!("{}: cannot read scenario: {e}", file.display())))?;
    let base = Scenario::parse_unchecked(&text, &file.display().to_string())?;
    let Some(p) = &base.protocol else {
        return Err(ScenarioError(format!(
            "{}: hybrid-search needs a transactional scenario with a protocol",
            file.display()
        )));
    };
    let protocol = p.name.protocol();
    let codes = txbed_txn::stage::Hybrid::all_codes(protocol.stages());
    let mut points = Vec::new();
    let mut refused = Vec::new();
    let mut values = Vec::new();
    for h in codes {
        let code = format!("Code({})", h.0);
        let mut ok = true;
        let mut these = Vec::new();
        for &seed in seeds {
            let sets = vec![format!("protocol.mode={code}"), "protocol.preset=None".into(), format!("run.seed={seed}")];
            let s = base.apply_sets(&sets).map_err(|e| ScenarioError(format!("{}: {e}", file.display())))?;
            match s.check(&file.display().to_string()) {
                Ok(profile) => these.push(Point { values: vec![h.0.to_string()], seed, scenario: s, profile }),
                Err(e) => {
                    refused.push((h.to_string(), e.0));
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            values.push(AxisValue::Int(h.0 as i64));
            points.extend(these);
        }
    }
    let sweep = Sweep {
        name: format!("hybrid-{}", protocol.name().to_lowercase()),
        base: file.to_path_buf(),
        set: Vec::new(),
        axes: vec![Axis { path: "protocol.mode".into(), values }],
        seeds: seeds.to_vec(),
        x: None,
    };
    Ok((sweep, points, refused))
}

/// One ranked line of a hybrid search.
pub struct Ranked {
    pub code: u32,
    pub throughput: (f64, f64),
    pub p50: (f64, f64),
    pub p99: (f64, f64),
    pub abort_rate: f64,
    pub clean: bool,
}

/// Ranks codes by mean throughput (then p50 latency), with 95% confidence intervals.
pub fn rank(points: &[Point], reports: &[Result<TxnReport, String>]) -> Vec<Ranked> {
    let mut codes: Vec<u32> = points.iter().filter_map(|p| p.values[0].parse().ok()).collect();
    codes.dedup();
    let mut out: Vec<Ranked> = codes
        .into_iter()
        .map(|code| {
            let group: Vec<&Result<TxnReport, String>> =
                points.iter().zip(reports).filter(|(p, _)| p.values[0] == code.to_string()).map(|(_, r)| r).collect();
            let ok: Vec<&TxnReport> = group.iter().filter_map(|r| r.as_ref().ok()).collect();
            let col = |f: &dyn Fn(&TxnReport) -> f64| mean_ci95(&ok.iter().map(|r| f(r)).collect::<Vec<_>>());
            Ranked {
                code,
                throughput: col(&|r| r.throughput_tps),
                p50: col(&|r| r.latency_us.p50),
                p99: col(&|r| r.latency_us.p99),
                abort_rate: col(&|r| r.abort_rate).0,
                clean: ok.len() == group.len()
                    && ok.iter().all(|r| {
                        r.check.serializable
                            && r.check.nothing_lost != Some(false)
                            && r.check.invariants_ok
                            && r.failures.is_empty()
                    }),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.throughput
            .0
            .partial_cmp(&a.throughput.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.p50.0.partial_cmp(&b.p50.0).unwrap_or(std::cmp::Ordering::Equal))
    });
    out
}
