//! `txbed list`, `txbed completions` and `txbed man`.

use assert_cmd::Command;
use std::path::PathBuf;

fn txbed() -> Command {
    let mut c = Command::cargo_bin("txbed").expect("binary built");
    c.current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap());
    c
}

fn list(args: &[&str]) -> Vec<(String, String)> {
    let out = txbed().arg("list").args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap().to_string(), r["description"].as_str().unwrap().to_string()))
        .collect()
}

fn long_form(cmd: &str) -> serde_json::Value {
    let out = txbed().args([cmd, "--json"]).output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `list protocols` and `list workloads` name exactly what the long forms list, each with a
/// non-empty one-line description.
#[test]
fn list_matches_the_registries() {
    for (what, cmd) in [("protocols", "protocols"), ("workloads", "workloads")] {
        let long: Vec<String> =
            long_form(cmd).as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string()).collect();
        let short = list(&[what]);
        assert_eq!(short.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), long, "{what}");
        assert!(short.iter().all(|(_, d)| !d.is_empty() && !d.contains('\n')), "{short:?}");
    }
    let presets = list(&["presets"]);
    let long = long_form("protocols");
    let expected: usize = long.as_array().unwrap().iter().map(|p| p["presets"].as_array().unwrap().len()).sum();
    assert_eq!(presets.len(), expected);
    assert!(presets.iter().any(|(n, _)| n == "OCC Drtmh"), "{presets:?}");
    let nics = list(&["nics"]);
    assert!(["cx3", "cx4", "cx5", "roce-cx4"].iter().all(|n| nics.iter().any(|(m, _)| m == n)), "{nics:?}");
}

/// Every hybrid code of a protocol, each saying which stages run one-sided and which by RPC.
#[test]
fn list_codes_spells_out_each_code() {
    let occ = list(&["codes", "--protocol", "occ"]);
    let stages = long_form("protocols")[2]["stages"].as_array().unwrap().len();
    assert_eq!(occ.len(), 1 << stages);
    let c38 = occ.iter().find(|(n, _)| n == "OCC 38").expect("code 38");
    assert_eq!(c38.1, "one-sided: read, log, validate; rpc: lock, release, commit");
    assert_eq!(occ[0].1, "rpc: lock, read, log, release, commit, validate");
    let out = txbed().args(["list", "codes", "--protocol", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("protocols are NOWAIT"));
}

/// Scenario and sweep files with their first sentence; NIC profiles are not scenarios.
#[test]
fn list_scenarios_reads_the_directory() {
    let all = list(&["scenarios"]);
    let quick = all.iter().find(|(n, _)| n.ends_with("quickstart.ron")).expect("quickstart");
    assert_eq!(quick.1, "OCC on SmallBank, 4 simulated nodes of ConnectX-4: the first thing to run.");
    assert!(all.iter().any(|(n, d)| n.ends_with("contention.ron") && d.starts_with("sweep: ")));
    assert!(!all.iter().any(|(n, _)| n.contains("nics")), "{all:?}");
    let out = txbed().args(["list", "scenarios", "--dir", "no/such/dir"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/dir"));
}

/// Completions and man pages come from the same clap definition as the real flags.
#[test]
fn completions_and_man_pages_know_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let out = txbed().args(["completions", shell]).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("hybrid-search") && text.contains("measure-us"), "{shell}");
    }
    assert_eq!(txbed().args(["completions", "tcsh"]).output().unwrap().status.code(), Some(2));
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-man");
    txbed().args(["man", "--out"]).arg(&dir).assert().success();
    let run = std::fs::read_to_string(dir.join("txbed-run.1")).unwrap();
    assert!(run.contains("seed") && run.contains(".TH"), "{run}");
    assert!(dir.join("txbed.1").is_file() && dir.join("txbed-list.1").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}
