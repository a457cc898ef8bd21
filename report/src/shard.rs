//! Sweeps that outgrow one machine: each shard of a sweep runs its share of the runs and
//! writes them here (`shard-I-of-N.json`); `txbed merge` reads every shard back and writes the
//! outputs one machine's sweep writes (docs/cluster.md).
//!
//! A shard's share is fixed by the sweep alone: run k (in sweep order: combinations of axis
//! values, then seeds) belongs to shard k mod N, so every shard, on any machine, agrees.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::csv::RunRow;
use crate::provenance::{Provenance, ShardProvenance};

/// Which share of a sweep this process runs: shard `index` of `count` (0-based).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// `I/N` with 0 <= I < N.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let bad = || format!("--shard {s:?}: expected I/N with 0 <= I < N (e.g. 0/3), or auto");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (i.trim().parse::<u32>().map_err(|_| bad())?, n.trim().parse::<u32>().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// The shard a cluster's launcher gives this process (`env` looks variables up): a Slurm
    /// job array (`SLURM_ARRAY_TASK_ID` from `SLURM_ARRAY_TASK_MIN`, `SLURM_ARRAY_TASK_COUNT`
    /// tasks), else an MPI-style rank and size (`launchers`: rank and size variable names, in
    /// the order tried).
    pub fn from_env(env: impl Fn(&str) -> Option<String>, launchers: &[(&str, &str)]) -> Result<Shard, String> {
        let num = |name: &str| -> Result<Option<u32>, String> {
            env(name)
                .map(|v| v.trim().parse::<u32>().map_err(|_| format!("{name}={v:?} is not a non-negative integer")))
                .transpose()
        };
        if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let count = num("SLURM_ARRAY_TASK_COUNT")?
                .ok_or("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not (a job array with a step, e.g. 0-9:2, is not supported: use --shard I/N)")?;
            let index = id.checked_sub(min).ok_or("SLURM_ARRAY_TASK_ID is below SLURM_ARRAY_TASK_MIN")?;
            return Shard::parse(&format!("{index}/{count}"))
                .map_err(|_| format!("SLURM_ARRAY_TASK_ID {id} (from {min}) is not below SLURM_ARRAY_TASK_COUNT {count}: the array must be contiguous"));
        }
        for (rv, sv) in launchers {
            if let Some(rank) = num(rv)? {
                let size = num(sv)?.ok_or_else(|| format!("{rv} is set but {sv} is not"))?;
                return Shard::parse(&format!("{rank}/{size}"))
                    .map_err(|_| format!("{rv}={rank} is not below {sv}={size}"));
            }
        }
        Err(format!(
            "--shard auto: no Slurm job array (SLURM_ARRAY_TASK_ID) or launcher rank ({}) in the environment",
            launchers.iter().map(|l| l.0).collect::<Vec<_>>().join(", ")
        ))
    }

    /// Whether run `k` of the sweep is this shard's.
    pub fn owns(&self, k: usize) -> bool {
        k % self.count as usize == self.index as usize
    }

    pub fn file_name(&self) -> String {
        format!("shard-{}-of-{}.json", self.index, self.count)
    }
}

/// What one shard wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepShard {
    /// `txbed-sweep-shard`, to tell these files from others.
    pub format: String,
    pub index: u32,
    pub count: u32,
    /// The sweep's name, axis paths and plotted axis.
    pub name: String,
    pub axes: Vec<String>,
    pub x: Option<String>,
    /// The sweep file's text and the base scenario's: every shard must have run the same.
    pub sweep_text: String,
    pub base_text: String,
    /// Runs in the whole sweep.
    pub total: usize,
    /// This shard's runs: (position in the sweep, the run).
    pub runs: Vec<(usize, RunRow)>,
    /// The shard's command: host, start time, command line (a merge's provenance.json lists them).
    pub provenance: Provenance,
}

pub const FORMAT: &str = "txbed-sweep-shard";

impl SweepShard {
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string(self).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn read(path: &Path) -> Result<SweepShard, String> {
        read_shard(path, "sweep", FORMAT, |s: &SweepShard| &s.format)
    }
}

/// A shard file of `what` (sweep, campaign), refused unless it is JSON of that kind with
/// `format` as its format field.
fn read_shard<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
    format: &str,
    format_of: impl Fn(&T) -> &String,
) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let s: T = serde_json::from_str(&text).map_err(|e| {
        format!("{}: not a {what} shard (line {}, column {}): {e}", path.display(), e.line(), e.column())
    })?;
    if format_of(&s) != format {
        return Err(format!("{}: format {:?}, expected {format:?}", path.display(), format_of(&s)));
    }
    Ok(s)
}

/// Checks that `shards` (path, index, count) are every one of `count` shards, each once.
fn check_complete<'a>(shards: impl Iterator<Item = (&'a Path, u32, u32)>, count: u32) -> Result<(), String> {
    let mut seen = vec![None::<&Path>; count as usize];
    for (path, index, n) in shards {
        if n == 0 || index >= n || n != count {
            return Err(format!("{}: shard {index} of {n} is not one of {count} shards", path.display()));
        }
        if let Some(other) = seen[index as usize] {
            return Err(format!("{} and {} are both shard {index} of {n}", other.display(), path.display()));
        }
        seen[index as usize] = Some(path);
    }
    let missing: Vec<String> =
        seen.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| i.to_string()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing shard{} {} of {count}",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        ));
    }
    Ok(())
}

/// The shard files among `paths`: a file as given, a directory's `shard-*-of-*.json`.
pub fn shard_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("shard-") && n.ends_with(".json"))
                })
                .collect();
            if found.is_empty() {
                return Err(format!("{}: no shard-*-of-*.json in it", p.display()));
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

/// The whole sweep from its shards, runs in sweep order, and each shard's provenance in shard
/// order; refused, saying why, unless every shard of one sweep is there exactly once and ran
/// the same sweep with the same txbed.
pub fn merge(shards: Vec<(PathBuf, SweepShard)>) -> Result<(SweepShard, Vec<RunRow>, Vec<ShardProvenance>), String> {
    let Some((first_path, first)) = shards.first().cloned() else {
        return Err("no shards to merge".into());
    };
    check_complete(shards.iter().map(|(p, s)| (p.as_path(), s.index, s.count)), first.count)?;
    let mut runs: Vec<Option<RunRow>> = vec![None; first.total];
    let build = |r: &RunRow| r.provenance.get(..3).map(|p| p.to_vec());
    let mut builds: Option<(PathBuf, Option<Vec<String>>)> = None;
    let mut origins: Vec<ShardProvenance> = Vec::with_capacity(shards.len());
    for (path, s) in shards {
        origins.push(ShardProvenance { index: s.index, count: s.count, provenance: s.provenance.clone() });
        let same = s.count == first.count
            && s.name == first.name
            && s.axes == first.axes
            && s.x == first.x
            && s.sweep_text == first.sweep_text
            && s.base_text == first.base_text
            && s.total == first.total;
        if !same {
            return Err(format!(
                "{} and {} are shards of different sweeps (sweep or base scenario file, or shard count, differ)",
                first_path.display(),
                path.display()
            ));
        }
        let shard = Shard { index: s.index, count: s.count };
        for (k, run) in s.runs {
            if k >= first.total || !shard.owns(k) || runs[k].is_some() {
                return Err(format!("{}: run {k} does not belong to shard {} of {}", path.display(), s.index, s.count));
            }
            match &builds {
                Some((p, b)) if *b != build(&run) => {
                    return Err(format!(
                        "{} and {} ran different txbed builds (version, commit, dirty: {:?} against {:?}): their numbers cannot be merged",
                        p.display(),
                        path.display(),
                        b,
                        build(&run)
                    ))
                }
                Some(_) => {}
                None => builds = Some((path.clone(), build(&run))),
            }
            runs[k] = Some(run);
        }
    }
    let runs: Option<Vec<RunRow>> = runs.into_iter().collect();
    let runs = runs.ok_or_else(|| "a shard is missing some of its runs (was it cut short?)".to_string())?;
    origins.sort_by_key(|o| o.index);
    Ok((first, runs, origins))
}

/// What a shard of a campaign (`txbed campaign --shard I/N`) writes beside its campaign.csv
/// and failures/: which shard, and what every shard of the campaign must share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CampaignShard {
    /// `txbed-campaign-shard`.
    pub format: String,
    pub index: u32,
    pub count: u32,
    /// The campaign's name (its default output directory is results/campaign-<name>).
    pub name: String,
    /// The scenario as resolved, the fault profile, protocols, planted bug, seeds and shrink
    /// budget: equal in every shard of one campaign.
    pub identity: String,
    /// The protocols in the order they run (campaign.csv's row order: protocol, then seed).
    pub protocols: Vec<String>,
    /// txbed version, commit and dirty flag of the build that ran it.
    pub build: Vec<String>,
}

pub const CAMPAIGN_FORMAT: &str = "txbed-campaign-shard";
/// The file that marks a directory as a campaign's shard.
pub const CAMPAIGN_MARKER: &str = "campaign-shard.json";

impl CampaignShard {
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let path = dir.join(CAMPAIGN_MARKER);
        let text = serde_json::to_string_pretty(self).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn read(dir: &Path) -> Result<CampaignShard, String> {
        read_shard(&dir.join(CAMPAIGN_MARKER), "campaign", CAMPAIGN_FORMAT, |s: &CampaignShard| &s.format)
    }
}

/// The campaign shard directories among `paths` (a shard's directory, or one holding them);
/// empty if there are none (then they are a sweep's shards).
pub fn campaign_shard_dirs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut dirs = Vec::new();
    for p in paths {
        if p.join(CAMPAIGN_MARKER).is_file() {
            dirs.push(p.clone());
        } else if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|d| d.join(CAMPAIGN_MARKER).is_file())
                .collect();
            found.sort();
            dirs.extend(found);
        }
    }
    Ok(dirs)
}

/// A merged campaign: its name, and its rows as campaign.csv has them.
pub struct MergedCampaign {
    pub name: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// Merges campaign shards (`dirs`) into `out`: campaign.csv with every shard's rows in the
/// order one machine writes them (protocol, then seed), and failures/ with every shard's
/// replay files (their paths, in the CSV and in the files' headers, now under `out`).
pub fn merge_campaign(dirs: &[PathBuf], out: &Path) -> Result<MergedCampaign, String> {
    let mut shards = Vec::new();
    for d in dirs {
        shards.push((d.clone(), CampaignShard::read(d)?));
    }
    let Some((first_dir, first)) = shards.first().cloned() else {
        return Err("no campaign shards to merge".into());
    };
    for (d, s) in &shards {
        if s.count != first.count
            || s.identity != first.identity
            || s.protocols != first.protocols
            || s.name != first.name
        {
            return Err(format!(
                "{} and {} are shards of different campaigns (scenario, options or shard count differ)",
                first_dir.display(),
                d.display()
            ));
        }
        if s.build != first.build {
            return Err(format!(
                "{} and {} ran different txbed builds ({:?} against {:?}): their runs cannot be merged",
                first_dir.display(),
                d.display(),
                first.build,
                s.build
            ));
        }
    }
    check_complete(shards.iter().map(|(d, s)| (d.as_path(), s.index, s.count)), first.count)?;
    let new_failures = out.join("failures");
    let mut header: Vec<String> = Vec::new();
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (d, _) in &shards {
        let path = d.join("campaign.csv");
        let mut r = csv::Reader::from_path(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let h: Vec<String> =
            r.headers().map_err(|e| format!("{}: {e}", path.display()))?.iter().map(String::from).collect();
        if header.is_empty() {
            header = h;
        } else if h != header {
            return Err(format!("{}: its columns differ from {}'s", path.display(), first_dir.display()));
        }
        let replay =
            header.iter().position(|c| c == "replay").ok_or_else(|| format!("{}: no replay column", path.display()))?;
        let mut old_failures: Option<String> = None;
        for rec in r.records() {
            let mut row: Vec<String> =
                rec.map_err(|e| format!("{}: {e}", path.display()))?.iter().map(String::from).collect();
            if let Some(cell) = row.get_mut(replay).filter(|c| !c.is_empty()) {
                let old = PathBuf::from(cell.as_str());
                old_failures.get_or_insert_with(|| old.parent().map_or(String::new(), |p| p.display().to_string()));
                let name =
                    old.file_name().ok_or_else(|| format!("{}: replay {cell:?} names no file", path.display()))?;
                *cell = new_failures.join(name).display().to_string();
            }
            rows.push(row);
        }
        // The shard's replay files, their headers' paths moved with them.
        let fdir = d.join("failures");
        if fdir.is_dir() {
            std::fs::create_dir_all(&new_failures).map_err(|e| format!("{}: {e}", new_failures.display()))?;
            for e in std::fs::read_dir(&fdir).map_err(|e| format!("{}: {e}", fdir.display()))? {
                let src = e.map_err(|e| format!("{}: {e}", fdir.display()))?.path();
                let text = std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
                let text = match &old_failures {
                    Some(old) if !old.is_empty() => text.replace(old.as_str(), &new_failures.display().to_string()),
                    _ => text,
                };
                let dst = new_failures.join(src.file_name().unwrap_or_default());
                std::fs::write(&dst, text).map_err(|e| format!("{}: {e}", dst.display()))?;
            }
        }
    }
    let col = |name: &str| header.iter().position(|c| c == name);
    let (Some(pc), Some(sc)) = (col("protocol"), col("seed")) else {
        return Err(format!("{}: no protocol or seed column", first_dir.display()));
    };
    let order = |r: &Vec<String>| {
        let p = first.protocols.iter().position(|x| *x == r[pc]).unwrap_or(usize::MAX);
        (p, r[sc].parse::<u64>().unwrap_or(u64::MAX))
    };
    rows.sort_by_key(order);
    let path = out.join("campaign.csv");
    let mut w = csv::Writer::from_path(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    w.write_record(&header).map_err(|e| format!("{}: {e}", path.display()))?;
    for r in &rows {
        w.write_record(r).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    w.flush().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(MergedCampaign { name: first.name, header, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seed: u64) -> RunRow {
        RunRow {
            values: vec!["a".into()],
            seed,
            outcome: Err("x".into()),
            provenance: vec!["0.1".into(), "c".into(), "false".into()],
        }
    }

    fn shard(index: u32, count: u32, total: usize) -> SweepShard {
        let sh = Shard { index, count };
        SweepShard {
            format: FORMAT.into(),
            index,
            count,
            name: "s".into(),
            axes: vec!["ax".into()],
            x: None,
            sweep_text: "sweep".into(),
            base_text: "base".into(),
            total,
            runs: (0..total).filter(|&k| sh.owns(k)).map(|k| (k, run(k as u64))).collect(),
            provenance: Provenance::capture("0.1", "c", Some(false), "sim"),
        }
    }

    #[test]
    fn shards_parse_from_flags_and_launchers() {
        assert_eq!(Shard::parse("1/3"), Ok(Shard { index: 1, count: 3 }));
        for bad in ["3/3", "0/0", "1", "a/3", "-1/3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let l = [("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")];
        let slurm =
            env(&[("SLURM_ARRAY_TASK_ID", "5"), ("SLURM_ARRAY_TASK_MIN", "4"), ("SLURM_ARRAY_TASK_COUNT", "3")]);
        assert_eq!(Shard::from_env(slurm, &l), Ok(Shard { index: 1, count: 3 }));
        let mpi = env(&[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4")]);
        assert_eq!(Shard::from_env(mpi, &l), Ok(Shard { index: 2, count: 4 }));
        let e = Shard::from_env(env(&[("SLURM_ARRAY_TASK_ID", "9"), ("SLURM_ARRAY_TASK_COUNT", "3")]), &l).unwrap_err();
        assert!(e.contains("contiguous"), "{e}");
        assert!(Shard::from_env(env(&[]), &l).unwrap_err().contains("OMPI_COMM_WORLD_RANK"));
    }

    #[test]
    fn merging_needs_every_shard_once_of_one_sweep() {
        let p = |i: u32| PathBuf::from(format!("shard-{i}-of-3.json"));
        let all = |count: u32| (0..count).map(|i| (p(i), shard(i, count, 7))).collect::<Vec<_>>();
        let mut shuffled = all(3);
        shuffled.rotate_left(1);
        let (_, runs, origins) = merge(shuffled).unwrap();
        assert_eq!(runs.iter().map(|r| r.seed).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>(), "sweep order");
        assert_eq!(origins.iter().map(|o| (o.index, o.count)).collect::<Vec<_>>(), [(0, 3), (1, 3), (2, 3)]);
        let mut missing = all(3);
        missing.remove(1);
        assert!(merge(missing).unwrap_err().contains("missing shard 1 of 3"));
        let mut twice = all(3);
        twice.push((p(9), shard(0, 3, 7)));
        assert!(merge(twice).unwrap_err().contains("both shard 0"));
        let mut other = all(3);
        other[2].1.sweep_text = "another".into();
        assert!(merge(other).unwrap_err().contains("different sweeps"));
        let mut build = all(3);
        build[1].1.runs[0].1.provenance[1] = "d".into();
        assert!(merge(build).unwrap_err().contains("different txbed builds"));
        let mut cut = all(3);
        cut[0].1.runs.pop();
        assert!(merge(cut).is_err());
    }
}
