//! Stream opens: server streams and bidirectional streams (watch, keep-alive) through the
//! same plan and driver as unary calls, one attempt at a time, each bounded.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tonic::Request;

use super::streamed::{BidiRpc, ServerStreamRpc};
use super::{Call, Conn, Transport};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::rpc::Rpc;

/// Room for requests queued on a bidirectional stream before `send` waits: enough for a burst
/// of watch creates or keep-alives, small enough that a stuck stream pushes back on the caller.
pub(crate) const STREAM_REQUEST_BUFFER: usize = 64;

impl Transport {
    /// Open a stream: the request is built by `make` for each attempt (a stream body cannot be
    /// cloned). Each attempt's opening is bounded by the attempt limit, the whole by the
    /// deadline; repeatable streams are retried on other members.
    async fn open_stream<Body, Resp, M, F, Fut>(
        &self,
        rpc: Rpc,
        how: Call,
        make: M,
        call: F,
    ) -> Result<(Arc<Endpoint>, tonic::Streaming<Resp>)>
    where
        M: Fn() -> Body,
        F: Fn(Conn, Request<Body>) -> Fut,
        Fut: Future<
            Output = std::result::Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>,
        >,
    {
        self.drive(rpc, how, true, make, call).await
    }

    /// Open a bidirectional stream with `first` already queued (etcd answers the headers only
    /// with its first message, so an empty stream would never open), and hand back the sender
    /// for further requests and the typed response stream.
    pub(crate) async fn open_bidi<Req: BidiRpc>(
        &self,
        how: Call,
        first: Req,
    ) -> Result<(
        tokio::sync::mpsc::Sender<Req>,
        crate::stream::ResponseStream<Req::Response>,
    )> {
        self.open_bidi_buffered(how, first, STREAM_REQUEST_BUFFER, true)
            .await
    }

    /// [`open_bidi`](Self::open_bidi) with room for `buffer` queued requests; `learns`: the
    /// stream's failure teaches the balancer (see [`ResponseStream::learning`]), for a
    /// stream whose owner does not judge it itself.
    ///
    /// [`ResponseStream::learning`]: crate::stream::ResponseStream::learning
    async fn open_bidi_buffered<Req: BidiRpc>(
        &self,
        how: Call,
        first: Req,
        buffer: usize,
        learns: bool,
    ) -> Result<(
        tokio::sync::mpsc::Sender<Req>,
        crate::stream::ResponseStream<Req::Response>,
    )> {
        // Each attempt needs its own channel; keep the sender of the attempt that opened.
        let sender = std::sync::Mutex::new(None);
        let make = || {
            let (tx, rx) = tokio::sync::mpsc::channel(buffer);
            tx.try_send(first.clone())
                .expect("a new channel has room for one message");
            *sender.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
            tokio_stream::wrappers::ReceiverStream::new(rx)
        };
        let (ep, streaming) = self.open_stream(Req::RPC, how, make, Req::open).await?;
        let tx = sender
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .expect("make ran before the stream opened");
        let stream = if learns {
            crate::stream::ResponseStream::learning(streaming, ep, &self.balancer)
        } else {
            crate::stream::ResponseStream::new(streaming, ep.url.clone())
        };
        Ok((tx, stream))
    }

    /// [`open_bidi`](Self::open_bidi) for long-lived background streams (lease keep-alive,
    /// shared watch): the whole open is bounded by `limit`, and the endpoint serving the stream
    /// is returned too, so that the task owning the stream can blame it when the stream dies.
    pub(crate) async fn open_supervised<Req: BidiRpc>(
        &self,
        first: Req,
        limit: Duration,
        buffer: usize,
        avoid: Option<Arc<[Arc<str>]>>,
    ) -> Result<(
        tokio::sync::mpsc::Sender<Req>,
        crate::stream::ResponseStream<Req::Response>,
        Arc<Endpoint>,
    )> {
        // Its owner blames the member by its own rules (a supervised stream's silence).
        let how = Call {
            avoid,
            ..Call::default()
        };
        let opening = self.open_bidi_buffered(how, first, buffer, false);
        let (tx, answers) = tokio::time::timeout(limit, opening)
            .await
            .map_err(|_| Error::Timeout)??;
        let endpoint = self.endpoint(answers.endpoint())?;
        Ok((tx, answers, endpoint))
    }

    /// Open a server stream: like [`unary`](Self::unary) but the response is a stream.
    pub(crate) async fn open_server_stream<Req: ServerStreamRpc>(
        &self,
        how: Call,
        message: Req,
    ) -> Result<crate::stream::ResponseStream<Req::Response>> {
        let rpc = message.rpc();
        let (ep, streaming) = self
            .open_stream(rpc, how, || message.clone(), Req::open)
            .await?;
        Ok(crate::stream::ResponseStream::learning(
            streaming,
            ep,
            &self.balancer,
        ))
    }
}
