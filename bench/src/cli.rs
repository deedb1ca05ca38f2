//! The command line of `failover-bench` (clap derive), and its translation into a [`Plan`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::access::{Access, PASSWORD_ENV, TlsFiles};
use crate::clients::ClientKind;
use crate::plan::{Plan, Timing};
use crate::scenario::Scenario;
use crate::site::{External, Fault};
use crate::workload::Load;

/// etcd-ha against the etcd-client crate under the faults failover exists for, on real etcd
/// clusters: by default fresh local 3-member clusters, one per trial; with `--endpoints`, your
/// own cluster, hurt and healed by your commands.
#[derive(Debug, Parser)]
#[command(name = "failover-bench", version, about, long_about = None)]
pub struct Args {
    /// Scenarios to run, on local clusters [default: all but leader-moves, leader-sigterm,
    /// rolling-sigterm and rolling-drain, which --all adds]. Ignored with --endpoints.
    #[arg(value_enum)]
    pub scenarios: Vec<Scenario>,

    /// Run every scenario, the longer planned-maintenance ones included (a rolling restart
    /// needs a 20 s window): about twice the default run's time.
    #[arg(long, conflicts_with = "scenarios")]
    pub all: bool,

    /// Trials of every scenario at every load; the report gives median, p90 and max.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub trials: u32,

    /// Clients run side by side in every trial (comma-separated) [default: etcd-ha,
    /// etcd-ha-alone, the three etcd-client ones and go-clientv3]. go-clientv3 (clientv3 3.6)
    /// needs Go and the Go module proxy for its first build; go-clientv3-3.4 (not in the
    /// default run) needs Debian's golang-etcd-server-dev. A Go client named here that cannot
    /// be built stops the run; in the default run it is left out with the reason printed and
    /// recorded in the report.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub clients: Vec<ClientKind>,

    /// Calls in flight per client and loop: tasks sharing one client, each with one call at a
    /// time (closed loop). A list runs every scenario at each, e.g. 1,16,256.
    #[arg(long, value_delimiter = ',', default_value = "1",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Vec<u32>,

    /// Open loop instead: calls started per second per client and loop, whatever happens to
    /// earlier calls.
    #[arg(long, conflicts_with = "concurrency")]
    pub rate: Option<f64>,

    /// The caller's deadline on every call ("1s", "500ms"); a call still running then is
    /// abandoned and counts as an error.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub deadline: Duration,

    /// Fault window, from the fault to the end of the loops ("7s"); faults that are undone
    /// are held for all of it but the last 3 s, which show the recovery. The default keeps
    /// the default run (10 scenarios x 3 trials) near 6 minutes. The graceful rolling restarts
    /// (rolling-sigterm, rolling-drain) take at least 20 s, which their script needs.
    #[arg(long, default_value = "7s", value_parser = parse_duration)]
    pub window: Duration,

    /// Where the JSON, CSV, SVG timelines and Markdown report go.
    #[arg(long, default_value = "target/failover-report")]
    pub out: PathBuf,

    /// Where the local clusters keep their data (a directory per trial, removed after it)
    /// [default: the system's temp dir]. Three members of one machine share its disk: one that
    /// starts writes its log and database while the others wait on their fsyncs, which stalls
    /// every client at once (270-490 ms seen on a virtual disk in a rolling restart). A tmpfs
    /// such as /dev/shm leaves only the members' own work. Ignored with --endpoints.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,

    /// What goes to stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// The etcd server of the local clusters: 3.4.23 (Debian's package, scripts/etcd-3.4.sh),
    /// 3.5.1 (the testkit's own), or any other release built from its Go modules by
    /// scripts/etcd-go.sh (3.5.35, 3.6.16, 3.7.3, ...; the first build takes minutes) [default:
    /// $ETCD_BIN if set, else 3.6.16]. The version that ran is in the table headers, report.md
    /// and the JSON.
    #[arg(long, conflicts_with = "endpoints")]
    pub etcd_version: Option<String>,

    /// Your own cluster's client URLs (comma-separated), instead of local clusters: http, or
    /// https with --cacert/--cert/--key; the benchmark's keys (under etcd-ha-bench/) are
    /// deleted after each trial.
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,

    /// PEM file of the CA that signed your members' certificates (TLS, for every client;
    /// without it, https endpoints are verified against the system's roots). Verification is
    /// always on, and every endpoint must then be https.
    #[arg(long, requires = "endpoints")]
    pub cacert: Option<PathBuf>,

    /// PEM client certificate for mutual TLS, for every client (with --key).
    #[arg(long, requires_all = ["endpoints", "key"])]
    pub cert: Option<PathBuf>,

    /// PEM private key of --cert.
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,

    /// etcd user every client authenticates as (https endpoints only: the password never
    /// crosses http).
    #[arg(long, requires = "endpoints")]
    pub user: Option<String>,

    /// The user's password; better in $ETCD_HA_BENCH_PASSWORD, out of the shell's history and
    /// the process list. Never printed, logged or written into the report. Ignored without
    /// --user (so an exported variable does not get in the way of a local run).
    #[arg(long, env = PASSWORD_ENV, hide_env_values = true, value_parser = parse_secret)]
    pub password: Option<Secret>,

    /// Shell command run at the fault instant against --endpoints (with
    /// $ETCD_HA_BENCH_LEADER and $ETCD_HA_BENCH_ENDPOINTS set); the clocks start when it exits.
    #[arg(long, requires = "endpoints")]
    pub fault_cmd: Option<String>,

    /// Shell command run at the heal instant (the fault plus the hold); without it the fault
    /// is taken to stay.
    #[arg(long, requires = "fault_cmd")]
    pub heal_cmd: Option<String>,
}

/// What the run prints on stdout; every file under --out is written whatever this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Plain-text tables, one per scenario and load.
    Table,
    /// The summaries as JSON (the raw samples are in the file only).
    Json,
    /// The Markdown report.
    Markdown,
}

/// A password as clap holds it: `Debug` (of [`Args`], say) shows `<redacted>`.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Any text is a password.
fn parse_secret(text: &str) -> Result<Secret, String> {
    Ok(Secret(text.to_string()))
}

impl Args {
    /// The plan these arguments ask for; errors if the access settings contradict the
    /// endpoints (see [`Access::new`]).
    pub fn plan(&self) -> Result<Plan, String> {
        let faults = if self.endpoints.is_empty() {
            let scenarios = if self.all {
                Scenario::ALL.to_vec()
            } else if self.scenarios.is_empty() {
                Scenario::DEFAULT.to_vec()
            } else {
                dedup(&self.scenarios)
            };
            scenarios.into_iter().map(Fault::Local).collect()
        } else {
            let tls = TlsFiles {
                ca: self.cacert.clone(),
                cert: self.cert.clone(),
                key: self.key.clone(),
            };
            let user = self.user.clone().map(|name| {
                let password = self.password.clone().map(|p| p.0).unwrap_or_default();
                (name, password)
            });
            vec![Fault::External(External {
                endpoints: self.endpoints.clone(),
                access: Access::new(&self.endpoints, tls, user)?,
                fault_cmd: self.fault_cmd.clone(),
                heal_cmd: self.heal_cmd.clone(),
            })]
        };
        let clients = if self.clients.is_empty() {
            ClientKind::DEFAULT.to_vec()
        } else {
            dedup(&self.clients)
        };
        let loads = match self.rate {
            Some(rate) => vec![Load::Open { rate }],
            None => dedup(&self.concurrency)
                .into_iter()
                .map(|c| Load::Closed {
                    concurrency: c as usize,
                })
                .collect(),
        };
        Ok(Plan {
            faults,
            clients,
            loads,
            trials: self.trials as usize,
            timing: Timing::new(self.window, self.deadline),
            data_dir: self.data_dir.clone(),
            etcd: None,
        })
    }

    /// True if the clients were named (`--clients`), so that one that cannot run is an error
    /// rather than a note.
    pub fn clients_named(&self) -> bool {
        !self.clients.is_empty()
    }
}

/// The command line as typed, for the report, with the value of `--password` replaced: the
/// report is meant to be shared.
pub fn redacted_command(args: impl IntoIterator<Item = String>) -> String {
    let mut out = Vec::new();
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            out.push("<redacted>".to_string());
            hide_next = false;
        } else if arg == "--password" {
            out.push(arg);
            hide_next = true;
        } else if arg.starts_with("--password=") {
            out.push("--password=<redacted>".to_string());
        } else {
            out.push(arg);
        }
    }
    out.join(" ")
}

/// `items` without repeats, in first-seen order.
fn dedup<T: PartialEq + Copy>(items: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for &item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// "1s", "1.5s", "500ms", or a bare number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a duration such as 1s or 500ms"))?;
    if !(value > 0.0 && value.is_finite()) {
        return Err(format!("`{text}` must be a positive duration"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn defaults_are_the_default_scenarios_and_every_client_once() {
        let args = Args::parse_from(["failover-bench"]);
        let plan = args.plan().unwrap();
        assert_eq!(plan.faults.len(), Scenario::DEFAULT.len());
        assert_eq!(plan.clients, ClientKind::DEFAULT.to_vec());
        assert_eq!(plan.loads, vec![Load::Closed { concurrency: 1 }]);
        assert_eq!(plan.trials, 3);
    }

    #[test]
    fn all_is_every_scenario_in_order() {
        let plan = Args::parse_from(["failover-bench", "--all"])
            .plan()
            .unwrap();
        let names: Vec<_> = plan.faults.iter().map(|f| f.name()).collect();
        let every: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names, every);
        assert_eq!(Scenario::ALL.len(), Scenario::value_variants().len());
        assert!(Args::try_parse_from(["failover-bench", "--all", "leader-kill"]).is_err());
    }

    #[test]
    fn the_password_stays_out_of_the_command_and_debug() {
        let typed = [
            "failover-bench",
            "--endpoints",
            "https://a:2379",
            "--user",
            "app",
            "--password",
            "pw-7f3e",
            "--password=pw-7f3e",
        ];
        let command = redacted_command(typed.iter().map(|s| s.to_string()));
        assert!(
            !command.contains("pw-7f3e") && command.contains("--user app"),
            "{command}"
        );
        let args = Args::parse_from(&typed[..7]);
        let shown = format!("{args:?}");
        assert!(
            !shown.contains("pw-7f3e") && shown.contains("<redacted>"),
            "{shown}"
        );
        // No CA given: https is verified against the system's roots, and the plan is made.
        let plan = args.plan().unwrap();
        assert!(!format!("{plan:?}").contains("pw-7f3e"));
    }

    #[test]
    fn etcd_version_is_for_local_clusters_only() {
        let both = [
            "failover-bench",
            "--etcd-version",
            "3.6.16",
            "--endpoints",
            "http://a:1",
        ];
        assert!(Args::try_parse_from(both).is_err());
        let args = Args::parse_from(["failover-bench", "--etcd-version", "3.6.16"]);
        assert_eq!(args.etcd_version.as_deref(), Some("3.6.16"));
    }

    #[test]
    fn rate_and_concurrency_exclude_each_other() {
        let both = ["failover-bench", "--rate", "100", "--concurrency", "16"];
        assert!(Args::try_parse_from(both).is_err());
    }
}
