//! Progress output on stderr: an indicatif bar over the trials when stderr is a terminal, one
//! plain line per phase otherwise (CI logs, pipes), so stdout keeps only the report.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// Where the run is: the bar (on a terminal) and the label of the current trial.
pub struct Progress {
    /// The bar over all trials; `None` when stderr is not a terminal.
    bar: Option<ProgressBar>,
    /// "leader-kill, 1 in flight, trial 2/3"; a plain mutex, never held across an `.await`.
    label: Mutex<String>,
    /// When the run started, for the plain lines' timestamps.
    started: Instant,
}

impl Progress {
    /// Progress over `trials` trials.
    pub fn new(trials: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(trials as u64);
            let style = ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} trials  {msg}",
            )
            .expect("a valid progress template")
            .progress_chars("=> ");
            bar.set_style(style);
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            label: Mutex::new(String::new()),
            started: Instant::now(),
        }
    }

    /// A trial begins.
    pub fn start_trial(&self, label: &str) {
        *self.label.lock().expect("progress label") = label.to_string();
    }

    /// The current trial enters `phase` ("warm-up", "fault", ...).
    pub fn phase(&self, phase: &str) {
        let label = self.label.lock().expect("progress label").clone();
        match &self.bar {
            Some(bar) => bar.set_message(format!("{label}: {phase}")),
            None => eprintln!(
                "[{:>6.1} s] {label}: {phase}",
                self.started.elapsed().as_secs_f64()
            ),
        }
    }

    /// A trial ended (or was skipped).
    pub fn trial_done(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// A line that must stay visible (a skipped scenario, a written file).
    pub fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// The run is over: the bar is cleared.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
