//! Scenario input and validation from the command line (issue 16): protocol switches by
//! `--set`, memory estimates, numeric messages with field paths, `validate --set`, bare
//! strings in `--set`, a lossy link by NIC override.

use assert_cmd::Command;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn txbed() -> Command {
    let mut c = Command::cargo_bin("txbed").expect("binary built");
    c.current_dir(root());
    c
}

/// Runs `txbed args`, returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = txbed().args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-input-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// Item 1: the quickstart's OCC code 38 does not carry over to NOWAIT: a switch by --set
/// resets a hybrid code to Rpc; Rpc and Onesided carry over; an explicit invalid code says
/// what to set.
#[test]
fn switching_protocol_by_set_gives_a_valid_mode() {
    let q = "scenarios/quickstart.ron";
    let short = ["--set", "run.measure_us=100", "--set", "run.warmup_us=10"];
    let mut args = vec!["run", q, "--set", "protocol.name=nowait", "--set", "workload.name=ycsb", "--json"];
    args.extend(short);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    assert_eq!(r["protocol"], "NOWAIT", "{r}");
    assert_eq!(r["hybrid"], "0 (rpc)");
    let resolved = r["resolved_scenario"].to_string();
    assert!(!resolved.contains("38"), "{resolved}");
    // Onesided means every stage for any protocol: it stays.
    let mut args = vec!["validate", q, "--set", "protocol.mode=onesided", "--set", "cluster.nics_per_node=1"];
    args.extend(["--set", "protocol.name=nowait"]);
    assert_eq!(run(&args).0, 0);
    // The same protocol again keeps the code.
    let (code, out, err) = run(&["run", q, "--set", "protocol.name=occ", "--json", "--set", "run.measure_us=50"]);
    assert_eq!(code, 0, "{err}");
    assert!(json(&out)["resolved_scenario"].to_string().contains("38"));
    // A code set in the same command line is the user's: checked, with what to set instead.
    let (code, _, err) = run(&["validate", q, "--set", "protocol.name=nowait", "--set", "protocol.mode=Code(38)"]);
    assert_eq!(code, 2, "{err}");
    for want in ["protocol.mode", "NOWAIT has no stage for bit(s) read (2), validate (32)", "Rpc, Onesided", "Code(4)"]
    {
        assert!(err.contains(want), "{want:?} not in {err}");
    }
}

/// Item 2: values `validate` used to pass aborted `run` on an allocation; now both refuse
/// them at once (no allocation happens), with the estimate.
#[test]
fn scenarios_too_big_for_memory_are_refused_with_the_estimate() {
    let q = "scenarios/quickstart.ron";
    let cases: &[(&[&str], &[&str])] = &[
        (&["workload.accounts_per_node=18446744073709551615"], &["workload:", "more than 2^64 bytes"]),
        (&["workload.accounts_per_node=2000000000"], &["workload:", "needs about", "records and index"]),
        (
            &["cluster.nodes=1024", "cluster.workers=256", "cluster.coroutines=1024"],
            &["needs about", "TiB", "log rings", "coroutines", "x 1024 node(s)"],
        ),
    ];
    for (sets, want) in cases {
        for cmd in ["validate", "run"] {
            let mut args = vec![cmd, q];
            for s in *sets {
                args.extend(["--set", s]);
            }
            let t = Instant::now();
            let (code, _, err) = run(&args);
            assert_eq!(code, 2, "{cmd} {sets:?}: {err}");
            for w in *want {
                assert!(err.contains(w), "{cmd} {sets:?}: {w:?} not in {err}");
            }
            // On a machine that says how much it has, the message compares with it.
            if std::path::Path::new("/proc/meminfo").exists() && err.contains("needs about") {
                assert!(err.contains("MemAvailable"), "{err}");
            }
            assert!(t.elapsed() < Duration::from_secs(5), "{cmd} {sets:?} took {:?}", t.elapsed());
        }
    }
    // What fits says its estimate.
    let (code, out, err) = run(&["validate", q]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok (memory: about") && out.contains("x 4 node(s)"), "{out}");
}

/// Item 3: every numeric error names the field path (and file:line:column for files) and
/// what the field takes.
#[test]
fn numeric_errors_name_the_field_and_what_it_takes() {
    let d = scratch("numbers");
    let f = d.join("neg.ron");
    std::fs::write(
        &f,
        "Scenario(\n  cluster: (coroutines: -1),\n  protocol: Some((name: Occ)),\n  workload: SmallBank(()),\n)\n",
    )
    .unwrap();
    let (code, _, err) = run(&["validate", f.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("neg.ron:2:"), "{err}");
    assert!(err.contains("cluster.coroutines: expected a whole number in 1..=1024, got -1"), "{err}");
    let q = "scenarios/quickstart.ron";
    let cases = [
        (
            "cluster.nodes=99999999999999999999",
            "cluster.nodes: expected a whole number in 2..=1024, got 99999999999999999999",
        ),
        ("run.warmup_us=1e10", "run.warmup_us: expected a whole number in 0..=10000000, got 1e10"),
        ("run.warmup_us=10000000000", "run.warmup_us: must be 0..=10000000, got 10000000000"),
        ("cluster.workers=-3", "cluster.workers: expected a whole number in 1..=256, got -3"),
        (
            "workload.accounts_per_node=0.5",
            "workload.accounts_per_node: expected a whole number in 0..=18446744073709551615, got 0.5",
        ),
        ("workload.hot_probability=lots", "workload.hot_probability: expected a number, got lots"),
    ];
    for (set, want) in cases {
        for cmd in ["validate", "run"] {
            let (code, _, err) = run(&[cmd, q, "--set", set]);
            assert_eq!(code, 2, "{cmd} {set}: {err}");
            assert!(err.contains(want), "{cmd} {set}:\n  want {want}\n  got  {err}");
            assert!(!err.contains("measure_us"), "{cmd} {set} blames another field: {err}");
        }
    }
}

/// Item 4: `validate` takes the `--set` edits `run` takes and checks the result.
#[test]
fn validate_takes_set() {
    let q = "scenarios/quickstart.ron";
    let (code, out, err) = run(&["validate", q, "--set", "cluster.nodes=8", "--set", "protocol.name=mvcc"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("x 8 node(s)"), "{out}");
    let (code, _, err) = run(&["validate", q, "--set", "cluster.nodes=1"]);
    assert_eq!(code, 2);
    assert!(err.contains("(with --set): cluster.nodes: must be at least 2"), "{err}");
    let (code, _, err) = run(&["validate", q, "--set", "cluster.nodez=3"]);
    assert_eq!(code, 2);
    assert!(err.contains("--set cluster.nodez=3") && err.contains("nodez"), "{err}");
}

/// Item 5: a --set value that is not in the file's syntax is a bare string where the field
/// is a string: an absolute path to a NIC profile needs no double quoting.
#[test]
fn set_takes_bare_strings_for_string_fields() {
    let d = scratch("nic");
    let nic = d.join("my-cx4.ron");
    std::fs::copy(root().join("scenarios/nics/cx4.ron"), &nic).unwrap();
    let set = format!("cluster.nic={}", nic.display());
    let q = "scenarios/quickstart.ron";
    let (code, out, err) = run(&["validate", q, "--set", &set]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(": ok"), "{out}");
    let (code, out, err) = run(&["run", q, "--set", &set, "--set", "run.measure_us=50", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(json(&out)["resolved_scenario"].to_string().contains("my-cx4.ron"), "{out}");
    // The quoted form still works; a missing file is named.
    let (code, _, err) = run(&["validate", q, "--set", &format!("cluster.nic=\"{}\"", nic.display())]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&["validate", q, "--set", "cluster.nic=/nonexistent/x.ron"]);
    assert_eq!(code, 2);
    assert!(err.contains("cluster.nic: /nonexistent/x.ron"), "{err}");
    // A number field does not take a string: the number's message stands.
    let (code, _, err) = run(&["validate", q, "--set", "cluster.nodes=/x"]);
    assert_eq!(code, 2);
    assert!(err.contains("--set cluster.nodes=/x"), "{err}");
}

/// Item 6: a lossy link without copying a profile, by --set and in the scenario file: the
/// run changes (another digest), retries what was lost and stays serializable.
#[test]
fn lossy_link_by_nic_override() {
    let q = "scenarios/quickstart.ron";
    let base = ["run", q, "--json", "--set", "run.measure_us=300", "--set", "protocol.mode=rpc"];
    let (code, out, err) = run(&base);
    assert_eq!(code, 0, "{err}");
    let clean = json(&out);
    let mut lossy = base.to_vec();
    lossy.extend(["--set", "nic.reliability.ud_drop_probability=0.01"]);
    let (code, out, err) = run(&lossy);
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    assert_eq!(r["nic_overrides"]["reliability.ud_drop_probability"], 0.01, "{}", r["nic_overrides"]);
    assert_ne!(r["digest"], clean["digest"]);
    assert_eq!(r["check"]["serializable"], true);
    assert!(r["committed"].as_u64().unwrap() > 100);
    let (code, _, err) = run(&["validate", q, "--set", "nic.reliability.ud_drop_probability=0.01"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&["validate", q, "--set", "nic.reliability.ud_drop_probability=2"]);
    assert_eq!(code, 2);
    assert!(err.contains("nic.reliability.ud_drop_probability"), "{err}");
    // The scenario-file form gives the same run.
    let d = scratch("lossy");
    let f = d.join("lossy.ron");
    let text = std::fs::read_to_string(root().join(q))
        .unwrap()
        .replace("    protocol:", "    nic: Some((reliability: (ud_drop_probability: 0.01))),\n    protocol:");
    std::fs::write(&f, text).unwrap();
    let (code, out, err) =
        run(&["run", f.to_str().unwrap(), "--json", "--set", "run.measure_us=300", "--set", "protocol.mode=rpc"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["digest"], r["digest"]);
}
