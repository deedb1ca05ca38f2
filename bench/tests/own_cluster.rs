//! `failover-bench --endpoints` against a cluster of the user's own that needs TLS (a CA, a
//! client certificate) and a password: every client of the run connects with them, calls
//! succeed for each, and the password shows in none of the outputs (stdout, stderr, every
//! report file).
//!
//! The cluster is the testkit's: https only, client certificates required, auth on with root.
//! The client certificate's CN names no user, so a call without root's token is refused: a
//! client that ignored `--user` would fail its calls here.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use etcd_ha::testkit::Cluster;
use serde_json::Value;

/// Root's password; the test looks for it in everything the run wrote.
const PASSWORD: &str = "bench-pw-3c9d1e77";

/// The clients the run compares: this crate, the etcd-client crate (tuned) and Go's clientv3.
const CLIENTS: [&str; 3] = ["etcd-ha", "etcd-client-tuned", "go-clientv3"];

/// How long the cluster may take to elect its leader.
const READY: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_a_password_reach_every_client_and_never_the_output() {
    let cluster = Cluster::builder()
        .members(1)
        .tls(true)
        .client_cert_auth(true)
        .client_cert_cn("bench-cert-nobody")
        .auth("root", PASSWORD)
        // The lowest bcrypt cost: each client authenticates once, cheaply on a 2-core box.
        .arg("--bcrypt-cost=4")
        .start()
        .await
        .expect("start a TLS + client-cert + auth cluster");
    cluster.leader(READY).await.expect("a leader");
    let tls = cluster.tls().expect("a TLS cluster");
    let out = tempfile::tempdir().expect("a report directory");

    // A child process of its own, as a user runs it; the password in its environment only.
    let run = Command::new(env!("CARGO_BIN_EXE_failover-bench"))
        .arg("--endpoints")
        .arg(cluster.endpoints().join(","))
        .arg("--cacert")
        .arg(&tls.ca)
        .arg("--cert")
        .arg(&tls.client_cert)
        .arg("--key")
        .arg(&tls.client_key)
        .args(["--user", "root", "--clients", &CLIENTS.join(",")])
        .args([
            "--trials", "1", "--window", "2s", "--format", "json", "--out",
        ])
        .arg(out.path())
        .env("ETCD_HA_BENCH_PASSWORD", PASSWORD)
        .output()
        .expect("run failover-bench");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "failover-bench failed:\n{stderr}");

    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("report.json")).expect("report.json"),
    )
    .expect("report.json is JSON");
    let trial = &report["scenarios"][0]["trials"][0];
    let clients = trial["clients"].as_array().expect("the trial's clients");
    let names: Vec<&str> = clients
        .iter()
        .filter_map(|c| c["client"].as_str())
        .collect();
    assert_eq!(names, CLIENTS, "every client ran (stderr:\n{stderr})");
    for client in clients {
        let name = &client["client"];
        assert!(client["error"].is_null(), "{name}: {}", client["error"]);
        for each in client["loops"].as_array().expect("loops") {
            let metrics = &each["metrics"];
            let calls = metrics["calls"].as_u64().unwrap();
            let errors = metrics["errors"].as_u64().unwrap();
            assert!(
                calls > errors,
                "{name} {}: {calls} calls, {errors} errors",
                each["loop"]
            );
        }
        // The benchmark's own calls (read-back, lease check) went over TLS with the token.
        let read_back = &client["read_back"];
        assert!(read_back["read_error"].is_null(), "{name}: {read_back}");
        assert!(
            read_back["ok_puts"].as_u64().unwrap() > 0,
            "{name}: {read_back}"
        );
        assert_eq!(read_back["ok_missing"], 0, "{name}: {read_back}");
        assert!(
            client["watch"]["delivered"].as_u64().unwrap() > 0,
            "{name}: watch"
        );
        assert_eq!(
            client["lease"]["lost"], false,
            "{name}: {}",
            client["lease"]
        );
    }
    // The report names the Go client's version.
    let go = report["settings"]["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["client"] == "go-clientv3")
        .expect("go-clientv3's settings");
    assert!(
        go["options"].as_str().unwrap().starts_with("clientv3 3."),
        "{go}"
    );

    assert!(!stdout.contains(PASSWORD), "the password is on stdout");
    assert!(!stderr.contains(PASSWORD), "the password is on stderr");
    let files = files_under(out.path());
    assert!(
        files.len() >= 3,
        "report.md, report.json, trials.csv: {files:?}"
    );
    for file in files {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        assert!(
            !text.contains(PASSWORD),
            "the password is in {}",
            file.display()
        );
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}
