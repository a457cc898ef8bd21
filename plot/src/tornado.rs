//! Tornado plots: one row per parameter, a bar for the change a metric sees when the parameter
//! is lowered and one for when it is raised, the rows in the order given (largest effect first).

use std::fs;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{
    de, draw_legend, draw_title, fmt_tick, font, line_px, register_font, split_legend, DResult, LegendEntry,
    LegendSample, PngBackend, CHART_MARGIN, DESC_PX, SERIES_COLORS, TICK_PX, WIDTH,
};

/// One parameter's row: the metric's change (e.g. percent) at the low and the high value.
#[derive(Clone, Debug, PartialEq)]
pub struct TornadoBar {
    pub label: String,
    pub low: f64,
    pub high: f64,
}

/// A tornado figure: bars top to bottom in the order given.
pub struct Tornado<'a> {
    pub title: &'a str,
    pub subtitle: &'a str,
    /// What the x axis shows, e.g. "throughput change vs base (%)".
    pub x_desc: &'a str,
    /// Legend names of the two sides, e.g. "-30%" and "+30%".
    pub low_name: &'a str,
    pub high_name: &'a str,
    pub bars: &'a [TornadoBar],
}

const ROW_PX: u32 = 28;

/// Writes `<stem>.svg` and `<stem>.png` into `out_dir` (created if missing); returns the paths.
pub fn tornado(t: &Tornado, out_dir: &Path, stem: &str) -> Result<Vec<PathBuf>, String> {
    if t.bars.is_empty() {
        return Err("a tornado plot needs at least one bar".into());
    }
    register_font()?;
    fs::create_dir_all(out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let height = (170 + ROW_PX * t.bars.len() as u32).max(320);
    let svg = out_dir.join(format!("{stem}.svg"));
    {
        let root = SVGBackend::new(&svg, (WIDTH, height)).into_drawing_area();
        render(&root, t).map_err(|e| format!("{}: {e}", svg.display()))?;
        root.present().map_err(|e| format!("cannot write {}: {e:?}", svg.display()))?;
    }
    let png = out_dir.join(format!("{stem}.png"));
    {
        let root = PngBackend(BitMapBackend::new(&png, (WIDTH, height))).into_drawing_area();
        render(&root, t).map_err(|e| format!("{}: {e}", png.display()))?;
        root.present().map_err(|e| format!("cannot write {}: {e:?}", png.display()))?;
    }
    Ok(vec![svg, png])
}

/// A change with its sign: one decimal below 10, none above; exactly zero as "0".
fn fmt_change(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let decimals = if v.abs() >= 10.0 { 0 } else { 1 };
    format!("{v:+.decimals$}")
}

fn render<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, t: &Tornado) -> DResult<()> {
    let body = draw_title(root, t.title, t.subtitle)?;
    let (low_color, high_color) = (SERIES_COLORS[0], SERIES_COLORS[1]);
    let legend = vec![
        LegendEntry { sample: LegendSample::Box(low_color), text: t.low_name.to_string() },
        LegendEntry { sample: LegendSample::Box(high_color), text: t.high_name.to_string() },
    ];
    let split = split_legend(&body, "", &legend)?;
    let chart_area = split.chart;

    let tick = font(TICK_PX);
    let mut widest = 0;
    for b in t.bars {
        widest = widest.max(chart_area.estimate_text_size(&b.label, &tick).map_err(de)?.0);
    }
    let m = t.bars.iter().flat_map(|b| [b.low, b.high]).filter(|v| v.is_finite()).fold(0.0, |a: f64, v| a.max(v.abs()));
    // Room for the value labels beyond the longest bar.
    let m = if m > 0.0 { m * 1.25 } else { 1.0 };
    let n = t.bars.len() as f64;
    let mut chart = ChartBuilder::on(&chart_area)
        .margin(CHART_MARGIN)
        .x_label_area_size((line_px(TICK_PX) + line_px(DESC_PX) + 20) as u32)
        .y_label_area_size(widest + 14)
        .build_cartesian_2d(-m..m, 0.0..n)
        .map_err(de)?;
    let x_step = m / 5.0;
    let x_fmt = |v: &f64| fmt_tick(*v, x_step);
    chart
        .configure_mesh()
        .x_desc(t.x_desc)
        .axis_desc_style(font(DESC_PX))
        .label_style(font(TICK_PX))
        .x_label_formatter(&x_fmt)
        .x_labels(9)
        .y_labels(0)
        .disable_y_mesh()
        .bold_line_style(super::GRID_BOLD)
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(de)?;
    chart.draw_series([PathElement::new(vec![(0.0, 0.0), (0.0, n)], BLACK.stroke_width(1))]).map_err(de)?;

    let value_style = font(11.0);
    let area = chart.plotting_area().clone();
    for (i, b) in t.bars.iter().enumerate() {
        // Row i from the top; the low side in its upper half, the high side in its lower half.
        let y = n - 1.0 - i as f64;
        for (v, color, y0, y1) in [(b.low, low_color, y + 0.5, y + 0.9), (b.high, high_color, y + 0.1, y + 0.5)] {
            if !v.is_finite() {
                continue;
            }
            chart.draw_series([Rectangle::new([(0.0, y0), (v, y1)], color.filled())]).map_err(de)?;
            let (px, py) = area.map_coordinate(&(v, (y0 + y1) / 2.0));
            let (h, dx) = if v < 0.0 { (HPos::Right, -4) } else { (HPos::Left, 4) };
            let style = value_style.pos(Pos::new(h, VPos::Center));
            root.draw_text(&fmt_change(v), &style, (px + dx, py)).map_err(de)?;
        }
        let (left, py) = area.map_coordinate(&(-m, y + 0.5));
        let style = tick.pos(Pos::new(HPos::Right, VPos::Center));
        root.draw_text(&b.label, &style, (left - 8, py)).map_err(de)?;
    }
    if let Some(legend_area) = split.legend {
        let top = area.get_base_pixel().1 - legend_area.get_base_pixel().1;
        draw_legend(&legend_area, top, &split.title, &legend)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_carry_their_sign() {
        assert_eq!(fmt_change(5.04), "+5.0");
        assert_eq!(fmt_change(-12.6), "-13");
        assert_eq!(fmt_change(0.0), "0");
        assert_eq!(fmt_change(0.04), "+0.0");
    }
}
