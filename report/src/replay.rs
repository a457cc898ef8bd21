//! `txbed replay DIR/report.json`: re-runs the scenario and seed a report recorded (its
//! resolved scenario, every default filled in) and checks the digest is the same.

use std::path::Path;

use txbed_scenario::Scenario;

/// What a report says about the run that produced it.
pub struct Recorded {
    pub scenario: Scenario,
    pub profile: txbed_sim::NicProfile,
    pub seed: u64,
    pub digest: String,
    /// The report's provenance; None in reports written before txbed recorded it.
    pub provenance: Option<crate::provenance::Provenance>,
}

/// Reads a report.json written by `txbed run --out` (or `--json`).
pub fn load(path: &Path) -> Result<Recorded, String> {
    let src = path.display().to_string();
    let text = txbed_input::read_text(path, "report", txbed_input::RESULTS_LIMIT).map_err(|e| e.0)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{src}:{}:{}: not a JSON report: {e}", e.line(), e.column()))?;
    let field =
        |k: &str| v.get(k).ok_or_else(|| format!("{src}: no {k:?} in the report (written by txbed run --out?)"));
    if let Some(b) = v.get("backend").and_then(|b| b.as_str()) {
        if b != "sim" {
            return Err(format!(
                "{src}: a {b} run is not deterministic and cannot be replayed; run its scenario on the simulator with the same seed instead"
            ));
        }
    }
    let ron =
        field("resolved_scenario")?.as_str().ok_or_else(|| format!("{src}: resolved_scenario is not a string"))?;
    let seed = field("seed")?.as_u64().ok_or_else(|| format!("{src}: seed is not a number"))?;
    let digest = field("digest")?.as_str().ok_or_else(|| format!("{src}: digest is not a string"))?.to_string();
    let (scenario, profile) = Scenario::parse(ron, &format!("{src} (resolved_scenario)")).map_err(|e| e.to_string())?;
    let provenance = v.get("provenance").and_then(|p| serde_json::from_value(p.clone()).ok());
    Ok(Recorded { scenario, profile, seed, digest, provenance })
}
