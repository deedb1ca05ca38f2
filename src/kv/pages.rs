//! [`RangePages`]: a range read one page at a time at one revision, by `RangeStream` where the
//! member serves it (etcd 3.7+) and by plain `Range` pages elsewhere (the rules: `pager.rs`).
//!
//! # How a read goes
//!
//! ```text
//!  first page: Range (limit = page size)  -- pins the revision; runs the monotonic-read guard
//!      |
//!      | more?
//!      v
//!  a member may serve RangeStream? --no---> Range pages at the revision, one per pull
//!      | yes                                   ^
//!      v                                       | Unimplemented (an older member)
//!  RangeStream of the rest at the revision ----+
//!      | a chunk per pull; broken or silent past the deadline: opened again after the
//!      | last key (twice without a chunk in between, then the error)
//!      v
//!  the chunk with a header ends it
//! ```
//!
//! The first page always goes as a `Range`: it tells the revision at once (a `RangeStream`
//! sends its header only on the last chunk), a serializable read gets the same guard against
//! a lagging member as `get` (a stale stream could not be taken back once its pages were
//! handed out), and a range that fits in one page costs one round trip.
//!
//! Memory stays bounded: a page is fetched when the caller asks for it, and the stream is
//! pulled one chunk at a time, so HTTP/2 flow control holds the server back meanwhile.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, Stream};

use super::Kv;
use super::pager::Pager;
use crate::call::{Deadline, attempt};
use crate::error::{Error, Result};
use crate::namespace::{self, Namespace};
use crate::proto::etcdserverpb::{RangeRequest, RangeResponse, RangeStreamResponse};
use crate::proto::mvccpb::KeyValue;
use crate::rpc::Rpc;
use crate::stream::ResponseStream;

/// Times a broken `RangeStream` is opened again before a chunk arrives on it: a member that
/// fails a stream twice in a row has the error the caller gets; each opening already retried
/// on other members what it could.
const REOPENS: u32 = 2;

/// The etcd method that served a page of a [`RangePages`] read.
///
/// ```
/// use etcd_ha::RangeMethod;
/// assert_ne!(RangeMethod::Range, RangeMethod::RangeStream);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RangeMethod {
    /// A plain `Range` answer (every etcd; the first page always).
    Range,
    /// A chunk of a `RangeStream` answer (etcd 3.7+).
    RangeStream,
}

/// The key-values of a range, page by page, all at one revision: what
/// [`Kv::get_stream`] returns. A [`Stream`] of pages (each a `Vec<KeyValue>`, never empty, in
/// key order); [`page`](Self::page) is the same without importing `StreamExt`.
///
/// An error ends it; [`revision`](Self::revision) and the last key read tell where to start
/// again (`with_revision`, and a range from after that key).
///
/// ```no_run
/// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
/// use etcd_ha::GetOptions;
/// let mut pages = kv.get_stream("app/", GetOptions::new().with_prefix());
/// let mut keys = 0;
/// while let Some(page) = pages.page().await? {
///     keys += page.len();
/// }
/// println!("{keys} keys at revision {:?}", pages.revision());
/// # Ok(())
/// # }
/// ```
pub struct RangePages {
    /// The read, while no page is being fetched; `None` once it ended.
    reader: Option<Reader>,
    /// The page being fetched; it hands the reader back when done.
    fetching: Option<Fetching>,
    /// What the options were refused for, handed out as the first item.
    refused: Option<Error>,
    /// Copied from the reader after each page, so it can be read while a page is in flight.
    revision: Option<i64>,
    /// The same, for the method of the last page.
    method: Option<RangeMethod>,
}

impl RangePages {
    pub(crate) fn new(kv: Kv, request: RangeRequest, page_size: i64) -> Self {
        let (reader, refused) = match Pager::new(request, page_size) {
            Ok(pager) => (
                Some(Reader {
                    kv,
                    pager,
                    chunks: None,
                    stream: true,
                    reopens: 0,
                    method: None,
                }),
                None,
            ),
            Err(error) => (None, Some(error)),
        };
        RangePages {
            revision: reader.as_ref().and_then(|r| r.pager.revision()),
            reader,
            fetching: None,
            refused,
            method: None,
        }
    }

    /// The next page; `Ok(None)` when the range is read.
    ///
    /// ```no_run
    /// # async fn demo(mut pages: etcd_ha::RangePages) -> etcd_ha::Result<()> {
    /// while let Some(page) = pages.page().await? {
    ///     for kv in page { let _ = kv.value; }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn page(&mut self) -> Result<Option<Vec<KeyValue>>> {
        futures_util::StreamExt::next(self).await.transpose()
    }

    /// The revision every page is read at: the one asked for with
    /// [`GetOptions::with_revision`](crate::GetOptions::with_revision), else the first page's.
    /// `None` until the first page when none was asked for.
    ///
    /// ```no_run
    /// # async fn demo(mut pages: etcd_ha::RangePages) -> etcd_ha::Result<()> {
    /// let first = pages.page().await?;
    /// let at = pages.revision();
    /// # Ok(())
    /// # }
    /// ```
    pub fn revision(&self) -> Option<i64> {
        self.revision
    }

    /// The etcd method that served the last page (`None` before the first): after the
    /// first page, [`RangeMethod::RangeStream`] on members that serve it.
    ///
    /// ```no_run
    /// # async fn demo(mut pages: etcd_ha::RangePages) -> etcd_ha::Result<()> {
    /// while pages.page().await?.is_some() {
    ///     println!("served by {:?}", pages.method());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn method(&self) -> Option<RangeMethod> {
        self.method
    }
}

impl std::fmt::Debug for RangePages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangePages")
            .field("revision", &self.revision)
            .field("method", &self.method)
            .field("ended", &(self.reader.is_none() && self.fetching.is_none()))
            .finish_non_exhaustive()
    }
}

impl Stream for RangePages {
    type Item = Result<Vec<KeyValue>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(error) = this.refused.take() {
            return Poll::Ready(Some(Err(error)));
        }
        if this.fetching.is_none() {
            let Some(mut reader) = this.reader.take() else {
                return Poll::Ready(None);
            };
            this.fetching = Some(
                async move {
                    let page = reader.next_page().await;
                    (reader, page)
                }
                .boxed(),
            );
        }
        let Some(fetching) = this.fetching.as_mut() else {
            return Poll::Ready(None);
        };
        let (reader, page) = std::task::ready!(fetching.as_mut().poll(cx));
        this.fetching = None;
        this.revision = reader.pager.revision();
        this.method = reader.method;
        match page {
            Ok(Some(kvs)) => {
                this.reader = Some(reader);
                Poll::Ready(Some(Ok(kvs)))
            }
            // The end, or an error that ends the read: the reader (and its stream) goes.
            Ok(None) => Poll::Ready(None),
            Err(error) => Poll::Ready(Some(Err(error))),
        }
    }
}

/// A page being fetched, handing the reader back with it.
type Fetching = BoxFuture<'static, (Reader, Result<Option<Vec<KeyValue>>>)>;

/// The read itself: the pager's position, and the `RangeStream` when one is open.
struct Reader {
    kv: Kv,
    pager: Pager,
    /// The open `RangeStream` of the rest.
    chunks: Option<ResponseStream<RangeStreamResponse>>,
    /// Whether the rest is still worth asking as a `RangeStream` (not after an Unimplemented).
    stream: bool,
    /// Openings of the stream since its last chunk.
    reopens: u32,
    /// What served the last page.
    method: Option<RangeMethod>,
}

/// What one pull of the stream gave.
enum Pulled {
    /// A chunk's key-values (perhaps none: the last chunk may be empty).
    Kvs(Vec<KeyValue>),
    /// The member does not serve `RangeStream` (an older etcd): page instead.
    Unimplemented,
}

impl Reader {
    fn rpc(&self) -> Rpc {
        Rpc::RangeStream {
            serializable: self.pager.page_request().serializable,
        }
    }

    /// The next page with key-values in it, or `None` at the end.
    async fn next_page(&mut self) -> Result<Option<Vec<KeyValue>>> {
        while !self.pager.is_done() {
            let kvs = if self.pager.revision().is_some() && self.wants_stream() {
                match self.pull().await? {
                    Pulled::Kvs(kvs) => kvs,
                    Pulled::Unimplemented => {
                        tracing::debug!("RangeStream unimplemented; paging with Range");
                        self.stream = false;
                        continue;
                    }
                }
            } else {
                let page = self.kv.range(self.pager.page_request()).await?;
                self.method = Some(RangeMethod::Range);
                self.pager.on_page(page)?
            };
            if !kvs.is_empty() {
                return Ok(Some(kvs));
            }
        }
        Ok(None)
    }

    /// Whether to ask the rest as a `RangeStream`: the request is one it takes, no member
    /// refused it in this read, and the client knows a member that may have it.
    fn wants_stream(&self) -> bool {
        self.stream
            && self.pager.streamable()
            && self.kv.transport.methods.may_serve(
                self.rpc(),
                &self.kv.call.target,
                &self.kv.transport.balancer.endpoints(),
            )
    }

    /// One chunk of the `RangeStream`, opened first if none is; a stream that breaks (or is
    /// silent for the call's deadline) is opened again after the last key it gave.
    async fn pull(&mut self) -> Result<Pulled> {
        loop {
            let Some(chunks) = self.chunks.as_mut() else {
                match self.kv.open_range_stream(self.pager.stream_request()).await {
                    Ok(chunks) => self.chunks = Some(chunks),
                    Err(error) if error.is_unimplemented() => return Ok(Pulled::Unimplemented),
                    Err(error) => return Err(error),
                }
                continue;
            };
            let at = self
                .kv
                .transport
                .deadline_at(self.kv.call.call(Deadline::Default).deadline);
            let endpoint = chunks.endpoint().to_owned();
            let asked = tokio::time::Instant::now();
            let pulled = match at {
                Some(at) => tokio::time::timeout_at(at, chunks.message())
                    .await
                    .unwrap_or(Err(Error::Timeout)),
                None => chunks.message().await,
            };
            let error = match pulled {
                Ok(Some(chunk)) => {
                    self.reopens = 0;
                    self.method = Some(RangeMethod::RangeStream);
                    let response = chunk.range_response.unwrap_or_default();
                    self.observe_last(&endpoint, &response)?;
                    let kvs = self.pager.on_chunk(response)?;
                    if self.pager.is_done() {
                        self.chunks = None;
                    }
                    return Ok(Pulled::Kvs(kvs));
                }
                // Ended before the chunk with the header: cut short, as if broken.
                Ok(None) => Error::StreamClosed,
                // A stream that opened, then refused the method on its first message.
                Err(error) if error.is_unimplemented() && self.reopens == 0 => {
                    self.chunks = None;
                    if let (Error::Grpc(status), Ok(ep)) =
                        (&error, self.kv.transport.endpoint(&endpoint))
                    {
                        self.kv.transport.methods.learn(&ep, self.rpc(), status);
                    }
                    return Ok(Pulled::Unimplemented);
                }
                Err(error) => error,
            };
            self.chunks = None;
            // A chunk that never came counts against its member as any unanswered attempt
            // does (`call/attempt.rs`): only when the member's streams fell silent too.
            if matches!(error, Error::Timeout)
                && let Ok(ep) = self.kv.transport.endpoint(&endpoint)
                && attempt::silent(&ep, asked, tokio::time::Instant::now())
            {
                self.kv.transport.learn(&ep, &error);
            }
            if !error.is_retryable() || self.reopens >= REOPENS {
                return Err(error);
            }
            self.reopens += 1;
            tracing::debug!(%error, member = %endpoint, "RangeStream broke; opening it again");
        }
    }

    /// The last chunk carries the only header: its member must be of this client's cluster,
    /// and its revision and term are ones the client has seen (as for a unary answer).
    fn observe_last(&self, endpoint: &str, response: &RangeResponse) -> Result<()> {
        let Some(header) = response.header.as_ref() else {
            return Ok(());
        };
        if let Ok(ep) = self.kv.transport.endpoint(endpoint) {
            self.kv
                .transport
                .balancer
                .check_cluster(&ep, header.cluster_id)?;
        }
        self.kv.transport.observe_header(Some(header));
        Ok(())
    }
}

impl Kv {
    /// Open a `RangeStream` of `request` (keys in the caller's namespace), its chunks' keys
    /// stripped of the namespace.
    async fn open_range_stream(
        &self,
        request: RangeRequest,
    ) -> Result<ResponseStream<RangeStreamResponse>> {
        let request = namespace::map(self.namespace.as_ref(), request, Namespace::range_request);
        let chunks = self
            .transport
            .open_server_stream(self.call.call(Deadline::Default), request)
            .await?;
        Ok(match self.namespace.clone() {
            Some(ns) => chunks.with_map(move |chunk: &mut RangeStreamResponse| {
                if let Some(response) = &mut chunk.range_response {
                    ns.range_response(response);
                }
            }),
            None => chunks,
        })
    }
}
