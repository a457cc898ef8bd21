//! The LOG stage: every backup gets the transaction's new values before it commits.
//!
//! One-sided: a WRITE of `[length | record | length]` into the ring buffer the backup keeps
//! for this sender's worker; the length at both ends lets the backup see a record is complete
//! (DrTM+H Sec. 5.4, after FaRM). Rings are reclaimed lazily: once half a ring has been
//! written since the last reclaim, a one-way RPC tells the backup (not on the critical path).
//! RPC: the backup's handler copies the record and replies.

use txbed_transport::Ctx;
use txbed_transport::{Endpoint, LocalBuf, NodeId, Op, Payload};

use crate::node::{NodeState, H_LOG, H_RECLAIM};
use crate::stage::Stage;

/// Sends `record` to every node in `backups` and waits until all have it.
pub async fn append(ctx: &Ctx, n: &NodeState, backups: &[u16], record: &[u8]) -> Result<(), String> {
    let worker = ctx.me().worker;
    if n.hybrid.onesided(Stage::Log) {
        let framed_len = (record.len() as u64 + 8).div_ceil(8) * 8;
        let ring = n.catalog.layout.ring_bytes;
        if framed_len > ring {
            return Err(format!("log record of {} B exceeds the {ring} B ring", record.len()));
        }
        let mut framed = Vec::with_capacity(framed_len as usize);
        framed.extend_from_slice(&(record.len() as u32).to_le_bytes());
        framed.extend_from_slice(record);
        framed.resize(framed_len as usize - 4, 0);
        framed.extend_from_slice(&(record.len() as u32).to_le_bytes());
        let s = ctx.scratch();
        // Scratch [8, 12) KiB holds the log record (see nowait's scratch layout).
        let src_at = s.addr + 8 * 1024;
        if framed_len > 4096 {
            return Err(format!("log record of {} B exceeds the 4 KiB staging area", record.len()));
        }
        ctx.write_local(src_at, &framed).map_err(|e| e.to_string())?;
        for &b in backups {
            let (pos, reclaim) = n.log_tail(worker, b, framed_len);
            let q = ctx.rc_qp(NodeId(b), ctx.coroutine() as usize).ok_or("no QP to backup")?;
            let remote = n.catalog.remote(b, n.catalog.layout.ring(n.me, worker) + pos, framed_len as u32);
            let src = LocalBuf { lkey: s.lkey, addr: src_at, len: framed_len as u32 };
            ctx.post(q, [(Op::Write { src: Payload::Local(src), remote }, true)]).map_err(|e| e.to_string())?;
            if reclaim {
                ctx.call_oneway(Endpoint { node: NodeId(b), worker }, H_RECLAIM, &n.me.to_le_bytes());
            }
        }
        ctx.wait().await.map_err(|c| c.to_string())?;
    } else {
        for &b in backups {
            ctx.call(Endpoint { node: NodeId(b), worker }, H_LOG, record);
        }
        let _ = ctx.wait().await;
        ctx.clear_replies();
    }
    let mut st = n.stats.borrow_mut();
    st.log_records += backups.len() as u64;
    st.log_bytes += (backups.len() * record.len()) as u64;
    Ok(())
}
