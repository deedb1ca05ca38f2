//! The KV service: range, put, delete range, txn and compact, with option builders for each.

use std::sync::Arc;

use crate::call::{Call, CallOptions, Deadline, Target, Transport};
use crate::error::{Error, Result};
use crate::namespace::{self, Namespace};
use crate::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeResponse, PutResponse, RangeRequest,
    RangeResponse, ResponseHeader, TxnResponse,
};
use crate::txn::Txn;

mod monotonic;
mod options;
mod pager;
mod pages;
pub use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
pub use options::{DeleteOptions, GetOptions, PutOptions, prefix_end};
pub use pages::{RangeMethod, RangePages};

/// The KV service. Get one with [`Client::kv`](crate::Client::kv).
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::{GetOptions, PutOptions};
/// let kv = client.kv();
/// kv.put("app/a", "1", PutOptions::new()).await?;
/// kv.put("app/b", "2", PutOptions::new()).await?;
/// let all = kv.get("app/", GetOptions::new().with_prefix()).await?;
/// assert_eq!(all.count, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Kv {
    transport: Arc<Transport>,
    /// Per-call options (deadline, routing, require-leader) of the calls made through it.
    call: CallOptions,
    /// The client's namespace: every key sent is prefixed, every key received stripped.
    namespace: Option<Namespace>,
}

impl Kv {
    pub(crate) fn new(transport: Arc<Transport>, namespace: Option<Namespace>) -> Self {
        Kv {
            transport,
            call: CallOptions::default(),
            namespace,
        }
    }

    crate::call::call_option_methods!("kv");

    /// Read `key` (or the range the options describe).
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// let resp = kv.get("k", etcd_ha::GetOptions::new().with_serializable()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get(&self, key: impl Into<Vec<u8>>, options: GetOptions) -> Result<RangeResponse> {
        self.range(options.into_request(key.into())).await
    }

    /// Read `key` (or the range the options describe) page by page, all pages at one revision,
    /// holding one page at a time: for ranges too large to read in one answer. Nothing is sent
    /// until the first page is asked for.
    ///
    /// The first page is a plain `Range` (it pins the revision); the rest comes as one
    /// `RangeStream` (etcd 3.7+, chunked by the server) where a member serves it, and as
    /// `Range` pages of [`GetOptions::with_page_size`] keys (1000 by default) at that revision
    /// where it does not (etcd 3.6 and older answer Unimplemented; such a member is asked
    /// again only a minute later). Either way the pages are one snapshot: writes made
    /// meanwhile are not seen, and a compaction past the revision before the last page ends
    /// the read with [`Error::Compacted`]. Each page (and each chunk) is bounded by the call's
    /// deadline, and retried as any read is; a broken stream is opened again after its last
    /// key.
    ///
    /// Keys come in ascending order: a custom sort and a count-only read are refused
    /// ([`Error::InvalidOptions`], as the first item). The limit bounds the whole read.
    /// Revision filters (min/max mod and create revision) are read in `Range` pages, as
    /// `RangeStream` does not take them.
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// use futures_util::TryStreamExt;
    /// let options = etcd_ha::GetOptions::new().with_prefix().with_keys_only();
    /// let mut pages = kv.get_stream("registry/", options);
    /// while let Some(page) = pages.try_next().await? {
    ///     for kv in page {
    ///         println!("{}", String::from_utf8_lossy(&kv.key));
    ///     }
    /// }
    /// println!("read at revision {:?}", pages.revision());
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_stream(&self, key: impl Into<Vec<u8>>, options: GetOptions) -> RangePages {
        let page_size = options.page_size();
        RangePages::new(self.clone(), options.into_request(key.into()), page_size)
    }

    /// The client's request timeout (what a call through this handle waits by default).
    pub(crate) fn request_timeout(&self) -> Option<std::time::Duration> {
        self.transport.options.request_timeout
    }

    /// Send a raw [`RangeRequest`].
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// use etcd_ha::proto::etcdserverpb::RangeRequest;
    /// let resp = kv.range(RangeRequest { key: b"k".to_vec(), ..Default::default() }).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        let request = namespace::map(self.namespace.as_ref(), request, Namespace::range_request);
        let serializable = request.serializable;
        let mut resp = self
            .guarded(
                serializable,
                request,
                |request, call| self.transport.call(call, request),
                |r| r.header.as_ref(),
                |request| RangeRequest {
                    serializable: false,
                    ..request
                },
            )
            .await?;
        namespace::strip(
            self.namespace.as_ref(),
            &mut resp,
            Namespace::range_response,
        );
        Ok(resp)
    }

    /// Make a read with `send`; when it is `serializable` and answered below the client's
    /// monotonic floor (see `monotonic.rs`), make it again within what is left of the deadline:
    /// as a serializable read on each other member and as `linearizable(request)`, at once, and
    /// the first answer at or above the floor wins. The serializable reads keep the read
    /// available through an election: a follower a heartbeat behind has caught up by then, and
    /// while a cut-off leader is being replaced it alone still has the newest revision (the
    /// others learn the last commits only from the next leader), where a linearizable read
    /// alone would wait for that leader and time out (seen in the benchmark's leader
    /// partition). A call the caller pinned to one member stays on it. Every answer's header
    /// is observed (by `unary`).
    async fn guarded<Req, Resp, Fut>(
        &self,
        serializable: bool,
        request: Req,
        send: impl Fn(Req, Call) -> Fut,
        header: impl Fn(&Resp) -> Option<&ResponseHeader>,
        linearizable: impl FnOnce(Req) -> Req,
    ) -> Result<Resp>
    where
        Req: Clone,
        Fut: Future<Output = Result<Resp>>,
    {
        let seen = self.transport.revisions.seen();
        let floor = monotonic::floor(self.transport.options.monotonic_reads, serializable, seen);
        let call = self.call.call(Deadline::Default);
        // The deadline and the copy matter only to a read that may need a second try: no clock
        // read for the others.
        let at = floor.and_then(|_| self.transport.deadline_at(call.deadline));
        let again = floor.map(|_| request.clone());
        let resp = send(request, call.clone()).await?;
        // `unary` observed every answer's header; one through consensus may also show that
        // the cluster's history went back.
        if !serializable {
            self.transport.observe_committed(header(&resp), seen);
        }
        if let Some(request) = again.filter(|_| monotonic::is_stale(floor, header(&resp))) {
            tracing::debug!(
                floor,
                answered = header(&resp).map(|h| h.revision),
                "serializable read older than a revision already seen; reading linearizably"
            );
            let deadline = monotonic::remaining(at, tokio::time::Instant::now())?;
            let answered = header(&resp).map(|h| h.member_id);
            // Each answer says whether it went through consensus (the linearizable read).
            let tagged = |consensus: bool, fut: Fut| async move { (consensus, fut.await) };
            let mut tries = futures_util::stream::FuturesUnordered::new();
            if !matches!(call.target, Target::Member(_)) {
                for ep in self.transport.balancer.endpoints().iter() {
                    if Some(ep.raft().member_id) != answered {
                        let pinned = Call {
                            target: Target::Member(ep.clone()),
                            deadline,
                            ..call.clone()
                        };
                        tries.push(tagged(false, send(request.clone(), pinned)));
                    }
                }
            }
            tries.push(tagged(
                true,
                send(linearizable(request), Call { deadline, ..call }),
            ));
            let mut failure = None;
            while let Some((consensus, result)) = futures_util::StreamExt::next(&mut tries).await {
                match result {
                    // A linearizable answer is fresh by definition: below the floor, the
                    // cluster's history went back, and the floor follows it.
                    Ok(again) if consensus => {
                        self.transport.observe_committed(header(&again), seen);
                        return Ok(again);
                    }
                    Ok(again) => {
                        if !monotonic::is_stale(floor, header(&again)) {
                            return Ok(again);
                        }
                    }
                    Err(error) => failure = Some(error),
                }
            }
            // Every serializable answer was stale and the linearizable read failed.
            return Err(failure.unwrap_or(Error::Timeout));
        }
        Ok(resp)
    }

    /// Write `value` at `key`.
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// let resp = kv.put("k", "v", etcd_ha::PutOptions::new().with_prev_kv()).await?;
    /// let previous = resp.prev_kv;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        options: PutOptions,
    ) -> Result<PutResponse> {
        let request = options.into_request(key.into(), value.into());
        let request = namespace::map(self.namespace.as_ref(), request, Namespace::put_request);
        let seen = self.transport.revisions.seen();
        let mut resp = self
            .transport
            .call(self.call.call(Deadline::Default), request)
            .await?;
        self.transport.observe_committed(resp.header.as_ref(), seen);
        namespace::strip(self.namespace.as_ref(), &mut resp, Namespace::put_response);
        Ok(resp)
    }

    /// Delete `key` (or the range the options describe).
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// let resp = kv.delete("app/", etcd_ha::DeleteOptions::new().with_prefix()).await?;
    /// println!("deleted {}", resp.deleted);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn delete(
        &self,
        key: impl Into<Vec<u8>>,
        options: DeleteOptions,
    ) -> Result<DeleteRangeResponse> {
        let request = options.into_request(key.into());
        let request = namespace::map(self.namespace.as_ref(), request, Namespace::delete_request);
        let seen = self.transport.revisions.seen();
        let mut resp = self
            .transport
            .call(self.call.call(Deadline::Default), request)
            .await?;
        self.transport.observe_committed(resp.header.as_ref(), seen);
        namespace::strip(
            self.namespace.as_ref(),
            &mut resp,
            Namespace::delete_response,
        );
        Ok(resp)
    }

    /// Run a transaction.
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// use etcd_ha::{Compare, CompareOp, Txn, TxnOp, PutOptions};
    /// let txn = Txn::new()
    ///     .when([Compare::version("k", CompareOp::Equal, 0)])
    ///     .and_then([TxnOp::put("k", "created", PutOptions::new())]);
    /// let created = kv.txn(txn).await?.succeeded;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        let request = txn.into_request();
        let request = namespace::map(self.namespace.as_ref(), request, Namespace::txn_request);
        let serializable = monotonic::is_serializable_txn(&request);
        let mut resp = self
            .guarded(
                serializable,
                request,
                |request, call| self.transport.call(call, request),
                |r| r.header.as_ref(),
                monotonic::linearizable_txn,
            )
            .await?;
        namespace::strip(self.namespace.as_ref(), &mut resp, Namespace::txn_response);
        Ok(resp)
    }

    /// Compact the key-value history up to `revision`. With `physical`, the call returns only
    /// once the compaction is applied to the backend.
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// let rev = kv.get("k", Default::default()).await?.header.unwrap().revision;
    /// kv.compact(rev, true).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn compact(&self, revision: i64, physical: bool) -> Result<CompactionResponse> {
        let request = CompactionRequest { revision, physical };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_cases() {
        assert_eq!(prefix_end(b"a"), b"b");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn get_options_build_requests() {
        let r = GetOptions::new()
            .with_prefix()
            .with_limit(3)
            .into_request(b"k/".to_vec());
        assert_eq!(r.key, b"k/");
        assert_eq!(r.range_end, b"k0");
        assert_eq!(r.limit, 3);
        let r = GetOptions::new()
            .with_from_key()
            .into_request(b"m".to_vec());
        assert_eq!(r.range_end, vec![0]);
        let r = GetOptions::new()
            .with_sort(SortTarget::Mod, SortOrder::Descend)
            .into_request(b"m".to_vec());
        assert_eq!(r.sort_target, SortTarget::Mod as i32);
        assert_eq!(r.sort_order, SortOrder::Descend as i32);
    }

    #[test]
    fn delete_options_build_requests() {
        let r = DeleteOptions::new()
            .with_prefix()
            .with_prev_kv()
            .into_request(b"x".to_vec());
        assert_eq!(r.range_end, b"y");
        assert!(r.prev_kv);
    }
}
