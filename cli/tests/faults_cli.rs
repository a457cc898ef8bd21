//! Faults from the command line (issue 17): the fault scenarios validate and run checked,
//! writing an expanded schedule that replays to the same digest; bad values exit 2 naming the
//! field; real backends refuse what they cannot emulate (exit 2, naming the entry); passive ACK
//! is refused.

use crate::common;

use common::{finish, free_port, out, scratch, start_rank, txbed};

use std::time::Duration;

fn digest(text: &str) -> String {
    text.lines().find_map(|l| l.trim().strip_prefix("digest")).map(|d| d.trim().to_string()).expect("a digest line")
}

#[test]
fn the_fault_scenarios_validate_and_run_checked() {
    for f in ["crash-restart", "partition", "clock-step", "random"] {
        let path = format!("scenarios/faults/{f}.ron");
        let (code, _, err) = out(txbed().args(["validate", &path]));
        assert_eq!(code, Some(0), "{f}: {err}");
        let (code, stdout, err) = out(txbed().args(["run", &path]));
        assert_eq!(code, Some(0), "{f}: {err}");
        assert!(
            stdout.contains("serializable: yes, nothing lost") && stdout.contains("  faults     "),
            "{f}: {stdout}"
        );
    }
}

/// The scenario a run writes holds the schedule its generators drew: running it gives the
/// same digest, and it holds no generator any more.
#[test]
fn a_random_run_replays_from_the_scenario_it_writes() {
    let dir = scratch("faults-replay");
    let (code, first, err) =
        out(txbed().args(["run", "scenarios/faults/random.ron", "--seed", "5", "--out"]).arg(&dir));
    assert_eq!(code, Some(0), "{err}");
    let written = dir.join("scenario.ron");
    let text = std::fs::read_to_string(&written).unwrap();
    assert!(text.contains("schedule: [") && !text.contains("RandomFaults"), "{text}");
    let (code, again, err) = out(txbed().arg("run").arg(&written));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(digest(&first), digest(&again));
}

#[test]
fn bad_faults_exit_2_naming_the_field() {
    let cases: &[(&str, &str)] = &[
        ("faults.detect_us=0", "faults.detect_us: must be 1..="),
        (
            "faults.schedule=[(at_us: 400, fault: Crash(node: 2)), (at_us: 500, fault: Restart(node: 2))]",
            "faults.schedule[1].at_us: node 2 restarts 100 us after its crash",
        ),
        ("faults.schedule=[(at_us: 400, fault: Crash(node: 7))]", "faults.schedule[0].fault.node"),
        ("faults.durable=[Disk]", "Disk"),
    ];
    for (set, want) in cases {
        let (code, _, err) = out(txbed().args(["run", "scenarios/faults/crash-restart.ron", "--set", set]));
        assert_eq!(code, Some(2), "{set}: {err}");
        assert!(err.contains(want), "{set}: {err}");
    }
}

#[test]
fn passive_ack_is_refused_under_faults() {
    let (code, _, err) =
        out(txbed().args(["run", "scenarios/faults/crash-restart.ron", "--set", "protocol.rdma.passive_ack=true"]));
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("passive ACK"), "{err}");
}

/// What the sockets backend cannot emulate is refused naming the entry (exit 2, before any
/// peer is contacted): a crash in the schedule, a random crash generator, a partition longer
/// than RC's retry budget. Verbs refuses every fault, built with the feature or not.
#[test]
fn real_backends_refuse_what_they_cannot_emulate() {
    let sockets = |scenario: &str, sets: &[&str]| {
        let mut args = vec![];
        for s in sets {
            args.extend(["--set", s]);
        }
        let o = finish(start_rank(scenario, 0, 5, free_port(), &args), Duration::from_secs(30));
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let want = [
        (
            sockets("scenarios/faults/crash-restart.ron", &[]),
            "faults.schedule[0]: the sockets backend cannot emulate Crash (kill -9 or SIGSTOP a rank",
        ),
        (
            sockets(
                "scenarios/faults/crash-restart.ron",
                &["faults.schedule=[(at_us: 400, fault: Partition(a: [0], b: [1], for_us: 100)), (at_us: 500, fault: SlowCpu(node: 1, factor: 2.0, for_us: 10))]"],
            ),
            "faults.schedule[1]: the sockets backend cannot emulate SlowCpu",
        ),
        (sockets("scenarios/faults/random.ron", &[]), "faults.random.crash: the sockets backend cannot emulate Crash"),
        (
            sockets("scenarios/faults/partition.ron", &[]),
            "faults.schedule[0].fault.for_us: a 300 us partition is longer than RC's retry budget on this NIC profile (reliability.rc_timeout_ns 32768 x rc_retry_count 7 = 229 us)",
        ),
        (
            sockets(
                "scenarios/faults/random.ron",
                &["faults=Some((random: Some((partition: Some((per_ms: 0.5, for_us: (20, 300), one_way: 0.3))))))"],
            ),
            "faults.random.partition.for_us: partitions up to 300 us are longer than RC's retry budget",
        ),
    ];
    for ((code, err), want) in want {
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(want), "want {want:?}, got {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let (code, _, err) = out(txbed().args(["run", "scenarios/faults/partition-sockets.ron", "--backend", "verbs"]));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("faults: the verbs backend cannot hold or drop real RDMA traffic"), "{err}");
}
