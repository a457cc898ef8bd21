//! `ctx.clock()` on real backends: the host's CLOCK_REALTIME with the bound the run
//! configures (`run.clock_bound_us`). No sync service runs here: chrony or ptp4l keep the host
//! clock within that bound, and docs/clocks.md says how to measure it.

use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

use txbed_transport::clock::{ClockSource, Discipline, NodeClock};
use txbed_transport::Nanos;

/// The host's clock, read at each call (the worker's monotonic time is not needed).
pub struct HostClock;

impl ClockSource for HostClock {
    fn local_ns(&self, _now: Nanos) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
            Err(e) => -(e.duration().as_nanos().min(i64::MAX as u128) as i64),
        }
    }
}

/// A worker's clock: Unix time in ns, bound `bound_ns`.
pub fn host_clock(bound_ns: u64) -> Rc<NodeClock> {
    Rc::new(NodeClock::new(Rc::new(HostClock), Discipline::Free { bound_ns }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_unix_time_with_the_configured_bound() {
        let c = host_clock(30_000);
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
        let r = c.read(0);
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
        assert!(before <= r.now_ns && r.now_ns <= after);
        assert_eq!(r.bound_ns, 30_000);
    }
}
