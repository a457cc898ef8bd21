//! `txbed list WHAT`: one line per protocol, preset, hybrid code, workload, NIC profile or
//! scenario file, read from the registries and the built-in profiles so nothing here needs an
//! edit when a protocol, workload or profile is added. `txbed protocols` and `txbed workloads`
//! keep the long forms.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};
use txbed_txn::stage::{Hybrid, Stage};

use super::fail;

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum What {
    /// Registered protocols (`protocol.name`).
    Protocols,
    /// Every protocol's presets (`protocol.preset`).
    Presets,
    /// Every protocol's hybrid codes (`protocol.mode: Code(c)`) and the stages each runs one-sided.
    Codes,
    /// Registered workloads (`workload`).
    Workloads,
    /// Built-in NIC profiles (`cluster.nic`).
    Nics,
    /// Scenario and sweep files under --dir, with the first line of their leading comment.
    Scenarios,
}

#[derive(clap::Args)]
pub struct Args {
    pub what: What,
    /// Only this protocol's presets or codes.
    #[arg(long)]
    pub protocol: Option<String>,
    /// Where `list scenarios` looks (recursively).
    #[arg(long, default_value = "scenarios")]
    pub dir: PathBuf,
    /// Print JSON (an array of objects) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> ExitCode {
    let rows = match rows(&a) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if a.json {
        let all: Vec<Value> = rows.iter().map(|(n, d)| json!({ "name": n, "description": d })).collect();
        println!("{}", serde_json::to_string_pretty(&all).expect("JSON"));
    } else {
        let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        for (n, d) in &rows {
            println!("{n:width$}  {d}");
        }
    }
    ExitCode::SUCCESS
}

/// (name, one-line description) per item.
fn rows(a: &Args) -> Result<Vec<(String, String)>, String> {
    let protocols = || -> Result<Vec<_>, String> {
        let all = txbed_protocols::REGISTRY.iter().copied();
        match &a.protocol {
            None => Ok(all.collect()),
            Some(want) => {
                let found: Vec<_> = all.filter(|p| p.name().eq_ignore_ascii_case(want)).collect();
                if found.is_empty() {
                    let names: Vec<_> = txbed_protocols::REGISTRY.iter().map(|p| p.name()).collect();
                    return Err(format!("no protocol named {want:?}; protocols are {}", names.join(", ")));
                }
                Ok(found)
            }
        }
    };
    Ok(match a.what {
        What::Protocols => txbed_protocols::REGISTRY
            .iter()
            .map(|p| (p.name().to_string(), format!("{} [{}]", p.description(), p.isolation().name())))
            .collect(),
        What::Presets => protocols()?
            .iter()
            .flat_map(|p| p.presets().iter().map(move |x| (format!("{} {}", p.name(), x.name), x.about.to_string())))
            .collect(),
        What::Codes => protocols()?
            .iter()
            .flat_map(|p| {
                Hybrid::all_codes(p.stages())
                    .into_iter()
                    .map(move |c| (format!("{} {}", p.name(), c.0), code_text(c, p.stages())))
            })
            .collect(),
        What::Workloads => txbed_workloads::REGISTRY
            .iter()
            .map(|k| {
                let d = k.description();
                let about = if d.starts_with(k.title()) { d.to_string() } else { format!("{}: {d}", k.title()) };
                (k.name().to_string(), about)
            })
            .collect(),
        What::Nics => txbed_sim::profile::BUILTIN
            .iter()
            .map(|(n, _)| {
                txbed_sim::NicProfile::load(n).map(|p| (n.to_string(), p.description)).map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?,
        What::Scenarios => scenarios(&a.dir)?,
    })
}

/// "one-sided read, log; rpc lock, commit" for a code over `stages`.
fn code_text(c: Hybrid, stages: &[Stage]) -> String {
    let pick =
        |one: bool| stages.iter().filter(|s| c.onesided(**s) == one).map(|s| s.name()).collect::<Vec<_>>().join(", ");
    let (one, rpc) = (pick(true), pick(false));
    match (one.is_empty(), rpc.is_empty()) {
        (true, _) => format!("rpc: {rpc}"),
        (_, true) => format!("one-sided: {one}"),
        _ => format!("one-sided: {one}; rpc: {rpc}"),
    }
}

/// Every `.ron` file under `dir` but NIC profiles, sorted, with its leading comment's first line.
fn scenarios(dir: &Path) -> Result<Vec<(String, String)>, String> {
    if !dir.is_dir() {
        return Err(format!("{}: no such directory (run from the txbed checkout or pass --dir)", dir.display()));
    }
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for e in entries {
            let p = e.map_err(|e| format!("{}: {e}", d.display()))?.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "ron") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut rows = Vec::new();
    for f in files {
        let text = txbed_input::read_text(&f, "scenario", txbed_input::CONFIG_LIMIT).map_err(|e| e.to_string())?;
        let body = text.lines().find(|l| !l.trim_start().starts_with("//") && !l.trim().is_empty()).unwrap_or("");
        // NIC profiles are `(` records; scenarios and sweeps name their type.
        if !(body.starts_with("Scenario") || body.starts_with("Sweep")) {
            continue;
        }
        let kind = if body.starts_with("Sweep") { "sweep: " } else { "" };
        rows.push((f.display().to_string(), format!("{kind}{}", first_sentence(&text))));
    }
    Ok(rows)
}

/// The first sentence of a file's leading `//` comment, its lines joined, at most 120 characters.
fn first_sentence(text: &str) -> String {
    let comment: Vec<&str> = text.lines().map_while(|l| l.trim_start().strip_prefix("//")).map(str::trim).collect();
    let joined = comment.join(" ");
    // "Sec. 5" and "Fig. 6" do not end a sentence.
    let end = joined
        .match_indices(". ")
        .map(|(i, _)| i)
        .find(|&i| !["Sec", "Fig", "e.g", "i.e", "etc"].iter().any(|w| joined[..i].ends_with(w)));
    let sentence = &joined[..end.map_or(joined.len(), |i| i + 1)];
    match sentence.char_indices().nth(120) {
        Some((i, _)) => format!("{}...", &sentence[..i]),
        None => sentence.to_string(),
    }
}
