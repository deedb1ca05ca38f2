//! Managed watches spread over several streams (`Options::with_watch_streams`): each stream
//! opens on a member the others are not on, and a kill of one member resumes only its
//! stream's watches, every watch still getting every event.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use etcd_ha::{Client, Options, PutOptions, WatchBatch, WatchOptions, WatchStream};
use tokio::time::{Instant, sleep, timeout};

const WATCHES: usize = 30;

/// Put each watched key once (waiting out an election), then see each watch get that one
/// event.
async fn put_each_and_see_its_event(writer: &Client, prefix: &str, watches: &mut [WatchStream]) {
    let until = Instant::now() + Duration::from_secs(20);
    for i in 0..watches.len() {
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
        assert!(
            matches!(&batch, WatchBatch::Events { events, .. } if events.len() == 1),
            "watch {i}: {batch:?}"
        );
    }
}

/// A client with three watch streams on its own cluster, healthy, and `WATCHES` watches on
/// keys under a fresh prefix named after `name`.
async fn three_streams(
    name: &str,
) -> (etcd_ha::testkit::Cluster, Client, String, Vec<WatchStream>) {
    let cluster = support::cluster3().await;
    let client = Client::connect(&cluster.endpoints(), Options::new().with_watch_streams(3))
        .await
        .unwrap();
    support::all_healthy(&client).await;
    let prefix = support::unique(name);
    let mut watches = Vec::new();
    for i in 0..WATCHES {
        let key = format!("{prefix}/{i}");
        let watch = client.watch().watch(key, WatchOptions::new()).await;
        watches.push(watch.unwrap());
    }
    (cluster, client, prefix, watches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_spread_over_members_and_a_kill_moves_one() {
    let (mut cluster, client, prefix, mut watches) = three_streams("spread").await;
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
    put_each_and_see_its_event(&writer, &prefix, &mut watches).await;
    let members: HashSet<String> = client.watch().stream_endpoints().into_iter().collect();
    assert!(
        !members.contains(&cluster.endpoint(victim)),
        "no stream left on the killed member: {members:?}"
    );
}

/// A leader's death leaves its followers without a leader only for the election: the streams
/// on them stay (a stream leaves a leaderless member only once it has been so for a grace),
/// only the dead member's stream opens again, and every watch gets its next event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_on_followers_stay_through_the_leaders_reelection() {
    let (mut cluster, client, prefix, mut watches) = three_streams("stay").await;
    let until = Instant::now() + Duration::from_secs(10);
    while client.watch().stream_endpoints().len() < 3
        || client
            .watch()
            .stream_endpoints()
            .into_iter()
            .collect::<HashSet<_>>()
            .len()
            < 3
    {
        assert!(Instant::now() < until, "three streams on three members");
        sleep(Duration::from_millis(50)).await;
    }
    // Settled: no young stream left to spread.
    sleep(Duration::from_secs(6)).await;
    let leader = cluster.leader(Duration::from_secs(10)).await.unwrap();
    let opened = client.watch().streams_opened();
    let writer = support::client(&cluster).await;
    cluster.kill(leader);
    put_each_and_see_its_event(&writer, &prefix, &mut watches).await;
    // Past the grace: a stream that was going to leave has left.
    sleep(Duration::from_secs(2)).await;
    assert_eq!(
        client.watch().streams_opened() - opened,
        1,
        "only the dead leader's stream opened again"
    );
}

/// A killed member's stream moves to a member a sibling is on (two members are left); once the
/// member is back and settled, one of the two sharing streams moves to it, so a later failure
/// of the shared member does not resume both streams at once. Every watch still gets every
/// event, and the moves are counted: one for the kill, one to spread again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_spread_again_when_a_killed_member_comes_back() {
    let (mut cluster, client, prefix, mut watches) = three_streams("back").await;
    let distinct = |client: &Client| {
        let members: HashSet<String> = client.watch().stream_endpoints().into_iter().collect();
        members.len()
    };
    let until = Instant::now() + Duration::from_secs(10);
    while distinct(&client) < 3 {
        assert!(Instant::now() < until, "three streams on three members");
        sleep(Duration::from_millis(50)).await;
    }
    let victim = cluster.leader(Duration::from_secs(10)).await.unwrap();
    let opened = client.watch().streams_opened();
    let writer = support::client(&cluster).await;
    cluster.kill(victim);
    put_each_and_see_its_event(&writer, &prefix, &mut watches).await;
    assert_eq!(distinct(&client), 2, "two members left, three streams");
    // Past the spread window of the stream that moved: it is settled where it is.
    sleep(Duration::from_secs(6)).await;
    assert_eq!(distinct(&client), 2, "nowhere to spread to yet");

    cluster.restart(victim).await.unwrap();
    // Healthy again, then settled for the spread window (5 s), then a move.
    let until = Instant::now() + Duration::from_secs(30);
    while distinct(&client) < 3 {
        assert!(
            Instant::now() < until,
            "a stream moved back to the member that came back: {:?}",
            client.watch().stream_endpoints()
        );
        sleep(Duration::from_millis(100)).await;
    }
    put_each_and_see_its_event(&writer, &prefix, &mut watches).await;
    sleep(Duration::from_secs(2)).await;
    assert_eq!(
        client.watch().streams_opened() - opened,
        2,
        "one open for the kill, one to spread again"
    );
}
