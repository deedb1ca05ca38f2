//! Key layout of the queued recipes (`<name>/<lease id in hex>`, as etcd's Go client writes it)
//! and small readers of transaction responses.

use crate::proto::etcdserverpb::{ResponseOp, TxnResponse, response_op};
use crate::proto::mvccpb::KeyValue;

/// The prefix every candidate's or waiter's key of `name` lives under: `name` + "/".
pub(crate) fn prefix_of(name: &[u8]) -> Vec<u8> {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    prefix
}

/// A session's key under `prefix`: the lease id in lower-case hex, as Go's
/// `fmt.Sprintf("%s%x", prefix, lease)`, so Go and Rust candidates share one queue.
pub(crate) fn key_of(prefix: &[u8], lease_id: i64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(format!("{lease_id:x}").as_bytes());
    key
}

/// The header revision of a txn response (0 if the server sent no header).
pub(crate) fn revision(resp: &TxnResponse) -> i64 {
    resp.header.as_ref().map_or(0, |h| h.revision)
}

/// The key-values of the `i`-th operation's answer, if it was a range.
pub(crate) fn range_kvs(resp: &TxnResponse, i: usize) -> &[KeyValue] {
    match resp.responses.get(i) {
        Some(ResponseOp {
            response: Some(response_op::Response::ResponseRange(range)),
        }) => &range.kvs,
        _ => &[],
    }
}

/// Lossy text of a key, for logs and error messages.
pub(crate) fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_go_clientv3() {
        let prefix = prefix_of(b"election");
        assert_eq!(prefix, b"election/");
        assert_eq!(
            key_of(&prefix, 0x694d7a2c1e3f0b11),
            b"election/694d7a2c1e3f0b11"
        );
        assert_eq!(key_of(&prefix, 10), b"election/a");
    }
}
