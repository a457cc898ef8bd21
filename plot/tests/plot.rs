//! `txbed_plot::plot_csv` on small summary.csv and results.csv files.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use txbed_plot::plot_csv;

/// A fresh directory under the system temp dir, unique per test and process.
/// Kept when TXBED_KEEP_PLOTS is set, to look at the pictures.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-plot-{name}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

const STAGES: [&str; 5] = ["lock", "read", "log", "release", "commit"];
const COROUTINES: [u32; 3] = [1, 8, 16];

/// Made-up but plausible numbers for (protocol, mode, coroutines): per-stage latency in µs.
fn point(proto: &str, mode: &str, coros: u32) -> (f64, f64, [f64; 5]) {
    let one_sided = mode == "Onesided";
    let base = if proto == "occ" { 1.2 } else { 1.0 } * if one_sided { 1.35 } else { 1.0 };
    let tput = base * 0.55e6 * (coros as f64).powf(0.7);
    let abort = if proto == "occ" { 0.02 } else { 0.05 } * (1.0 + coros as f64 / 8.0);
    let scale = (1.0 + coros as f64 / 10.0) * if proto == "occ" { 1.12 } else { 1.0 };
    let s = if one_sided { [2.1, 3.4, 4.0, 1.2, 1.8] } else { [3.0, 4.2, 4.8, 1.9, 2.5] };
    (tput, abort, s.map(|v| v * scale))
}

fn summary_csv() -> String {
    let mut out = String::from("protocol.name,protocol.mode,cluster.coroutines,runs");
    for m in ["throughput_tps", "abort_rate", "p50_us", "p90_us", "p99_us", "mean_us"] {
        out += &format!(",{m}_mean,{m}_ci95");
    }
    for s in STAGES {
        out += &format!(",stage_{s}_us_mean,stage_{s}_us_ci95");
    }
    out.push('\n');
    for proto in ["nowait", "occ"] {
        for mode in ["Rpc", "Onesided"] {
            for c in COROUTINES {
                let (tput, abort, stages) = point(proto, mode, c);
                let total: f64 = stages.iter().sum();
                out += &format!("{proto},{mode},{c},3,{tput:.1},{:.1},{abort:.4},0.004", tput * 0.03);
                for (lat, ci) in [(total * 0.8, 0.3), (total * 1.4, 0.5), (total * 2.5, 1.5), (total, 0.2)] {
                    out += &format!(",{lat:.3},{ci}");
                }
                for v in stages {
                    out += &format!(",{v:.3},0.1");
                }
                out.push('\n');
            }
        }
    }
    out
}

fn results_csv() -> String {
    let mut out = String::from("protocol.name,protocol.mode,workload.hot_probability,seed,throughput_tps,abort_rate,p50_us,p90_us,p99_us,mean_us");
    for s in STAGES {
        out += &format!(",stage_{s}_us");
    }
    out += ",digest\n";
    for proto in ["nowait", "occ"] {
        for mode in ["Rpc", "Code(38)"] {
            for hot in ["0", "0.5", "0.9"] {
                for seed in 1..=3u32 {
                    let jitter = 1.0 + (seed as f64 - 2.0) * 0.02;
                    let (tput, abort, stages) = point(proto, if mode == "Rpc" { "Rpc" } else { "Onesided" }, 8);
                    let h: f64 = hot.parse().unwrap();
                    let total: f64 = stages.iter().sum();
                    out += &format!(
                        "{proto},{mode},{hot},{seed},{:.1},{:.4},{:.2},{:.2},{:.2},{:.2}",
                        tput * (1.0 - 0.6 * h) * jitter,
                        abort * (1.0 + 4.0 * h),
                        total * 0.8 * jitter,
                        total * 1.4,
                        total * (2.5 + 3.0 * h),
                        total
                    );
                    for (k, v) in stages.iter().enumerate() {
                        // Contention makes lock waits longer.
                        let hot_factor = if k == 0 { 1.0 + 3.0 * h } else { 1.0 + 0.3 * h };
                        out += &format!(",{:.3}", v * jitter * hot_factor);
                    }
                    out += &format!(",{:016x}\n", 0x1234_5678u64 * seed as u64);
                }
            }
        }
    }
    out
}

fn clean_up(dir: &Path) {
    if std::env::var_os("TXBED_KEEP_PLOTS").is_none() {
        let _ = fs::remove_dir_all(dir);
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, text).unwrap();
    p
}

fn names(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
}

/// The PNG decodes at the expected size and has many colours: text and lines rendered.
fn check_png(path: &Path) {
    let bytes = fs::read(path).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is not a PNG", path.display());
    let img = image::load_from_memory(&bytes).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (1000, 650), "{}", path.display());
    let colours: HashSet<[u8; 3]> = img.pixels().map(|p| p.0).collect();
    assert!(colours.len() > 20, "{}: only {} colours", path.display(), colours.len());
    // Anti-aliased text leaves grey pixels: the embedded font rendered.
    let greys = img.pixels().filter(|p| p.0[0] == p.0[1] && p.0[1] == p.0[2] && p.0[0] > 40 && p.0[0] < 200).count();
    assert!(greys > 500, "{}: only {greys} grey pixels, text probably missing", path.display());
}

fn check_svg(path: &Path, expect: &[&str]) {
    let svg = fs::read_to_string(path).unwrap();
    assert!(svg.starts_with("<svg"), "{} is not an SVG", path.display());
    for e in expect {
        assert!(svg.contains(e), "{} lacks {e:?}", path.display());
    }
}

#[test]
fn summary_csv_plots_all_four_figures() {
    let dir = temp_dir("summary");
    let csv = write(&dir, "summary.csv", &summary_csv());
    let out = dir.join("plots");
    let paths = plot_csv(&csv, &out, None).unwrap();
    let mut got = names(&paths);
    got.sort();
    let mut want: Vec<String> = ["throughput", "latency", "abort", "stages"]
        .iter()
        .flat_map(|k| [format!("summary-{k}.png"), format!("summary-{k}.svg")])
        .collect();
    want.sort();
    assert_eq!(got, want);
    for p in &paths {
        assert!(p.starts_with(&out) && p.exists(), "{}", p.display());
        if p.extension().unwrap() == "png" {
            check_png(p);
        }
    }
    // The x axis defaults to the first numeric axis; the other two make the series.
    let series = ["nowait, Rpc", "nowait, Onesided", "occ, Rpc", "occ, Onesided"];
    let svg = |k: &str| out.join(format!("summary-{k}.svg"));
    check_svg(
        &svg("throughput"),
        &[&["Throughput vs cluster.coroutines", "M txn/s", "protocol.name", "protocol.mode"][..], &series].concat(),
    );
    check_svg(
        &svg("latency"),
        &[&["Latency p50 and p99 vs cluster.coroutines", "latency (µs)", "p99 (dashed)"][..], &series].concat(),
    );
    check_svg(&svg("abort"), &[&["Abort rate vs cluster.coroutines", "abort rate (%)"][..], &series].concat());
    check_svg(
        &svg("stages"),
        &[&["Per-stage latency breakdown", "mean time per stage execution (µs)", "nowait"][..], &STAGES].concat(),
    );
    clean_up(&dir);
}

#[test]
fn results_csv_is_aggregated_and_categorical_x_works() {
    let dir = temp_dir("results");
    let csv = write(&dir, "results.csv", &results_csv());
    // Default x: workload.hot_probability, the only numeric axis.
    let paths = plot_csv(&csv, &dir, None).unwrap();
    assert_eq!(paths.len(), 8);
    for p in paths.iter().filter(|p| p.extension().unwrap() == "png") {
        check_png(p);
    }
    check_svg(
        &dir.join("results-throughput.svg"),
        &["vs workload.hot_probability", "nowait, Code(38)", "mean of 3 runs"],
    );

    // A categorical x axis, named by its last component.
    let out = dir.join("by-mode");
    let paths = plot_csv(&csv, &out, Some("mode")).unwrap();
    assert_eq!(paths.len(), 8);
    for p in paths.iter().filter(|p| p.extension().unwrap() == "png") {
        check_png(p);
    }
    check_svg(&out.join("results-throughput.svg"), &["vs protocol.mode", "Rpc", "Code(38)", "hot_probability=0.5"]);
    clean_up(&dir);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let dir = temp_dir("errors");
    let csv = write(&dir, "summary.csv", &summary_csv());
    let e = plot_csv(&csv, &dir, Some("cluster.nodes")).unwrap_err();
    assert!(e.contains("unknown x axis") && e.contains("cluster.coroutines"), "{e}");

    let empty = write(&dir, "empty.csv", "");
    let e = plot_csv(&empty, &dir, None).unwrap_err();
    assert!(e.contains("empty"), "{e}");

    let header_only = write(&dir, "header.csv", "protocol.name,runs,throughput_tps_mean,throughput_tps_ci95\n");
    let e = plot_csv(&header_only, &dir, None).unwrap_err();
    assert!(e.contains("no data rows"), "{e}");

    let e = plot_csv(&dir.join("missing.csv"), &dir, None).unwrap_err();
    assert!(e.contains("cannot read"), "{e}");

    let not_csv = dir.join("blob.csv");
    fs::write(&not_csv, [0xffu8, 0xfe, 0x00, 0x12]).unwrap();
    let e = plot_csv(&not_csv, &dir, None).unwrap_err();
    assert!(e.contains("not a CSV"), "{e}");

    let prose = write(&dir, "prose.csv", "hello world\nthis is text\n");
    let e = plot_csv(&prose, &dir, None).unwrap_err();
    assert!(e.contains("not a txbed sweep CSV"), "{e}");

    let ragged = write(&dir, "ragged.csv", "protocol.name,runs,throughput_tps_mean,throughput_tps_ci95\nocc,3,5\n");
    let e = plot_csv(&ragged, &dir, None).unwrap_err();
    assert!(e.contains(":2:") && e.contains("fields"), "{e}");

    let words = write(&dir, "words.csv", "protocol.name,runs,throughput_tps_mean,throughput_tps_ci95\nocc,3,fast,1\n");
    let e = plot_csv(&words, &dir, None).unwrap_err();
    assert!(e.contains("not a number"), "{e}");
    clean_up(&dir);
}

/// A tornado plot: a row per parameter, the low side's bar in blue, the high side's in orange,
/// each drawn towards the sign of its change.
#[test]
fn tornado_draws_each_side_towards_its_sign() {
    use txbed_plot::{tornado, Tornado, TornadoBar};
    let dir = temp_dir("tornado");
    let bars = [
        TornadoBar { label: "host.rpc_dispatch_ns".into(), low: 20.0, high: -25.0 },
        TornadoBar { label: "link.gbps".into(), low: 8.0, high: -6.0 },
        TornadoBar { label: "reliability.rc_retry_count".into(), low: 0.0, high: 0.0 },
    ];
    let t = Tornado {
        title: "Sensitivity of throughput",
        subtitle: "quickstart",
        x_desc: "throughput change vs base (%)",
        low_name: "-30%",
        high_name: "+30%",
        bars: &bars,
    };
    let written = tornado(&t, &dir, "tornado-throughput").unwrap();
    assert_eq!(names(&written), ["tornado-throughput.svg", "tornado-throughput.png"]);
    check_svg(&written[0], &["host.rpc_dispatch_ns", "reliability.rc_retry_count", "+20", "-25", "-30%"]);
    let img = image::open(&written[1]).unwrap().to_rgb8();
    assert_eq!(img.width(), 1000);
    // Mean x of each side's bar pixels (the legend, at the right edge, left out).
    let mean_x = |rgb: [u8; 3]| {
        let xs: Vec<u32> =
            img.enumerate_pixels().filter(|(x, _, p)| *x < 800 && p.0 == rgb).map(|(x, _, _)| x).collect();
        assert!(xs.len() > 500, "{rgb:?}: {} pixels", xs.len());
        xs.iter().sum::<u32>() as f64 / xs.len() as f64
    };
    let (low, high) = (mean_x([0x00, 0x72, 0xB2]), mean_x([0xD5, 0x5E, 0x00]));
    assert!(low > high + 50.0, "low side at x {low}, high side at x {high}");
    assert!(tornado(&Tornado { bars: &[], ..t }, &dir, "empty").is_err());
    clean_up(&dir);
}
