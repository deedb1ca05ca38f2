//! Tests of the driver with fake attempts (the request never leaves the process) and paused
//! time: what it sends where and when, and what it blames.

use std::sync::Mutex;
use std::time::Duration;

use tonic::{Response, Status};

use super::*;
use crate::call::{Call, Deadline, Target};
use crate::endpoint::{HealthState, RaftView};
use crate::options::Options;
use crate::proto::etcdserverpb::{PutRequest, PutResponse, RangeRequest, RangeResponse};

/// Three endpoints nobody listens on (the fake attempts never dial them), no probers; member
/// 1 (the first endpoint) leads and is healthy.
pub(super) fn transport(options: Options) -> Arc<Transport> {
    let urls: Vec<String> = (1..=3).map(|p| format!("http://127.0.0.1:{p}")).collect();
    let transport = Transport::unprobed(&urls, options);
    for (i, ep) in transport.balancer.endpoints().iter().enumerate() {
        let member = i as u64 + 1;
        let view = RaftView {
            member_id: member,
            leader_id: 1,
            raft_term: 1,
            cluster_id: 7,
            ..Default::default()
        };
        transport.balancer.record_status(ep, view).unwrap();
        ep.on_probe_ok(true, Duration::from_millis(1));
        ep.on_probe_ok(true, Duration::from_millis(1));
        assert_eq!(ep.state(), HealthState::Healthy);
    }
    transport
}

pub(super) fn leader(transport: &Transport) -> Arc<Endpoint> {
    transport.balancer.endpoints()[0].clone()
}

/// Records when each attempt was launched and answers from a script (by attempt number).
#[derive(Default)]
pub(super) struct Script {
    launched: Mutex<Vec<Instant>>,
}

impl Script {
    pub(super) fn launch(&self) -> usize {
        let mut l = self.launched.lock().unwrap();
        l.push(Instant::now());
        l.len() - 1
    }

    pub(super) fn times(&self) -> Vec<Instant> {
        self.launched.lock().unwrap().clone()
    }
}

pub(super) type Answer<T> = std::result::Result<Response<T>, Status>;

pub(super) async fn never<T>() -> Answer<T> {
    std::future::pending().await
}

pub(super) fn put() -> PutRequest {
    PutRequest {
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    }
}

/// Defect 2 of issue 8: a caller that gives up on a call (here after 500 ms, longer than the
/// hedge delay) must not eject the healthy leader it waited on, nor forget that it leads.
#[tokio::test(start_paused = true)]
async fn a_call_its_caller_drops_ejects_nobody() {
    let transport = transport(Options::default());
    let call = transport.unary(
        Rpc::Put,
        Call::new(Target::Any, Deadline::Default),
        put(),
        |_c, _r| never::<PutResponse>(),
    );
    let dropped = tokio::time::timeout(Duration::from_millis(500), call).await;
    assert!(dropped.is_err(), "the fake call never answers");
    let ep = leader(&transport);
    assert_eq!(ep.state(), HealthState::Healthy, "{:?}", transport.infos());
    assert_eq!(
        transport.balancer.leader_id(),
        1,
        "the leader is still known"
    );
    assert!(transport.balancer.leader_outage().is_none());
}

/// A leader that misses its whole deadline twice in a row is ejected (the client's own timers
/// speak); once is one strike only.
#[tokio::test(start_paused = true)]
async fn the_leader_is_ejected_only_by_the_clients_own_timers() {
    let transport = transport(Options::default());
    let deadline = Deadline::Within(Duration::from_secs(1));
    let first = transport
        .unary(
            Rpc::Put,
            Call::new(Target::Any, deadline),
            put(),
            |_c, _r| never::<PutResponse>(),
        )
        .await;
    assert!(matches!(first, Err(Error::Timeout)), "{first:?}");
    // Late at the attempt timeout, then still owing at the deadline: two strikes.
    let ep = leader(&transport);
    assert_eq!(ep.state(), HealthState::Ejected, "{:?}", transport.infos());
    assert_eq!(
        transport.balancer.leader_id(),
        0,
        "the lost leader is forgotten"
    );
}

/// An answer that is ready when the deadline's timer fires in the same instant wins: after a
/// stall of the process both are ready at once, and an applied put must not be reported as a
/// timeout (the driver's `select!` is biased to answers; unbiased, this fails about half of
/// the 32 tries).
#[tokio::test(start_paused = true)]
async fn an_answer_ready_at_the_deadline_wins() {
    for _ in 0..32 {
        let transport = transport(Options::default());
        let deadline = Duration::from_secs(1);
        let result = transport
            .unary(
                Rpc::Put,
                Call::new(Target::Any, Deadline::Within(deadline)),
                put(),
                |_c, _r| async move {
                    tokio::time::sleep(deadline).await;
                    Ok(Response::new(PutResponse::default()))
                },
            )
            .await;
        assert!(result.is_ok(), "{result:?}");
    }
}

/// Defect 7 of issue 8: a caller's own short deadline still gets a hedge, at a third of it.
#[tokio::test(start_paused = true)]
async fn the_hedge_follows_the_calls_own_deadline() {
    let transport = transport(Options::default());
    let script = Script::default();
    let t0 = Instant::now();
    let result = transport
        .unary(
            Rpc::Range { serializable: true },
            Call::new(Target::Any, Deadline::Within(Duration::from_millis(210))),
            RangeRequest::default(),
            |_c, _r| {
                script.launch();
                never::<RangeResponse>()
            },
        )
        .await;
    assert!(matches!(result, Err(Error::Timeout)), "{result:?}");
    let times = script.times();
    assert_eq!(times.len(), 2, "the original and one hedge");
    assert_eq!(times[1] - t0, Duration::from_millis(70));
}

/// A definite answer from the hedge wins over the original still in flight.
#[tokio::test(start_paused = true)]
async fn a_definite_error_from_the_hedge_is_the_answer() {
    let transport = transport(Options::default());
    let script = Script::default();
    let t0 = Instant::now();
    let result = transport
        .unary(
            Rpc::Range { serializable: true },
            Call::new(Target::Any, Deadline::Default),
            RangeRequest::default(),
            |_c, _r| {
                let n = script.launch();
                async move {
                    if n == 0 {
                        never::<RangeResponse>().await
                    } else {
                        Err(Status::out_of_range(
                            "etcdserver: mvcc: required revision has been compacted",
                        ))
                    }
                }
            },
        )
        .await;
    assert!(matches!(result, Err(Error::Compacted { .. })), "{result:?}");
    assert_eq!(
        Instant::now() - t0,
        DEFAULT_ATTEMPT,
        "answered when the hedge answered"
    );
}

const DEFAULT_ATTEMPT: Duration = crate::options::DEFAULT_ATTEMPT_TIMEOUT;

/// A write whose outcome is unknown is never sent again; one refused before anything was done
/// is.
#[tokio::test(start_paused = true)]
async fn a_mutation_is_sent_again_only_when_it_was_refused_up_front() {
    let transport = transport(Options::default());
    let ambiguous = Script::default();
    let result = transport
        .unary(
            Rpc::Put,
            Call::new(Target::Any, Deadline::Default),
            put(),
            |_c, _r| {
                ambiguous.launch();
                async {
                    Err::<Response<PutResponse>, _>(Status::unavailable(
                        "etcdserver: leader changed",
                    ))
                }
            },
        )
        .await;
    assert!(matches!(result, Err(Error::LeaderChanged)), "{result:?}");
    assert_eq!(ambiguous.times().len(), 1);

    // The leader dropped the proposal (leadership moving): not applied, sent again.
    let dropped = Script::default();
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
    assert_eq!(dropped.times().len(), 2);

    let refused = Script::default();
    let result = transport
        .unary(
            Rpc::Put,
            Call::new(Target::Any, Deadline::Default),
            put(),
            |_c, _r| {
                let n = refused.launch();
                async move {
                    if n == 0 {
                        Err(Status::unavailable("etcdserver: too many requests"))
                    } else {
                        Ok(Response::new(PutResponse::default()))
                    }
                }
            },
        )
        .await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(refused.times().len(), 2);
}

/// Defect 3 of issue 8: renewing the token is bounded by the call's deadline, even when the
/// member that should answer the login never does.
#[tokio::test(start_paused = true)]
async fn token_renewal_is_bounded_by_the_calls_deadline() {
    // A member that accepts connections and never says a word.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let options = Options::default().with_user("app", "secret");
    let transport = Transport::unprobed(&[url], options);
    let t0 = Instant::now();
    let result = transport
        .unary(
            Rpc::Put,
            Call::new(Target::Any, Deadline::Within(Duration::from_secs(1))),
            put(),
            |_c, _r| async {
                Err::<Response<PutResponse>, _>(Status::unauthenticated(
                    "etcdserver: invalid auth token",
                ))
            },
        )
        .await;
    assert!(matches!(result, Err(Error::Timeout)), "{result:?}");
    assert!(
        Instant::now() - t0 <= Duration::from_secs(1),
        "took {:?}",
        Instant::now() - t0
    );
}

/// Every member has answered 100 serializable reads in 200 µs: each one's hedge delay is the
/// floor.
fn paced(transport: &Transport) {
    for ep in transport.balancer.endpoints().iter() {
        for _ in 0..100 {
            ep.on_success(
                Duration::from_micros(200),
                Some(DEFAULT_ATTEMPT),
                Instant::now(),
            );
        }
    }
}

/// Issue 12: a read stuck on a member that usually answers in 200 µs is hedged at the floor,
/// not at the 300 ms attempt timeout, and that member gets no new reads while it is suspected.
#[tokio::test(start_paused = true)]
async fn a_stalled_member_is_hedged_at_its_own_pace_and_then_avoided() {
    let transport = transport(Options::default());
    paced(&transport);
    let script = Script::default();
    let t0 = Instant::now();
    let (answered, _) = transport
        .drive(
            Rpc::Range { serializable: true },
            Call::new(Target::Any, Deadline::Default),
            false,
            RangeRequest::default,
            |_c, _r| {
                let n = script.launch();
                async move {
                    if n == 0 {
                        never::<RangeResponse>().await
                    } else {
                        Ok(Response::new(RangeResponse::default()))
                    }
                }
            },
        )
        .await
        .unwrap();
    assert_eq!(Instant::now() - t0, crate::endpoint::HEDGE_FLOOR);
    let suspected: Vec<_> = transport
        .balancer
        .endpoints()
        .iter()
        .filter(|e| e.is_suspected())
        .cloned()
        .collect();
    assert_eq!(suspected.len(), 1, "{:?}", transport.infos());
    assert!(!Arc::ptr_eq(&suspected[0], &answered));
    let stats = transport.call_stats();
    assert_eq!(
        (stats.hedges, stats.early_hedges, stats.suspicions),
        (1, 1, 1)
    );
    // New reads avoid it (the others are healthy), and it is not ejected.
    for _ in 0..50 {
        let (ep, _) = transport
            .drive(
                Rpc::Range { serializable: true },
                Call::new(Target::Any, Deadline::Default),
                false,
                RangeRequest::default,
                |_c, _r| async { Ok(Response::new(RangeResponse::default())) },
            )
            .await
            .unwrap();
        assert!(!Arc::ptr_eq(&ep, &suspected[0]));
    }
    assert_eq!(suspected[0].state(), HealthState::Healthy);
    // The suspicion lapses on its own; the member takes reads again.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(!suspected[0].is_suspected());
}

/// A storm of reads stuck on one member: early hedges stop at the budget; at the cap the
/// member, whose own pace is far under it, is stalled, not slow, so every remaining call hedges
/// there whatever the budget says, and none times out.
#[tokio::test(start_paused = true)]
async fn early_hedges_stay_within_the_budget() {
    let transport = Arc::new(transport(Options::default()));
    paced(&transport);
    let mut calls = Vec::new();
    for _ in 0..100 {
        let transport = transport.clone();
        calls.push(tokio::spawn(async move {
            let script = Script::default();
            transport
                .unary(
                    Rpc::Range { serializable: true },
                    Call::new(Target::Any, Deadline::Within(Duration::from_secs(1))),
                    RangeRequest::default(),
                    |_c, _r| {
                        let n = script.launch();
                        async move {
                            if n == 0 {
                                never::<RangeResponse>().await
                            } else {
                                Ok(Response::new(RangeResponse::default()))
                            }
                        }
                    },
                )
                .await
        }));
    }
    let mut timed_out = 0;
    for call in calls {
        if let Err(e) = call.await.unwrap() {
            assert!(matches!(e, Error::Timeout), "{e:?}");
            timed_out += 1;
        }
    }
    let stats = transport.call_stats();
    assert_eq!(stats.calls, 100);
    // 100 calls allow the floor (10) plus 1 % (1) early hedges within one budget window; the
    // 89 others hedge at the cap.
    assert_eq!((stats.hedges, stats.early_hedges), (100, 11), "{stats:?}");
    assert_eq!(timed_out, 0);
    assert!(stats.hedges_refused >= 89, "{stats:?}");
}
