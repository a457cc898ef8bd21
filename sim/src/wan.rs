//! Links between data centers (RedT's heterogeneous network: RDMA inside a DC, slow, jittery,
//! lossy links between DCs). Nodes inside one DC talk over the NIC profile's fabric; a message
//! between DCs also crosses its DC pair's [`WanLink`]: it queues for the link's bandwidth,
//! may be lost (a datagram over RDMA is gone; RC and TCP retransmit), and takes a one-way
//! delay drawn from a distribution plus jitter. Draws come from the simulator's seeded RNG
//! (a stream of its own), so runs stay deterministic.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

/// One-way delay of a message between two data centers, microseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Delay {
    /// Always this many us.
    #[serde(alias = "constant")]
    Constant(f64),
    /// Uniform in [lo, hi] us.
    #[serde(alias = "uniform")]
    Uniform(f64, f64),
    /// Normal with this mean and standard deviation, us; draws below 0 count as 0.
    #[serde(alias = "normal")]
    Normal(f64, f64),
    /// A measured CDF: (us, cumulative probability) points, us non-decreasing, probability
    /// increasing to 1. Below the first point's probability the delay is its us; in between,
    /// linear interpolation (the inverse of a piecewise-linear CDF).
    #[serde(alias = "cdf", alias = "CDF")]
    Cdf(Vec<(f64, f64)>),
}

/// The largest one-way delay, jitter or retransmission wait a link may have: 1 s.
pub const MAX_DELAY_US: f64 = 1e6;
/// Points a measured CDF may have.
pub const MAX_CDF_POINTS: usize = 4096;

impl Delay {
    /// Checks the parameters; the error says which value is wrong.
    pub fn check(&self) -> Result<(), String> {
        let us = |what: &str, v: f64| {
            if v.is_finite() && (0.0..=MAX_DELAY_US).contains(&v) {
                Ok(())
            } else {
                Err(format!("{what} must be 0..={MAX_DELAY_US} us, got {v}"))
            }
        };
        match self {
            Delay::Constant(c) => us("the delay", *c),
            Delay::Uniform(lo, hi) => {
                us("lo", *lo)?;
                us("hi", *hi)?;
                if lo > hi {
                    return Err(format!("Uniform(lo, hi) needs lo <= hi, got ({lo}, {hi})"));
                }
                Ok(())
            }
            Delay::Normal(mean, sd) => {
                us("the mean", *mean)?;
                us("the standard deviation", *sd)
            }
            Delay::Cdf(points) => {
                if points.is_empty() || points.len() > MAX_CDF_POINTS {
                    return Err(format!("a Cdf needs 1..={MAX_CDF_POINTS} (us, p) points, got {}", points.len()));
                }
                for (i, &(u, p)) in points.iter().enumerate() {
                    us(&format!("point {i}'s us"), u)?;
                    if !(p.is_finite() && p > 0.0 && p <= 1.0) {
                        return Err(format!("point {i}'s probability must be in (0, 1], got {p}"));
                    }
                    if i > 0 {
                        let (u0, p0) = points[i - 1];
                        if u < u0 || p <= p0 {
                            return Err(format!(
                                "points must rise: point {i} ({u}, {p}) follows ({u0}, {p0}) (us non-decreasing, probability increasing)"
                            ));
                        }
                    }
                }
                let last = points[points.len() - 1].1;
                if last != 1.0 {
                    return Err(format!("the last point's probability must be 1, got {last}"));
                }
                Ok(())
            }
        }
    }

    /// The delay, us, at quantile `u` in (0, 1).
    pub fn quantile(&self, u: f64) -> f64 {
        match self {
            Delay::Constant(c) => *c,
            Delay::Uniform(lo, hi) => lo + u * (hi - lo),
            Delay::Normal(mean, sd) => match Normal::new(*mean, *sd) {
                Ok(n) if *sd > 0.0 => n.inverse_cdf(u).max(0.0),
                _ => *mean,
            },
            Delay::Cdf(points) => {
                let (u0, p0) = points[0];
                if u <= p0 {
                    return u0;
                }
                let i = points.iter().position(|&(_, p)| p >= u).unwrap_or(points.len() - 1);
                let ((a, pa), (b, pb)) = (points[i - 1], points[i]);
                a + (b - a) * (u - pa) / (pb - pa)
            }
        }
    }

    /// A delay few draws exceed, us: the largest a bounded distribution gives, a Normal's
    /// mean plus four standard deviations (exceeded once in ~30,000 draws).
    pub fn high(&self) -> f64 {
        match self {
            Delay::Constant(c) => *c,
            Delay::Uniform(_, hi) => *hi,
            Delay::Normal(mean, sd) => mean + 4.0 * sd,
            Delay::Cdf(points) => points[points.len() - 1].0,
        }
    }

    /// The distribution's mean, us (a Normal's ignores the cut at 0).
    pub fn mean(&self) -> f64 {
        match self {
            Delay::Constant(c) => *c,
            Delay::Uniform(lo, hi) => (lo + hi) / 2.0,
            Delay::Normal(mean, _) => *mean,
            Delay::Cdf(points) => {
                let mut m = points[0].0 * points[0].1;
                for w in points.windows(2) {
                    m += (w[1].1 - w[0].1) * (w[0].0 + w[1].0) / 2.0;
                }
                m
            }
        }
    }
}

/// How messages cross a link between data centers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum WanTransport {
    /// RDMA stretched over the link: RC retransmits lost packets in the NIC and keeps each
    /// QP's order; a UD datagram lost is gone, and datagrams may overtake each other.
    #[default]
    #[serde(alias = "rdma", alias = "RDMA")]
    Rdma,
    /// TCP-like: one connection per ordered node pair, so nothing overtakes anything on it
    /// (a lost message holds up the later ones until it is retransmitted), and every
    /// message costs CPU on the sending and on the receiving worker.
    #[serde(alias = "tcp", alias = "TCP")]
    Tcp(TcpCosts),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpCosts {
    /// CPU time a message costs the sender's worker, and again the receiver's, ns (kernel
    /// stack, copies, system calls).
    pub per_message_cpu_ns: u32,
}

/// The most CPU a TCP message may cost each side: 1 ms.
pub const MAX_TCP_CPU_NS: u32 = 1_000_000;

/// One direction of the link between two data centers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WanLink {
    pub delay: Delay,
    /// Extra delay, uniform in [0, jitter_us], per message.
    pub jitter_us: f64,
    /// Probability that one transmission of a message is lost.
    pub loss: f64,
    /// Bandwidth of the link, Gbit/s, shared by every message crossing it in this direction;
    /// `None`: only the NICs limit.
    pub gbps: Option<f64>,
    pub transport: WanTransport,
    /// Wait before a lost message of a reliable transport (RC, TCP) is sent again, us;
    /// `None`: one round trip (twice the delay drawn), as a fast retransmit would.
    pub retransmit_us: Option<f64>,
}

/// The highest loss probability a link may have (a lost message is retried until it gets
/// through: the retries must end).
pub const MAX_LOSS: f64 = 0.9;

impl WanLink {
    /// Checks every value; the error is (field, problem).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        self.delay.check().map_err(|m| ("delay", m))?;
        let us = |f: &'static str, v: f64| {
            if v.is_finite() && (0.0..=MAX_DELAY_US).contains(&v) {
                Ok(())
            } else {
                Err((f, format!("must be 0..={MAX_DELAY_US} us, got {v}")))
            }
        };
        us("jitter_us", self.jitter_us)?;
        if let Some(r) = self.retransmit_us {
            us("retransmit_us", r)?;
        }
        if !(self.loss.is_finite() && (0.0..=MAX_LOSS).contains(&self.loss)) {
            return Err(("loss", format!("must be a probability in 0..={MAX_LOSS}, got {}", self.loss)));
        }
        if let Some(g) = self.gbps {
            if !(g.is_finite() && g > 0.0 && g <= 10_000.0) {
                return Err(("gbps", format!("must be more than 0 and at most 10000 Gbit/s, got {g}")));
            }
        }
        if let WanTransport::Tcp(c) = &self.transport {
            if c.per_message_cpu_ns > MAX_TCP_CPU_NS {
                return Err((
                    "transport.per_message_cpu_ns",
                    format!("must be at most {MAX_TCP_CPU_NS} ns, got {}", c.per_message_cpu_ns),
                ));
            }
        }
        Ok(())
    }
}

/// The data centers of a simulated cluster and the links between them.
#[derive(Clone, Debug, PartialEq)]
pub struct Wan {
    /// Data centers.
    pub dcs: u16,
    /// The data center of each node.
    pub dc_of: Vec<u16>,
    /// The link from DC a to DC b at `[a * dcs + b]` (the diagonal is unused).
    pub links: Vec<WanLink>,
}

impl Wan {
    /// The longest one-way trip between two data centers few messages exceed, us (delay and
    /// jitter; not queueing or retransmissions).
    pub fn high_one_way_us(&self) -> f64 {
        self.links.iter().map(|l| l.delay.high() + l.jitter_us).fold(0.0, f64::max)
    }

    /// The link from `src`'s data center to `dst`'s, if they differ.
    pub fn link(&self, src: u16, dst: u16) -> Option<(usize, &WanLink)> {
        let (a, b) = (self.dc_of[src as usize] as usize, self.dc_of[dst as usize] as usize);
        let k = a * self.dcs as usize + b;
        (a != b).then(|| (k, &self.links[k]))
    }
}

/// A uniform draw in (0, 1) from 64 random bits (53 of them, centred in their interval).
pub fn unit(bits: u64) -> f64 {
    ((bits >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_quantiles_interpolate() {
        let d = Delay::Cdf(vec![(100.0, 0.5), (300.0, 1.0)]);
        assert_eq!(d.quantile(0.25), 100.0);
        assert_eq!(d.quantile(0.75), 200.0);
        assert_eq!(d.quantile(1.0), 300.0);
        assert_eq!(d.mean(), 150.0);
    }

    #[test]
    fn bad_cdfs_are_refused() {
        assert!(Delay::Cdf(vec![]).check().is_err());
        assert!(Delay::Cdf(vec![(1.0, 0.5)]).check().unwrap_err().contains("must be 1"));
        assert!(Delay::Cdf(vec![(2.0, 0.5), (1.0, 1.0)]).check().unwrap_err().contains("rise"));
        assert!(Delay::Uniform(5.0, 1.0).check().is_err());
        assert!(Delay::Normal(f64::NAN, 1.0).check().is_err());
    }
}
