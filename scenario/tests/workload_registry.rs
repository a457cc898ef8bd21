//! Every registered workload (`txbed_workloads::REGISTRY`) is reachable from a scenario with no
//! edit of the schema: by name in the file (any capitalisation), by `--set workload.name=`, and
//! through the resolved RON a report records; unknown names list the registry.

use txbed_scenario::{Scenario, Workload};
use txbed_workloads::REGISTRY;

const BASE: &str = "Scenario(workload: SmallBank(()), protocol: Some((name: Occ)))";

#[test]
fn every_registered_workload_loads_by_name_and_round_trips() {
    assert!(REGISTRY.len() >= 4);
    for kind in REGISTRY {
        for spelling in [kind.name().to_string(), kind.name().to_lowercase(), kind.title().to_string()] {
            let set = format!("workload.name={spelling}");
            let (s, _) = Scenario::parse(BASE, "base").unwrap();
            let s = s.apply_sets(&[set.clone()]).unwrap_or_else(|e| panic!("{set}: {e}"));
            s.check("set").unwrap_or_else(|e| panic!("{set}: {e}"));
            assert_eq!(s.workload, Workload::Txn(kind.default_config()), "{set}");
            assert_eq!(s.workload.title(), kind.title());
            let (back, _) = Scenario::parse(&s.to_ron(), "resolved").unwrap_or_else(|e| panic!("{set}: {e}"));
            assert_eq!(back, s, "{set}: the resolved RON does not load back");
        }
        let text = BASE.replace("SmallBank(())", &format!("{}(())", kind.name().to_uppercase()));
        let (s, _) = Scenario::parse(&text, "upper").unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(s.workload, Workload::Txn(kind.default_config()));
    }
}

#[test]
fn an_unknown_workload_lists_the_registry_with_its_position() {
    let e = Scenario::parse(&BASE.replace("SmallBank", "Paxos"), "f.ron").unwrap_err().0;
    assert!(e.starts_with("f.ron:1:"), "{e}");
    for kind in REGISTRY {
        assert!(e.contains(kind.name()), "{e}");
    }
}

#[test]
fn parameter_errors_keep_their_field_path() {
    let e = Scenario::parse(&BASE.replace("SmallBank(())", "Ycsb((write_fraction: 2.0))"), "f.ron").unwrap_err().0;
    assert!(e.contains("workload.write_fraction"), "{e}");
    let e = Scenario::parse(&BASE.replace("SmallBank(())", "Tpcc((no_such: 1))"), "f.ron").unwrap_err().0;
    assert!(e.starts_with("f.ron:1:") && e.contains("no_such"), "{e}");
}
