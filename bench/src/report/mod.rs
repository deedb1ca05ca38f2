//! The run's results as files and text: the JSON document (serde), the CSV, one SVG timeline
//! per scenario and load, the Markdown report, and the terminal tables (the planned-maintenance
//! table among them).

pub mod csv;
pub mod markdown;
pub mod planned;
pub mod plot;
pub mod table;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::clients::ClientKind;
use crate::plan::{EtcdServer, Plan, ScenarioRun, Timing};
use crate::workload::PACE;

/// How one client was configured.
#[derive(Debug, Serialize)]
pub struct ClientSetting {
    /// Which client.
    pub client: ClientKind,
    /// Its options, in words.
    pub options: String,
}

/// What every trial of the run shared.
#[derive(Debug, Serialize)]
pub struct Settings {
    /// The command line, as typed.
    pub command: String,
    /// Trials per scenario and load.
    pub trials: usize,
    /// Warm-up, window, hold, deadline.
    pub timing: Timing,
    /// Least time between two calls of one task of a closed loop, in ms.
    pub closed_loop_pace_ms: f64,
    /// The clients, side by side.
    pub clients: Vec<ClientSetting>,
    /// Where the local clusters kept their data; `None`: the system's temp dir.
    pub data_dir: Option<std::path::PathBuf>,
    /// The etcd server asked for with `--etcd-version`; `None`: the testkit's choice (each
    /// trial records the version that ran).
    pub etcd: Option<EtcdServer>,
    /// Clients of the default run that could not run here, and why.
    pub left_out: Vec<LeftOut>,
}

/// A client left out of the run.
#[derive(Debug, Serialize)]
pub struct LeftOut {
    /// Which client.
    pub client: ClientKind,
    /// Why.
    pub reason: String,
}

impl Settings {
    /// The settings of `plan`, run as `command`, without the clients `left_out`.
    pub fn new(plan: &Plan, command: String, left_out: Vec<LeftOut>) -> Self {
        Settings {
            command,
            trials: plan.trials,
            timing: plan.timing,
            closed_loop_pace_ms: PACE.as_secs_f64() * 1000.0,
            clients: plan
                .clients
                .iter()
                .map(|&client| ClientSetting {
                    client,
                    options: client.describe(plan.timing.deadline),
                })
                .collect(),
            data_dir: plan.data_dir.clone(),
            etcd: plan.etcd.clone(),
            left_out,
        }
    }
}

/// The whole report: settings, then every scenario and load with its summary and trials.
#[derive(Debug, Serialize)]
pub struct Report {
    /// What every trial shared.
    pub settings: Settings,
    /// One entry per scenario and load, in run order.
    pub scenarios: Vec<ScenarioRun>,
}

/// The summaries only (no trials, no samples), for `--format json` on stdout.
#[derive(Serialize)]
struct SummaryView<'a> {
    settings: &'a Settings,
    scenarios: Vec<SummaryEntry<'a>>,
    planned_maintenance: Vec<planned::PlannedRow>,
}

/// One scenario's summary in [`SummaryView`].
#[derive(Serialize)]
struct SummaryEntry<'a> {
    scenario: &'a str,
    description: &'a str,
    load: crate::workload::Load,
    skipped: &'a [String],
    summary: &'a crate::stats::ScenarioSummary,
}

impl Report {
    /// The summaries as pretty JSON.
    pub fn summary_json(&self) -> String {
        let view = SummaryView {
            settings: &self.settings,
            scenarios: self
                .scenarios
                .iter()
                .map(|s| SummaryEntry {
                    scenario: s.scenario,
                    description: &s.description,
                    load: s.load,
                    skipped: &s.skipped,
                    summary: &s.summary,
                })
                .collect(),
            planned_maintenance: planned::rows(self),
        };
        serde_json::to_string_pretty(&view).expect("the summary serializes")
    }

    /// Writes every file under `dir`; returns the paths written, the Markdown report first.
    pub fn write(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let mut written = Vec::new();
        let mut svgs = Vec::new();
        for run in &self.scenarios {
            let name = svg_name(run);
            if plot::timeline(run, &dir.join(&name))? {
                svgs.push((run.scenario, run.load, name));
            }
        }
        let markdown = dir.join("report.md");
        std::fs::write(&markdown, markdown::render(self, &svgs))?;
        written.push(markdown);
        let json = dir.join("report.json");
        let file = std::io::BufWriter::new(std::fs::File::create(&json)?);
        serde_json::to_writer(file, self).map_err(std::io::Error::other)?;
        written.push(json);
        let csv = dir.join("trials.csv");
        std::fs::write(&csv, csv::render(self))?;
        written.push(csv);
        written.extend(svgs.into_iter().map(|(_, _, name)| dir.join(name)));
        Ok(written)
    }
}

/// The SVG file name of a scenario under a load: `leader-kill-c1.svg`.
fn svg_name(run: &ScenarioRun) -> String {
    format!("{}-{}.svg", run.scenario, run.load.slug())
}

/// A value with a unit-free format: "1234" for ms, "-" for none.
pub fn ms_or_dash(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"))
}
