//! `txbed compare A B`: two runs' reports or two sweeps' results side by side, with ratios and,
//! across seeds, Welch's t-test. Exit code 0, or 2 for unreadable or mismatched inputs.

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_report::compare::{compare, text};

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    /// A run's report.json (or its --out directory), or a sweep's results.csv (or directory).
    pub a: PathBuf,
    /// The same kind as A: the ratio is B/A.
    pub b: PathBuf,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> ExitCode {
    match compare(&a.a, &a.b) {
        Ok(c) => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&c).expect("comparison serialises"));
            } else {
                print!("{}", text(&c));
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
