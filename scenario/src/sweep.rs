//! Sweep files (RON): a base scenario, axes of `--set` values and seeds. Every combination is
//! one point: a checked scenario, ready to run. `hybrid_search` makes the one-axis sweep over a
//! protocol's hybrid codes.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{BackendName, Scenario, ScenarioError, Workload};

/// A sweep file (RON), e.g. scenarios/sweeps/protocols-modes.ron.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    #[serde(default)]
    pub name: String,
    /// The base scenario, relative to the sweep file.
    pub base: PathBuf,
    /// Edits applied to every run before the axes (`path=value`).
    #[serde(default)]
    pub set: Vec<String>,
    pub axes: Vec<Axis>,
    /// Seeds: every combination of axis values runs once per seed.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    /// The axis plotted on x (default: the first numeric axis, else the first).
    #[serde(default)]
    pub x: Option<String>,
}

fn default_seeds() -> Vec<u64> {
    vec![1, 2, 3]
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    /// A field path as `--set` takes it, e.g. `protocol.name`.
    pub path: String,
    pub values: Vec<AxisValue>,
}

/// An axis value: written as a number, a boolean or a string (`"occ"`, `"Code(38)"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AxisValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

impl fmt::Display for AxisValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AxisValue::Bool(b) => write!(f, "{b}"),
            AxisValue::Int(i) => write!(f, "{i}"),
            AxisValue::Float(x) => write!(f, "{x}"),
            AxisValue::Text(s) => f.write_str(s),
        }
    }
}

/// One run of a sweep: its axis values, seed and scenario.
#[derive(Clone)]
pub struct Point {
    pub values: Vec<String>,
    pub seed: u64,
    pub scenario: Scenario,
    pub profile: txbed_sim::NicProfile,
}

impl Sweep {
    pub fn load(path: &Path) -> Result<Sweep, ScenarioError> {
        let source = path.display().to_string();
        let text = crate::read_config(path, "sweep")?;
        let sw: Sweep = crate::fields::parse_ron(&text, &source).map_err(ScenarioError)?;
        // The name becomes a directory under results/: one plain component, never a path.
        if !sw.name.is_empty() && !is_plain_name(&sw.name) {
            return Err(ScenarioError(format!(
                "{source}: name: {:?} is not a plain name: it names the directory results/<name>, so it cannot \
                 contain '/', '\\' or a NUL, or be \".\" or \"..\"",
                sw.name
            )));
        }
        if sw.axes.is_empty() {
            return Err(ScenarioError(format!("{source}: axes: give at least one axis")));
        }
        for (i, a) in sw.axes.iter().enumerate() {
            if a.values.is_empty() {
                return Err(ScenarioError(format!("{source}: axes[{i}] ({}): no values", a.path)));
            }
            // Every point runs on the simulator: an axis over `backend` would label simulated
            // runs with a backend they never ran on.
            if a.path == "backend" {
                return Err(ScenarioError(format!(
                    "{source}: axes[{i}]: \"backend\" cannot be an axis: a sweep runs every point on the \
                     simulator; run a real backend with txbed run --backend"
                )));
            }
            // A path is a field's: dotted, or one of the scenario's own fields.
            let top = ["name", "backend", "workload", "cluster", "protocol", "run", "nic"];
            if !a.path.contains('.') && !top.contains(&a.path.as_str()) {
                return Err(ScenarioError(format!("{source}: axes[{i}]: {:?} is not a field path", a.path)));
            }
        }
        if sw.seeds.is_empty() {
            return Err(ScenarioError(format!("{source}: seeds: give at least one seed")));
        }
        check_seeds(&sw.seeds).map_err(|e| ScenarioError(format!("{source}: seeds: {e}")))?;
        if let Some(x) = &sw.x {
            if !sw.axes.iter().any(|a| &a.path == x) {
                return Err(ScenarioError(format!("{source}: x: {x:?} is not one of the axes")));
            }
        }
        Ok(sw)
    }

    /// Every run, checked before any starts: a bad combination fails the sweep up front.
    pub fn points(&self, file: &Path) -> Result<Vec<Point>, ScenarioError> {
        let base_path = file.parent().unwrap_or(Path::new(".")).join(&self.base);
        let text = crate::read_config(&base_path, "base scenario")
            .map_err(|e| ScenarioError(format!("{}: base: {e}", file.display())))?;
        let base = Scenario::parse_unchecked(&text, &base_path.display().to_string())?;
        if matches!(base.workload, Workload::Verbs(_)) {
            return Err(ScenarioError(format!("{}: sweeps run transactional scenarios", base_path.display())));
        }
        let mut combos: Vec<Vec<String>> = vec![Vec::new()];
        for a in &self.axes {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    a.values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push(v.to_string());
                        c
                    })
                })
                .collect();
        }
        let mut out = Vec::new();
        for values in combos {
            for &seed in &self.seeds {
                let mut sets = self.set.clone();
                sets.extend(self.axes.iter().zip(&values).map(|(a, v)| format!("{}={v}", a.path)));
                sets.push(format!("run.seed={seed}"));
                let s = base.apply_sets(&sets).map_err(|e| ScenarioError(format!("{}: {e}", file.display())))?;
                let label: Vec<String> =
                    self.axes.iter().zip(&values).map(|(a, v)| format!("{}={v}", a.path)).collect();
                let profile = s.check(&format!("{} [{}]", file.display(), label.join(", ")))?;
                simulated(&s, &file.display().to_string())?;
                out.push(Point { values: values.clone(), seed, scenario: s, profile });
            }
        }
        Ok(out)
    }
}

/// Seeds are distinct: the simulator is deterministic, so a repeated seed repeats a run and
/// would narrow a confidence interval with a copy of a sample.
pub fn check_seeds(seeds: &[u64]) -> Result<(), String> {
    for (i, s) in seeds.iter().enumerate() {
        if seeds[..i].contains(s) {
            return Err(format!(
                "seed {s} appears twice: a repeated seed repeats the same deterministic run, which would count \
                 as a second sample; give distinct seeds"
            ));
        }
    }
    Ok(())
}

/// A sweep's or hybrid search's name is one plain path component (`protocols-modes`).
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// Sweeps run on the simulator only; a point whose scenario names a real backend is refused so
/// that no output suggests it ran there.
pub fn simulated(s: &Scenario, source: &str) -> Result<(), ScenarioError> {
    if s.backend == BackendName::Sim {
        return Ok(());
    }
    Err(ScenarioError(format!(
        "{source}: backend: {:?}: sweeps, hybrid searches and sensitivity analyses run every point on the \
         simulator; set backend: Sim (or add \"backend=sim\" to the sweep's set), or run a real backend \
         with txbed run --backend",
        s.backend
    )))
}

/// `txbed hybrid-search`: every valid hybrid code of the scenario's protocol, each over
/// `seeds`, as a one-axis sweep on `protocol.mode`. Codes the scenario's NIC setup refuses
/// (one-sided LOCK on unsafe atomics) are returned separately with the reason.
pub fn hybrid_search(file: &Path, seeds: &[u64]) -> Result<(Sweep, Vec<Point>, Vec<(String, String)>), ScenarioError> {
    check_seeds(seeds).map_err(|e| ScenarioError(format!("--seeds: {e}")))?;
    let text = crate::read_config(file, "scenario")?;
    let base = Scenario::parse_unchecked(&text, &file.display().to_string())?;
    let Some(p) = &base.protocol else {
        return Err(ScenarioError(format!(
            "{}: hybrid-search needs a transactional scenario with a protocol",
            file.display()
        )));
    };
    let protocol = p.name.protocol();
    let codes = txbed_txn::stage::Hybrid::all_codes(protocol.stages());
    let mut points = Vec::new();
    let mut refused = Vec::new();
    let mut values = Vec::new();
    for h in codes {
        let code = format!("Code({})", h.0);
        let mut ok = true;
        let mut these = Vec::new();
        for &seed in seeds {
            let sets = vec![format!("protocol.mode={code}"), "protocol.preset=None".into(), format!("run.seed={seed}")];
            let s = base.apply_sets(&sets).map_err(|e| ScenarioError(format!("{}: {e}", file.display())))?;
            simulated(&s, &file.display().to_string())?;
            match s.check(&file.display().to_string()) {
                // `Code(38)`, as --set writes it: a category, never a quantity to plot on a line.
                Ok(profile) => these.push(Point { values: vec![code.clone()], seed, scenario: s, profile }),
                Err(e) => {
                    refused.push((h.to_string(), e.0));
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            values.push(AxisValue::Text(code));
            points.extend(these);
        }
    }
    let sweep = Sweep {
        name: format!("hybrid-{}", protocol.name().to_lowercase()),
        base: file.to_path_buf(),
        set: Vec::new(),
        axes: vec![Axis { path: "protocol.mode".into(), values }],
        seeds: seeds.to_vec(),
        x: None,
    };
    Ok((sweep, points, refused))
}
