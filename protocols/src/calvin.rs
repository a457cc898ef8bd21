//! CALVIN (RCC Sec. 4.6).
//!
//! Not implemented yet: every attempt fails with a clear message.

use std::rc::Rc;

use txbed_transport::{Ctx, HandlerFn};
use txbed_workloads::TxnSpec;

use crate::node::NodeState;
use crate::nowait::Attempt;
use crate::stage::Stage;

/// The stages CALVIN has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 2] = [Stage::CalvinInput, Stage::CalvinForward];

/// Tuple extension bytes for a record of `record_bytes`.
pub fn ext_bytes(_record_bytes: u64) -> u64 {
    0
}

/// Participant-side state of CALVIN on one node.
#[derive(Default)]
pub struct Participant {}

/// CALVIN's RPC handlers (ids 50..=59).
pub fn handlers(_n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    Vec::new()
}

pub async fn attempt(_ctx: &Ctx, _n: &NodeState, _spec: &TxnSpec, _id: u64) -> Attempt {
    Attempt::Failed("CALVIN is not implemented yet".into())
}

/// The worker's background coroutine (sequencer, scheduler): returns once `end` has passed.
pub async fn background(_ctx: Ctx, _n: Rc<NodeState>, _end: u64) {}
