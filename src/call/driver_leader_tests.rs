//! Tests of the driver around the leader (fake attempts, paused time): refusals, dropped
//! proposals, stalls and outages waited out or routed around, another cluster's answers, and
//! the revision floor. The fakes are `driver_tests.rs`'s.

use std::time::Duration;

use tonic::{Response, Status};

use super::tests::{Script, leader, never, put, transport};
use super::*;
use crate::call::{Call, Deadline, Target};
use crate::endpoint::{HealthState, RaftView};
use crate::options::Options;
use crate::proto::etcdserverpb::PutResponse;

/// A leader refusing a membership change as "unhealthy cluster" (a peer not connected for 5 s
/// yet) still leads: the client keeps it, where any other Unavailable answer of the leader makes
/// the client forget it and look again.
#[tokio::test(start_paused = true)]
async fn an_unhealthy_cluster_refusal_keeps_the_leader() {
    let transport = transport(Options::default());
    let ep = leader(&transport);
    let refusal = Error::Unavailable(tonic::Status::unavailable("etcdserver: unhealthy cluster"));
    transport.balancer.learn(&ep, &refusal);
    assert_eq!(transport.balancer.leader_id(), 1, "{:?}", transport.infos());
    assert!(transport.balancer.leader_outage().is_none());

    let stopping = Error::Unavailable(tonic::Status::unavailable("etcdserver: server stopped"));
    transport.balancer.learn(&ep, &stopping);
    assert_eq!(
        transport.balancer.leader_id(),
        0,
        "a stopping leader is forgotten"
    );
}

/// A transport error whose cause is `kind`, as tonic reports a failed connection.
fn transport_error(kind: std::io::ErrorKind) -> Error {
    Error::Transport {
        endpoint: "http://127.0.0.1:1".into(),
        source: Status::from_error(Box::new(std::io::Error::from(kind))),
    }
}

/// A leader that refuses connections (its etcd is stopping after SIGTERM, or gone) keeps the
/// outage on although a follower still serves linearizable reads through it: a write sent
/// through that follower would be forwarded to the old leader, dropped during its handover and
/// time out. Only a new leader ends that outage. A leader that merely stopped answering on our
/// link (the connection reset, but connecting again works) is still reached through followers.
#[tokio::test(start_paused = true)]
async fn a_leader_refusing_connections_is_waited_out_not_routed_around() {
    let transport = transport(Options::default());
    let balancer = &transport.balancer;
    let (lead, follower) = (leader(&transport), balancer.endpoints()[1].clone());

    balancer.learn(&lead, &transport_error(std::io::ErrorKind::ConnectionReset));
    let since = balancer
        .leader_outage()
        .expect("the broken leader starts an outage");
    tokio::time::advance(Duration::from_millis(2)).await;
    follower.set_linearizable_ok(Instant::now(), Duration::from_millis(1));
    assert!(
        balancer.leader_outage().is_none(),
        "a follower reaching the leader ends an outage of a broken link"
    );
    assert!(Instant::now() > since);

    // The leader comes back, then its process stops: connections are refused.
    balancer
        .record_status(
            &lead,
            RaftView {
                member_id: 1,
                leader_id: 1,
                raft_term: 1,
                cluster_id: 7,
                ..Default::default()
            },
        )
        .unwrap();
    tokio::time::advance(Duration::from_millis(2)).await;
    balancer.learn(
        &lead,
        &transport_error(std::io::ErrorKind::ConnectionRefused),
    );
    assert_eq!(balancer.leader_id(), 0, "{:?}", transport.infos());
    tokio::time::advance(Duration::from_millis(2)).await;
    follower.set_linearizable_ok(Instant::now(), Duration::from_millis(1));
    assert!(
        balancer.leader_outage().is_some(),
        "a refusing leader is handing over or gone: followers may not forward to it"
    );
    // Member 2 wins the next term: the outage is over.
    let view = RaftView {
        member_id: 2,
        leader_id: 2,
        raft_term: 2,
        cluster_id: 7,
        ..Default::default()
    };
    balancer.record_status(&follower, view).unwrap();
    assert!(balancer.leader_outage().is_none());
    assert_eq!(balancer.leader_id(), 2);
}

/// A leader whose stop is held open (another client's watch keeps etcd's graceful stop
/// waiting, up to its request timeout) refuses our connections but still leads, and its
/// followers forward writes to it. Within a quick hand-over it is waited out as above; once a
/// follower's read that began [`STOP_HANDOVER`] after the first refusal proves it still leads,
/// leader-bound calls go through the followers, and its further refusals start no new wait.
/// An answer from it ends the refusals, so a later stop counts from its own first refusal.
#[tokio::test(start_paused = true)]
async fn a_refusing_leader_that_outlives_a_quick_handover_is_reached_through_followers() {
    use crate::balance::STOP_HANDOVER;
    use std::io::ErrorKind::ConnectionRefused;

    let transport = transport(Options::default());
    let balancer = &transport.balancer;
    let (lead, follower) = (leader(&transport), balancer.endpoints()[1].clone());
    let names_the_leader = RaftView {
        member_id: 2,
        leader_id: 1,
        raft_term: 1,
        cluster_id: 7,
        ..Default::default()
    };

    balancer.learn(&lead, &transport_error(ConnectionRefused));
    tokio::time::advance(Duration::from_millis(100)).await;
    follower.set_linearizable_ok(Instant::now(), Duration::from_millis(1));
    balancer.record_status(&follower, names_the_leader).unwrap();
    assert!(
        balancer.leader_outage().is_some(),
        "within a quick hand-over a refusing leader is waited out"
    );

    // Refusals go on, and past a quick hand-over a follower's read still goes through it.
    tokio::time::advance(STOP_HANDOVER).await;
    balancer.learn(&lead, &transport_error(ConnectionRefused));
    assert!(balancer.leader_outage().is_some(), "no proof yet");
    follower.set_linearizable_ok(Instant::now(), Duration::from_millis(1));
    assert!(
        balancer.leader_outage().is_none(),
        "a stopping leader that still leads is reached through followers"
    );
    balancer.record_status(&follower, names_the_leader).unwrap();
    tokio::time::advance(Duration::from_millis(20)).await;
    balancer.learn(&lead, &transport_error(ConnectionRefused));
    assert!(
        balancer.leader_outage().is_none(),
        "its next refusal starts no new wait"
    );

    // It answers again (restarted): its refusals are over, and a later stop starts anew, to
    // be waited out for a quick hand-over again.
    lead.on_success(Duration::from_millis(1), None, Instant::now());
    assert!(lead.refusals().is_none());
    tokio::time::advance(Duration::from_millis(20)).await;
    let again = Instant::now();
    lead.set_refused(again);
    assert_eq!(lead.refusals().map(|r| r.first), Some(again));
}

/// A leader that dropped a proposal is handing leadership over (a MoveLeader by someone else,
/// or etcd's own transfer when it stops): it stays healthy and followers still serve
/// linearizable reads through it, but it drops what they forward. The outage holds until a new
/// leader is seen, not until the first follower's read (3 write timeouts on etcd 3.4.23 in
/// `tests/move_leader.rs` came from writes forwarded in that window).
#[tokio::test(start_paused = true)]
async fn a_leader_dropping_proposals_is_waited_out_until_the_next_leader() {
    let transport = transport(Options::default());
    let balancer = &transport.balancer;
    let (lead, follower) = (leader(&transport), balancer.endpoints()[1].clone());
    balancer.learn(&lead, &Error::ProposalDropped);
    assert_eq!(balancer.leader_id(), 0);
    tokio::time::advance(Duration::from_millis(2)).await;
    follower.set_linearizable_ok(Instant::now(), Duration::from_millis(1));
    lead.on_probe_ok(true, Duration::from_millis(1));
    assert_eq!(lead.state(), HealthState::Healthy);
    assert!(
        balancer.leader_outage().is_some(),
        "a leader handing over drops forwarded writes: wait for the next one"
    );
    let view = RaftView {
        member_id: 2,
        leader_id: 2,
        raft_term: 2,
        cluster_id: 7,
        ..Default::default()
    };
    balancer.record_status(&follower, view).unwrap();
    assert!(balancer.leader_outage().is_none());
    assert_eq!(balancer.leader_id(), 2);
}

/// A write the leader dropped while handing over is sent again the moment the next leader is
/// known, not a backoff later: waiting for that leader is the backoff (it ended up to 25 ms
/// after the leader was known, in every drain).
#[tokio::test(start_paused = true)]
async fn a_dropped_write_goes_again_as_soon_as_the_next_leader_is_known() {
    let transport = transport(Options::default());
    let next = transport.balancer.endpoints()[1].clone();
    let elected = {
        let transport = transport.clone();
        let next = next.clone();
        async move {
            // The transfer takes 12 ms; then a probe hears of the new leader in a newer term.
            tokio::time::sleep(Duration::from_millis(12)).await;
            let view = RaftView {
                member_id: 2,
                leader_id: 2,
                raft_term: 2,
                cluster_id: 7,
                ..Default::default()
            };
            transport.balancer.record_status(&next, view).unwrap();
            Instant::now()
        }
    };
    let elected = tokio::spawn(elected);
    let dropped = Script::default();
    let started = Instant::now();
    let result = transport
        .unary(
            Rpc::Put,
            Call::new(Target::Any, Deadline::Default),
            put(),
            |_c, _r| {
                let n = dropped.launch();
                async move {
                    if n == 0 {
                        Err(Status::unknown("raft proposal dropped"))
                    } else {
                        Ok(Response::new(PutResponse::default()))
                    }
                }
            },
        )
        .await;
    assert!(result.is_ok(), "{result:?}");
    let elected = elected.await.unwrap();
    let times = dropped.times();
    assert_eq!(times.len(), 2);
    assert_eq!(times[0], started);
    assert_eq!(
        times[1],
        elected,
        "sent again when the next leader was known ({:?} after the drop)",
        times[1] - times[0]
    );
    assert_eq!(transport.balancer.leader_id(), 2);
}

/// Issue 17: an application that times out its own calls drops the put it sent to a frozen
/// leader; the next put must not go there too (it hung for its whole deadline, two deadlines
/// in all), but wait for the next leader and go to it the moment it is known.
#[tokio::test(start_paused = true)]
async fn after_a_dropped_call_on_a_stalled_leader_the_next_waits_for_the_next_leader() {
    let transport = transport(Options::default());
    let first = transport.unary(
        Rpc::Put,
        Call::new(Target::Any, Deadline::Default),
        put(),
        |_c, _r| never::<PutResponse>(),
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(1), first)
            .await
            .is_err()
    );
    assert_eq!(transport.balancer.leader_id(), 1, "nobody was blamed");
    let next = transport.balancer.endpoints()[1].clone();
    let elected = {
        let (transport, next) = (transport.clone(), next.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let view = RaftView {
                member_id: 2,
                leader_id: 2,
                raft_term: 2,
                cluster_id: 7,
                ..Default::default()
            };
            transport.balancer.record_status(&next, view).unwrap();
            Instant::now()
        })
    };
    let (to, sent) = put_answered(&transport).await;
    let elected = elected.await.unwrap();
    assert_eq!(sent, vec![elected], "sent once the next leader was known");
    assert!(Arc::ptr_eq(&to, &next), "to the next leader, not {to:?}");
    assert_eq!(
        leader(&transport).state(),
        HealthState::Healthy,
        "nobody ejected"
    );
}

/// The same wait ends as soon as the stalled leader serves again (a short freeze, a slow
/// moment): the call then goes to it.
#[tokio::test(start_paused = true)]
async fn a_call_waiting_on_a_stalled_leader_goes_to_it_when_it_serves_again() {
    let transport = transport(Options::default());
    let lead = leader(&transport);
    lead.owe(Instant::now());
    tokio::time::advance(Duration::from_millis(150)).await;
    assert!(transport.balancer.leader_unready().is_some(), "stalled");
    let answered = {
        let lead = lead.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            lead.served();
            Instant::now()
        })
    };
    let (to, sent) = put_answered(&transport).await;
    let answered = answered.await.unwrap();
    let at = sent[0];
    assert!(
        at >= answered && at - answered <= super::super::LEADER_NUDGE,
        "sent {:?} after the leader served",
        at - answered
    );
    assert!(Arc::ptr_eq(&to, &lead));
}

/// The leader stalls for us (owes past its limit); then a follower serves a linearizable
/// read, so leader-bound calls may go now. The leader and that follower.
async fn stalled_leader_served_elsewhere(transport: &Transport) -> (Arc<Endpoint>, Arc<Endpoint>) {
    let lead = leader(transport);
    lead.owe(Instant::now());
    tokio::time::advance(Duration::from_millis(150)).await;
    let follower = transport.balancer.endpoints()[1].clone();
    follower.set_linearizable_ok(Instant::now(), Duration::from_millis(1));
    assert!(
        transport.balancer.leader_unready().is_none(),
        "served since"
    );
    (lead, follower)
}

/// A leader that stalled for us while a follower has served a linearizable read since (our
/// link to it broke; it leads on for the others) takes no leader-bound call: a follower
/// forwards it, at once.
#[tokio::test(start_paused = true)]
async fn a_stalled_leader_served_by_its_peers_is_reached_through_a_follower() {
    let transport = transport(Options::default());
    let (lead, _follower) = stalled_leader_served_elsewhere(&transport).await;
    let started = Instant::now();
    let (to, sent) = put_answered(&transport).await;
    assert_eq!(sent, vec![started], "no wait");
    assert!(!Arc::ptr_eq(&to, &lead), "not to the stalled leader");
}

/// That proof lapses once a later read needing the leader stalls on the follower too (the
/// leader was cut off from its peers a moment after the client): calls wait for the next
/// leader instead of being forwarded to the lost one.
#[tokio::test(start_paused = true)]
async fn a_followers_proof_lapses_when_its_next_read_stalls_too() {
    let transport = transport(Options::default());
    let (_lead, follower) = stalled_leader_served_elsewhere(&transport).await;
    // Its next probe's read owes an answer from now on.
    follower.owe(Instant::now());
    tokio::time::advance(Duration::from_millis(600)).await;
    assert!(
        transport.balancer.leader_unready().is_some(),
        "the follower's read stalled too: wait for the next leader"
    );
    follower.served();
    assert!(
        transport.balancer.leader_unready().is_none(),
        "served again"
    );
}

/// Issue 18: the cluster id is checked on every answer, not only on Status: a member of
/// another cluster answering a call is refused with its answer (which is not returned, nor its
/// revision taken as the client's).
#[tokio::test(start_paused = true)]
async fn an_answer_from_another_cluster_is_refused_with_its_member() {
    let transport = transport(Options::default());
    let foreign = PutResponse {
        header: Some(crate::proto::etcdserverpb::ResponseHeader {
            cluster_id: 8,
            revision: 1_000_000,
            ..Default::default()
        }),
        ..Default::default()
    };
    let result = transport
        .unary(
            Rpc::Put,
            Call::new(Target::Any, Deadline::Default),
            put(),
            |_c, _r| {
                let foreign = foreign.clone();
                async move { Ok(Response::new(foreign)) }
            },
        )
        .await;
    assert!(
        matches!(
            result,
            Err(Error::ClusterIdMismatch {
                expected: 7,
                found: 8,
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(
        transport.balancer.endpoints().len(),
        2,
        "the member that answered is dropped"
    );
    assert_eq!(transport.revisions.seen(), 0);
}

/// Issue 18: every unary answer's revision is one the client has seen (the monotonic floor),
/// not only KV answers: a lease grant's, say; and a watch's delivered revision too.
#[tokio::test(start_paused = true)]
async fn every_answers_revision_and_every_delivered_one_raise_the_floor() {
    use crate::proto::etcdserverpb::{LeaseGrantRequest, LeaseGrantResponse, ResponseHeader};
    let transport = transport(Options::default());
    let granted = transport
        .unary(
            Rpc::LeaseGrant,
            Call::new(Target::Any, Deadline::Default),
            LeaseGrantRequest::default(),
            |_c, _r| async {
                Ok(Response::new(LeaseGrantResponse {
                    header: Some(ResponseHeader {
                        cluster_id: 7,
                        revision: 42,
                        ..Default::default()
                    }),
                    ..Default::default()
                }))
            },
        )
        .await;
    assert!(granted.is_ok(), "{granted:?}");
    assert_eq!(transport.revisions.seen(), 42);
    transport.revisions.delivered(50);
    assert_eq!(transport.revisions.seen(), 50);
    transport.revisions.delivered(45);
    assert_eq!(transport.revisions.seen(), 50, "never lower");
}

/// A put through `transport` whose attempts are answered at once: the member it went to, and
/// when each attempt was launched.
async fn put_answered(transport: &Transport) -> (Arc<Endpoint>, Vec<Instant>) {
    let sent = Script::default();
    let (to, _) = transport
        .drive(
            Rpc::Put,
            Call::new(Target::Any, Deadline::Default),
            false,
            put,
            |_c, _r| {
                sent.launch();
                async { Ok(Response::new(PutResponse::default())) }
            },
        )
        .await
        .unwrap();
    (to, sent.times())
}
