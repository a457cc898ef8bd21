//! CALVIN's messages (RCC Sec. 4.6), the same bytes whether they travel by RPC or by one-sided
//! WRITEs into a ring (`calvin_chan`). All integers little-endian, everything 8-byte aligned.
//!
//! | message | layout |
//! | --- | --- |
//! | input (one transaction) | `id u64 | compute_ns u64 | kind len u16 | reads u16 | writes u16 | params u16 | kind (padded) | keys u64 (reads, then writes) | params i64` |
//! | submission (an input's fragment) | `id u64 | fragment u16 | fragments u16 | pad 4 | bytes` |
//! | batch part | `epoch u64 | part u16 | parts u16 | final u16 | pad 2 | len u32 | pad 4 | chunk` |
//! | forwarded values | `id u64 | entries u32 | pad 4 | entries: key u64 | version word u64 | len u32 | pad 4 | record (padded)` |
//! | result | `id u64 | status u8 | pad 7 | external delta i64 | versions u32 | pad 4 | version read u64 per key (reads, then writes)` |
//!
//! A batch is the stream `inputs u32 | pad 4 | inputs`, cut into chunks of whatever size fits a
//! message: one input may span several parts.
//!
//! Several messages to one peer travel together as frames `len u32 | pad 4 | message (padded)`.

use txbed_workloads::{Key, TxnSpec};

/// Frame length that marks "skip to the start of the ring" in a one-sided ring.
pub(crate) const SKIP: u32 = u32::MAX;

pub(crate) fn align8(x: usize) -> usize {
    x.div_ceil(8) * 8
}

fn pad8(out: &mut Vec<u8>) {
    out.resize(align8(out.len()), 0);
}

/// Reads little-endian fields in order; `None` once the bytes run out.
pub(crate) struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Reader { b, at: 0 }
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    /// `n` bytes, then skips the padding to the next multiple of 8.
    pub(crate) fn padded(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes(n)?;
        self.bytes(align8(n) - n)?;
        Some(s)
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
    pub(crate) fn done(&self) -> bool {
        self.at >= self.b.len()
    }
}

pub(crate) fn unpack(k: u64) -> Key {
    Key { table: (k >> 48) as u16, row: k & ((1 << 48) - 1) }
}

/// Appends a transaction's input.
pub(crate) fn encode_input(out: &mut Vec<u8>, id: u64, spec: &TxnSpec) {
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&spec.compute_ns.to_le_bytes());
    for n in [spec.kind.len(), spec.reads.len(), spec.writes.len(), spec.params.len()] {
        out.extend_from_slice(&(n as u16).to_le_bytes());
    }
    out.extend_from_slice(spec.kind.as_bytes());
    pad8(out);
    for k in spec.reads.iter().chain(&spec.writes) {
        out.extend_from_slice(&k.packed().to_le_bytes());
    }
    for p in &spec.params {
        out.extend_from_slice(&p.to_le_bytes());
    }
}

/// Decodes one input; `intern` turns the kind's name into the `&'static str` a spec holds.
pub(crate) fn decode_input(r: &mut Reader<'_>, intern: &mut dyn FnMut(&str) -> &'static str) -> Option<(u64, TxnSpec)> {
    let id = r.u64()?;
    let compute_ns = r.u64()?;
    let (kl, nr, nw, np) = (r.u16()? as usize, r.u16()? as usize, r.u16()? as usize, r.u16()? as usize);
    let kind = intern(std::str::from_utf8(r.padded(kl)?).ok()?);
    let mut key = || r.u64().map(unpack);
    let reads = (0..nr).map(|_| key()).collect::<Option<Vec<Key>>>()?;
    let writes = (0..nw).map(|_| key()).collect::<Option<Vec<Key>>>()?;
    let params = (0..np).map(|_| r.u64().map(|p| p as i64)).collect::<Option<Vec<i64>>>()?;
    Some((id, TxnSpec { kind, reads, writes, params, compute_ns }))
}

const PART_HEADER: usize = 24;

/// Splits an epoch's inputs (each encoded alone) into batch parts of at most `max` bytes
/// each. The batch is one byte stream (`inputs u32 | pad 4 | inputs`) cut into chunks, so an
/// input larger than a message (a TPC-C stock-level reads ~400 records) spans parts; the
/// receiver joins the chunks in part order. There is always at least one part: an empty batch
/// still closes the epoch. `fin` marks the sequencer's last batch.
pub(crate) fn batch_parts(epoch: u64, fin: bool, inputs: &[Vec<u8>], max: usize) -> Vec<Vec<u8>> {
    let mut stream = Vec::with_capacity(8 + inputs.iter().map(|i| i.len()).sum::<usize>());
    stream.extend_from_slice(&(inputs.len() as u32).to_le_bytes());
    stream.extend_from_slice(&[0; 4]);
    for i in inputs {
        stream.extend_from_slice(i);
    }
    let chunk = (max.saturating_sub(PART_HEADER) / 8 * 8).max(8);
    let chunks: Vec<&[u8]> = stream.chunks(chunk).collect();
    let parts = chunks.len() as u16;
    chunks
        .into_iter()
        .enumerate()
        .map(|(p, c)| {
            let mut m = Vec::with_capacity(PART_HEADER + c.len());
            m.extend_from_slice(&epoch.to_le_bytes());
            m.extend_from_slice(&(p as u16).to_le_bytes());
            m.extend_from_slice(&parts.to_le_bytes());
            m.extend_from_slice(&(fin as u16).to_le_bytes());
            m.extend_from_slice(&[0; 2]);
            m.extend_from_slice(&(c.len() as u32).to_le_bytes());
            m.extend_from_slice(&[0; 4]);
            m.extend_from_slice(c);
            m
        })
        .collect()
}

/// A batch part's header: (epoch, part, parts, final).
pub(crate) fn part_header(m: &[u8]) -> Option<(u64, u16, u16, bool)> {
    let mut r = Reader::new(m);
    Some((r.u64()?, r.u16()?, r.u16()?, r.u16()? != 0))
}

/// The inputs of a whole batch, from its parts in order.
pub(crate) fn batch_inputs<'a>(
    parts: impl IntoIterator<Item = &'a [u8]>,
    intern: &mut dyn FnMut(&str) -> &'static str,
) -> Option<Vec<(u64, TxnSpec)>> {
    let mut stream = Vec::new();
    for m in parts {
        let mut r = Reader::new(m);
        r.bytes(16)?;
        let len = r.u32()? as usize;
        r.u32()?;
        stream.extend_from_slice(r.bytes(len)?);
    }
    let mut r = Reader::new(&stream);
    let n = r.u32()?;
    r.u32()?;
    let inputs = (0..n).map(|_| decode_input(&mut r, intern)).collect::<Option<Vec<_>>>()?;
    r.done().then_some(inputs)
}

const SUBMIT_HEADER: usize = 16;

/// A transaction's input as submissions to its sequencer of at most `max` bytes each:
/// `id u64 | fragment u16 | fragments u16 | pad 4 | bytes` (an input may exceed an RPC).
pub(crate) fn submit_fragments(id: u64, input: &[u8], max: usize) -> Vec<Vec<u8>> {
    let chunk = (max.saturating_sub(SUBMIT_HEADER) / 8 * 8).max(8);
    let chunks: Vec<&[u8]> = input.chunks(chunk).collect();
    let n = chunks.len() as u16;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let mut m = Vec::with_capacity(SUBMIT_HEADER + c.len());
            m.extend_from_slice(&id.to_le_bytes());
            m.extend_from_slice(&(i as u16).to_le_bytes());
            m.extend_from_slice(&n.to_le_bytes());
            m.extend_from_slice(&[0; 4]);
            m.extend_from_slice(c);
            m
        })
        .collect()
}

/// A submission: (id, fragment, fragments, bytes).
pub(crate) fn decode_submit(m: &[u8]) -> Option<(u64, u16, u16, &[u8])> {
    let mut r = Reader::new(m);
    let (id, i, n) = (r.u64()?, r.u16()?, r.u16()?);
    r.u32()?;
    (i < n).then(|| (id, i, n, &m[SUBMIT_HEADER..]))
}

/// A record's value as forwarded: version word and record bytes.
pub(crate) type Value = (u64, Vec<u8>);

/// Forwarded values of transaction `id`, split into messages of at most `max` bytes.
pub(crate) fn forward_msgs(id: u64, values: &[(u64, &Value)], max: usize) -> Vec<Vec<u8>> {
    let mut msgs: Vec<(u32, Vec<u8>)> = Vec::new();
    for (key, (ver, rec)) in values {
        let len = 24 + align8(rec.len());
        if msgs.last().is_none_or(|(_, m)| m.len() + len > max) {
            let mut m = Vec::new();
            m.extend_from_slice(&id.to_le_bytes());
            m.extend_from_slice(&[0; 8]);
            msgs.push((0, m));
        }
        let (n, m) = msgs.last_mut().expect("a message");
        *n += 1;
        m.extend_from_slice(&key.to_le_bytes());
        m.extend_from_slice(&ver.to_le_bytes());
        m.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        m.extend_from_slice(&[0; 4]);
        m.extend_from_slice(rec);
        pad8(m);
    }
    msgs.into_iter()
        .map(|(n, mut m)| {
            m[8..12].copy_from_slice(&n.to_le_bytes());
            m
        })
        .collect()
}

/// Decodes forwarded values: (transaction id, [(key, value)]).
pub(crate) fn decode_forward(m: &[u8]) -> Option<(u64, Vec<(u64, Value)>)> {
    let mut r = Reader::new(m);
    let id = r.u64()?;
    let n = r.u32()?;
    r.u32()?;
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let key = r.u64()?;
        let ver = r.u64()?;
        let len = r.u32()? as usize;
        r.u32()?;
        out.push((key, (ver, r.padded(len)?.to_vec())));
    }
    Some((id, out))
}

pub(crate) fn encode_result(id: u64, status: u8, delta: i64, versions: &[u64]) -> Vec<u8> {
    let mut m = Vec::with_capacity(32 + 8 * versions.len());
    m.extend_from_slice(&id.to_le_bytes());
    m.push(status);
    m.extend_from_slice(&[0; 7]);
    m.extend_from_slice(&delta.to_le_bytes());
    m.extend_from_slice(&(versions.len() as u32).to_le_bytes());
    m.extend_from_slice(&[0; 4]);
    for v in versions {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m
}

/// (id, status, external delta, versions read).
pub(crate) fn decode_result(m: &[u8]) -> Option<(u64, u8, i64, Vec<u64>)> {
    let mut r = Reader::new(m);
    let id = r.u64()?;
    let status = r.bytes(8)?[0];
    let delta = r.u64()? as i64;
    let n = r.u32()?;
    r.u32()?;
    let vs = (0..n).map(|_| r.u64()).collect::<Option<Vec<u64>>>()?;
    Some((id, status, delta, vs))
}

/// Appends `m` as a frame.
pub(crate) fn frame(out: &mut Vec<u8>, m: &[u8]) {
    out.extend_from_slice(&(m.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(m);
    pad8(out);
}

/// Bytes `m` takes as a frame.
pub(crate) fn framed_len(m: &[u8]) -> usize {
    8 + align8(m.len())
}

/// The messages of a sequence of frames (an RPC payload).
pub(crate) fn unframe(b: &[u8]) -> Option<Vec<&[u8]>> {
    let mut r = Reader::new(b);
    let mut out = Vec::new();
    while !r.done() {
        let len = r.u32()? as usize;
        r.u32()?;
        out.push(r.padded(len)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TxnSpec {
        TxnSpec {
            kind: "send-payment",
            reads: vec![Key { table: 1, row: 7 }],
            writes: vec![Key { table: 2, row: 1 << 40 }, Key { table: 2, row: 3 }],
            params: vec![-5, 9],
            compute_ns: 1234,
        }
    }

    #[test]
    fn inputs_round_trip_through_batch_parts() {
        let mut big = spec();
        big.reads = (0..400).map(|row| Key { table: 3, row }).collect();
        let small = spec();
        let mut inputs = Vec::new();
        for id in 1..=40u64 {
            let mut b = Vec::new();
            encode_input(&mut b, id, if id == 17 { &big } else { &small });
            inputs.push(b);
        }
        assert!(inputs[16].len() > 3000);
        let parts = batch_parts(9, false, &inputs, 400);
        assert!(parts.len() > 10 && parts.iter().all(|p| p.len() <= 400));
        let mut intern = |s: &str| if s == "send-payment" { "send-payment" } else { "?" };
        for (i, p) in parts.iter().enumerate() {
            assert_eq!(part_header(p), Some((9, i as u16, parts.len() as u16, false)));
        }
        let back = batch_inputs(parts.iter().map(|p| p.as_slice()), &mut intern).unwrap();
        assert_eq!(back.iter().map(|(id, _)| *id).collect::<Vec<_>>(), (1..=40).collect::<Vec<_>>());
        assert!(back.iter().all(|(id, s)| *s == if *id == 17 { big.clone() } else { spec() }));
        // A missing or reordered part does not decode.
        assert!(batch_inputs(parts[1..].iter().map(|p| p.as_slice()), &mut intern).is_none());
        let mut swapped: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        swapped.swap(0, 1);
        assert_ne!(batch_inputs(swapped, &mut intern).as_ref(), Some(&back));
        let empty = batch_parts(3, true, &[], 400);
        assert_eq!(empty.len(), 1);
        assert_eq!(part_header(&empty[0]), Some((3, 0, 1, true)));
        assert_eq!(batch_inputs([empty[0].as_slice()], &mut intern).unwrap().len(), 0);
    }

    #[test]
    fn large_inputs_are_submitted_in_fragments() {
        let input: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let frags = submit_fragments(42, &input, 1024);
        assert_eq!(frags.len(), 5);
        assert!(frags.iter().all(|f| f.len() <= 1024));
        let mut joined = Vec::new();
        for (i, f) in frags.iter().enumerate() {
            let (id, k, n, bytes) = decode_submit(f).unwrap();
            assert_eq!((id, k, n), (42, i as u16, 5));
            joined.extend_from_slice(bytes);
        }
        assert_eq!(joined, input);
        assert_eq!(submit_fragments(1, &input[..100], 1024).len(), 1);
        assert!(decode_submit(&frags[0][..10]).is_none());
    }

    #[test]
    fn forwards_results_and_frames_round_trip() {
        let vals: Vec<(u64, Value)> = (0..10u64).map(|k| (k, (k * 3, vec![k as u8; 13]))).collect();
        let refs: Vec<(u64, &Value)> = vals.iter().map(|(k, v)| (*k, v)).collect();
        let msgs = forward_msgs(77, &refs, 120);
        assert!(msgs.len() > 1);
        let mut back = Vec::new();
        let mut payload = Vec::new();
        for m in &msgs {
            let (id, vs) = decode_forward(m).unwrap();
            assert_eq!(id, 77);
            back.extend(vs);
            frame(&mut payload, m);
        }
        assert_eq!(back, vals);
        assert_eq!(unframe(&payload).unwrap(), msgs.iter().map(|m| m.as_slice()).collect::<Vec<_>>());
        let r = encode_result(5, 1, -42, &[1, 2, 3]);
        assert_eq!(decode_result(&r), Some((5, 1, -42, vec![1, 2, 3])));
        assert!(decode_forward(&msgs[0][..20]).is_none());
    }
}
