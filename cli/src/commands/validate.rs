//! `txbed validate SCENARIO [--set PATH=VALUE]...`: checks a scenario file, with the same
//! edits `run` takes, without running it; prints its memory estimate.

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_scenario::{memory, Scenario};

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    pub scenario: PathBuf,
    /// Change a field by its path in the scenario file, as `txbed run --set` does, e.g.
    /// --set protocol.name=nowait --set cluster.nodes=8.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub sets: Vec<String>,
}

pub fn run(a: Args) -> ExitCode {
    match Scenario::load_with(&a.scenario, &a.sets) {
        Ok((s, profile)) => {
            let mem = match memory::estimate(&s, &profile) {
                Ok(e) => format!(" (memory: about {e})"),
                Err(_) => String::new(),
            };
            println!("{}: ok{mem}", a.scenario.display());
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
