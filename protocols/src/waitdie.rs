//! WAIT-DIE (RCC Sec. 4.3).
//!
//! Not implemented yet: every attempt fails with a clear message.

use std::rc::Rc;

use txbed_transport::{Ctx, HandlerFn};
use txbed_workloads::TxnSpec;

use crate::node::NodeState;
use crate::nowait::Attempt;
use crate::stage::Stage;

/// The stages WAITDIE has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 4] = [Stage::Lock, Stage::Log, Stage::Release, Stage::Commit];

/// Tuple extension bytes for a record of `record_bytes`.
pub fn ext_bytes(_record_bytes: u64) -> u64 {
    0
}

/// Participant-side state of WAITDIE on one node.
#[derive(Default)]
pub struct Participant {}

/// WAITDIE's RPC handlers (ids 20..=29).
pub fn handlers(_n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    Vec::new()
}

pub async fn attempt(_ctx: &Ctx, _n: &NodeState, _spec: &TxnSpec, _id: u64) -> Attempt {
    Attempt::Failed("WAITDIE is not implemented yet".into())
}
