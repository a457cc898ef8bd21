//! Node clocks as protocols see them, and the time-synchronization service.
//!
//! `Ctx::clock()` (and `HandlerCtx::clock()`) gives a [`ClockReading`]: the node's estimate of
//! the cluster's reference time and a bound on its error. The backend supplies the node's
//! physical clock as a [`ClockSource`] (sans-IO: the core never reads a clock; the simulator
//! computes readings from its clock model, real backends read the host's CLOCK_REALTIME). A
//! [`NodeClock`] turns the physical clock into readings according to its [`Discipline`]:
//! free-running with a configured bound, the sync master (the reference itself), or
//! synchronized with the master by NTP-like exchanges over the ordinary RPC layer
//! ([`sync_client`], [`sync_handlers`]). Timers, RPC timeouts and CPU time never use these
//! clocks: they run on the worker's monotonic time. docs/clocks.md derives the bound.

use std::cell::RefCell;
use std::rc::Rc;

use crate::rpc::{Handled, HandlerCtx, HandlerFn};
use crate::verbs::{Endpoint, Nanos, NodeId};
use crate::worker::Ctx;

/// RPC handler ids of the sync service, below the transaction layer's (10 and up).
pub const H_SYNC_REQUEST: u16 = 8;
pub const H_SYNC_REPLY: u16 = 9;

/// Slack for whole-nanosecond timestamps: each of the readings an estimate rests on is
/// floored to a nanosecond, and so is the clock it is applied to.
pub const GRANULARITY_NS: u64 = 8;

/// The largest drift a bound can assume: 1000 ppm (crystals are specified to about 100).
pub const MAX_DRIFT_PPB: u64 = 1_000_000;

/// A reading of the synchronized clock: `now_ns` is the node's estimate of the reference time
/// and `|now_ns - reference| <= bound_ns` holds whenever the model's assumptions hold (no
/// clock drifts beyond the assumed rate, no clock is stepped between exchanges).
///
/// The reference is the sync master's clock when a sync service runs, else (free-running
/// clocks) true time: Unix time on real backends, simulated time in the simulator.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ClockReading {
    pub now_ns: i64,
    pub bound_ns: u64,
}

impl ClockReading {
    /// The bound before a node's first sync exchange: no claim at all.
    pub const UNKNOWN_BOUND: u64 = u64::MAX;

    /// A perfect clock reading `t` (the simulator without a clock model).
    pub fn ideal(t: Nanos) -> ClockReading {
        ClockReading { now_ns: t as i64, bound_ns: 0 }
    }
    /// Whether the bound says anything (false until a node's first sync exchange).
    pub fn synced(&self) -> bool {
        self.bound_ns != Self::UNKNOWN_BOUND
    }
    /// The earliest the reference time can be.
    pub fn earliest(&self) -> i64 {
        (self.now_ns as i128 - self.bound_ns as i128).max(i64::MIN as i128) as i64
    }
    /// The latest the reference time can be.
    pub fn latest(&self) -> i64 {
        (self.now_ns as i128 + self.bound_ns as i128).min(i64::MAX as i128) as i64
    }
    /// `t` (a reference time, e.g. a lease's end written by another node) has surely passed:
    /// DrTM's EXPIRED(t) with DELTA = this reading's bound. Never true without a bound.
    pub fn surely_after(&self, t: i64) -> bool {
        self.synced() && (self.now_ns as i128 - self.bound_ns as i128) > t as i128
    }
    /// `t` has surely not come yet: DrTM's VALID(t) with DELTA = this reading's bound.
    pub fn surely_before(&self, t: i64) -> bool {
        self.synced() && (self.now_ns as i128 + self.bound_ns as i128) < t as i128
    }
}

/// A node's physical clock, supplied by the backend.
pub trait ClockSource {
    /// The physical clock (CLOCK_REALTIME-like: it may drift and be stepped) when the
    /// worker's monotonic clock reads `now`, ns.
    fn local_ns(&self, now: Nanos) -> i64;
    /// Sees every synchronized reading handed out, at monotonic time `now` (the simulator
    /// measures its true error here); real clocks ignore it.
    fn observe(&self, _now: Nanos, _reading: ClockReading) {}
}

/// How a node turns its physical clock into readings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Discipline {
    /// No sync service here: the physical clock as it is, with a configured bound (real
    /// backends: what chrony or PTP keep the host clock within; docs/clocks.md).
    Free { bound_ns: u64 },
    /// This node is the sync master: its clock is the reference, bound 0.
    Master,
    /// Synchronized with the master by periodic exchanges.
    Synced(SyncParams),
}

/// The sync service of a node that is not the master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncParams {
    pub master: NodeId,
    /// Monotonic time between two requests, ns.
    pub interval_ns: Nanos,
    /// The drift (parts per billion) no clock exceeds: the assumption the bound rests on.
    pub max_drift_ppb: u64,
    /// No request is sent after this monotonic time (the run's end), so the client ends.
    pub until_ns: Nanos,
}

/// A node's sync exchanges so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Requests sent to the master.
    pub sent: u64,
    /// Replies received, late ones included (`sent - answered`: lost, or still in flight).
    pub answered: u64,
    /// Replies that came after the next request had gone out (still used).
    pub late: u64,
    /// Replies that became the node's estimate (a reply whose bound is wider than the current
    /// estimate's aged bound is not used).
    pub accepted: u64,
    /// Replies refused because a timestamp went backwards (a clock stepped mid-exchange).
    pub refused: u64,
    /// Shortest and longest round trip of the replies, on the node's clock, ns.
    pub min_rtt_ns: u64,
    pub max_rtt_ns: u64,
}

/// The correction an exchange gave: reference = local + offset, with `bound_ns` at local time
/// `local_at`, growing with the local time since.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Estimate {
    offset_ns: i64,
    bound_ns: u64,
    local_at: i64,
}

#[derive(Default)]
struct State {
    estimate: Option<Estimate>,
    stats: SyncStats,
    next_seq: u64,
}

impl SyncStats {
    /// Requests without a reply: lost, or still in flight.
    pub fn unanswered(&self) -> u64 {
        self.sent - self.answered
    }
}

/// A node's clock: shared by all of its workers (they share the sync estimate).
pub struct NodeClock {
    source: Rc<dyn ClockSource>,
    discipline: Discipline,
    state: RefCell<State>,
}

/// Worst-case drift of the local clock against the reference over `elapsed` ns of local
/// time, with both clocks within `rho_ppb` of true time: 2 rho elapsed / (1 - rho), rounded up.
pub fn drift_allowance(elapsed: u64, rho_ppb: u64) -> u64 {
    let rho = rho_ppb.min(MAX_DRIFT_PPB) as u128;
    let v = (elapsed as u128 * 2 * rho).div_ceil(1_000_000_000 - rho);
    v.min(u64::MAX as u128) as u64
}

impl Estimate {
    fn bound_at(&self, local: i64, rho_ppb: u64) -> u64 {
        // A clock stepped back makes the elapsed time negative: count it as elapsed either way.
        let elapsed = (local as i128 - self.local_at as i128).unsigned_abs().min(u64::MAX as u128) as u64;
        self.bound_ns.saturating_add(drift_allowance(elapsed, rho_ppb))
    }
}

impl NodeClock {
    pub fn new(source: Rc<dyn ClockSource>, discipline: Discipline) -> NodeClock {
        NodeClock { source, discipline, state: RefCell::new(State::default()) }
    }

    pub fn discipline(&self) -> &Discipline {
        &self.discipline
    }

    /// The physical clock at monotonic time `now`.
    pub fn local_ns(&self, now: Nanos) -> i64 {
        self.source.local_ns(now)
    }

    /// The synchronized clock at monotonic time `now` (the source observes it).
    pub fn read(&self, now: Nanos) -> ClockReading {
        let local = self.source.local_ns(now);
        let r = match &self.discipline {
            Discipline::Free { bound_ns } => ClockReading { now_ns: local, bound_ns: *bound_ns },
            Discipline::Master => ClockReading { now_ns: local, bound_ns: 0 },
            Discipline::Synced(p) => match self.state.borrow().estimate {
                None => ClockReading { now_ns: local, bound_ns: ClockReading::UNKNOWN_BOUND },
                Some(e) => ClockReading {
                    now_ns: local.saturating_add(e.offset_ns),
                    bound_ns: e.bound_at(local, p.max_drift_ppb),
                },
            },
        };
        self.source.observe(now, r);
        r
    }

    pub fn stats(&self) -> SyncStats {
        self.state.borrow().stats.clone()
    }

    /// Starts an exchange at monotonic time `now`: its sequence number and t1.
    pub fn start_exchange(&self, now: Nanos) -> (u64, i64) {
        let t1 = self.source.local_ns(now);
        let mut st = self.state.borrow_mut();
        let seq = st.next_seq;
        st.next_seq += 1;
        st.stats.sent += 1;
        (seq, t1)
    }

    /// A reply to request `seq`: t1 (sent, local clock), t2 and t3 (the master received and
    /// answered it, its clock), t4 (received, local clock), at monotonic time `now`. Returns
    /// whether it became the estimate.
    pub fn finish_exchange(&self, now: Nanos, seq: u64, t: [i64; 4]) -> bool {
        let Discipline::Synced(p) = &self.discipline else { return false };
        let [t1, t2, t3, t4] = t.map(|x| x as i128);
        let candidate = {
            let mut st = self.state.borrow_mut();
            st.stats.answered += 1;
            if seq + 1 < st.next_seq {
                st.stats.late += 1;
            }
            if t4 < t1 || t3 < t2 {
                st.stats.refused += 1;
                return false;
            }
            let rtt = (t4 - t1).min(u64::MAX as i128) as u64;
            st.stats.min_rtt_ns = if st.stats.answered == 1 { rtt } else { st.stats.min_rtt_ns.min(rtt) };
            st.stats.max_rtt_ns = st.stats.max_rtt_ns.max(rtt);
            // NTP: offset = ((t2 - t1) + (t3 - t4)) / 2, delay = (t4 - t1) - (t3 - t2).
            let delay = ((t4 - t1) - (t3 - t2)).max(0) as u128;
            let offset = ((t2 - t1) + (t3 - t4)).div_euclid(2);
            let bound = (delay.div_ceil(2).min(u64::MAX as u128) as u64)
                .saturating_add(drift_allowance(rtt, p.max_drift_ppb))
                .saturating_add(GRANULARITY_NS);
            let e = Estimate {
                offset_ns: offset.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
                bound_ns: bound,
                local_at: t[3],
            };
            // Keep whichever estimate promises less now: both bounds hold, so the smaller does.
            let better = st.estimate.is_none_or(|cur| bound <= cur.bound_at(t[3], p.max_drift_ppb));
            better.then_some(e)
        };
        let Some(e) = candidate else { return false };
        // The error jumps here: the source sees the clock on both sides of the jump.
        self.read(now);
        {
            let mut st = self.state.borrow_mut();
            st.estimate = Some(e);
            st.stats.accepted += 1;
        }
        self.read(now);
        true
    }
}

/// The sync service's handlers for worker 0 of a node: the master answers requests, every
/// other node takes replies. Each is (id, name for traces, handler).
pub fn sync_handlers(clock: &Rc<NodeClock>) -> Vec<(u16, &'static str, Rc<HandlerFn>)> {
    match clock.discipline() {
        Discipline::Master => {
            let c = clock.clone();
            let h = move |h: &mut HandlerCtx<'_>, p: &[u8]| {
                if p.len() == 16 {
                    // One timestamp for receipt and answer: the handler runs at one instant.
                    let t = c.local_ns(h.now).to_le_bytes();
                    let reply = [p, &t, &t].concat();
                    h.notify(h.src, H_SYNC_REPLY, reply);
                }
                Handled::NoReply
            };
            vec![(H_SYNC_REQUEST, "CLOCK-SYNC", Rc::new(h) as Rc<HandlerFn>)]
        }
        Discipline::Synced(_) => {
            let c = clock.clone();
            let h = move |h: &mut HandlerCtx<'_>, p: &[u8]| {
                if p.len() == 32 {
                    let t4 = c.local_ns(h.now);
                    let w = |i: usize| u64::from_le_bytes(p[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                    c.finish_exchange(h.now, w(0), [w(1) as i64, w(2) as i64, w(3) as i64, t4]);
                }
                Handled::NoReply
            };
            vec![(H_SYNC_REPLY, "CLOCK-SYNC-REPLY", Rc::new(h) as Rc<HandlerFn>)]
        }
        Discipline::Free { .. } => Vec::new(),
    }
}

/// The sync client (a coroutine on worker 0 of every node but the master): a one-way request
/// to the master every `interval_ns` of monotonic time up to `until_ns`. One-way, so a lost
/// request or reply is simply lost, as an NTP poll is; the next one replaces it. It ends after
/// its last request (the worker's handler still takes the reply), not a sleep later, so a long
/// interval keeps no run waiting.
pub async fn sync_client(ctx: Ctx, clock: Rc<NodeClock>) {
    let Discipline::Synced(p) = clock.discipline().clone() else { return };
    let master = Endpoint { node: p.master, worker: 0 };
    let interval = p.interval_ns.max(1);
    loop {
        let (seq, t1) = clock.start_exchange(ctx.now());
        let msg = [seq.to_le_bytes(), t1.to_le_bytes()].concat();
        ctx.call_oneway(master, H_SYNC_REQUEST, &msg);
        if ctx.now().saturating_add(interval) > p.until_ns {
            return;
        }
        ctx.sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A clock reading true time plus an offset, at a rate of 1 + ppb / 1e9.
    struct Lin {
        offset: Cell<i64>,
        ppb: i64,
        seen: RefCell<Vec<ClockReading>>,
    }
    impl ClockSource for Lin {
        fn local_ns(&self, now: Nanos) -> i64 {
            now as i64 + self.offset.get() + (now as i128 * self.ppb as i128).div_euclid(1_000_000_000) as i64
        }
        fn observe(&self, _now: Nanos, r: ClockReading) {
            self.seen.borrow_mut().push(r);
        }
    }
    fn lin(offset: i64, ppb: i64) -> Rc<Lin> {
        Rc::new(Lin { offset: Cell::new(offset), ppb, seen: RefCell::default() })
    }
    fn synced(src: Rc<Lin>, rho_ppb: u64) -> NodeClock {
        let p = SyncParams { master: NodeId(0), interval_ns: 1_000_000, max_drift_ppb: rho_ppb, until_ns: u64::MAX };
        NodeClock::new(src, Discipline::Synced(p))
    }

    /// An exchange through `node` and `master` with one-way delays `d1`, `d2` and a handler
    /// at `at`; returns whether it was accepted.
    fn exchange(node: &NodeClock, master: &Lin, at: Nanos, d1: Nanos, d2: Nanos) -> bool {
        let (seq, t1) = node.start_exchange(at);
        let t2 = master.local_ns(at + d1);
        node.finish_exchange(at + d1 + d2, seq, [t1, t2, t2, node.local_ns(at + d1 + d2)])
    }

    #[test]
    fn readings_and_their_interval() {
        let r = ClockReading { now_ns: 100, bound_ns: 10 };
        assert_eq!((r.earliest(), r.latest()), (90, 110));
        assert!(r.surely_after(89) && !r.surely_after(90));
        assert!(r.surely_before(111) && !r.surely_before(110));
        let u = ClockReading { now_ns: 0, bound_ns: ClockReading::UNKNOWN_BOUND };
        assert!(!u.synced() && !u.surely_after(i64::MIN) && !u.surely_before(i64::MAX));
        assert_eq!(u.earliest(), i64::MIN);
    }

    #[test]
    fn allowance_is_twice_the_drift_rounded_up() {
        assert_eq!(drift_allowance(1_000_000, 100_000), 201); // 200.02 ns
        assert_eq!(drift_allowance(0, 100_000), 0);
        assert_eq!(drift_allowance(1, 1), 1);
        assert!(drift_allowance(u64::MAX, MAX_DRIFT_PPB) > u64::MAX / 1000, "no overflow");
    }

    /// Every reading between exchanges, against the master's clock, stays within its bound
    /// when both clocks drift within the assumption, and the bound grows between exchanges.
    #[test]
    fn the_bound_holds_within_the_assumption() {
        let rho = 100_000; // 100 ppm
        let cases = [
            (5_000_000, 100_000, -100_000, 2_000, 700),
            (-3_000, -99_999, 100_000, 300, 9_000),
            (0, 0, 0, 1, 1),
            // Short symmetric trips: the drift allowance is nearly all of the bound.
            (7, 100_000, -100_000, 1, 1),
            (-7, -100_000, 100_000, 5, 5),
        ];
        for (off, ppb, mppb, d1, d2) in cases {
            let (src, master) = (lin(off, ppb), lin(-off / 3, mppb));
            let node = synced(src.clone(), rho);
            assert!(!node.read(0).synced());
            let mut last = 0;
            for k in 0..50u64 {
                let at = k * 1_000_000 + 17;
                assert!(exchange(&node, &master, at, d1, d2) || k > 0);
                for dt in [0, 1, 999, 250_000, 999_999] {
                    let t = at + d1 + d2 + dt;
                    let r = node.read(t);
                    let err = (r.now_ns - master.local_ns(t)).unsigned_abs();
                    assert!(err <= r.bound_ns, "k {k} dt {dt}: error {err} > bound {}", r.bound_ns);
                    if dt > 0 {
                        assert!(r.bound_ns >= last, "the bound ages");
                    }
                    last = r.bound_ns;
                }
            }
            assert_eq!(node.stats().sent, 50);
            assert_eq!(node.stats().unanswered(), 0);
        }
    }

    /// A step of the node's clock after an exchange shows as an error beyond the bound until
    /// the next exchange corrects it.
    #[test]
    fn a_step_breaks_the_bound_until_the_next_exchange() {
        let (src, master) = (lin(0, 0), lin(0, 0));
        let node = synced(src.clone(), 100_000);
        exchange(&node, &master, 0, 1_000, 1_000);
        src.offset.set(50_000);
        let r = node.read(10_000);
        assert!((r.now_ns - master.local_ns(10_000)).unsigned_abs() > r.bound_ns);
        assert!(exchange(&node, &master, 1_000_000, 1_000, 1_000), "a tighter estimate replaces the aged one");
        let r = node.read(1_010_000);
        assert!((r.now_ns - master.local_ns(1_010_000)).unsigned_abs() <= r.bound_ns);
    }

    /// A lost exchange leaves the old estimate, whose bound keeps growing; a slow reply with
    /// a wider bound than the aged one is not used.
    #[test]
    fn lost_and_slow_exchanges() {
        let (src, master) = (lin(0, 0), lin(0, 0));
        let node = synced(src.clone(), 100_000);
        exchange(&node, &master, 0, 1_000, 1_000);
        let b0 = node.read(2_000).bound_ns;
        node.start_exchange(1_000_000); // never answered
        assert!(exchange(&node, &master, 2_000_000, 1_000, 1_000));
        let s = node.stats();
        assert_eq!((s.sent, s.answered, s.unanswered(), s.accepted, s.late), (3, 2, 1, 2, 0));
        assert!(node.read(3_000_000).bound_ns > b0);
        // A reply after 400 us of queueing: a bound of ~200 us, wider than the aged one.
        assert!(!exchange(&node, &master, 3_000_000, 400_000, 1_000));
        assert_eq!(node.stats().accepted, 2);
        // The source saw the clock on both sides of each accepted exchange.
        assert!(src.seen.borrow().len() >= 4);
    }

    #[test]
    fn a_master_and_a_free_clock() {
        let src = lin(42, 0);
        let m = NodeClock::new(src.clone(), Discipline::Master);
        assert_eq!(m.read(1_000), ClockReading { now_ns: 1_042, bound_ns: 0 });
        let f = NodeClock::new(src, Discipline::Free { bound_ns: 5 });
        assert_eq!(f.read(1_000), ClockReading { now_ns: 1_042, bound_ns: 5 });
        assert!(!f.finish_exchange(0, 0, [0; 4]));
    }
}
