//! Embeds the git commit the binary is built from (TXBED_GIT_COMMIT, `unknown` outside a git
//! checkout) and whether the tree had uncommitted changes (TXBED_GIT_DIRTY: true, false or
//! unknown), for the provenance of every report.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).filter(|c| !c.is_empty());
    let dirty = match &commit {
        Some(_) => git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| (!s.is_empty()).to_string()),
        None => None,
    };
    println!("cargo:rustc-env=TXBED_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    println!("cargo:rustc-env=TXBED_GIT_DIRTY={}", dirty.as_deref().unwrap_or("unknown"));
    // Re-run when HEAD moves or the index changes (a commit, a checkout, git add), and when a
    // crate's sources change, so the dirty flag follows code edits (docs-only edits are seen
    // at the next rebuild). target/ and fuzz/ are never watched.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for f in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={}", Path::new(&dir).join(f).display());
        }
    }
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        println!("cargo:rerun-if-changed={}", Path::new(&common).join("refs/heads").display());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("cli/ is in the workspace");
    if let Ok(entries) = std::fs::read_dir(root) {
        for e in entries.flatten() {
            let (name, path) = (e.file_name(), e.path());
            let code = path.join("Cargo.toml").exists() || name == "examples";
            let manifest = name == "Cargo.toml" || name == "Cargo.lock";
            if (code && name != "fuzz") || manifest {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
