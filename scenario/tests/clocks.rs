//! `cluster.clocks` and `run.clock_bound_us` (issue 17 item 3): good files load and resolve,
//! every bad value is refused naming its field path, `--set` reaches every field, and a
//! scenario without clocks writes back without them.

use txbed_scenario::clocks::{ClockSync, Clocks, PerNode};
use txbed_scenario::Scenario;

/// A 4-node SmallBank scenario with `cluster` and `run` fields added.
fn with(cluster: &str, run: &str) -> String {
    format!(
        "Scenario(cluster: (nodes: 4, {cluster}), protocol: Some((name: Occ)), workload: SmallBank(()), run: ({run}))"
    )
}

fn refused(cluster: &str, run: &str) -> String {
    match Scenario::parse(&with(cluster, run), "t.ron") {
        Ok(_) => panic!("accepted {cluster} / {run}"),
        Err(e) => e.0,
    }
}

#[test]
fn clocks_load_resolve_and_write_back() {
    let text = with(
        "clocks: Some((offset_us: List([0, 12.5, -3, 40]), drift_ppm: Uniform(-20, 20), max_drift_ppm: 50, sync: Some((interval_us: 500, master: 2))))",
        "clock_bound_us: 30",
    );
    let (s, _) = Scenario::parse(&text, "t.ron").unwrap();
    let k = s.cluster.clocks.as_ref().unwrap();
    assert_eq!(k.offset_us, PerNode::List(vec![0.0, 12.5, -3.0, 40.0]));
    assert_eq!(k.sync, Some(ClockSync { interval_us: 500, master: 2 }));
    assert_eq!(s.run.clock_bound_us, 30);
    let c = k.config(4, 7, s.run.clock_bound_us);
    assert_eq!(c.offset_ns, [0, 12_500, -3_000, 40_000]);
    assert_eq!(c.max_drift_ppb, 50_000);
    assert_eq!(c.sync.unwrap().interval_ns, 500_000);
    assert_eq!(c.free_bound_ns, 30_000);
    assert!(c.drift_ppb.iter().all(|d| (-20_000..=20_000).contains(d)));
    assert_eq!(c, k.config(4, 7, 30), "drawn from the seed");
    assert_ne!(c.drift_ppb, k.config(4, 8, 30).drift_ppb);
    let (back, _) = Scenario::parse(&s.to_ron(), "back.ron").unwrap();
    assert_eq!(back, s, "to_ron loads back to the same scenario");
}

#[test]
fn defaults_and_absence() {
    let (s, _) = Scenario::parse(&with("clocks: Some(())", ""), "t.ron").unwrap();
    assert_eq!(s.cluster.clocks, Some(Clocks::default()));
    assert_eq!(Clocks::default().sync, Some(ClockSync { interval_us: 1000, master: 0 }));
    assert_eq!(s.run.clock_bound_us, 1000);
    let (s, _) = Scenario::parse(&with("", ""), "t.ron").unwrap();
    assert!(s.cluster.clocks.is_none());
    assert!(!s.to_ron().contains("clocks:"), "a scenario without clocks writes none");
}

#[test]
fn bad_values_name_their_field() {
    let clocks = |fields: &str| format!("clocks: Some(({fields}))");
    let cases: &[(String, &str, &[&str])] = &[
        (clocks("sync: Some((interval_us: -5))"), "", &["cluster.clocks.sync.interval_us", "1..=10000000", "-5"]),
        (clocks("sync: Some((interval_us: 0))"), "", &["cluster.clocks.sync.interval_us", "got 0"]),
        (clocks("sync: Some((master: 4))"), "", &["cluster.clocks.sync.master", "0..=3", "got 4"]),
        (clocks("sync: Some((master: -1))"), "", &["cluster.clocks.sync.master", "-1"]),
        (clocks("sync: Some((period_us: 5))"), "", &["cluster.clocks.sync", "`period_us`", "interval_us"]),
        (clocks("skew: 5"), "", &["cluster.clocks", "`skew`", "offset_us"]),
        (clocks("offset_us: Uniform(5, -5)"), "", &["cluster.clocks.offset_us", "lo <= hi"]),
        (clocks("offset_us: Constant(2e7)"), "", &["cluster.clocks.offset_us", "-10000000..=10000000 us"]),
        (clocks("offset_us: List([1, 2])"), "", &["cluster.clocks.offset_us", "4 values, got 2"]),
        (clocks("offset_us: Gauss(1)"), "", &["cluster.clocks.offset_us", "Gauss"]),
        (clocks("drift_ppm: List([0, 0, 0, 5000])"), "", &["cluster.clocks.drift_ppm", "node 3's value", "5000"]),
        (clocks("max_drift_ppm: -1"), "", &["cluster.clocks.max_drift_ppm", "0..=1000", "-1"]),
        (String::new(), "clock_bound_us: 20000000", &["run.clock_bound_us", "0..=10000000", "20000000"]),
        (String::new(), "clock_bound_us: -3", &["run.clock_bound_us", "-3"]),
    ];
    for (cluster, run, want) in cases {
        let e = refused(cluster, run);
        for w in *want {
            assert!(e.contains(w), "{cluster} / {run}: {e:?} lacks {w:?}");
        }
        assert!(e.starts_with("t.ron"), "{e}");
    }
}

#[test]
fn verbs_workloads_refuse_clocks() {
    let text = "Scenario(cluster: (clocks: Some(())), workload: Verbs((verb: Read)))";
    let e = Scenario::parse(text, "v.ron").unwrap_err().0;
    assert!(e.contains("cluster.clocks") && e.contains("transactional"), "{e}");
}

#[test]
fn set_reaches_every_field() {
    let (s, _) = Scenario::parse(&with("", ""), "t.ron").unwrap();
    let sets: Vec<String> = [
        "cluster.clocks.sync.interval_us=250",
        "cluster.clocks.sync.master=3",
        "cluster.clocks.offset_us=Uniform(-50, 50)",
        "cluster.clocks.drift_ppm=List([1, 2, 3, 4.5])",
        "cluster.clocks.max_drift_ppm=20",
        "run.clock_bound_us=15",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let t = s.apply_sets(&sets).unwrap();
    t.check("t.ron").unwrap();
    let k = t.cluster.clocks.unwrap();
    assert_eq!(k.sync, Some(ClockSync { interval_us: 250, master: 3 }));
    assert_eq!(k.offset_us, PerNode::Uniform(-50.0, 50.0));
    assert_eq!(k.drift_ppm, PerNode::List(vec![1.0, 2.0, 3.0, 4.5]));
    assert_eq!(k.max_drift_ppm, 20.0);
    assert_eq!(t.run.clock_bound_us, 15);
    let off = s.apply_sets(&["cluster.clocks.sync=None".to_string()]).unwrap();
    assert_eq!(off.cluster.clocks.unwrap().sync, None);
    let e = s.apply_sets(&["cluster.clocks.sync.interval_us=-1".to_string()]).unwrap_err().0;
    assert!(e.contains("cluster.clocks.sync.interval_us") && e.contains("-1"), "{e}");
    let bad = s.apply_sets(&["cluster.clocks.sync.master=9".to_string()]).unwrap();
    let e = bad.check("t.ron").unwrap_err().0;
    assert!(e.contains("cluster.clocks.sync.master"), "{e}");
}
