//! CALVIN's one-sided channels (RCC Sec. 4.6: "a specific buffer structure in each node that
//! is known among all machines, so that the sender can directly use RDMA WRITEs").
//!
//! A channel carries one kind of message (input batches, or forwarded values) from a sender to
//! a receiver. In the CALVIN area of every node's region (`Layout::with_calvin`), per channel:
//!
//! ```text
//! inbox[ch][sender]     ring written by the sender's WRITEs
//! outbox[ch][receiver]  the sender's copy of what it wrote there (the WRITEs' local source)
//! tail[ch][sender]      bytes the sender has written (the notify WRITE)
//! ack[ch][receiver]     bytes the receiver has consumed (written back by the receiver)
//! ```
//!
//! Sending is two doorbelled WRITEs: the frames (value), then the tail word (notify); per-QP
//! order lands the frames first. A frame never straddles the ring's end: a `SKIP` frame sends
//! the receiver back to the start. The sender never overwrites bytes the receiver has not
//! acknowledged (credit), and the receiver acknowledges once a quarter of the ring is consumed,
//! so a frame of at most a quarter of the ring always finds room.

use std::collections::VecDeque;

use txbed_transport::{Ctx, LocalBuf, Op, Payload};

use super::wire::SKIP;
use txbed_txn::node::NodeState;
use txbed_txn::ops;
use txbed_txn::store::Layout;
use txbed_txn::wire::{align8, WireError};
use txbed_txn::TxnError;

/// Bytes of each one-sided ring in CALVIN's area.
pub const RING_BYTES: u64 = 16 << 10;

/// The two channels.
pub(crate) const INPUT: usize = 0;
pub(crate) const FORWARD: usize = 1;

/// Bytes of CALVIN's area in a cluster of `nodes` (RCC Sec. 4.6: "a specific buffer structure
/// in each node that is known among all machines"), for 2 channels (input dispatch, value
/// forwarding) x `nodes` peers: an inbox ring per sender, an outbox ring per receiver (the
/// WRITEs' source, mirroring the receiver's inbox), then per channel and peer a tail word
/// (written by the sender) and an ack word (written by the receiver).
pub(crate) fn area_bytes(nodes: u16) -> u64 {
    nodes as u64 * PER_NODE
}

const PER_NODE: u64 = 4 * RING_BYTES + 4 * 8;

/// Peers the area was sized for.
fn peers(l: &Layout) -> u64 {
    debug_assert_eq!(l.area_bytes % PER_NODE, 0, "CALVIN's area is not area_bytes(nodes)");
    l.area_bytes / PER_NODE
}

fn ring_at(l: &Layout, box_: u64, ch: usize, peer: u16) -> u64 {
    let n = peers(l);
    l.area_at + (box_ * 2 * n + ch as u64 * n + peer as u64) * RING_BYTES
}
fn inbox(l: &Layout, ch: usize, sender: u16) -> u64 {
    ring_at(l, 0, ch, sender)
}
fn outbox(l: &Layout, ch: usize, receiver: u16) -> u64 {
    ring_at(l, 1, ch, receiver)
}
fn word_at(l: &Layout, which: u64, ch: usize, peer: u16) -> u64 {
    let n = peers(l);
    l.area_at + 4 * n * RING_BYTES + (which * 2 * n + ch as u64 * n + peer as u64) * 8
}
fn tail_word(l: &Layout, ch: usize, sender: u16) -> u64 {
    word_at(l, 0, ch, sender)
}
fn ack_word(l: &Layout, ch: usize, receiver: u16) -> u64 {
    word_at(l, 1, ch, receiver)
}

/// Sender side of one channel: messages not yet written, and bytes written so far.
#[derive(Default)]
pub(crate) struct Out {
    pub(crate) msgs: VecDeque<Vec<u8>>,
    tail: u64,
}

/// Receiver side of one channel: bytes consumed, and acknowledged to the sender.
#[derive(Default)]
pub(crate) struct In {
    head: u64,
    acked: u64,
}

/// Whether `n` QP slots are free on `q` (the send queue must not overflow: we never wait).
fn room(ctx: &Ctx, q: txbed_transport::QpId, n: u32) -> bool {
    ctx.qp_info(q).is_none_or(|i| ctx.outstanding(q) + n <= i.max_outstanding / 2)
}

/// Whether to signal a request: always, or with passive ACK only when the queue fills.
fn signal(ctx: &Ctx, n: &NodeState, q: txbed_transport::QpId) -> bool {
    let depth = ctx.qp_info(q).map_or(2, |i| i.max_outstanding);
    !n.rdma.passive_ack || ctx.outstanding(q) + 8 >= depth / 4
}

fn post(ctx: &Ctx, n: &NodeState, q: txbed_transport::QpId, ops: Vec<(Op, bool)>) -> Result<(), TxnError> {
    if n.rdma.doorbell {
        ctx.post(q, ops)?;
    } else {
        for op in ops {
            ctx.post(q, [op])?;
        }
    }
    Ok(())
}

/// Writes as many queued messages to `to`'s inbox as credit allows; returns the bytes sent.
pub(crate) fn send(ctx: &Ctx, n: &NodeState, out: &mut Out, ch: usize, to: u16) -> Result<u64, TxnError> {
    if out.msgs.is_empty() {
        return Ok(0);
    }
    let l = &n.catalog.layout;
    let (ring, base) = (RING_BYTES, n.base());
    let q = ops::qp(ctx, to)?;
    if !room(ctx, q, 4) {
        return Ok(0);
    }
    let acked = ctx.load_local(base + ack_word(l, ch, to))?;
    let (start, mut segs): (u64, Vec<(u64, u64)>) = (out.tail, Vec::new());
    let mut seg = |off: u64, len: u64| match segs.last_mut() {
        Some((o, l)) if *o + *l == off => *l += len,
        _ => segs.push((off, len)),
    };
    while let Some(m) = out.msgs.front() {
        let framed = 8 + align8(m.len()) as u64;
        assert!(framed <= ring / 4, "CALVIN message of {} B exceeds a quarter ring", m.len());
        let pos = out.tail % ring;
        let skip = if pos + framed > ring { ring - pos } else { 0 };
        if out.tail + skip + framed - acked > ring {
            break; // no credit: the rest waits for the receiver's ack
        }
        if skip > 0 {
            ctx.write_local(base + outbox(l, ch, to) + pos, &(SKIP as u64).to_le_bytes())?;
            seg(pos, 8);
            out.tail += skip;
        }
        let mut f = Vec::with_capacity(framed as usize);
        super::wire::frame(&mut f, m);
        let pos = out.tail % ring;
        debug_assert_eq!(f.len() as u64, framed);
        ctx.write_local(base + outbox(l, ch, to) + pos, &f)?;
        seg(pos, framed);
        out.tail += framed;
        out.msgs.pop_front();
    }
    if out.tail == start {
        return Ok(0);
    }
    let lkey = n.catalog.regions[n.me as usize].lkey;
    let mut ops: Vec<(Op, bool)> = segs
        .iter()
        .map(|&(off, len)| {
            let src = LocalBuf { lkey, addr: base + outbox(l, ch, to) + off, len: len as u32 };
            let remote = n.catalog.remote(to, inbox(l, ch, n.me) + off, len as u32);
            (Op::Write { src: Payload::Local(src), remote }, false)
        })
        .collect();
    let notify = Op::Write {
        src: Payload::Inline(out.tail.to_le_bytes().to_vec()),
        remote: n.catalog.remote(to, tail_word(l, ch, n.me), 8),
    };
    ops.push((notify, signal(ctx, n, q)));
    post(ctx, n, q, ops)?;
    Ok(out.tail - start)
}

/// Takes every complete message `from` wrote into this node's inbox, and acknowledges them
/// once a quarter of the ring is consumed. The ring is written by a peer: a tail beyond its
/// credit or a frame overrunning the tail or the ring is an error, not a panic.
pub(crate) fn poll(ctx: &Ctx, n: &NodeState, inb: &mut In, ch: usize, from: u16) -> Result<Vec<Vec<u8>>, TxnError> {
    let l = &n.catalog.layout;
    let (ring, base) = (RING_BYTES, n.base());
    let tail = ctx.load_local(base + tail_word(l, ch, from))?;
    if tail < inb.head || tail - inb.head > ring {
        return Err(WireError::Invalid("a CALVIN ring's tail is behind its head or beyond the sender's credit").into());
    }
    let mut msgs = Vec::new();
    while inb.head < tail {
        let pos = inb.head % ring;
        let at = base + inbox(l, ch, from) + pos;
        let len = ctx.load_local(at)? as u32;
        // Frames below the tail are whole: the notify WRITE lands after them (per-QP order).
        let framed = if len == SKIP { ring - pos } else { 8 + align8(len as usize) as u64 };
        if (len != SKIP && (framed > ring / 4 || pos + framed > ring)) || inb.head + framed > tail {
            return Err(WireError::Invalid("a CALVIN ring frame overruns the ring or the tail").into());
        }
        if len == SKIP {
            inb.head += framed;
            continue;
        }
        let mut m = vec![0u8; len as usize];
        ctx.read_local(at + 8, &mut m)?;
        inb.head += framed;
        msgs.push(m);
    }
    if inb.head - inb.acked >= ring / 4 {
        let q = ops::qp(ctx, from)?;
        if room(ctx, q, 1) {
            let ack = Op::Write {
                src: Payload::Inline(inb.head.to_le_bytes().to_vec()),
                remote: n.catalog.remote(from, ack_word(l, ch, n.me), 8),
            };
            let sig = signal(ctx, n, q);
            post(ctx, n, q, vec![(ack, sig)])?;
            inb.acked = inb.head;
        }
    }
    Ok(msgs)
}
