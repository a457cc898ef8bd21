//! Every command README.md shows runs as written and exits 0 (issue 16: the tour's protocol
//! switch had stopped working and nothing noticed).
//!
//! The ```sh blocks are read from README.md itself, so a command added there is covered. `$T`
//! (as the tour defines it) and `cargo run --release -p txbed --` become the built binary. The
//! commands run in a fresh temporary directory where `scenarios` links to the repository's,
//! so `runs/`, `results/` and other outputs land there and the checkout stays clean.

use std::path::{Path, PathBuf};

/// Commands not run here, each with the reason (matched as the start of the command line as
/// README writes it, after `$T` or `cargo run ... --`).
const SKIP: &[(&str, &str)] = &[
    ("cargo test --workspace", "the test suite itself"),
    ("sensitivity scenarios/quickstart.ron", "76 simulations, 1-2 minutes; cli/tests/sensitivity.rs runs it on less"),
    (
        "bench-verbs --nic cx4 --json",
        "the same 78 simulations as the table form above (about 35 s), only printed as JSON",
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Splits a command line into words: whitespace-separated, double or single quotes group,
/// `#` after whitespace starts a comment. Enough for README's commands; anything fancier
/// (pipes, redirections) fails the test rather than being run wrongly.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quote, mut in_word) = (None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                assert!(!"|<>;&`".contains(c), "README command uses shell syntax this test does not run: {line}");
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// The lines of every ```sh block.
fn sh_lines(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in readme.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            inside = !inside && t == "```sh";
            continue;
        }
        if inside && !t.is_empty() && !t.starts_with('#') {
            out.push(t.to_string());
        }
    }
    out
}

fn link(from: &Path, to: &Path) {
    #[cfg(unix)]
    std::os::unix::fs::symlink(from, to).unwrap();
    #[cfg(not(unix))]
    panic!("needs symlinks to run README's commands without copying: {} -> {}", to.display(), from.display());
}

#[test]
fn every_readme_command_runs() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let dir = std::env::temp_dir().join(format!("txbed-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    link(&root().join("scenarios"), &dir.join("scenarios"));
    let bin = assert_cmd::cargo::cargo_bin("txbed");
    let prefix = ["cargo", "run", "--release", "-p", "txbed", "--"];
    let mut vars: Vec<(String, Vec<String>)> = Vec::new();
    let (mut ran, mut skipped) = (Vec::new(), Vec::new());
    for line in sh_lines(&readme) {
        let mut w = words(&line);
        // `T="cargo run --release -p txbed --"`
        if w.len() == 1 && w[0].contains('=') && !w[0].starts_with('-') {
            let (name, value) = w[0].split_once('=').unwrap();
            vars.push((format!("${name}"), words(value)));
            continue;
        }
        if let Some((_, v)) = vars.iter().find(|(n, _)| *n == w[0]) {
            w.splice(0..1, v.iter().cloned());
        }
        let args: Vec<String> =
            if w.starts_with(&prefix.map(String::from)) { w[prefix.len()..].to_vec() } else { w.clone() };
        let shown = args.join(" ");
        if let Some((_, why)) =
            SKIP.iter().find(|(s, _)| shown.starts_with(s) || (w[0] == "cargo" && w.join(" ").starts_with(s)))
        {
            skipped.push(format!("{shown} ({why})"));
            continue;
        }
        assert!(w.starts_with(&prefix.map(String::from)), "README command is not a txbed command: {line}");
        // `check history.jsonl` checks the reader's own history: give it the tour's.
        if args.iter().any(|a| a == "history.jsonl") && !dir.join("history.jsonl").exists() {
            std::fs::copy(dir.join("runs/a/history.jsonl"), dir.join("history.jsonl"))
                .unwrap_or_else(|e| panic!("{line}: no tour history to check ({e})"));
        }
        let out = std::process::Command::new(&bin).args(&args).current_dir(&dir).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "README command failed: {line}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran.push(shown);
    }
    eprintln!("ran {} README commands; skipped {}:\n  {}", ran.len(), skipped.len(), skipped.join("\n  "));
    // The tour: switch protocol and workload, replay, check, sweep, plot.
    for want in
        ["--set protocol.name=nowait --set workload.name=ycsb", "replay runs/a", "check runs/a", "sweep ", "plot "]
    {
        assert!(ran.iter().any(|c| c.contains(want)), "no README command with {want:?} ran: {ran:?}");
    }
    assert_eq!(skipped.len(), SKIP.len(), "an allow-listed command is gone from README: {skipped:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
