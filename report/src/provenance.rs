//! Provenance: which build, command, host and time produced a result. The one place a report
//! holds wall-clock time; it is never part of a digest and tests never compare it.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Where a report, a results.csv or a sweep's directory came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The txbed version (Cargo package version).
    pub txbed_version: String,
    /// `git rev-parse HEAD` of the source tree at build time, `unknown` outside a checkout.
    pub git_commit: String,
    /// Whether that tree had uncommitted changes (`git status --porcelain`); null if unknown.
    pub git_dirty: Option<bool>,
    /// The command line, each argument shell-quoted when it needs it.
    pub command_line: String,
    pub host: String,
    /// When the command started, UTC, RFC 3339.
    pub started_utc: String,
    /// `sim`, `sockets` or `verbs`.
    pub backend: String,
    /// The RDMA device and GID used (verbs backend only).
    pub device: Option<String>,
}

impl Provenance {
    /// The running process's provenance: `version` and `commit`/`dirty` from the build.
    pub fn capture(version: &str, commit: &str, dirty: Option<bool>, backend: &str) -> Provenance {
        let args: Vec<String> = std::env::args_os().map(|a| quote(&a.to_string_lossy())).collect();
        Provenance {
            txbed_version: version.to_string(),
            git_commit: commit.to_string(),
            git_dirty: dirty,
            command_line: args.join(" "),
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            started_utc: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            backend: backend.to_string(),
            device: None,
        }
    }

    /// The build as one string: `0.1.0 (commit abc..., dirty)`.
    pub fn build(&self) -> String {
        let dirty = match self.git_dirty {
            Some(true) => ", with uncommitted changes",
            _ => "",
        };
        format!("{} (commit {}{dirty})", self.txbed_version, self.git_commit)
    }

    /// results.csv's provenance columns and their values: the build that ran each row. Host,
    /// start time and command line are provenance.json's only: they differ between any two
    /// runs of the same sweep, so results.csv would too, and a sweep merged from shards could
    /// not be byte for byte the one a single machine writes (docs/cluster.md).
    pub fn csv_columns() -> [&'static str; 3] {
        ["txbed_version", "git_commit", "git_dirty"]
    }

    pub fn csv_values(&self) -> [String; 3] {
        [self.txbed_version.clone(), self.git_commit.clone(), self.git_dirty.map_or(String::new(), |d| d.to_string())]
    }

    /// Writes DIR/provenance.json (sweeps, hybrid searches, sensitivity analyses).
    pub fn write(&self, dir: &std::path::Path) -> Result<(), String> {
        self.write_with_shards(dir, &[])
    }

    /// Writes DIR/provenance.json: this command's provenance and, for a merged sweep, every
    /// shard's (which host ran which share, when, with what command) as `shards`.
    pub fn write_with_shards(&self, dir: &std::path::Path, shards: &[ShardProvenance]) -> Result<(), String> {
        #[derive(Serialize)]
        struct File<'a> {
            #[serde(flatten)]
            this: &'a Provenance,
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            shards: &'a [ShardProvenance],
        }
        let p = dir.join("provenance.json");
        let json = serde_json::to_string_pretty(&File { this: self, shards }).expect("provenance serialises");
        std::fs::write(&p, json + "\n").map_err(|e| format!("{}: {e}", p.display()))
    }
}

/// The provenance of one shard of a merged sweep: shard `index` of `count` ran the sweep's runs
/// k with k mod count = index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardProvenance {
    pub index: u32,
    pub count: u32,
    #[serde(flatten)]
    pub provenance: Provenance,
}

/// An argument as a POSIX shell would need it to read back the same.
fn quote(a: &str) -> String {
    let plain = !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_for_a_shell() {
        assert_eq!(quote("--set"), "--set");
        assert_eq!(quote("protocol.name=occ"), "protocol.name=occ");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn capture_fills_every_field() {
        let p = Provenance::capture("1.2.3", "abc", Some(false), "sim");
        assert_eq!(p.build(), "1.2.3 (commit abc)");
        assert!(!p.host.is_empty() && !p.command_line.is_empty());
        // RFC 3339, UTC: 2024-05-01T12:00:00Z
        assert!(p.started_utc.ends_with('Z') && p.started_utc.len() == 20, "{}", p.started_utc);
    }
}
