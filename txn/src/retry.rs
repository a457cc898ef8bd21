//! What a coordinator does after a conflict aborts an attempt. It always retries the same
//! transaction (same type, same keys), as every seed's benchmark loop does; the policy is only
//! how long it waits first.

use serde::{Deserialize, Serialize};

/// The wait before retrying an aborted transaction (`run.retry` in a scenario).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Retry {
    /// Yield once to the worker's other coroutines, then retry at once: the benchmark loop of
    /// RCC and DrTM+H (`BenchWorker::worker_routine`: on abort, `yield_next`, reset the
    /// transaction's random seed, `goto abort_retry`). No timed back-off.
    #[serde(alias = "yield")]
    Yield,
    /// Randomised exponential back-off: after the k-th abort of a transaction, sleep a uniform
    /// time in [0, min(max_us, first_us x 2^(k-1))), then retry.
    #[serde(alias = "backoff")]
    Backoff {
        /// Window after the first abort, us.
        first_us: u64,
        /// Largest window, us.
        max_us: u64,
    },
}

impl Default for Retry {
    fn default() -> Self {
        Retry::DEFAULT
    }
}

impl Retry {
    /// The default: windows of 2, 4, ..., 64 us. A deterministic run has no timing noise, so
    /// coroutines that abort each other and `Yield` retry in lock-step and collide again,
    /// which the jitter of real machines (cache misses, interrupts) prevents; a short random
    /// wait, at most a few transaction latencies, stands in for that jitter. `Yield` is the
    /// seeds' loop exactly (docs/transactions.md, "After an abort").
    pub const DEFAULT: Retry = Retry::Backoff { first_us: 2, max_us: 64 };

    /// The back-off window after the `aborts`-th abort (>= 1), ns; 0 for `Yield`.
    pub fn window_ns(self, aborts: u32) -> u64 {
        match self {
            Retry::Yield => 0,
            Retry::Backoff { first_us, max_us } => {
                let doublings = aborts.saturating_sub(1).min(40);
                (first_us.saturating_mul(1000) << doublings).min(max_us.saturating_mul(1000))
            }
        }
    }

    /// Checks the values a user wrote.
    pub fn check(self) -> Result<(), String> {
        match self {
            Retry::Yield => Ok(()),
            Retry::Backoff { first_us, max_us } => {
                if first_us == 0 || first_us > max_us {
                    return Err(format!(
                        "Backoff needs 1 <= first_us <= max_us, got first_us {first_us}, max_us {max_us}"
                    ));
                }
                if max_us > 10_000_000 {
                    return Err(format!("Backoff max_us is at most 10000000 (10 s), got {max_us}"));
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_double_up_to_the_cap() {
        let r = Retry::Backoff { first_us: 2, max_us: 64 };
        let w: Vec<u64> = (1..=8).map(|k| r.window_ns(k)).collect();
        assert_eq!(w, [2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 64_000, 64_000]);
        assert_eq!(Retry::Yield.window_ns(5), 0);
        assert_eq!(Retry::Backoff { first_us: 1, max_us: 10_000_000 }.window_ns(u32::MAX), 10_000_000_000);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Retry::Backoff { first_us: 0, max_us: 1 }.check().is_err());
        assert!(Retry::Backoff { first_us: 5, max_us: 4 }.check().is_err());
        assert!(Retry::Backoff { first_us: 1, max_us: 20_000_000 }.check().is_err());
        assert!(Retry::DEFAULT.check().is_ok());
        assert!(Retry::Backoff { first_us: 2, max_us: 64 }.check().is_ok());
    }
}
