//! Fault campaigns in `cargo test` (issue 17 item 6, docs/campaign.md): a CI-sized campaign
//! over every protocol on SmallBank and YCSB with the `mixed` profile must be all clean or
//! unsupported; the same machinery with the planted recovery bug FORGET_WAL must find it,
//! shrink a failure to fewer faults, and the written file must replay to the same verdict and
//! digest.
//!
//! `TXBED_CAMPAIGN_SEEDS=N` runs N seeds per protocol and workload (default 20: 520 runs, 13 protocols).
//!
//! `tests/campaign-found/` holds the failures the full-size campaign found in the fault
//! machinery, shrunk (all fixed since); `failures_the_campaign_found_replay_clean` replays them.

use std::path::PathBuf;

use txbed_runner::campaign::{self, Kind, Protocols, Row, Setup};
use txbed_scenario::Scenario;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-campaign-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The campaign of `file` with `profile` over `seeds` for `protocols`, with `bug` planted.
fn setup(file: &str, profile: &str, protocols: Protocols, seeds: std::ops::Range<u64>, bug: Option<&str>) -> Setup {
    let path = root().join(file);
    let (s, _) = Scenario::load(&path).unwrap();
    let faults = campaign::load_profile(profile).unwrap();
    let (targets, profile, bug) = campaign::prepare(&s, file, Some(faults), &protocols, bug).unwrap();
    Setup { targets, profile, seeds: seeds.collect(), bug }
}

/// Failing rows as lines with their replay commands (shrunk, written under `dir`).
fn explain(setup: &Setup, rows: &mut [Row], dir: &std::path::Path) -> Vec<String> {
    let failures = campaign::shrink_and_write(setup, rows, dir, Some(30), jobs(), &|| {}).unwrap();
    failures.iter().map(|f| format!("{}\n    {}", f.line(&rows[f.row]), rows[f.row].outcome.detail)).collect()
}

#[test]
fn every_profile_fits_both_campaign_scenarios_and_every_protocol() {
    for file in ["scenarios/campaign/smallbank.ron", "scenarios/campaign/ycsb.ron"] {
        for (name, _) in campaign::PROFILES {
            let s = setup(file, name, Protocols::All, 1..2, None);
            assert_eq!(s.targets.len(), txbed_protocols::REGISTRY.len());
            // Each seed's schedule is a valid one, and a few faults happen in most runs.
            let mut faults = 0;
            for seed in 1..=20 {
                let sc = campaign::seeded(&s.targets[0], seed);
                assert!(campaign::schedule_ok(&sc), "{file} {name} seed {seed}");
                sc.check(name).unwrap_or_else(|e| panic!("{file} {name} seed {seed}: {e}"));
                faults += sc.fault_schedule().len();
            }
            assert!((20..=200).contains(&faults), "{file} with {name}: {faults} faults over 20 seeds");
        }
    }
}

/// The CI-sized campaign: every protocol, SmallBank and YCSB, the `mixed` profile.
#[test]
fn ci_sized_campaign_over_every_protocol_is_clean_or_unsupported() {
    let seeds: u64 = std::env::var("TXBED_CAMPAIGN_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let dir = scratch("ci");
    let start = std::time::Instant::now();
    let mut bad = Vec::new();
    let mut total = 0;
    let mut faults = 0;
    for file in ["scenarios/campaign/smallbank.ron", "scenarios/campaign/ycsb.ron"] {
        let s = setup(file, "mixed", Protocols::All, 1..1 + seeds, None);
        let mut rows = campaign::run_all(&s, jobs(), &|_| {});
        total += rows.len();
        faults += rows.iter().map(|r| r.outcome.faults_applied).sum::<usize>();
        let sums = campaign::summarize(&rows);
        eprintln!("{file}:\n{}", campaign::summary_table(&sums));
        // Every protocol ran every seed, and most of them saw faults.
        for sum in &sums {
            assert_eq!(sum.runs as u64, seeds, "{}", sum.protocol);
            assert!(sum.count(Kind::Clean) > 0, "{file}: {} had no clean run", sum.protocol);
        }
        bad.extend(explain(&s, &mut rows, &dir.join(file.replace('/', "-"))));
    }
    eprintln!("{total} runs, {faults} faults applied, in {:.1} s", start.elapsed().as_secs_f64());
    assert!(faults >= total, "only {faults} faults applied over {total} runs");
    assert!(bad.is_empty(), "{} runs failed; replay each with its command:\n{}", bad.len(), bad.join("\n"));
}

/// FORGET_WAL (recovery ignores the write-ahead log) must be found, shrunk to fewer faults,
/// and replayed from the written file to the same verdict and digest; the same file without
/// the bug runs clean.
#[test]
fn planted_recovery_bug_is_found_shrunk_and_replayed() {
    let dir = scratch("forget-wal");
    let protocols = Protocols::List(vec!["nowait".into(), "occ".into(), "sundial".into()]);
    let s = setup("scenarios/campaign/smallbank.ron", "crash", protocols, 1..9, Some("forget-wal"));
    let rows = campaign::run_all(&s, jobs(), &|_| {});
    let failing: Vec<Row> = rows.iter().filter(|r| r.outcome.kind.is_failure()).cloned().collect();
    assert!(failing.len() >= 6, "FORGET_WAL found in only {} of {} runs", failing.len(), rows.len());
    for r in &failing {
        assert!(matches!(r.outcome.kind, Kind::NotSerializable | Kind::LostWrites), "{:?}", r.outcome);
    }
    // Shrink the failures that started with the most faults (two per protocol at most).
    let mut pick: Vec<Row> = Vec::new();
    let mut by_faults = failing.clone();
    by_faults.sort_by_key(|r| std::cmp::Reverse(r.outcome.faults_scheduled));
    for r in by_faults {
        if pick.iter().filter(|p| p.protocol == r.protocol).count() < 2 {
            pick.push(r);
        }
    }
    let failures = campaign::shrink_and_write(&s, &mut pick, &dir, Some(40), jobs(), &|| {}).unwrap();
    assert_eq!(failures.len(), pick.len());
    let fewer = failures
        .iter()
        .filter(|f| f.shrunk.minimal_outcome.faults_scheduled < f.shrunk.original_outcome.faults_scheduled)
        .count();
    assert!(
        fewer >= 1,
        "no failure shrank to fewer faults: {:?}",
        failures.iter().map(|f| f.line(&pick[f.row])).collect::<Vec<_>>()
    );
    for f in &failures {
        let row = &pick[f.row];
        let line = f.line(row);
        assert!(line.contains(&format!("txbed run {} --bug ForgetWal", f.minimal_file.display())), "{line}");
        assert_eq!(row.replay.as_ref(), Some(&f.minimal_file));
        // The file as written, read back as `txbed run` reads it.
        let (sc, profile) = Scenario::load(&f.minimal_file).unwrap();
        assert!(sc.faults.as_ref().unwrap().random.is_none(), "the schedule is expanded");
        assert_eq!(sc.fault_schedule().len(), f.shrunk.minimal_outcome.faults_scheduled);
        let again = campaign::run_one(&sc, &profile, s.bug);
        assert_eq!(again.kind, row.outcome.kind, "{line}: replayed as {:?}", again);
        assert_eq!(again.digest, f.shrunk.minimal_outcome.digest, "{line}");
        assert_eq!(again.digest, row.replay_digest, "{line}");
        // Without the bug the same schedule is survived.
        let clean = campaign::run_one(&sc, &profile, None);
        assert_eq!(clean.kind, Kind::Clean, "{line}: without the bug: {:?}", clean);
        // The original file replays the original run.
        let (orig, profile) = Scenario::load(&f.original_file).unwrap();
        assert_eq!(campaign::run_one(&orig, &profile, s.bug).digest, row.outcome.digest, "{line}");
    }
}

/// The failures the full-size campaign found in the fault machinery (docs/campaign.md,
/// "What it found"), each shrunk and written by the campaign; fixed, each must run clean.
#[test]
fn failures_the_campaign_found_replay_clean() {
    let dir = root().join("runner/tests/campaign-found");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let mut bad = Vec::new();
    for f in files {
        let (s, profile) = Scenario::load(&f).unwrap_or_else(|e| panic!("{e}"));
        let o = campaign::run_one(&s, &profile, None);
        if o.kind != Kind::Clean {
            bad.push(format!("{}: {} {}", f.display(), o.kind.name(), o.detail));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
