//! Many simulations at once (sweeps, hybrid searches, sensitivity analyses): each run is its
//! own single-threaded, deterministic simulation; parallelism is only across runs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use txbed_scenario::sweep::Point;

use crate::report::TxnReport;

/// Runs `points` on `jobs` threads; results in point order. `done` is called after each run
/// (from the thread that ran it), e.g. to advance a progress bar.
pub fn run_points(points: &[Point], jobs: usize, done: &(dyn Fn() + Sync)) -> Vec<Result<TxnReport, String>> {
    map_parallel(
        points,
        jobs,
        &|p| {
            crate::from_scenario::run_txn(&p.scenario, &p.profile, p.seed, false, &mut |_, _| {})
                .map(|run| run.report(&p.scenario, p.seed))
        },
        done,
    )
}

/// `f` on every item, on `jobs` threads; results in item order. `done` is called after each.
pub fn map_parallel<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: &(dyn Fn(&T) -> R + Sync),
    done: &(dyn Fn() + Sync),
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|sc| {
        for _ in 0..jobs.max(1).min(items.len().max(1)) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                results.lock().expect("results")[i] = Some(r);
                done();
            });
        }
    });
    results.into_inner().expect("results").into_iter().map(|r| r.expect("every item ran")).collect()
}
