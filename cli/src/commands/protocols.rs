//! `txbed protocols`: every registered protocol with what it declares, read from the
//! registry (`txbed_protocols::REGISTRY`), so a new protocol shows up with no edit here.

use std::process::ExitCode;

use serde_json::{json, Value};
use txbed_txn::protocol::ProtocolRef;
use txbed_txn::stage::Hybrid;

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> ExitCode {
    if a.json {
        let all: Vec<_> = txbed_protocols::REGISTRY.iter().map(|&p| protocol_json(p)).collect();
        println!("{}", serde_json::to_string_pretty(&all).expect("JSON"));
    } else {
        print!("{}", protocols_text());
    }
    ExitCode::SUCCESS
}

/// One protocol as JSON: name, description, isolation, needs, stages with their hybrid-code
/// bits, modes, options with defaults, presets, planted bugs and RPC handlers.
pub fn protocol_json(p: ProtocolRef) -> Value {
    let stages: Vec<Value> = p.stages().iter().map(|s| json!({ "stage": s.name(), "bit": s.bit() })).collect();
    json!({
        "name": p.name(),
        "description": p.description(),
        "isolation": p.isolation().name(),
        "needs": p.needs().describe(),
        "stages": stages,
        "modes": { "rpc": 0, "onesided": Hybrid::full(p.stages()).0, "hybrid_codes": Hybrid::all_codes(p.stages()).len() },
        "options": p.default_options(),
        "presets": p.presets().iter().map(|x| json!({ "name": x.name, "about": x.about })).collect::<Vec<_>>(),
        "bugs": p.bugs().iter().map(|b| json!({ "name": b.name, "about": b.about })).collect::<Vec<_>>(),
        "handlers": p.handler_names(),
    })
}

/// Every registered protocol, as a readable listing.
pub fn protocols_text() -> String {
    let mut out = String::new();
    for &p in txbed_protocols::REGISTRY {
        out += &protocol_text(p);
        out.push('\n');
    }
    out
}

fn protocol_text(p: ProtocolRef) -> String {
    let stages: Vec<String> = p.stages().iter().map(|s| format!("{} ({})", s.name(), s.bit())).collect();
    let codes = Hybrid::all_codes(p.stages()).len();
    let mut s = format!("{}: {}\n", p.name(), p.description());
    s += &format!("  isolation  {}; needs {}\n", p.isolation().name(), p.needs().describe());
    s += &format!("  stages     {}\n", stages.join(", "));
    s += &format!(
        "  modes      Rpc (0), Onesided ({}), Code(c) or Stages([..]): {codes} hybrid codes\n",
        Hybrid::full(p.stages()).0
    );
    let options = p.default_options();
    if !options.is_null() {
        s += &format!("  options    {options} (defaults; protocol.options)\n");
    }
    for x in p.presets() {
        s += &format!("  preset     {}: {}\n", x.name, x.about);
    }
    for b in p.bugs() {
        s += &format!("  bug        {}: {}\n", b.name, b.about);
    }
    if !p.handler_names().is_empty() {
        s += &format!("  handlers   {}\n", p.handler_names().join(", "));
    }
    s
}
