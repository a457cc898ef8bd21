//! Inputs the scenario fuzzer (fuzz/, docs/scenarios.md "Fuzzing") found to panic, and a replay
//! of its whole committed corpus: `Scenario::parse` returns Ok or Err on each, never panics,
//! and every accepted scenario serializes to RON (`ron::ser::to_string`, `Scenario::to_ron`) and
//! parses back to itself.

use std::path::PathBuf;

use txbed_scenario::Scenario;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/scenario")
}

fn rejected(text: &str) -> String {
    match Scenario::parse(text, "fuzz-regression") {
        Ok((s, _)) => panic!("accepted {s:?}"),
        Err(e) => e.0,
    }
}

/// warmup_us + measure_us overflowed u64: a panic with overflow checks, and without them a
/// sum that wrapped to 0 and passed the 10 s limit. The error blames the field too large
/// (issue 16: it used to blame measure_us for a huge warm-up).
#[test]
fn run_time_overflow_is_rejected() {
    let e = rejected("Scenario(workload: Verbs((verb: Read)), run: (warmup_us: 18446744073709551615, measure_us: 1))");
    assert!(e.contains("run.warmup_us: must be 0..=10000000"), "{e}");
    let e = rejected("Scenario(workload: Verbs((verb: Read)), run: (warmup_us: 9000000, measure_us: 2000000))");
    assert!(e.contains("run.measure_us") && e.contains("at most 10000000 us (10 s)"), "{e}");
    let e = rejected(&std::fs::read_to_string(corpus().join("bad-huge-run.ron")).unwrap());
    assert!(e.contains("run.warmup_us"), "{e}");
}

/// SmallBank's mix summed in u32: a panic with overflow checks, and without them
/// (4294967295, 101, 0, 0, 0, 0) wrapped to 100 and passed.
#[test]
fn smallbank_mix_overflow_is_rejected() {
    let e =
        rejected("Scenario(protocol: Some((name: Occ)), workload: SmallBank((mix: (4294967295, 101, 0, 0, 0, 0))))");
    assert!(e.contains("workload.mix") && e.contains("got 4294967396"), "{e}");
    let e = rejected(&std::fs::read_to_string(corpus().join("bad-huge-mix.ron")).unwrap());
    assert!(e.contains("workload.mix"), "{e}");
}

#[test]
fn every_corpus_input_parses_or_errs_and_round_trips() {
    let mut files: Vec<_> = std::fs::read_dir(corpus()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 20, "corpus at {} has {} files", corpus().display(), files.len());
    let mut accepted = 0;
    for f in &files {
        let Ok(text) = std::str::from_utf8(&std::fs::read(f).unwrap()).map(str::to_owned) else { continue };
        let Ok((s, _)) = Scenario::parse(&text, &f.display().to_string()) else { continue };
        for again in [ron::ser::to_string(&s).unwrap(), s.to_ron()] {
            let (back, _) =
                Scenario::parse(&again, "round trip").unwrap_or_else(|e| panic!("{}: {e}\n{again}", f.display()));
            assert_eq!(back, s, "{}", f.display());
        }
        accepted += 1;
    }
    // The scenarios/ seeds at least (sweeps and NIC profiles are not scenarios).
    assert!(accepted >= 7, "only {accepted} corpus inputs were accepted");
}
