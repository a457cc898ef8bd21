//! `txbed compare A B`: two reports (report.json) or two sweeps (results.csv) side by side,
//! every numeric metric with the ratio B/A and, for sweeps with several seeds per point,
//! Welch's t-test on the means (statrs' Student's t).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::provenance::Provenance;

/// One input: a run's report or a sweep's per-run results.
enum Input {
    Report(BTreeMap<String, f64>),
    Sweep(SweepRuns),
}

/// results.csv: per point (its axis values), per metric, the values of its runs.
struct SweepRuns {
    axes: Vec<String>,
    points: Vec<(Vec<String>, BTreeMap<String, Vec<f64>>)>,
}

/// One line of the comparison.
#[derive(Debug, Serialize)]
pub struct Line {
    /// The sweep point, `axis=value, ...` (empty for reports).
    pub point: String,
    pub metric: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// Runs (seeds) behind `a` and `b`: 1 for a report.
    pub n_a: usize,
    pub n_b: usize,
    /// B / A; None when A is 0 or a side lacks the metric.
    pub ratio: Option<f64>,
    /// Welch's two-sided p-value; None with fewer than two runs a side.
    pub p_value: Option<f64>,
    pub significant: Option<bool>,
}

/// The comparison: what was compared, and a line per metric (and point).
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub kind: &'static str,
    pub a: String,
    pub b: String,
    pub lines: Vec<Line>,
    /// Points of one sweep that the other lacks.
    pub unmatched: Vec<String>,
}

/// Report fields that are not measurements of the run.
const NOT_METRICS: [&str; 3] = ["seed", "provenance", "nic_overrides"];

/// results.csv columns after the axes that are not metrics.
fn is_result_metric(c: &str) -> bool {
    !["seed", "serializable", "digest", "error"].contains(&c) && !Provenance::csv_columns().contains(&c)
}

/// A path as given, or the report.json / results.csv in a directory.
fn resolve(p: &Path) -> Result<PathBuf, String> {
    if p.is_dir() {
        for f in ["results.csv", "report.json"] {
            if p.join(f).is_file() {
                return Ok(p.join(f));
            }
        }
        return Err(format!("{}: no results.csv (a sweep) or report.json (a run) in this directory", p.display()));
    }
    Ok(p.to_path_buf())
}

fn load(p: &Path) -> Result<(PathBuf, Input), String> {
    let path = resolve(p)?;
    let name = path.display().to_string();
    let text = txbed_input::read_text(&path, "results", txbed_input::RESULTS_LIMIT).map_err(|e| e.0)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    if text.trim_start().starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| format!("{name}:{}:{}: not a JSON report: {e}", e.line(), e.column()))?;
        let mut m = BTreeMap::new();
        flatten("", &v, &mut m);
        if m.is_empty() {
            return Err(format!("{name}: no numeric metric in this JSON (a report from txbed run --out?)"));
        }
        return Ok((path, Input::Report(m)));
    }
    Ok((path, Input::Sweep(read_results(text, &name)?)))
}

/// Numeric leaves of a report by dotted path (`latency_us.p50`).
fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, f64>) {
    match v {
        serde_json::Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.insert(prefix.to_string(), x);
            }
        }
        serde_json::Value::Object(o) => {
            for (k, v) in o {
                if prefix.is_empty() && NOT_METRICS.contains(&k.as_str()) {
                    continue;
                }
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&key, v, out);
            }
        }
        _ => {}
    }
}

fn read_results(text: &str, name: &str) -> Result<SweepRuns, String> {
    let mut r = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(text.as_bytes());
    let head: Vec<String> = r.headers().map_err(|e| format!("{name}: {e}"))?.iter().map(String::from).collect();
    let seed = head.iter().position(|c| c == "seed").ok_or_else(|| {
        format!(
            "{name}: not a report.json or a sweep's results.csv (no \"seed\" column; summary.csv has no runs to test)"
        )
    })?;
    let metrics: Vec<usize> = (seed + 1..head.len()).filter(|&i| is_result_metric(&head[i])).collect();
    let mut points: Vec<(Vec<String>, BTreeMap<String, Vec<f64>>)> = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| format!("{name}: {e}"))?;
        let key: Vec<String> = rec.iter().take(seed).map(String::from).collect();
        let i = match points.iter().position(|p| p.0 == key) {
            Some(i) => i,
            None => {
                points.push((key, BTreeMap::new()));
                points.len() - 1
            }
        };
        for &m in &metrics {
            let v = rec.get(m).unwrap_or("");
            // An empty cell is a failed run's or an absent stage's: not a sample.
            if let Ok(x) = v.parse::<f64>() {
                points[i].1.entry(head[m].clone()).or_default().push(x);
            }
        }
    }
    if points.is_empty() {
        return Err(format!("{name} has a header but no runs"));
    }
    Ok(SweepRuns { axes: head[..seed].to_vec(), points })
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Welch's t-test, two-sided p-value; None with fewer than two samples a side.
pub fn welch_p(a: &[f64], b: &[f64]) -> Option<f64> {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let var = |xs: &[f64]| {
        let m = mean(xs);
        xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64
    };
    let (sa, sb) = (var(a) / na, var(b) / nb);
    let diff = mean(a) - mean(b);
    if sa + sb == 0.0 {
        // No spread on either side (deterministic repeats): equal or certainly different.
        return Some(if diff == 0.0 { 1.0 } else { 0.0 });
    }
    let t = diff / (sa + sb).sqrt();
    let df = (sa + sb).powi(2) / (sa.powi(2) / (na - 1.0) + sb.powi(2) / (nb - 1.0));
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    Some((2.0 * (1.0 - dist.cdf(t.abs()))).clamp(0.0, 1.0))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a != 0.0 => Some(b / a),
        _ => None,
    }
}

/// Compares two reports or two sweeps; an error for unreadable or mismatched inputs.
pub fn compare(a: &Path, b: &Path) -> Result<Comparison, String> {
    let (pa, ia) = load(a)?;
    let (pb, ib) = load(b)?;
    let (an, bn) = (pa.display().to_string(), pb.display().to_string());
    match (ia, ib) {
        (Input::Report(x), Input::Report(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            let lines = keys
                .into_iter()
                .map(|k| {
                    let (va, vb) = (x.get(k).copied(), y.get(k).copied());
                    Line {
                        point: String::new(),
                        metric: k.clone(),
                        a: va,
                        b: vb,
                        n_a: usize::from(va.is_some()),
                        n_b: usize::from(vb.is_some()),
                        ratio: ratio(va, vb),
                        p_value: None,
                        significant: None,
                    }
                })
                .collect();
            Ok(Comparison { kind: "reports", a: an, b: bn, lines, unmatched: Vec::new() })
        }
        (Input::Sweep(x), Input::Sweep(y)) => {
            if x.axes != y.axes {
                return Err(format!(
                    "the sweeps have different axes: {an} has [{}], {bn} has [{}]; compare sweeps over the same axes",
                    x.axes.join(", "),
                    y.axes.join(", ")
                ));
            }
            let label =
                |k: &[String]| x.axes.iter().zip(k).map(|(a, v)| format!("{a}={v}")).collect::<Vec<_>>().join(", ");
            let mut lines = Vec::new();
            let mut unmatched = Vec::new();
            for (key, ma) in &x.points {
                let Some((_, mb)) = y.points.iter().find(|p| &p.0 == key) else {
                    unmatched.push(format!("[{}] only in {an}", label(key)));
                    continue;
                };
                let metrics: std::collections::BTreeSet<&String> = ma.keys().chain(mb.keys()).collect();
                for m in metrics {
                    let (sa, sb) = (ma.get(m).map_or(&[][..], Vec::as_slice), mb.get(m).map_or(&[][..], Vec::as_slice));
                    let (va, vb) = ((!sa.is_empty()).then(|| mean(sa)), (!sb.is_empty()).then(|| mean(sb)));
                    let p = welch_p(sa, sb);
                    lines.push(Line {
                        point: label(key),
                        metric: m.clone(),
                        a: va,
                        b: vb,
                        n_a: sa.len(),
                        n_b: sb.len(),
                        ratio: ratio(va, vb),
                        p_value: p,
                        significant: p.map(|p| p < 0.05),
                    });
                }
            }
            for (key, _) in &y.points {
                if !x.points.iter().any(|p| &p.0 == key) {
                    unmatched.push(format!("[{}] only in {bn}", label(key)));
                }
            }
            if lines.is_empty() {
                return Err(format!("{an} and {bn} have no point (combination of axis values) in common"));
            }
            Ok(Comparison { kind: "sweeps", a: an, b: bn, lines, unmatched })
        }
        (Input::Report(_), Input::Sweep(_)) => {
            Err(format!("{an} is a run's report and {bn} a sweep's results: compare two reports or two sweeps"))
        }
        (Input::Sweep(_), Input::Report(_)) => {
            Err(format!("{an} is a sweep's results and {bn} a run's report: compare two reports or two sweeps"))
        }
    }
}

/// A number short enough for a table column.
fn num(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(x) if x != 0.0 && (x.abs() >= 1e12 || x.abs() < 1e-3) => format!("{x:.4e}"),
        Some(x) if x.fract() == 0.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.4}"),
    }
}

/// The comparison as a table.
pub fn text(c: &Comparison) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "A: {}\nB: {}", c.a, c.b);
    let width = c.lines.iter().map(|l| l.metric.len()).max().unwrap_or(6).max(6);
    let mut point = None;
    for l in &c.lines {
        if c.kind == "sweeps" && point != Some(&l.point) {
            point = Some(&l.point);
            let _ = writeln!(
                out,
                "\n[{}]\n{:<width$}  {:>14}  {:>14}  {:>8}  {:>8}  significant at 5% (Welch)",
                l.point, "metric", "A mean (n)", "B mean (n)", "B/A", "p"
            );
        } else if c.kind == "reports" && point.is_none() {
            point = Some(&l.point);
            let _ = writeln!(out, "\n{:<width$}  {:>14}  {:>14}  {:>8}", "metric", "A", "B", "B/A");
        }
        let ratio = l.ratio.map_or("-".into(), |r| format!("{r:.3}"));
        if c.kind == "reports" {
            let _ = writeln!(out, "{:<width$}  {:>14}  {:>14}  {:>8}", l.metric, num(l.a), num(l.b), ratio);
        } else {
            let side = |v: Option<f64>, n: usize| format!("{} ({n})", num(v));
            let (p, sig) = match (l.p_value, l.significant) {
                (Some(p), Some(s)) => (format!("{p:.3}"), if s { "yes" } else { "no" }.to_string()),
                _ if l.n_a < 2 || l.n_b < 2 => ("-".into(), "n/a: one seed".into()),
                _ => ("-".into(), "n/a".into()),
            };
            let _ = writeln!(
                out,
                "{:<width$}  {:>14}  {:>14}  {:>8}  {:>8}  {sig}",
                l.metric,
                side(l.a, l.n_a),
                side(l.b, l.n_b),
                ratio,
                p
            );
        }
    }
    for u in &c.unmatched {
        let _ = writeln!(out, "not compared: {u}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welch_separates_clear_differences_from_none() {
        let a = [100.0, 101.0, 99.0];
        assert!(welch_p(&a, &[200.0, 201.0, 199.0]).unwrap() < 1e-4);
        assert!((welch_p(&a, &a).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(welch_p(&[1.0], &a), None);
        // t = -1.6906, df = 4.0836 (Welch-Satterthwaite), two-sided p = 0.1647 by integrating
        // the t density numerically.
        let p = welch_p(&[1.0, 2.0, 3.0, 4.0], &[2.0, 4.0, 6.0, 9.0]).unwrap();
        assert!((p - 0.1647).abs() < 1e-3, "{p}");
        assert_eq!(welch_p(&[5.0, 5.0], &[6.0, 6.0]), Some(0.0));
    }
}
