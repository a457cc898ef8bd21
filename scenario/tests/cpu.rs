//! `cluster.cpu`: the CPU profile of the simulator's HTM model. A built-in name or a RON file;
//! an unknown name, or a profile with an unknown field, is refused when the scenario loads,
//! naming the field; the default (haswell) is not written back.

use txbed_scenario::Scenario;

const BASE: &str = "Scenario(cluster: (nodes: 2, cpu: \"haswell\"), workload: SmallBank(()),\n protocol: Some((name: DrTM, replication: 1)))";

#[test]
fn a_built_in_profile_loads_and_is_the_default() {
    let (s, _) = Scenario::parse(BASE, "f.ron").unwrap();
    assert_eq!(s.cluster.cpu, "haswell");
    assert!(!s.to_ron().contains("cpu"), "the default is not written back: {}", s.to_ron());
    let (d, _) = Scenario::parse(&BASE.replace(", cpu: \"haswell\"", ""), "f.ron").unwrap();
    assert_eq!(d.cluster.cpu, txbed_scenario::DEFAULT_CPU);
}

#[test]
fn unknown_profiles_and_bad_files_are_refused_with_the_field() {
    let e = Scenario::parse(&BASE.replace("haswell", "skylake-x"), "f.ron").unwrap_err().to_string();
    assert!(e.contains("cluster.cpu") && e.contains("built-in CPU profiles are haswell"), "{e}");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-cpu-test");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.ron");
    std::fs::write(&bad, "(name: \"x\", line_bytes: 64, l1_sets: 64, l1_ways: 8, read_set_lines: 9, system_aborts_per_ms: 1.0, xbegin_ns: 1, xend_ns: 1, abort_ns: 1, ways: 3)").unwrap();
    let e = Scenario::parse(&BASE.replace("haswell", bad.to_str().unwrap()), "f.ron").unwrap_err().to_string();
    assert!(e.contains("cluster.cpu") && e.contains(":1:") && e.contains("ways"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
