//! `cluster.datacenters` and `cluster.inter_dc` (issue 17 item 1): good files load, every bad
//! value is refused naming its field path (or its line and column), and a scenario with data
//! centers writes back to RON that loads to itself.

use txbed_scenario::Scenario;
use txbed_sim::wan::{Delay, WanTransport};

/// A 6-node SmallBank scenario with `cluster` fields added.
fn with(cluster: &str) -> String {
    format!(
        "Scenario(cluster: (nodes: 6, {cluster}), protocol: Some((name: Occ, replication: 3)), workload: SmallBank(()))"
    )
}

const THREE: &str = r#"datacenters: [(name: "a", nodes: 2), (name: "b", nodes: 2), (nodes: 2)]"#;

fn refused(cluster: &str) -> String {
    match Scenario::parse(&with(cluster), "t.ron") {
        Ok(_) => panic!("accepted {cluster}"),
        Err(e) => e.0,
    }
}

#[test]
fn a_topology_loads_with_overrides() {
    let text = with(&format!(
        r#"{THREE}, inter_dc: Some((delay: Normal(1000, 100), loss: 0.01, transport: Tcp((per_message_cpu_ns: 2000)),
           pairs: [(between: ("a", "dc2"), delay: Some(Cdf([(1800, 0.5), (2500, 1.0)])), gbps: Some(5.0))]))"#
    ));
    let (s, _) = Scenario::parse(&text, "t.ron").unwrap();
    let wan = s.cluster.wan().expect("three data centers");
    assert_eq!(wan.dc_of, [0, 0, 1, 1, 2, 2]);
    let ab = &wan.links[1];
    assert_eq!(ab.delay, Delay::Normal(1000.0, 100.0));
    assert!(matches!(ab.transport, WanTransport::Tcp(ref c) if c.per_message_cpu_ns == 2000));
    // The pair's override, both ways; its other fields are inter_dc's.
    for k in [2, 6] {
        assert!(matches!(wan.links[k].delay, Delay::Cdf(_)), "link {k}");
        assert_eq!(wan.links[k].gbps, Some(5.0));
        assert_eq!(wan.links[k].loss, 0.01);
    }
    let (back, _) = Scenario::parse(&s.to_ron(), "back.ron").unwrap();
    assert_eq!(back, s, "to_ron loads back to the same scenario");
}

/// No data centers, or one: no links, and the written scenario has no new fields (reports
/// that embed it are unchanged).
#[test]
fn one_data_center_is_the_default() {
    let (s, _) = Scenario::parse(&with(""), "t.ron").unwrap();
    assert!(s.cluster.wan().is_none());
    assert!(!s.to_ron().contains("datacenters") && !s.to_ron().contains("inter_dc"));
    let (s, _) = Scenario::parse(&with("datacenters: [(nodes: 6)]"), "t.ron").unwrap();
    assert!(s.cluster.wan().is_none());
}

#[test]
fn bad_values_name_their_field() {
    let link = |fields: &str| format!("{THREE}, inter_dc: Some(({fields}))");
    let cases: &[(String, &[&str])] = &[
        (
            "datacenters: [(nodes: 2), (nodes: 3)]".into(),
            &["cluster.datacenters", "hold 5 nodes", "cluster.nodes is 6"],
        ),
        ("datacenters: [(nodes: 6), (nodes: 0)]".into(), &["cluster.datacenters[1].nodes", "at least 1"]),
        (
            r#"datacenters: [(name: "x", nodes: 3), (name: "x", nodes: 3)]"#.into(),
            &["cluster.datacenters[1].name", "`x`"],
        ),
        (THREE.into(), &["cluster.inter_dc", "3 data centers need"]),
        ("inter_dc: Some((delay: Constant(5)))".into(), &["cluster.inter_dc", "one data center"]),
        (link("delay: Constant(-1)"), &["cluster.inter_dc.delay", "got -1"]),
        (link("delay: Uniform(9, 3)"), &["cluster.inter_dc.delay", "lo <= hi"]),
        (link("delay: Normal(100, 2000000)"), &["cluster.inter_dc.delay", "standard deviation"]),
        (link("delay: Cdf([(10, 0.5)])"), &["cluster.inter_dc.delay", "last point's probability must be 1"]),
        (link("delay: Cdf([(10, 0.5), (5, 1.0)])"), &["cluster.inter_dc.delay", "must rise"]),
        (link("delay: Constant(5), loss: 0.95"), &["cluster.inter_dc.loss", "0..=0.9"]),
        (link("delay: Constant(5), jitter_us: -2"), &["cluster.inter_dc.jitter_us"]),
        (link("delay: Constant(5), gbps: Some(0.0)"), &["cluster.inter_dc.gbps"]),
        (link("delay: Constant(5), retransmit_us: Some(1e9)"), &["cluster.inter_dc.retransmit_us"]),
        (
            link("delay: Constant(5), transport: Tcp((per_message_cpu_ns: 5000000))"),
            &["cluster.inter_dc.transport.per_message_cpu_ns", "at most 1000000"],
        ),
        (
            link(r#"delay: Constant(5), pairs: [(between: ("a", "z"))]"#),
            &["cluster.inter_dc.pairs[0].between", "`z`", "a, b, dc2"],
        ),
        (
            link(r#"delay: Constant(5), pairs: [(between: ("a", "a"))]"#),
            &["cluster.inter_dc.pairs[0].between", "itself"],
        ),
        (
            link(r#"delay: Constant(5), pairs: [(between: ("a", "b")), (between: ("b", "a"))]"#),
            &["cluster.inter_dc.pairs[1].between", "twice"],
        ),
        (
            link(r#"delay: Constant(5), pairs: [(between: ("a", "b"), loss: Some(2.0))]"#),
            &["cluster.inter_dc.pairs[0].loss"],
        ),
        // Syntax: unknown fields and variants, with the line and column.
        (link("delay: Constant(5), lossy: 0.1"), &["t.ron:1:", "lossy", "jitter_us"]),
        (link("delay: Pareto(5)"), &["t.ron:1:", "Pareto", "Normal"]),
        (link("delay: Constant(5), transport: Tcp(())"), &["per_message_cpu_ns"]),
        (r#"datacenters: [(nodes: 6, zone: "x")]"#.into(), &["t.ron:1:", "zone"]),
    ];
    for (cluster, want) in cases {
        let e = refused(cluster);
        for w in *want {
            assert!(e.contains(w), "{cluster}: {e:?} lacks {w:?}");
        }
    }
}

/// Verbs workloads build a cluster of their own: data centers (and link delays) are refused
/// rather than ignored.
#[test]
fn verbs_workloads_refuse_topologies() {
    for cluster in ["datacenters: [(nodes: 2)]", "link_delay_us: Some([[0, 5], [5, 0]])"] {
        let text = format!("Scenario(cluster: (nodes: 2, {cluster}), workload: Verbs(()))");
        let e = Scenario::parse(&text, "v.ron").unwrap_err().0;
        assert!(e.contains("Verbs workloads"), "{e}");
    }
}
