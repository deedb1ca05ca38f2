//! The harness end to end, as a user runs it, on a real 3-member cluster: a correct workload
//! gets a clean verdict, and one whose recorded history lies about a write (acknowledged, never
//! sent) is caught. No faults: what is tested here is the user's path through the harness and
//! the checkers, not etcd-ha's failover (the robustness suite of etcd-ha does that).

use std::time::Duration;

use etcd_ha_check::history::{History, Request, Response};
use etcd_ha_check::{Harness, HarnessConfig, Property, check};

/// A short workload of puts, reads and compare-and-swaps on two keys through `harness`'s
/// proxies; `lie` adds one put recorded as acknowledged that was never sent.
async fn run(seed: u64, lie: bool) -> History {
    let harness = Harness::start(HarnessConfig::new(seed).with_faults(Vec::new()))
        .await
        .expect("start the harness");
    let client = harness
        .client()
        .await
        .expect("a client through the proxies");
    let recorder = harness.recorder();
    let keys = [0, 1].map(|k| format!("{}k{k}", harness.kv_prefix()));
    for n in 0..40 {
        let key = keys[n % 2].clone();
        let put = Request::Put {
            key: key.clone(),
            value: format!("v{n}"),
            lease: None,
        };
        recorder.kv(&client, 0, 0, put).await;
        let get = Request::Get {
            key: key.clone(),
            serializable: n % 3 == 0,
        };
        recorder.kv(&client, 1, 0, get).await;
        let cas = Request::Cas {
            key,
            expect: Some(format!("v{n}")),
            value: format!("c{n}"),
        };
        recorder.kv(&client, 2, 0, cas).await;
    }
    if lie {
        let put = Request::Put {
            key: keys[0].clone(),
            value: "never-sent".into(),
            lease: None,
        };
        recorder
            .op(3, 0, put, async { Ok(Response::Put { revision: 1 << 40 }) })
            .await;
    }
    let end = recorder.now();
    harness
        .finish(History {
            end,
            ..History::default()
        })
        .await
        .expect("the run ends with a history")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_workload_gets_a_clean_verdict() {
    let history = run(1, false).await;
    assert_eq!(history.ops.len(), 120);
    assert!(!history.truth.is_empty(), "the truth was collected");
    let report = check(&history, Duration::from_secs(60));
    assert!(report.is_ok(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_acknowledged_but_never_applied_is_caught() {
    let history = run(2, true).await;
    let report = check(&history, Duration::from_secs(60));
    assert!(!report.is_ok(), "a lie must not pass");
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.property == Property::LostWrite),
        "the lie is named a lost write:\n{report}"
    );
}
