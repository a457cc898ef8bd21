//! Results files through the `txbed` binary (issue 16): sweep names and axes, CSV quoting,
//! plot-ability checked up front, categorical plots, output directories and --force,
//! confidence intervals over too few seeds, provenance, and `txbed compare`.

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn txbed(args: &[&str]) -> Output {
    Command::cargo_bin("txbed").expect("binary built").current_dir(root()).args(args).output().unwrap()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-results-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A short sweep over quickstart.ron: `axes` and `extra` fields as RON.
fn sweep_file(dir: &Path, axes: &str, extra: &str) -> PathBuf {
    let f = dir.join("sweep.ron");
    std::fs::write(
        &f,
        format!(
            r#"Sweep(
    base: "{}",
    set: ["cluster.nics_per_node=1", "run.measure_us=100", "run.warmup_us=20"],
    axes: [{axes}],
    {extra}
)"#,
            s(&root().join("scenarios/quickstart.ron"))
        ),
    )
    .unwrap();
    f
}

/// Rows of a CSV as the csv crate reads them, header first.
fn read_csv(p: &Path) -> Vec<Vec<String>> {
    let mut r = csv::ReaderBuilder::new().has_headers(false).from_path(p).unwrap();
    r.records().map(|x| x.unwrap().iter().map(String::from).collect()).collect()
}

fn column(rows: &[Vec<String>], name: &str) -> Vec<String> {
    let i = rows[0].iter().position(|c| c == name).unwrap_or_else(|| panic!("no column {name}: {:?}", rows[0]));
    rows[1..].iter().map(|r| r[i].clone()).collect()
}

#[test]
fn sweep_names_are_plain_directory_names() {
    let d = scratch("name");
    for name in ["../../../x", "a/b", "..", "."] {
        let f = sweep_file(&d, r#"(path: "cluster.coroutines", values: [1])"#, &format!("name: {name:?},"));
        let o = txbed(&["sweep", s(&f)]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", err(&o));
        assert!(err(&o).contains("name:") && err(&o).contains("is not a plain name"), "{name}: {}", err(&o));
    }
}

#[test]
fn axis_values_with_commas_and_quotes_round_trip_through_the_csvs_and_plot() {
    let d = scratch("quote");
    // The first value is the RON string `"a,b \"q\""`: a comma and quotes.
    let f = sweep_file(&d, r#"(path: "name", values: ["\"a,b \\\"q\\\"\"", "plain"])"#, "seeds: [1, 2],");
    let o = txbed(&["sweep", s(&f), "--out", s(&d.join("o")), "-q"]);
    assert!(o.status.success(), "{}", err(&o));
    let want = ["\"a,b \\\"q\\\"\"", "plain"];
    let results = read_csv(&d.join("o/results.csv"));
    assert_eq!(results.len(), 5);
    assert_eq!(column(&results, "name"), [want[0], want[0], want[1], want[1]]);
    assert!(results.iter().all(|r| r.len() == results[0].len()));
    let summary = read_csv(&d.join("o/summary.csv"));
    assert_eq!(column(&summary, "name"), want);
    // Both CSVs plot; the quoted value is one category, named in the figure.
    for csv in ["results.csv", "summary.csv"] {
        let p = d.join(format!("p-{csv}"));
        let o = txbed(&["plot", s(&d.join("o").join(csv)), "--out", s(&p)]);
        assert!(o.status.success(), "{csv}: {}", err(&o));
        let stem = csv.trim_end_matches(".csv");
        let svg = std::fs::read_to_string(p.join(format!("{stem}-throughput.svg"))).unwrap();
        assert!(svg.contains("a,b"), "{csv}: the value's label is missing");
    }
}

#[test]
fn backend_cannot_be_swept_on_the_simulator() {
    let d = scratch("backend");
    let f = sweep_file(&d, r#"(path: "backend", values: ["sim", "sockets"])"#, "");
    let o = txbed(&["sweep", s(&f), "--out", s(&d.join("o"))]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("axes[0]: \"backend\" cannot be an axis"), "{}", err(&o));
    // Nor set for every point: the runs would be simulated all the same.
    let f = d.join("set.ron");
    std::fs::write(
        &f,
        format!(
            r#"Sweep(base: "{}", set: ["backend=sockets"], axes: [(path: "cluster.coroutines", values: [1])])"#,
            s(&root().join("scenarios/quickstart.ron"))
        ),
    )
    .unwrap();
    let o = txbed(&["sweep", s(&f), "--out", s(&d.join("o"))]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("backend: Sockets") && err(&o).contains("on the"), "{}", err(&o));
    assert!(!d.join("o/results.csv").exists());
}

/// This process's effective user id, from /proc (root ignores directory permissions).
fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

#[test]
fn an_unwritable_output_directory_fails_before_any_run() {
    use std::os::unix::fs::PermissionsExt;
    let d = scratch("readonly");
    let f = sweep_file(&d, r#"(path: "cluster.coroutines", values: [1, 2])"#, "seeds: [1, 2],");
    let ro = d.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let args = ["sweep", s(&f), "--out", s(&ro)];
    let o = match euid() {
        Some(0) => {
            // As root, permissions do not apply: run as nobody, if setpriv is there.
            let bin = assert_cmd::cargo::cargo_bin("txbed");
            match std::process::Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", s(&bin)])
                .args(args)
                .output()
            {
                Ok(o) if !err(&o).contains("setpriv:") => o,
                _ => {
                    eprintln!("skipped: running as root without a usable setpriv");
                    return;
                }
            }
        }
        _ => txbed(&args),
    };
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("the plots cannot be made") && err(&o).contains("cannot write into"), "{}", err(&o));
    // Refused before the banner that starts the runs.
    assert!(!err(&o).contains("runs on"), "{}", err(&o));
}

/// Series lines in a plot's SVG: polylines 2 px wide (axes, ticks and error bars are 1 px).
fn series_lines(svg: &str) -> usize {
    svg.split("<polyline").skip(1).filter(|p| p.split('>').next().unwrap().contains("stroke-width=\"2\"")).count()
}

#[test]
fn hybrid_codes_are_categories_drawn_without_lines() {
    let d = scratch("categories");
    let head = "protocol.mode,runs,throughput_tps_mean,throughput_tps_ci95\n";
    let cases = [
        ("codes.csv", "Code(1),3,100,5\nCode(5),3,300,5\nCode(9),3,200,5\n", false),
        // Older hybrid-search CSVs wrote bare codes: still a category.
        ("bare.csv", "1,3,100,5\n5,3,300,5\n9,3,200,5\n", false),
    ];
    for (name, rows, _) in cases {
        let csv = d.join(name);
        std::fs::write(&csv, format!("{head}{rows}")).unwrap();
        let o = txbed(&["plot", s(&csv), "--out", s(&d)]);
        assert!(o.status.success(), "{}", err(&o));
        let svg = std::fs::read_to_string(d.join(format!("{}-throughput.svg", name.trim_end_matches(".csv")))).unwrap();
        assert_eq!(series_lines(&svg), 0, "{name}: categories joined by a line");
    }
    let svg = std::fs::read_to_string(d.join("codes-throughput.svg")).unwrap();
    for code in ["Code(1)", "Code(5)", "Code(9)"] {
        assert!(svg.contains(code), "label {code} missing");
    }
    // A numeric axis is a line: the check above can fail.
    let csv = d.join("numeric.csv");
    std::fs::write(
        &csv,
        "cluster.coroutines,runs,throughput_tps_mean,throughput_tps_ci95\n1,3,100,5\n2,3,300,5\n4,3,200,5\n",
    )
    .unwrap();
    assert!(txbed(&["plot", s(&csv), "--out", s(&d)]).status.success());
    assert_eq!(series_lines(&std::fs::read_to_string(d.join("numeric-throughput.svg")).unwrap()), 1);
}

#[test]
fn hybrid_search_writes_codes_and_says_one_seed_has_no_interval() {
    let d = scratch("hybrid");
    let f = d.join("s.ron");
    std::fs::write(
        &f,
        r#"Scenario(
    cluster: (nodes: 2, workers: 1, coroutines: 2, nics_per_node: Some(1)),
    protocol: Some((name: Nowait, replication: 2)),
    workload: SmallBank((accounts_per_node: 1000)),
    run: (warmup_us: 10, measure_us: 50),
)"#,
    )
    .unwrap();
    let o = txbed(&["hybrid-search", s(&f), "--seeds", "1", "-q", "--out", s(&d.join("o"))]);
    assert!(o.status.success(), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("warning: one seed per code"), "{}", err(&o));
    assert!(out(&o).contains("+- n/a"), "{}", out(&o));
    let summary = read_csv(&d.join("o/summary.csv"));
    assert!(column(&summary, "protocol.mode").iter().all(|v| v.starts_with("Code(")), "{summary:?}");
    assert!(column(&summary, "throughput_tps_ci95").iter().all(String::is_empty));
    let svg = std::fs::read_to_string(d.join("o/summary-throughput.svg")).unwrap();
    assert!(series_lines(&svg) == 0 && svg.contains("Code("));
    let o = txbed(&["hybrid-search", s(&f), "--seeds", "1,1", "--out", s(&d.join("o2"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--seeds: seed 1 appears twice"), "{}", err(&o));
}

#[test]
fn out_into_a_non_empty_directory_needs_force() {
    let d = scratch("force");
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "scenarios/quickstart.ron", "-q", "--set", "run.measure_us=100", "--out", s(&d)];
        a.extend(extra);
        txbed(&a)
    };
    assert!(run(&[]).status.success());
    // An earlier run's file that this run does not write.
    std::fs::write(d.join("trace.json"), "{}").unwrap();
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("is not empty") && err(&o).contains("--force"), "{}", err(&o));
    let o = run(&["--force"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(!d.join("trace.json").exists(), "the earlier run's trace is left beside the new run");
    assert!(d.join("report.json").exists());
    // Files txbed did not write are never removed.
    std::fs::write(d.join("notes.txt"), "mine").unwrap();
    let o = run(&["--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("did not write (notes.txt)"), "{}", err(&o));
    assert!(d.join("notes.txt").exists() && d.join("report.json").exists());
    // The same for a sweep, before any run starts.
    let sw = scratch("force-sweep");
    let f = sweep_file(&sw, r#"(path: "cluster.coroutines", values: [1])"#, "seeds: [1, 2],");
    let o_dir = sw.join("o");
    assert!(txbed(&["sweep", s(&f), "--out", s(&o_dir), "-q"]).status.success());
    let o = txbed(&["sweep", s(&f), "--out", s(&o_dir)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--force") && !err(&o).contains("runs on"), "{}", err(&o));
    let o = txbed(&["sweep", s(&f), "--out", s(&o_dir), "-q", "--force"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(o_dir.join("latency").is_dir() && o_dir.join("report.html").is_file());
    // The sweep's latency/ goes whole under --force, unless it holds something else.
    std::fs::write(o_dir.join("latency/mine.txt"), "mine").unwrap();
    let o = txbed(&["sweep", s(&f), "--out", s(&o_dir), "-q", "--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("did not write (latency)") && o_dir.join("latency/mine.txt").exists(), "{}", err(&o));
    std::fs::remove_file(o_dir.join("latency/mine.txt")).unwrap();
    for cmd in [&["sensitivity", "scenarios/quickstart.ron"][..], &["hybrid-search", "scenarios/quickstart.ron"]] {
        let mut a = cmd.to_vec();
        a.extend(["--out", s(&o_dir)]);
        let o = txbed(&a);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", err(&o));
        assert!(err(&o).contains("--force"), "{cmd:?}: {}", err(&o));
    }
}

#[test]
fn one_seed_has_no_interval_and_repeated_seeds_are_refused() {
    let d = scratch("seeds");
    let f = sweep_file(&d, r#"(path: "cluster.coroutines", values: [1, 2])"#, "seeds: [7],");
    let o = txbed(&["sweep", s(&f), "--out", s(&d.join("o")), "-q"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("warning: [cluster.coroutines=1]: 1 seed ran"), "{}", err(&o));
    let summary = read_csv(&d.join("o/summary.csv"));
    assert_eq!(column(&summary, "n_seeds"), ["1", "1"]);
    assert_eq!(column(&summary, "throughput_tps_ci95"), ["", ""], "an interval over one seed is unknown, not 0");
    assert!(column(&summary, "throughput_tps_mean").iter().all(|m| m.parse::<f64>().unwrap() > 0.0));
    let f = sweep_file(&d, r#"(path: "cluster.coroutines", values: [1])"#, "seeds: [1, 2, 1],");
    let o = txbed(&["sweep", s(&f), "--out", s(&d.join("o2"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("seeds: seed 1 appears twice"), "{}", err(&o));
    let o = txbed(&["sensitivity", "scenarios/quickstart.ron", "--seeds", "3,3", "--out", s(&d.join("o3"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("appears twice"), "{}", err(&o));
}

#[test]
fn reports_and_results_record_their_provenance() {
    let d = scratch("provenance");
    let o = txbed(&["run", "scenarios/quickstart.ron", "-q", "--set", "run.measure_us=100", "--out", s(&d.join("r"))]);
    assert!(o.status.success(), "{}", err(&o));
    let report = d.join("r/report.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let p = &v["provenance"];
    assert_eq!(p["txbed_version"], env!("CARGO_PKG_VERSION"));
    let commit = p["git_commit"].as_str().unwrap();
    assert!(commit == "unknown" || (commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit())), "{commit}");
    assert!(p["command_line"].as_str().unwrap().contains("run scenarios/quickstart.ron -q --set run.measure_us=100"));
    assert!(!p["host"].as_str().unwrap().is_empty());
    let t = p["started_utc"].as_str().unwrap();
    assert!(t.len() == 20 && t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    assert_eq!(p["backend"], "sim");
    // Replay matches, silently about the build; another build's report gets a warning, exit 0.
    let o = txbed(&["replay", s(&report)]);
    assert!(o.status.success() && !err(&o).contains("warning"), "{}", err(&o));
    let mut other = v.clone();
    other["provenance"]["git_commit"] = "0123456789abcdef0123456789abcdef01234567".into();
    let other_path = d.join("other.json");
    std::fs::write(&other_path, other.to_string()).unwrap();
    let o = txbed(&["replay", s(&other_path)]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("warning:") && err(&o).contains("commit 0123456789abcdef"), "{}", err(&o));
    // A sweep's results.csv names the build on every row; provenance.json has the rest.
    let f = sweep_file(&d, r#"(path: "cluster.coroutines", values: [1])"#, "seeds: [1, 2],");
    let o = txbed(&["sweep", s(&f), "--out", s(&d.join("s")), "-q"]);
    assert!(o.status.success(), "{}", err(&o));
    let rows = read_csv(&d.join("s/results.csv"));
    assert_eq!(column(&rows, "txbed_version"), [env!("CARGO_PKG_VERSION"); 2]);
    assert_eq!(column(&rows, "git_commit"), [commit; 2]);
    assert!(!rows[0].iter().any(|c| ["command_line", "host", "started_utc"].contains(&c.as_str())), "{:?}", rows[0]);
    let prov: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("s/provenance.json")).unwrap()).unwrap();
    assert_eq!(prov["git_commit"], commit);
    assert!(prov["command_line"].as_str().unwrap().contains("sweep"), "{prov}");
}

#[test]
fn compare_two_runs_side_by_side_with_ratios() {
    let d = scratch("compare-runs");
    let short = ["-q", "--set", "run.measure_us=150", "--set", "protocol.mode=rpc", "--set", "cluster.nics_per_node=1"];
    for (dir, protocol) in [("a", "occ"), ("b", "nowait")] {
        let mut a = vec!["run", "scenarios/quickstart.ron", "--set"];
        let set = format!("protocol.name={protocol}");
        a.push(&set);
        a.extend(short);
        let out_dir = d.join(dir);
        a.extend(["--out", s(&out_dir)]);
        let o = txbed(&a);
        assert!(o.status.success(), "{}", err(&o));
    }
    let o = txbed(&["compare", s(&d.join("a")), s(&d.join("b/report.json"))]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("throughput_tps") && out(&o).contains("B/A"), "{}", out(&o));
    let o = txbed(&["compare", s(&d.join("a")), s(&d.join("b")), "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let report = |x: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(d.join(x).join("report.json")).unwrap()).unwrap()
    };
    let (ta, tb) = (report("a")["throughput_tps"].as_f64().unwrap(), report("b")["throughput_tps"].as_f64().unwrap());
    let line = c["lines"].as_array().unwrap().iter().find(|l| l["metric"] == "throughput_tps").unwrap();
    assert_eq!(line["a"].as_f64().unwrap(), ta);
    assert!((line["ratio"].as_f64().unwrap() - tb / ta).abs() < 1e-9);
    assert!(!c["lines"].as_array().unwrap().iter().any(|l| l["metric"].as_str().unwrap().starts_with("provenance")));
}

#[test]
fn compare_two_sweeps_tests_each_point_across_seeds() {
    let d = scratch("compare-sweeps");
    let head = "protocol.mode,seed,throughput_tps,p50_us,serializable,digest,error\n";
    let csv = |name: &str, rows: &[(&str, u64, f64, f64)]| {
        let body: String = rows.iter().map(|(m, s, t, p)| format!("{m},{s},{t},{p},true,00,\n")).collect();
        let p = d.join(name);
        std::fs::write(&p, format!("{head}{body}")).unwrap();
        p
    };
    // rpc: clearly different means with low variance; onesided: identical; cx: one seed.
    let a = csv(
        "a.csv",
        &[
            ("rpc", 1, 100.0, 5.0),
            ("rpc", 2, 101.0, 5.0),
            ("rpc", 3, 99.0, 5.0),
            ("onesided", 1, 300.0, 4.0),
            ("onesided", 2, 310.0, 4.5),
            ("onesided", 3, 290.0, 3.5),
            ("cx", 1, 50.0, 9.0),
        ],
    );
    let b = csv(
        "b.csv",
        &[
            ("rpc", 1, 200.0, 5.0),
            ("rpc", 2, 201.0, 5.0),
            ("rpc", 3, 199.0, 5.0),
            ("onesided", 1, 300.0, 4.0),
            ("onesided", 2, 310.0, 4.5),
            ("onesided", 3, 290.0, 3.5),
            ("cx", 1, 60.0, 9.0),
        ],
    );
    let o = txbed(&["compare", s(&a), s(&b), "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let line = |point: &str, metric: &str| -> serde_json::Value {
        c["lines"].as_array().unwrap().iter().find(|l| l["point"] == point && l["metric"] == metric).unwrap().clone()
    };
    let rpc = line("protocol.mode=rpc", "throughput_tps");
    assert_eq!(rpc["significant"], true);
    assert!(rpc["p_value"].as_f64().unwrap() < 1e-4 && (rpc["ratio"].as_f64().unwrap() - 2.0).abs() < 1e-12);
    let same = line("protocol.mode=onesided", "throughput_tps");
    assert_eq!(same["significant"], false);
    assert_eq!(same["p_value"].as_f64().unwrap(), 1.0);
    let one = line("protocol.mode=cx", "throughput_tps");
    assert!(one["p_value"].is_null() && one["significant"].is_null());
    let o = txbed(&["compare", s(&a), s(&b)]);
    let t = out(&o);
    assert!(t.contains("yes") && t.contains("no") && t.contains("n/a: one seed"), "{t}");
    // Unreadable or mismatched inputs: exit 2, with the reason.
    let other_axes = d.join("c.csv");
    std::fs::write(&other_axes, "cluster.nodes,seed,throughput_tps\n2,1,5\n").unwrap();
    let report = d.join("r.json");
    std::fs::write(&report, r#"{"throughput_tps": 5.0}"#).unwrap();
    let garbage = d.join("g.csv");
    std::fs::write(&garbage, "hello\nworld\n").unwrap();
    for (x, y, want) in [
        (&a, &other_axes, "different axes"),
        (&a, &report, "compare two reports or two sweeps"),
        (&a, &garbage, "no \"seed\" column"),
        (&a, &d.join("missing.csv"), "cannot read"),
    ] {
        let o = txbed(&["compare", s(x), s(y)]);
        assert_eq!(o.status.code(), Some(2), "{want}: {}", err(&o));
        assert!(err(&o).contains(want), "want {want:?}: {}", err(&o));
    }
}
