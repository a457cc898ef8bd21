//! Planted-bug histories kept as fixtures (checker/tests/fixtures/elle, made by its
//! regenerate.sh): `txbed check` names each one's anomaly, its Elle exports are what the
//! exporter writes today, and python/elle_check.py, an independent checker of Elle's
//! list-append form, finds the anomaly in the export too (and none in a correct run's, with
//! real-time order: so the export invents no real-time order).

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::txbed;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("checker/tests/fixtures/elle")
}

fn python() -> String {
    std::env::var("TXBED_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn elle_check(args: &[&str], file: &std::path::Path) -> (i32, serde_json::Value) {
    let root = fixtures().join("../../../../python/elle_check.py");
    let out = Command::new(python()).arg(root).args(args).arg(file).output().expect("python3 runs (CI installs it)");
    let v =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), v)
}

/// (fixture, what txbed check must count, what the Elle-format checker must find).
const CASES: [(&str, &str, &str); 3] = [
    // NOWAIT UnlockBeforeWriteBack: two writers of one version; Elle sees both appends and the
    // cycle they make (G-single).
    ("lost-update", "duplicate-version", "G-single"),
    // OCC SkipValidation: reads another transaction overwrote, committed unvalidated.
    ("stale-read", "G2-item", "G2-item"),
    // NOWAIT AbortAfterWriteBack: a committed transaction read an aborted one's write.
    ("aborted-read", "G1a", "G1a"),
];

#[test]
fn planted_bugs_are_caught_by_txbed_check_and_through_the_export() {
    let dir = common::scratch("elle");
    for (name, txbed_class, elle_class) in CASES {
        let history = fixtures().join(format!("{name}.jsonl"));
        let (la, rw) = (dir.join(format!("{name}.elle.json")), dir.join(format!("{name}.rw.json")));
        let out = txbed()
            .arg("check")
            .arg(&history)
            .args(["--json", "--export-elle"])
            .arg(&la)
            .arg("--export-elle-rw")
            .arg(&rw)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(r["counts"][txbed_class].as_u64().unwrap_or(0) > 0, "{name}: {}", r["counts"]);
        // The exports kept are what the exporter writes now.
        for (made, kept) in [(&la, format!("{name}.elle.json")), (&rw, format!("{name}.rw.json"))] {
            assert!(
                std::fs::read(made).unwrap() == std::fs::read(fixtures().join(&kept)).unwrap(),
                "{kept} is stale: run regenerate.sh"
            );
        }
        let (code, v) = elle_check(&[], &fixtures().join(format!("{name}.elle.json")));
        assert_eq!(code, 1, "{name}: {v}");
        assert!(v["anomaly-types"].as_array().unwrap().iter().any(|t| t == elle_class), "{name}: {v}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_correct_run_exports_clean_even_under_real_time_order() {
    let history = fixtures().join("clean.jsonl");
    let out = txbed().arg("check").arg(&history).arg("--strict").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let export = fixtures().join("clean.elle.json");
    let (code, v) = elle_check(&["--realtime"], &export);
    assert_eq!(code, 0, "{v}");
    // Mutated: the first transaction whose append someone read is now a failed one, so the
    // read is an aborted read; the checker must say so.
    let mut ops: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&export).unwrap()).unwrap();
    let read_values: Vec<u64> = ops
        .iter()
        .filter(|o| o["type"] == "ok")
        .flat_map(|o| o["value"].as_array().unwrap().clone())
        .filter(|m| m[0] == "r")
        .flat_map(|m| m[2].as_array().cloned().unwrap_or_default())
        .filter_map(|x| x.as_u64())
        .collect();
    let victim = ops
        .iter()
        .position(|o| {
            o["type"] == "ok"
                && o["value"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m[0] == "append" && read_values.contains(&m[2].as_u64().unwrap()))
        })
        .expect("some append is read");
    ops[victim]["type"] = "fail".into();
    let dir = common::scratch("elle-mutated");
    let mutated = dir.join("mutated.json");
    std::fs::write(&mutated, serde_json::to_vec(&ops).unwrap()).unwrap();
    let (code, v) = elle_check(&[], &mutated);
    assert_eq!(code, 1, "{v}");
    assert!(v["anomaly-types"].as_array().unwrap().iter().any(|t| t == "G1a"), "{v}");
    std::fs::remove_dir_all(&dir).unwrap();
}
