//! Progress bars on standard error (indicatif hides them when it is not a terminal).

use std::time::Instant;

/// A progress bar on standard error that appears only once a run has taken a second (and
/// only on a terminal: indicatif hides it otherwise).
pub struct Progress {
    start: Instant,
    bar: Option<indicatif::ProgressBar>,
    off: bool,
}

impl Progress {
    pub fn new(off: bool) -> Progress {
        Progress { start: Instant::now(), bar: None, off }
    }
    pub fn update(&mut self, t: u64, end: u64) {
        if self.off {
            return;
        }
        if self.bar.is_none() && self.start.elapsed().as_secs_f64() >= 1.0 {
            let b = indicatif::ProgressBar::new(end / 1000);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} us simulated, eta {eta}")
                    .expect("template"),
            );
            self.bar = Some(b);
        }
        if let Some(b) = &self.bar {
            b.set_position(t / 1000);
        }
    }
    pub fn done(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// A bar over a sweep's runs; hidden when `quiet`.
pub fn runs_bar(runs: usize, quiet: bool) -> indicatif::ProgressBar {
    let bar = if quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(runs as u64) };
    bar.set_style(indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} runs, eta {eta}").expect("template"));
    bar
}
