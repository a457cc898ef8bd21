//! `txbed run --backend sockets|verbs`: one process of a real run. Rank 0 gathers the nodes'
//! results, checks the history and prints the report.

use std::time::Instant;

use txbed_report::output::{write_history, RunOutput};
use txbed_report::text::{failure_summary, txn_text};
use txbed_scenario::{Scenario, Workload};
use txbed_sim::NicProfile;

use crate::host::RealBackend;

/// Whether a real backend can emulate `s`'s `faults` with `seed`: sockets, partitions within
/// what RC and the RPC layer go without (`crate::partitions`); verbs, none. The error names the
/// entry and what to do.
pub fn check_faults(s: &Scenario, profile: &NicProfile, seed: u64, verbs: bool) -> Result<(), String> {
    if s.faults.is_none() {
        return Ok(());
    }
    if verbs {
        return Err("faults: the verbs backend cannot hold or drop real RDMA traffic, so it emulates no faults (kill -9 or SIGSTOP a rank to test failure detection, docs/faults.md); run on the simulator (--backend sim), or partitions on sockets (--backend sockets)".into());
    }
    let budget = crate::partitions::budget_ns(profile, crate::host::RPC_RTO_NS, crate::host::RPC_RETRIES);
    crate::partitions::check(s, seed, budget).map(|_| ())
}

/// One process of a real run (sockets or verbs); rank 0 prints the report. Exit code: 0 clean, 1 the checker
/// found anomalies, 2 an error (bad input, a dead or unreachable peer).
#[allow(clippy::too_many_arguments)]
pub fn run_real(
    s: &Scenario,
    profile: &NicProfile,
    seed: u64,
    rank: Option<u32>,
    size: Option<u32>,
    coordinator: Option<&str>,
    backend: RealBackend,
    out: RunOutput<'_>,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let env = |k: &str| std::env::var(k).ok();
    let me = match crate::bootstrap::rank_from(env, rank, size) {
        Ok(m) => m,
        Err(e) => return fail(e.0),
    };
    let coord =
        coordinator.map(str::to_string).or_else(|| env("TXBED_COORDINATOR")).unwrap_or_else(|| "127.0.0.1:7821".into());
    let addr = match crate::bootstrap::coordinator_from(|_| None, Some(&coord)) {
        Ok(a) => a,
        Err(e) => return fail(e.0),
    };
    if matches!(s.workload, Workload::Verbs(_)) {
        return fail("real backends run transactional scenarios; Verbs workloads run on the simulator".into());
    }
    if s.cluster.clocks.is_some() {
        return fail(
            "cluster.clocks models simulated clocks; real backends use the host's clock with run.clock_bound_us as its bound (docs/clocks.md): remove cluster.clocks".into(),
        );
    }
    let verbs = !matches!(backend, crate::host::RealBackend::Sockets { .. });
    if let Err(e) = check_faults(s, profile, seed, verbs) {
        return fail(e);
    }
    let mut spec = match txbed_runner::txn_spec(s, profile, seed) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    if let Err(e) = crate::wan::emulate(s, &mut spec, verbs) {
        return fail(e);
    }
    // Rank 0 writes the files: its output directory is readied before anything runs.
    if me.rank == 0 {
        if let Err(e) = out.prepare() {
            return fail(e);
        }
    }
    let start = Instant::now();
    let name = match backend {
        crate::host::RealBackend::Sockets { .. } => "sockets",
        #[cfg(feature = "verbs")]
        crate::host::RealBackend::Verbs { .. } => "verbs",
    };
    let failure_timeout = std::time::Duration::from_millis(s.run.failure_timeout_ms);
    match crate::host::run_real_node(&spec, me, addr, backend, failure_timeout) {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(mut r)) => {
            if let Err(e) = write_history(s, seed, &mut r.history, out.history_path().as_deref()) {
                return fail(e);
            }
            let rep = txbed_runner::report::txn_report(s, &spec, seed, &r, start.elapsed().as_secs_f64(), name);
            if let Err(e) = out.finish(s, &rep, &txn_text(s, &rep)) {
                return fail(e);
            }
            if let Some(Err(e)) = out.dir.map(txbed_report::html::write_page) {
                return fail(e);
            }
            if rep.committed == 0 {
                eprintln!(
                    "note: nothing committed in the {} us window; a real backend counts wall-clock time, \
                     so give it a longer one, e.g. --warmup-us 100000 --measure-us 1000000",
                    s.run.measure_us
                );
            }
            if !r.failures.is_empty() {
                return fail(failure_summary(&r.failures));
            }
            if out.strict && !rep.warnings.is_empty() {
                eprintln!("--strict: {} warning(s): {}", rep.warnings.len(), rep.warnings.join("; "));
                return ExitCode::from(1);
            }
            if r.clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => fail(format!("rank {}: {e}", me.rank)),
    }
}
