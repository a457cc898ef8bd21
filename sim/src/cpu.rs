//! CPU profiles: what the HTM model (`txbed_transport::htm`) needs of a CPU, read from RON files
//! beside the NIC profiles (`scenarios/cpus/*.ron`, each value with its source there).

use serde::{Deserialize, Serialize};
use txbed_transport::htm::Geometry;

/// The built-in CPU profiles: (name, RON text).
pub const BUILTIN: [(&str, &str); 1] = [("haswell", include_str!("../../scenarios/cpus/haswell.ron"))];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuProfile {
    pub name: String,
    /// Cache line, bytes (HTM tracks reads and writes per line).
    pub line_bytes: u64,
    /// L1 data cache sets and ways: where RTM keeps a region's write set.
    pub l1_sets: u32,
    pub l1_ways: u32,
    /// Lines a region's read set may hold (tracked beyond L1).
    pub read_set_lines: u32,
    /// System events (interrupts) per millisecond of a region: each aborts it.
    pub system_aborts_per_ms: f64,
    /// XBEGIN, XEND and the way back from an abort to the fallback, ns of CPU.
    pub xbegin_ns: u64,
    pub xend_ns: u64,
    pub abort_ns: u64,
}

impl CpuProfile {
    /// Parses and checks a profile; errors name the source, line and column, or the field.
    pub fn parse(text: &str, source: &str) -> Result<Self, String> {
        let p: CpuProfile = ron::Options::default()
            .from_str(text)
            .map_err(|e| format!("{source}:{}:{}: {}", e.position.line, e.position.col, e.code))?;
        p.validate().map_err(|(field, m)| format!("{source}: {field} {m}"))?;
        Ok(p)
    }

    /// A built-in profile by name, or a RON file by path.
    pub fn load(name_or_path: &str) -> Result<Self, String> {
        if let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, &format!("scenarios/cpus/{n}.ron"));
        }
        let text = txbed_input::read_text(std::path::Path::new(name_or_path), "CPU profile", txbed_input::CONFIG_LIMIT)
            .map_err(|e| {
                let names: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
                format!("{e}; built-in CPU profiles are {}", names.join(", "))
            })?;
        Self::parse(&text, name_or_path)
    }

    fn validate(&self) -> Result<(), (String, String)> {
        let err = |f: &str, m: String| Err((f.to_string(), m));
        if !self.line_bytes.is_power_of_two() || !(16..=4096).contains(&self.line_bytes) {
            return err("line_bytes", format!("must be a power of two in 16..=4096, got {}", self.line_bytes));
        }
        if self.l1_sets == 0 || !self.l1_sets.is_power_of_two() || self.l1_sets > 1 << 16 {
            return err("l1_sets", format!("must be a power of two in 1..=65536, got {}", self.l1_sets));
        }
        if self.l1_ways == 0 || self.l1_ways > 64 {
            return err("l1_ways", format!("must be 1..=64, got {}", self.l1_ways));
        }
        if self.read_set_lines == 0 {
            return err("read_set_lines", "must be at least 1".into());
        }
        if !self.system_aborts_per_ms.is_finite() || self.system_aborts_per_ms < 0.0 {
            return err(
                "system_aborts_per_ms",
                format!("must be a finite number >= 0, got {}", self.system_aborts_per_ms),
            );
        }
        for (f, v) in [("xbegin_ns", self.xbegin_ns), ("xend_ns", self.xend_ns), ("abort_ns", self.abort_ns)] {
            if v > 1_000_000 {
                return err(f, format!("must be at most 1 ms, got {v} ns"));
            }
        }
        Ok(())
    }

    /// The cache geometry the HTM model tracks regions with.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            line_bytes: self.line_bytes,
            sets: self.l1_sets,
            ways: self.l1_ways,
            read_lines: self.read_set_lines,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_load_and_bad_values_are_refused_with_their_field() {
        let h = CpuProfile::load("haswell").unwrap();
        assert_eq!(h.geometry().sets as u64 * h.geometry().ways as u64 * h.line_bytes, 32 << 10, "a 32 KiB L1d");
        let text = BUILTIN[0].1;
        for (from, to, field) in [
            ("l1_ways: 8", "l1_ways: 0", "l1_ways"),
            ("l1_sets: 64", "l1_sets: 48", "l1_sets"),
            ("line_bytes: 64", "line_bytes: 60", "line_bytes"),
            ("system_aborts_per_ms: 1.0", "system_aborts_per_ms: -1.0", "system_aborts_per_ms"),
        ] {
            let e = CpuProfile::parse(&text.replace(from, to), "t.ron").unwrap_err();
            assert!(e.contains(field), "{e}");
        }
        let e = CpuProfile::parse(&text.replace("l1_ways: 8,", "l1_ways: 8, l2: 1,"), "t.ron").unwrap_err();
        assert!(e.starts_with("t.ron:") && e.contains("l2"), "{e}");
        assert!(CpuProfile::load("no-such-cpu").unwrap_err().contains("haswell"));
    }
}
