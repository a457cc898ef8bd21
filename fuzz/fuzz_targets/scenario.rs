//! Fuzzes scenario parsing and validation: `Scenario::parse` must return Ok or Err on any
//! text, never panic (debug assertions and overflow checks are on in fuzz builds). Every
//! scenario it accepts must serialize back to RON, with `ron::ser::to_string` and with
//! `Scenario::to_ron` (what `txbed run --out` writes), and parse again to the same scenario.
//!
//! Run with `bash fuzz/run.sh [SECONDS]` (docs/scenarios.md, "Fuzzing").

#![no_main]

use libfuzzer_sys::fuzz_target;
use txbed_scenario::Scenario;
use txbed_sim::profile::BUILTIN;

/// `cluster.nic` may name a profile file. Inputs that would read outside the working tree
/// (an absolute path, or `..`) are skipped: /dev/zero or /dev/stdin would hang the fuzzer
/// on a path, not on a parser bug.
fn reads_outside_tree(text: &str) -> bool {
    let Ok(s) = ron::Options::default().from_str::<Scenario>(text) else { return false };
    let nic = s.cluster.nic.as_str();
    !BUILTIN.iter().any(|(n, _)| *n == nic) && (nic.starts_with('/') || nic.contains(".."))
}

fn parses_back(scenario: &Scenario, ron: &str, how: &str) {
    match Scenario::parse(ron, how) {
        Ok((back, _)) => assert_eq!(&back, scenario, "{how} changed the scenario; RON was:\n{ron}"),
        Err(e) => panic!("an accepted scenario does not parse again after {how}: {e}\nRON was:\n{ron}"),
    }
}

fuzz_target!(|data: &[u8]| {
    // Scenario files are read as UTF-8 text; other bytes never reach the parser.
    let Ok(text) = std::str::from_utf8(data) else { return };
    if reads_outside_tree(text) {
        return;
    }
    let Ok((scenario, _profile)) = Scenario::parse(text, "fuzz-input") else { return };
    let ron = ron::ser::to_string(&scenario).expect("an accepted scenario serializes to RON");
    parses_back(&scenario, &ron, "ron::ser::to_string");
    parses_back(&scenario, &scenario.to_ron(), "Scenario::to_ron");
});
