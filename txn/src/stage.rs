//! Stages of a transaction and the hybrid code that picks RPC or one-sided verbs per stage.
//!
//! The bit numbering follows RCC (`src/tx_config.h.in` of Alchem-Lab/drtmh): a set bit runs the
//! stage with one-sided verbs, a clear bit with RPC. `mode: rpc` is 0, `mode: onesided` sets
//! every bit the protocol has a stage for.

use std::fmt;

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Lock = 1,
    Read = 2,
    Log = 4,
    Release = 8,
    Commit = 16,
    Validate = 32,
    Renew = 64,
    CalvinInput = 128,
    CalvinForward = 256,
    /// 2PC's vote (the lock table: servers add their votes by FAA, or answer by RPC).
    Vote = 512,
    /// The end-of-transaction message that releases a transaction's locks (the lock table).
    End = 1024,
}

impl Stage {
    /// How many stages there are (the length of every per-stage counter array).
    pub const COUNT: usize = 11;
    pub const ALL: [Stage; Stage::COUNT] = [
        Stage::Lock,
        Stage::Read,
        Stage::Log,
        Stage::Release,
        Stage::Commit,
        Stage::Validate,
        Stage::Renew,
        Stage::CalvinInput,
        Stage::CalvinForward,
        Stage::Vote,
        Stage::End,
    ];
    pub fn bit(self) -> u32 {
        self as u32
    }
    pub fn name(self) -> &'static str {
        match self {
            Stage::Lock => "lock",
            Stage::Read => "read",
            Stage::Log => "log",
            Stage::Release => "release",
            Stage::Commit => "commit",
            Stage::Validate => "validate",
            Stage::Renew => "renew",
            Stage::CalvinInput => "calvin-input",
            Stage::CalvinForward => "calvin-forward",
            Stage::Vote => "vote",
            Stage::End => "end",
        }
    }
}

/// A hybrid code: which stages run one-sided.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hybrid(pub u32);

impl Hybrid {
    pub const RPC: Hybrid = Hybrid(0);
    pub fn onesided(self, s: Stage) -> bool {
        self.0 & s.bit() != 0
    }
    /// Every code over `stages`, from all-RPC to all-one-sided.
    pub fn all_codes(stages: &[Stage]) -> Vec<Hybrid> {
        let mask: u32 = stages.iter().map(|s| s.bit()).sum();
        (0..=mask).filter(|c| c & !mask == 0).map(Hybrid).collect()
    }
    pub fn full(stages: &[Stage]) -> Hybrid {
        Hybrid(stages.iter().map(|s| s.bit()).sum())
    }
    /// Checks the code only uses bits of `stages`; the error names the offending stages.
    pub fn check(self, protocol: &str, stages: &[Stage]) -> Result<(), String> {
        let mask: u32 = stages.iter().map(|s| s.bit()).sum();
        let extra = self.0 & !mask;
        if extra == 0 {
            return Ok(());
        }
        let names: Vec<String> =
            Stage::ALL.iter().filter(|s| extra & s.bit() != 0).map(|s| format!("{} ({})", s.name(), s.bit())).collect();
        let valid: Vec<String> = stages.iter().map(|s| format!("{} ({})", s.name(), s.bit())).collect();
        Err(format!("{protocol} has no stage for bit(s) {}; its stages are {}", names.join(", "), valid.join(", ")))
    }
}

impl fmt::Display for Hybrid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on: Vec<&str> = Stage::ALL.iter().filter(|s| self.onesided(**s)).map(|s| s.name()).collect();
        if on.is_empty() {
            write!(f, "{} (rpc)", self.0)
        } else {
            write!(f, "{} (one-sided: {})", self.0, on.join(", "))
        }
    }
}
