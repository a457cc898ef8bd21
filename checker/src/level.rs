//! Isolation levels, after Adya's thesis (Sec. 4-5): each level is the set of phenomena it
//! proscribes. `txbed check --level L` and a scenario's `isolation` judge a history by these.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::check::AnomalyKind;

/// An isolation level, weakest first (snapshot and repeatable read are incomparable: each
/// forbids something the other allows).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// PL-1: proscribes G0.
    ReadUncommitted,
    /// PL-2: proscribes G0 and G1 (G1a, G1b, G1c).
    ReadCommitted,
    /// PL-2.99: proscribes G1 and G2-item (item anti-dependency cycles); predicate-only
    /// anti-dependency cycles (phantoms) are allowed.
    RepeatableRead,
    /// PL-SI as far as a history without snapshot times shows it: proscribes G1 and G-single
    /// (G-SIb, missed effects). G-SIa needs each transaction's snapshot and commit points,
    /// which histories do not carry.
    Snapshot,
    /// PL-3: proscribes G1 and G2 (every anti-dependency cycle).
    #[default]
    Serializable,
    /// PL-3 plus real-time order: a transaction that ended before another started precedes it.
    StrictSerializable,
}

impl Level {
    pub const ALL: [Level; 6] = [
        Level::ReadUncommitted,
        Level::ReadCommitted,
        Level::RepeatableRead,
        Level::Snapshot,
        Level::Serializable,
        Level::StrictSerializable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Level::ReadUncommitted => "read-uncommitted",
            Level::ReadCommitted => "read-committed",
            Level::RepeatableRead => "repeatable-read",
            Level::Snapshot => "snapshot",
            Level::Serializable => "serializable",
            Level::StrictSerializable => "strict-serializable",
        }
    }

    /// Adya's name for the level.
    pub fn adya(self) -> &'static str {
        match self {
            Level::ReadUncommitted => "PL-1",
            Level::ReadCommitted => "PL-2",
            Level::RepeatableRead => "PL-2.99",
            Level::Snapshot => "PL-SI",
            Level::Serializable => "PL-3",
            Level::StrictSerializable => "PL-3 + real time",
        }
    }

    /// Whether a history showing `k` fails this level.
    pub fn forbids(self, k: AnomalyKind) -> bool {
        use AnomalyKind::*;
        use Level::*;
        match k {
            // Integrity of the history itself and of the data: every level.
            G0 | UnknownVersion | SkippedVersion | LostWrite | Invariant => true,
            G1a | G1b | G1c => self >= ReadCommitted,
            // Two writers installing one version: a lost update (P4), which PL-2 allows.
            DuplicateVersion => self >= RepeatableRead,
            GSingle => matches!(self, Snapshot | Serializable | StrictSerializable),
            G2Item => matches!(self, RepeatableRead | Serializable | StrictSerializable),
            G2 => self >= Serializable,
            RealTime => self == StrictSerializable,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Level, String> {
        Level::ALL.into_iter().find(|l| l.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Level::ALL.iter().map(|l| l.name()).collect();
            format!("unknown isolation level \"{s}\": expected one of {}", names.join(", "))
        })
    }
}
