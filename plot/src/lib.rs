//! Plots of sweep CSVs (`summary.csv`, or `results.csv` with one row per run) as SVG and PNG.
//!
//! Four figures: throughput, latency percentiles, abort rate, and a stacked per-stage latency
//! breakdown, each against one axis column with one series per combination of the other axes.
//! `tornado` draws a sensitivity analysis: per parameter, a metric's change at a lower and a
//! higher value (`txbed sensitivity`).
//!
//! Text uses an embedded DejaVu Sans (registered with plotters for layout, drawn into PNGs by
//! `PngBackend`), so rendering needs no system fonts, fontconfig or freetype.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ab_glyph::{point, Font, FontRef, GlyphId, PxScale, ScaleFont};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontTransform;
use plotters_backend::{BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind};
use statrs::distribution::{ContinuousCDF, StudentsT};
use statrs::statistics::Statistics;

mod tornado;
pub use tornado::{tornado, Tornado, TornadoBar};
pub mod cdf;

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 650;
const FONT: &str = "sans-serif";
const TITLE_PX: f64 = 22.0;
const SUBTITLE_PX: f64 = 14.0;
const DESC_PX: f64 = 17.0;
const TICK_PX: f64 = 14.0;
const LEGEND_PX: f64 = 14.0;

/// Series colours: Okabe-Ito (colour-blind safe), yellow last since it is faint on white, then
/// four more from Tableau so that up to 12 series have distinct colours.
const SERIES_COLORS: [RGBColor; 12] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0xF0, 0xE4, 0x42),
    RGBColor(0x8C, 0x56, 0x4B),
    RGBColor(0x94, 0x67, 0xBD),
    RGBColor(0x7F, 0x7F, 0x7F),
    RGBColor(0xBC, 0xBD, 0x22),
];

/// Stage colours: Tableau 10, whose fills stay distinct next to each other in a stack.
const STAGE_COLORS: [RGBColor; 10] = [
    RGBColor(0x4E, 0x79, 0xA7),
    RGBColor(0xF2, 0x8E, 0x2B),
    RGBColor(0xE1, 0x57, 0x59),
    RGBColor(0x76, 0xB7, 0xB2),
    RGBColor(0x59, 0xA1, 0x4F),
    RGBColor(0xED, 0xC9, 0x48),
    RGBColor(0xB0, 0x7A, 0xA1),
    RGBColor(0xFF, 0x9D, 0xA7),
    RGBColor(0x9C, 0x75, 0x5F),
    RGBColor(0xBA, 0xB0, 0xAC),
];

const GRID_BOLD: RGBColor = RGBColor(0xD8, 0xD8, 0xD8);
const SUBTITLE_COLOR: RGBColor = RGBColor(0x55, 0x55, 0x55);

/// The metrics `txbed sweep` writes besides the per-stage ones.
const METRICS: [&str; 6] = ["throughput_tps", "abort_rate", "p50_us", "p90_us", "p99_us", "mean_us"];

/// Reads a sweep CSV and writes its plots into `out_dir` (created if missing) as
/// `<csv stem>-{throughput,latency,abort,stages}.{svg,png}`; returns the paths written.
/// A figure whose metrics are absent from the CSV is skipped.
pub fn plot_csv(csv: &Path, out_dir: &Path, x_axis: Option<&str>) -> Result<Vec<PathBuf>, String> {
    let table = read_table(csv)?;
    let layout = Layout::new(&table, x_axis)?;
    let figures = figures(&table, &layout);
    if figures.is_empty() {
        return Err(format!("{}: no plottable metric columns", csv.display()));
    }
    register_font()?;
    fs::create_dir_all(out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let stem = csv.file_stem().and_then(|s| s.to_str()).unwrap_or("plot");
    let mut written = Vec::new();
    for (name, fig) in &figures {
        // Not with_extension: a stem with a '.' in it would lose its tail.
        let svg = out_dir.join(format!("{stem}-{name}.svg"));
        {
            let root = SVGBackend::new(&svg, (WIDTH, HEIGHT)).into_drawing_area();
            render(&root, &layout, fig).map_err(|e| format!("{}: {e}", svg.display()))?;
            root.present().map_err(|e| format!("cannot write {}: {e:?}", svg.display()))?;
        }
        written.push(svg);
        let png = out_dir.join(format!("{stem}-{name}.png"));
        {
            let root = PngBackend(BitMapBackend::new(&png, (WIDTH, HEIGHT))).into_drawing_area();
            render(&root, &layout, fig).map_err(|e| format!("{}: {e}", png.display()))?;
            root.present().map_err(|e| format!("cannot write {}: {e:?}", png.display()))?;
        }
        written.push(png);
    }
    Ok(written)
}

/// Whether a sweep with these axis columns and rows (one per run or point, its axis values in
/// column order) can be plotted into `out_dir`, checked before any run starts: the x axis
/// resolves as `plot_csv` would resolve it, the font loads, and `out_dir` (created if missing)
/// takes a new file. Plotting itself can then only fail for lack of data or disk space.
pub fn check_plottable(
    axes: &[String],
    rows: &[Vec<String>],
    x_axis: Option<&str>,
    out_dir: &Path,
) -> Result<(), String> {
    if rows.is_empty() {
        return Err("nothing to plot: no runs".into());
    }
    let table = Table {
        axes: axes.to_vec(),
        stages: Vec::new(),
        rows: rows.iter().map(|r| Row { axes: r.clone(), runs: None, metrics: HashMap::new() }).collect(),
    };
    Layout::new(&table, x_axis)?;
    register_font()?;
    fs::create_dir_all(out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    // Permissions, read-only mounts and quotas are only known by trying.
    let probe = out_dir.join(format!(".txbed-write-check-{}", std::process::id()));
    fs::write(&probe, b"").map_err(|e| format!("cannot write into {}: {e}", out_dir.display()))?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// DejaVu Sans, see plot/assets/LICENSE-DejaVu.txt.
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

fn register_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES)
            .map_err(|_| "the embedded font does not parse".to_string())
    })
    .clone()
}

// ---------------------------------------------------------------------------------------------
// PNG text

/// The bitmap backend with text drawn here. Plotters 0.3.7 draws ab_glyph text without each
/// glyph's left side bearing and with advances truncated to whole pixels, so letters run into
/// or apart from each other ("run s"); this places every glyph at its exact position. The em
/// is the size over SIZE_TO_EM, as in the SVG, so both files look alike.
struct PngBackend<'a>(BitMapBackend<'a>);

// plotters_backend::BackendStyle is named by path below: imported, it would make
// RGBColor::stroke_width ambiguous with plotters' Color trait.
type PngError = DrawingErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>;

/// A line of text laid out: glyphs with their pen x, and the line's metrics.
struct TextLine {
    scale: PxScale,
    glyphs: Vec<(GlyphId, f32)>,
    width: f32,
    ascent: f32,
    height: f32,
}

fn text_font() -> Option<&'static FontRef<'static>> {
    static F: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    F.get_or_init(|| FontRef::try_from_slice(FONT_BYTES).ok()).as_ref()
}

fn lay_out(font: &FontRef<'static>, size: f64, text: &str) -> TextLine {
    let upem = font.units_per_em().unwrap_or(2048.0);
    let em = (size / SIZE_TO_EM) as f32;
    let scale = PxScale::from(em * font.height_unscaled() / upem);
    let sf = font.as_scaled(scale);
    let mut glyphs = Vec::with_capacity(text.len());
    let (mut x, mut prev) = (0.0f32, None);
    for c in text.chars() {
        let id = sf.glyph_id(c);
        if let Some(p) = prev {
            x += sf.kern(p, id);
        }
        glyphs.push((id, x));
        x += sf.h_advance(id);
        prev = Some(id);
    }
    TextLine { scale, glyphs, width: x, ascent: sf.ascent(), height: sf.ascent() - sf.descent() }
}

fn font_missing() -> PngError {
    DrawingErrorKind::FontError(Box::new(std::io::Error::other("the embedded font does not parse")))
}

impl DrawingBackend for PngBackend<'_> {
    type ErrorType = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), PngError> {
        self.0.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), PngError> {
        self.0.present()
    }
    fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> Result<(), PngError> {
        self.0.draw_pixel(p, c)
    }
    fn draw_line<S: plotters_backend::BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        s: &S,
    ) -> Result<(), PngError> {
        self.0.draw_line(a, b, s)
    }
    fn draw_rect<S: plotters_backend::BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        s: &S,
        fill: bool,
    ) -> Result<(), PngError> {
        self.0.draw_rect(a, b, s, fill)
    }
    fn draw_path<S: plotters_backend::BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        s: &S,
    ) -> Result<(), PngError> {
        self.0.draw_path(path, s)
    }
    fn draw_circle<S: plotters_backend::BackendStyle>(
        &mut self,
        c: BackendCoord,
        r: u32,
        s: &S,
        fill: bool,
    ) -> Result<(), PngError> {
        self.0.draw_circle(c, r, s, fill)
    }
    fn fill_polygon<S: plotters_backend::BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        s: &S,
    ) -> Result<(), PngError> {
        self.0.fill_polygon(vert, s)
    }
    fn blit_bitmap(&mut self, pos: BackendCoord, size: (u32, u32), src: &[u8]) -> Result<(), PngError> {
        self.0.blit_bitmap(pos, size, src)
    }

    fn estimate_text_size<T: BackendTextStyle>(&self, text: &str, style: &T) -> Result<(u32, u32), PngError> {
        let line = lay_out(text_font().ok_or_else(font_missing)?, style.size(), text);
        Ok((line.width.ceil() as u32, line.height.ceil() as u32))
    }

    fn draw_text<T: BackendTextStyle>(&mut self, text: &str, style: &T, pos: BackendCoord) -> Result<(), PngError> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let font = text_font().ok_or_else(font_missing)?;
        let line = lay_out(font, style.size(), text);
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0.0,
            HPos::Center => -line.width / 2.0,
            HPos::Right => -line.width,
        };
        let dy = match anchor.v_pos {
            VPos::Top => 0.0,
            VPos::Center => -line.height / 2.0,
            VPos::Bottom => -line.height,
        };
        let trans = style.transform();
        let mut pixels = Vec::new();
        for &(id, x) in &line.glyphs {
            let glyph = id.with_scale_and_position(line.scale, point(dx + x, dy + line.ascent));
            if let Some(outline) = font.outline_glyph(glyph) {
                let b = outline.px_bounds();
                outline.draw(|gx, gy, cover| {
                    let (tx, ty) = trans.transform(b.min.x as i32 + gx as i32, b.min.y as i32 + gy as i32);
                    pixels.push(((pos.0 + tx, pos.1 + ty), cover));
                });
            }
        }
        for (p, cover) in pixels {
            if cover > 0.0 {
                self.0.draw_pixel(p, BackendColor { alpha: color.alpha * cover.min(1.0) as f64, rgb: color.rgb })?;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

#[derive(Clone, Copy, Debug)]
struct Stat {
    mean: f64,
    ci: f64,
}

/// One point of the sweep: an axis combination and its aggregated metrics.
struct Row {
    axes: Vec<String>,
    runs: Option<usize>,
    metrics: HashMap<String, Stat>,
}

struct Table {
    axes: Vec<String>,
    /// Stage names (`lock` for `stage_lock_us`), in column order.
    stages: Vec<String>,
    rows: Vec<Row>,
}

impl Table {
    fn stat(&self, row: usize, metric: &str) -> Option<Stat> {
        self.rows[row].metrics.get(metric).copied().filter(|s| s.mean.is_finite())
    }
    fn has(&self, metric: &str) -> bool {
        (0..self.rows.len()).any(|r| self.stat(r, metric).is_some())
    }
}

fn read_table(csv: &Path) -> Result<Table, String> {
    let name = csv.display();
    let bytes = txbed_input::read_bytes(csv, "CSV", txbed_input::RESULTS_LIMIT).map_err(|e| e.0)?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{name} is not a CSV file (not UTF-8 text)"))?;
    // A byte-order mark, as spreadsheet programs write, is not part of the first column's name.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    // Parsed by the csv crate: axis values may hold quoted commas, quotes and line breaks.
    let mut reader =
        csv::ReaderBuilder::new().has_headers(false).flexible(true).trim(csv::Trim::All).from_reader(text.as_bytes());
    let mut records = Vec::new();
    for rec in reader.records() {
        let rec = rec.map_err(|e| format!("{name}: {e}"))?;
        let line = rec.position().map_or(0, |p| p.line());
        // A line of nothing but separators or spaces is blank, as before.
        if rec.iter().all(str::is_empty) {
            continue;
        }
        records.push((line, rec));
    }
    let mut lines = records.into_iter();
    let (_, header) = lines.next().ok_or_else(|| format!("{name} is empty"))?;
    let cols: Vec<&str> = header.iter().collect();
    for (i, c) in cols.iter().enumerate() {
        if cols[..i].contains(c) {
            return Err(format!("{name}: column {c:?} appears twice in the header"));
        }
    }
    // txbed writes the axes first, then `seed` (results.csv) or `runs` (summary.csv); a
    // top-level field such as `name` is an axis too. Other CSVs: columns with a '.'.
    let first_fixed = cols.iter().position(|c| *c == "seed" || *c == "runs");
    let axis_idx: Vec<usize> = match first_fixed {
        Some(k) if k > 0 => (0..k).collect(),
        _ => (0..cols.len()).filter(|&i| cols[i].contains('.')).collect(),
    };
    if axis_idx.is_empty() {
        return Err(format!(
            "{name} is not a txbed sweep CSV: its header has no axis columns (names with a '.', such as protocol.name)"
        ));
    }
    let summary = cols.iter().any(|c| c.ends_with("_mean"));
    let is_stage = |m: &str| m.starts_with("stage_") && m.ends_with("_us") && m.len() > "stage__us".len();
    let is_per_txn = |m: &str| m.starts_with("per_txn_") && m.ends_with("_us");
    // (metric, mean column, ci column); results.csv has no ci column.
    let mut metric_cols: Vec<(String, usize, Option<usize>)> = Vec::new();
    for (i, c) in cols.iter().enumerate() {
        if summary {
            if let Some(m) = c.strip_suffix("_mean") {
                let ci = cols.iter().position(|d| *d == format!("{m}_ci95"));
                metric_cols.push((m.to_string(), i, ci));
            }
        } else if METRICS.contains(c) || is_stage(c) || is_per_txn(c) {
            metric_cols.push((c.to_string(), i, None));
        }
    }
    if metric_cols.is_empty() {
        return Err(format!(
            "{name} is not a txbed sweep CSV: no metric columns (throughput_tps_mean in summary.csv, throughput_tps in results.csv)"
        ));
    }
    let runs_col = cols.iter().position(|c| *c == "runs");
    let stages = metric_cols
        .iter()
        .filter(|(m, ..)| is_stage(m))
        .map(|(m, ..)| m["stage_".len()..m.len() - "_us".len()].to_string())
        .collect();

    let mut raw: Vec<Row> = Vec::new();
    for (lineno, rec) in lines {
        let fields: Vec<&str> = rec.iter().collect();
        if fields.len() != cols.len() {
            return Err(format!("{name}:{lineno}: {} fields where the header has {}", fields.len(), cols.len()));
        }
        let num = |i: usize| -> Result<f64, String> {
            let v = fields[i];
            if v.is_empty() || v.eq_ignore_ascii_case("nan") {
                return Ok(f64::NAN);
            }
            v.parse::<f64>().map_err(|_| format!("{name}:{lineno}: column {}: {v:?} is not a number", cols[i]))
        };
        let mut metrics = HashMap::new();
        for (m, mean, ci) in &metric_cols {
            let ci = match ci {
                Some(c) => num(*c)?,
                None => 0.0,
            };
            metrics.insert(m.clone(), Stat { mean: num(*mean)?, ci: if ci.is_finite() { ci } else { 0.0 } });
        }
        let runs = match runs_col {
            Some(c) => Some(num(c)? as usize),
            None => None,
        };
        raw.push(Row { axes: axis_idx.iter().map(|&i| fields[i].to_string()).collect(), runs, metrics });
    }
    if raw.is_empty() {
        return Err(format!("{name} has a header but no data rows"));
    }
    let rows = if summary { raw } else { aggregate(raw, &metric_cols) };
    Ok(Table { axes: axis_idx.iter().map(|&i| cols[i].to_string()).collect(), stages, rows })
}

/// Groups per-run rows by axis combination (first-seen order): mean and 95% CI per metric.
fn aggregate(runs: Vec<Row>, metric_cols: &[(String, usize, Option<usize>)]) -> Vec<Row> {
    let mut order: Vec<Vec<String>> = Vec::new();
    let mut groups: HashMap<Vec<String>, Vec<HashMap<String, Stat>>> = HashMap::new();
    for run in runs {
        if !groups.contains_key(&run.axes) {
            order.push(run.axes.clone());
        }
        groups.entry(run.axes).or_default().push(run.metrics);
    }
    order
        .into_iter()
        .map(|axes| {
            let group = &groups[&axes];
            let metrics = metric_cols
                .iter()
                .map(|(m, ..)| {
                    let v: Vec<f64> = group.iter().map(|r| r[m].mean).filter(|x| x.is_finite()).collect();
                    (m.clone(), mean_ci95(&v))
                })
                .collect();
            Row { axes, runs: Some(group.len()), metrics }
        })
        .collect()
}

/// Mean and half-width of the 95% confidence interval: t_{0.975,n-1} * s / sqrt(n).
fn mean_ci95(v: &[f64]) -> Stat {
    let n = v.len();
    if n == 0 {
        return Stat { mean: f64::NAN, ci: 0.0 };
    }
    let mean = v.iter().mean();
    if n == 1 {
        return Stat { mean, ci: 0.0 };
    }
    let s = v.iter().std_dev();
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).map(|d| d.inverse_cdf(0.975)).unwrap_or(f64::NAN);
    let ci = t * s / (n as f64).sqrt();
    Stat { mean, ci: if ci.is_finite() { ci } else { 0.0 } }
}

// ---------------------------------------------------------------------------------------------
// Layout: which column is x, how x maps to positions, and the series.

#[derive(Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    Log10,
    Category,
}

struct Layout {
    x_name: String,
    /// Distinct x values as written in the CSV, in plotting order.
    x_labels: Vec<String>,
    /// Position of each x value on the x axis (the value, its log10, or its index).
    x_pos: Vec<f64>,
    scale: Scale,
    /// The other axes that vary, joined: the legend's title.
    series_title: String,
    series: Vec<String>,
    /// Per series, the values of the varying axes alone: short group labels.
    series_values: Vec<Vec<String>>,
    /// Per table row: (series index, x index).
    place: Vec<(usize, usize)>,
    /// "axis = value" for the axes that do not vary: shown under the title.
    constants: Vec<String>,
    /// "mean of 3 runs", when the CSV tells.
    runs: Option<String>,
}

fn numeric(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Coefficient of variation of the gaps between sorted values: 0 when evenly spaced.
fn gap_spread(sorted: &[f64]) -> f64 {
    let gaps: Vec<f64> = sorted.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    var.sqrt() / mean
}

fn distinct(values: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

impl Layout {
    fn new(t: &Table, x_axis: Option<&str>) -> Result<Layout, String> {
        let col = |i: usize| distinct(t.rows.iter().map(move |r| r.axes[i].clone()));
        let all_numeric = |i: usize| t.rows.iter().all(|r| numeric(&r.axes[i]).is_some());
        let xi = match x_axis {
            Some(want) => {
                // Also accept the last path component ("coroutines") when it names one column.
                let short: Vec<usize> =
                    (0..t.axes.len()).filter(|&i| t.axes[i].rsplit('.').next() == Some(want)).collect();
                match t.axes.iter().position(|a| a == want) {
                    Some(i) => i,
                    None if short.len() == 1 => short[0],
                    None => return Err(format!("unknown x axis {want:?}: the axis columns are {}", t.axes.join(", "))),
                }
            }
            // A numeric axis that varies, else any numeric one, else the first.
            None => (0..t.axes.len())
                .find(|&i| all_numeric(i) && col(i).len() > 1)
                .or_else(|| (0..t.axes.len()).find(|&i| all_numeric(i)))
                .unwrap_or(0),
        };
        let mut x_labels = col(xi);
        let scale;
        let x_pos: Vec<f64>;
        // A protocol mode is a category even when written as a bare hybrid code (38): there is
        // nothing between two codes to draw a line through.
        let categorical = t.axes[xi] == "protocol.mode";
        if all_numeric(xi) && !categorical {
            x_labels.sort_by(|a, b| numeric(a).unwrap().total_cmp(&numeric(b).unwrap()));
            let v: Vec<f64> = x_labels.iter().map(|s| numeric(s).unwrap()).collect();
            let (lo, hi) = (v[0], v[v.len() - 1]);
            // Geometric sweeps (1, 2, 4, ... coroutines) read better on a log axis: use it when
            // the values are more evenly spaced in log than in linear terms.
            let logs: Vec<f64> = v.iter().map(|x| x.log10()).collect();
            if lo > 0.0 && hi / lo >= 4.0 && v.len() >= 3 && gap_spread(&logs) < gap_spread(&v) {
                scale = Scale::Log10;
                x_pos = v.iter().map(|x| x.log10()).collect();
            } else {
                scale = Scale::Linear;
                x_pos = v;
            }
        } else {
            scale = Scale::Category;
            x_pos = (0..x_labels.len()).map(|i| i as f64).collect();
        }

        let others: Vec<usize> = (0..t.axes.len()).filter(|&i| i != xi).collect();
        let varying: Vec<usize> = others.iter().copied().filter(|&i| col(i).len() > 1).collect();
        let short_name = |i: usize| t.axes[i].rsplit('.').next().unwrap_or(&t.axes[i]).to_string();
        let label_of = |r: &Row| -> String {
            if varying.is_empty() {
                return "all runs".to_string();
            }
            varying
                .iter()
                .map(|&i| match numeric(&r.axes[i]) {
                    // A bare number says nothing without its axis name.
                    Some(_) => format!("{}={}", short_name(i), r.axes[i]),
                    None => r.axes[i].clone(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let series = distinct(t.rows.iter().map(label_of));
        let series_values = series
            .iter()
            .map(|label| {
                let r = t.rows.iter().find(|r| label_of(r) == *label).unwrap();
                varying.iter().map(|&i| r.axes[i].clone()).collect()
            })
            .collect();
        let place = t
            .rows
            .iter()
            .map(|r| {
                let s = series.iter().position(|l| *l == label_of(r)).unwrap();
                let x = x_labels.iter().position(|l| *l == r.axes[xi]).unwrap();
                (s, x)
            })
            .collect();

        let constants = others
            .iter()
            .filter(|i| !varying.contains(i))
            .map(|&i| format!("{} = {}", t.axes[i], t.rows[0].axes[i]))
            .collect();
        let counts: Vec<usize> = t.rows.iter().filter_map(|r| r.runs).collect();
        let runs = match (counts.iter().min(), counts.iter().max()) {
            (Some(lo), Some(hi)) => {
                let n = if lo == hi { format!("{lo}") } else { format!("{lo}–{hi}") };
                Some(format!("mean of {n} run{}", if *hi == 1 { "" } else { "s" }))
            }
            _ => None,
        };
        Ok(Layout {
            x_name: t.axes[xi].clone(),
            x_labels,
            x_pos,
            scale,
            series_title: varying.iter().map(|&i| t.axes[i].as_str()).collect::<Vec<_>>().join(", "),
            series,
            series_values,
            place,
            constants,
            runs,
        })
    }

    /// The line under the title: constant axes, run counts, what error bars mean.
    fn subtitle(&self, error_bars: bool) -> String {
        let mut parts = self.constants.clone();
        match (&self.runs, error_bars) {
            (Some(r), true) => parts.push(format!("{r}, error bars: 95% CI")),
            (Some(r), false) => parts.push(r.clone()),
            (None, true) => parts.push("error bars: 95% CI".to_string()),
            (None, false) => {}
        }
        parts.join("; ")
    }

    fn x_desc(&self) -> String {
        match self.scale {
            Scale::Log10 => format!("{} (log scale)", self.x_name),
            _ => self.x_name.clone(),
        }
    }

    /// The x range with a margin around the outermost values.
    fn x_range(&self) -> (f64, f64) {
        let (lo, hi) = (self.x_pos[0], self.x_pos[self.x_pos.len() - 1]);
        if self.scale == Scale::Category {
            return (-0.5, hi + 0.5);
        }
        let pad = if hi > lo {
            (hi - lo) * 0.05
        } else if lo == 0.0 {
            1.0
        } else {
            lo.abs() * 0.25
        };
        (lo - pad, hi + pad)
    }

    /// Horizontal shift of a series at categorical x so that error bars do not overlap.
    fn dodge(&self, series: usize) -> f64 {
        if self.scale != Scale::Category || self.series.len() < 2 {
            return 0.0;
        }
        let step = (0.6 / self.series.len() as f64).min(0.12);
        (series as f64 - (self.series.len() - 1) as f64 / 2.0) * step
    }
}

// ---------------------------------------------------------------------------------------------
// Figures

enum Figure {
    Lines(LineFig),
    Stacked(StackFig),
}

struct LineFig {
    title: String,
    y_desc: String,
    lines: Vec<Line>,
    legend: Vec<LegendEntry>,
}

struct Line {
    series: usize,
    color: RGBColor,
    dashed: bool,
    marker: Marker,
    /// (x index, mean, ci) in plot units.
    points: Vec<(usize, f64, f64)>,
}

#[derive(Clone, Copy)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Diamond,
    Cross,
}

const MARKERS: [Marker; 5] = [Marker::Circle, Marker::Square, Marker::Triangle, Marker::Diamond, Marker::Cross];

enum LegendSample {
    Line {
        color: RGBColor,
        dashed: bool,
        marker: Option<Marker>,
        draw_line: bool,
    },
    Box(RGBColor),
    /// An empty row that separates groups of entries.
    Space,
}

struct LegendEntry {
    sample: LegendSample,
    text: String,
}

struct StackFig {
    title: String,
    y_desc: String,
    /// (stage name, colour), bottom of the stack first.
    stages: Vec<(String, RGBColor)>,
    /// Per table row with any stage data: (row, per-stage means in plot units).
    bars: Vec<(usize, Vec<f64>)>,
    /// Per bar: the mean commit latency in plot units, drawn as a marker next to the stack
    /// (only when the stack is per committed transaction).
    latency: Vec<Option<f64>>,
}

/// Picks a unit so that tick labels stay short: the first (threshold, divisor, unit) whose
/// threshold `max` reaches; returns (divisor, unit).
fn scale_unit(max: f64, units: &[(f64, f64, &'static str)]) -> (f64, &'static str) {
    let pick = units.iter().find(|u| max >= u.0).unwrap_or(&units[units.len() - 1]);
    (pick.1, pick.2)
}

/// Latencies are in µs; from 10 ms up, ms keeps tick labels short.
const LATENCY_UNITS: &[(f64, f64, &str)] = &[(1e4, 1e3, "ms"), (0.0, 1.0, "µs")];

fn figures(t: &Table, l: &Layout) -> Vec<(&'static str, Figure)> {
    let mut out = Vec::new();
    let vs = format!("vs {}", l.x_name);
    let max_of = |metric: &str| {
        (0..t.rows.len()).filter_map(|r| t.stat(r, metric)).map(|s| s.mean.abs() + s.ci).fold(0.0, f64::max)
    };
    let cat = l.scale == Scale::Category;
    // Series by colour, and by marker unless the markers tell percentiles apart.
    let series_legend = |marker: bool| -> Vec<LegendEntry> {
        if l.series.len() < 2 {
            return vec![]; // one series needs no key
        }
        l.series
            .iter()
            .enumerate()
            .map(|(s, name)| {
                let color = SERIES_COLORS[s % SERIES_COLORS.len()];
                let sample = if !marker && cat {
                    LegendSample::Box(color)
                } else {
                    let marker = marker.then_some(MARKERS[s % MARKERS.len()]);
                    LegendSample::Line { color, dashed: false, marker, draw_line: !cat }
                };
                LegendEntry { sample, text: name.clone() }
            })
            .collect()
    };
    let lines_of = |metric: &str, div: f64, dashed: bool, marker: Option<Marker>| -> Vec<Line> {
        (0..l.series.len())
            .map(|s| {
                let mut points: Vec<(usize, f64, f64)> = (0..t.rows.len())
                    .filter(|&r| l.place[r].0 == s)
                    .filter_map(|r| t.stat(r, metric).map(|st| (l.place[r].1, st.mean / div, st.ci / div)))
                    .collect();
                points.sort_by_key(|p| p.0);
                Line {
                    series: s,
                    color: SERIES_COLORS[s % SERIES_COLORS.len()],
                    dashed,
                    marker: marker.unwrap_or(MARKERS[s % MARKERS.len()]),
                    points,
                }
            })
            .collect()
    };

    if t.has("throughput_tps") {
        let (div, unit) =
            scale_unit(max_of("throughput_tps"), &[(1e6, 1e6, "M txn/s"), (1e3, 1e3, "k txn/s"), (0.0, 1.0, "txn/s")]);
        out.push((
            "throughput",
            Figure::Lines(LineFig {
                title: format!("Throughput {vs}"),
                y_desc: format!("throughput ({unit})"),
                lines: lines_of("throughput_tps", div, false, None),
                legend: series_legend(true),
            }),
        ));
    }

    if t.has("p50_us") || t.has("p99_us") {
        let max = max_of("p50_us").max(max_of("p99_us"));
        let (div, unit) = scale_unit(max, LATENCY_UNITS);
        let mut lines = Vec::new();
        let mut legend = series_legend(false);
        if !legend.is_empty() {
            legend.push(LegendEntry { sample: LegendSample::Space, text: String::new() });
        }
        for (metric, name, dashed, marker) in
            [("p50_us", "p50", false, Marker::Circle), ("p99_us", "p99", true, Marker::Triangle)]
        {
            if t.has(metric) {
                lines.extend(lines_of(metric, div, dashed, Some(marker)));
                let style = if cat {
                    name.to_string()
                } else if dashed {
                    format!("{name} (dashed)")
                } else {
                    format!("{name} (solid)")
                };
                legend.push(LegendEntry {
                    sample: LegendSample::Line { color: BLACK, dashed, marker: Some(marker), draw_line: !cat },
                    text: style,
                });
            }
        }
        let which = match (t.has("p50_us"), t.has("p99_us")) {
            (true, true) => "p50 and p99",
            (true, false) => "p50",
            _ => "p99",
        };
        out.push((
            "latency",
            Figure::Lines(LineFig {
                title: format!("Latency {which} {vs}"),
                y_desc: format!("latency ({unit})"),
                lines,
                legend,
            }),
        ));
    }

    if t.has("abort_rate") {
        // abort_rate is a fraction of attempts; a column already in percent has values above 1.
        let div = if max_of("abort_rate") > 1.0 { 1.0 } else { 0.01 };
        out.push((
            "abort",
            Figure::Lines(LineFig {
                title: format!("Abort rate {vs}"),
                y_desc: "abort rate (%)".to_string(),
                lines: lines_of("abort_rate", div, false, None),
                legend: series_legend(true),
            }),
        ));
    }

    // Stages that ever took time; an all-zero stage would only clutter the legend.
    let stages: Vec<&String> = t.stages.iter().filter(|s| max_of(&format!("stage_{s}_us")) > 0.0).collect();
    if !stages.is_empty() {
        // Stage time per committed transaction (every execution, aborted attempts included) when
        // the CSV has it: these add up to a transaction's time in stages, comparable with its
        // mean latency (drawn as a marker). Older CSVs have only per-execution means, which do
        // not add up to anything (a stage run by few transactions counts in full).
        let per_txn = stages.iter().any(|s| t.has(&format!("per_txn_{s}_us")));
        let col = |s: &str| if per_txn { format!("per_txn_{s}_us") } else { format!("stage_{s}_us") };
        let mean = |r: usize, s: &str| t.stat(r, &col(s)).map_or(0.0, |st| st.mean.max(0.0));
        let latency = |r: usize| if per_txn { t.stat(r, "mean_us").map(|s| s.mean) } else { None };
        let max_total = (0..t.rows.len())
            .map(|r| stages.iter().map(|s| mean(r, s)).sum::<f64>().max(latency(r).unwrap_or(0.0)))
            .fold(0.0, f64::max);
        let (div, unit) = scale_unit(max_total, LATENCY_UNITS);
        let rows: Vec<usize> =
            (0..t.rows.len()).filter(|&r| stages.iter().any(|s| t.stat(r, &col(s)).is_some())).collect();
        let bars = rows.iter().map(|&r| (r, stages.iter().map(|s| mean(r, s) / div).collect())).collect();
        let (title, y_desc) = if per_txn {
            (
                format!("Stage time per committed transaction {vs}"),
                format!("time in stages per committed transaction ({unit})"),
            )
        } else {
            (format!("Per-stage latency breakdown {vs}"), format!("mean time per stage execution ({unit})"))
        };
        out.push((
            "stages",
            Figure::Stacked(StackFig {
                title,
                y_desc,
                stages: stages
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (s.to_string(), STAGE_COLORS[i % STAGE_COLORS.len()]))
                    .collect(),
                bars,
                latency: rows.iter().map(|&r| latency(r).map(|v| v / div)).collect(),
            }),
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Drawing, generic over the SVG and bitmap backends.

/// A linear f64 axis with ticks exactly at the given points. Plotters' `WithKeyPoints` does
/// this too, but over `RangedCoordf64` it has no label formatter, so the mesh cannot draw it.
struct XCoord {
    lo: f64,
    hi: f64,
    keys: Vec<f64>,
}

impl Ranged for XCoord {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (f * (limit.1 - limit.0) as f64).round() as i32
    }
    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            vec![]
        } else {
            self.keys.clone()
        }
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

type Area<DB> = DrawingArea<DB, Shift>;

/// The chart's area, the legend's (none without entries), and the legend title's lines.
struct LegendSplit<DB: DrawingBackend> {
    chart: Area<DB>,
    legend: Option<Area<DB>>,
    title: Vec<String>,
}

type DResult<T> = Result<T, String>;

fn de<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing failed: {e:?}")
}

/// Plotters' SVG backend writes `font-size` as the text size over 1.24.
const SIZE_TO_EM: f64 = 1.24;

/// The height of a line of text whose em is `px` (DejaVu Sans' ascent to descent is 1.16 em).
fn line_px(px: f64) -> i32 {
    (px * 1.2).ceil() as i32
}

/// Text whose em is `px` pixels.
fn font(px: f64) -> TextStyle<'static> {
    TextStyle::from((FONT, px * SIZE_TO_EM).into_font()).color(&BLACK)
}

/// Tick label for a y value: as many decimals as the tick step needs, no trailing zeros.
fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = if step > 0.0 { (-step.log10()).ceil().clamp(0.0, 6.0) as usize } else { 2 };
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if s == "-0" {
        "0".to_string()
    } else {
        s
    }
}

/// A bar total with two significant digits (more left of the point), short enough for a bar.
fn fmt_sig2(v: f64) -> String {
    let decimals = if v > 0.0 { (1.0 - v.log10().floor()).clamp(0.0, 3.0) as usize } else { 0 };
    format!("{v:.decimals$}")
}

/// Title and subtitle; returns the area left below them.
fn draw_title<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: &str,
) -> DResult<DrawingArea<DB, Shift>> {
    root.fill(&WHITE).map_err(de)?;
    let w = root.dim_in_pixel().0 as i32;
    let top = font(TITLE_PX).pos(Pos::new(HPos::Center, VPos::Top));
    root.draw_text(title, &top, (w / 2, 12)).map_err(de)?;
    let mut h = 12 + line_px(TITLE_PX) + 4;
    if !subtitle.is_empty() {
        let sub = font(SUBTITLE_PX).color(&SUBTITLE_COLOR).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw_text(subtitle, &sub, (w / 2, h)).map_err(de)?;
        h += line_px(SUBTITLE_PX) + 6;
    }
    Ok(root.split_vertically(h).1)
}

/// Splits off the legend column on the right, sized to its widest entry; returns the chart
/// area, the legend area and the legend title's lines (split at ", " when wider than the
/// entries, so a long list of axis names does not widen the legend).
fn split_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    entries: &[LegendEntry],
) -> DResult<LegendSplit<DB>> {
    let style = font(LEGEND_PX);
    let width = |t: &str| area.estimate_text_size(t, &style).map(|s| s.0).map_err(de);
    let mut widest = 0;
    for e in entries {
        widest = widest.max(width(&e.text)? + SAMPLE_W + 8);
    }
    let mut lines = vec![];
    if !title.is_empty() {
        if width(title)? <= widest {
            lines.push(title.to_string());
        } else {
            let parts: Vec<&str> = title.split(", ").collect();
            for (i, part) in parts.iter().enumerate() {
                let line = if i + 1 < parts.len() { format!("{part},") } else { part.to_string() };
                widest = widest.max(width(&line)?);
                lines.push(line);
            }
        }
    }
    if entries.is_empty() {
        return Ok(LegendSplit { chart: area.clone(), legend: None, title: lines });
    }
    let w = (widest + 36).min(area.dim_in_pixel().0 * 2 / 5);
    let (left, right) = area.split_horizontally(area.dim_in_pixel().0 - w);
    Ok(LegendSplit { chart: left, legend: Some(right), title: lines })
}

const SAMPLE_W: u32 = 36;
const LEGEND_ROW: i32 = 22;

fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    marker: Marker,
    color: RGBColor,
) -> DResult<()> {
    let fill = color.filled();
    let r = 5;
    match marker {
        Marker::Circle => area.draw(&Circle::new(at, r, fill)),
        Marker::Square => area.draw(&Rectangle::new([(at.0 - 4, at.1 - 4), (at.0 + 4, at.1 + 4)], fill)),
        Marker::Triangle => {
            area.draw(&Polygon::new(vec![(at.0, at.1 - 6), (at.0 + 6, at.1 + 4), (at.0 - 6, at.1 + 4)], fill))
        }
        Marker::Diamond => {
            area.draw(&Polygon::new(vec![(at.0, at.1 - 6), (at.0 + 6, at.1), (at.0, at.1 + 6), (at.0 - 6, at.1)], fill))
        }
        Marker::Cross => area.draw(&Cross::new(at, 5, color.stroke_width(2))),
    }
    .map_err(de)
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    top: i32,
    title: &[String],
    entries: &[LegendEntry],
) -> DResult<()> {
    let (w, h) = area.dim_in_pixel();
    let max_rows = ((h as i32 - top - 40) / LEGEND_ROW - title.len() as i32).max(2) as usize;
    let shown = if entries.len() > max_rows { max_rows - 1 } else { entries.len() };
    let rows = shown + usize::from(shown < entries.len()) + title.len();
    let box_h = rows as i32 * LEGEND_ROW + 12;
    area.draw(&Rectangle::new([(4, top), (w as i32 - 10, top + box_h)], GRID_BOLD.stroke_width(1))).map_err(de)?;
    let text = font(LEGEND_PX).pos(Pos::new(HPos::Left, VPos::Center));
    let mut y = top + 6 + LEGEND_ROW / 2;
    for line in title {
        area.draw_text(line, &text.color(&SUBTITLE_COLOR), (12, y)).map_err(de)?;
        y += LEGEND_ROW;
    }
    for e in &entries[..shown] {
        let (x0, x1) = (12, 12 + SAMPLE_W as i32);
        match &e.sample {
            LegendSample::Line { color, dashed, marker, draw_line } => {
                if *draw_line {
                    let style = color.stroke_width(2);
                    if *dashed {
                        area.draw(&PathElement::new(vec![(x0, y), (x0 + 10, y)], style)).map_err(de)?;
                        area.draw(&PathElement::new(vec![(x1 - 10, y), (x1, y)], style)).map_err(de)?;
                    } else {
                        area.draw(&PathElement::new(vec![(x0, y), (x1, y)], style)).map_err(de)?;
                    }
                }
                if let Some(m) = marker {
                    draw_marker(area, ((x0 + x1) / 2, y), *m, *color)?;
                }
            }
            LegendSample::Box(color) => {
                area.draw(&Rectangle::new([(x0 + 6, y - 7), (x1 - 6, y + 7)], color.filled())).map_err(de)?;
            }
            LegendSample::Space => {}
        }
        area.draw_text(&e.text, &text, (x1 + 8, y)).map_err(de)?;
        y += LEGEND_ROW;
    }
    if shown < entries.len() {
        let more = format!("… {} more", entries.len() - shown);
        area.draw_text(&more, &text.color(&SUBTITLE_COLOR), (12, y)).map_err(de)?;
    }
    Ok(())
}

/// Indices of the x labels to show: greedily skips labels that would overlap the last one shown.
fn thin_labels<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    positions: &[f64],
    labels: &[String],
    range: (f64, f64),
    plot_w: f64,
) -> DResult<Vec<usize>> {
    let style = font(TICK_PX);
    let mut keep: Vec<usize> = Vec::new();
    let mut last: Option<(f64, f64)> = None; // (pixel centre, half width)
    for (i, (p, label)) in positions.iter().zip(labels).enumerate() {
        let half = area.estimate_text_size(label, &style).map_err(de)?.0 as f64 / 2.0;
        let px = (p - range.0) / (range.1 - range.0) * plot_w;
        if let Some((lp, lh)) = last {
            if px - half < lp + lh + 12.0 {
                continue;
            }
        }
        keep.push(i);
        last = Some((px, half));
    }
    Ok(keep)
}

fn y_max(values: impl Iterator<Item = f64>) -> f64 {
    let m = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
    if m > 0.0 {
        m * 1.08
    } else {
        1.0
    }
}

const Y_AREA: u32 = 80;
const CHART_MARGIN: u32 = 12;

fn render<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, l: &Layout, fig: &Figure) -> DResult<()> {
    match fig {
        Figure::Lines(f) => render_lines(root, l, f),
        Figure::Stacked(f) => render_stacked(root, l, f),
    }
}

fn render_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, l: &Layout, f: &LineFig) -> DResult<()> {
    let body = draw_title(root, &f.title, &l.subtitle(true))?;
    let LegendSplit { chart: chart_area, legend: legend_area, title: legend_title } =
        split_legend(&body, &l.series_title, &f.legend)?;

    let (x0, x1) = l.x_range();
    let y1 = y_max(f.lines.iter().flat_map(|ln| ln.points.iter().map(|p| p.1 + p.2)));
    let plot_w = chart_area.dim_in_pixel().0 as f64 - (Y_AREA + 2 * CHART_MARGIN) as f64;
    let keep = thin_labels(&chart_area, &l.x_pos, &l.x_labels, (x0, x1), plot_w)?;
    let key_points: Vec<f64> = keep.iter().map(|&i| l.x_pos[i]).collect();
    let x_coord = XCoord { lo: x0, hi: x1, keys: key_points };

    let mut chart = ChartBuilder::on(&chart_area)
        .margin(CHART_MARGIN)
        .x_label_area_size(56)
        .y_label_area_size(Y_AREA)
        .build_cartesian_2d(x_coord, 0.0..y1)
        .map_err(de)?;
    let label_of = |p: &f64| -> String {
        l.x_pos.iter().position(|q| (q - p).abs() < 1e-9).map(|i| l.x_labels[i].clone()).unwrap_or_default()
    };
    let y_step = y1 / 8.0;
    let y_fmt = |v: &f64| fmt_tick(*v, y_step);
    let mut mesh = chart.configure_mesh();
    let x_desc = l.x_desc();
    mesh.x_desc(x_desc.as_str())
        .y_desc(f.y_desc.as_str())
        .axis_desc_style(font(DESC_PX))
        .label_style(font(TICK_PX))
        .x_label_formatter(&label_of)
        .y_label_formatter(&y_fmt)
        .y_labels(8)
        .bold_line_style(GRID_BOLD)
        .light_line_style(TRANSPARENT);
    if l.scale == Scale::Category {
        mesh.disable_x_mesh();
    }
    mesh.draw().map_err(de)?;

    let pos = |ln: &Line, xi: usize| l.x_pos[xi] + l.dodge(ln.series);
    for ln in &f.lines {
        let style = ln.color.stroke_width(2);
        let pts: Vec<(f64, f64)> = ln.points.iter().map(|p| (pos(ln, p.0), p.1)).collect();
        if l.scale != Scale::Category && pts.len() > 1 {
            if ln.dashed {
                chart.draw_series(DashedLineSeries::new(pts.clone(), 10, 6, style)).map_err(de)?;
            } else {
                chart.draw_series(LineSeries::new(pts.clone(), style)).map_err(de)?;
            }
        }
        let bars = ln
            .points
            .iter()
            .filter(|p| p.2 > 0.0)
            .map(|p| ErrorBar::new_vertical(pos(ln, p.0), p.1 - p.2, p.1, p.1 + p.2, ln.color.stroke_width(1), 8));
        chart.draw_series(bars).map_err(de)?;
        let area = chart.plotting_area();
        for &(x, y) in &pts {
            let at = area.map_coordinate(&(x, y));
            // Markers are drawn in pixels on the root so their shapes stay exact.
            draw_marker(root, at, ln.marker, ln.color)?;
        }
    }
    if let Some(legend_area) = legend_area {
        let top = chart.plotting_area().get_base_pixel().1 - legend_area.get_base_pixel().1;
        draw_legend(&legend_area, top, &legend_title, &f.legend)?;
    }
    Ok(())
}

/// Stacked bars: one group per series, one bar per x value within it (like RCC's Fig. 4: a
/// group per protocol, a bar per mode), a colour per stage.
fn render_stacked<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, l: &Layout, f: &StackFig) -> DResult<()> {
    let body = draw_title(root, &f.title, &l.subtitle(false))?;
    let mut legend: Vec<LegendEntry> = f
        .stages
        .iter()
        .rev() // top of the stack first, as it is drawn
        .map(|(name, color)| LegendEntry { sample: LegendSample::Box(*color), text: name.clone() })
        .collect();
    if f.latency.iter().any(Option::is_some) {
        legend.push(LegendEntry { sample: LegendSample::Space, text: String::new() });
        legend.push(LegendEntry {
            sample: LegendSample::Line { color: BLACK, dashed: false, marker: Some(Marker::Diamond), draw_line: false },
            text: "mean latency".into(),
        });
        legend.push(LegendEntry { sample: LegendSample::Space, text: "stages: every execution,".into() });
        legend.push(LegendEntry { sample: LegendSample::Space, text: "aborted attempts included,".into() });
        legend.push(LegendEntry { sample: LegendSample::Space, text: "/ committed transactions".into() });
    }
    let LegendSplit { chart: chart_area, legend: legend_area, title: legend_title } =
        split_legend(&body, "stage", &legend)?;

    // Bar slots: groups in series order, bars in x order, a gap between groups.
    const GAP: f64 = 0.7;
    let mut slots: Vec<(f64, usize)> = Vec::new(); // (centre, index into f.bars)
    let mut groups: Vec<(f64, f64, usize)> = Vec::new(); // (first centre, last centre, series)
    let mut cursor = 0.0;
    for s in 0..l.series.len() {
        let mut members: Vec<usize> = (0..f.bars.len()).filter(|&b| l.place[f.bars[b].0].0 == s).collect();
        if members.is_empty() {
            continue;
        }
        members.sort_by_key(|&b| l.place[f.bars[b].0].1);
        let first = cursor + 0.5;
        for b in members {
            slots.push((cursor + 0.5, b));
            cursor += 1.0;
        }
        groups.push((first, cursor - 0.5, s));
        cursor += GAP;
    }
    // Room for at least five bars, so that one or two bars are not as wide as the plot.
    let x_end = cursor - GAP;
    let pad = 0.2 + (5.0 - x_end).max(0.0) / 2.0;
    let (x0, x1) = (-pad, x_end + pad);
    let y1 = y_max(f.bars.iter().map(|(_, v)| v.iter().sum::<f64>()).chain(f.latency.iter().flatten().copied()));

    // Bar labels go under each bar, turned upright when they do not fit its width.
    let tick = font(TICK_PX);
    let plot_w = chart_area.dim_in_pixel().0 as f64 - (Y_AREA + 2 * CHART_MARGIN) as f64;
    let slot_px = plot_w / (x1 - x0);
    let bar_label = |b: usize| l.x_labels[l.place[f.bars[b].0].1].clone();
    let mut widest = 0u32;
    for &(_, b) in &slots {
        widest = widest.max(chart_area.estimate_text_size(&bar_label(b), &tick).map_err(de)?.0);
    }
    let upright = widest as f64 > slot_px * 0.95;
    let bar_label_h = if upright { widest as i32 + 8 } else { line_px(TICK_PX) + 6 };
    // Group labels, in the first form that fits under every group: the legend's label on
    // one line, then a line per axis, then the same without "name=" (the axis description
    // below names the axes).
    let forms: [&dyn Fn(usize) -> Vec<String>; 4] = [
        &|s| vec![l.series[s].clone()],
        &|s| l.series[s].split(", ").map(str::to_string).collect(),
        &|s| vec![l.series_values[s].join(", ")],
        &|s| l.series_values[s].clone(),
    ];
    let mut group_labels: Vec<Vec<String>> = vec![vec![]; groups.len()];
    if l.series.len() > 1 {
        'forms: for (k, form) in forms.iter().enumerate() {
            let mut labels = Vec::new();
            for g in &groups {
                let lines = form(g.2);
                let room = (g.1 - g.0 + 1.0 + GAP * 0.8) * slot_px;
                for line in &lines {
                    let w = chart_area.estimate_text_size(line, &tick).map_err(de)?.0 as f64;
                    if w > room && k + 1 < forms.len() {
                        continue 'forms;
                    }
                }
                labels.push(lines);
            }
            group_labels = labels;
            break;
        }
    }
    let group_rows = group_labels.iter().map(Vec::len).max().unwrap_or(0);
    let line_h = line_px(TICK_PX);
    let x_area = bar_label_h + group_rows as i32 * line_h + 8 + line_px(DESC_PX) + 8;

    let x_coord = XCoord { lo: x0, hi: x1, keys: vec![] };
    let mut chart = ChartBuilder::on(&chart_area)
        .margin(CHART_MARGIN)
        .x_label_area_size(x_area as u32)
        .y_label_area_size(Y_AREA)
        .build_cartesian_2d(x_coord, 0.0..y1)
        .map_err(de)?;
    let y_step = y1 / 8.0;
    let y_fmt = |v: &f64| fmt_tick(*v, y_step);
    chart
        .configure_mesh()
        .y_desc(f.y_desc.as_str())
        .axis_desc_style(font(DESC_PX))
        .label_style(font(TICK_PX))
        .y_label_formatter(&y_fmt)
        .y_labels(8)
        .disable_x_mesh()
        .bold_line_style(GRID_BOLD)
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(de)?;

    const BAR_W: f64 = 0.78;
    for &(c, b) in &slots {
        let mut base = 0.0;
        for (k, v) in f.bars[b].1.iter().enumerate() {
            if *v <= 0.0 {
                continue;
            }
            let rect = [(c - BAR_W / 2.0, base), (c + BAR_W / 2.0, base + v)];
            chart.draw_series([Rectangle::new(rect, f.stages[k].1.filled())]).map_err(de)?;
            chart.draw_series([Rectangle::new(rect, WHITE.stroke_width(1))]).map_err(de)?;
            base += v;
        }
        if let Some(Some(m)) = f.latency.get(b) {
            let at = chart.plotting_area().map_coordinate(&(c + BAR_W / 2.0, *m));
            draw_marker(root, at, Marker::Diamond, BLACK)?;
        }
    }

    // Labels under the plot, in root pixels.
    let area = chart.plotting_area();
    let bottom = area.get_base_pixel().1 + area.dim_in_pixel().1 as i32;
    let total_style = font(12.0).pos(Pos::new(HPos::Center, VPos::Bottom));
    for &(c, b) in &slots {
        let total: f64 = f.bars[b].1.iter().sum();
        let (px, py) = area.map_coordinate(&(c, total));
        let text = fmt_sig2(total);
        if (root.estimate_text_size(&text, &total_style).map_err(de)?.0 as f64) < slot_px {
            root.draw_text(&text, &total_style, (px, py - 3)).map_err(de)?;
        }
        let label = bar_label(b);
        if upright {
            let style = tick.transform(FontTransform::Rotate270).pos(Pos::new(HPos::Right, VPos::Center));
            root.draw_text(&label, &style, (px, bottom + 6)).map_err(de)?;
        } else {
            let style = tick.pos(Pos::new(HPos::Center, VPos::Top));
            root.draw_text(&label, &style, (px, bottom + 6)).map_err(de)?;
        }
    }
    let group_style = tick.pos(Pos::new(HPos::Center, VPos::Top));
    for (g, lines) in groups.iter().zip(&group_labels) {
        let (a, _) = area.map_coordinate(&(g.0 - BAR_W / 2.0, 0.0));
        let (b, _) = area.map_coordinate(&(g.1 + BAR_W / 2.0, 0.0));
        let y = bottom + bar_label_h;
        if !lines.is_empty() {
            // A bracket shows which bars the group label covers.
            root.draw(&PathElement::new(vec![(a, y), (b, y)], BLACK.stroke_width(1))).map_err(de)?;
        }
        for (i, line) in lines.iter().enumerate() {
            root.draw_text(line, &group_style, ((a + b) / 2, y + 4 + i as i32 * line_h)).map_err(de)?;
        }
    }
    let desc = if l.series.len() > 1 {
        format!("{} (bars) per {} (groups)", l.x_name, l.series_title)
    } else {
        l.x_name.clone()
    };
    let (left, _) = area.map_coordinate(&(x0, 0.0));
    let (right, _) = area.map_coordinate(&(x1, 0.0));
    let y = bottom + bar_label_h + group_rows as i32 * line_h + 10;
    root.draw_text(&desc, &font(DESC_PX).pos(Pos::new(HPos::Center, VPos::Top)), ((left + right) / 2, y))
        .map_err(de)?;

    if let Some(legend_area) = legend_area {
        let top = area.get_base_pixel().1 - legend_area.get_base_pixel().1;
        draw_legend(&legend_area, top, &legend_title, &legend)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci95_uses_students_t() {
        // t_{0.975,2} = 4.302653; s = 1 for [1, 2, 3].
        let s = mean_ci95(&[1.0, 2.0, 3.0]);
        assert!((s.mean - 2.0).abs() < 1e-12);
        assert!((s.ci - 4.302653 / 3f64.sqrt()).abs() < 1e-5, "{}", s.ci);
        assert_eq!(mean_ci95(&[7.0]).ci, 0.0);
        assert!(mean_ci95(&[]).mean.is_nan());
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(fmt_tick(0.30000000000000004, 0.1), "0.3");
        assert_eq!(fmt_tick(2.0, 0.5), "2");
        assert_eq!(fmt_tick(1500.0, 250.0), "1500");
        assert_eq!(fmt_tick(-0.0, 0.1), "0");
        assert_eq!(fmt_sig2(5.5), "5.5");
        assert_eq!(fmt_sig2(42.6), "43");
        assert_eq!(fmt_sig2(0.123), "0.12");
    }
}
