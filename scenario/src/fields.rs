//! Error messages that name the field: a RON file's and a `--set` edit's deserialization
//! errors get the field path (`serde_path_to_error`) and, for numbers, what the field takes
//! (`cluster.coroutines: expected a whole number in 1..=1024, got -1`).

use serde::de::DeserializeOwned;
use serde_path_to_error::{Path, Segment};

/// Whole-number fields whose range `Scenario::validate` enforces: parse errors quote the same
/// range, so a typo and an out-of-range value read alike.
pub const RANGES: &[(&str, u64, u64)] = &[
    ("cluster.nodes", 2, 1024),
    ("cluster.workers", 1, 256),
    ("cluster.coroutines", 1, 1024),
    ("cluster.qps_per_node", 1, 64),
    ("cluster.nics_per_node", 1, 16),
    ("protocol.log_ring_kib", 4, 1 << 20),
    ("workload.outstanding", 1, 64),
    ("run.warmup_us", 0, MAX_RUN_US),
    ("run.measure_us", 1, MAX_RUN_US),
    ("run.failure_timeout_ms", 10, 600_000),
    ("run.clock_bound_us", 0, 10_000_000),
    ("cluster.clocks.sync.interval_us", 1, 10_000_000),
];

/// Simulated time a run may cover, warm-up plus measurement (us).
pub const MAX_RUN_US: u64 = 10_000_000;

/// The range `RANGES` gives `path`.
pub fn range(path: &str) -> Option<(u64, u64)> {
    RANGES.iter().find(|r| r.0 == path).map(|r| (r.1, r.2))
}

/// `path` as `--set` writes it: struct fields joined by dots, list indices in brackets, enum
/// variants left out (`workload.accounts_per_node`, not `workload.SmallBank.accounts_per_node`).
pub fn dotted(path: &Path) -> String {
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    out
}

/// What a whole-number field of `path` takes, given the type serde names (`u16`...), if known.
fn whole_number(path: &str, ty: Option<&str>) -> String {
    if let Some((lo, hi)) = range(path) {
        return format!("a whole number in {lo}..={hi}");
    }
    let hi = match ty {
        Some("u8") => u8::MAX as u64,
        Some("u16") => u16::MAX as u64,
        Some("u32") => u32::MAX as u64,
        _ => u64::MAX,
    };
    format!("a whole number in 0..={hi}")
}

/// The message for a deserialization error `msg` at `path`, where the text given was `got`.
/// Numbers get what the field takes; anything else keeps serde's words after the path.
pub fn describe(path: &str, msg: &str, got: &str) -> String {
    let at = if path.is_empty() { String::new() } else { format!("{path}: ") };
    // serde: "invalid type: floating point `1e+20`, expected u16"; ron: "Expected integer".
    let expected = msg.rsplit_once("expected ").map(|(_, e)| e.trim());
    let unsigned = ["u8", "u16", "u32", "u64", "usize"];
    let is_int = |e: &str| unsigned.contains(&e) || matches!(e, "i8" | "i16" | "i32" | "i64");
    let ron_int = matches!(msg, "Expected integer" | "Integer is out of bounds");
    let ron_float = msg == "Expected float";
    match expected {
        Some(e) if is_int(e) => format!("{at}expected {}, got {got}", whole_number(path, Some(e))),
        Some("f32" | "f64") => format!("{at}expected a number, got {got}"),
        _ if ron_int => format!("{at}expected {}, got {got}", whole_number(path, None)),
        _ if ron_float => format!("{at}expected a number, got {got}"),
        _ => format!("{at}{msg}"),
    }
}

/// The value a RON error at byte `at` of `text` points at: the token there, or, where RON
/// points just past a value (`Integer is out of bounds`), the token before.
pub fn token(text: &str, at: usize) -> &str {
    let sep = |c: char| matches!(c, ',' | '(' | ')' | '[' | ']' | '{' | '}' | ':') || c.is_whitespace();
    let at = at.min(text.len());
    let rest = text[at..].trim_start();
    let end = rest.find(sep).unwrap_or(rest.len());
    if end > 0 {
        return &rest[..end];
    }
    let before = text[..at].trim_end_matches(char::is_whitespace);
    let start = before.rfind(sep).map_or(0, |i| i + 1);
    if start < before.len() {
        &before[start..]
    } else {
        rest.get(..1).unwrap_or("")
    }
}

/// Parses a RON file's `text` into `T`; an error says `source:line:column: field: problem`.
pub fn parse_ron<T: DeserializeOwned>(text: &str, source: &str) -> Result<T, String> {
    let at = |e: &ron::error::SpannedError| format!("{source}:{}:{}", e.position.line, e.position.col);
    let mut de = ron::Deserializer::from_str_with_options(text, ron::Options::default())
        .map_err(|e| format!("{}: {}", at(&e), e.code))?;
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = dotted(e.path());
        let code = e.into_inner();
        let msg = code.to_string();
        let got = token(text, text.len().saturating_sub(de.remainder().len())).to_string();
        format!("{}: {}", at(&de.span_error(code)), describe(&path, &msg, &got))
    })?;
    de.end().map_err(|e| {
        let e = de.span_error(e);
        format!("{}: {}", at(&e), e.code)
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_say_what_the_field_takes() {
        assert_eq!(
            describe("cluster.coroutines", "Expected integer", "-1"),
            "cluster.coroutines: expected a whole number in 1..=1024, got -1"
        );
        assert_eq!(
            describe("workload.accounts_per_node", "invalid type: floating point `1e+20`, expected u64", "1e20"),
            "workload.accounts_per_node: expected a whole number in 0..=18446744073709551615, got 1e20"
        );
        assert_eq!(describe("a.b", "invalid type: string \"x\", expected f64", "x"), "a.b: expected a number, got x");
        assert_eq!(describe("a", "unknown field `b`", "b"), "a: unknown field `b`");
        assert_eq!(token("(a: -1, x)", 3), "-1");
        assert_eq!(token("(a: 123456)", 10), "123456");
        assert_eq!(token("@", 0), "@");
    }
}
