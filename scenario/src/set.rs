//! `--set path=value`: edit any scenario field by the path it has in the file.
//!
//! The scenario goes through its serde form (`serde_json::Value`: structs are objects, enum
//! variants `{"Variant": inner}` or a plain string), the path is walked there, and the result is
//! deserialized back, so every rule of the schema (unknown fields, types, variant names) applies
//! to edits exactly as to files. Two conveniences:
//! - an enum is walked through transparently (`workload.write_fraction` reaches into
//!   `Ycsb((...))`), and its `name` selects the variant with every parameter at its default
//!   (`workload.name=ycsb`);
//! - `None` fields are created on the way (`protocol.name=occ` on a scenario without one).
//!
//! Values use the file's syntax: numbers, `true`/`false`, words (`occ`, `Onesided`), quoted
//! strings, `[a, b]`, `Some(x)`/`None`, and `Variant(x)` (`Code(38)`, `Stages([lock, read])`).
//! The small value parser is hand-written because `ron::Value` drops variant names, which are
//! exactly what `--set` needs to carry.

use serde_json::{Map, Value};

use crate::Scenario;

/// Applies each `path=value` in order.
///
/// Switching protocol (`protocol.name`) when no edit of the same list sets `protocol.mode`,
/// `protocol.preset` or `protocol.options`: a hybrid code or stage list (`Code(38)`,
/// `Stages([..])`) names the old protocol's stages, so the mode becomes `Rpc`; `Rpc` and
/// `Onesided` mean the same for every protocol and stay. The old protocol's preset and options
/// are dropped.
pub fn apply(s: &Scenario, sets: &[String]) -> Result<Scenario, String> {
    if sets.is_empty() {
        return Ok(s.clone());
    }
    let mut v = serde_json::to_value(s).map_err(|e| e.to_string())?;
    let paths: Vec<&str> = sets.iter().map(|s| s.split_once('=').map_or("", |(p, _)| p.trim())).collect();
    let sets_mode = paths.iter().any(|p| {
        *p == "protocol"
            || ["protocol.mode", "protocol.preset", "protocol.options"]
                .iter()
                .any(|f| p == f || p.starts_with(&format!("{f}.")))
    });
    for set in sets {
        let (path, value) = set.split_once('=').ok_or_else(|| format!("--set {set}: expected path=value"))?;
        let (path, value) = (path.trim(), value.trim());
        let segs: Vec<&str> = path.split('.').collect();
        if segs.iter().any(|p| p.is_empty()) {
            return Err(format!("--set {set}: {path:?} is not a field path (e.g. cluster.nodes)"));
        }
        let old_protocol = protocol_of(&v);
        edit(&mut v, &segs, value, &checked::<Scenario>).map_err(|e| format!("--set {set}: {e}"))?;
        if path == "protocol.name" && !sets_mode && old_protocol.is_some() && old_protocol != protocol_of(&v) {
            reset_for(&mut v["protocol"]);
        }
    }
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// The protocol `v` names, by its registry name.
fn protocol_of(v: &Value) -> Option<&'static str> {
    txbed_protocols::named(v.get("protocol")?.get("name")?.as_str()?).map(|p| p.name())
}

/// After a protocol switch: drop the mode, preset and options that were the old one's.
fn reset_for(p: &mut Value) {
    if p.get("mode").is_some_and(Value::is_object) {
        p["mode"] = Value::from("Rpc");
    }
    if let Value::Object(m) = p {
        m.remove("preset");
        m.remove("options");
    }
}

/// Deserializes `v` as `T`; the error names the field (`cluster.nodes`) and, for numbers, what
/// it takes, quoting `got` (the value as the user wrote it).
fn checked<T: serde::de::DeserializeOwned>(v: &Value, got: &str) -> Result<(), String> {
    serde_path_to_error::deserialize::<_, T>(v.clone()).map(|_| ()).map_err(|e| {
        let path = crate::fields::dotted(e.path());
        crate::fields::describe(&path, &e.into_inner().to_string(), got)
    })
}

/// Sets `segs` to `value` in `v` and checks the result with `check`. A value that is not in
/// the file's syntax, or does not fit, is tried as a bare string (paths, names: `--set
/// cluster.nic=/tmp/my.ron`); if that does not fit either, the first error stands.
fn edit(
    v: &mut Value,
    segs: &[&str],
    value: &str,
    check: &dyn Fn(&Value, &str) -> Result<(), String>,
) -> Result<(), String> {
    let first = match parse_value(value) {
        Ok(parsed) => {
            let mut w = v.clone();
            match set_path(&mut w, segs, parsed).and_then(|()| check(&w, value)) {
                Ok(()) => {
                    *v = w;
                    return Ok(());
                }
                Err(e) => e,
            }
        }
        Err(e) => e,
    };
    let mut w = v.clone();
    if !value.is_empty() && set_path(&mut w, segs, Value::String(value.to_string())).is_ok() && check(&w, value).is_ok()
    {
        *v = w;
        return Ok(());
    }
    Err(first)
}

/// `PATH=VALUE` edits of a NIC profile alone (`txbed bench-verbs --set`): paths inside the
/// profile (`host.rpc_dispatch_ns=500`), with or without a scenario's `nic.` prefix.
pub fn nic_overrides(sets: &[String]) -> Result<txbed_sim::profile::NicOverrides, String> {
    let mut v = Value::Object(Map::new());
    for set in sets {
        let (path, value) = set.split_once('=').ok_or_else(|| format!("--set {set}: expected path=value"))?;
        let path = path.trim();
        let path = path.strip_prefix("nic.").unwrap_or(path);
        let segs: Vec<&str> = path.split('.').collect();
        if segs.iter().any(|p| p.is_empty()) {
            return Err(format!("--set {set}: {path:?} is not a field path (e.g. host.rpc_dispatch_ns)"));
        }
        edit(&mut v, &segs, value.trim(), &checked::<txbed_sim::profile::NicOverrides>)
            .map_err(|e| format!("--set {set}: {e}"))?;
    }
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// An externally tagged enum variant: `{"Variant": inner}`.
fn variant(v: &Value) -> Option<&str> {
    match v {
        Value::Object(m) if m.len() == 1 => {
            let k = m.keys().next()?;
            k.starts_with(|c: char| c.is_ascii_uppercase()).then_some(k.as_str())
        }
        _ => None,
    }
}

fn set_path(v: &mut Value, path: &[&str], new: Value) -> Result<(), String> {
    let (head, rest) = (path[0], &path[1..]);
    if v.is_null() {
        *v = Value::Object(Map::new());
    }
    // `name` of an enum with data: pick the variant, parameters at their defaults.
    if head == "name" && rest.is_empty() {
        if let Some(cur) = variant(v) {
            let inner = &v[cur];
            let fresh = if inner.is_object() { Value::Object(Map::new()) } else { inner.clone() };
            let name = match &new {
                Value::String(s) => s.clone(),
                other => return Err(format!("a variant name is a word, got {other}")),
            };
            let mut m = Map::new();
            m.insert(canonical(&name), fresh);
            *v = Value::Object(m);
            return Ok(());
        }
    }
    if let Some(cur) = variant(v).map(str::to_string) {
        if cur != head {
            return set_path(v.get_mut(&cur).expect("variant"), path, new);
        }
    }
    let Value::Object(m) = v else {
        return Err(format!("cannot set .{head}: the value there is {v}, not a structure"));
    };
    let slot = m.entry(head.to_string()).or_insert(Value::Null);
    if rest.is_empty() {
        *slot = new;
        Ok(())
    } else {
        set_path(slot, rest, new)
    }
}

/// A variant name as the schema spells it: `ycsb` → `Ycsb`; the schema's aliases accept the
/// lower-case forms, but a tag is matched as written, so capitalise the first letter.
fn canonical(name: &str) -> String {
    let mut c = name.chars();
    match c.next() {
        Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

/// Parses one value in the scenario file's syntax into its serde form.
pub fn parse_value(text: &str) -> Result<Value, String> {
    let mut p = P { s: text.as_bytes(), i: 0 };
    let v = p.value()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("unexpected {:?} at column {} of the value", &text[p.i..], p.i + 1));
    }
    Ok(v)
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
}

impl P<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn value(&mut self) -> Result<Value, String> {
        self.ws();
        match self.peek() {
            None => Err("empty value".into()),
            Some(b'"') => self.string(),
            Some(b'[') => {
                self.i += 1;
                let items = self.list(b']')?;
                Ok(Value::Array(items))
            }
            Some(b'(') => self.tuple_or_struct(),
            Some(c) if c == b'-' || c == b'+' || c.is_ascii_digit() || c == b'.' => self.number(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-') {
                    self.i += 1;
                }
                let word = std::str::from_utf8(&self.s[start..self.i]).expect("ascii").to_string();
                self.ws();
                if self.peek() == Some(b'(') {
                    // `Variant(x)`, `Variant(x, y)` or `Variant(a: 1, b: 2)`.
                    let inner = match self.tuple_or_struct()? {
                        Value::Array(mut args) if args.len() == 1 => args.remove(0),
                        other => other,
                    };
                    if word == "Some" {
                        return Ok(inner);
                    }
                    let mut m = Map::new();
                    m.insert(canonical(&word), inner);
                    return Ok(Value::Object(m));
                }
                Ok(match word.as_str() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    "None" => Value::Null,
                    _ => Value::String(word),
                })
            }
            Some(c) => Err(format!("unexpected {:?} in the value", c as char)),
        }
    }
    fn list(&mut self, close: u8) -> Result<Vec<Value>, String> {
        let mut out = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(out);
            }
            out.push(self.value()?);
            if !self.eat(b',') {
                if self.eat(close) {
                    return Ok(out);
                }
                return Err(format!("expected ',' or '{}'", close as char));
            }
        }
    }
    /// `(a: 1, b: 2)` is a structure; `(1, 2)` a tuple.
    fn tuple_or_struct(&mut self) -> Result<Value, String> {
        self.i += 1;
        let save = self.i;
        self.ws();
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
            self.i += 1;
        }
        let is_struct = self.i > start && {
            self.ws();
            self.peek() == Some(b':')
        };
        self.i = save;
        if !is_struct {
            return Ok(Value::Array(self.list(b')')?));
        }
        let mut m = Map::new();
        loop {
            if self.eat(b')') {
                return Ok(Value::Object(m));
            }
            self.ws();
            let start = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                self.i += 1;
            }
            let key = std::str::from_utf8(&self.s[start..self.i]).expect("ascii").to_string();
            if key.is_empty() || !self.eat(b':') {
                return Err("expected `field: value` in a structure".into());
            }
            let v = self.value()?;
            m.insert(key, v);
            if !self.eat(b',') {
                if self.eat(b')') {
                    return Ok(Value::Object(m));
                }
                return Err("expected ',' or ')'".into());
            }
        }
    }
    fn string(&mut self) -> Result<Value, String> {
        self.i += 1;
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).map(Value::String).map_err(|e| e.to_string()),
                b'\\' => {
                    let e = self.peek().ok_or("unterminated string")?;
                    self.i += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        other => other,
                    });
                }
                _ => out.push(c),
            }
        }
        Err("unterminated string".into())
    }
    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.' | b'_')) {
            self.i += 1;
        }
        let t: String = std::str::from_utf8(&self.s[start..self.i]).expect("ascii").replace('_', "");
        if let Ok(u) = t.parse::<u64>() {
            return Ok(Value::from(u));
        }
        if let Ok(i) = t.parse::<i64>() {
            return Ok(Value::from(i));
        }
        match t.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::from(f)),
            _ => Err(format!("{t:?} is not a number")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_in_the_file_syntax() {
        assert_eq!(parse_value("8").unwrap(), Value::from(8u64));
        assert_eq!(parse_value("-2").unwrap(), Value::from(-2i64));
        assert_eq!(parse_value("0.5").unwrap(), Value::from(0.5));
        assert_eq!(parse_value("1_000").unwrap(), Value::from(1000u64));
        assert_eq!(parse_value("true").unwrap(), Value::Bool(true));
        assert_eq!(parse_value("occ").unwrap(), Value::from("occ"));
        assert_eq!(parse_value("\"a b\"").unwrap(), Value::from("a b"));
        assert_eq!(parse_value("None").unwrap(), Value::Null);
        assert_eq!(parse_value("Some(3)").unwrap(), Value::from(3u64));
        assert_eq!(parse_value("Code(38)").unwrap(), serde_json::json!({"Code": 38}));
        assert_eq!(parse_value("Stages([lock, read])").unwrap(), serde_json::json!({"Stages": ["lock", "read"]}));
        assert_eq!(parse_value("[1, 2,]").unwrap(), serde_json::json!([1, 2]));
        assert_eq!(parse_value("(a: 1, b: x)").unwrap(), serde_json::json!({"a": 1, "b": "x"}));
        assert_eq!(
            parse_value("Backoff(first_us: 2, max_us: 64)").unwrap(),
            serde_json::json!({"Backoff": {"first_us": 2, "max_us": 64}})
        );
        assert_eq!(parse_value("Pair(1, 2)").unwrap(), serde_json::json!({"Pair": [1, 2]}));
        for bad in ["", "[1, 2", "\"open", "1.2.3", "(a: )", "x y", "@", "Backoff(first_us: )"] {
            assert!(parse_value(bad).is_err(), "{bad:?} parsed");
        }
    }
}
