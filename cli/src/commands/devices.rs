//! `txbed devices`: RDMA devices, their ports and GIDs, or why there are none.

use std::process::ExitCode;

use super::fail;

#[cfg(feature = "verbs")]
pub fn run() -> ExitCode {
    match txbed_real::verbs::describe_devices() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

#[cfg(not(feature = "verbs"))]
pub fn run() -> ExitCode {
    fail(super::NO_VERBS)
}
