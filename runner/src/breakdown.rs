//! Where a run's commits came from and when: counters per (node, worker), and a time series of
//! commits, aborts and latency over the whole run (warm-up included) in fine buckets of
//! simulated time, re-bucketed for the report (issue 16).

use serde::{Deserialize, Serialize};

/// Fine buckets a run's time series is recorded in; the report groups them (`Series::coarse`).
/// A fixed count keeps the recording bounded whatever the run's length.
pub const FINE_BUCKETS: u64 = 1000;

/// One coordinator thread's counts in the measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCounts {
    pub node: u16,
    pub worker: u16,
    pub committed: u64,
    pub aborted: u64,
    /// Sum of the committed transactions' latencies, ns.
    pub latency_ns_sum: u64,
}

impl WorkerCounts {
    pub fn add(&mut self, o: &WorkerCounts) {
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.latency_ns_sum += o.latency_ns_sum;
    }
}

/// Commits, aborts and latency sum of one bucket of simulated time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub committed: u64,
    pub aborted: u64,
    pub latency_ns_sum: u64,
}

impl Bucket {
    fn add(&mut self, o: &Bucket) {
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.latency_ns_sum += o.latency_ns_sum;
    }
}

/// A time series over [0, end) in `FINE_BUCKETS` buckets of `fine_ns` each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Series {
    /// Width of a fine bucket, ns (0: nothing recorded).
    pub fine_ns: u64,
    /// The run's end (warm-up plus window), ns: events at or after it are not recorded.
    pub end_ns: u64,
    pub buckets: Vec<Bucket>,
}

impl Series {
    /// An empty series over [0, end_ns).
    pub fn over(end_ns: u64) -> Series {
        let fine_ns = end_ns.div_ceil(FINE_BUCKETS).max(1);
        Series { fine_ns, end_ns, buckets: vec![Bucket::default(); end_ns.div_ceil(fine_ns) as usize] }
    }

    fn at(&mut self, t_ns: u64) -> Option<&mut Bucket> {
        if self.fine_ns == 0 || t_ns >= self.end_ns {
            return None;
        }
        self.buckets.get_mut((t_ns / self.fine_ns) as usize)
    }

    /// Commits recorded at or after `t_ns` (to the bucket holding it).
    pub fn commits_after(&self, t_ns: u64) -> u64 {
        if self.fine_ns == 0 {
            return 0;
        }
        self.buckets.iter().skip((t_ns / self.fine_ns) as usize).map(|b| b.committed).sum()
    }

    pub fn commit(&mut self, t_ns: u64, latency_ns: u64) {
        if let Some(b) = self.at(t_ns) {
            b.committed += 1;
            b.latency_ns_sum += latency_ns;
        }
    }

    pub fn abort(&mut self, t_ns: u64) {
        if let Some(b) = self.at(t_ns) {
            b.aborted += 1;
        }
    }

    /// Adds another node's series (same run, so the same buckets).
    pub fn add(&mut self, o: &Series) {
        if self.fine_ns == 0 {
            *self = o.clone();
            return;
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            a.add(b);
        }
    }

    /// Buckets of about `width_ns` (a whole number of fine buckets, at least one; the last
    /// may be shorter), as (start ns, end ns, counts).
    pub fn coarse(&self, width_ns: u64) -> Vec<(u64, u64, Bucket)> {
        if self.fine_ns == 0 {
            return Vec::new();
        }
        let k = ((width_ns + self.fine_ns / 2) / self.fine_ns).max(1) as usize;
        self.buckets
            .chunks(k)
            .enumerate()
            .map(|(i, c)| {
                let start = i as u64 * k as u64 * self.fine_ns;
                let end = (start + c.len() as u64 * self.fine_ns).min(self.end_ns);
                let mut sum = Bucket::default();
                c.iter().for_each(|b| sum.add(b));
                (start, end, sum)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_buckets_keep_every_count_and_cover_the_run() {
        let mut s = Series::over(1_100_000);
        for t in (0..1_100_000).step_by(997) {
            s.commit(t, 10);
            s.abort(t);
        }
        s.commit(1_100_000, 5); // at the end: not in the run
        let total = (0..1_100_000u64).step_by(997).count() as u64;
        for width in [1, 55_000, 123_456, 10_000_000] {
            let c = s.coarse(width);
            assert_eq!(c.iter().map(|b| b.2.committed).sum::<u64>(), total, "width {width}");
            assert_eq!(c.iter().map(|b| b.2.aborted).sum::<u64>(), total);
            assert_eq!(c.first().unwrap().0, 0);
            assert_eq!(c.last().unwrap().1, 1_100_000);
            assert!(c.windows(2).all(|w| w[0].1 == w[1].0));
        }
        assert_eq!(s.coarse(55_000).len(), 20);
    }
}
