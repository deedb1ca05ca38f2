//! Managed watches spread over several streams (`Options::with_watch_streams`): each stream
//! opens on a member the others are not on, and a kill of one member resumes only its
//! stream's watches, every watch still getting every event.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use etcd_ha::{Client, Options, PutOptions, WatchBatch, WatchOptions};
use tokio::time::{Instant, sleep, timeout};

const WATCHES: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_spread_over_members_and_a_kill_moves_one() {
    let mut cluster = support::cluster3().await;
    let client = Client::connect(&cluster.endpoints(), Options::new().with_watch_streams(3))
        .await
        .unwrap();
    support::all_healthy(&client).await;
    let prefix = support::unique("spread");
    let mut watches = Vec::new();
    for i in 0..WATCHES {
        let key = format!("{prefix}/{i}");
        watches.push(
            client
                .watch()
                .watch(key, WatchOptions::new())
                .await
                .unwrap(),
        );
    }
    let until = Instant::now() + Duration::from_secs(10);
    let members = loop {
        let members: HashSet<String> = client.watch().stream_endpoints().into_iter().collect();
        if members.len() == 3 || Instant::now() > until {
            break members;
        }
        sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        members.len(),
        3,
        "three streams on three members: {members:?}"
    );

    // Kill the member of one stream; every watch must still see its next event.
    let victim = (0..cluster.len())
        .find(|&i| members.contains(&cluster.endpoint(i)))
        .unwrap();
    let writer = support::client(&cluster).await;
    cluster.kill(victim);
    // The victim may have led: puts wait out the election.
    let until = Instant::now() + Duration::from_secs(20);
    for i in 0..WATCHES {
        let key = format!("{prefix}/{i}");
        while let Err(e) = writer
            .kv()
            .put(key.as_str(), "after", PutOptions::new())
            .await
        {
            assert!(Instant::now() < until, "put {i}: {e}");
            sleep(Duration::from_millis(100)).await;
        }
    }
    for (i, w) in watches.iter_mut().enumerate() {
        let batch = timeout(Duration::from_secs(20), w.next_batch())
            .await
            .unwrap_or_else(|_| panic!("watch {i} had no event after the kill"))
            .expect("the watch goes on")
            .expect("no error");
        match batch {
            WatchBatch::Events { events, .. } => {
                assert_eq!(events.len(), 1, "watch {i}: one event")
            }
            other => panic!("watch {i}: {other:?}"),
        }
    }
    let members: HashSet<String> = client.watch().stream_endpoints().into_iter().collect();
    assert!(
        !members.contains(&cluster.endpoint(victim)),
        "no stream left on the killed member: {members:?}"
    );
}
