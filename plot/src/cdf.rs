//! Latency CDFs of runs (from their HdrHistogram percentile distributions, `.hgrm`) and a
//! run's time series (throughput, abort rate and latency per bucket of simulated time).

use std::fs;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{
    de, draw_legend, draw_title, fmt_tick, font, register_font, split_legend, DResult, LegendEntry, LegendSample,
    PngBackend, CHART_MARGIN, DESC_PX, SERIES_COLORS, TICK_PX, WIDTH,
};

/// One run's latency distribution: (latency us, fraction of transactions at or below it).
#[derive(Clone, Debug, PartialEq)]
pub struct CdfSeries {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Reads an HdrHistogram percentile distribution (`.hgrm`: rows of value, percentile as a
/// fraction, total count, 1/(1-percentile); `#` lines and the header skipped). Values are
/// taken as microseconds, as `txbed run --out` writes them.
pub fn read_hgrm(path: &Path) -> Result<Vec<(f64, f64)>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("Value") {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        let parse = |k: usize| cols.get(k).and_then(|c| c.parse::<f64>().ok()).filter(|v| v.is_finite());
        match (parse(0), parse(1)) {
            (Some(v), Some(p)) if (0.0..=1.0).contains(&p) && v >= 0.0 => points.push((v, p)),
            _ => {
                return Err(format!(
                "{}:{}: not a percentile distribution row (value, percentile 0..1, count, 1/(1-percentile)): {line:?}",
                path.display(),
                i + 1
            ))
            }
        }
    }
    if points.is_empty() {
        return Err(format!("{}: no percentile rows (an empty histogram, or not an .hgrm file)", path.display()));
    }
    Ok(points)
}

fn write_both(
    out_dir: &Path,
    stem: &str,
    height: u32,
    draw: &dyn Fn(&DrawingArea<SVGBackend, Shift>) -> DResult<()>,
    draw_png: &dyn Fn(&DrawingArea<PngBackend, Shift>) -> DResult<()>,
) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    fs::create_dir_all(out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let svg = out_dir.join(format!("{stem}.svg"));
    {
        let root = SVGBackend::new(&svg, (WIDTH, height)).into_drawing_area();
        draw(&root).map_err(|e| format!("{}: {e}", svg.display()))?;
        root.present().map_err(|e| format!("cannot write {}: {e:?}", svg.display()))?;
    }
    let png = out_dir.join(format!("{stem}.png"));
    {
        let root = PngBackend(BitMapBackend::new(&png, (WIDTH, height))).into_drawing_area();
        draw_png(&root).map_err(|e| format!("{}: {e}", png.display()))?;
        root.present().map_err(|e| format!("cannot write {}: {e:?}", png.display()))?;
    }
    Ok(vec![svg, png])
}

/// Writes `<stem>.svg` and `<stem>.png`: one CDF per series, latency on a log x axis.
pub fn cdf(series: &[CdfSeries], subtitle: &str, out_dir: &Path, stem: &str) -> Result<Vec<PathBuf>, String> {
    if series.is_empty() || series.iter().all(|s| s.points.is_empty()) {
        return Err("a CDF plot needs at least one latency distribution".into());
    }
    write_both(out_dir, stem, 650, &|r| render_cdf(r, series, subtitle), &|r| render_cdf(r, series, subtitle))
}

fn render_cdf<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, series: &[CdfSeries], subtitle: &str) -> DResult<()> {
    let body = draw_title(root, "Commit latency CDF", subtitle)?;
    let legend: Vec<LegendEntry> = series
        .iter()
        .enumerate()
        .map(|(i, s)| LegendEntry {
            sample: LegendSample::Line {
                color: SERIES_COLORS[i % SERIES_COLORS.len()],
                dashed: false,
                marker: None,
                draw_line: true,
            },
            text: s.label.clone(),
        })
        .collect();
    let split = split_legend(&body, "run", &legend)?;
    let values = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).filter(|v| *v > 0.0);
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > lo { (lo / 1.2, hi * 1.2) } else { (0.1, 10.0) };
    let mut chart = ChartBuilder::on(&split.chart)
        .margin(CHART_MARGIN)
        .x_label_area_size(56)
        .y_label_area_size(70)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(de)?;
    chart
        .configure_mesh()
        .x_desc("commit latency (us, log scale)")
        .y_desc("fraction of committed transactions")
        .axis_desc_style(font(DESC_PX))
        .label_style(font(TICK_PX))
        .y_label_formatter(&|v| fmt_tick(*v, 0.1))
        .bold_line_style(super::GRID_BOLD)
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(de)?;
    for (i, s) in series.iter().enumerate() {
        let color = SERIES_COLORS[i % SERIES_COLORS.len()];
        // A step function: each percentile holds until the next value.
        let mut pts = Vec::new();
        let mut last = 0.0;
        for &(v, p) in &s.points {
            let v = v.max(lo);
            pts.push((v, last));
            pts.push((v, p));
            last = p;
        }
        chart.draw_series(LineSeries::new(pts, color.stroke_width(2))).map_err(de)?;
    }
    if let Some(legend_area) = split.legend {
        let top = chart.plotting_area().get_base_pixel().1 - legend_area.get_base_pixel().1;
        draw_legend(&legend_area, top, &split.title, &legend)?;
    }
    Ok(())
}

/// One bucket of a time series: (start us, end us, committed per second, abort rate, mean
/// latency us if anything committed).
pub type TimeBucket = (f64, f64, f64, f64, Option<f64>);

/// A panel of the time-series figure: its y description and the value it plots per bucket.
type Panel = (&'static str, fn(&TimeBucket) -> Option<f64>);

/// A run's time series: per bucket (start us, end us, committed per second, abort rate,
/// mean latency us if anything committed).
pub struct TimeSeriesPlot<'a> {
    pub title: &'a str,
    pub subtitle: &'a str,
    pub buckets: &'a [TimeBucket],
    /// Where the measured window starts (drawn as a dashed line; before it is warm-up).
    pub window_from_us: f64,
}

/// Writes `<stem>.svg` and `<stem>.png`: throughput, abort rate and mean latency per bucket,
/// three panels over simulated time.
pub fn timeseries(t: &TimeSeriesPlot, out_dir: &Path, stem: &str) -> Result<Vec<PathBuf>, String> {
    if t.buckets.is_empty() {
        return Err("a time series plot needs at least one bucket".into());
    }
    write_both(out_dir, stem, 900, &|r| render_timeseries(r, t), &|r| render_timeseries(r, t))
}

fn render_timeseries<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, t: &TimeSeriesPlot) -> DResult<()> {
    let body = draw_title(root, t.title, t.subtitle)?;
    let panels = body.split_evenly((3, 1));
    let x1 = t.buckets.last().map_or(1.0, |b| b.1).max(1e-9);
    let metrics: [Panel; 3] = [
        ("committed per second (M)", |b| Some(b.2 / 1e6)),
        ("abort rate", |b| Some(b.3)),
        ("mean latency (us)", |b| b.4),
    ];
    for (k, (panel, (desc, value))) in panels.iter().zip(metrics.iter()).enumerate() {
        let ys: Vec<f64> = t.buckets.iter().filter_map(value).collect();
        let y1 = ys.iter().cloned().fold(0.0, f64::max);
        let y1 = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
        let mut chart = ChartBuilder::on(panel)
            .margin(CHART_MARGIN)
            .x_label_area_size(if k == 2 { 50 } else { 24 })
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..x1, 0.0..y1)
            .map_err(de)?;
        let y_fmt = |v: &f64| fmt_tick(*v, y1 / 5.0);
        let mut mesh = chart.configure_mesh();
        mesh.y_desc(*desc)
            .axis_desc_style(font(TICK_PX))
            .label_style(font(TICK_PX))
            .y_label_formatter(&y_fmt)
            .y_labels(5)
            .bold_line_style(super::GRID_BOLD)
            .light_line_style(TRANSPARENT);
        if k == 2 {
            mesh.x_desc("simulated time (us); dashed: start of the measured window");
        }
        mesh.draw().map_err(de)?;
        let color = SERIES_COLORS[k];
        // Each bucket as a flat step over its span, so uneven last buckets show as such.
        for b in t.buckets {
            if let Some(y) = value(b) {
                chart.draw_series(LineSeries::new([(b.0, y), (b.1, y)], color.stroke_width(2))).map_err(de)?;
            }
        }
        let steps: Vec<(f64, f64)> =
            t.buckets.iter().filter_map(|b| value(b).map(|y| ((b.0 + b.1) / 2.0, y))).collect();
        chart.draw_series(steps.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(de)?;
        if t.window_from_us > 0.0 {
            let w = t.window_from_us;
            chart.draw_series(DashedLineSeries::new([(w, 0.0), (w, y1)], 6, 4, BLACK.stroke_width(1))).map_err(de)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hgrm_rows_are_read_and_junk_is_refused() {
        let dir = std::env::temp_dir().join(format!("txbed-cdf-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let good = dir.join("a.hgrm");
        fs::write(
            &good,
            "       Value     Percentile TotalCount 1/(1-Percentile)\n\n       1.000 0.000000000000          1           1.00\n       2.000 1.000000000000          2\n#[Mean    =        1.500, StdDeviation   =        0.500]\n",
        )
        .unwrap();
        assert_eq!(read_hgrm(&good).unwrap(), vec![(1.0, 0.0), (2.0, 1.0)]);
        let bad = dir.join("b.hgrm");
        fs::write(&bad, "hello world\n").unwrap();
        assert!(read_hgrm(&bad).unwrap_err().contains(":1: not a percentile distribution row"));
        let out =
            cdf(&[CdfSeries { label: "OCC rpc".into(), points: read_hgrm(&good).unwrap() }], "", &dir, "cdf").unwrap();
        assert!(fs::read_to_string(&out[0]).unwrap().contains("OCC rpc"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
