//! The `faults` section (issue 17 item 2): good files load and expand the same schedule from
//! the same seed; every bad value is refused naming its field path (or its line and column);
//! the expanded scenario writes back to RON that loads to itself.

use txbed_scenario::Scenario;
use txbed_sim::faults::{Fault, Region};

/// A 4-node SmallBank scenario with a `faults` section, 1 ms long.
fn with(faults: &str) -> String {
    format!(
        r#"Scenario(cluster: (nodes: 4, datacenters: [(name: "a", nodes: 2), (name: "b", nodes: 2)], inter_dc: Some((delay: Constant(10)))),
           protocol: Some((name: Occ, replication: 3)), workload: SmallBank(()), run: (warmup_us: 0, measure_us: 1000),
           faults: Some(({faults})))"#
    )
}

fn refused(faults: &str) -> String {
    match Scenario::parse(&with(faults), "t.ron") {
        Ok(_) => panic!("accepted {faults}"),
        Err(e) => e.0,
    }
}

#[test]
fn a_schedule_loads_with_its_defaults() {
    let text = with(
        "schedule: [(at_us: 100, fault: Crash(node: 1)), (at_us: 700, fault: Restart(node: 1)),
                    (at_us: 50, fault: Partition(a: [0], b: [2, 3], for_us: 100)),
                    (at_us: 60, fault: Link(from: 0, to: 1, for_us: 10, drop: 0.5)),
                    (at_us: 70, fault: SlowCpu(node: 3, factor: 4.0, for_us: 10)),
                    (at_us: 80, fault: ClockStep(node: 2, by_us: -20)),
                    (at_us: 90, fault: CrashDc(dc: \"b\")), (at_us: 900, fault: RestartDc(dc: \"b\"))]",
    );
    let (s, _) = Scenario::parse(&text, "t.ron").unwrap();
    let f = s.faults.as_ref().unwrap();
    assert_eq!((f.detect_us, f.reconnect_us, f.durable.clone()), (500, 200, vec![Region::Logs]));
    // Applied in time order.
    let times: Vec<u64> = s.fault_schedule().iter().map(|f| f.at_us).collect();
    assert_eq!(times, [50, 60, 70, 80, 90, 100, 700, 900]);
    let back = Scenario::parse(&s.to_ron(), "back.ron").unwrap().0;
    assert_eq!(back, s);
}

#[test]
fn random_generators_expand_the_same_from_the_same_seed() {
    let text = with(
        "detect_us: 100, random: Some((crash: Some((per_ms: 2.0, down_us: (100, 300))),
                    partition: Some((per_ms: 2.0, for_us: (10, 50))), link: Some((per_ms: 2.0, for_us: (10, 50), drop: (0.0, 0.3)))))",
    );
    let (s, _) = Scenario::parse(&text, "t.ron").unwrap();
    let a = s.fault_schedule();
    assert!(a.len() >= 3, "{a:?}");
    assert_eq!(a, s.fault_schedule());
    let mut other = s.clone();
    other.run.seed = 2;
    assert_ne!(a, other.fault_schedule());
    assert!(a.iter().any(|f| matches!(f.fault, Fault::Crash { .. })));
    // Expanded, the scenario is a plain schedule that loads back to the same faults.
    let e = s.with_faults_expanded();
    assert!(e.faults.as_ref().unwrap().random.is_none());
    let back = Scenario::parse(&e.to_ron(), "e.ron").unwrap().0;
    assert_eq!(back.fault_schedule(), a);
}

#[test]
fn bad_values_are_refused_with_their_field() {
    for (faults, field, words) in [
        ("schedule: [(at_us: 100, fault: Crash(node: 9))]", "faults.schedule[0].fault.node", "not a node"),
        ("schedule: [(at_us: 5000, fault: Crash(node: 1))]", "faults.schedule[0].at_us", "never happen"),
        (
            "schedule: [(at_us: 100, fault: Crash(node: 1)), (at_us: 200, fault: Restart(node: 1))]",
            "faults.schedule[1].at_us",
            "600 us or later",
        ),
        ("schedule: [(at_us: 100, fault: Restart(node: 1))]", "faults.schedule[0].at_us", "crash it first"),
        (
            "schedule: [(at_us: 1, fault: Crash(node: 1)), (at_us: 2, fault: Crash(node: 1))]",
            "faults.schedule[1].at_us",
            "already down",
        ),
        (
            "schedule: [(at_us: 1, fault: Partition(a: [0, 1], b: [1], for_us: 5))]",
            "faults.schedule[0].fault.b",
            "both sides",
        ),
        (
            "schedule: [(at_us: 1, fault: Partition(a: [], b: [1], for_us: 5))]",
            "faults.schedule[0].fault.a",
            "at least one",
        ),
        ("schedule: [(at_us: 1, fault: Link(from: 1, to: 1, for_us: 5))]", "faults.schedule[0].fault.to", "itself"),
        (
            "schedule: [(at_us: 1, fault: Link(from: 0, to: 1, for_us: 5, drop: 1.5))]",
            "faults.schedule[0].fault.drop",
            "probability",
        ),
        (
            "schedule: [(at_us: 1, fault: SlowCpu(node: 0, factor: 0.5, for_us: 5))]",
            "faults.schedule[0].fault.factor",
            "1..=1000",
        ),
        ("schedule: [(at_us: 1, fault: CrashDc(dc: \"z\"))]", "faults.schedule[0].fault.dc", "no data center"),
        ("detect_us: 0", "faults.detect_us", "1..="),
        ("durable: [Logs, Logs]", "faults.durable[1]", "twice"),
        ("random: Some((crash: Some((per_ms: 1.0, down_us: (10, 20)))))", "faults.random.crash.down_us", "500..="),
        (
            "random: Some((max_down: Some(4), crash: Some((per_ms: 1.0, down_us: (600, 900)))))",
            "faults.random.max_down",
            "1..=3",
        ),
        ("random: Some((link: Some((per_ms: 0.0, for_us: (1, 2)))))", "faults.random.link", "per_ms"),
        ("random: Some((from_us: 2000))", "faults.random.from_us", "empty"),
    ] {
        let e = refused(faults);
        assert!(e.contains(field) && e.contains(words), "{faults}: {e}");
    }
    // Unknown fields and variants: line and column.
    let e = refused("schedule: [(at_us: 1, fault: Explode(node: 1))]");
    assert!(e.contains("t.ron:") && e.contains("Explode"), "{e}");
    let e = refused("detect_ms: 5");
    assert!(e.contains("detect_ms"), "{e}");
}

#[test]
fn faults_need_a_transactional_workload() {
    let text = "Scenario(workload: Verbs(()), faults: Some(()))";
    let e = Scenario::parse(text, "v.ron").unwrap_err().0;
    assert!(e.contains("faults") && e.contains("transactional"), "{e}");
}
