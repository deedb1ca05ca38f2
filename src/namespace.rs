//! Key namespaces: the prefix a namespaced client puts on every key it sends and strips from every key it receives.
//!
//! A namespaced [`Client`](crate::Client) (see
//! [`Client::with_namespace`](crate::Client::with_namespace)) hands out the same sub-clients as
//! any other; each carries a [`Namespace`] and maps its requests on the way out and its answers
//! on the way in, at the one place where it builds the wire message. Everything built on the
//! sub-clients (sessions, elections, mutexes, leadership, STM) is namespaced with them.
//!
//! # How ranges map
//!
//! A key `k` becomes `ns + k`. A range end maps by what it means:
//! - empty (one key): stays empty;
//! - `"\0"` (every key from `k` on): becomes `prefix_end(ns)`, the end of the namespace, so a
//!   from-key read (or a prefix read of the empty prefix) never leaves the namespace;
//! - anything else (an explicit end, or a prefix end computed from the caller's key): `ns + end`.
//!
//! Answers lose the prefix on every key they carry (range results, previous values, txn
//! responses at any depth, watch events and their previous values, a lease's keys). A key
//! outside the namespace cannot be in an answer to a namespaced request, except in the keys of a
//! lease, which is not namespaced: those are left out, like Go's `namespace` package does.
//!
//! Namespaces compose: a namespace inside a namespace is the concatenation of the two prefixes.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::kv::prefix_end;
use crate::proto::etcdserverpb::{
    Compare, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest,
    RangeResponse, RequestOp, TxnRequest, TxnResponse, WatchCreateRequest, WatchRequest,
    WatchResponse, request_op, response_op, watch_request::RequestUnion,
};
use crate::proto::mvccpb::{Event, KeyValue};

/// A key prefix; cheap to clone.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Namespace {
    /// The prefix, never empty (checked by [`Namespace::new`]).
    prefix: Arc<[u8]>,
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Namespace({:?})", String::from_utf8_lossy(&self.prefix))
    }
}

impl Namespace {
    /// The namespace of `prefix` inside `outer` (if any). An empty prefix is refused: it would
    /// be no namespace at all, and a caller who asks for one expects isolation.
    pub(crate) fn new(outer: Option<&Namespace>, prefix: &[u8]) -> Result<Namespace> {
        if prefix.is_empty() {
            return Err(Error::InvalidNamespace {
                reason: "the prefix is empty",
            });
        }
        let mut full = outer.map_or_else(Vec::new, |o| o.prefix.to_vec());
        full.extend_from_slice(prefix);
        Ok(Namespace {
            prefix: full.into(),
        })
    }

    /// The whole prefix (outer namespaces included).
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// `key` inside the namespace.
    pub(crate) fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(&self.prefix);
        full.extend_from_slice(key);
        full
    }

    /// A range end inside the namespace (see the module docs).
    pub(crate) fn range_end(&self, end: &[u8]) -> Vec<u8> {
        match end {
            [] => Vec::new(),
            [0] => prefix_end(&self.prefix),
            end => self.key(end),
        }
    }

    /// `key` with the prefix removed; `None` when it is not in the namespace.
    pub(crate) fn strip<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        key.strip_prefix(&*self.prefix)
    }

    fn strip_in_place(&self, key: &mut Vec<u8>) {
        if key.starts_with(&self.prefix) {
            key.drain(..self.prefix.len());
        }
    }

    fn map_in_place(&self, key: &mut Vec<u8>, end: &mut Vec<u8>) {
        *end = self.range_end(end);
        *key = self.key(key);
    }

    // --- requests ---

    pub(crate) fn range_request(&self, mut r: RangeRequest) -> RangeRequest {
        self.map_in_place(&mut r.key, &mut r.range_end);
        r
    }

    pub(crate) fn put_request(&self, mut r: PutRequest) -> PutRequest {
        r.key = self.key(&r.key);
        r
    }

    pub(crate) fn delete_request(&self, mut r: DeleteRangeRequest) -> DeleteRangeRequest {
        self.map_in_place(&mut r.key, &mut r.range_end);
        r
    }

    fn compare(&self, mut c: Compare) -> Compare {
        self.map_in_place(&mut c.key, &mut c.range_end);
        c
    }

    fn request_op(&self, op: RequestOp) -> RequestOp {
        use request_op::Request;
        RequestOp {
            request: op.request.map(|r| match r {
                Request::RequestRange(r) => Request::RequestRange(self.range_request(r)),
                Request::RequestPut(r) => Request::RequestPut(self.put_request(r)),
                Request::RequestDeleteRange(r) => {
                    Request::RequestDeleteRange(self.delete_request(r))
                }
                Request::RequestTxn(r) => Request::RequestTxn(self.txn_request(r)),
            }),
        }
    }

    pub(crate) fn txn_request(&self, r: TxnRequest) -> TxnRequest {
        TxnRequest {
            compare: r.compare.into_iter().map(|c| self.compare(c)).collect(),
            success: r.success.into_iter().map(|o| self.request_op(o)).collect(),
            failure: r.failure.into_iter().map(|o| self.request_op(o)).collect(),
        }
    }

    pub(crate) fn watch_create(&self, mut c: WatchCreateRequest) -> WatchCreateRequest {
        self.map_in_place(&mut c.key, &mut c.range_end);
        c
    }

    /// A raw watch stream's request: creates are mapped, cancels and progress requests pass.
    pub(crate) fn watch_request(&self, r: WatchRequest) -> WatchRequest {
        match r.request_union {
            Some(RequestUnion::CreateRequest(c)) => WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(self.watch_create(c))),
            },
            other => WatchRequest {
                request_union: other,
            },
        }
    }

    // --- answers ---

    pub(crate) fn kv(&self, kv: &mut KeyValue) {
        self.strip_in_place(&mut kv.key);
    }

    pub(crate) fn range_response(&self, r: &mut RangeResponse) {
        r.kvs.iter_mut().for_each(|kv| self.kv(kv));
    }

    pub(crate) fn put_response(&self, r: &mut PutResponse) {
        r.prev_kv.iter_mut().for_each(|kv| self.kv(kv));
    }

    pub(crate) fn delete_response(&self, r: &mut DeleteRangeResponse) {
        r.prev_kvs.iter_mut().for_each(|kv| self.kv(kv));
    }

    pub(crate) fn txn_response(&self, r: &mut TxnResponse) {
        use response_op::Response;
        for op in &mut r.responses {
            match &mut op.response {
                Some(Response::ResponseRange(r)) => self.range_response(r),
                Some(Response::ResponsePut(r)) => self.put_response(r),
                Some(Response::ResponseDeleteRange(r)) => self.delete_response(r),
                Some(Response::ResponseTxn(r)) => self.txn_response(r),
                None => {}
            }
        }
    }

    pub(crate) fn event(&self, e: &mut Event) {
        e.kv.iter_mut().for_each(|kv| self.kv(kv));
        e.prev_kv.iter_mut().for_each(|kv| self.kv(kv));
    }

    pub(crate) fn watch_response(&self, r: &mut WatchResponse) {
        r.events.iter_mut().for_each(|e| self.event(e));
    }

    /// A lease's keys: those in the namespace, stripped; the others left out.
    pub(crate) fn lease_keys(&self, keys: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        keys.into_iter()
            .filter_map(|k| self.strip(&k).map(<[u8]>::to_vec))
            .collect()
    }
}

/// Map `value` through `f` when there is a namespace.
pub(crate) fn map<T>(ns: Option<&Namespace>, value: T, f: fn(&Namespace, T) -> T) -> T {
    match ns {
        Some(ns) => f(ns, value),
        None => value,
    }
}

/// Strip `value` in place through `f` when there is a namespace.
pub(crate) fn strip<T>(ns: Option<&Namespace>, value: &mut T, f: fn(&Namespace, &mut T)) {
    if let Some(ns) = ns {
        f(ns, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{DeleteOptions, GetOptions, PutOptions};
    use crate::proto::etcdserverpb::ResponseOp;
    use crate::txn::{Compare as C, CompareOp, Txn, TxnOp};

    fn ns(p: &str) -> Namespace {
        Namespace::new(None, p.as_bytes()).unwrap()
    }

    #[test]
    fn an_empty_prefix_is_refused() {
        assert!(matches!(
            Namespace::new(None, b""),
            Err(Error::InvalidNamespace { .. })
        ));
        assert!(matches!(
            Namespace::new(Some(&ns("a/")), b""),
            Err(Error::InvalidNamespace { .. })
        ));
    }

    #[test]
    fn ranges_map_by_what_they_mean() {
        let n = ns("t/");
        let one = n.range_request(GetOptions::new().into_request(b"k".to_vec()));
        assert_eq!(
            (one.key.as_slice(), one.range_end.as_slice()),
            (&b"t/k"[..], &b""[..])
        );
        let prefix = n.range_request(GetOptions::new().with_prefix().into_request(b"a".to_vec()));
        assert_eq!(
            (prefix.key, prefix.range_end),
            (b"t/a".to_vec(), b"t/b".to_vec())
        );
        // From-key and the empty prefix both end at the namespace's end, never past it.
        let from = n.range_request(
            GetOptions::new()
                .with_from_key()
                .into_request(b"m".to_vec()),
        );
        assert_eq!(
            (from.key, from.range_end),
            (b"t/m".to_vec(), b"t0".to_vec())
        );
        let all = n.range_request(GetOptions::new().with_prefix().into_request(Vec::new()));
        assert_eq!((all.key, all.range_end), (b"t/".to_vec(), b"t0".to_vec()));
        let explicit = n.delete_request(
            DeleteOptions::new()
                .with_range("z")
                .into_request(b"a".to_vec()),
        );
        assert_eq!(
            (explicit.key, explicit.range_end),
            (b"t/a".to_vec(), b"t/z".to_vec())
        );
        // A prefix of 0xff bytes has no end but the end of the keyspace.
        let ff = Namespace::new(None, b"\xff").unwrap();
        assert_eq!(ff.range_end(b"\0"), vec![0]);
    }

    #[test]
    fn nested_namespaces_concatenate() {
        let inner = Namespace::new(Some(&ns("a/")), b"b/").unwrap();
        assert_eq!(inner.prefix(), b"a/b/");
        assert_eq!(inner.key(b"k"), b"a/b/k");
        assert_eq!(inner.range_end(b"\0"), b"a/b0");
        // Same as mapping through the inner then the outer namespace.
        assert_eq!(
            ns("a/").range_end(&ns("b/").range_end(b"\0")),
            inner.range_end(b"\0")
        );
    }

    #[test]
    fn txns_map_compares_and_ops_at_every_depth() {
        let n = ns("t/");
        let inner = Txn::new()
            .when([C::value("x", CompareOp::Equal, "1").with_prefix()])
            .and_then([TxnOp::get("", GetOptions::new().with_from_key())]);
        let txn = Txn::new()
            .when([C::version("k", CompareOp::Equal, 0)])
            .and_then([TxnOp::put("k", "v", PutOptions::new()), TxnOp::txn(inner)])
            .or_else([TxnOp::delete("d", DeleteOptions::new().with_prefix())])
            .into_request();
        let mapped = n.txn_request(txn);
        assert_eq!(mapped.compare[0].key, b"t/k");
        use request_op::Request;
        let Some(Request::RequestPut(put)) = &mapped.success[0].request else {
            panic!()
        };
        assert_eq!(put.key, b"t/k");
        let Some(Request::RequestTxn(nested)) = &mapped.success[1].request else {
            panic!()
        };
        assert_eq!(
            (&nested.compare[0].key[..], &nested.compare[0].range_end[..]),
            (&b"t/x"[..], &b"t/y"[..])
        );
        let Some(Request::RequestRange(all)) = &nested.success[0].request else {
            panic!()
        };
        assert_eq!((&all.key[..], &all.range_end[..]), (&b"t/"[..], &b"t0"[..]));
        let Some(Request::RequestDeleteRange(d)) = &mapped.failure[0].request else {
            panic!()
        };
        assert_eq!((&d.key[..], &d.range_end[..]), (&b"t/d"[..], &b"t/e"[..]));
    }

    fn kv(key: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            ..Default::default()
        }
    }

    #[test]
    fn answers_lose_the_prefix_at_every_depth() {
        use response_op::Response;
        let n = ns("t/");
        let mut resp = TxnResponse {
            responses: vec![
                ResponseOp {
                    response: Some(Response::ResponseRange(RangeResponse {
                        kvs: vec![kv("t/a"), kv("t/b")],
                        ..Default::default()
                    })),
                },
                ResponseOp {
                    response: Some(Response::ResponseTxn(TxnResponse {
                        responses: vec![ResponseOp {
                            response: Some(Response::ResponsePut(PutResponse {
                                prev_kv: Some(kv("t/p")),
                                ..Default::default()
                            })),
                        }],
                        ..Default::default()
                    })),
                },
                ResponseOp {
                    response: Some(Response::ResponseDeleteRange(DeleteRangeResponse {
                        prev_kvs: vec![kv("t/d")],
                        ..Default::default()
                    })),
                },
            ],
            ..Default::default()
        };
        n.txn_response(&mut resp);
        let Some(Response::ResponseRange(r)) = &resp.responses[0].response else {
            panic!()
        };
        assert_eq!(r.kvs[1].key, b"b");
        let Some(Response::ResponseTxn(t)) = &resp.responses[1].response else {
            panic!()
        };
        let Some(Response::ResponsePut(p)) = &t.responses[0].response else {
            panic!()
        };
        assert_eq!(p.prev_kv.as_ref().unwrap().key, b"p");
        let Some(Response::ResponseDeleteRange(d)) = &resp.responses[2].response else {
            panic!()
        };
        assert_eq!(d.prev_kvs[0].key, b"d");

        let mut event = Event {
            kv: Some(kv("t/e")),
            prev_kv: Some(kv("t/e")),
            ..Default::default()
        };
        n.event(&mut event);
        assert_eq!(event.kv.unwrap().key, b"e");
        assert_eq!(event.prev_kv.unwrap().key, b"e");
        // A lease's keys of other namespaces are left out.
        assert_eq!(
            n.lease_keys(vec![b"t/a".to_vec(), b"u/b".to_vec(), b"t".to_vec()]),
            vec![b"a".to_vec()]
        );
    }

    #[test]
    fn watch_requests_map_creates_only() {
        let n = ns("t/");
        let create = crate::WatchOptions::new()
            .with_prefix()
            .into_request(b"j/".to_vec());
        let Some(RequestUnion::CreateRequest(c)) = n.watch_request(create).request_union else {
            panic!()
        };
        assert_eq!((c.key, c.range_end), (b"t/j/".to_vec(), b"t/j0".to_vec()));
        let cancel = WatchRequest {
            request_union: Some(RequestUnion::CancelRequest(Default::default())),
        };
        assert_eq!(n.watch_request(cancel.clone()), cancel);
    }
}
