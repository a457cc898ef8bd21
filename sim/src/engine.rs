//! The discrete-event core: integer-nanosecond time, (time, sequence) ordering, and a running
//! 64-bit digest of every event processed.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use txbed_transport::Nanos;

/// An event in the queue. Ordered by time, then by the sequence number it was scheduled with,
/// so ties break in scheduling order on every platform.
pub struct Scheduled<E> {
    pub time: Nanos,
    pub seq: u64,
    pub event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Scheduled<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we pop the earliest.
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    seq: u64,
    now: Nanos,
    digest: u64,
    processed: u64,
}

/// SplitMix64's finaliser: a cheap, well-mixed, platform-independent 64-bit hash step.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::with_capacity(1 << 16),
            seq: 0,
            now: 0,
            digest: 0x7478_6265_6400_0001,
            processed: 0,
        }
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Schedules `event` at `time` (never in the past).
    #[inline]
    pub fn schedule(&mut self, time: Nanos, event: E) {
        debug_assert!(time >= self.now, "event scheduled in the past");
        let time = time.max(self.now);
        self.seq += 1;
        self.heap.push(Scheduled { time, seq: self.seq, event });
    }

    /// Pops the next event at or before `until`, advancing time.
    #[inline]
    pub fn pop_until(&mut self, until: Nanos) -> Option<E> {
        if self.heap.peek()?.time > until {
            return None;
        }
        let s = self.heap.pop()?;
        self.now = s.time;
        self.processed += 1;
        Some(s.event)
    }

    /// Folds an event's identity into the digest (time and the words describing it).
    #[inline]
    pub fn record(&mut self, tag: u64, a: u64, b: u64) {
        self.digest = mix(self.digest ^ self.now.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        self.digest = mix(self.digest ^ (tag << 56) ^ a);
        self.digest = mix(self.digest ^ b);
    }

    pub fn digest(&self) -> u64 {
        self.digest
    }

    pub fn processed(&self) -> u64 {
        self.processed
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn next_time(&self) -> Option<Nanos> {
        self.heap.peek().map(|s| s.time)
    }

    /// Moves time forward to `t` with no event (end of a run window).
    pub fn advance_to(&mut self, t: Nanos) {
        self.now = self.now.max(t);
    }
}
