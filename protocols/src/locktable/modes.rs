//! Lock modes of multi-granularity locking (Gray and Reuter; the lock table's Table 1).

/// A lock mode. The order is the numbering messages carry.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// No lock: a request in NL only asks for the item's address (a row under a coarser S
    /// or X the transaction already holds).
    NL = 0,
    /// Intention shared: S locks further down.
    IS = 1,
    /// Intention exclusive: X (or S) locks further down.
    IX = 2,
    S = 3,
    /// S on the whole granule and X locks further down.
    SIX = 4,
    X = 5,
}

pub const MODES: [Mode; 6] = [Mode::NL, Mode::IS, Mode::IX, Mode::S, Mode::SIX, Mode::X];

/// Table 1: `COMPATIBLE[held][requested]`.
const COMPATIBLE: [[bool; 6]; 6] = [
    //  NL    IS     IX     S      SIX    X
    [true, true, true, true, true, true],      // NL
    [true, true, true, true, true, false],     // IS
    [true, true, true, false, false, false],   // IX
    [true, true, false, true, false, false],   // S
    [true, true, false, false, false, false],  // SIX
    [true, false, false, false, false, false], // X
];

impl Mode {
    pub fn from_u8(v: u8) -> Option<Mode> {
        MODES.get(v as usize).copied()
    }
    pub fn name(self) -> &'static str {
        match self {
            Mode::NL => "NL",
            Mode::IS => "IS",
            Mode::IX => "IX",
            Mode::S => "S",
            Mode::SIX => "SIX",
            Mode::X => "X",
        }
    }

    /// Whether a lock held in `self` lets another transaction be granted `other`; with
    /// `s_with_ix` (the planted bug `GrantsSWithIx`) S and IX are wrongly compatible.
    pub fn compatible(self, other: Mode, s_with_ix: bool) -> bool {
        if s_with_ix && matches!((self, other), (Mode::S, Mode::IX) | (Mode::IX, Mode::S)) {
            return true;
        }
        COMPATIBLE[self as usize][other as usize]
    }

    /// Whether holding `self` gives every right `other` gives.
    pub fn covers(self, other: Mode) -> bool {
        use Mode::*;
        match self {
            X => true,
            SIX => other != X,
            S => matches!(other, NL | IS | S),
            IX => matches!(other, NL | IS | IX),
            IS => matches!(other, NL | IS),
            NL => other == NL,
        }
    }

    /// The weakest mode that covers both (a lock conversion): IX and S make SIX.
    pub fn join(self, other: Mode) -> Mode {
        if self.covers(other) {
            self
        } else if other.covers(self) {
            other
        } else {
            // The only pair neither covers: {IX, S} (and SIX with either, covered above).
            Mode::SIX
        }
    }

    /// The intention mode a parent granule needs for a child locked in `self`.
    pub fn intention(self) -> Mode {
        match self {
            Mode::NL => Mode::NL,
            Mode::IS | Mode::S => Mode::IS,
            Mode::IX | Mode::SIX | Mode::X => Mode::IX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_is_symmetric_and_nl_is_compatible_with_all() {
        for a in MODES {
            assert!(Mode::NL.compatible(a, false));
            for b in MODES {
                assert_eq!(a.compatible(b, false), b.compatible(a, false), "{a:?} {b:?}");
            }
        }
        assert!(!Mode::S.compatible(Mode::IX, false));
        assert!(Mode::S.compatible(Mode::IX, true), "the planted bug grants S with IX");
        assert!(Mode::IS.compatible(Mode::SIX, false));
        assert!(!Mode::X.compatible(Mode::IS, false));
    }

    #[test]
    fn join_is_the_least_upper_bound() {
        for a in MODES {
            for b in MODES {
                let j = a.join(b);
                assert!(j.covers(a) && j.covers(b), "{a:?} v {b:?} = {j:?}");
                // Nothing weaker covers both: any mode covering both covers the join.
                for c in MODES.into_iter().filter(|c| c.covers(a) && c.covers(b)) {
                    assert!(c.covers(j), "{c:?} covers {a:?} and {b:?} but not {j:?}");
                }
            }
        }
        assert_eq!(Mode::IX.join(Mode::S), Mode::SIX);
    }

    #[test]
    fn a_stronger_mode_is_compatible_with_less() {
        for a in MODES {
            for b in MODES.into_iter().filter(|b| b.covers(a)) {
                for c in MODES {
                    assert!(!b.compatible(c, false) || a.compatible(c, false), "{b:?} covers {a:?}, {c:?}");
                }
            }
        }
    }
}
