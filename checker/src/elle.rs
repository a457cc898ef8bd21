//! Export to Elle's list-append history form (jepsen-io/elle, `elle.list-append`).
//!
//! Every write becomes an append of a value unique to its key (the version number it
//! installed); every read lists all committed values appended to that key up to the version it
//! observed, in version order. Each committed transaction is an `invoke`/`ok` pair on its own
//! process (node, worker, coroutine), with its start and end times; aborted transactions are an
//! `invoke`/`fail` pair. The output is one JSON array of operations, as elle-cli accepts.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::history::{History, Status};

pub fn to_list_append(h: &History) -> Value {
    // Committed versions per key, in version order.
    let mut versions: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for t in h.txns.iter().filter(|t| t.status == Status::Committed) {
        for w in &t.writes {
            versions.entry(w.key).or_default().push(w.version);
        }
    }
    for v in versions.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    let mut txns: Vec<_> = h.txns.iter().collect();
    txns.sort_by_key(|t| (t.start_ns, t.id));
    // Invocations and completions interleaved in time order.
    let mut events: Vec<(u64, u8, usize)> = Vec::new();
    for (i, t) in txns.iter().enumerate() {
        events.push((t.start_ns, 0, i));
        events.push((t.end_ns, 1, i));
    }
    events.sort_unstable();
    let mut ops = Vec::with_capacity(events.len());
    for (index, (time, done, i)) in events.into_iter().enumerate() {
        let t = txns[i];
        let process = ((t.node as u64) << 32) | ((t.worker as u64) << 16) | t.coroutine as u64;
        let mut mops: Vec<Value> = Vec::new();
        for r in &t.reads {
            let seen: Vec<u64> = if done == 1 {
                versions
                    .get(&r.key)
                    .map(|v| v.iter().copied().filter(|&x| x <= r.version).collect())
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            mops.push(if done == 1 { json!(["r", r.key, seen]) } else { json!(["r", r.key, null]) });
        }
        for w in &t.writes {
            mops.push(json!(["append", w.key, w.version]));
        }
        let kind = match (done, t.status) {
            (0, _) => "invoke",
            (_, Status::Committed) => "ok",
            (_, Status::Aborted) => "fail",
        };
        ops.push(json!({"index": index, "type": kind, "f": "txn", "value": mops, "process": process, "time": time}));
    }
    Value::Array(ops)
}
