//! Shared helpers for txbed's integration tests.

pub mod harness;

use std::cell::RefCell;
use std::rc::Rc;

use txbed_sim::{NicProfile, Sim, SimConfig};

/// A small simulated cluster on the cx4 profile, optionally modified.
pub fn small_sim(nodes: u16, workers: u16, seed: u64, tweak: impl FnOnce(&mut NicProfile)) -> Sim {
    small_sim_with(nodes, workers, seed, |c| tweak(&mut c.profile))
}

/// Like [`small_sim`], with access to the whole configuration.
pub fn small_sim_with(nodes: u16, workers: u16, seed: u64, tweak: impl FnOnce(&mut SimConfig)) -> Sim {
    let p = NicProfile::load("cx4").expect("built-in profile");
    let mut cfg = SimConfig::new(nodes, workers, p, seed);
    cfg.max_coroutines = 8;
    tweak(&mut cfg);
    Sim::new(cfg).expect("valid config")
}

/// A shared cell tests use to get results out of coroutines.
pub fn cell<T: Default>() -> Rc<RefCell<T>> {
    Rc::new(RefCell::new(T::default()))
}
