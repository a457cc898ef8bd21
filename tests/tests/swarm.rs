//! Swarm testing (issue 17 item 7), in the spirit of TigerBeetle's VOPR: each case draws, from
//! its own seed, every protocol of the registry, a mode (RPC, one-sided or any hybrid code), a
//! workload, a cluster shape, and fault settings (UD loss, per-link extra delays, two data
//! centers joined by a lossy RDMA or TCP-like link with a delay distribution), runs it on
//! the simulator and requires the checker's verdict clean (serializable, nothing lost,
//! invariants) with no failed coordinator. A failure prints the `txbed run` command that
//! replays it exactly. Crashes, partitions, reordering and clock offsets join the draw when the
//! scenario's `faults` section exists.
//!
//! `TXBED_SWARM_CASES=N` draws more cases (default 36, CI-sized), `TXBED_SWARM_FROM=K` starts
//! at case K.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use txbed_scenario::Scenario;
use txbed_txn::stage::Hybrid;

const BASE: &str = "scenarios/quickstart.ron";

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The `--set` edits of swarm case `case`.
fn draw(case: u64, data_centers: bool) -> Vec<String> {
    let mut rng = ChaCha8Rng::seed_from_u64(case ^ 0x5a5a_0017);
    let protocols = txbed_protocols::REGISTRY;
    // Protocols in turn (the draw is kept for the other parameters' streams), so every
    // protocol runs in any run of `REGISTRY.len()` consecutive cases.
    let _ = rng.gen_range(0..protocols.len());
    let p = protocols[case as usize % protocols.len()];
    let codes = Hybrid::all_codes(p.stages());
    let mode = match rng.gen_range(0..4) {
        0 => "rpc".to_string(),
        1 => "onesided".to_string(),
        _ => format!("Code({})", codes[rng.gen_range(0..codes.len())].0),
    };
    // Mostly small clusters; one case in five is larger and busier, where contention and
    // loss meet (the shapes earlier bugs needed).
    let big = rng.gen_bool(0.2);
    let nodes: u16 = if big { rng.gen_range(4..=8) } else { rng.gen_range(2..=5) };
    let (workers, coroutines) =
        if big { (rng.gen_range(2..=4), rng.gen_range(4..=16)) } else { (rng.gen_range(1..=3), rng.gen_range(1..=6)) };
    // A protocol with server workers (the lock table) needs one more for its agents.
    let workers = workers.max(p.server_workers(&p.default_options()) + 1);
    let mut sets = vec![
        format!("protocol.name={}", p.name().to_lowercase()),
        format!("protocol.mode={mode}"),
        // One NIC per node: one-sided locking needs atomics atomic across the node's NICs.
        "cluster.nics_per_node=1".into(),
        format!("cluster.nodes={nodes}"),
        format!("cluster.workers={workers}"),
        format!("cluster.coroutines={coroutines}"),
        format!("protocol.replication={}", rng.gen_range(1..=nodes.min(3))),
        "run.warmup_us=20".into(),
        "run.measure_us=200".into(),
        format!("run.seed={}", rng.gen::<u32>()),
    ];
    if rng.gen_bool(0.5) {
        sets.push("workload.name=ycsb".into());
        sets.push(format!("workload.hot_probability={}", [0.0, 0.9, 0.99][rng.gen_range(0..3)]));
    }
    // Faults: UD loss, and long or uneven links.
    if rng.gen_bool(0.4) {
        sets.push(format!("nic.reliability.ud_drop_probability={}", [0.001, 0.01, 0.02][rng.gen_range(0..3)]));
    }
    if rng.gen_bool(0.4) {
        let rows: Vec<String> = (0..nodes)
            .map(|i| {
                let row: Vec<String> = (0..nodes)
                    .map(|j| if i == j || rng.gen_bool(0.5) { "0".into() } else { rng.gen_range(1..=50).to_string() })
                    .collect();
                format!("[{}]", row.join(", "))
            })
            .collect();
        sets.push(format!("cluster.link_delay_us=Some([{}])", rows.join(", ")));
    }
    // Two data centers joined by a slower, lossy link (RDMA or TCP-like).
    if data_centers && rng.gen_bool(0.25) {
        let east = rng.gen_range(1..nodes);
        let delay = match rng.gen_range(0..3) {
            0 => format!("Constant({})", rng.gen_range(5..=60)),
            1 => format!("Uniform(5, {})", rng.gen_range(10..=80)),
            _ => format!("Normal({}, 10)", rng.gen_range(20..=60)),
        };
        let transport = if rng.gen_bool(0.5) {
            "Rdma".to_string()
        } else {
            format!("Tcp((per_message_cpu_ns: {}))", rng.gen_range(0..=2000))
        };
        sets.push(format!("cluster.datacenters=[(nodes: {east}), (nodes: {})]", nodes - east));
        // A protocol that places replicas by data center needs them to fit on distinct nodes
        // there (the scenario check refuses it otherwise): fewer replicas, as placement allows.
        if p.stores_replicas() {
            let dc_of: Vec<u16> = (0..nodes).map(|n| (n >= east) as u16).collect();
            let placement = txbed_txn::placement::Placement::new(&dc_of, nodes);
            let at = sets.iter().position(|s| s.starts_with("protocol.replication=")).unwrap();
            let drawn: u16 = sets[at]["protocol.replication=".len()..].parse().unwrap();
            let fits = (1..=drawn).rev().find(|&r| placement.copy_load(r).is_ok()).unwrap_or(1);
            sets[at] = format!("protocol.replication={fits}");
        }
        sets.push(format!(
            "cluster.inter_dc=Some((delay: {delay}, jitter_us: {}, loss: {}, transport: {transport}))",
            rng.gen_range(0..=10),
            [0.0, 0.001, 0.01][rng.gen_range(0..3)]
        ));
    }
    sets
}

/// Case `case` of the first swarm with a `faults` section drawn from its seed too: node
/// crashes and restarts (one down at a time), partitions, links that drop, duplicate, delay
/// and reorder, slow CPUs, and clocks with offsets, drift, a sync service and steps. Runs are
/// longer, so faults have time to happen and heal.
fn draw_faults(case: u64) -> Vec<String> {
    let mut sets = draw(case, false);
    let mut rng = ChaCha8Rng::seed_from_u64(case ^ 0xfa17_0017);
    let nodes: u16 = sets.iter().find_map(|s| s.strip_prefix("cluster.nodes=")).and_then(|n| n.parse().ok()).unwrap();
    let replication: u16 =
        sets.iter().find_map(|s| s.strip_prefix("protocol.replication=")).and_then(|n| n.parse().ok()).unwrap();
    sets.retain(|s| !s.starts_with("run.measure_us"));
    sets.push("run.measure_us=1500".into());
    let mut gens = Vec::new();
    // Crashes need a node to survive and, with fewer than three copies, NVRAM for the store
    // too: otherwise a crash during another node's rebuild can take a partition's last copy
    // (reported as lost, not a bug).
    if nodes >= 3 && rng.gen_bool(0.5) {
        gens.push(format!("crash: Some((per_ms: {}, down_us: (150, 500)))", [0.3, 0.7, 1.2][rng.gen_range(0..3)]));
    }
    if rng.gen_bool(0.5) {
        gens.push(format!(
            "partition: Some((per_ms: {}, for_us: (10, {}), one_way: 0.3))",
            [0.3, 1.0][rng.gen_range(0..2)],
            [50, 300][rng.gen_range(0..2)]
        ));
    }
    if rng.gen_bool(0.5) {
        gens.push(format!(
            "link: Some((per_ms: {}, for_us: (10, 200), drop: (0.0, {}), duplicate: (0.0, 0.3), delay_us: (0, 20), reorder_us: (0, {})))",
            [0.5, 2.0][rng.gen_range(0..2)],
            [0.1, 0.5, 0.9][rng.gen_range(0..3)],
            [0, 5, 30][rng.gen_range(0..3)]
        ));
    }
    if rng.gen_bool(0.3) {
        gens.push("slow_cpu: Some((per_ms: 0.5, for_us: (10, 100), factor: (1.0, 30.0)))".into());
    }
    if rng.gen_bool(0.3) {
        let interval = [100, 500][rng.gen_range(0..2)];
        sets.push(format!("cluster.clocks=Some((sync: Some((interval_us: {interval}, master: 0))))"));
        gens.push("clock_step: Some((per_ms: 0.5, by_us: (-50, 50)))".into());
        gens.push("clock_drift: Some((per_ms: 0.3, ppm: (-300, 300)))".into());
    }
    if gens.is_empty() {
        gens.push("link: Some((per_ms: 1.0, for_us: (10, 200), drop: (0.0, 0.5), reorder_us: (0, 10)))".into());
    }
    let durable = if replication < 3 { "[Store, Logs]" } else { "[Logs]" };
    sets.push(format!(
        "faults=Some((detect_us: {}, durable: {durable}, random: Some((from_us: 30, max_down: Some(1), {}))))",
        [50, 150][rng.gen_range(0..2)],
        gens.join(", ")
    ));
    sets
}

/// The command that replays case `sets`, as a user types it.
fn command(sets: &[String]) -> String {
    let args: Vec<String> = sets.iter().map(|s| format!("--set '{s}'")).collect();
    format!("cargo run --release -p txbed -- run {BASE} {}", args.join(" "))
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Swarm {
    Plain,
    DataCenters,
    Faults,
}

fn swarm(kind: Swarm) {
    let (from, cases) = (env("TXBED_SWARM_FROM", 0), env("TXBED_SWARM_CASES", 36));
    let mut failed = Vec::new();
    let mut protocols = std::collections::BTreeSet::new();
    let mut runs = 0;
    for case in from..from + cases {
        let sets = match kind {
            Swarm::Plain => draw(case, false),
            Swarm::DataCenters => draw(case, true),
            Swarm::Faults => draw_faults(case),
        };
        protocols.insert(sets[0].clone());
        // A case that drew no data centers is the first swarm's case of that number, run
        // there already.
        if kind == Swarm::DataCenters && sets == draw(case, false) {
            continue;
        }
        runs += 1;
        let (s, profile) = Scenario::load_with(&root().join(BASE), &sets)
            .unwrap_or_else(|e| panic!("case {case} drew an invalid scenario: {e}\n{}", command(&sets)));
        // A panic is a failure of its case, reported with the command like any other.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            txbed_runner::run_txn(&s, &profile, s.run.seed, false, &mut |_, _| {})
        }));
        let run = match ran {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                failed.push(format!("case {case}: {e}\n  {}", command(&sets)));
                continue;
            }
            Err(p) => {
                let msg =
                    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                failed.push(format!("case {case}: PANIC {}\n  {}", msg.unwrap_or_default(), command(&sets)));
                continue;
            }
        };
        let r = &run.result;
        // A protocol that does not survive a fault ends the run with that verdict, and what
        // committed before is still checked: not a failure of the case.
        let verdict = r.faults.as_ref().is_some_and(|f| f.fatal.is_some()) && r.failures.len() == 1;
        if verdict && r.report.clean() {
            continue;
        }
        if !r.clean() {
            let why = if r.failures.is_empty() {
                let rep = &r.report;
                let first = rep.anomalies.first().map_or(String::new(), |a| a.explanation.clone());
                format!(
                    "checker: serializable {}, nothing lost {:?}, invariants {}, {:?}; {first}",
                    rep.serializable, rep.nothing_lost, rep.invariants_ok, rep.counts
                )
            } else {
                format!("{} failed coordinators, e.g. {}", r.failures.len(), r.failures[0])
            };
            failed.push(format!("case {case}: {why}\n  {}", command(&sets)));
        }
    }
    eprintln!("{runs} of {cases} cases run (from case {from}), {} failed", failed.len());
    assert!(
        failed.is_empty(),
        "{} of {runs} swarm cases run failed; replay each with its command:\n{}",
        failed.len(),
        failed.join("\n")
    );
    if cases >= 36 {
        assert_eq!(protocols.len(), txbed_protocols::REGISTRY.len(), "the draw missed a protocol: {protocols:?}");
    }
}

#[test]
fn swarm_of_protocols_modes_shapes_and_faults_is_checked_clean() {
    swarm(Swarm::Plain);
}

/// The same swarm with two data centers in one case of four; it runs only those cases (the
/// others are the first swarm's). It found that an inter-DC link let a small packet overtake a
/// larger one on its RC QP: CALVIN panicked on the torn ring ("message too short"; a malformed
/// message is now a reported failure) and MVCC lost a CAS result (docs/checker.md, "Swarm
/// testing").
#[test]
fn swarm_with_data_centers_is_checked_clean() {
    swarm(Swarm::DataCenters);
}

/// The first swarm's cases with random faults drawn too (`draw_faults`): crashes and
/// restarts, partitions, lossy, duplicating and reordering links, slow CPUs, clock offsets,
/// steps and drift, on every protocol and mode (docs/faults.md).
#[test]
fn swarm_with_scheduled_faults_is_checked_clean() {
    swarm(Swarm::Faults);
}
