//! STM against a real 3-member etcd: bank transfers between accounts by concurrent tasks while
//! the leader is killed and restarted (the total is conserved, every transfer is decided once
//! and applied at most once, ambiguous commits resolved by the transfer's marker key), what each
//! isolation level checks, and the typed error of a transaction that keeps conflicting.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use etcd_ha::concurrency::stm::{Isolation, Stm};
use etcd_ha::{Client, Error, GetOptions, PutOptions};
use tokio::time::Instant;

const ACCOUNTS: usize = 10;
const TASKS: usize = 8;
const TRANSFERS: usize = 200;
const OPENING: i64 = 1000;

/// Bound on the whole transfer run (the test's own budget is ~40 s).
const RUN_BOUND: Duration = Duration::from_secs(60);

fn account(i: usize) -> String {
    format!("accounts/{i}")
}

fn number(value: Option<Vec<u8>>) -> i64 {
    let value = value.expect("every account exists");
    String::from_utf8(value).unwrap().parse().unwrap()
}

/// What a transfer's marker key says: it moved `amount` from one account to another, or it was
/// refused for lack of funds. Written in the transfer's own txn, so that a transfer is decided
/// exactly once even when its commit's outcome was unknown.
#[derive(Debug, PartialEq)]
enum Outcome {
    Applied { from: usize, to: usize, amount: i64 },
    Refused,
}

impl Outcome {
    fn encode(&self) -> String {
        match self {
            Outcome::Applied { from, to, amount } => format!("{from} {to} {amount}"),
            Outcome::Refused => "refused".into(),
        }
    }

    fn decode(value: &[u8]) -> Outcome {
        let value = std::str::from_utf8(value).unwrap();
        if value == "refused" {
            return Outcome::Refused;
        }
        let n: Vec<i64> = value.split(' ').map(|p| p.parse().unwrap()).collect();
        Outcome::Applied {
            from: n[0] as usize,
            to: n[1] as usize,
            amount: n[2],
        }
    }
}

/// One transfer as an STM transaction: its marker first (found: decided by an earlier run whose
/// commit looked ambiguous), then the two balances.
async fn transfer(
    stm: &Stm,
    id: &str,
    from: usize,
    to: usize,
    amount: i64,
) -> etcd_ha::Result<(Outcome, bool)> {
    let marker = format!("markers/{id}");
    stm.run(|tx| {
        let marker = marker.clone();
        async move {
            if let Some(done) = tx.get(marker.as_str()).await? {
                return Ok((Outcome::decode(&done), true));
            }
            let (a, b) = (
                number(tx.get(account(from)).await?),
                number(tx.get(account(to)).await?),
            );
            let outcome = if a >= amount {
                tx.put(account(from), (a - amount).to_string());
                tx.put(account(to), (b + amount).to_string());
                Outcome::Applied { from, to, amount }
            } else {
                Outcome::Refused
            };
            tx.put(marker.as_str(), outcome.encode());
            Ok((outcome, false))
        }
    })
    .await
}

/// What one task did.
#[derive(Default, Debug)]
struct Tally {
    applied: usize,
    refused: usize,
    /// Commits whose outcome was unknown (or that failed retryably), resolved by running the
    /// transfer again, which reads the marker.
    ambiguous: usize,
    /// Transfers found decided by their marker after an ambiguous commit.
    found_decided: usize,
}

async fn run_task(client: Client, task: usize, isolation: Isolation) -> Tally {
    let stm = Stm::new(&client).with_isolation(isolation);
    let mut tally = Tally::default();
    // A small LCG per task: the same transfers every run.
    let mut seed = 0x9e37_79b9_u64.wrapping_mul(task as u64 + 1);
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for i in 0..TRANSFERS {
        let from = next(ACCOUNTS as u64) as usize;
        let to = (from + 1 + next(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
        let amount = 1 + next(50) as i64;
        let id = format!("{task}-{i}");
        let mut unsure = false;
        loop {
            match transfer(&stm, &id, from, to, amount).await {
                Ok((outcome, found)) => {
                    assert!(
                        !found || unsure,
                        "transfer {id} found decided although its every commit answered: \
                         {outcome:?}"
                    );
                    tally.found_decided += found as usize;
                    match outcome {
                        Outcome::Applied { .. } => tally.applied += 1,
                        Outcome::Refused => tally.refused += 1,
                    }
                    break;
                }
                // Unknown outcome or a transient failure: run it again; the marker decides.
                Err(err)
                    if err.may_have_applied()
                        || err.is_retryable()
                        || matches!(err, Error::StmConflict { .. }) =>
                {
                    tracing::info!(%err, id, "transfer to be resolved by its marker");
                    tally.ambiguous += 1;
                    unsure = true;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => panic!("transfer {id}: {err}"),
            }
        }
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_conserve_the_total_and_apply_once_while_the_leader_dies() {
    let mut cluster = support::cluster3().await;
    let root = Client::connect(
        cluster.endpoints(),
        support::options_for(&cluster).with_request_timeout(Duration::from_secs(3)),
    )
    .await
    .unwrap();
    // The bank lives in a namespace of its own: STM through a namespaced client.
    let base = support::unique("stm-bank");
    let bank = root.with_namespace(format!("{base}/")).unwrap();
    for i in 0..ACCOUNTS {
        bank.kv()
            .put(account(i), OPENING.to_string(), PutOptions::new())
            .await
            .unwrap();
    }

    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let isolation = if task % 2 == 0 {
                Isolation::SerializableSnapshot
            } else {
                Isolation::RepeatableRead
            };
            tokio::spawn(run_task(bank.clone(), task, isolation))
        })
        .collect();
    // Kill the leader once the transfers are under way, restart it a little later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let leader = cluster.leader(support::READY).await.unwrap();
    let decided_before = root
        .kv()
        .get(
            format!("{base}/markers/"),
            GetOptions::new().with_prefix().with_count_only(),
        )
        .await
        .unwrap()
        .count;
    cluster.kill(leader);
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.restart(leader).await.unwrap();

    let mut total = Tally::default();
    for task in tasks {
        let t = tokio::time::timeout(RUN_BOUND.saturating_sub(started.elapsed()), task)
            .await
            .expect("the transfers finish")
            .unwrap();
        total.applied += t.applied;
        total.refused += t.refused;
        total.ambiguous += t.ambiguous;
        total.found_decided += t.found_decided;
    }
    let took = started.elapsed();

    // Balances: the total is conserved.
    let accounts = bank
        .kv()
        .get("accounts/", GetOptions::new().with_prefix())
        .await
        .unwrap();
    let mut balances = BTreeMap::new();
    for kv in &accounts.kvs {
        let i: usize = std::str::from_utf8(&kv.key)
            .unwrap()
            .strip_prefix("accounts/")
            .unwrap()
            .parse()
            .unwrap();
        balances.insert(i, number(Some(kv.value.clone())));
    }
    assert_eq!(balances.len(), ACCOUNTS);
    assert_eq!(
        balances.values().sum::<i64>(),
        OPENING * ACCOUNTS as i64,
        "money created or lost: {balances:?}"
    );
    assert!(
        balances.values().all(|b| *b >= 0),
        "an account went negative: {balances:?}"
    );

    // Markers: every transfer decided once, as many applied as the tasks counted, and replaying
    // the applied ones from the opening balances gives exactly the final balances (a transfer
    // applied twice, or applied without its marker, would not add up).
    let markers = bank
        .kv()
        .get("markers/", GetOptions::new().with_prefix())
        .await
        .unwrap();
    assert_eq!(
        markers.kvs.len(),
        TASKS * TRANSFERS,
        "every transfer has one marker"
    );
    assert!(
        markers.kvs.iter().all(|kv| kv.version == 1),
        "a marker was written twice"
    );
    let mut replayed: BTreeMap<usize, i64> = (0..ACCOUNTS).map(|i| (i, OPENING)).collect();
    let mut applied = 0;
    for kv in &markers.kvs {
        if let Outcome::Applied { from, to, amount } = Outcome::decode(&kv.value) {
            *replayed.get_mut(&from).unwrap() -= amount;
            *replayed.get_mut(&to).unwrap() += amount;
            applied += 1;
        }
    }
    assert_eq!(
        applied, total.applied,
        "markers vs transfers the tasks saw succeed"
    );
    assert_eq!(
        replayed, balances,
        "the balances are not the applied transfers, each once"
    );
    assert_eq!(total.applied + total.refused, TASKS * TRANSFERS);
    println!(
        "{} transfers in {took:?}: {} applied, {} refused, {} ambiguous or failed commits \
         resolved by the marker ({} found already decided); {decided_before} decided before the \
         leader was killed",
        TASKS * TRANSFERS,
        total.applied,
        total.refused,
        total.ambiguous,
        total.found_decided
    );
    assert!(
        decided_before > 0 && (decided_before as usize) < TASKS * TRANSFERS,
        "the leader died mid-run ({decided_before} decided before)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_that_keeps_conflicting_gives_up_with_a_typed_error() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let key = support::unique("stm-conflict");
    client
        .kv()
        .put(key.clone(), "0", PutOptions::new())
        .await
        .unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let stm = Stm::new(&client).with_max_attempts(3);
    let result = stm
        .run(async |tx| {
            let n = runs.fetch_add(1, Ordering::SeqCst);
            tx.get(key.as_str()).await?;
            // Another writer gets in between, every time.
            client
                .kv()
                .put(key.clone(), format!("other-{n}"), PutOptions::new())
                .await?;
            tx.put(key.as_str(), "stm");
            Ok::<_, Error>(())
        })
        .await;
    assert!(
        matches!(result, Err(Error::StmConflict { attempts: 3 })),
        "{result:?}"
    );
    assert!(!Error::StmConflict { attempts: 3 }.may_have_applied());
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let value = client
        .kv()
        .get(key.clone(), GetOptions::new())
        .await
        .unwrap()
        .kvs[0]
        .value
        .clone();
    assert_eq!(value, b"other-2", "no STM write was applied");

    // No attempt at all is bad input.
    let none = Stm::new(&client)
        .with_max_attempts(0)
        .run(|_tx| async { Ok::<_, Error>(()) })
        .await;
    assert!(
        matches!(
            none,
            Err(Error::InvalidOptions {
                option: "max_attempts",
                ..
            })
        ),
        "{none:?}"
    );

    // An error of the closure ends the run at once, nothing written.
    let runs = AtomicU32::new(0);
    let failed: Result<(), Error> = Stm::new(&client)
        .run(|tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            let key = key.clone();
            async move {
                tx.put(key.as_str(), "never");
                Err(Error::Timeout)
            }
        })
        .await;
    assert!(matches!(failed, Err(Error::Timeout)));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        client
            .kv()
            .get(key.clone(), GetOptions::new())
            .await
            .unwrap()
            .kvs[0]
            .value,
        b"other-2"
    );
}

/// Runs `body` (given the attempt number) as an STM transaction at `isolation`; returns how many
/// attempts it took and what the last attempt returned.
async fn attempts<T>(
    client: &Client,
    isolation: Isolation,
    body: impl AsyncFn(etcd_ha::concurrency::stm::StmTxn, u32) -> etcd_ha::Result<T>,
) -> (u32, T) {
    let runs = AtomicU32::new(0);
    let value = Stm::new(client)
        .with_isolation(isolation)
        .run(|tx| body(tx, runs.fetch_add(1, Ordering::SeqCst)))
        .await
        .unwrap();
    (runs.load(Ordering::SeqCst), value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_isolation_level_checks_what_it_promises() {
    let cluster = support::cluster3().await;
    let root = support::client(&cluster).await;
    let client = root
        .with_namespace(support::unique("stm-iso") + "/")
        .unwrap();
    let put = async |k: &str, v: &str| {
        client.kv().put(k, v, PutOptions::new()).await.unwrap();
    };
    put("a", "1").await;
    put("c", "old").await;

    // A key written but not read, changed by another writer after the snapshot: only the
    // serializable snapshot runs again.
    for (isolation, expected) in [
        (Isolation::SerializableSnapshot, 2),
        (Isolation::Serializable, 1),
    ] {
        let (runs, ()) = attempts(&client, isolation, async |tx, n| {
            tx.get("a").await?;
            if n == 0 {
                client.kv().put("b", "other", PutOptions::new()).await?;
            }
            tx.put("b", "stm");
            Ok(())
        })
        .await;
        assert_eq!(runs, expected, "{isolation:?}");
    }

    // A key read after another writer changed it: a snapshot read sees the value of the first
    // read's revision, a repeatable read the newest; a read-committed commit checks nothing.
    for (isolation, seen) in [
        (Isolation::SerializableSnapshot, "old"),
        (Isolation::Serializable, "old"),
        (Isolation::RepeatableRead, "new"),
    ] {
        put("c", "old").await;
        let seen_by = std::sync::Mutex::new(Vec::new());
        let (runs, ()) = attempts(&client, isolation, async |tx, n| {
            tx.get("a").await?;
            if n == 0 {
                client.kv().put("c", "new", PutOptions::new()).await?;
            }
            let c = String::from_utf8(tx.get("c").await?.unwrap()).unwrap();
            seen_by.lock().unwrap().push(c);
            Ok(())
        })
        .await;
        let seen_by = seen_by.into_inner().unwrap();
        assert_eq!(seen_by[0], seen, "{isolation:?}");
        // The snapshot levels read a stale c, so their commit conflicts and the next attempt
        // starts from the values the failed commit read back.
        if isolation == Isolation::RepeatableRead {
            assert_eq!(runs, 1, "{isolation:?}");
        } else {
            assert_eq!((runs, seen_by[1].as_str()), (2, "new"), "{isolation:?}");
        }
    }
    let (runs, ()) = attempts(&client, Isolation::ReadCommitted, async |tx, n| {
        tx.get("a").await?;
        client
            .kv()
            .put("a", format!("other-{n}"), PutOptions::new())
            .await?;
        tx.put("a", "stm");
        Ok(())
    })
    .await;
    assert_eq!(runs, 1, "read committed never conflicts");
    let a = client.kv().get("a", GetOptions::new()).await.unwrap();
    assert_eq!(a.kvs[0].value, b"stm");

    // Reads see the attempt's own writes; rev() is the mod revision read.
    let (_, (own, rev)) = attempts(&client, Isolation::SerializableSnapshot, async |tx, _| {
        let rev = tx.rev("a").await?;
        tx.put("d", "mine");
        Ok((tx.get("d").await?, rev))
    })
    .await;
    assert_eq!((own, rev), (Some(b"mine".to_vec()), a.kvs[0].mod_revision));
    // All of it inside the namespace.
    let raw = root
        .kv()
        .get(
            format!("{}d", String::from_utf8_lossy(client.namespace().unwrap())),
            GetOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(raw.count, 1);
}
