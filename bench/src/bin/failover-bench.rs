//! The failover benchmark's command: parses the arguments, runs the plan on a tokio runtime,
//! prints the chosen format on stdout and writes every file under `--out`.

use clap::Parser;
use etcd_ha_bench::cli::{self, Args, Format};
use etcd_ha_bench::goclient;
use etcd_ha_bench::plan;
use etcd_ha_bench::progress::Progress;
use etcd_ha_bench::report::{LeftOut, Report, Settings, planned, table};
use etcd_ha_bench::server;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let mut plan = match args.plan() {
        Ok(plan) => plan,
        Err(why) => {
            eprintln!("failover-bench: {why}");
            return std::process::ExitCode::from(2);
        }
    };
    // The server first: building one from its Go modules can take minutes, and a version that
    // cannot be had stops the run before anything is measured.
    // Local clusters run etcd 3.6 (what most users run) unless asked otherwise: by
    // --etcd-version, or ETCD_BIN naming a binary.
    let default_server = (args.endpoints.is_empty()
        && std::env::var_os(etcd_ha::testkit::ETCD_BIN_ENV).is_none_or(|v| v.is_empty()))
    .then(|| server::DEFAULT_VERSION.to_string());
    if let Some(version) = args.etcd_version.as_ref().or(default_server.as_ref()) {
        match server::resolve(version) {
            Ok(etcd) => {
                eprintln!("etcd {} at {}", etcd.version, etcd.binary.display());
                plan.etcd = Some(etcd);
            }
            Err(why) => {
                eprintln!("failover-bench: etcd {version}: {why}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    // etcd's Go clients: each driver is built here, once, before any cluster starts. One the
    // user named stops the run if it cannot be built; one of the default run is left out,
    // with the reason on stderr and in the report.
    let mut left_out = Vec::new();
    for kind in plan.clients.clone() {
        let Some(driver) = kind.go_driver() else {
            continue;
        };
        match goclient::prepare(driver) {
            Ok(()) => {
                let version = goclient::version(driver).unwrap_or_default();
                eprintln!("{}: clientv3 {version}", kind.name());
            }
            Err(why) if args.clients_named() => {
                eprintln!("failover-bench: {} cannot run: {why}", kind.name());
                return std::process::ExitCode::from(2);
            }
            Err(why) => {
                eprintln!("{} LEFT OUT of the run: {why}", kind.name());
                plan.clients.retain(|c| *c != kind);
                // One line for the report's tables: a build's whole output is on stderr.
                let reason = why.lines().next().unwrap_or_default().to_string();
                left_out.push(LeftOut {
                    client: kind,
                    reason,
                });
            }
        }
    }
    let command = cli::redacted_command(std::env::args());
    // As many worker threads as cores: the clients compete with the etcd members for them, as
    // they would in a real deployment.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let progress = Progress::new(plan.total_trials());
    let started = std::time::Instant::now();
    let scenarios = runtime.block_on(plan::execute(&plan, &progress));
    progress.finish();
    let report = Report {
        settings: Settings::new(&plan, command, left_out),
        scenarios,
    };
    let written = report.write(&args.out);
    match args.format {
        Format::Table => {
            print!("{}", table::legend(&report));
            for run in &report.scenarios {
                print!("{}", table::block(run));
            }
            print!("{}", planned::text(&report));
        }
        Format::Json => println!("{}", report.summary_json()),
        Format::Markdown => {
            // The file's text, whose images are the SVGs beside it.
            let path = args.out.join("report.md");
            match std::fs::read_to_string(&path) {
                Ok(text) => print!("{text}"),
                Err(_) => print!("{}", etcd_ha_bench::report::markdown::render(&report, &[])),
            }
        }
    }
    match written {
        Ok(paths) => {
            eprintln!(
                "\nran in {:.0} s; wrote {} files under {} (report: {})",
                started.elapsed().as_secs_f64(),
                paths.len(),
                args.out.display(),
                paths[0].display()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "could not write the report under {}: {e}",
                args.out.display()
            );
            std::process::ExitCode::FAILURE
        }
    }
}
