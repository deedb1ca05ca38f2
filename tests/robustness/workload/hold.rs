//! Contenders for an election, a mutex and a leadership: each acquires, makes fenced writes
//! while it believes it holds, and gives up after a while or when told it lost; one more fenced
//! write after the end checks that an ex-holder is refused.

use std::time::Duration;

use etcd_ha::concurrency::{Election, Leadership, Mutex};
use etcd_ha::{Client, PutOptions, Session, Txn, TxnOp};

use super::Ctx;
use super::kv::{revision, text};
use etcd_ha_check::history::{Abandoned, HoldKind, HoldLog, Release, Request, Response};

pub const KINDS: [HoldKind; 3] = [HoldKind::Election, HoldKind::Mutex, HoldKind::Leadership];

/// Lease TTL of every contender's session (short, so faults do cost holds now and then).
const TTL: Duration = Duration::from_secs(3);

/// What a contender holds while it holds it.
enum Held {
    Election(etcd_ha::concurrency::Leader, Session),
    Mutex(etcd_ha::concurrency::MutexGuard, Session),
    Leadership(etcd_ha::concurrency::LeadershipHeld),
}

impl Held {
    fn key(&self) -> String {
        text(match self {
            Held::Election(l, _) => l.key(),
            Held::Mutex(g, _) => g.key(),
            Held::Leadership(h) => h.key(),
        })
    }

    fn create_revision(&self) -> i64 {
        match self {
            Held::Election(l, _) => l.create_revision(),
            Held::Mutex(g, _) => g.create_revision(),
            Held::Leadership(h) => h.create_revision(),
        }
    }

    fn guard(&self, txn: Txn) -> Txn {
        match self {
            Held::Election(l, _) => l.txn(txn),
            Held::Mutex(g, _) => g.txn(txn),
            Held::Leadership(h) => h.txn(txn),
        }
    }

    async fn lost(&self) {
        match self {
            Held::Election(_, s) | Held::Mutex(_, s) => s.lost().await,
            Held::Leadership(h) => {
                h.lost().await;
            }
        }
    }

    async fn release(self) {
        let _ = match self {
            Held::Election(l, s) => {
                let _ = l.resign().await;
                s.close().await
            }
            Held::Mutex(g, s) => {
                let _ = g.unlock().await;
                s.close().await
            }
            Held::Leadership(h) => h.resign().await,
        };
    }
}

/// The name holds of `kind` compete for (contenders' keys live under it).
pub fn name(prefix: &str, kind: HoldKind) -> String {
    match kind {
        HoldKind::Election => format!("{prefix}elect/e/"),
        HoldKind::Mutex => format!("{prefix}mutex/m/"),
        HoldKind::Leadership => format!("{prefix}leader/l"),
    }
}

/// Acquire, write, release, again, until the workload stops.
pub async fn contender(ctx: Ctx, client: Client, client_id: u32, kind: HoldKind) {
    let id = client_id * 10 + kind as u32;
    let mut rng = ctx.rng(4000 + u64::from(id));
    let process = 200 + id;
    let name = name(&ctx.prefix, kind);
    let fenced_key = format!("{}fenced/{kind:?}", ctx.prefix);
    let mut seq = 0u64;
    while !ctx.stopped() {
        seq += 1;
        // Candidate values are unique too, like every value the workload writes.
        let value = format!("c{id}-{seq}");
        // Now and then an election or lock is first given up in flight (the timeout pattern
        // of `Election::campaign`'s docs), the session kept and idle for a while.
        let abandon = (kind != HoldKind::Leadership && rng.u32(..4) == 0).then(|| Abandon {
            after: Duration::from_micros(rng.u64(0..3_000)),
            idle: Duration::from_millis(rng.u64(500..1_500)),
            contender: id,
        });
        let acquired = tokio::select! {
            held = acquire(&ctx, &client, kind, &name, value, abandon) => held,
            () = ctx.until_stopped() => return,
        };
        let Ok(held) = acquired else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let acquired_at = ctx.recorder.now();
        let hold = {
            let mut holds = ctx.holds.lock().unwrap();
            holds.push(HoldLog {
                kind,
                name: name.clone(),
                contender: id,
                key: held.key(),
                create_revision: held.create_revision(),
                acquired_at,
                released_at: None,
                release: None,
            });
            holds.len() - 1
        };
        let hold_for = tokio::time::sleep(Duration::from_millis(rng.u64(300..2_500)));
        tokio::pin!(hold_for);
        // The pause between writes is inside the select too: the moment `lost()` fires is the
        // end of this holder's belief, and it must be recorded then, not after a write.
        let release = loop {
            seq += 1;
            let write = fenced_put(&ctx, &client, &held, &fenced_key, hold, process, id, seq);
            let pause = Duration::from_millis(rng.u64(20..100));
            let step = async {
                write.await;
                tokio::time::sleep(pause).await;
            };
            tokio::select! {
                () = held.lost() => break Some(Release::Lost),
                () = &mut hold_for => break Some(Release::Resigned),
                () = ctx.until_stopped() => break None,
                () = step => {}
            }
        };
        let released_at = ctx.recorder.now();
        if let Some(release) = release {
            let mut holds = ctx.holds.lock().unwrap();
            holds[hold].released_at = Some(released_at);
            holds[hold].release = Some(release);
        }
        if release == Some(Release::Lost) {
            // An ex-holder's write: the fence must refuse it.
            seq += 1;
            fenced_put(&ctx, &client, &held, &fenced_key, hold, process, id, seq).await;
        }
        if release.is_some() {
            held.release().await;
        }
    }
}

/// A campaign or lock to give up `after` this long, then leave the session idle for `idle`.
struct Abandon {
    after: Duration,
    idle: Duration,
    contender: u32,
}

impl Abandon {
    /// Whether `attempt` was given up (then recorded, after the idle time); its outcome if not.
    async fn attempt<T>(
        &self,
        ctx: &Ctx,
        session: &Session,
        name: &str,
        attempt: impl std::future::Future<Output = etcd_ha::Result<T>>,
    ) -> Option<etcd_ha::Result<T>> {
        let outcome = tokio::time::timeout(self.after, attempt).await.ok();
        if outcome.is_none() {
            let key = format!("{name}{:x}", session.lease_id());
            let at = ctx.recorder.now();
            tokio::time::sleep(self.idle).await;
            ctx.abandoned.lock().unwrap().push(Abandoned {
                contender: self.contender,
                key,
                at,
                checked_at: ctx.recorder.now(),
            });
        }
        outcome
    }
}

async fn acquire(
    ctx: &Ctx,
    client: &Client,
    kind: HoldKind,
    name: &str,
    value: String,
    abandon: Option<Abandon>,
) -> etcd_ha::Result<Held> {
    Ok(match kind {
        HoldKind::Election => {
            let session = Session::new(client, TTL).await?;
            let election = Election::new(client, name.trim_end_matches('/'));
            if let Some(abandon) = &abandon {
                let given_up = election.campaign(&session, value.clone());
                if let Some(outcome) = abandon.attempt(ctx, &session, name, given_up).await {
                    return Ok(Held::Election(outcome?, session));
                }
            }
            let leader = election.campaign(&session, value).await?;
            Held::Election(leader, session)
        }
        HoldKind::Mutex => {
            let session = Session::new(client, TTL).await?;
            let mutex = Mutex::new(name.trim_end_matches('/'));
            if let Some(abandon) = &abandon {
                let given_up = mutex.lock(&session);
                if let Some(outcome) = abandon.attempt(ctx, &session, name, given_up).await {
                    return Ok(Held::Mutex(outcome?, session));
                }
            }
            let guard = mutex.lock(&session).await?;
            Held::Mutex(guard, session)
        }
        HoldKind::Leadership => Held::Leadership(
            Leadership::new(client, name, value)
                .with_ttl(TTL)
                .without_campaign_limit()
                .acquire()
                .await?,
        ),
    })
}

#[allow(clippy::too_many_arguments)]
async fn fenced_put(
    ctx: &Ctx,
    client: &Client,
    held: &Held,
    key: &str,
    hold: usize,
    process: u32,
    id: u32,
    seq: u64,
) {
    let value = format!("h{id}-{seq}");
    let request = Request::FencedPut {
        key: key.to_owned(),
        value: value.clone(),
        hold,
    };
    let txn = held.guard(Txn::new().and_then([TxnOp::put(key, value, PutOptions::new())]));
    let call = async {
        let r = client.kv().txn(txn).await?;
        Ok(Response::Fenced {
            revision: revision(&r.header),
            succeeded: r.succeeded,
        })
    };
    ctx.recorder.op(process, id / 10, request, call).await;
}
