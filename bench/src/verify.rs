//! The correctness check after a scenario: read back every key a client's put loop wrote and
//! compare with what the client was told.
//!
//! The read goes through a plain tonic KV client on a fresh channel, linearizable, to the first
//! member that answers: none of the clients under test is trusted to report on itself.
//!
//! Every put writes a key of its own (`<prefix>put/<seq>`) with a value of its own
//! (`<client>/<seq>`), so the cluster's state tells exactly which puts were applied, and a key's
//! `version` tells how many times: 2 or more means a put was applied twice (a retry of a put
//! that had in fact gone through).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use etcd_ha::proto::etcdserverpb::kv_client::KvClient;
use etcd_ha::proto::etcdserverpb::{DeleteRangeRequest, RangeRequest};
use serde::Serialize;

use crate::access::Access;
use crate::workload::{Sample, put_key, put_value};

/// Bound on the read-back from one member; a few thousand small keys take milliseconds.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the read-back found for one client.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Correctness {
    /// Puts the client reported as successful.
    pub ok_puts: u64,
    /// Successful puts whose key is missing: acknowledged writes that were lost.
    pub ok_missing: u64,
    /// Keys whose value is not the one their put wrote.
    pub wrong_value: u64,
    /// Puts that returned an error (or hit the deadline) to the caller.
    pub errored_puts: u64,
    /// Of those, the ones whose key is there anyway: ambiguous-but-applied.
    pub errored_but_applied: u64,
    /// Keys with `version > 1`: a put applied more than once.
    pub applied_twice: u64,
    /// Values stored under more than one key.
    pub duplicate_values: u64,
    /// Keys under the put prefix that no put of this run wrote.
    pub unexpected_keys: u64,
    /// Set if the read-back itself failed; then the counts above mean nothing.
    pub read_error: Option<String>,
}

impl Correctness {
    /// True if nothing acknowledged was lost, changed or duplicated.
    pub fn is_clean(&self) -> bool {
        self.read_error.is_none()
            && self.ok_missing == 0
            && self.wrong_value == 0
            && self.applied_twice == 0
            && self.duplicate_values == 0
            && self.unexpected_keys == 0
    }
}

/// Reads back `<prefix>put/` from the first of `urls` that answers and checks it against the
/// put loop's `samples`.
pub async fn check(
    access: &Access,
    urls: &[String],
    prefix: &str,
    client_name: &str,
    samples: &[Sample],
) -> Correctness {
    let range_prefix = format!("{prefix}put/");
    let mut read_error = String::from("no member to read from");
    let mut stored = None;
    for url in urls {
        match read_prefix(access, url, &range_prefix).await {
            Ok(kvs) => {
                stored = Some(kvs);
                break;
            }
            Err(e) => read_error = format!("{url}: {e}"),
        }
    }
    let Some(stored) = stored else {
        return Correctness {
            read_error: Some(read_error),
            ..Correctness::default()
        };
    };
    compare(&stored, prefix, client_name, samples)
}

/// A stored key's value and version.
struct Stored {
    value: Vec<u8>,
    version: i64,
}

/// The pure comparison of what is stored with what the client was told.
fn compare(
    stored: &BTreeMap<Vec<u8>, Stored>,
    prefix: &str,
    client_name: &str,
    samples: &[Sample],
) -> Correctness {
    let mut result = Correctness::default();
    let mut attempted = HashMap::new();
    for sample in samples {
        let key = put_key(prefix, sample.seq).into_bytes();
        attempted.insert(key.clone(), sample.seq);
        match &sample.error {
            None => {
                result.ok_puts += 1;
                if !stored.contains_key(&key) {
                    result.ok_missing += 1;
                }
            }
            Some(_) => {
                result.errored_puts += 1;
                if stored.contains_key(&key) {
                    result.errored_but_applied += 1;
                }
            }
        }
    }
    let mut seen_values: HashMap<&[u8], u64> = HashMap::new();
    for (key, kv) in stored {
        *seen_values.entry(kv.value.as_slice()).or_insert(0) += 1;
        if kv.version > 1 {
            result.applied_twice += 1;
        }
        match attempted.get(key) {
            Some(&seq) if kv.value != put_value(client_name, seq).into_bytes() => {
                result.wrong_value += 1;
            }
            Some(_) => {}
            None => result.unexpected_keys += 1,
        }
    }
    result.duplicate_values = seen_values.values().filter(|&&n| n > 1).count() as u64;
    result
}

/// Every key under `prefix` on the member at `url`, with value and version.
async fn read_prefix(
    access: &Access,
    url: &str,
    prefix: &str,
) -> Result<BTreeMap<Vec<u8>, Stored>, String> {
    let call = async {
        let channel = access.channel(url, READ_TIMEOUT).await?;
        let request = RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: etcd_ha::prefix_end(prefix.as_bytes()),
            ..RangeRequest::default()
        };
        let mut kv = KvClient::new(channel).max_decoding_message_size(64 << 20);
        let response = access
            .check(kv.range(request).await)
            .map_err(|status| format!("{:?}: {}", status.code(), status.message()))?
            .into_inner();
        Ok(response
            .kvs
            .into_iter()
            .map(|kv| {
                let stored = Stored {
                    value: kv.value,
                    version: kv.version,
                };
                (kv.key, stored)
            })
            .collect())
    };
    tokio::time::timeout(READ_TIMEOUT, call)
        .await
        .map_err(|_| "read-back timed out".to_string())?
}

/// Deletes every key under `prefix` through the first of `urls` that answers: a trial on a
/// user's cluster leaves nothing behind. A failure is reported on stderr and otherwise ignored.
pub async fn delete_prefix(access: &Access, urls: &[String], prefix: &str) {
    let mut last_error = String::from("no member answered");
    for url in urls {
        let call = async {
            let channel = access.channel(url, READ_TIMEOUT).await?;
            let request = DeleteRangeRequest {
                key: prefix.as_bytes().to_vec(),
                range_end: etcd_ha::prefix_end(prefix.as_bytes()),
                ..DeleteRangeRequest::default()
            };
            access
                .check(KvClient::new(channel).delete_range(request).await)
                .map_err(|status| format!("{:?}: {}", status.code(), status.message()))
        };
        match tokio::time::timeout(READ_TIMEOUT, call).await {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => last_error = format!("{url}: {e}"),
            Err(_) => last_error = format!("{url}: timed out"),
        }
    }
    eprintln!("could not delete the benchmark's keys under {prefix}: {last_error}");
}
