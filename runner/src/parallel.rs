//! Many simulations at once (sweeps, hybrid searches): each run is its own single-threaded,
//! deterministic simulation; parallelism is only across runs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use txbed_scenario::sweep::Point;

use crate::report::TxnReport;

/// Runs `points` on `jobs` threads; results in point order. `done` is called after each run
/// (from the thread that ran it), e.g. to advance a progress bar.
pub fn run_points(points: &[Point], jobs: usize, done: &(dyn Fn() + Sync)) -> Vec<Result<TxnReport, String>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<TxnReport, String>>>> = Mutex::new((0..points.len()).map(|_| None).collect());
    std::thread::scope(|sc| {
        for _ in 0..jobs.max(1).min(points.len().max(1)) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(p) = points.get(i) else { break };
                let r = crate::from_scenario::run_txn(&p.scenario, &p.profile, p.seed, false, &mut |_, _| {})
                    .map(|run| run.report(&p.scenario, p.seed));
                results.lock().expect("results")[i] = Some(r);
                done();
            });
        }
    });
    results.into_inner().expect("results").into_iter().map(|r| r.expect("every run ran")).collect()
}
