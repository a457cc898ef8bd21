//! Sensitivity analysis (`txbed sensitivity`): how much a run's results depend on each numeric
//! field of its NIC/host profile. Each chosen field is set to its value x (1 - r) and x (1 + r)
//! (integers rounded, then moved to the nearest valid value) through the scenario's `nic`
//! overrides, and the scenario re-run there, for every variant of an optional comparison and
//! every seed; each run is an independent single-threaded simulation, many at once
//! (`parallel::map_parallel`). Results are means over the seeds, compared with the base runs.

use txbed_scenario::{Scenario, Workload};
use txbed_sim::NicProfile;

use crate::parallel::map_parallel;

/// Fields that matter only when a node dies (the RC retry budget before `RetryExceeded`) or
/// datagrams are lost (the RPC layer's RTO); varied only when named with `params`.
pub const FAULT_ONLY: [&str; 5] = [
    "reliability.rc_timeout_ns",
    "reliability.rc_retry_count",
    "reliability.rpc_rto_initial_ns",
    "reliability.rpc_rto_min_ns",
    "reliability.rpc_rto_max_ns",
];

pub struct Options {
    /// Profile fields to vary by path (`host.rpc_dispatch_ns`; a `nic.` prefix is accepted);
    /// `None`: every numeric field that can matter.
    pub params: Option<Vec<String>>,
    /// r: each field is lowered and raised by this fraction, in (0, 1).
    pub range: f64,
    /// Variants to compare at every point: a field path (`--set` syntax) and its values.
    pub compare: Option<(String, Vec<String>)>,
    pub seeds: Vec<u64>,
}

/// What a run measured (a mean over seeds once aggregated).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Metrics {
    /// Committed transactions per second, whole cluster; for a verbs workload, millions of
    /// requests per second per machine.
    pub throughput: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Aborted attempts over all attempts; `None` for verbs workloads.
    pub abort_rate: Option<f64>,
}

/// One side of a parameter in one variant.
#[derive(Clone, Debug)]
pub struct Side {
    pub value: f64,
    /// Why the value is not base x (1 +- r): rounding, or the field's valid range.
    pub note: Option<String>,
    /// The runs' mean; the base runs' when the value is the base value (not run again).
    pub metrics: Metrics,
}

/// A parameter in one variant: its base value and both sides.
#[derive(Clone, Debug)]
pub struct ParamAt {
    pub base: f64,
    pub low: Side,
    pub high: Side,
}

#[derive(Clone, Debug)]
pub struct Param {
    /// The profile field's path (`host.rpc_dispatch_ns`).
    pub path: String,
    pub integer: bool,
    /// One entry per variant.
    pub at: Vec<ParamAt>,
}

/// A sensitivity analysis, done.
pub struct Sensitivity {
    pub scenario: String,
    /// What ran, e.g. `OCC on SmallBank` or `verbs: Read 64 B`.
    pub title: String,
    pub txn: bool,
    pub range: f64,
    pub seeds: Vec<u64>,
    /// The compared field's path, if any.
    pub compare: Option<String>,
    /// The compared values (one empty label without a comparison).
    pub variants: Vec<String>,
    /// Per variant, the base runs' mean.
    pub base: Vec<Metrics>,
    /// Per variant, each seed's base run (their spread is the noise a change must exceed).
    pub base_runs: Vec<Vec<Metrics>>,
    pub params: Vec<Param>,
    /// Fields not varied, with the reason.
    pub skipped: Vec<(String, String)>,
    pub simulations: usize,
    /// Runs with failed coordinators or rejected by the checker (their figures still count).
    pub problems: Vec<String>,
}

/// A change of `x` from `base` in percent (0 when both are 0, NaN from a zero base).
pub fn percent(x: f64, base: f64) -> f64 {
    if base == 0.0 {
        if x == 0.0 {
            0.0
        } else {
            f64::NAN
        }
    } else {
        (x / base - 1.0) * 100.0
    }
}

impl Sensitivity {
    /// The largest throughput change (percent, either side, any variant) the parameter causes.
    pub fn effect(&self, p: &Param) -> f64 {
        p.at.iter()
            .zip(&self.base)
            .flat_map(|(a, b)| [&a.low, &a.high].map(|s| percent(s.metrics.throughput, b.throughput).abs()))
            .filter(|x| x.is_finite())
            .fold(0.0, f64::max)
    }

    /// Parameter indices by effect, largest first (ties by path).
    pub fn order(&self) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.params.len()).collect();
        idx.sort_by(|&a, &b| {
            let (pa, pb) = (&self.params[a], &self.params[b]);
            self.effect(pb).total_cmp(&self.effect(pa)).then_with(|| pa.path.cmp(&pb.path))
        });
        idx
    }

    /// Variants by throughput, highest first (ties in variant order).
    pub fn ranking(per_variant: &[Metrics]) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..per_variant.len()).collect();
        idx.sort_by(|&a, &b| per_variant[b].throughput.total_cmp(&per_variant[a].throughput).then(a.cmp(&b)));
        idx
    }

    /// The ranking at the base values.
    pub fn base_ranking(&self) -> Vec<usize> {
        Self::ranking(&self.base)
    }

    /// The rankings at a parameter's low and high side.
    pub fn rankings(&self, p: &Param) -> (Vec<usize>, Vec<usize>) {
        let low: Vec<Metrics> = p.at.iter().map(|a| a.low.metrics).collect();
        let high: Vec<Metrics> = p.at.iter().map(|a| a.high.metrics).collect();
        (Self::ranking(&low), Self::ranking(&high))
    }

    /// `A > B > C` for a ranking.
    pub fn ranking_text(&self, r: &[usize]) -> String {
        r.iter().map(|&i| self.variants[i].as_str()).collect::<Vec<_>>().join(" > ")
    }
}

/// Which runs a point stands for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Setting {
    Base,
    Low(usize),
    High(usize),
}

struct Run {
    variant: usize,
    setting: Setting,
    seed: u64,
    label: String,
    scenario: Scenario,
    profile: NicProfile,
}

/// A parameter's planned values in one variant: base, and each side with its note.
struct PlannedAt {
    base: f64,
    low: (f64, Option<String>),
    high: (f64, Option<String>),
}

struct Planned {
    path: String,
    integer: bool,
    /// One entry per variant.
    at: Vec<PlannedAt>,
}

/// Every run of an analysis, resolved and checked before any starts.
pub struct Plan {
    scenario: String,
    title: String,
    txn: bool,
    source: String,
    measure_us: u64,
    range: f64,
    seeds: Vec<u64>,
    compare: Option<String>,
    variants: Vec<String>,
    params: Vec<Planned>,
    skipped: Vec<(String, String)>,
    runs: Vec<Run>,
}

/// Rounds to 6 significant digits, so 76 x 0.7 is 53.2 rather than 53.199999999999996.
fn round_sig(v: f64) -> f64 {
    format!("{v:.5e}").parse().unwrap_or(v)
}

fn fmt_value(v: f64, integer: bool) -> String {
    if integer {
        format!("{}", v as u64)
    } else {
        format!("{v}")
    }
}

/// `base` x `factor`, rounded for an integer field and moved into the field's valid range
/// (and `cluster.nics_per_node`'s 1..=16 when that is where it is set), with a note when the
/// change is not what `factor` asked for.
fn scaled(path: &str, integer: bool, base: f64, factor: f64, r: f64, cluster_nics: bool) -> (f64, Option<String>) {
    let raw = if integer { (base * factor).round() } else { round_sig(base * factor) };
    let mut valid = NicProfile::nearest_valid(path, raw);
    if cluster_nics {
        valid = valid.min(16.0);
    }
    if valid != raw {
        return (
            valid,
            Some(format!("{} is not valid, {} is the nearest", fmt_value(raw, integer), fmt_value(valid, integer))),
        );
    }
    let asked = factor - 1.0;
    let got = if base == 0.0 { asked } else { valid / base - 1.0 };
    if (got - asked).abs() > r / 10.0 {
        return (valid, Some(format!("rounded to {} ({:+.0}%)", fmt_value(valid, integer), got * 100.0)));
    }
    (valid, None)
}

/// Plans an analysis of `base` (already edited by `--set`); `source` names it in errors.
pub fn plan(base: &Scenario, source: &str, o: &Options) -> Result<Plan, String> {
    let r = o.range;
    if !(r > 0.0 && r < 1.0) {
        return Err(format!("--range must be above 0% and below 100%, got {}%", r * 100.0));
    }
    if o.seeds.is_empty() {
        return Err("--seeds: give at least one seed".into());
    }
    let check = |s: &Scenario, what: &str| s.check(&format!("{source}{what}")).map_err(|e| e.0);
    let mut variants: Vec<(String, Scenario, NicProfile)> = Vec::new();
    match &o.compare {
        None => variants.push((String::new(), base.clone(), check(base, "")?)),
        Some((path, values)) => {
            if values.len() < 2 {
                return Err(format!("--compare {path}=...: give at least two values, comma-separated"));
            }
            for (i, v) in values.iter().enumerate() {
                if values[..i].contains(v) {
                    return Err(format!("--compare {path}: {v} is given twice"));
                }
                let edit = format!("{path}={v}");
                let s = base.apply_sets(std::slice::from_ref(&edit)).map_err(|e| {
                    let why = e.0.strip_prefix(&format!("--set {edit}: ")).unwrap_or(&e.0).to_string();
                    format!("--compare {edit}: {why}")
                })?;
                let p = check(&s, &format!(" [{path}={v}]"))?;
                variants.push((v.clone(), s, p));
            }
        }
    }
    let fields: Vec<Vec<txbed_sim::profile::NumericField>> = variants.iter().map(|v| v.2.numeric_fields()).collect();
    let valid: Vec<&str> = fields[0].iter().map(|f| f.path.as_str()).collect();
    let mut skipped = Vec::new();
    let chosen: Vec<String> = match &o.params {
        Some(list) => {
            let mut out: Vec<String> = Vec::new();
            for name in list {
                let name = name.trim();
                let path = name.strip_prefix("nic.").unwrap_or(name);
                if !valid.contains(&path) {
                    return Err(format!(
                        "--params: unknown parameter `{name}`; the numeric profile fields are {}",
                        valid.join(", ")
                    ));
                }
                if !out.iter().any(|p| p == path) {
                    out.push(path.to_string());
                }
            }
            out
        }
        None => {
            for f in FAULT_ONLY {
                skipped.push((
                    f.to_string(),
                    "matters only when a node dies, and scenarios kill no nodes yet (name it with --params)".into(),
                ));
            }
            valid.iter().filter(|p| !FAULT_ONLY.contains(p)).map(|p| p.to_string()).collect()
        }
    };
    let mut params = Vec::new();
    for path in chosen {
        let mut at = Vec::new();
        let mut integer = false;
        for (i, (_, s, _)) in variants.iter().enumerate() {
            let f = fields[i].iter().find(|f| f.path == path).expect("every profile has every field");
            integer = f.integer;
            let cluster_nics = path == "nics_per_node" && s.cluster.nics_per_node.is_some();
            let low = scaled(&path, f.integer, f.value, 1.0 - r, r, cluster_nics);
            let high = scaled(&path, f.integer, f.value, 1.0 + r, r, cluster_nics);
            at.push(PlannedAt { base: f.value, low, high });
        }
        if at.iter().all(|a| a.low.0 == a.base && a.high.0 == a.base) {
            let b = fmt_value(at[0].base, integer);
            let why = if at[0].base == 0.0 {
                "is 0: scaling leaves it 0".to_string()
            } else {
                format!("{b} x (1 ± {}%) is {b} again after rounding to a valid value", r * 100.0)
            };
            skipped.push((path, why));
            continue;
        }
        params.push(Planned { path, integer, at });
    }
    if params.is_empty() {
        let why: Vec<String> = skipped.iter().map(|(p, w)| format!("{p} {w}")).collect();
        return Err(format!("no parameter to vary: {}", why.join("; ")));
    }
    let mut runs = Vec::new();
    for (vi, (label, s, _)) in variants.iter().enumerate() {
        let tag = if label.is_empty() { String::new() } else { format!("{}={label} ", o.compare.as_ref().unwrap().0) };
        for &seed in &o.seeds {
            let sc = s.apply_sets(&[format!("run.seed={seed}")]).map_err(|e| e.0)?;
            let profile = check(&sc, "")?;
            let label = format!("[{tag}base] seed {seed}");
            runs.push(Run { variant: vi, setting: Setting::Base, seed, label, scenario: sc, profile });
        }
        for (pi, p) in params.iter().enumerate() {
            let (base, low, high) = (p.at[vi].base, p.at[vi].low.0, p.at[vi].high.0);
            for (setting, v, sign) in [(Setting::Low(pi), low, '-'), (Setting::High(pi), high, '+')] {
                if v == base {
                    continue;
                }
                let set_path = if p.path == "nics_per_node" && s.cluster.nics_per_node.is_some() {
                    "cluster.nics_per_node".to_string()
                } else {
                    format!("nic.{}", p.path)
                };
                let edit = format!("{set_path}={}", fmt_value(v, p.integer));
                for &seed in &o.seeds {
                    let sc = s.apply_sets(&[edit.clone(), format!("run.seed={seed}")]).map_err(|e| e.0)?;
                    let profile = check(&sc, &format!(" [{tag}{edit}]"))?;
                    let label = format!("[{tag}{} {sign}{}%] seed {seed}", p.path, r * 100.0);
                    runs.push(Run { variant: vi, setting, seed, label, scenario: sc, profile });
                }
            }
        }
    }
    let title_of = |s: &Scenario| match (&s.workload, &s.protocol) {
        (Workload::Verbs(v), _) => format!("verbs: {:?} {} B, {} outstanding", v.verb, v.payload, v.outstanding),
        (w, Some(p)) => format!("{} on {}", p.name.protocol().name(), w.title()),
        (w, None) => w.title().to_string(),
    };
    // What every variant runs, or (when the comparison changes it) just the workload.
    let titles: Vec<String> = variants.iter().map(|v| title_of(&v.1)).collect();
    let title = if titles.iter().all(|t| *t == titles[0]) { titles[0].clone() } else { base.workload.title().into() };
    Ok(Plan {
        scenario: base.name.clone(),
        title,
        txn: !matches!(base.workload, Workload::Verbs(_)),
        source: source.to_string(),
        measure_us: base.run.measure_us,
        range: r,
        seeds: o.seeds.clone(),
        compare: o.compare.as_ref().map(|c| c.0.clone()),
        variants: variants.into_iter().map(|v| v.0).collect(),
        params,
        skipped,
        runs,
    })
}

/// One run's figures and, if it failed or the checker rejected it, why.
fn run_one(run: &Run) -> Result<(Metrics, Option<String>), String> {
    let (s, seed) = (&run.scenario, run.seed);
    if matches!(s.workload, Workload::Verbs(_)) {
        let r = crate::from_scenario::run_verbs(s, &run.profile, seed)?;
        let m = Metrics {
            throughput: r.throughput_mops_per_machine,
            p50_us: r.latency_us.p50,
            p99_us: r.latency_us.p99,
            abort_rate: None,
        };
        return Ok((m, None));
    }
    let r = crate::from_scenario::run_txn(s, &run.profile, seed, false, &mut |_, _| {})?.report(s, seed);
    let m = Metrics {
        throughput: r.throughput_tps,
        p50_us: r.latency_us.p50,
        p99_us: r.latency_us.p99,
        abort_rate: Some(r.abort_rate),
    };
    let problem = if let Some(f) = r.failures.first() {
        Some(format!("{} coordinators failed, e.g. {f}", r.failures.len()))
    } else if !r.check.clean {
        Some("the checker rejected its history".to_string())
    } else {
        None
    };
    Ok((m, problem))
}

fn mean(ms: &[Metrics]) -> Metrics {
    let n = ms.len().max(1) as f64;
    let avg = |f: &dyn Fn(&Metrics) -> f64| ms.iter().map(f).sum::<f64>() / n;
    Metrics {
        throughput: avg(&|m| m.throughput),
        p50_us: avg(&|m| m.p50_us),
        p99_us: avg(&|m| m.p99_us),
        abort_rate: ms[0].abort_rate.map(|_| avg(&|m| m.abort_rate.unwrap_or(0.0))),
    }
}

impl Plan {
    /// Simulations the analysis runs.
    pub fn simulations(&self) -> usize {
        self.runs.len()
    }

    /// Runs the base runs, then (if each variant's base did any work) every other point, on
    /// `jobs` threads; `done` is called after each simulation.
    pub fn run(self, jobs: usize, done: &(dyn Fn() + Sync)) -> Result<Sensitivity, String> {
        let (bases, rest): (Vec<&Run>, Vec<&Run>) = self.runs.iter().partition(|r| r.setting == Setting::Base);
        let base_out = map_parallel(&bases, jobs, &|r| run_one(r), done);
        let mut results: Vec<(&Run, Metrics, Option<String>)> = Vec::new();
        for (r, out) in bases.iter().zip(base_out) {
            let (m, problem) = out.map_err(|e| format!("run {}: {e}", r.label))?;
            results.push((r, m, problem));
        }
        let mean_of = |results: &[(&Run, Metrics, Option<String>)], v: usize, s: Setting| {
            let ms: Vec<Metrics> =
                results.iter().filter(|x| x.0.variant == v && x.0.setting == s).map(|x| x.1).collect();
            mean(&ms)
        };
        let base: Vec<Metrics> = (0..self.variants.len()).map(|v| mean_of(&results, v, Setting::Base)).collect();
        let base_runs: Vec<Vec<Metrics>> = (0..self.variants.len())
            .map(|v| results.iter().filter(|x| x.0.variant == v).map(|x| x.1).collect())
            .collect();
        for (v, m) in base.iter().enumerate() {
            if m.throughput <= 0.0 {
                let which = match &self.compare {
                    Some(c) => format!(" with {c}={}", self.variants[v]),
                    None => String::new(),
                };
                let what = if self.txn { "committed no transactions" } else { "completed no requests" };
                return Err(format!(
                    "{}: the base run{which} {what} in its {} us measured window, so there is nothing to compare; lengthen run.measure_us",
                    self.source, self.measure_us
                ));
            }
        }
        let rest_out = map_parallel(&rest, jobs, &|r| run_one(r), done);
        for (r, out) in rest.iter().zip(rest_out) {
            let (m, problem) = out.map_err(|e| format!("run {}: {e}", r.label))?;
            results.push((r, m, problem));
        }
        let problems: Vec<String> =
            results.iter().filter_map(|(r, _, p)| p.as_ref().map(|p| format!("run {}: {p}", r.label))).collect();
        let params = self
            .params
            .iter()
            .enumerate()
            .map(|(pi, p)| Param {
                path: p.path.clone(),
                integer: p.integer,
                at: p
                    .at
                    .iter()
                    .enumerate()
                    .map(|(v, a)| {
                        let side = |(value, note): &(f64, Option<String>), s: Setting| Side {
                            value: *value,
                            note: note.clone(),
                            metrics: if *value == a.base { base[v] } else { mean_of(&results, v, s) },
                        };
                        ParamAt {
                            base: a.base,
                            low: side(&a.low, Setting::Low(pi)),
                            high: side(&a.high, Setting::High(pi)),
                        }
                    })
                    .collect(),
            })
            .collect();
        Ok(Sensitivity {
            scenario: self.scenario,
            title: self.title,
            txn: self.txn,
            range: self.range,
            seeds: self.seeds,
            compare: self.compare,
            variants: self.variants,
            base,
            base_runs,
            params,
            skipped: self.skipped,
            simulations: self.runs.len(),
            problems,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_are_rounded_and_kept_valid() {
        assert_eq!(scaled("host.mmio_ns", true, 100.0, 0.7, 0.3, false), (70.0, None));
        assert_eq!(scaled("requester_ns.read", false, 76.0, 0.7, 0.3, false), (53.2, None));
        let (v, note) = scaled("nics_per_node", true, 2.0, 0.7, 0.3, false);
        assert_eq!((v, note.as_deref()), (1.0, Some("rounded to 1 (-50%)")));
        let (v, note) = scaled("mtu", true, 4096.0, 1.3, 0.3, false);
        assert_eq!((v, note.as_deref()), (4096.0, Some("5325 is not valid, 4096 is the nearest")));
        let (v, _) = scaled("reliability.ud_drop_probability", false, 0.9, 1.3, 0.3, false);
        assert_eq!(v, 1.0);
        assert_eq!(scaled("nics_per_node", true, 16.0, 1.3, 0.3, true).0, 16.0);
        assert_eq!(percent(110.0, 100.0).round(), 10.0);
        assert_eq!(percent(0.0, 0.0), 0.0);
        assert!(percent(1.0, 0.0).is_nan());
    }

    #[test]
    fn rankings_order_by_throughput() {
        let m = |t: f64| Metrics { throughput: t, p50_us: 1.0, p99_us: 2.0, abort_rate: None };
        assert_eq!(Sensitivity::ranking(&[m(5.0), m(9.0), m(7.0)]), [1, 2, 0]);
        assert_eq!(Sensitivity::ranking(&[m(5.0), m(5.0)]), [0, 1]);
    }
}
