//! MVCC (RCC Sec. 4.4).
//!
//! Not implemented yet: every attempt fails with a clear message.

use std::rc::Rc;

use txbed_transport::{Ctx, HandlerFn};
use txbed_workloads::TxnSpec;

use crate::node::NodeState;
use crate::nowait::Attempt;
use crate::stage::Stage;

/// The stages MVCC has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 5] = [Stage::Lock, Stage::Read, Stage::Log, Stage::Release, Stage::Commit];

/// Tuple extension bytes for a record of `record_bytes`.
pub fn ext_bytes(_record_bytes: u64) -> u64 {
    0
}

/// Participant-side state of MVCC on one node.
#[derive(Default)]
pub struct Participant {}

/// MVCC's RPC handlers (ids 30..=39).
pub fn handlers(_n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    Vec::new()
}

pub async fn attempt(_ctx: &Ctx, _n: &NodeState, _spec: &TxnSpec, _id: u64) -> Attempt {
    Attempt::Failed("MVCC is not implemented yet".into())
}
