//! `txbed validate SCENARIO`: checks a scenario file without running it.

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_scenario::Scenario;

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    pub scenario: PathBuf,
}

pub fn run(a: Args) -> ExitCode {
    match Scenario::load(&a.scenario) {
        Ok(_) => {
            println!("{}: ok", a.scenario.display());
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
