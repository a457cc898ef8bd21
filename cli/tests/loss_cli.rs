//! Runs under UD loss (issue 17, item 8), end to end: each is checked, and none fails.

use assert_cmd::Command;
use std::path::PathBuf;

fn run(scenario: &str, protocol: &str, drop: &str, seed: u64) -> (bool, String, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let out = Command::cargo_bin("txbed")
        .unwrap()
        .current_dir(root)
        .args(["run", scenario, "--seed", &seed.to_string()])
        .args(["--set", &format!("protocol.name={protocol}"), "--set", "protocol.mode=rpc"])
        .args(["--set", &format!("nic.reliability.ud_drop_probability={drop}")])
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// WAITDIE over RPC at 1% loss: a lock granted to a waiter whose reply is lost is granted
/// again to its retransmission (the run used to fail with "got no reply after 4 attempts").
#[test]
fn waitdie_over_rpc_under_loss_gets_every_reply() {
    for seed in [1, 2] {
        let (ok, out, err) = run("scenarios/rcc/ycsb-high.ron", "waitdie", "0.01", seed);
        assert!(ok && !err.contains("no reply"), "seed {seed}:\n{out}\n{err}");
        assert!(out.contains("serializable: yes, nothing lost"), "seed {seed}:\n{out}");
    }
}

/// CALVIN over RPC at 1% and 5% loss: every transaction that ran is in the history (a
/// coordinator used to give up on its submission while the sequencer held it; the
/// transaction then ran unrecorded and the checker saw "lost writes").
#[test]
fn calvin_over_rpc_under_loss_records_every_transaction() {
    for (drop, seed) in [("0.05", 1), ("0.05", 2), ("0.01", 1)] {
        let (ok, out, err) = run("scenarios/quickstart.ron", "calvin", drop, seed);
        assert!(ok && !err.contains("failed"), "{drop} seed {seed}:\n{out}\n{err}");
        assert!(out.contains("serializable: yes, nothing lost"), "{drop} seed {seed}:\n{out}");
        assert!(out.contains("invariants hold"), "{drop} seed {seed}:\n{out}");
    }
}

/// The RTO's settings are checked like every profile field: exit 2 naming the field.
#[test]
fn a_bad_rto_floor_is_refused_naming_the_field() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let out = Command::cargo_bin("txbed")
        .unwrap()
        .current_dir(root)
        .args(["run", "scenarios/quickstart.ron", "--set", "nic.reliability.rpc_rto_min_ns=0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nic.reliability.rpc_rto_min_ns") && err.contains("at least 1"), "{err}");
}
