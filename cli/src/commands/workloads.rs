//! `txbed workloads`: every registered workload (`txbed_workloads::REGISTRY`) with its scenario
//! name, title, description and default parameters, so a new workload shows up with no edit here.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> ExitCode {
    let mut all = Vec::new();
    for kind in txbed_workloads::REGISTRY {
        let defaults = serde_json::to_value(&*kind.default_config().params).expect("parameters serialise");
        if a.json {
            all.push(serde_json::json!({
                "name": kind.name(),
                "title": kind.title(),
                "description": kind.description(),
                "defaults": defaults,
            }));
        } else {
            println!("{} ({}): {}", kind.name(), kind.title(), kind.description());
            println!("  defaults {defaults}");
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&all).expect("JSON"));
    }
    ExitCode::SUCCESS
}
