//! Every command README.md shows runs as written and exits 0 (issue 16: the tour's protocol
//! switch had stopped working and nothing noticed).
//!
//! The ```sh blocks are read from README.md itself, so a command added there is covered. Each
//! line runs in bash as written, with `cargo run --release -p txbed --` (directly or through
//! the tour's `$T`) running the built binary, in a fresh temporary directory where `scenarios`
//! and `python` link to the repository's, so `runs/`, `results/` and other outputs land there
//! and the checkout stays clean.

use std::path::{Path, PathBuf};

/// Commands not run here, each with the reason (matched as the start of the command line as
/// README writes it, without `$T ` or `cargo run --release -p txbed -- `).
const SKIP: &[(&str, &str)] = &[
    ("cargo test --workspace", "the test suite itself"),
    ("sensitivity scenarios/quickstart.ron", "76 simulations, 1-2 minutes; cli/tests/sensitivity.rs runs it on less"),
    ("bash pgo/build.sh", "two release builds, about 10 minutes on 2 cores; run by hand (docs/architecture.md)"),
    ("target/pgo/optimized/", "the binary pgo/build.sh makes, not built here"),
    (
        "bench-verbs --nic cx4 --json",
        "the same 78 simulations as the table form above (about 35 s), only printed as JSON",
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
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
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-readme");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for d in ["scenarios", "python"] {
        link(&root().join(d), &dir.join(d));
    }
    // Each line runs in bash as written (redirections, `&&`, python3 included), after the
    // README's own variable lines (`T="cargo run --release -p txbed --"`), with `cargo run
    // --release -p txbed --` turned into the built binary by a shell function.
    let bin = assert_cmd::cargo::cargo_bin("txbed");
    let mut prelude = format!(
        "set -eo pipefail\ncargo() {{ if [ \"$1 $2 $3 $4 $5\" = \"run --release -p txbed --\" ]; then shift 5; {:?} \"$@\"; \
         else echo \"not a txbed command: cargo $*\" >&2; return 97; fi; }}\n",
        bin.display().to_string()
    );
    let (mut ran, mut skipped) = (Vec::new(), Vec::new());
    for line in sh_lines(&readme) {
        let is_var = line
            .split_once('=')
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
        if is_var {
            prelude += &line;
            prelude.push('\n');
            continue;
        }
        let shown = line.replace("cargo run --release -p txbed -- ", "").replace("$T ", "");
        if let Some((_, why)) = SKIP.iter().find(|(s, _)| shown.starts_with(s)) {
            skipped.push(format!("{shown} ({why})"));
            continue;
        }
        // `check history.jsonl` checks the reader's own history: give it the tour's.
        if shown.contains(" history.jsonl") && !dir.join("history.jsonl").exists() {
            std::fs::copy(dir.join("runs/a/history.jsonl"), dir.join("history.jsonl"))
                .unwrap_or_else(|e| panic!("{line}: no tour history to check ({e})"));
        }
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("{prelude}{line}"))
            .current_dir(&dir)
            .output()
            .unwrap();
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
    // The tour: switch protocol and workload, replay, check, sweep, plot, compare, list.
    for want in [
        "--set protocol.name=nowait --set workload.name=ycsb",
        "replay runs/a",
        "check runs/a",
        "sweep ",
        "plot ",
        "compare ",
        "list ",
        "txbed_results",
    ] {
        assert!(ran.iter().any(|c| c.contains(want)), "no README command with {want:?} ran: {ran:?}");
    }
    assert_eq!(skipped.len(), SKIP.len(), "an allow-listed command is gone from README: {skipped:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
