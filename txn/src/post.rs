//! Verb-level helpers every layer above uses: the coroutine's scratch layout, QPs and
//! endpoints, waiting for send-queue room. They see only the transport.

use txbed_transport::{Ctx, Endpoint, LocalBuf, NodeId, Payload, QpId};

use crate::error::TxnError;

/// A coroutine's scratch, in quarters: LOCK/READ/VALIDATE buffers (and index buckets) in the
/// first half, the log record's staging in the third quarter, write-back staging in the last
/// (0, 8 and 12 KiB of the default 16 KiB; the runner gives a workload with larger
/// transactions a larger scratch, `Workload::max_accesses`).
pub fn buffers_end(ctx: &Ctx) -> u64 {
    let s = ctx.scratch();
    s.addr + s.len as u64 / 2
}

/// The log staging area (address, bytes).
pub fn log_area(ctx: &Ctx) -> (u64, u64) {
    let s = ctx.scratch();
    (s.addr + s.len as u64 / 2, s.len as u64 / 4)
}

/// Where write-back staging starts.
pub fn staging_at(ctx: &Ctx) -> u64 {
    let s = ctx.scratch();
    s.addr + s.len as u64 / 4 * 3
}

/// Fails (rather than overrun the next coroutine's scratch) when `bytes` of buffers do not fit.
pub fn check_buffers(ctx: &Ctx, bytes: u64) -> Result<(), TxnError> {
    let s = ctx.scratch();
    if s.addr + bytes > buffers_end(ctx) {
        return Err(TxnError::TooBig {
            what: "record buffers",
            bytes,
            limit: s.len as u64 / 2,
            within: "scratch half",
        });
    }
    Ok(())
}

pub fn endpoint(ctx: &Ctx, node: u16) -> Endpoint {
    Endpoint { node: NodeId(node), worker: ctx.me().worker }
}

/// The RC QP for a stream that needs FIFO order across this worker's coroutines (log rings,
/// CALVIN's channels): this worker's first QP to `node`.
pub fn qp(ctx: &Ctx, node: u16) -> Result<QpId, TxnError> {
    ctx.rc_qp(NodeId(node), 0).ok_or(TxnError::NoQp { node })
}

/// The RC QP for requests about record (`table`, `key`) at `node`. With one QP per remote node
/// (the default) it is that QP. With k > 1 (`cluster.qps_per_node`, DrTM+H Sec. 4's emulation
/// of a k-times larger cluster: k RC QPs to each machine per worker), the node's records are
/// spread over k emulated nodes, one QP each. DrTM+H picks a QP at random per request; picking
/// by record spreads requests as evenly and keeps every request about one record on one QP,
/// so per-QP FIFO still orders its lock, write-back and unlock.
pub fn record_qp(ctx: &Ctx, node: u16, table: u16, key: u64) -> Result<QpId, TxnError> {
    let k = ctx.rc_qp_count(NodeId(node));
    let which = if k <= 1 {
        0
    } else {
        // A multiplicative hash: consecutive rows land on different emulated nodes.
        let h = ((table as u64) << 48 ^ key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        (h % k as u64) as usize
    };
    ctx.rc_qp(NodeId(node), which).ok_or(TxnError::NoQp { node })
}

/// Waits until `q`'s send queue has room for `k` more requests. A worker's coroutines share
/// its QPs, so transactions with many records on one node (TPC-E's customer-position reads
/// about 50) can fill it: drain this coroutine's own requests, then give the others time.
pub async fn room(ctx: &Ctx, q: QpId, k: u32) -> Result<(), TxnError> {
    let full = || ctx.outstanding(q).saturating_add(k) > ctx.qp_info(q).map_or(u32::MAX, |i| i.max_outstanding);
    while full() {
        ctx.wait().await?;
        if full() {
            ctx.sleep(500).await;
        }
    }
    Ok(())
}

/// The payload of a WRITE: inline when small (DrTM+H inlines up to 64 B), otherwise staged
/// in this coroutine's scratch at `*at`, which advances. Each request needs its own staging
/// bytes: the NIC DMA-reads them when it processes the request, after later ones are posted.
pub fn inline_or_staged(ctx: &Ctx, bytes: &[u8], at: &mut u64) -> Result<Payload, TxnError> {
    if bytes.len() <= 64 {
        return Ok(Payload::Inline(bytes.to_vec()));
    }
    let s = ctx.scratch();
    let here = *at;
    *at += (bytes.len() as u64).div_ceil(8) * 8;
    assert!(*at <= s.addr + s.len as u64, "scratch too small for the write set");
    ctx.write_local(here, bytes)?;
    Ok(Payload::Local(LocalBuf { lkey: s.lkey, addr: here, len: bytes.len() as u32 }))
}
