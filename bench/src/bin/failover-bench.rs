//! The failover benchmark's command: parses the arguments, runs the plan on a tokio runtime,
//! prints the chosen format on stdout and writes every file under `--out`.

use clap::Parser;
use etcd_ha_bench::cli::{Args, Format};
use etcd_ha_bench::clients::ClientKind;
use etcd_ha_bench::goclient;
use etcd_ha_bench::plan;
use etcd_ha_bench::progress::Progress;
use etcd_ha_bench::report::{Report, Settings, planned, table};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let mut plan = args.plan();
    // etcd's Go client joins only where Go and clientv3's sources are installed; the driver
    // is built here, once, before any cluster starts.
    if plan.clients.contains(&ClientKind::GoClientv3)
        && let Err(why) = goclient::prepare()
    {
        eprintln!("go-clientv3 left out of the run: {why}");
        plan.clients.retain(|c| *c != ClientKind::GoClientv3);
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
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
        settings: Settings::new(&plan, command),
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
