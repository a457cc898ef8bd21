//! Fault campaigns (`txbed campaign`, docs/campaign.md): one scenario run over many seeds,
//! each with its own random fault schedule, every run checked and classified; a failing
//! schedule is shrunk (fewer faults, a shorter run, shorter faults) to a minimal one that
//! still fails the same way, and both are written as scenario files that `txbed run` replays.
//!
//! A run's schedule is expanded before it runs (`Scenario::with_faults_expanded`), so the
//! scenario a failure file holds is exactly what ran: no generator draws again on replay.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Instant;

use txbed_scenario::faults::Faults;
use txbed_scenario::Scenario;
use txbed_sim::faults::{check_schedule, sorted, Fault, RandomFaults, TimedFault, Topology};
use txbed_sim::NicProfile;
use txbed_txn::node::Bug;
use txbed_txn::protocol::fold_name;
use txbed_txn::ProtocolRef;

use crate::from_scenario::{txn_spec, ScenarioRun};
use crate::outcome::TxnRunResult;

/// The fault profiles shipped in `scenarios/faults/profiles/`, embedded so `--faults NAME`
/// works from any directory.
pub const PROFILES: [(&str, &str); 6] = [
    ("crash", include_str!("../../scenarios/faults/profiles/crash.ron")),
    ("partition", include_str!("../../scenarios/faults/profiles/partition.ron")),
    ("network", include_str!("../../scenarios/faults/profiles/network.ron")),
    ("slow", include_str!("../../scenarios/faults/profiles/slow.ron")),
    ("clock", include_str!("../../scenarios/faults/profiles/clock.ron")),
    ("mixed", include_str!("../../scenarios/faults/profiles/mixed.ron")),
];

/// Planted bugs every protocol has (`TxnRunSpec::bug`).
pub const SHARED_BUGS: [Bug; 6] = [
    txbed_txn::log::SKIP_LOG,
    txbed_txn::local::CPU_CAS_ON_HCA,
    txbed_txn::recovery::FORGET_WAL,
    txbed_txn::chop::GIVES_UP_PIECE,
    txbed_txn::chop::FORGET_CHOPPING,
    txbed_txn::chop::FORGET_PUBLICATION,
];

/// Shrinking's default budget: runs per failure.
pub const DEFAULT_SHRINK_BUDGET: usize = 60;

/// A fault profile by name (`mixed`) or a RON file by path; checked only as data here (the
/// scenario's topology checks it in [`prepare`]).
pub fn load_profile(name_or_path: &str) -> Result<RandomFaults, String> {
    if let Some((n, text)) = PROFILES.iter().find(|(n, _)| *n == name_or_path) {
        return txbed_scenario::fields::parse_ron(text, &format!("scenarios/faults/profiles/{n}.ron"));
    }
    let names: Vec<&str> = PROFILES.iter().map(|(n, _)| *n).collect();
    let path = Path::new(name_or_path);
    // A bare word that names no file is a mistyped profile name, not a missing file.
    if !path.exists() && !name_or_path.contains(['/', '.']) {
        return Err(format!(
            "unknown fault profile `{name_or_path}`: expected one of {} or a RON file",
            names.join(", ")
        ));
    }
    let text = txbed_scenario::read_config(path, "fault profile")
        .map_err(|e| format!("{e}; built-in profiles are {}", names.join(", ")))?;
    txbed_scenario::fields::parse_ron(&text, name_or_path)
}

/// Which protocols a campaign runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Protocols {
    /// The scenario's own, as it is.
    Scenario,
    /// Every registered protocol.
    All,
    /// These, by name.
    List(Vec<String>),
}

impl Protocols {
    /// `all` or a comma-separated list of names (`occ,nowait`).
    pub fn parse(s: &str) -> Result<Protocols, String> {
        if s.trim().eq_ignore_ascii_case("all") {
            return Ok(Protocols::All);
        }
        let names: Vec<String> = s.split(',').map(|n| n.trim().to_string()).collect();
        if let Some(bad) = names.iter().find(|n| txbed_protocols::named(n).is_none()) {
            let what = if bad.is_empty() { "an empty name".to_string() } else { format!("`{bad}`") };
            return Err(format!(
                "{what} is not a protocol: expected `all` or a comma-separated list of {}",
                txbed_protocols::names().join(", ")
            ));
        }
        Ok(Protocols::List(names))
    }
}

/// One protocol's scenario of a campaign: the profile as `faults.random`, the protocol and
/// mode set; each seed runs it with its own expanded schedule.
#[derive(Clone, Debug)]
pub struct Target {
    pub protocol: ProtocolRef,
    pub scenario: Scenario,
}

/// What a campaign runs: every target over every seed.
#[derive(Clone, Debug)]
pub struct Setup {
    pub targets: Vec<Target>,
    pub profile: NicProfile,
    pub seeds: Vec<u64>,
    /// A planted bug, the same in every run.
    pub bug: Option<Bug>,
}

/// The planted bug named `name` (any case or punctuation) of `p`, or a shared one.
pub fn find_bug(p: ProtocolRef, name: &str) -> Result<Bug, String> {
    let want = fold_name(name);
    if let Some(b) = p.bugs().iter().chain(shared_bugs(p)).find(|b| fold_name(b.name) == want) {
        return Ok(*b);
    }
    let own: Vec<&str> = p.bugs().iter().map(|b| b.name).collect();
    let shared: Vec<&str> = shared_bugs(p).iter().map(|b| b.name).collect();
    let shared = match shared.is_empty() {
        true => "none: it keeps its own replicas and logs, which those bugs do not touch".to_string(),
        false => shared.join(", "),
    };
    Err(format!(
        "{} has no planted bug `{name}` (its own: {}; of the shared layers': {shared})",
        p.name(),
        if own.is_empty() { "none".to_string() } else { own.join(", ") },
    ))
}

/// The shared layers' planted bugs that can bite `p`: none for a protocol that keeps its own
/// replicas (`Protocol::stores_replicas`: RedT and its baselines use neither the shared log,
/// the write-ahead log's recovery nor chopping, so such a run would be clean and prove nothing).
pub fn shared_bugs(p: ProtocolRef) -> &'static [Bug] {
    match p.stores_replicas() {
        true => &[],
        false => &SHARED_BUGS,
    }
}

/// The campaign's targets: `base` (already `--set`) with `faults` as its random generators
/// (else its own `faults.random`, which must exist), for each protocol `protocols` names.
/// Another protocol than the scenario's keeps its mode if `Rpc` or `Onesided`, else runs by
/// `Rpc` (a hybrid code names one protocol's stages). Every target is checked, and a run spec
/// built from it (so a mode or option a protocol refuses is an error before anything runs).
/// Errors name the option or field at fault.
pub fn prepare(
    base: &Scenario,
    source: &str,
    faults: Option<RandomFaults>,
    protocols: &Protocols,
    bug: Option<&str>,
) -> Result<(Vec<Target>, NicProfile, Option<Bug>), String> {
    let own = base
        .protocol
        .as_ref()
        .ok_or_else(|| format!("{source}: protocol: a campaign needs a transactional scenario"))?;
    let mut base = base.clone();
    let random = match faults {
        Some(r) => r,
        None => base.faults.as_ref().and_then(|f| f.random.clone()).ok_or_else(|| {
            let names: Vec<&str> = PROFILES.iter().map(|(n, _)| *n).collect();
            format!(
                "{source}: faults.random: the scenario has no random fault generators; give --faults PROFILE ({} or a file)",
                names.join(", ")
            )
        })?,
    };
    base.faults.get_or_insert_with(Faults::default).random = Some(random.clone());
    let list: Vec<ProtocolRef> = match protocols {
        Protocols::Scenario => vec![own.name.protocol()],
        Protocols::All => txbed_protocols::REGISTRY.to_vec(),
        Protocols::List(names) => {
            let mut v: Vec<ProtocolRef> = Vec::new();
            for n in names {
                let p = txbed_protocols::named(n).ok_or_else(|| format!("--protocols: `{n}` is not a protocol"))?;
                if !v.iter().any(|q| q.name() == p.name()) {
                    v.push(p);
                }
            }
            v
        }
    };
    let keep_mode = matches!(own.mode, txbed_scenario::Mode::Rpc | txbed_scenario::Mode::Onesided);
    let mut targets = Vec::new();
    let (mut profile, mut found_bug) = (None, None);
    for p in list {
        let s = if p.name() == own.name.protocol().name() {
            base.clone()
        } else {
            let mode = if keep_mode { format!("{:?}", own.mode).to_lowercase() } else { "rpc".into() };
            base.apply_sets(&[format!("protocol.name={}", p.name()), format!("protocol.mode={mode}")])
                .map_err(|e| format!("{source} with protocol {}: {e}", p.name()))?
        };
        let label = format!("{source} with protocol {}", p.name());
        let prof = s.check(&label).map_err(|e| e.to_string())?;
        let planted = bug.map(|b| find_bug(p, b)).transpose().map_err(|e| format!("--bug: {e}"))?;
        let mut spec = txn_spec(&s, &prof, s.run.seed)?;
        spec.bug = planted;
        crate::spec::check_spec(&spec).map_err(|e| format!("{label}: {e}"))?;
        profile.get_or_insert(prof);
        found_bug = found_bug.or(planted);
        targets.push(Target { protocol: p, scenario: s });
    }
    Ok((targets, profile.expect("at least one protocol"), found_bug))
}

/// How a run ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Checked clean, no coordinator failed.
    Clean,
    /// The protocol does not survive a fault the schedule holds (`FaultReport::fatal`): the
    /// run stopped there. Counted apart, not as a failure.
    Unsupported,
    /// The checker found a cycle or a read anomaly.
    NotSerializable,
    /// A replica's final version differs from the last committed write.
    LostWrites,
    /// A workload invariant does not hold.
    Invariant,
    /// A coordinator failed (an error the protocol reported).
    Coordinator,
    /// Coroutines were still running long after the end of the run.
    Stuck,
    /// The run panicked: a bug, whatever the input.
    Panic,
    /// The run could not be set up or ended with an error.
    Error,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Clean,
        Kind::Unsupported,
        Kind::NotSerializable,
        Kind::LostWrites,
        Kind::Invariant,
        Kind::Coordinator,
        Kind::Stuck,
        Kind::Panic,
        Kind::Error,
    ];

    /// The name the CSV, the table and file names use.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Clean => "clean",
            Kind::Unsupported => "unsupported",
            Kind::NotSerializable => "not-serializable",
            Kind::LostWrites => "lost-writes",
            Kind::Invariant => "invariant",
            Kind::Coordinator => "coordinator",
            Kind::Stuck => "stuck",
            Kind::Panic => "panic",
            Kind::Error => "error",
        }
    }

    pub fn is_failure(self) -> bool {
        !matches!(self, Kind::Clean | Kind::Unsupported)
    }

    /// The kind `name` names (campaign.csv's verdict column).
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What one run gave.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub kind: Kind,
    /// Why (empty when clean): the first anomaly, failure or panic message.
    pub detail: String,
    /// Faults in its (expanded) schedule, and applied (fewer if the run stopped early).
    pub faults_scheduled: usize,
    pub faults_applied: usize,
    /// Committed in the measured window.
    pub committed: u64,
    /// Over the run's recoveries: transactions rolled forward from write-ahead logs, and
    /// locks of crashed nodes' transactions released (how much of recovery a run exercised).
    pub rolled_forward: u64,
    pub locks_released: u64,
    /// The simulation's digest (none after a panic or an error).
    pub digest: Option<u64>,
    pub wall_s: f64,
}

/// The line of a failure a coroutine still running after the end of the run gives
/// (`runner::sim`).
const STUCK: &str = "coroutines still running";

/// The verdict on a finished run: the checker first (a fault may stop a protocol, never
/// excuse a wrong history), then a fault the protocol does not survive, then coordinators.
pub fn classify(r: &TxnRunResult) -> (Kind, String) {
    let rep = &r.report;
    let first = |pred: &dyn Fn(txbed_checker::AnomalyKind) -> bool| {
        rep.anomalies
            .iter()
            .find(|a| pred(a.kind))
            .map(|a| format!("{}: {}", a.kind.name(), a.explanation.lines().next().unwrap_or("")))
            .unwrap_or_default()
    };
    // At the level the run is checked at (`protocol.isolation`): anomalies it allows pass.
    if !crate::report::level_holds(rep) {
        use txbed_checker::AnomalyKind::{Invariant, LostWrite};
        let level = rep.level;
        return (Kind::NotSerializable, first(&|k| level.forbids(k) && k != LostWrite && k != Invariant));
    }
    if rep.nothing_lost == Some(false) {
        return (Kind::LostWrites, first(&|k| k == txbed_checker::AnomalyKind::LostWrite));
    }
    if !rep.invariants_ok {
        return (Kind::Invariant, first(&|k| k == txbed_checker::AnomalyKind::Invariant));
    }
    if let Some(f) = r.faults.as_ref().and_then(|f| f.fatal.clone()) {
        return (Kind::Unsupported, f);
    }
    let coordinator: Vec<&String> = r.failures.iter().filter(|f| !f.contains(STUCK)).collect();
    if let Some(f) = coordinator.first() {
        let more = if coordinator.len() > 1 { format!(" (and {} more)", coordinator.len() - 1) } else { String::new() };
        return (Kind::Coordinator, format!("{f}{more}"));
    }
    if let Some(f) = r.failures.first() {
        let more = if r.failures.len() > 1 { format!(" (and {} more)", r.failures.len() - 1) } else { String::new() };
        return (Kind::Stuck, format!("{f}{more}"));
    }
    (Kind::Clean, String::new())
}

/// Runs a transactional scenario with its own seed and an optional planted bug (what `txbed
/// run --bug` and every campaign run do).
pub fn run_scenario(
    s: &Scenario,
    profile: &NicProfile,
    bug: Option<Bug>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ScenarioRun, String> {
    let mut spec = txn_spec(s, profile, s.run.seed)?;
    spec.bug = bug;
    let start = Instant::now();
    let result = crate::sim::run_txns_with(&spec, progress)?;
    Ok(ScenarioRun { spec, result, wall_s: start.elapsed().as_secs_f64() })
}

thread_local! {
    /// Set while a campaign run is under way on this thread: its panic is captured, not printed.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    static PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}
static HOOK: Once = Once::new();

/// Installs (once) a panic hook that keeps the message and location of a campaign run's panic
/// for its verdict instead of printing it; any other panic goes to the hook before it.
fn capture_panics() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CAPTURING.with(|c| c.get()) {
                let msg = info
                    .payload()
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "(no message)".into());
                let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
                PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{at}")));
            } else {
                previous(info)
            }
        }));
    });
}

/// One run of `s` (its schedule expanded, its seed set), checked and classified; a panic is
/// caught and becomes its verdict.
pub fn run_one(s: &Scenario, profile: &NicProfile, bug: Option<Bug>) -> Outcome {
    guarded(s.fault_schedule().len(), || run_scenario(s, profile, bug, &mut |_, _| {}))
}

/// The outcome of `run` (a run of a schedule of `scheduled` faults): its verdict, or the
/// panic it raised, with its message and location.
pub fn guarded(scheduled: usize, run: impl FnOnce() -> Result<ScenarioRun, String>) -> Outcome {
    capture_panics();
    let start = Instant::now();
    CAPTURING.with(|c| c.set(true));
    let ran = catch_unwind(AssertUnwindSafe(run));
    CAPTURING.with(|c| c.set(false));
    let wall_s = start.elapsed().as_secs_f64();
    let empty = |kind, detail| Outcome {
        kind,
        detail,
        faults_scheduled: scheduled,
        faults_applied: 0,
        committed: 0,
        rolled_forward: 0,
        locks_released: 0,
        digest: None,
        wall_s,
    };
    match ran {
        Ok(Ok(run)) => {
            let r = &run.result;
            let (kind, detail) = classify(r);
            let recoveries = r.faults.as_ref().map_or(&[][..], |f| &f.recoveries[..]);
            Outcome {
                kind,
                detail,
                faults_scheduled: scheduled,
                faults_applied: r.faults.as_ref().map_or(0, |f| f.applied.len()),
                committed: r.measured.committed,
                rolled_forward: recoveries.iter().map(|x| x.rolled_forward).sum(),
                locks_released: recoveries.iter().map(|x| x.locks_released).sum(),
                digest: Some(r.digest),
                wall_s,
            }
        }
        Ok(Err(e)) => empty(Kind::Error, e),
        Err(payload) => {
            let msg = PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| {
                payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            });
            empty(Kind::Panic, msg)
        }
    }
}

/// `target`'s scenario for `seed`, its random faults expanded into the schedule.
pub fn seeded(target: &Target, seed: u64) -> Scenario {
    let mut s = target.scenario.clone();
    s.run.seed = seed;
    s.with_faults_expanded()
}

/// One run of a campaign.
#[derive(Clone, Debug)]
pub struct Row {
    /// Index into `Setup::targets`.
    pub target: usize,
    pub protocol: String,
    pub workload: String,
    pub seed: u64,
    pub outcome: Outcome,
    /// The scenario file that replays it (failures only, once written).
    pub replay: Option<PathBuf>,
    /// Faults in the shrunk schedule (failures only, once shrunk).
    pub shrunk_faults: Option<usize>,
    /// The digest of the replay file's run (failures only).
    pub replay_digest: Option<u64>,
}

/// Runs every target over every seed on `jobs` threads; rows in (target, seed) order.
/// `done` is called after each run.
pub fn run_all(setup: &Setup, jobs: usize, done: &(dyn Fn(&Outcome) + Sync)) -> Vec<Row> {
    let items: Vec<(usize, u64)> =
        (0..setup.targets.len()).flat_map(|t| setup.seeds.iter().map(move |&s| (t, s))).collect();
    let outcomes = crate::parallel::map_parallel(
        &items,
        jobs,
        &|&(t, seed)| {
            let s = seeded(&setup.targets[t], seed);
            let o = match s.check(&format!("seed {seed}")) {
                Ok(_) => run_one(&s, &setup.profile, setup.bug),
                Err(e) => Outcome {
                    kind: Kind::Error,
                    detail: e.to_string(),
                    faults_scheduled: 0,
                    faults_applied: 0,
                    committed: 0,
                    rolled_forward: 0,
                    locks_released: 0,
                    digest: None,
                    wall_s: 0.0,
                },
            };
            done(&o);
            o
        },
        &|| {},
    );
    items
        .iter()
        .zip(outcomes)
        .map(|(&(t, seed), outcome)| {
            let s = &setup.targets[t].scenario;
            Row {
                target: t,
                protocol: setup.targets[t].protocol.name().to_string(),
                workload: workload_name(s),
                seed,
                outcome,
                replay: None,
                shrunk_faults: None,
                replay_digest: None,
            }
        })
        .collect()
}

fn workload_name(s: &Scenario) -> String {
    match &s.workload {
        txbed_scenario::Workload::Txn(w) => w.kind.name().to_string(),
        txbed_scenario::Workload::Verbs(_) => "verbs".into(),
    }
}

/// A failure, shrunk.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The failing run as it ran (schedule expanded).
    pub original: Scenario,
    pub original_outcome: Outcome,
    /// The smallest scenario found that fails with the same kind, and its run.
    pub minimal: Scenario,
    pub minimal_outcome: Outcome,
    /// Runs shrinking took.
    pub runs: usize,
}

/// Delta debugging over an expanded schedule: every candidate is a valid scenario (the
/// schedule's life cycles hold, every fault inside the run) and is kept only if its run fails
/// the same way (`same_failure`). At most `budget` runs.
struct Shrinker<'a> {
    profile: &'a NicProfile,
    bug: Option<Bug>,
    budget: usize,
    runs: usize,
    best: Scenario,
    best_outcome: Outcome,
}

impl Shrinker<'_> {
    fn schedule(&self) -> Vec<TimedFault> {
        self.best.faults.as_ref().map(|f| f.schedule.clone()).unwrap_or_default()
    }

    fn with_schedule(&self, schedule: Vec<TimedFault>) -> Scenario {
        let mut s = self.best.clone();
        s.faults.get_or_insert_with(Faults::default).schedule = schedule;
        s
    }

    /// Whether `s` still fails the same way (and keeps it if so). Invalid candidates are not
    /// run and do not count.
    fn try_keep(&mut self, s: Scenario) -> bool {
        if self.runs >= self.budget || s.check("shrink").is_err() {
            return false;
        }
        self.runs += 1;
        let o = run_one(&s, self.profile, self.bug);
        if same_failure(&o, &self.best_outcome) {
            self.best = s;
            self.best_outcome = o;
            true
        } else {
            false
        }
    }

    fn out_of_budget(&self) -> bool {
        self.runs >= self.budget
    }

    /// Drops groups of faults (a crash with its restart is one group), ddmin's complements:
    /// halves first, then smaller pieces.
    fn drop_faults(&mut self) {
        let mut n = 2;
        loop {
            let schedule = self.schedule();
            let groups = fault_groups(&schedule, &self.best.fault_topology());
            if groups.is_empty() || self.out_of_budget() {
                return;
            }
            let n_eff = n.min(groups.len());
            let chunk = groups.len().div_ceil(n_eff);
            let mut reduced = false;
            for part in groups.chunks(chunk) {
                let drop: Vec<usize> = part.iter().flatten().copied().collect();
                let keep: Vec<TimedFault> =
                    schedule.iter().enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, f)| f.clone()).collect();
                if self.try_keep(self.with_schedule(keep)) {
                    reduced = true;
                    break;
                }
                if self.out_of_budget() {
                    return;
                }
            }
            if reduced {
                n = (n_eff - 1).max(2);
            } else if n_eff >= groups.len() {
                return;
            } else {
                n = (2 * n_eff).min(groups.len());
            }
        }
    }

    /// Drops each restart alone (its node then stays down to the end of the run): one fault
    /// fewer, and a schedule as valid.
    fn drop_restarts(&mut self) {
        let mut i = 0;
        while i < self.schedule().len() && !self.out_of_budget() {
            let mut schedule = self.schedule();
            if matches!(schedule[i].fault, Fault::Restart { .. } | Fault::RestartDc { .. }) {
                schedule.remove(i);
                if self.try_keep(self.with_schedule(schedule)) {
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Shortens the measured window by bisection, keeping every fault inside the run.
    fn shorten_run(&mut self) {
        let warmup = self.best.run.warmup_us;
        let last = self.schedule().iter().map(|f| f.at_us + 1).max().unwrap_or(0);
        let mut lo = last.saturating_sub(warmup).max(1);
        let mut hi = self.best.run.measure_us;
        while lo < hi && !self.out_of_budget() {
            let mid = lo + (hi - lo) / 2;
            let mut s = self.best.clone();
            s.run.measure_us = mid;
            if self.try_keep(s) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
    }

    /// Halves each fault's duration, and each crashed node's downtime (no shorter than
    /// `detect_us`), while the run still fails.
    fn shorten_faults(&mut self) {
        let detect = self.best.fault_topology().detect_us;
        let mut i = 0;
        while i < self.schedule().len() && !self.out_of_budget() {
            loop {
                let schedule = self.schedule();
                let f = &schedule[i];
                let candidate = match &f.fault {
                    _ if f.fault.duration_us() > 1 => {
                        Some(TimedFault { at_us: f.at_us, fault: f.fault.with_duration_us(f.fault.duration_us() / 2) })
                    }
                    Fault::Restart { .. } | Fault::RestartDc { .. } => {
                        crash_of(&schedule, i, &self.best.fault_topology()).and_then(|c| {
                            let crashed = schedule[c].at_us;
                            let at = (crashed + (f.at_us - crashed) / 2).max(crashed + detect);
                            (at < f.at_us).then(|| TimedFault { at_us: at, fault: f.fault.clone() })
                        })
                    }
                    _ => None,
                };
                let Some(c) = candidate else { break };
                let mut next = schedule.clone();
                next[i] = c;
                if !self.try_keep(self.with_schedule(next)) {
                    break;
                }
            }
            i += 1;
        }
    }
}

/// Whether `b` fails as `a` did: the same kind, and for a panic the same place in the code
/// (a panic elsewhere is another bug, which shrinking must not drift to).
pub fn same_failure(a: &Outcome, b: &Outcome) -> bool {
    let place = |o: &Outcome| o.detail.rsplit_once(" at ").map(|(_, at)| at.to_string());
    a.kind == b.kind && (a.kind != Kind::Panic || place(a) == place(b))
}

/// The faults of `schedule` in groups that can go together: a crash with the restart that
/// ends it, every other fault alone. Groups in time order.
pub fn fault_groups(schedule: &[TimedFault], t: &Topology) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut open: BTreeMap<u16, usize> = BTreeMap::new();
    for i in sorted(schedule) {
        let f = &schedule[i].fault;
        match f {
            Fault::Crash { .. } | Fault::CrashDc { .. } => {
                groups.push(vec![i]);
                for n in t.nodes_of(f) {
                    open.insert(n, groups.len() - 1);
                }
            }
            Fault::Restart { .. } | Fault::RestartDc { .. } => {
                let g = t.nodes_of(f).iter().find_map(|n| open.remove(n));
                for n in t.nodes_of(f) {
                    open.remove(&n);
                }
                match g {
                    Some(g) if !groups[g].contains(&i) => groups[g].push(i),
                    _ => groups.push(vec![i]),
                }
            }
            _ => groups.push(vec![i]),
        }
    }
    groups
}

/// The index of the crash the restart at `i` ends.
fn crash_of(schedule: &[TimedFault], i: usize, t: &Topology) -> Option<usize> {
    fault_groups(schedule, t).into_iter().find(|g| g.len() == 2 && g[1] == i).map(|g| g[0])
}

/// Shrinks a failing run of `original` (schedule expanded) within `budget` runs: drop faults
/// (then restarts alone), shorten the run, shorten faults and downtimes, and shorten the run again if that helped.
pub fn shrink(original: &Scenario, outcome: &Outcome, profile: &NicProfile, bug: Option<Bug>, budget: usize) -> Shrunk {
    let mut sh = Shrinker { profile, bug, budget, runs: 0, best: original.clone(), best_outcome: outcome.clone() };
    sh.drop_faults();
    sh.drop_restarts();
    sh.shorten_run();
    let before = sh.best.clone();
    sh.shorten_faults();
    if sh.best != before {
        sh.shorten_run();
    }
    Shrunk {
        original: original.clone(),
        original_outcome: outcome.clone(),
        minimal: sh.best,
        minimal_outcome: sh.best_outcome,
        runs: sh.runs,
    }
}

/// Checks that `s`'s schedule holds (for tests and callers building schedules by hand).
pub fn schedule_ok(s: &Scenario) -> bool {
    let schedule = s.faults.as_ref().map(|f| f.schedule.clone()).unwrap_or_default();
    check_schedule(&schedule, &s.fault_topology()).is_ok()
}

/// A written failure: its files and the command that replays the minimal one.
#[derive(Clone, Debug)]
pub struct Failure {
    pub row: usize,
    pub shrunk: Shrunk,
    pub original_file: PathBuf,
    pub minimal_file: PathBuf,
    pub command: String,
}

impl Failure {
    /// One line: protocol, seed, kind, faults before -> after, and the replay command.
    pub fn line(&self, row: &Row) -> String {
        let s = &self.shrunk;
        let (m0, m1) = (s.original.run.measure_us, s.minimal.run.measure_us);
        format!(
            "{} seed {}: {} (faults {} -> {}, measured {m0} -> {m1} us): {}",
            row.protocol,
            row.seed,
            row.outcome.kind.name(),
            s.original_outcome.faults_scheduled,
            s.minimal_outcome.faults_scheduled,
            self.command
        )
    }
}

/// A name safe in a file name: lower-case letters, digits and dashes.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// The command that replays scenario file `file` (with the planted bug, if any).
pub fn replay_command(file: &Path, bug: Option<Bug>) -> String {
    let bug = bug.map(|b| format!(" --bug {}", b.name)).unwrap_or_default();
    format!("txbed run {}{bug}", file.display())
}

/// Writes `text` with a header of `//` lines.
fn write_scenario(path: &Path, header: &[String], s: &Scenario) -> Result<(), String> {
    let mut text = String::new();
    for h in header {
        for l in h.lines() {
            text += &format!("// {l}\n");
        }
    }
    text += &s.to_ron();
    text.push('\n');
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Shrinks (unless `budget` is `None`) the failures among `rows` on `jobs` threads and writes
/// each as DIR/failures/<scenario>-<protocol>-seed<N>-<kind>.ron (as it ran) and ...-min.ron
/// (shrunk); fills in the rows' replay file and shrunk faults. `done` is called per failure.
pub fn shrink_and_write(
    setup: &Setup,
    rows: &mut [Row],
    dir: &Path,
    budget: Option<usize>,
    jobs: usize,
    done: &(dyn Fn() + Sync),
) -> Result<Vec<Failure>, String> {
    let failing: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].outcome.kind.is_failure()).collect();
    if failing.is_empty() {
        return Ok(Vec::new());
    }
    let fdir = dir.join("failures");
    std::fs::create_dir_all(&fdir).map_err(|e| format!("{}: {e}", fdir.display()))?;
    let shrunk = crate::parallel::map_parallel(
        &failing,
        jobs,
        &|&i| {
            let r = &rows[i];
            let original = seeded(&setup.targets[r.target], r.seed);
            let s = match budget {
                Some(b) => shrink(&original, &r.outcome, &setup.profile, setup.bug, b),
                None => Shrunk {
                    original: original.clone(),
                    original_outcome: r.outcome.clone(),
                    minimal: original,
                    minimal_outcome: r.outcome.clone(),
                    runs: 0,
                },
            };
            done();
            s
        },
        &|| {},
    );
    let mut out = Vec::new();
    for (i, s) in failing.into_iter().zip(shrunk) {
        let r = &rows[i];
        let stem = format!(
            "{}-{}-seed{}-{}",
            slug(&setup.targets[r.target].scenario.name),
            slug(r.protocol.as_str()),
            r.seed,
            r.outcome.kind.name()
        );
        let stem = stem.trim_start_matches('-').to_string();
        let original_file = fdir.join(format!("{stem}.ron"));
        let minimal_file = if budget.is_some() { fdir.join(format!("{stem}-min.ron")) } else { original_file.clone() };
        let command = replay_command(&minimal_file, setup.bug);
        let bug = setup.bug.map(|b| format!(", planted bug {}", b.name)).unwrap_or_default();
        let head = |o: &Outcome, what: &str, file: &Path| {
            vec![
                format!("txbed campaign: {}, seed {}{bug}: {} ({what})", r.protocol, r.seed, o.kind.name()),
                short(&o.detail),
                format!(
                    "{} faults, measured {} us, digest {}",
                    o.faults_scheduled,
                    if what == "as it ran" { s.original.run.measure_us } else { s.minimal.run.measure_us },
                    o.digest.map_or("none".into(), |d| format!("{d:016x}"))
                ),
                format!("replay: {}", replay_command(file, setup.bug)),
            ]
        };
        write_scenario(&original_file, &head(&s.original_outcome, "as it ran", &original_file), &s.original)?;
        if budget.is_some() {
            let what = format!("shrunk from {} faults in {} runs", s.original_outcome.faults_scheduled, s.runs);
            write_scenario(&minimal_file, &head(&s.minimal_outcome, &what, &minimal_file), &s.minimal)?;
        }
        rows[i].replay = Some(minimal_file.clone());
        rows[i].shrunk_faults = Some(s.minimal_outcome.faults_scheduled);
        rows[i].replay_digest = s.minimal_outcome.digest;
        out.push(Failure { row: i, shrunk: s, original_file, minimal_file, command });
    }
    Ok(out)
}

/// The first line of `s`, at most 300 characters.
fn short(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    match l.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &l[..i]),
        None => l.to_string(),
    }
}

/// The columns of campaign.csv, in order.
pub const CSV_COLUMNS: [&str; 15] = [
    "protocol",
    "workload",
    "seed",
    "verdict",
    "detail",
    "faults_scheduled",
    "faults_applied",
    "committed",
    "rolled_forward",
    "locks_released",
    "digest",
    "wall_s",
    "shrunk_faults",
    "replay",
    "replay_digest",
];

/// Writes campaign.csv: one row per run.
pub fn write_csv(path: &Path, rows: &[Row]) -> Result<(), String> {
    let err = |e: csv::Error| format!("{}: {e}", path.display());
    let mut w = csv::Writer::from_path(path).map_err(err)?;
    w.write_record(CSV_COLUMNS).map_err(err)?;
    for r in rows {
        let o = &r.outcome;
        w.write_record([
            r.protocol.clone(),
            r.workload.clone(),
            r.seed.to_string(),
            o.kind.name().to_string(),
            short(&o.detail),
            o.faults_scheduled.to_string(),
            o.faults_applied.to_string(),
            o.committed.to_string(),
            o.rolled_forward.to_string(),
            o.locks_released.to_string(),
            o.digest.map_or(String::new(), |d| format!("{d:016x}")),
            format!("{:.3}", o.wall_s),
            r.shrunk_faults.map_or(String::new(), |n| n.to_string()),
            r.replay.as_ref().map_or(String::new(), |p| p.display().to_string()),
            r.replay_digest.map_or(String::new(), |d| format!("{d:016x}")),
        ])
        .map_err(err)?;
    }
    w.flush().map_err(|e| format!("{}: {e}", path.display()))
}

/// Per protocol: runs, verdicts by kind, faults applied, wall time (summed over its runs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub protocol: String,
    pub runs: usize,
    pub by_kind: BTreeMap<Kind, usize>,
    pub faults_applied: usize,
    pub wall_s: f64,
}

impl Summary {
    pub fn count(&self, k: Kind) -> usize {
        self.by_kind.get(&k).copied().unwrap_or(0)
    }
    pub fn failures(&self) -> usize {
        self.by_kind.iter().filter(|(k, _)| k.is_failure()).map(|(_, n)| n).sum()
    }
}

/// One summary per protocol, in the order they ran.
pub fn summarize(rows: &[Row]) -> Vec<Summary> {
    let mut out: Vec<Summary> = Vec::new();
    for r in rows {
        let i = match out.iter().position(|s| s.protocol == r.protocol) {
            Some(i) => i,
            None => {
                out.push(Summary { protocol: r.protocol.clone(), ..Default::default() });
                out.len() - 1
            }
        };
        let s = &mut out[i];
        s.runs += 1;
        *s.by_kind.entry(r.outcome.kind).or_default() += 1;
        s.faults_applied += r.outcome.faults_applied;
        s.wall_s += r.outcome.wall_s;
    }
    out
}

/// The summary as a text table: protocol, runs, clean, unsupported, failed, failures by
/// kind, faults applied, wall time.
pub fn summary_table(sums: &[Summary]) -> String {
    let header = ["protocol", "runs", "clean", "unsupported", "failed", "failures by kind", "faults applied", "wall s"];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut total = Summary { protocol: "all".into(), ..Default::default() };
    for s in sums {
        rows.push(summary_row(s));
        total.runs += s.runs;
        for (k, n) in &s.by_kind {
            *total.by_kind.entry(*k).or_default() += n;
        }
        total.faults_applied += s.faults_applied;
        total.wall_s += s.wall_s;
    }
    if sums.len() > 1 {
        rows.push(summary_row(&total));
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].len()).chain([header[c].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: Vec<String>| {
        let mut l = String::new();
        for (c, cell) in cells.iter().enumerate() {
            // Text columns left, numbers right.
            if c == 0 || c == 5 {
                l += &format!("{cell:<w$}  ", w = widths[c]);
            } else {
                l += &format!("{cell:>w$}  ", w = widths[c]);
            }
        }
        l.trim_end().to_string()
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out.push('\n');
        out += &line(r);
    }
    out
}

fn summary_row(s: &Summary) -> Vec<String> {
    let kinds: Vec<String> = Kind::ALL
        .iter()
        .filter(|k| k.is_failure() && s.count(**k) > 0)
        .map(|k| format!("{} {}", k.name(), s.count(*k)))
        .collect();
    vec![
        s.protocol.clone(),
        s.runs.to_string(),
        s.count(Kind::Clean).to_string(),
        s.count(Kind::Unsupported).to_string(),
        s.failures().to_string(),
        if kinds.is_empty() { "-".into() } else { kinds.join(", ") },
        s.faults_applied.to_string(),
        format!("{:.1}", s.wall_s),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_a_verdict_with_its_message_and_place() {
        let o = guarded(3, || panic!("boom {}", 7));
        assert_eq!(o.kind, Kind::Panic);
        assert!(o.detail.starts_with("boom 7 at ") && o.detail.contains("campaign.rs"), "{}", o.detail);
        assert_eq!((o.faults_scheduled, o.digest), (3, None));
        let o = guarded(0, || Err("no such thing".into()));
        assert_eq!((o.kind, o.detail.as_str()), (Kind::Error, "no such thing"));
    }

    #[test]
    fn a_panic_elsewhere_is_another_failure() {
        let o = |kind, detail: &str| Outcome {
            kind,
            detail: detail.into(),
            faults_scheduled: 1,
            faults_applied: 1,
            committed: 0,
            rolled_forward: 0,
            locks_released: 0,
            digest: None,
            wall_s: 0.0,
        };
        let a = o(Kind::Panic, "x at sim/src/fabric.rs:10");
        assert!(same_failure(&a, &o(Kind::Panic, "y at sim/src/fabric.rs:10")));
        assert!(!same_failure(&a, &o(Kind::Panic, "x at sim/src/fabric.rs:11")));
        assert!(same_failure(&o(Kind::LostWrites, "a"), &o(Kind::LostWrites, "b")));
        assert!(!same_failure(&o(Kind::LostWrites, "a"), &o(Kind::Stuck, "a")));
    }

    #[test]
    fn every_profile_loads_and_names_no_unknown_field() {
        for (n, _) in PROFILES {
            let p = load_profile(n).unwrap_or_else(|e| panic!("{n}: {e}"));
            assert_ne!(p, RandomFaults::default(), "{n} generates nothing");
        }
        let e = load_profile("no-such-profile").unwrap_err();
        assert!(e.contains("unknown fault profile `no-such-profile`") && e.contains("mixed"), "{e}");
    }

    #[test]
    fn groups_pair_each_crash_with_its_restart() {
        let t = Topology { nodes: 4, dcs: Vec::new(), dc_of: Vec::new(), detect_us: 100, end_us: 5000 };
        let at = |at_us, fault| TimedFault { at_us, fault };
        let s = vec![
            at(100, Fault::Crash { node: 1 }),
            at(150, Fault::SlowCpu { node: 0, factor: 2.0, for_us: 10 }),
            at(400, Fault::Restart { node: 1 }),
            at(500, Fault::Crash { node: 1 }),
            at(900, Fault::Crash { node: 2 }),
        ];
        assert_eq!(fault_groups(&s, &t), vec![vec![0, 2], vec![1], vec![3], vec![4]]);
        assert_eq!(crash_of(&s, 2, &t), Some(0));
    }

    #[test]
    fn protocols_parse_all_a_list_or_name_the_bad_one() {
        assert_eq!(Protocols::parse("all").unwrap(), Protocols::All);
        assert_eq!(Protocols::parse("occ, nowait").unwrap(), Protocols::List(vec!["occ".into(), "nowait".into()]));
        let e = Protocols::parse("occ,paxos").unwrap_err();
        assert!(e.contains("`paxos` is not a protocol") && e.contains("OCC"), "{e}");
        assert!(Protocols::parse("occ,,nowait").unwrap_err().contains("empty name"));
    }

    #[test]
    fn bugs_are_found_in_any_spelling_and_named_when_missing() {
        let occ = txbed_protocols::named("occ").unwrap();
        assert_eq!(find_bug(occ, "forget-wal").unwrap(), txbed_txn::recovery::FORGET_WAL);
        assert_eq!(find_bug(occ, "SkipValidation").unwrap().name, "SkipValidation");
        let e = find_bug(txbed_protocols::named("nowait").unwrap(), "SkipValidation").unwrap_err();
        assert!(e.contains("NOWAIT has no planted bug `SkipValidation`") && e.contains("ForgetWal"), "{e}");
        // The shared layers' bugs are refused where those layers are not used.
        let redt = txbed_protocols::named("redt").unwrap();
        let e = find_bug(redt, "SkipLog").unwrap_err();
        assert!(e.contains("RedtIgnoreThomasRule") && e.contains("keeps its own replicas"), "{e}");
        assert_eq!(find_bug(redt, "redt-ignore-thomas-rule").unwrap().name, "RedtIgnoreThomasRule");
    }
}
