//! Clocks from the command line (issue 17 item 3): the clocks scenario runs checked and reports
//! its `clocks` line; a fault beyond the assumption shows violations; bad values exit 2 naming
//! the field; free-running clocks keep a run's digest; real backends refuse simulated clocks.

use crate::common;

use common::{out, txbed};

fn run(sets: &[&str]) -> String {
    let mut args = vec!["run", "scenarios/clocks/sync.ron", "--set", "run.measure_us=3000"];
    args.extend(sets.iter().flat_map(|s| ["--set", s]));
    let (code, stdout, err) = out(txbed().args(&args));
    assert_eq!(code, Some(0), "{sets:?}: {err}");
    assert!(stdout.contains("serializable: yes, nothing lost"), "{stdout}");
    stdout
}

fn line<'a>(stdout: &'a str, label: &str) -> &'a str {
    stdout.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("no {label} line: {stdout}"))
}

#[test]
fn the_clocks_scenario_reports_its_clocks() {
    let stdout = run(&[]);
    let l = line(&stdout, "clocks");
    assert!(l.contains("sync every 1000 us with node 0: max |error|"), "{l}");
    assert!(l.contains(" 0 bound violations") && l.contains("exchanges (0 lost)"), "{l}");
    // Free-running with a bound smaller than the offsets: shouted, not hidden.
    let l = run(&["cluster.clocks.sync=None", "run.clock_bound_us=10"]).to_string();
    let l = line(&l, "clocks");
    assert!(l.contains("free-running, bound 10 us (run.clock_bound_us)") && l.contains("BOUND VIOLATION"), "{l}");
}

#[test]
fn free_running_clocks_keep_the_quickstart_digest() {
    let (code, stdout, err) = out(txbed().args([
        "run",
        "scenarios/quickstart.ron",
        "--set",
        "cluster.clocks.sync=None",
        "--set",
        "cluster.clocks.drift_ppm=Constant(40)",
    ]));
    assert_eq!(code, Some(0), "{err}");
    assert!(stdout.contains("digest     7d22152a6eae34dc"), "{stdout}");
    assert!(line(&stdout, "clocks").contains("free-running"), "{stdout}");
}

#[test]
fn bad_clocks_exit_2_naming_the_field() {
    let cases: &[(&str, &str)] = &[
        ("cluster.clocks.sync.master=4", "cluster.clocks.sync.master: must be a node, 0..=3, got 4"),
        (
            "cluster.clocks.sync.interval_us=-1",
            "cluster.clocks.sync.interval_us: expected a whole number in 1..=10000000, got -1",
        ),
        ("cluster.clocks.offset_us=Uniform(9, 1)", "cluster.clocks.offset_us: Uniform(lo, hi) needs lo <= hi"),
        ("cluster.clocks.max_drift_ppm=5000", "cluster.clocks.max_drift_ppm: must be 0..=1000 ppm, got 5000"),
        ("cluster.clocks.jitter=1", "jitter"),
        ("run.clock_bound_us=99999999", "run.clock_bound_us"),
    ];
    for (set, want) in cases {
        let (code, _, err) = out(txbed().args(["validate", "scenarios/clocks/sync.ron", "--set", set]));
        assert_eq!(code, Some(2), "{set}: {err}");
        assert!(err.contains(want), "{set}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn real_backends_refuse_simulated_clocks() {
    let (code, _, err) =
        out(txbed().args(["run", "scenarios/clocks/sync.ron", "--backend", "sockets", "--rank", "0", "--size", "4"]));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cluster.clocks") && err.contains("run.clock_bound_us"), "{err}");
}
