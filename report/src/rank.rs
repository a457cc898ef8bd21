//! `txbed hybrid-search`'s ranking of hybrid codes.

use txbed_runner::report::TxnReport;
use txbed_scenario::sweep::Point;

use crate::csv::mean_ci95;

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
    // Values are `Code(38)` (txbed_scenario::sweep::hybrid_search).
    let code_of = |v: &str| v.strip_prefix("Code(")?.strip_suffix(')')?.parse::<u32>().ok();
    let mut codes: Vec<u32> = points.iter().filter_map(|p| code_of(&p.values[0])).collect();
    codes.dedup();
    let mut out: Vec<Ranked> = codes
        .into_iter()
        .map(|code| {
            let group: Vec<&Result<TxnReport, String>> = points
                .iter()
                .zip(reports)
                .filter(|(p, _)| code_of(&p.values[0]) == Some(code))
                .map(|(_, r)| r)
                .collect();
            let ok: Vec<&TxnReport> = group.iter().filter_map(|r| r.as_ref().ok()).collect();
            let col = |f: &dyn Fn(&TxnReport) -> f64| mean_ci95(&ok.iter().map(|r| f(r)).collect::<Vec<_>>());
            Ranked {
                code,
                throughput: col(&|r| r.throughput_tps),
                p50: col(&|r| r.latency_us.p50),
                p99: col(&|r| r.latency_us.p99),
                abort_rate: col(&|r| r.abort_rate).0,
                clean: ok.len() == group.len() && ok.iter().all(|r| r.clean()),
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
