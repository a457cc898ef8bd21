//! DrTM's per-record state word (DrTM Sec. 5.2-5.3, Fig. 9b and Fig. 10), as pure functions:
//! what each access does given the state it found. The protocol (issue 20, in progress) posts
//! the CASes and READs; these decide.
//!
//! ```text
//! bit 0        write lock (1: locked)
//! bits 1..=8   owner machine of the write lock (for recovery, Sec. 5.6)
//! bits 9..=63  read lease: its end time (55 bits of the synchronized clock, ns)
//! ```
//!
//! Times are the synchronized clock's; `delta` is the bound on two machines' disagreement
//! (from the clock service's error bound): a lease is *expired* only when `now > end + delta`
//! and *valid* only while `now < end - delta`, so no two machines ever disagree on both.

/// The initial state: unlocked, no lease.
pub const INIT: u64 = 0;
/// The write-lock bit.
pub const W_LOCKED: u64 = 1;
/// Bits of the lease end time.
pub const LEASE_BITS: u32 = 55;

/// LOCKED(owner_id): write-locked by machine `owner`.
pub fn locked(owner: u8) -> u64 {
    ((owner as u64) << 1) | W_LOCKED
}

/// R_LEASED(end_time): read-leased until `end` (ns; at most 55 bits).
pub fn leased(end: u64) -> u64 {
    lease_time(end) << 9
}

pub fn write_locked(state: u64) -> bool {
    state & W_LOCKED != 0
}

/// The machine holding the write lock, if locked.
pub fn owner(state: u64) -> Option<u8> {
    write_locked(state).then_some(((state >> 1) & 0xff) as u8)
}

/// END_TIME(state): the read lease's end (0: none).
pub fn end_time(state: u64) -> u64 {
    state >> 9
}

/// Times in the word are the clock modulo 2^55 ns (417 days): a real clock's Unix time does
/// not fit, so ends are compared by serial-number arithmetic (RFC 1982), correct while the
/// times compared are within 2^54 ns (208 days) of each other.
const TIME_MASK: u64 = (1 << LEASE_BITS) - 1;

/// The lease-time form of a clock reading (ns).
pub fn lease_time(now: u64) -> u64 {
    now & TIME_MASK
}

/// `a - b` on the 55-bit circle, as a signed number.
fn diff(a: u64, b: u64) -> i64 {
    let d = a.wrapping_sub(b) & TIME_MASK;
    // Sign-extend from 55 bits.
    ((d << (64 - LEASE_BITS)) as i64) >> (64 - LEASE_BITS)
}

/// EXPIRED(end): no machine can still consider the lease held.
pub fn expired(end: u64, now: u64, delta: u64) -> bool {
    diff(lease_time(now), lease_time(end.wrapping_add(delta))) > 0
}

/// VALID(end): every machine still considers the lease held.
pub fn valid(end: u64, now: u64, delta: u64) -> bool {
    diff(lease_time(end), lease_time(now.wrapping_add(delta))) > 0
}

/// The earlier of two lease ends.
pub fn earlier(a: u64, b: u64) -> u64 {
    if diff(lease_time(a), lease_time(b)) < 0 {
        a
    } else {
        b
    }
}

/// Why an access aborts its transaction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another transaction holds the write lock.
    WriteLocked,
    /// An unexpired read lease stands.
    ReadLeased,
}

impl Refusal {
    pub fn cause(self) -> &'static str {
        match self {
            Refusal::WriteLocked => "write locked",
            Refusal::ReadLeased => "read leased",
        }
    }
}

/// What REMOTE_READ does after its CAS `(expected -> R_LEASED(want))` found `found`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RemoteRead {
    /// Shared until this end time (its own, or the standing unexpired lease's): READ the value.
    Leased(u64),
    /// An expired lease: CAS again expecting `found`.
    Retry(u64),
    Abort(Refusal),
}

pub fn remote_read(expected: u64, found: u64, now: u64, delta: u64, want: u64) -> RemoteRead {
    if found == expected {
        return RemoteRead::Leased(want);
    }
    if write_locked(found) {
        return RemoteRead::Abort(Refusal::WriteLocked);
    }
    if expired(end_time(found), now, delta) {
        RemoteRead::Retry(found)
    } else {
        RemoteRead::Leased(end_time(found))
    }
}

/// What REMOTE_WRITE does after its CAS `(expected -> LOCKED(me))` found `found`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RemoteWrite {
    /// Locked: READ the value.
    Locked,
    /// An expired lease: CAS again expecting `found`.
    Retry(u64),
    Abort(Refusal),
}

pub fn remote_write(expected: u64, found: u64, now: u64, delta: u64) -> RemoteWrite {
    if found == expected {
        return RemoteWrite::Locked;
    }
    if write_locked(found) {
        return RemoteWrite::Abort(Refusal::WriteLocked);
    }
    if expired(end_time(found), now, delta) {
        RemoteWrite::Retry(found)
    } else {
        RemoteWrite::Abort(Refusal::ReadLeased)
    }
}

/// LOCAL_READ inside the HTM region: refused under a remote write lock; a lease does not
/// matter (HTM protects local reads).
pub fn local_read(state: u64) -> Result<(), Refusal> {
    if write_locked(state) {
        Err(Refusal::WriteLocked)
    } else {
        Ok(())
    }
}

/// LOCAL_WRITE inside the HTM region: refused under a write lock or an unexpired lease;
/// `Ok(Some(INIT))` when an expired lease is to be cleared (the optimization of Fig. 10b,
/// which puts the state word in the region's write set), `Ok(None)` when the state stays.
pub fn local_write(state: u64, now: u64, delta: u64) -> Result<Option<u64>, Refusal> {
    if write_locked(state) {
        return Err(Refusal::WriteLocked);
    }
    match end_time(state) {
        0 => Ok(None),
        end if expired(end, now, delta) => Ok(Some(INIT)),
        _ => Err(Refusal::ReadLeased),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_packs_lock_owner_and_lease() {
        let s = locked(7);
        assert!(write_locked(s) && owner(s) == Some(7) && end_time(s) == 0);
        let l = leased(123_456);
        assert!(!write_locked(l) && owner(l).is_none() && end_time(l) == 123_456);
        assert_eq!(locked(255) & !0x1ff, 0, "the owner stays in bits 1..=8");
    }

    #[test]
    fn delta_separates_expired_from_valid() {
        // Around a lease ending at 1000 with DELTA 10: valid before 990, expired after 1010,
        // neither in between (a machine there must neither rely on it nor break it).
        assert!(valid(1000, 989, 10) && !valid(1000, 990, 10));
        assert!(!expired(1000, 1010, 10) && expired(1000, 1011, 10));
        for now in 990..=1010 {
            assert!(!valid(1000, now, 10) && !expired(1000, now, 10));
        }
    }

    #[test]
    fn lease_times_wrap_around_55_bits() {
        // A real clock's Unix time (2026, ~1.8e18 ns) is far beyond 55 bits: leases taken and
        // checked across the wrap still compare right.
        let unix = 1_795_000_000_000_000_000u64;
        for now in [unix, (1 << LEASE_BITS) - 500, 5] {
            let end = now.wrapping_add(1000);
            let w = leased(end);
            let e = end_time(w);
            assert!(valid(e, now, 10) && !expired(e, now, 10), "at {now}");
            assert!(!valid(e, now + 995, 10) && !expired(e, now + 1005, 10));
            assert!(expired(e, now + 1011, 10) && !valid(e, now + 1011, 10));
            assert_eq!(earlier(e, lease_time(now + 2000)), e);
            assert_eq!(earlier(lease_time(now + 2000), e), e);
        }
    }

    #[test]
    fn remote_read_shares_unexpired_leases_and_retries_expired_ones() {
        // Fig. 10a REMOTE_READ.
        assert_eq!(remote_read(INIT, INIT, 0, 10, 500), RemoteRead::Leased(500));
        assert_eq!(remote_read(INIT, leased(800), 100, 10, 500), RemoteRead::Leased(800));
        assert_eq!(remote_read(INIT, leased(80), 100, 10, 500), RemoteRead::Retry(leased(80)));
        assert_eq!(remote_read(leased(80), leased(80), 100, 10, 500), RemoteRead::Leased(500));
        assert_eq!(remote_read(INIT, locked(3), 0, 10, 500), RemoteRead::Abort(Refusal::WriteLocked));
    }

    #[test]
    fn remote_write_waits_out_no_lease() {
        // Fig. 10a REMOTE_WRITE.
        assert_eq!(remote_write(INIT, INIT, 0, 10), RemoteWrite::Locked);
        assert_eq!(remote_write(INIT, leased(800), 100, 10), RemoteWrite::Abort(Refusal::ReadLeased));
        assert_eq!(remote_write(INIT, leased(80), 100, 10), RemoteWrite::Retry(leased(80)));
        assert_eq!(remote_write(INIT, locked(1), 100, 10), RemoteWrite::Abort(Refusal::WriteLocked));
    }

    #[test]
    fn local_accesses_respect_locks_and_leases() {
        // Fig. 10b: a local read ignores leases; a local write clears an expired one.
        assert_eq!(local_read(leased(800)), Ok(()));
        assert_eq!(local_read(locked(2)), Err(Refusal::WriteLocked));
        assert_eq!(local_write(INIT, 100, 10), Ok(None));
        assert_eq!(local_write(leased(80), 100, 10), Ok(Some(INIT)));
        assert_eq!(local_write(leased(800), 100, 10), Err(Refusal::ReadLeased));
        assert_eq!(local_write(locked(2), 100, 10), Err(Refusal::WriteLocked));
    }
}
