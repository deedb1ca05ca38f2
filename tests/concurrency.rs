//! The client-side Election and Mutex recipes against a real 3-member etcd: queue order,
//! predecessor-only hand-over, observe, proclaim, fencing of an ex-leader, cancel-safety, and
//! locks released by unlock, by closing the session and by losing it.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test concurrency`.

mod support;

use std::future::Future;
use std::time::Duration;

use etcd_ha::concurrency::{Election, Mutex};
use etcd_ha::{Client, Error, GetOptions, PutOptions, Session, Txn, TxnOp};
use futures_util::StreamExt;
use tokio::task::JoinHandle;

/// Bound on a step that should happen at once (a campaign without contenders, a hand-over).
const PROMPT: Duration = Duration::from_secs(10);

/// How long a waiter is watched to show that it really waits.
const STILL_WAITING: Duration = Duration::from_millis(1500);

/// Session TTL: long enough that only explicit resigns, unlocks and closes end a hold.
const TTL: Duration = Duration::from_secs(30);

/// Awaits `f`, which must finish within [`PROMPT`].
async fn prompt<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(PROMPT, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {PROMPT:?}"))
}

/// A client whose only endpoint is a fault proxy in front of the leader (no member sync, so it
/// stays on the proxy), and the proxy, to slow its link down.
async fn client_on_a_proxied_leader(
    cluster: &etcd_ha::testkit::Cluster,
) -> (etcd_ha::testkit::FaultProxy, Client) {
    let leader = cluster.leader(support::READY).await.unwrap();
    let proxy = etcd_ha::testkit::FaultProxy::start(cluster.client_addr(leader)).unwrap();
    let client = Client::connect(
        [proxy.url("http")],
        etcd_ha::Options::new().without_member_sync(),
    )
    .await
    .unwrap();
    (proxy, client)
}

/// Checks that `waiter` is still blocked after [`STILL_WAITING`].
async fn assert_waiting<T>(what: &str, waiter: &JoinHandle<T>) {
    tokio::time::sleep(STILL_WAITING).await;
    assert!(!waiter.is_finished(), "{what} should still be waiting");
}

/// How many keys are under `prefix/`.
async fn queue_len(client: &Client, prefix: &str) -> i64 {
    client
        .kv()
        .get(
            format!("{prefix}/"),
            GetOptions::new().with_prefix().with_count_only(),
        )
        .await
        .unwrap()
        .count
}

/// Waits until `prefix/` holds `n` keys (a waiter has queued, or withdrawn).
async fn until_queue_len(client: &Client, prefix: &str, n: i64) {
    prompt(&format!("{prefix} reaching {n} keys"), async {
        while queue_len(client, prefix).await != n {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

async fn session(client: &Client) -> Session {
    Session::new(client, TTL).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_queue_hands_over_in_order_and_observe_follows() {
    let cluster = support::cluster3().await;
    // Three candidates, three clients, as three processes would be.
    let clients = [
        support::client(&cluster).await,
        support::client(&cluster).await,
        support::client(&cluster).await,
    ];
    let name = support::unique("election/order");
    let sessions = [
        session(&clients[0]).await,
        session(&clients[1]).await,
        session(&clients[2]).await,
    ];
    let observer = Election::new(&clients[0], name.as_str());
    assert_eq!(observer.leader().await.unwrap(), None);
    let mut leaders = observer.observe();

    let a = prompt(
        "an uncontested campaign",
        Election::new(&clients[0], name.as_str()).campaign(&sessions[0], "a"),
    )
    .await
    .unwrap();
    assert!(a.key().starts_with(format!("{name}/").as_bytes()));
    let observed = prompt("observing a", leaders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(observed.value, b"a");
    assert_eq!(observed.create_revision, a.create_revision());

    // b queues behind a, c behind b.
    let spawn = |i: usize, value: &'static str| {
        let election = Election::new(&clients[i], name.as_str());
        let session = sessions[i].clone();
        tokio::spawn(async move { election.campaign(&session, value).await })
    };
    let b = spawn(1, "b");
    until_queue_len(&clients[0], &name, 2).await;
    let c = spawn(2, "c");
    until_queue_len(&clients[0], &name, 3).await;
    assert_waiting("b behind a", &b).await;
    assert!(!c.is_finished(), "c should wait behind b");

    a.proclaim("a2").await.unwrap();
    let observed = prompt("observing a's proclaim", leaders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(observed.value, b"a2");
    assert_eq!(
        observer.leader().await.unwrap().unwrap().value,
        b"a2",
        "leader() reads the proclaimed value"
    );

    a.resign().await.unwrap();
    let b = prompt("b taking over", b).await.unwrap().unwrap();
    let observed = prompt("observing b", leaders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(observed.value, b"b");
    assert_eq!(observed.create_revision, b.create_revision());
    assert_waiting("c behind b", &c).await;

    b.resign().await.unwrap();
    let c = prompt("c taking over", c).await.unwrap().unwrap();
    let observed = prompt("observing c", leaders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(observed.value, b"c");
    c.resign().await.unwrap();
    assert_eq!(observer.leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_waiter_skips_a_withdrawn_predecessor_and_cancel_removes_the_key() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let name = support::unique("election/withdraw");
    let election = Election::new(&client, name.as_str());
    let (s1, s2, s3) = (
        session(&client).await,
        session(&client).await,
        session(&client).await,
    );
    let leader = election.campaign(&s1, "1").await.unwrap();

    // 2 waits for a while and gives up: dropping the campaign future withdraws its key.
    let gave_up =
        tokio::time::timeout(Duration::from_millis(500), election.campaign(&s2, "2")).await;
    assert!(gave_up.is_err(), "2 cannot lead while 1 does");
    until_queue_len(&client, &name, 1).await;

    // 2 queues again, 3 behind it; then 2 gives up (task aborted): 3 now waits for 1 only.
    let two = {
        let (election, s2) = (election.clone(), s2.clone());
        tokio::spawn(async move { election.campaign(&s2, "2").await })
    };
    until_queue_len(&client, &name, 2).await;
    let three = {
        let (election, s3) = (election.clone(), s3.clone());
        tokio::spawn(async move { election.campaign(&s3, "3").await })
    };
    until_queue_len(&client, &name, 3).await;
    two.abort();
    until_queue_len(&client, &name, 2).await;
    assert_waiting("3 behind 1", &three).await;
    leader.resign().await.unwrap();
    let three = prompt("3 taking over from 1", three)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        election.leader().await.unwrap().unwrap().key,
        three.key(),
        "3 leads"
    );

    // A waiter whose session ends while it waits fails instead of waiting forever.
    let waiter = {
        let (election, s2) = (election.clone(), s2.clone());
        tokio::spawn(async move { election.campaign(&s2, "2").await })
    };
    until_queue_len(&client, &name, 2).await;
    s2.close().await.unwrap();
    let failed = prompt("the orphaned waiter", waiter).await.unwrap();
    assert!(
        matches!(failed, Err(Error::LeaseNotFound)),
        "a closed session ends the campaign: {failed:?}"
    );
    drop(three);
    until_queue_len(&client, &name, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_fencing_stops_an_ex_leader() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let name = support::unique("election/fence");
    let election = Election::new(&client, name.as_str());
    let old_session = session(&client).await;
    let old = election.campaign(&old_session, "old").await.unwrap();
    let fence = old.fence();
    let state = support::unique("election/fence-state");

    let write = |value: &'static str| {
        fence.guard(Txn::new().and_then([TxnOp::put(state.as_str(), value, PutOptions::new())]))
    };
    assert!(client.kv().txn(write("by old")).await.unwrap().succeeded);

    // The old leader's session dies (as when its process is paused past the TTL); a new
    // leader is elected.
    client.lease().revoke(old_session.lease_id()).await.unwrap();
    let new_session = session(&client).await;
    let new = prompt("the next leader", election.campaign(&new_session, "new"))
        .await
        .unwrap();
    assert!(new.create_revision() > old.create_revision());

    // Everything the ex-leader tries now fails, atomically.
    assert!(
        !client
            .kv()
            .txn(write("late write by old"))
            .await
            .unwrap()
            .succeeded
    );
    assert!(matches!(
        old.proclaim("still me?").await,
        Err(Error::Fenced { .. })
    ));
    let got = client
        .kv()
        .get(state.as_str(), GetOptions::new())
        .await
        .unwrap();
    assert_eq!(got.kvs[0].value, b"by old");
    let by_new =
        new.txn(Txn::new().and_then([TxnOp::put(state.as_str(), "by new", PutOptions::new())]));
    assert!(client.kv().txn(by_new).await.unwrap().succeeded);
    // Resigning a lost leadership is a no-op, not an error, and leaves the new leader alone.
    old.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap().unwrap().value, b"new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_waits_for_unlock_and_try_lock_reports_held() {
    let cluster = support::cluster3().await;
    let (c1, c2) = (
        support::client(&cluster).await,
        support::client(&cluster).await,
    );
    let name = support::unique("lock/basic");
    let mutex = Mutex::new(name.as_str());
    let (s1, s2) = (session(&c1).await, session(&c2).await);

    let held = prompt("an uncontested lock", mutex.lock(&s1))
        .await
        .unwrap();
    assert!(held.key().starts_with(format!("{name}/").as_bytes()));
    assert!(held.create_revision() > 0);

    // try_lock on a held lock: None, and nothing left in the queue.
    assert!(mutex.try_lock(&s2).await.unwrap().is_none());
    assert_eq!(queue_len(&c1, &name).await, 1);

    let waiter = {
        let (mutex, s2) = (mutex.clone(), s2.clone());
        tokio::spawn(async move { mutex.lock(&s2).await })
    };
    until_queue_len(&c1, &name, 2).await;
    assert_waiting("the second locker", &waiter).await;
    let first_fence = held.fence();
    held.unlock().await.unwrap();
    let second = prompt("the second locker", waiter).await.unwrap().unwrap();

    // The fence: the first holder's guarded write fails now, the second's succeeds.
    let k = support::unique("lock/basic-state");
    assert!(
        !c1.kv()
            .txn(first_fence.guard(Txn::new().and_then([TxnOp::put(
                k.as_str(),
                "x",
                PutOptions::new()
            )])))
            .await
            .unwrap()
            .succeeded
    );
    assert!(
        c2.kv()
            .txn(second.txn(Txn::new().and_then([TxnOp::put(k.as_str(), "y", PutOptions::new())])))
            .await
            .unwrap()
            .succeeded
    );

    // Dropping the guard unlocks too (in the background).
    drop(second);
    until_queue_len(&c1, &name, 0).await;
    let again = prompt("try_lock on a free lock", mutex.try_lock(&s1))
        .await
        .unwrap();
    assert!(again.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_is_released_when_its_session_is_closed_or_lost() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let name = support::unique("lock/session");
    let mutex = Mutex::new(name.as_str());

    // Closed: the holder closes its session; the waiter gets the lock.
    let holder = session(&client).await;
    let guard = mutex.lock(&holder).await.unwrap();
    let next = session(&client).await;
    let waiter = {
        let (mutex, next) = (mutex.clone(), next.clone());
        tokio::spawn(async move { mutex.lock(&next).await })
    };
    until_queue_len(&client, &name, 2).await;
    assert_waiting("the waiter", &waiter).await;
    holder.close().await.unwrap();
    let second = prompt("taking over from a closed session", waiter)
        .await
        .unwrap()
        .unwrap();
    // The old guard's unlock is harmless now.
    guard.unlock().await.unwrap();
    assert_eq!(queue_len(&client, &name).await, 1);

    // Lost: a holder whose lease runs out (its process died: nothing renews it).
    let short = Session::new(&client, Duration::from_secs(2)).await.unwrap();
    second.unlock().await.unwrap();
    let dying = mutex.lock(&short).await.unwrap();
    short.lease().stop();
    let waiter = {
        let (mutex, next) = (mutex.clone(), next.clone());
        tokio::spawn(async move { mutex.lock(&next).await })
    };
    let began = tokio::time::Instant::now();
    let third = prompt("taking over from a lost session", waiter)
        .await
        .unwrap()
        .unwrap();
    eprintln!(
        "lock taken over {:?} after the holder stopped renewing",
        began.elapsed()
    );
    assert!(third.create_revision() > dying.create_revision());
    drop(dying);
}

/// Issue 18: a campaign or lock whose caller gives up while the txn putting its key is in
/// flight (here: a slow link, so the txn is applied after the caller's timeout and before the
/// cancellation reaches the member) leaves no key behind. Before, the key stayed as long as
/// the session, and every other candidate waited behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_or_lock_abandoned_in_flight_leaves_no_key() {
    use etcd_ha::testkit::Mode;

    let cluster = support::cluster3().await;
    let (proxy, slow) = client_on_a_proxied_leader(&cluster).await;
    let other = support::client(&cluster).await;
    let session = Session::new(&slow, TTL).await.unwrap();
    let rival = Session::new(&other, TTL).await.unwrap();
    let election_name = support::unique("abandoned-campaign");
    let lock_name = support::unique("abandoned-lock");
    // A round trip takes 2 x 150 ms: the request is applied ~150 ms after it is sent, the
    // caller gives up at 200 ms, and its cancellation reaches the member after the apply.
    proxy.set_mode(Mode::Latency(Duration::from_millis(150)));
    let election = Election::new(&slow, election_name.as_str());
    let gave_up = tokio::time::timeout(
        Duration::from_millis(200),
        election.campaign(&session, "abandoned"),
    )
    .await;
    assert!(gave_up.is_err(), "the campaign was abandoned in flight");
    let mutex = Mutex::new(lock_name.as_str());
    let gave_up = tokio::time::timeout(Duration::from_millis(200), mutex.lock(&session)).await;
    assert!(gave_up.is_err(), "the lock was abandoned in flight");

    // Another session's campaign and lock win at once, though ours lives on.
    let won = tokio::time::timeout(
        Duration::from_secs(5),
        Election::new(&other, election_name.as_str()).campaign(&rival, "rival"),
    )
    .await
    .expect("the rival's campaign is not held up by an orphan key")
    .unwrap();
    let locked = tokio::time::timeout(
        Duration::from_secs(5),
        Mutex::new(lock_name.as_str()).lock(&rival),
    )
    .await
    .expect("the rival's lock is not held up by an orphan key")
    .unwrap();
    // Our abandoned key goes once its put's answer is in (through the slow link, it may land
    // after the rival's key and be withdrawn a round trip later), while our session lives on.
    for name in [&election_name, &lock_name] {
        let only_the_rivals = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let keys = other
                    .kv()
                    .get(format!("{name}/"), GetOptions::new().with_prefix())
                    .await
                    .unwrap();
                if keys.kvs.len() == 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(only_the_rivals.is_ok(), "only the rival's key under {name}");
    }
    assert!(
        tokio::time::timeout(Duration::ZERO, session.done())
            .await
            .is_err(),
        "our session lives on"
    );
    won.resign().await.unwrap();
    locked.unlock().await.unwrap();
}

/// A campaign or lock abandoned in flight withdraws its key in the background; the same
/// session's next campaign or lock of that name uses the same key, so it must wait for the
/// withdrawal, or the withdrawal lands after it and deletes the key it now holds (CI saw it:
/// "lease not found" from a campaign on a live session, `tests/canceled_txn.rs`). Here the
/// abandoned txn and its withdrawal go over a slow link and the next campaign over a fast
/// one, so without that order the withdrawal lands ~150 ms after the next campaign won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_campaign_or_lock_of_a_session_outlives_the_withdrawal_of_an_abandoned_one() {
    use etcd_ha::testkit::Mode;

    let cluster = support::cluster3().await;
    let (proxy, slow) = client_on_a_proxied_leader(&cluster).await;
    let fast = support::client(&cluster).await;
    let session = Session::new(&slow, TTL).await.unwrap();
    let election_name = support::unique("withdrawn-then-won");
    let lock_name = support::unique("withdrawn-then-locked");
    // As in the test above: applied ~150 ms after it is sent, abandoned at 200 ms, and the
    // withdrawal (over the same link) is applied ~150 ms after that.
    proxy.set_mode(Mode::Latency(Duration::from_millis(150)));
    let abandoned = tokio::time::timeout(
        Duration::from_millis(200),
        Election::new(&slow, election_name.as_str()).campaign(&session, "abandoned"),
    )
    .await;
    assert!(abandoned.is_err(), "the campaign was abandoned in flight");
    let won = prompt(
        "the session's next campaign",
        Election::new(&fast, election_name.as_str()).campaign(&session, "next"),
    )
    .await
    .unwrap();
    let abandoned = tokio::time::timeout(
        Duration::from_millis(200),
        Mutex::new(lock_name.as_str()).lock(&session),
    )
    .await;
    assert!(abandoned.is_err(), "the lock was abandoned in flight");
    let locked = prompt(
        "the session's next lock",
        Mutex::new(lock_name.as_str()).lock(&session),
    )
    .await
    .unwrap();
    // Long past any withdrawal still on the slow link.
    tokio::time::sleep(Duration::from_secs(1)).await;
    won.proclaim("still leading")
        .await
        .expect("the leader's key outlived the abandoned campaign's withdrawal");
    let held = fast.kv().txn(locked.txn(Txn::new())).await.unwrap();
    assert!(
        held.succeeded,
        "the lock's key outlived the abandoned lock's withdrawal"
    );
    won.resign().await.unwrap();
    locked.unlock().await.unwrap();
    session.close().await.unwrap();
}

/// Issue 18, found by the robustness suite's given-up campaigns: the withdrawal of a key whose
/// put was given up in flight was sent at once, and could overtake the put (here the put waits
/// behind 32 other calls of a busy client): it deleted nothing, the put landed, and the key
/// stayed for the session's life (7 of 40 locks before the fix). The withdrawal now waits for
/// the put's own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_never_overtakes_the_put_it_withdraws() {
    let cluster = support::cluster3().await;
    let observer = support::client(&cluster).await;
    let mut orphans = Vec::new();
    for i in 0..40u64 {
        // A client that has just connected, its session kept: the lock's put is given up
        // after 0-3 ms, mostly while it is in flight.
        let client = Client::connect(cluster.endpoints(), support::options_for(&cluster))
            .await
            .unwrap();
        let session = Session::new(&client, TTL).await.unwrap();
        let name = support::unique("overtaken");
        let mutex = Mutex::new(name.as_str());
        let after = Duration::from_micros(i % 4 * 1_000);
        // Other calls of the same client in flight, as in the suite's workload.
        let busy: Vec<_> = (0..32)
            .map(|n| {
                let client = client.clone();
                let key = format!("{name}-busy/{n}");
                tokio::spawn(async move { client.kv().put(key, "x", PutOptions::new()).await })
            })
            .collect();
        let given_up = tokio::time::timeout(after, mutex.lock(&session)).await;
        for call in busy {
            let _ = call.await;
        }
        if given_up.is_ok() {
            continue;
        }
        // The withdrawal has had all the time it needs; the session is alive.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let keys = observer
            .kv()
            .get(format!("{name}/"), GetOptions::new().with_prefix())
            .await
            .unwrap();
        if !keys.kvs.is_empty() {
            orphans.push(name);
        }
        session.close().await.unwrap();
    }
    assert!(orphans.is_empty(), "keys left behind: {orphans:?}");
}

/// A lock or campaign whose last answer comes after the session's local expiry (a link so slow
/// that the session's grant and the lock's txn together outlast the TTL; a stalled process does
/// the same) is not reported held: by then the lease may have run out on the server and the key
/// be gone. Both fail with `LeaseNotFound`, and leave no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_or_campaign_answered_after_the_session_expired_is_not_held() {
    let cluster = etcd_ha::testkit::Cluster::start(1).await.unwrap();
    let proxy = etcd_ha::testkit::FaultProxy::start(cluster.client_addr(0)).unwrap();
    // Calls and probes patient enough for the slow link: what ends the lock must be the
    // session's expiry, not a timeout of the call.
    let options = etcd_ha::Options::new()
        .without_member_sync()
        .with_request_timeout(Duration::from_secs(10))
        .with_probe(Duration::from_millis(500), Duration::from_secs(10));
    let client = Client::connect([proxy.url("http")], options).await.unwrap();
    let observer = support::client(&cluster).await;
    let ttl = Duration::from_secs(2);
    let lock_name = support::unique("late-lock");
    let election_name = support::unique("late-election");
    // 700 ms each way: the session's grant is answered 1.4 s after it was sent (0.6 s of its
    // 2 s left), and the txn sent then is answered 1.4 s later, after the local expiry.
    proxy.set_mode(etcd_ha::testkit::Mode::Latency(Duration::from_millis(700)));
    let session = Session::new(&client, ttl).await.unwrap();
    let locked = prompt("the lock", Mutex::new(lock_name.as_str()).lock(&session)).await;
    println!(
        "lock through a 700 ms link: {:?}",
        locked
            .as_ref()
            .map(|g| String::from_utf8_lossy(g.key()).into_owned())
    );
    assert!(
        matches!(locked, Err(Error::LeaseNotFound)),
        "a lock answered after the session's local expiry must fail: {locked:?}"
    );
    let session = Session::new(&client, ttl).await.unwrap();
    let election = Election::new(&client, election_name.as_str());
    let campaign = prompt("the campaign", election.campaign(&session, "late")).await;
    println!(
        "campaign through a 700 ms link: {:?}",
        campaign
            .as_ref()
            .map(|l| String::from_utf8_lossy(l.key()).into_owned())
    );
    assert!(
        matches!(campaign, Err(Error::LeaseNotFound)),
        "a campaign answered after the session's local expiry must fail: {campaign:?}"
    );
    drop((locked, campaign));
    proxy.set_mode(etcd_ha::testkit::Mode::Pass);
    for prefix in [&lock_name, &election_name] {
        until_queue_len(&observer, prefix, 0).await;
    }
}
