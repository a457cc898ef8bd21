//! Progress bars on standard error (indicatif hides them when it is not a terminal).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Runs shorter than this show no bar.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// A progress bar on standard error that appears only once a run has taken a second (and
/// only on a terminal: indicatif hides it otherwise).
///
/// The bar exists, hidden, from the start, so its ETA estimator sees every update: a bar made
/// only at the one-second mark saw the position jump from 0 to wherever the run was in its
/// first update, a rate so high that the estimated time left stayed near 0 s for the rest of
/// the run (indicatif forgets old rates over about 15 s).
pub struct Progress {
    start: Instant,
    bar: Option<ProgressBar>,
    shown: bool,
}

impl Progress {
    pub fn new(off: bool) -> Progress {
        let bar = (!off).then(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            b.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} us simulated, eta {eta}").expect("template"),
            );
            b
        });
        Progress { start: Instant::now(), bar, shown: false }
    }
    pub fn update(&mut self, t: u64, end: u64) {
        let Some(b) = &self.bar else { return };
        if b.length() != Some(end / 1000) {
            b.set_length(end / 1000);
        }
        b.set_position(t / 1000);
        if !self.shown && self.start.elapsed() >= SHOW_AFTER {
            b.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
    }
    pub fn done(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// A bar over a sweep's runs; hidden when `quiet`.
pub fn runs_bar(runs: usize, quiet: bool) -> ProgressBar {
    counted_bar(runs, "runs", quiet)
}

/// A bar over `n` things named `what` (on a terminal only); hidden when `quiet`.
pub fn counted_bar(n: usize, what: &str, quiet: bool) -> ProgressBar {
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(n as u64) };
    bar.set_style(
        ProgressStyle::with_template(&format!("{{bar:40}} {{pos}}/{{len}} {what}, eta {{eta}}")).expect("template"),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_follows_the_rate_past_the_moment_the_bar_appears() {
        // 100 us simulated in 20 ms steps: 2 s in all. At 57% (past the one-second mark at
        // which the bar appears) about 0.86 s are left.
        let mut p = Progress::new(false);
        for k in 0..=57u64 {
            p.update(k * 1000, 100_000);
            std::thread::sleep(Duration::from_millis(20));
        }
        let eta = p.bar.as_ref().unwrap().eta();
        assert!(eta > Duration::from_millis(200) && eta < Duration::from_secs(10), "eta {eta:?} at 57%");
        p.done();
    }
}
