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

use txbed_txn::node::MALFORMED;
use txbed_txn::wire::{align8, Put, Reader, WireError};
use txbed_workloads::{Key, TxnSpec};

/// Frame length that marks "skip to the start of the ring" in a one-sided ring.
pub(crate) const SKIP: u32 = u32::MAX;

pub(crate) fn unpack(k: u64) -> Key {
    Key { table: (k >> 48) as u16, row: k & ((1 << 48) - 1) }
}

/// Appends a transaction's input.
pub(crate) fn encode_input(out: &mut Vec<u8>, id: u64, spec: &TxnSpec) {
    out.put_u64(id);
    out.put_u64(spec.compute_ns);
    for n in [spec.kind.len(), spec.reads.len(), spec.writes.len(), spec.params.len()] {
        debug_assert!(n <= u16::MAX as usize, "a CALVIN input field of {n} items");
        out.put_u16(n as u16);
    }
    out.put_bytes(spec.kind.as_bytes());
    out.pad8();
    for k in spec.reads.iter().chain(&spec.writes) {
        out.put_u64(k.packed());
    }
    for &p in &spec.params {
        out.put_i64(p);
    }
}

/// Decodes one input; `intern` turns the kind's name into the `&'static str` a spec holds.
pub(crate) fn decode_input(
    r: &mut Reader<'_>,
    intern: &mut dyn FnMut(&str) -> &'static str,
) -> Result<(u64, TxnSpec), WireError> {
    let id = r.u64()?;
    let compute_ns = r.u64()?;
    let (kl, nr, nw, np) = (r.u16()? as usize, r.u16()? as usize, r.u16()? as usize, r.u16()? as usize);
    let kind = std::str::from_utf8(r.padded(kl)?).map_err(|_| WireError::Invalid("transaction kind is not UTF-8"))?;
    let kind = intern(kind);
    let mut key = || r.u64().map(unpack);
    let reads = (0..nr).map(|_| key()).collect::<Result<Vec<Key>, _>>()?;
    let writes = (0..nw).map(|_| key()).collect::<Result<Vec<Key>, _>>()?;
    let params = (0..np).map(|_| r.i64()).collect::<Result<Vec<i64>, _>>()?;
    Ok((id, TxnSpec { kind, reads, writes, params, compute_ns }))
}

const PART_HEADER: usize = 24;

/// Splits an epoch's inputs (each encoded alone) into batch parts of at most `max` bytes
/// each. The batch is one byte stream (`inputs u32 | pad 4 | inputs`) cut into chunks, so an
/// input larger than a message (a TPC-C stock-level reads ~400 records) spans parts; the
/// receiver joins the chunks in part order. There is always at least one part: an empty batch
/// still closes the epoch. `fin` marks the sequencer's last batch.
pub(crate) fn batch_parts(epoch: u64, fin: bool, inputs: &[Vec<u8>], max: usize) -> Vec<Vec<u8>> {
    let mut stream = Vec::with_capacity(8 + inputs.iter().map(|i| i.len()).sum::<usize>());
    stream.put_u32(inputs.len() as u32);
    stream.put_zeros(4);
    for i in inputs {
        stream.put_bytes(i);
    }
    let chunk = (max.saturating_sub(PART_HEADER) / 8 * 8).max(8);
    let chunks: Vec<&[u8]> = stream.chunks(chunk).collect();
    let parts = chunks.len() as u16;
    chunks
        .into_iter()
        .enumerate()
        .map(|(p, c)| {
            let mut m = Vec::with_capacity(PART_HEADER + c.len());
            m.put_u64(epoch);
            m.put_u16(p as u16);
            m.put_u16(parts);
            m.put_u16(fin as u16);
            m.put_zeros(2);
            m.put_u32(c.len() as u32);
            m.put_zeros(4);
            m.put_bytes(c);
            debug_assert_eq!(m.len(), PART_HEADER + c.len());
            m
        })
        .collect()
}

/// A batch part's header: (epoch, part, parts, final).
pub(crate) fn part_header(m: &[u8]) -> Result<(u64, u16, u16, bool), WireError> {
    let mut r = Reader::new(m);
    let (epoch, part, parts, fin) = (r.u64()?, r.u16()?, r.u16()?, r.u16()? != 0);
    if part >= parts {
        return Err(WireError::Invalid("batch part index not below the part count"));
    }
    Ok((epoch, part, parts, fin))
}

/// The inputs of a whole batch, from its parts in order.
pub(crate) fn batch_inputs<'a>(
    parts: impl IntoIterator<Item = &'a [u8]>,
    intern: &mut dyn FnMut(&str) -> &'static str,
) -> Result<Vec<(u64, TxnSpec)>, WireError> {
    let mut stream = Vec::new();
    for m in parts {
        let mut r = Reader::new(m);
        r.skip(16)?;
        let len = r.u32()? as usize;
        r.skip(4)?;
        stream.extend_from_slice(r.bytes(len)?);
        r.finish()?;
    }
    let mut r = Reader::new(&stream);
    let n = r.u32()?;
    r.skip(4)?;
    let inputs = (0..n).map(|_| decode_input(&mut r, intern)).collect::<Result<Vec<_>, _>>()?;
    r.finish()?;
    Ok(inputs)
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
            m.put_u64(id);
            m.put_u16(i as u16);
            m.put_u16(n);
            m.put_zeros(4);
            m.put_bytes(c);
            m
        })
        .collect()
}

/// A submission: (id, fragment, fragments, bytes).
pub(crate) fn decode_submit(m: &[u8]) -> Result<(u64, u16, u16, &[u8]), WireError> {
    let mut r = Reader::new(m);
    let (id, i, n) = (r.u64()?, r.u16()?, r.u16()?);
    r.skip(4)?;
    if i >= n {
        return Err(WireError::Invalid("submission fragment index not below the fragment count"));
    }
    Ok((id, i, n, r.rest()))
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
            m.put_u64(id);
            m.put_zeros(8);
            msgs.push((0, m));
        }
        let (n, m) = msgs.last_mut().expect("a message");
        *n += 1;
        m.put_u64(*key);
        m.put_u64(*ver);
        m.put_u32(rec.len() as u32);
        m.put_zeros(4);
        m.put_bytes(rec);
        m.pad8();
    }
    msgs.into_iter()
        .map(|(n, mut m)| {
            m[8..12].copy_from_slice(&n.to_le_bytes());
            m
        })
        .collect()
}

/// Decodes forwarded values: (transaction id, [(key, value)]).
pub(crate) fn decode_forward(m: &[u8]) -> Result<(u64, Vec<(u64, Value)>), WireError> {
    let mut r = Reader::new(m);
    let id = r.u64()?;
    let n = r.u32()?;
    r.skip(4)?;
    let mut out = Vec::with_capacity(n.min(m.len() as u32 / 24) as usize);
    for _ in 0..n {
        let key = r.u64()?;
        let ver = r.u64()?;
        let len = r.u32()? as usize;
        r.skip(4)?;
        out.push((key, (ver, r.padded(len)?.to_vec())));
    }
    r.finish()?;
    Ok((id, out))
}

pub(crate) fn encode_result(id: u64, status: u8, delta: i64, versions: &[u64]) -> Vec<u8> {
    let mut m = Vec::with_capacity(32 + 8 * versions.len());
    m.put_u64(id);
    m.put_u8(status);
    m.put_zeros(7);
    m.put_i64(delta);
    m.put_u32(versions.len() as u32);
    m.put_zeros(4);
    for &v in versions {
        m.put_u64(v);
    }
    m
}

/// The transaction a result is about.
pub(crate) fn result_id(m: &[u8]) -> Result<u64, WireError> {
    Reader::new(m).u64()
}

/// (id, status, external delta, versions read). A one-byte `MALFORMED` is the sequencer's
/// answer to a submission it could not decode.
pub(crate) fn decode_result(m: &[u8]) -> Result<(u64, u8, i64, Vec<u64>), WireError> {
    if m == [MALFORMED] {
        return Err(WireError::Rejected);
    }
    let mut r = Reader::new(m);
    let id = r.u64()?;
    let status = r.u8()?;
    r.skip(7)?;
    let delta = r.i64()?;
    let n = r.u32()?;
    r.skip(4)?;
    let vs = (0..n).map(|_| r.u64()).collect::<Result<Vec<u64>, _>>()?;
    r.finish()?;
    Ok((id, status, delta, vs))
}

/// Appends `m` as a frame.
pub(crate) fn frame(out: &mut Vec<u8>, m: &[u8]) {
    out.put_u32(m.len() as u32);
    out.put_zeros(4);
    out.put_bytes(m);
    out.pad8();
}

/// Bytes `m` takes as a frame.
pub(crate) fn framed_len(m: &[u8]) -> usize {
    8 + align8(m.len())
}

/// The messages of a sequence of frames (an RPC payload).
pub(crate) fn unframe(b: &[u8]) -> Result<Vec<&[u8]>, WireError> {
    let mut r = Reader::new(b);
    let mut out = Vec::new();
    while !r.done() {
        let len = r.u32()? as usize;
        r.skip(4)?;
        out.push(r.padded(len)?);
    }
    Ok(out)
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
            assert_eq!(part_header(p), Ok((9, i as u16, parts.len() as u16, false)));
        }
        let back = batch_inputs(parts.iter().map(|p| p.as_slice()), &mut intern).unwrap();
        assert_eq!(back.iter().map(|(id, _)| *id).collect::<Vec<_>>(), (1..=40).collect::<Vec<_>>());
        assert!(back.iter().all(|(id, s)| *s == if *id == 17 { big.clone() } else { spec() }));
        // A missing or reordered part does not decode.
        assert!(batch_inputs(parts[1..].iter().map(|p| p.as_slice()), &mut intern).is_err());
        let mut swapped: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        swapped.swap(0, 1);
        assert_ne!(batch_inputs(swapped, &mut intern).as_ref(), Ok(&back));
        let empty = batch_parts(3, true, &[], 400);
        assert_eq!(empty.len(), 1);
        assert_eq!(part_header(&empty[0]), Ok((3, 0, 1, true)));
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
        assert!(decode_submit(&frags[0][..10]).is_err());
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
        assert_eq!(decode_result(&r), Ok((5, 1, -42, vec![1, 2, 3])));
        assert_eq!(decode_result(&[MALFORMED]), Err(WireError::Rejected));
        assert!(decode_result(&r[..r.len() - 1]).is_err());
        assert!(decode_forward(&msgs[0][..20]).is_err());
    }
}
