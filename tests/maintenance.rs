//! The Maintenance service against a real 3-member etcd: status, alarms, defragment, hashes,
//! leader moves, snapshot and downgrade, each pinned to a member with `on()`.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test maintenance`.

mod support;

use std::time::Duration;

use etcd_ha::proto::etcdserverpb::AlarmType;
use etcd_ha::proto::etcdserverpb::downgrade_request::DowngradeAction;
use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, Error, GetOptions, Maintenance, PutOptions};

/// How long members may take to apply a revision they have not applied yet; generous for a
/// loaded 2-core box.
const CATCH_UP: Duration = Duration::from_secs(10);

/// Maintenance pinned to member `i` of `cluster`.
fn on(client: &Client, cluster: &Cluster, i: usize) -> Maintenance {
    client
        .maintenance()
        .on(&cluster.endpoint(i))
        .expect("a member endpoint is one of the client's")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_reports_its_status_hashes_and_defragments() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let leader = cluster.leader(support::READY).await.unwrap();
    let leader_id = cluster.member_id(leader).await.unwrap();

    let key = support::unique("maintenance/status");
    let revision = client
        .kv()
        .put(key.as_str(), "v", PutOptions::new())
        .await
        .unwrap()
        .header
        .unwrap()
        .revision;

    let mut hashes = Vec::new();
    for i in 0..3 {
        let m = on(&client, &cluster, i);
        let id = cluster.member_id(i).await.unwrap();

        let status = m.status().await.unwrap();
        assert_eq!(status.header.as_ref().unwrap().member_id, id);
        assert_eq!(status.leader, leader_id, "member {i} names the same leader");
        assert!(
            status.version.starts_with(cluster.etcd_version()),
            "{} vs {}",
            status.version,
            cluster.etcd_version()
        );
        assert!(status.raft_term > 0);
        assert!(status.raft_index > 0);
        assert!(status.db_size > 0);
        assert!(!status.is_learner);
        // The quota and the storage version (fields 11 and 12) are filled from etcd 3.6 on;
        // 3.4 and every 3.5 leave them empty.
        if cluster.etcd_version().starts_with("3.4.") || cluster.etcd_version().starts_with("3.5.")
        {
            assert_eq!(status.db_size_quota, 0);
            assert_eq!(status.storage_version, "");
        } else {
            assert_eq!(
                status.db_size_quota,
                2 * 1024 * 1024 * 1024,
                "the default quota"
            );
            // 3.5 and 3.6 report their storage schema ("3.5.0", "3.6.0"); 3.7.3 answered with
            // none on a fresh cluster in CI: an empty or well-formed version, nothing else.
            assert!(
                status.storage_version.is_empty() || status.storage_version.starts_with("3."),
                "storage version {:?}",
                status.storage_version
            );
        }

        // A whole-backend hash: not comparable across members (each stores its own consistent
        // index), but non-zero and from the member asked.
        let hash = m.hash().await.unwrap();
        assert_eq!(hash.header.unwrap().member_id, id);
        assert_ne!(hash.hash, 0);

        // The key-value hash at one revision is what members must agree on. A member that has
        // not applied `revision` yet answers "future revision": ask again.
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        let kv_hash = loop {
            match m.hash_kv(revision).await {
                Err(Error::FutureRevision) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => break other.unwrap(),
            }
        };
        assert_eq!(kv_hash.header.unwrap().member_id, id);
        // -1: the store was never compacted.
        assert_eq!(kv_hash.compact_revision, -1);
        hashes.push(kv_hash.hash);

        // etcd answers a defragment with an empty message (not even a header), so what shows
        // it worked is that the member serves again right after, with its data intact.
        m.defragment().await.unwrap();
        let status = m.status().await.unwrap();
        assert_eq!(status.header.unwrap().member_id, id);
        assert!(status.db_size > 0);
    }
    assert_ne!(hashes[0], 0);
    assert!(
        hashes.iter().all(|h| *h == hashes[0]),
        "members disagree on the kv hash at revision {revision}: {hashes:?}"
    );
    let got = client
        .kv()
        .get(key.as_str(), GetOptions::new())
        .await
        .unwrap();
    assert_eq!(got.kvs[0].value, b"v");

    // on() takes only the client's own endpoints (any accepted spelling), and checks that
    // without dialling anything.
    let host_port = cluster.endpoint(1).trim_start_matches("http://").to_owned();
    let m = client.maintenance().on(&host_port).unwrap();
    let status = m.status().await.unwrap();
    assert_eq!(
        status.header.unwrap().member_id,
        cluster.member_id(1).await.unwrap()
    );
    match client.maintenance().on("http://127.0.0.1:1") {
        Err(Error::InvalidEndpoint { endpoint, .. }) => assert_eq!(endpoint, "http://127.0.0.1:1"),
        other => panic!("expected InvalidEndpoint, got {other:?}"),
    }
    assert!(matches!(
        client.maintenance().on("not a url"),
        Err(Error::InvalidEndpoint { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nospace_alarm_refuses_writes_until_deactivated() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let maintenance = client.maintenance();
    let kv = client.kv();
    let key = support::unique("maintenance/alarm");
    kv.put(key.as_str(), "before", PutOptions::new())
        .await
        .unwrap();

    assert!(maintenance.alarm_list().await.unwrap().alarms.is_empty());

    let member = cluster.member_id(1).await.unwrap();
    let raised = on(&client, &cluster, 1)
        .alarm_activate(member, AlarmType::Nospace)
        .await
        .unwrap();
    assert_eq!(raised.alarms.len(), 1);
    assert_eq!(raised.alarms[0].member_id, member);
    assert_eq!(raised.alarms[0].alarm(), AlarmType::Nospace);

    // The alarm is cluster state: every member lists it.
    for i in 0..3 {
        let listed = on(&client, &cluster, i).alarm_list().await.unwrap();
        assert_eq!(listed.alarms.len(), 1, "member {i} lists the alarm");
        assert_eq!(listed.alarms[0].member_id, member);
        assert_eq!(listed.alarms[0].alarm(), AlarmType::Nospace);
    }

    // Writes are refused with etcd's "database space exceeded"; reads still work.
    match kv.put(key.as_str(), "during", PutOptions::new()).await {
        Err(Error::NoSpace) => {}
        other => panic!("expected the NOSPACE error, got {other:?}"),
    }
    let got = kv.get(key.as_str(), GetOptions::new()).await.unwrap();
    assert_eq!(got.kvs[0].value, b"before");

    let cleared = maintenance
        .alarm_deactivate(member, AlarmType::Nospace)
        .await
        .unwrap();
    assert_eq!(
        cleared.alarms.len(),
        1,
        "the answer names the alarm it cleared"
    );
    assert!(maintenance.alarm_list().await.unwrap().alarms.is_empty());
    kv.put(key.as_str(), "after", PutOptions::new())
        .await
        .unwrap();
    let got = kv.get(key.as_str(), GetOptions::new()).await.unwrap();
    assert_eq!(got.kvs[0].value, b"after");
}

/// etcd checks the quota twice: before it proposes a write (refused, not applied) and again
/// as it applies it, where a write that passed the first check but meets a fuller backend is
/// applied *and then* answered "database space exceeded". Writers filling a small quota at once
/// meet the second check, so `Error::NoSpace` cannot say "not applied": every write the client
/// reports as certainly not applied must be absent from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_for_space_may_have_been_applied() {
    const QUOTA: u64 = 4 << 20;
    let cluster = Cluster::builder()
        .members(1)
        .arg(format!("--quota-backend-bytes={QUOTA}"))
        .start()
        .await
        .expect("start a member with a small quota");
    let client = support::client(&cluster).await;
    let prefix = support::unique("nospace");
    let value = vec![b'x'; 16 << 10];
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let (kv, prefix, value) = (client.kv(), prefix.clone(), value.clone());
            tokio::spawn(async move {
                let mut refused = Vec::new();
                for n in 0.. {
                    let key = format!("{prefix}/{w}/{n}");
                    match kv.put(key.as_str(), value.clone(), PutOptions::new()).await {
                        Ok(_) => {}
                        Err(e @ Error::NoSpace) => {
                            refused.push((key, e));
                            if refused.len() >= 3 {
                                return refused;
                            }
                        }
                        Err(e) => panic!("a put failed otherwise: {e}"),
                    }
                }
                unreachable!("the loop returns")
            })
        })
        .collect();
    let mut refused = Vec::new();
    for writer in writers {
        refused.extend(writer.await.unwrap());
    }
    let mut applied = 0;
    for (key, error) in &refused {
        let found = client
            .kv()
            .get(key.as_str(), GetOptions::new())
            .await
            .unwrap();
        if !found.kvs.is_empty() {
            applied += 1;
            assert!(
                error.may_have_applied(),
                "{key} was applied, yet the client said {error:?} meant it was not"
            );
        }
    }
    println!(
        "{} writes refused for space, {applied} of them applied",
        refused.len()
    );
    // What the test is for: some were (15 of 48 on every server from 3.4.23 to 3.7.3).
    assert!(
        applied > 0,
        "no write refused for space was applied: nothing shown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_moves_only_when_asked_of_the_leader() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let leader = cluster.leader(support::READY).await.unwrap();
    let target = (leader + 1) % 3;
    let bystander = (leader + 2) % 3;
    let target_id = cluster.member_id(target).await.unwrap();

    // A follower refuses: only the leader can hand its leadership over.
    assert!(matches!(
        on(&client, &cluster, bystander)
            .move_leader(target_id)
            .await,
        Err(Error::NotLeader)
    ));
    // The leader refuses a transferee that is not a member.
    match on(&client, &cluster, leader).move_leader(0xdead_beef).await {
        Err(Error::Grpc(status)) => {
            assert_eq!(status.code(), tonic::Code::FailedPrecondition);
            assert_eq!(status.message(), "etcdserver: bad leader transferee");
        }
        other => panic!("expected bad leader transferee, got {other:?}"),
    }

    on(&client, &cluster, leader)
        .move_leader(target_id)
        .await
        .unwrap();
    // The call returns once the target leads; every member agrees shortly after.
    let deadline = tokio::time::Instant::now() + support::READY;
    loop {
        let now = cluster.leader(support::READY).await.unwrap();
        if now == target {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "leader is {now}, expected {target}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = on(&client, &cluster, bystander).status().await.unwrap();
    assert_eq!(status.leader, target_id);

    // The old leader is a follower now, so it refuses in turn.
    assert!(matches!(
        on(&client, &cluster, leader).move_leader(target_id).await,
        Err(Error::NotLeader)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_streams_the_whole_backend_and_downgrade_is_validated() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let m = on(&client, &cluster, 0);
    let kv = client.kv();
    for i in 0..20 {
        let key = support::unique("maintenance/snapshot");
        kv.put(key, format!("value {i}"), PutOptions::new())
            .await
            .unwrap();
    }

    let before = m.status().await.unwrap().db_size;
    let mut chunks = m.snapshot().await.unwrap();
    assert_eq!(chunks.endpoint(), cluster.endpoint(0));
    let mut db = Vec::new();
    let mut last_remaining = None;
    let mut count = 0;
    while let Some(chunk) = chunks.message().await.unwrap() {
        db.extend_from_slice(&chunk.blob);
        last_remaining = Some(chunk.remaining_bytes);
        count += 1;
    }
    let after = m.status().await.unwrap().db_size;
    assert!(count >= 2, "data and then the checksum");
    assert_eq!(last_remaining, Some(0));
    // etcd sends the bolt file, then its sha256 (32 bytes) as a last chunk of its own.
    let data_len = db.len() as i64 - 32;
    assert!(
        data_len == before || data_len == after,
        "snapshot of {data_len} bytes, db_size {before} / {after}"
    );
    // A bolt db starts with a meta page: 16 bytes of page header, then the magic 0xED0CDAED.
    assert_eq!(db[16..20], 0xED0C_DAEDu32.to_le_bytes());

    if support::is_v35_or_newer(&cluster) {
        // A cluster may go down one minor version; it answers with its cluster version.
        let v: etcd_ha::ServerVersion = cluster.etcd_version().parse().unwrap();
        let target = format!("{}.{}", v.major, v.minor - 1);
        let validated = m
            .downgrade(DowngradeAction::Validate, target.as_str())
            .await
            .unwrap();
        // 3.5 says `3.5.0`, 3.6 `3.6`.
        let cluster_version = format!("{}.{}", v.major, v.minor);
        assert!(
            validated.version == cluster_version
                || validated.version == format!("{cluster_version}.0"),
            "validated {}",
            validated.version
        );
        match m.downgrade(DowngradeAction::Validate, "three").await {
            Err(Error::InvalidRequest(status)) => assert_eq!(
                status.message(),
                "etcdserver: wrong downgrade target version format"
            ),
            other => panic!("expected a wrong version format, got {other:?}"),
        }
        match m.downgrade(DowngradeAction::Validate, "3.3.0").await {
            Err(Error::InvalidRequest(status)) => assert_eq!(
                status.message(),
                "etcdserver: invalid downgrade target version"
            ),
            other => panic!("expected an invalid target version, got {other:?}"),
        }
        // Canceling when no downgrade runs: 3.5 refuses it, 3.6 accepts it (nothing to undo)
        // and answers with the cluster version.
        match m.downgrade(DowngradeAction::Cancel, "").await {
            Err(Error::Grpc(status)) if v < etcd_ha::ServerVersion::new(3, 6, 0) => {
                assert_eq!(status.code(), tonic::Code::FailedPrecondition);
                assert_eq!(status.message(), "etcdserver: no inflight downgrade job");
            }
            Ok(answer) if v >= etcd_ha::ServerVersion::new(3, 6, 0) => {
                assert_eq!(answer.version, cluster_version);
            }
            other => panic!("etcd {v}: unexpected answer to a cancel: {other:?}"),
        }
    } else {
        // 3.4 has no Downgrade RPC at all.
        match m.downgrade(DowngradeAction::Validate, "3.4").await {
            Err(Error::Grpc(status)) => assert_eq!(status.code(), tonic::Code::Unimplemented),
            other => panic!("expected Unimplemented on 3.4, got {other:?}"),
        }
    }
}
