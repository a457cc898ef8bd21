//! The layering rules, enforced:
//! - sans-IO: nothing under txn/ (the shared transaction layer), protocols/ or workloads/
//!   names a backend (the simulator, sockets, verbs), a runtime, threads, the wall clock, or
//!   std's randomly ordered hash containers. Protocol code sees only the transport interface,
//!   a clock and an RNG;
//! - no protocol imports another: what two protocols share lives in txn/ (the crate graph
//!   already keeps txn/ from importing protocols/: txbed-txn does not depend on them);
//! - crates in layers: each workspace crate depends only on crates of lower layers
//!   (`LAYERS`), the real runtime does not need plotting and plotting needs none of ours.

use std::path::{Path, PathBuf};

/// Lower-case fragments that mark a backend, a runtime or nondeterminism.
const FORBIDDEN: &[&str] = &[
    "txbed_sim",
    "txbed-sim",
    "simulat",
    "socket",
    "tcp",
    "udp",
    "ibverbs",
    "sideway",
    "rdma-mummy",
    "rdma_mummy",
    "actix",
    "tokio",
    "std::thread",
    "instant::now",
    "systemtime",
    "hashmap",
    "hashset",
];

fn violations(text: &str) -> Vec<(usize, &'static str)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.to_ascii_lowercase();
        for f in FORBIDDEN {
            if l.contains(f) {
                out.push((i + 1, *f));
            }
        }
    }
    out
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs" || x == "toml" || x == "md") {
            out.push(p);
        }
    }
}

#[test]
fn protocols_and_workloads_name_no_backend() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut all = Vec::new();
    for part in ["txn", "protocols", "workloads"] {
        files(&root.join(part), &mut all);
    }
    assert!(all.len() >= 10, "found only {} files: wrong root?", all.len());
    let mut bad = Vec::new();
    for f in &all {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, what) in violations(&text) {
            bad.push(format!("{}:{line}: {what}", f.strip_prefix(root).unwrap().display()));
        }
    }
    assert!(bad.is_empty(), "protocol/workload code names a backend or runtime:\n{}", bad.join("\n"));
}

#[test]
fn the_scan_catches_a_backend_name() {
    assert_eq!(violations("let s = std::net::TcpStream::connect(a);"), vec![(1, "tcp")]);
    assert_eq!(violations("ok\nuse txbed_sim::Sim;"), vec![(2, "txbed_sim")]);
    assert!(violations("let t = Instant::now();").contains(&(1, "instant::now")));
    assert!(violations("post(ctx, Op::Read { .. })").is_empty());
}

/// The protocol modules of protocols/src: its files and folders but lib.rs.
fn protocol_modules(src: &Path) -> Vec<(String, Vec<PathBuf>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if name == "lib" {
            continue;
        }
        let mut fs = Vec::new();
        if p.is_dir() {
            files(&p, &mut fs);
        } else {
            fs.push(p);
        }
        out.push((name, fs));
    }
    out.sort();
    out
}

/// Paths in `text` (a file of protocol `me`, `top`: its module's root file) that reach
/// another protocol module of `all`.
fn foreign_imports(text: &str, me: &str, top: bool, all: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for other in all.iter().filter(|o| *o != me) {
            let mut paths = vec![format!("crate::{other}"), format!("txbed_protocols::{other}")];
            if top {
                paths.push(format!("super::{other}"));
            }
            for p in paths {
                let hit = code.match_indices(&p).any(|(at, _)| {
                    let next = code[at + p.len()..].chars().next();
                    !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if hit {
                    out.push(format!("line {}: {p}", i + 1));
                }
            }
        }
        if code.contains("crate::{") || (top && code.contains("super::{")) {
            // A grouped import could name a sibling: list the group's names.
            for other in all.iter().filter(|o| *o != me) {
                let group = code.split('{').nth(1).unwrap_or("");
                if group.split(|c: char| !c.is_alphanumeric() && c != '_').any(|w| w == other) {
                    out.push(format!("line {}: {other} in a grouped import", i + 1));
                }
            }
        }
    }
    out
}

#[test]
fn no_protocol_imports_another() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let modules = protocol_modules(&root.join("protocols/src"));
    let names: Vec<String> = modules.iter().map(|(n, _)| n.clone()).collect();
    assert!(names.len() >= 6, "found protocol modules {names:?}: wrong root?");
    let mut bad = Vec::new();
    for (me, fs) in &modules {
        for f in fs {
            let top = f.file_stem().is_some_and(|s| s == me.as_str() || s == "mod");
            let text = std::fs::read_to_string(f).unwrap();
            for hit in foreign_imports(&text, me, top, &names) {
                bad.push(format!("{}: {hit}", f.strip_prefix(root).unwrap().display()));
            }
        }
    }
    assert!(bad.is_empty(), "a protocol imports another (move what they share to txn/):\n{}", bad.join("\n"));
}

#[test]
fn the_import_scan_catches_a_sibling() {
    let all: Vec<String> = ["nowait", "occ", "calvin"].map(String::from).to_vec();
    assert_eq!(foreign_imports("use crate::nowait::execute;", "occ", true, &all), ["line 1: crate::nowait"]);
    assert_eq!(foreign_imports("x\nlet a = super::calvin::RING;", "occ", true, &all), ["line 2: super::calvin"]);
    assert_eq!(foreign_imports("use crate::{nowait, ops};", "occ", true, &all), ["line 1: nowait in a grouped import"]);
    // Its own submodules, the shared layer and comments are fine.
    assert!(foreign_imports("use super::wire;\nuse txbed_txn::ops; // crate::occ", "calvin", false, &all).is_empty());
    assert!(foreign_imports("use crate::occasional;", "calvin", true, &all).is_empty());
}

/// The modules of a crate's `src/` (a file `a.rs` or a folder `a/` is module `a`; a folder's
/// files are submodules `a::b`) and, for each, the modules it names through `crate::X` (and,
/// in a submodule, `super::X`).
fn module_graph(src: &Path) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut graph = std::collections::BTreeMap::new();
    let mut fs = Vec::new();
    files(src, &mut fs);
    for f in fs.iter().filter(|f| f.extension().is_some_and(|x| x == "rs")) {
        let rel = f.strip_prefix(src).unwrap().with_extension("");
        let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().to_string()).collect();
        let parts: Vec<String> = parts.into_iter().filter(|p| p != "mod").collect();
        let me = if parts == ["lib"] { "crate".to_string() } else { parts.join("::") };
        let parent = if parts.len() > 1 { parts[..parts.len() - 1].join("::") } else { "crate".into() };
        let text = std::fs::read_to_string(f).unwrap();
        // Test modules may use their parent's items: they are not part of the layering.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let mut deps = std::collections::BTreeSet::new();
        for line in code.lines().map(|l| l.split("//").next().unwrap_or("")) {
            for (prefix, base) in [("crate::", String::new()), ("super::", format!("{parent}::"))] {
                for (at, _) in line.match_indices(prefix) {
                    let name: String =
                        line[at + prefix.len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if name.is_empty() || name.starts_with(char::is_uppercase) {
                        continue;
                    }
                    let dep = if prefix == "super::" && parent == "crate" { name } else { format!("{base}{name}") };
                    let dep = dep.trim_start_matches("crate::").to_string();
                    if dep != me && graph_node(&dep, src) {
                        deps.insert(dep);
                    }
                }
            }
        }
        graph.insert(me, deps);
    }
    graph
}

/// Whether `module` (`a` or `a::b`) is a file or folder under `src`.
fn graph_node(module: &str, src: &Path) -> bool {
    let p = src.join(module.replace("::", "/"));
    p.with_extension("rs").exists() || p.is_dir()
}

/// A cycle in `graph` (the modules on it, the first repeated at the end), if there is one.
fn find_cycle(graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        n: &'a str,
        g: &'a std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut std::collections::BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| *p == n) {
            let mut c: Vec<String> = path[i..].iter().map(|s| s.to_string()).collect();
            c.push(n.to_string());
            return Some(c);
        }
        if !done.insert(n) {
            return None;
        }
        path.push(n);
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph.keys().find_map(|k| visit(k, graph, &mut Vec::new(), &mut done))
}

/// No import cycle among the modules of the crates that hold protocol code: each module of
/// txn/ and protocols/ uses only modules below it (the crate root only re-exports).
#[test]
fn protocol_crates_have_no_module_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for krate in ["txn", "protocols"] {
        let mut graph = module_graph(&root.join(krate).join("src"));
        assert!(graph.len() >= 6, "{krate}: found only {:?}", graph.keys());
        // The root's `pub use` re-exports point down; only the modules' own uses count.
        graph.remove("crate");
        if let Some(c) = find_cycle(&graph) {
            panic!("{krate}: modules import each other in a cycle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_cycle_scan_catches_a_cycle() {
    let g: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec![])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(find_cycle(&g), Some(["a", "b", "c", "a"].map(String::from).to_vec()));
    let mut acyclic = g.clone();
    acyclic.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&acyclic), None);
}

/// The workspace's crates by folder, lowest layer first. A crate may depend on crates of
/// lower layers only (its `[dependencies]`; tests may use anything).
const LAYERS: &[&[&str]] = &[
    &["input"],
    &["transport", "checker", "workloads", "plot"],
    &["sim", "txn"],
    &["protocols"],
    &["scenario"],
    &["runner"],
    &["report"],
    &["real"],
    &["cli"],
];

/// The folders of the workspace crates a Cargo.toml's `[dependencies]` names.
fn crate_deps(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
        } else if in_deps && line.starts_with("txbed") {
            let name = line.split(|c: char| c == ' ' || c == '.' || c == '=').next().unwrap_or("");
            out.push(if name == "txbed" { "cli".to_string() } else { name.trim_start_matches("txbed-").to_string() });
        }
    }
    out
}

fn layer_of(krate: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&krate))
}

fn layer_violations(krate: &str, deps: &[String]) -> Vec<String> {
    let me = layer_of(krate).unwrap_or_else(|| panic!("{krate} is in no layer: add it to LAYERS"));
    let mut bad = Vec::new();
    for d in deps {
        match layer_of(d) {
            Some(l) if l < me => {}
            _ => bad.push(format!("{krate} depends on {d}, which is not in a layer below it")),
        }
        if d == "plot" && krate != "cli" {
            bad.push(format!("{krate} depends on plot: only the CLI draws"));
        }
    }
    bad
}

#[test]
fn crates_depend_only_on_lower_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut bad = Vec::new();
    for krate in LAYERS.iter().flat_map(|l| l.iter()) {
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        bad.extend(layer_violations(krate, &crate_deps(&manifest)));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // Every workspace member folder with a crate is in a layer (tests and examples aside).
    let ws = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    for member in ws.split('"').filter(|m| !m.contains(['[', ']', '=', ',', ' ', '\n', '*'])) {
        if root.join(member).join("Cargo.toml").exists() && member != "tests" {
            assert!(layer_of(member).is_some(), "workspace member {member} is in no layer");
        }
    }
}

#[test]
fn the_layer_check_catches_an_upward_dependency() {
    let deps = crate_deps("[dependencies]\ntxbed-report.workspace = true\nserde = \"1\"\n[dev-dependencies]\ntxbed = { path = \"../cli\" }\n");
    assert_eq!(deps, ["report"]);
    assert_eq!(layer_violations("runner", &deps).len(), 1);
    assert!(layer_violations("real", &deps).is_empty());
    assert_eq!(layer_violations("real", &["plot".to_string()]).len(), 1);
}
