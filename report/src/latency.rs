//! Latency distributions and where a run's time went, beyond the report's main lines: the
//! HdrHistogram percentile distribution (`.hgrm`) of a run, per-type latency, per-node counts,
//! the time series, and the stages' time per committed transaction (issue 16).

use std::path::Path;

use hdrhistogram::Histogram;
use txbed_runner::report::TxnReport;

/// Half-distance ticks of the percentile distribution, as HdrHistogram's own tools default to.
const TICKS: u32 = 5;

/// A histogram recorded in nanoseconds as HdrHistogram's percentile distribution text
/// (`.hgrm`, `outputPercentileDistribution` with values in microseconds): the format
/// HdrHistogram's plotter (hdrhistogram.github.io/HdrHistogram/plotFiles.html) and
/// `hdr-plot` load. The hdrhistogram crate serialises only its binary V2 format (behind a
/// feature that pulls in compression crates), which few tools outside HdrHistogram read, so
/// the text is written here.
pub fn hgrm(h: &Histogram<u64>) -> String {
    let us = |ns: f64| ns / 1000.0;
    let mut out = format!("{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(TICKS) {
            total += v.count_since_last_iteration();
            let q = v.quantile_iterated_to();
            let value = us(h.highest_equivalent(v.value_iterated_to()) as f64);
            if q < 1.0 {
                out.push_str(&format!("{value:>12.3} {q:>2.12} {total:>10} {:>14.2}\n", 1.0 / (1.0 - q)));
            } else {
                out.push_str(&format!("{value:>12.3} {q:>2.12} {total:>10}\n"));
            }
        }
    }
    out.push_str(&format!("#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]\n", us(h.mean()), us(h.stdev())));
    out.push_str(&format!("#[Max     = {:>12.3}, Total count    = {:>12}]\n", us(h.max() as f64), h.len()));
    // The crate keeps its sub-bucket count private; it is 2 * 10^sigfig rounded up to a power of 2.
    let sub_buckets = (2 * 10u64.pow(h.sigfig() as u32)).next_power_of_two();
    out.push_str(&format!("#[Buckets = {:>12}, SubBuckets     = {:>12}]\n", h.buckets(), sub_buckets));
    out
}

/// Writes `hgrm(h)` to `path`.
pub fn write_hgrm(path: &Path, h: &Histogram<u64>) -> Result<(), String> {
    std::fs::write(path, hgrm(h)).map_err(|e| format!("{}: {e}", path.display()))
}

/// The text report's lines for per-type latency, per-node counts and the time series.
pub fn breakdown_lines(r: &TxnReport) -> String {
    let mut out = String::new();
    if !r.per_type.is_empty() {
        let types: Vec<String> = r
            .per_type
            .iter()
            .map(|(k, t)| {
                let l = &t.latency_us;
                format!("{k} p50 {:.2} / p99 {:.2} / mean {:.2}", l.p50, l.p99, l.mean)
            })
            .collect();
        out.push_str(&format!("  type us    {}\n", types.join(" | ")));
    }
    let nodes: Vec<String> = r
        .per_node
        .iter()
        .map(|u| match u.mean_latency_us {
            Some(m) => format!("{} {} ({m:.2} us)", u.node, u.committed),
            None => format!("{} {}", u.node, u.committed),
        })
        .collect();
    out.push_str(&format!("  per node   committed (mean latency): {}\n", nodes.join(" | ")));
    let t = &r.timeseries;
    if !t.buckets.is_empty() {
        let counts: Vec<String> = t.buckets.iter().map(|b| b.committed.to_string()).collect();
        out.push_str(&format!(
            "  over time  committed per {:.0} us (window from {:.0} us): {}\n",
            t.bucket_us,
            t.window_from_us,
            counts.join(" ")
        ));
    }
    out
}

/// The stages' time per committed transaction against the mean latency (why the per-stage
/// means do not add up to the latency: they are per execution).
pub fn stage_total_line(r: &TxnReport) -> String {
    if r.stages.is_empty() {
        return String::new();
    }
    format!(
        "  in stages  {:.2} us per committed transaction (every execution over the run, aborted attempts included, / {} commits) against mean latency {:.2} us; the stage means above are per execution\n",
        r.stage_us_per_committed, r.run_committed, r.latency_us.mean
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hgrm_has_the_percentile_distribution_format() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1..=10_000u64 {
            h.record(v * 1000).unwrap(); // 1 us .. 10 ms
        }
        let text = hgrm(&h);
        let mut lines = text.lines();
        assert!(lines.next().unwrap().split_whitespace().eq(["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]));
        let rows: Vec<Vec<f64>> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_whitespace().map(|x| x.parse::<f64>().ok()).collect::<Option<Vec<f64>>>())
            .filter(|r| r.len() >= 3)
            .collect();
        assert!(rows.len() > 20, "{text}");
        // Values and percentiles never go down; the last row is the 100th percentile.
        assert!(rows.windows(2).all(|w| w[0][0] <= w[1][0] && w[0][1] <= w[1][1]));
        let last = rows.last().unwrap();
        assert_eq!(last[1], 1.0);
        assert_eq!(last[2], 10_000.0);
        assert!((last[0] - 10_000.0).abs() / 10_000.0 < 0.002, "{last:?}");
        assert!(text.contains("#[Max     =") && text.contains("Total count    =        10000]"));
    }
}
