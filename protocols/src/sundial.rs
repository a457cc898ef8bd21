//! SUNDIAL (RCC Sec. 4.5).
//!
//! Not implemented yet: every attempt fails with a clear message.

use std::rc::Rc;

use txbed_transport::{Ctx, HandlerFn};
use txbed_workloads::TxnSpec;

use crate::node::NodeState;
use crate::nowait::Attempt;
use crate::stage::Stage;

/// The stages SUNDIAL has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 6] = [Stage::Lock, Stage::Read, Stage::Log, Stage::Release, Stage::Commit, Stage::Renew];

/// Tuple extension bytes for a record of `record_bytes`.
pub fn ext_bytes(_record_bytes: u64) -> u64 {
    0
}

/// Participant-side state of SUNDIAL on one node.
#[derive(Default)]
pub struct Participant {}

/// SUNDIAL's RPC handlers (ids 40..=49).
pub fn handlers(_n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    Vec::new()
}

pub async fn attempt(_ctx: &Ctx, _n: &NodeState, _spec: &TxnSpec, _id: u64) -> Attempt {
    Attempt::Failed("SUNDIAL is not implemented yet".into())
}
