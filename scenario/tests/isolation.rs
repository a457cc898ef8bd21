//! `protocol.isolation`: the level a run is checked at. By name in the file (a RON variant,
//! any spelling), by `--set` (also kebab-case), the protocol's level when absent, written back
//! by the resolved RON; bad values are rejected with file, line and column.

use txbed_scenario::Scenario;
use txbed_txn::protocol::Level;

const BASE: &str = "Scenario(workload: SmallBank(()),\n protocol: Some((name: Occ, isolation: Some(ReadCommitted))))";

fn level(text: &str) -> Level {
    Scenario::parse(text, "f.ron").unwrap_or_else(|e| panic!("{text}: {e}")).0.protocol.unwrap().level()
}

#[test]
fn a_declared_level_is_read_and_the_protocols_is_the_default() {
    assert_eq!(level(BASE), Level::ReadCommitted);
    assert_eq!(level(&BASE.replace("ReadCommitted", "STRICTSERIALIZABLE")), Level::StrictSerializable);
    let none = BASE.replace(", isolation: Some(ReadCommitted)", "");
    assert_eq!(level(&none), txbed_protocols::named("occ").unwrap().isolation());
    assert_eq!(level(&none), Level::Serializable);
}

#[test]
fn every_level_round_trips_and_is_set_by_any_name() {
    for l in Level::ALL {
        let (s, _) = Scenario::parse(BASE, "f.ron").unwrap();
        for spelling in [l.name().to_string(), txbed_scenario::IsolationName::variant(l).to_string()] {
            let set = format!("protocol.isolation=Some({spelling})");
            let s = s.apply_sets(&[set.clone()]).unwrap_or_else(|e| panic!("{set}: {e}"));
            assert_eq!(s.protocol.as_ref().unwrap().level(), l, "{set}");
            let (back, _) = Scenario::parse(&s.to_ron(), "resolved").unwrap_or_else(|e| panic!("{set}: {e}"));
            assert_eq!(back, s, "{set}: the resolved RON does not load back");
        }
    }
    let (s, _) = Scenario::parse(BASE, "f.ron").unwrap();
    let s = s.apply_sets(&["protocol.isolation=None".into()]).unwrap();
    assert_eq!(s.protocol.unwrap().level(), Level::Serializable);
}

#[test]
fn a_bad_level_is_rejected_with_its_position() {
    let e = Scenario::parse(&BASE.replace("ReadCommitted", "ReadComitted"), "f.ron").unwrap_err().0;
    assert!(e.starts_with("f.ron:2:"), "{e}");
    assert!(e.contains("protocol.isolation: unknown isolation level `ReadComitted`"), "{e}");
    assert!(e.contains("StrictSerializable"), "{e}");
    // Not an option, not a name, an unknown field next to it: each named where it is.
    let e = Scenario::parse(&BASE.replace("Some(ReadCommitted)", "7"), "f.ron").unwrap_err().0;
    assert!(e.starts_with("f.ron:2:") && e.contains("protocol.isolation"), "{e}");
    let e = Scenario::parse(&BASE.replace("isolation:", "isolaton:"), "f.ron").unwrap_err().0;
    assert!(e.starts_with("f.ron:2:") && e.contains("isolaton"), "{e}");
    let (s, _) = Scenario::parse(BASE, "f.ron").unwrap();
    let e = s.apply_sets(&["protocol.isolation=eventual".into()]).unwrap_err().0;
    assert!(e.contains("unknown isolation level `eventual`"), "{e}");
}
