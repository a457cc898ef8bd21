//! HTM regions as protocols run them (`Ctx::htm_region`), counted per node for the report:
//! regions begun and committed, aborts by cause, fallbacks, time inside regions.

use txbed_transport::htm::Abort;
use txbed_transport::{Ctx, Tx};

use crate::node::NodeState;

/// Abort causes in `HtmStats::aborts` order.
pub const CAUSES: [&str; 5] = ["capacity", "conflict-local", "conflict-rdma", "system", "explicit"];

/// The index of `a` in [`CAUSES`].
pub fn cause_index(a: Abort) -> usize {
    match a {
        Abort::Capacity => 0,
        Abort::ConflictLocal => 1,
        Abort::ConflictRdma => 2,
        Abort::System => 3,
        Abort::Explicit(_) => 4,
    }
}

/// Runs `body` as an HTM region on this worker (`Ctx::htm_region`) and counts how it ended.
pub async fn region<R>(ctx: &Ctx, n: &NodeState, body: impl FnOnce(&mut Tx<'_>) -> R) -> Result<R, Abort> {
    let t0 = ctx.now();
    let r = ctx.htm_region(body).await;
    let mut s = n.stats.borrow_mut();
    s.htm.regions += 1;
    s.htm.region_ns += ctx.now() - t0;
    match &r {
        Ok(_) => s.htm.committed += 1,
        Err(a) => s.htm.aborts[cause_index(*a)] += 1,
    }
    r
}

/// A transaction gave up on HTM and runs its fallback handler.
pub fn fallback(n: &NodeState) {
    n.stats.borrow_mut().htm.fallbacks += 1;
}
