//! Sweeps that outgrow one machine: each shard of a sweep runs its share of the runs and
//! writes them here (`shard-I-of-N.json`); `txbed merge` reads every shard back and writes the
//! outputs one machine's sweep writes (docs/cluster.md).
//!
//! A shard's share is fixed by the sweep alone: run k (in sweep order: combinations of axis
//! values, then seeds) belongs to shard k mod N, so every shard, on any machine, agrees.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::csv::RunRow;

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
}

pub const FORMAT: &str = "txbed-sweep-shard";

impl SweepShard {
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string(self).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn read(path: &Path) -> Result<SweepShard, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let s: SweepShard = serde_json::from_str(&text).map_err(|e| {
            format!("{}: not a sweep shard (line {}, column {}): {e}", path.display(), e.line(), e.column())
        })?;
        if s.format != FORMAT {
            return Err(format!("{}: format {:?}, expected {FORMAT:?}", path.display(), s.format));
        }
        Ok(s)
    }
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

/// The whole sweep from its shards, runs in sweep order; refused, saying why, unless every
/// shard of one sweep is there exactly once and ran the same sweep with the same txbed.
pub fn merge(shards: Vec<(PathBuf, SweepShard)>) -> Result<(SweepShard, Vec<RunRow>), String> {
    let Some((first_path, first)) = shards.first().cloned() else {
        return Err("no shards to merge".into());
    };
    let mut seen = vec![None::<PathBuf>; first.count as usize];
    let mut runs: Vec<Option<RunRow>> = vec![None; first.total];
    let build = |r: &RunRow| r.provenance.get(..3).map(|p| p.to_vec());
    let mut builds: Option<(PathBuf, Option<Vec<String>>)> = None;
    for (path, s) in shards {
        if s.count == 0 || s.index >= s.count {
            return Err(format!("{}: shard {} of {} is not a shard", path.display(), s.index, s.count));
        }
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
        let slot = &mut seen[s.index as usize];
        if let Some(other) = slot {
            return Err(format!(
                "{} and {} are both shard {} of {}",
                other.display(),
                path.display(),
                s.index,
                s.count
            ));
        }
        *slot = Some(path.clone());
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
    let missing: Vec<String> =
        seen.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| i.to_string()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing shard{} {} of {}",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            first.count
        ));
    }
    let runs: Option<Vec<RunRow>> = runs.into_iter().collect();
    let runs = runs.ok_or_else(|| "a shard is missing some of its runs (was it cut short?)".to_string())?;
    Ok((first, runs))
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
        let (_, runs) = merge(all(3)).unwrap();
        assert_eq!(runs.iter().map(|r| r.seed).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>(), "sweep order");
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
