//! Sweeps across a cluster (docs/cluster.md): a sweep run as shards (`--shard I/N`, a Slurm
//! job array's task, an MPI rank) and merged gives what one machine's sweep gives.

use std::path::Path;

use crate::common::{out, scratch, txbed};

const LAUNCH_VARS: [&str; 11] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_COUNT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMIX_RANK",
    "PMIX_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
];

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// 3 shards (one by flag, one as task 1 of a Slurm job array, one as MPI rank 2 of 3) plus
/// `txbed merge` write the same results.csv, summary.csv, latency files and plots, byte for
/// byte, as the sweep on one machine; provenance.json names each shard's command and host.
/// Merging refuses a missing shard, and a shard refuses to overwrite its file.
#[test]
fn a_sweep_in_three_shards_merges_to_what_one_machine_writes() {
    let dir = scratch("shards");
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/quickstart.ron");
    let sweep = dir.join("sweep.ron");
    std::fs::write(
        &sweep,
        format!(
            r#"Sweep(name: "sharded", base: {base:?}, set: ["run.measure_us=100", "protocol.mode=rpc"],
               axes: [(path: "protocol.name", values: ["nowait", "occ"])], seeds: [1, 2, 3, 4])"#
        ),
    )
    .unwrap();
    let s = |p: &Path| p.display().to_string();
    let (full, shards, merged) = (dir.join("full"), dir.join("shards"), dir.join("merged"));
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = txbed();
        c.args(args);
        for v in LAUNCH_VARS {
            c.env_remove(v);
        }
        c.envs(env.iter().copied());
        out(&mut c)
    };
    let (code, _, err) = run(&["sweep", &s(&sweep), "-q", "--out", &s(&full)], &[]);
    assert_eq!(code, Some(0), "{err}");
    let shard =
        |how: &str, env: &[(&str, &str)]| run(&["sweep", &s(&sweep), "-q", "--out", &s(&shards), "--shard", how], env);
    for (how, env) in [
        ("0/3", &[][..]),
        ("auto", &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "3")][..]),
        ("auto", &[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "3")][..]),
    ] {
        let (code, _, err) = shard(how, env);
        assert_eq!(code, Some(0), "--shard {how} {env:?}: {err}");
    }
    assert_eq!(files(&shards), ["shard-0-of-3.json", "shard-1-of-3.json", "shard-2-of-3.json"]);
    let (code, _, err) = run(&["merge", &s(&shards), "-q", "--out", &s(&merged)], &[]);
    assert_eq!(code, Some(0), "{err}");

    let read = |d: &Path, f: &str| std::fs::read(d.join(f)).unwrap_or_else(|e| panic!("{}: {e}", d.join(f).display()));
    assert_eq!(read(&full, "summary.csv"), read(&merged, "summary.csv"), "summary.csv");
    for f in files(&full).iter().filter(|f| f.ends_with(".svg")) {
        assert_eq!(read(&full, f), read(&merged, f), "{f}");
    }
    let (lat_full, lat_merged) = (full.join("latency"), merged.join("latency"));
    assert_eq!(files(&lat_full).len(), 8, "one latency file per run");
    assert_eq!(files(&lat_full), files(&lat_merged));
    for f in files(&lat_full) {
        assert_eq!(read(&lat_full, &f), read(&lat_merged, &f), "latency/{f}");
    }
    assert_eq!(read(&full, "results.csv"), read(&merged, "results.csv"), "results.csv");
    let rows = csv::Reader::from_path(merged.join("results.csv")).unwrap().records().count();
    assert_eq!(rows, 8, "one row per run");
    // Who ran what is the merge's provenance.json: each shard's command, host and start.
    let prov: serde_json::Value = serde_json::from_slice(&read(&merged, "provenance.json")).unwrap();
    assert!(prov["command_line"].as_str().unwrap().contains("merge"), "{prov}");
    let origins = prov["shards"].as_array().unwrap();
    assert_eq!(origins.iter().map(|s| s["index"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2]);
    for s in origins {
        assert!(s["command_line"].as_str().unwrap().contains("--shard"), "{s}");
        assert!(!s["host"].as_str().unwrap().is_empty() && s["count"] == 3, "{s}");
    }
    let single: serde_json::Value = serde_json::from_slice(&read(&full, "provenance.json")).unwrap();
    assert!(single.get("shards").is_none(), "a single machine's sweep has no shards: {single}");

    // A missing shard, a shard file already there, a shard that is not one.
    std::fs::remove_file(shards.join("shard-1-of-3.json")).unwrap();
    let (code, _, err) = run(&["merge", &s(&shards), "--out", &s(&dir.join("m2"))], &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("missing shard 1 of 3"), "{err}");
    let (code, _, err) = shard("0/3", &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--force"), "{err}");
    for bad in ["3/3", "x", "auto"] {
        let (code, _, err) = shard(bad, &[]);
        assert_eq!(code, Some(2), "--shard {bad}: {err}");
    }
}

/// A campaign run as 2 shards and merged: campaign.csv has the same rows in the same order
/// as the campaign on one machine, every column but each run's wall time, with the replay
/// files under the merged directory and their contents the same (paths apart).
#[test]
fn a_campaign_in_two_shards_merges_to_what_one_machine_writes() {
    let dir = scratch("campaign-shards");
    let s = |p: &Path| p.display().to_string();
    let (full, shards, merged) = (dir.join("full"), dir.join("shards"), dir.join("merged"));
    let args = |out: &Path| {
        let mut v: Vec<String> = ["campaign", "scenarios/redt/campaign-node.ron", "--seeds", "6", "-q", "--no-shrink"]
            .map(String::from)
            .to_vec();
        v.extend(["--bug".into(), "RedtRecoveryAbortsCommitted".into(), "--out".into(), s(out)]);
        v
    };
    let (code, _, err) = out(txbed().args(args(&full)));
    assert_eq!(code, Some(1), "the planted bug fails some seeds: {err}");
    for i in 0..2 {
        let (code, _, err) = out(txbed().args(args(&shards)).args(["--shard", &format!("{i}/2")]));
        assert!(code == Some(0) || code == Some(1), "shard {i}: {err}");
    }
    let (code, table, err) = out(txbed().args(["merge", &s(&shards), "--out", &s(&merged)]));
    assert_eq!(code, Some(1), "{err}");
    assert!(table.contains("RedT") && table.contains("6 runs from 2 shards"), "{table}");
    let rows = |d: &Path| -> Vec<Vec<String>> {
        let mut r = csv::Reader::from_path(d.join("campaign.csv")).unwrap();
        let h: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
        let (wall, replay) =
            (h.iter().position(|c| c == "wall_s").unwrap(), h.iter().position(|c| c == "replay").unwrap());
        r.records()
            .map(|x| {
                let mut row: Vec<String> = x.unwrap().iter().map(String::from).collect();
                row[wall].clear();
                if !row[replay].is_empty() {
                    let p = Path::new(&row[replay]);
                    assert!(p.starts_with(d.join("failures")), "{p:?} under {d:?}");
                    row[replay] = p.file_name().unwrap().to_string_lossy().into_owned();
                }
                row
            })
            .collect()
    };
    let (a, b) = (rows(&full), rows(&merged));
    assert_eq!(a.len(), 6);
    assert!(a.iter().any(|r| r[3] != "clean"), "some seed failed: {a:?}");
    assert_eq!(a, b);
    let failures = |d: &Path| files(&d.join("failures"));
    assert_eq!(failures(&full), failures(&merged));
    for f in failures(&full) {
        let text = |d: &Path| std::fs::read_to_string(d.join("failures").join(&f)).unwrap().replace(&s(d), "DIR");
        assert_eq!(text(&full), text(&merged), "{f}");
    }
}
