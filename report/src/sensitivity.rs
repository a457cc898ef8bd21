//! A sensitivity analysis (`txbed sensitivity`) as a text table and as sensitivity.csv.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use txbed_runner::sensitivity::{percent, Metrics, Param, Sensitivity, Side};

/// A profile value as the analysis set it.
fn value(v: f64, integer: bool) -> String {
    if integer {
        format!("{}", v as u64)
    } else {
        format!("{v}")
    }
}

/// A change in percent with its sign; exactly zero as `0`, undefined as `n/a`.
fn change(x: f64) -> String {
    if x.is_nan() {
        "n/a".into()
    } else if x == 0.0 {
        "0".into()
    } else {
        format!("{x:+.1}%")
    }
}

/// (name, value) of each metric a run of this kind reports.
fn metrics(s: &Sensitivity, m: &Metrics) -> Vec<(&'static str, f64)> {
    let mut out = vec![("throughput", m.throughput), ("p50 latency", m.p50_us), ("p99 latency", m.p99_us)];
    if s.txn {
        out.push(("abort rate", m.abort_rate.unwrap_or(f64::NAN)));
    }
    out
}

fn base_line(s: &Sensitivity, v: usize) -> String {
    let m = &s.base[v];
    let mut line = if s.txn {
        format!("{:.0} transactions/s", m.throughput)
    } else {
        format!("{:.2} M requests/s per machine", m.throughput)
    };
    write!(line, ", p50 {:.2} us, p99 {:.2} us", m.p50_us, m.p99_us).unwrap();
    if let Some(a) = m.abort_rate {
        write!(line, ", aborts {:.2}%", a * 100.0).unwrap();
    }
    let runs = &s.base_runs[v];
    if runs.len() > 1 {
        let tput: Vec<f64> = runs.iter().map(|r| r.throughput).collect();
        let (mean, ci) = crate::csv::mean_ci95(&tput);
        write!(line, "; throughput ±{:.2}% across the {} seeds (95% CI)", ci / mean * 100.0, runs.len()).unwrap();
    }
    line
}

fn pct(r: f64) -> String {
    format!("{}%", r * 100.0)
}

/// The analysis as text: per variant a table of every varied parameter (largest throughput
/// effect first), notes, what was not varied, and with a comparison the rankings and verdict.
pub fn text(s: &Sensitivity) -> String {
    let mut out = String::new();
    let seeds: Vec<String> = s.seeds.iter().map(|x| x.to_string()).collect();
    let name = if s.scenario.is_empty() { String::new() } else { format!("{:?} ", s.scenario) };
    let compared = match &s.compare {
        Some(c) => format!("; comparing {c} = {}", s.variants.join(", ")),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "sensitivity of {name}({}{compared}) to its NIC profile, ±{}, seed{} {}: {} parameter{} varied, {} simulations",
        s.title,
        pct(s.range),
        if seeds.len() > 1 { "s" } else { "" },
        seeds.join(", "),
        s.params.len(),
        if s.params.len() == 1 { "" } else { "s" },
        s.simulations
    );
    let order = s.order();
    let width = s.params.iter().map(|p| p.path.len()).max().unwrap_or(9).max(9);
    let (lo, hi) = (format!("-{}", pct(s.range)), format!("+{}", pct(s.range)));
    for (v, label) in s.variants.iter().enumerate() {
        let base = &s.base[v];
        let _ = writeln!(out);
        match &s.compare {
            Some(c) => {
                let _ = writeln!(out, "{c}={label}: base {}", base_line(s, v));
            }
            None => {
                let _ = writeln!(out, "base: {}", base_line(s, v));
            }
        }
        let names: Vec<&str> = metrics(s, base).iter().map(|x| x.0).collect();
        let _ = write!(out, "{:w$}  {:^26}", "", "value", w = width);
        for n in &names {
            let _ = write!(out, "  {n:^17}");
        }
        let _ = writeln!(out);
        let _ = write!(out, "{:w$}  {lo:>7} {:>9}{hi:>8} ", "parameter", "base", w = width);
        for _ in &names {
            let _ = write!(out, "  {lo:>8} {hi:>8}");
        }
        let _ = writeln!(out);
        for &i in &order {
            let p = &s.params[i];
            let a = &p.at[v];
            let mark = |side: &Side| if side.note.is_some() { "*" } else { " " };
            let _ = write!(
                out,
                "{:w$}  {:>7}{}{:>9}{:>8}{}",
                p.path,
                value(a.low.value, p.integer),
                mark(&a.low),
                value(a.base, p.integer),
                value(a.high.value, p.integer),
                mark(&a.high),
                w = width
            );
            let (bm, lm, hm) = (metrics(s, base), metrics(s, &a.low.metrics), metrics(s, &a.high.metrics));
            for k in 0..bm.len() {
                let _ =
                    write!(out, "  {:>8} {:>8}", change(percent(lm[k].1, bm[k].1)), change(percent(hm[k].1, bm[k].1)));
            }
            let _ = writeln!(out);
        }
        let notes: Vec<String> = order
            .iter()
            .flat_map(|&i| {
                let p = &s.params[i];
                [(&lo, &p.at[v].low), (&hi, &p.at[v].high)]
                    .into_iter()
                    .filter_map(move |(sign, side)| side.note.as_ref().map(|n| format!("  * {} {sign}: {n}", p.path)))
            })
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(out, "{}", notes.join("\n"));
        }
    }
    if !s.skipped.is_empty() {
        let _ = writeln!(out, "\nnot varied:");
        for (p, why) in &s.skipped {
            let _ = writeln!(out, "  {p}: {why}");
        }
    }
    if s.compare.is_some() {
        let _ = writeln!(out);
        let _ = write!(out, "{}", ranking_text(s, &order, width));
    }
    for p in &s.problems {
        let _ = writeln!(out, "problem: {p}");
    }
    out
}

/// Per parameter, whether the variants rank by throughput as at the base values, and the
/// verdict line.
fn ranking_text(s: &Sensitivity, order: &[usize], width: usize) -> String {
    let mut out = String::new();
    let base = s.base_ranking();
    let (lo, hi) = (format!("-{}", pct(s.range)), format!("+{}", pct(s.range)));
    let _ = writeln!(out, "ranking by throughput at the base values: {}", s.ranking_text(&base));
    let shown = |r: &[usize]| if r == base.as_slice() { "same".to_string() } else { s.ranking_text(r) };
    let col = s.variants.iter().map(|v| v.len() + 3).sum::<usize>().max(8);
    let _ = writeln!(out, "{:w$}  {lo:<col$}  {hi}", "parameter", w = width);
    for &i in order {
        let (l, h) = s.rankings(&s.params[i]);
        let _ = writeln!(out, "{:w$}  {:<col$}  {}", s.params[i].path, shown(&l), shown(&h), w = width);
    }
    let _ = writeln!(out, "{}", verdict(s));
    out
}

/// The comparison's verdict in one line; `None` without a comparison.
pub fn verdict_line(s: &Sensitivity) -> Option<String> {
    s.compare.as_ref().map(|_| verdict(s))
}

fn verdict(s: &Sensitivity) -> String {
    let base = s.base_ranking();
    let conclusion = s.ranking_text(&base);
    let mut flips = Vec::new();
    for &i in &s.order() {
        let p: &Param = &s.params[i];
        let (l, h) = s.rankings(p);
        let mut sides = Vec::new();
        for (sign, r) in [('-', &l), ('+', &h)] {
            if *r != base {
                sides.push(format!("{sign}{}: {}", pct(s.range), s.ranking_text(r)));
            }
        }
        if !sides.is_empty() {
            flips.push(format!("{} ({})", p.path, sides.join("; ")));
        }
    }
    if flips.is_empty() {
        format!(
            "verdict: the comparison's conclusion ({conclusion}) holds across ±{} of every parameter varied ({})",
            pct(s.range),
            s.params.len()
        )
    } else {
        // How close the base values were: a flip between near-equal variants may be noise.
        let gap = base
            .windows(2)
            .map(|w| (w[0], w[1], -percent(s.base[w[1]].throughput, s.base[w[0]].throughput)))
            .min_by(|a, b| a.2.total_cmp(&b.2))
            .map(|(a, b, g)| {
                let (a, b) = (&s.variants[a], &s.variants[b]);
                format!(" (at the base values the closest pair, {a} and {b}, is {g:.1}% apart)")
            })
            .unwrap_or_default();
        format!(
            "verdict: the comparison's conclusion ({conclusion}) flips within ±{} of {} of {} parameters: {}{gap}",
            pct(s.range),
            flips.len(),
            s.params.len(),
            flips.join(", ")
        )
    }
}

/// A CSV number; empty where there is none (NaN: no abort rate on verbs runs, no base).
fn num(x: f64) -> String {
    if x.is_nan() {
        String::new()
    } else {
        format!("{x}")
    }
}

/// Writes `dir`/sensitivity.csv: per variant, the base row, then a row per parameter and side
/// (in effect order) with its value, the means of the runs and the changes in percent.
pub fn write_csv(s: &Sensitivity, dir: &Path) -> Result<PathBuf, String> {
    let path = dir.join("sensitivity.csv");
    let err = |e: csv::Error| format!("{}: {e}", path.display());
    let mut w = csv::Writer::from_path(&path).map_err(err)?;
    w.write_record([
        "variant",
        "parameter",
        "side",
        "value",
        "base_value",
        "note",
        "throughput",
        "p50_us",
        "p99_us",
        "abort_rate",
        "throughput_change_pct",
        "p50_change_pct",
        "p99_change_pct",
        "abort_rate_change_pct",
    ])
    .map_err(err)?;
    let mut rows: Vec<[String; 14]> = Vec::new();
    let order = s.order();
    for (v, label) in s.variants.iter().enumerate() {
        let b = &s.base[v];
        let row = |param: &str, side: &str, value: &str, base_value: &str, note: &str, m: &Metrics| {
            let ab = m.abort_rate.map_or(f64::NAN, |a| a);
            let abort_change = match (m.abort_rate, b.abort_rate) {
                (Some(x), Some(y)) => percent(x, y),
                _ => f64::NAN,
            };
            [
                label.to_string(),
                param.to_string(),
                side.to_string(),
                value.to_string(),
                base_value.to_string(),
                note.to_string(),
                num(m.throughput),
                num(m.p50_us),
                num(m.p99_us),
                num(ab),
                num(percent(m.throughput, b.throughput)),
                num(percent(m.p50_us, b.p50_us)),
                num(percent(m.p99_us, b.p99_us)),
                num(abort_change),
            ]
        };
        rows.push(row("", "base", "", "", "", b));
        for &i in &order {
            let p = &s.params[i];
            let a = &p.at[v];
            let base_value = value(a.base, p.integer);
            for (side, x) in [("low", &a.low), ("high", &a.high)] {
                let note = x.note.as_deref().unwrap_or("");
                rows.push(row(&p.path, side, &value(x.value, p.integer), &base_value, note, &x.metrics));
            }
        }
    }
    for r in rows {
        w.write_record(&r).map_err(err)?;
    }
    w.flush().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}
