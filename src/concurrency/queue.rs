//! The waiting shared by the recipes: follow one key through the managed watch until it is gone
//! or changed, wait for a turn in a create-revision queue (predecessor only), and release keys
//! and leases, also from `Drop`.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::cleanup::Cleanups;
use super::keys::{range_kvs, revision, show};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::kv::{DeleteOptions, GetOptions, SortOrder, SortTarget};
use crate::proto::mvccpb::KeyValue;
use crate::proto::mvccpb::event::EventType;
use crate::txn::{Compare, CompareOp, Txn, TxnOp};
use crate::{WatchBatch, WatchOptions};

/// Pause before a failed watch or read is tried again.
///
/// 100 ms: the client already retries and fails over inside each call, so an error here means
/// a whole call ran out; a short pause keeps a waiter from spinning without adding much to a
/// hand-over.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Attempts of a conditional delete that failed with a retryable error (it is idempotent: it
/// deletes only the key with our create revision).
const DELETE_ATTEMPTS: usize = 3;

/// The error of a waiter whose own key is gone: its session's lease expired or was revoked
/// (or somebody deleted the key), so it can never get its turn.
pub(crate) fn key_gone_error() -> Error {
    Error::LeaseNotFound
}

/// Errors after which following a key goes on from a fresh read (the watch ended or failed in a
/// way the next attempt may not see).
fn recoverable(err: &Error) -> bool {
    err.is_retryable() || matches!(err, Error::Compacted { .. } | Error::WatchCanceled { .. })
}

/// Watch `key` from `from_revision` and hand each new state of it to `decide` (`None`: deleted)
/// until `decide` returns `Some`.
///
/// The watch is the managed one: it fails over between members and resumes without gaps; with
/// reload-on-compaction it hands us the key's current state when the history we need was
/// compacted away (a delete before the compaction revision would otherwise never be seen).
async fn watch_key<R>(
    client: &Client,
    key: &[u8],
    from_revision: i64,
    mut decide: impl FnMut(Option<&KeyValue>) -> Option<R>,
) -> Result<R> {
    let options = WatchOptions::new()
        .with_start_revision(from_revision)
        .with_reload_on_compaction();
    let mut stream = client.watch().watch(key.to_vec(), options).await?;
    while let Some(batch) = stream.next_batch().await {
        match batch? {
            WatchBatch::Events { events, .. } => {
                for event in &events {
                    let kv = event
                        .kv
                        .as_ref()
                        .filter(|_| event.r#type() == EventType::Put);
                    if let Some(r) = decide(kv) {
                        return Ok(r);
                    }
                }
            }
            WatchBatch::Reloaded { kvs, .. } => {
                if let Some(r) = decide(kvs.iter().find(|kv| kv.key == key)) {
                    return Ok(r);
                }
            }
            WatchBatch::Compacted { compact_revision } => {
                return Err(Error::Compacted {
                    compact_revision: Some(compact_revision),
                });
            }
            // Progress, and whatever later versions add.
            _ => {}
        }
    }
    Err(Error::StreamClosed)
}

/// Follow `key` from `from_revision` until `decide` returns `Some` for one of its states.
///
/// When the watch fails (or the history was compacted and not reloaded), the key is read
/// again: `decide` sees its current state, and the watch goes on from the read's revision. Only
/// errors that no retry can fix (permission denied, ...) are returned.
pub(crate) async fn follow_key<R>(
    client: &Client,
    key: &[u8],
    from_revision: i64,
    mut decide: impl FnMut(Option<&KeyValue>) -> Option<R>,
) -> Result<R> {
    let mut from = from_revision;
    loop {
        match watch_key(client, key, from, &mut decide).await {
            Ok(r) => return Ok(r),
            Err(e) if !recoverable(&e) => return Err(e),
            Err(e) => {
                tracing::debug!(key = %show(key), error = %e, "watch ended; reading the key again");
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
        match client.kv().get(key.to_vec(), GetOptions::new()).await {
            Ok(resp) => {
                if let Some(r) = decide(resp.kvs.first()) {
                    return Ok(r);
                }
                from = resp.header.map_or(from, |h| h.revision.saturating_add(1));
            }
            Err(e) if !recoverable(&e) => return Err(e),
            Err(_) => {}
        }
    }
}

/// Wait until `my_key` (created at `my_rev`) is the oldest key under `prefix`.
///
/// Each round reads, in one revision, our own key and the newest key created before ours (our
/// predecessor), then watches only the predecessor until it is deleted (or re-created, which
/// moves it behind us). Fails with [`key_gone_error`] when our own key is gone: the session's
/// lease expired or was revoked while we waited.
pub(crate) async fn wait_turn(
    client: &Client,
    prefix: &[u8],
    my_key: &[u8],
    my_rev: i64,
) -> Result<()> {
    loop {
        let check = Txn::new().and_then([
            TxnOp::get(my_key.to_vec(), GetOptions::new()),
            TxnOp::get(
                prefix.to_vec(),
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Descend)
                    .with_max_create_revision(my_rev.saturating_sub(1))
                    .with_limit(1),
            ),
        ]);
        let resp = match client.kv().txn(check).await {
            Ok(resp) => resp,
            Err(e) if recoverable(&e) => {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let mine = range_kvs(&resp, 0).first().map(|kv| kv.create_revision);
        if mine != Some(my_rev) {
            return Err(key_gone_error());
        }
        let Some(predecessor) = range_kvs(&resp, 1).first() else {
            return Ok(());
        };
        tracing::debug!(
            key = %show(my_key),
            predecessor = %show(&predecessor.key),
            "waiting for the predecessor"
        );
        let created = predecessor.create_revision;
        follow_key(client, &predecessor.key, revision(&resp) + 1, |kv| {
            (kv.map(|kv| kv.create_revision) != Some(created)).then_some(())
        })
        .await?;
    }
}

/// Delete `key` if it still has `create_revision`; whether it did. Retried a few times on
/// retryable errors: a repeat cannot delete anybody else's key.
pub(crate) async fn delete_if(client: &Client, key: &[u8], create_revision: i64) -> Result<bool> {
    let txn = Txn::new()
        .when([Compare::create_revision(
            key.to_vec(),
            CompareOp::Equal,
            create_revision,
        )])
        .and_then([TxnOp::delete(key.to_vec(), DeleteOptions::new())]);
    idempotent_txn(client, txn).await
}

/// Run `txn`, which is idempotent (a conditional delete), again after a retryable error, up to
/// [`DELETE_ATTEMPTS`] times; says whether its condition held.
pub(crate) async fn idempotent_txn(client: &Client, txn: Txn) -> Result<bool> {
    let mut attempt = 1;
    loop {
        match client.kv().txn(txn.clone()).await {
            Ok(resp) => return Ok(resp.succeeded),
            Err(e) if e.is_retryable() && attempt < DELETE_ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// [`delete_if`] in a background task, for `Drop` (which cannot wait), counted among the
/// session's `cleanups` until done. Best effort: without a Tokio runtime (or if every attempt
/// fails) the key stays until its lease ends.
pub(crate) fn spawn_delete(
    client: Client,
    key: Vec<u8>,
    create_revision: i64,
    cleanups: &Cleanups,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let cleanup = cleanups.begin(&key);
    let span = tracing::debug_span!("etcd_ha::release", key = %show(&key));
    runtime.spawn(
        async move {
            if let Err(e) = delete_if(&client, &key, create_revision).await {
                tracing::warn!(error = %e, "could not delete the key; it goes with its lease");
            }
            drop(cleanup);
        }
        .instrument(span),
    );
}

/// Revoke `lease_id`, trying again until etcd says it is gone or `give_up` passes. Each attempt
/// is a whole client call (retries and fail-over inside), so during an outage this waits for
/// etcd to come back, and then revokes at once.
pub(crate) async fn revoke_until_gone(client: &Client, lease_id: i64, give_up: Instant) {
    loop {
        match client.lease().revoke(lease_id).await {
            Ok(_) | Err(Error::LeaseNotFound) => return,
            Err(e) if Instant::now() >= give_up => {
                tracing::warn!(
                    lease = lease_id,
                    error = %e,
                    "could not revoke the lease; it expires by itself",
                );
                return;
            }
            Err(e) if !e.is_retryable() => {
                tracing::warn!(
                    lease = lease_id,
                    error = %e,
                    "could not revoke the lease; it expires by itself",
                );
                return;
            }
            Err(_) => tokio::time::sleep(RETRY_PAUSE).await,
        }
    }
}
