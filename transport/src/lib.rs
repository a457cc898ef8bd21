//! txbed's transport interface: everything protocol code may use to talk to other nodes.
//!
//! - [`verbs`]: memory regions, RC/UD queue pairs, work requests (READ, WRITE, WRITE_WITH_IMM,
//!   CAS, FAA, SEND), completions and their statuses.
//! - [`memory`]: the node's own registered memory as its CPU sees it.
//! - [`worker`]: the sans-IO per-worker core (coroutine executor, posting, completion
//!   dispatch, timers) and [`Ctx`], the handle a coroutine holds.
//! - [`rpc`]: request/reply over UD with batching, piggybacked replies and retransmission.
//! - [`clock`]: the synchronized clock protocols read (`Ctx::clock`) and the sync service.
//! - [`trace`]: optional records of verbs, RPCs and stages for a Chrome/Perfetto trace.
//!
//! Backends (the simulator, sockets, verbs) implement nothing of this interface's semantics
//! themselves beyond moving doorbells, datagrams and completions; protocol code cannot tell
//! them apart.

pub mod clock;
pub mod htm;
pub mod membership;
pub mod memory;
pub mod rpc;
pub mod trace;
pub mod verbs;
pub mod worker;
pub mod zeroed;

pub use clock::{ClockReading, ClockSource, NodeClock};
pub use membership::{NodeStatus, View};
pub use memory::{HostMemory, LazyFill, MemError};
pub use rpc::{CallId, Handled, HandlerCtx, HandlerFn, ReplyToken, RpcConfig, RpcError};
pub use trace::TraceEvent;
pub use verbs::*;
pub use worker::{CpuCosts, Ctx, StepOutcome, Tx, WorkerConfig, WorkerCore, WorkerStats};
pub use zeroed::ZeroedBytes;
