//! The streaming half of the RPC table (the unary half is `typed.rs`): each request type of a
//! streaming RPC knows its row ([`Rpc`]), its answer type and the generated method that opens
//! it, so a stream open cannot pair a request with the wrong row or method.
//!
//! Before, each of eight opens passed an `Rpc` variant and a closure naming the method by hand
//! (`Rpc::Watch, .., |c, r| c.watch().watch(r)`), and only the types of the closure were
//! checked, not that the row matched it. The request types of the server streams are also
//! unary requests (`LeaderRequest` asks for the leader once, or observes it), so the two
//! halves are two traits: which one a call site uses says which RPC it means.

use std::future::Future;

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Conn;
use crate::proto::etcdserverpb::{
    LeaseKeepAliveRequest, LeaseKeepAliveResponse, RangeRequest, RangeStreamResponse,
    SnapshotRequest, SnapshotResponse, WatchRequest, WatchResponse,
};
use crate::proto::v3electionpb::{LeaderRequest, LeaderResponse};
use crate::rpc::Rpc;

/// What opening a stream of `Resp` answers.
pub(crate) type Opened<Resp> = std::result::Result<Response<Streaming<Resp>>, Status>;

/// A request that opens a server stream: its row and its method.
pub(crate) trait ServerStreamRpc: Clone + Send + 'static {
    /// What the stream carries.
    type Response: Send + 'static;

    /// Its row of the table (route, idempotency).
    fn rpc(&self) -> Rpc;

    /// Open it on `conn`, once.
    fn open(
        conn: Conn,
        request: Request<Self>,
    ) -> impl Future<Output = Opened<Self::Response>> + Send;
}

/// The first request of a bidirectional stream: the stream's row and its method.
pub(crate) trait BidiRpc: Clone + Send + Sync + 'static {
    /// What the stream answers.
    type Response: Send + 'static;

    /// Its row of the table.
    const RPC: Rpc;

    /// Open it on `conn`, once, with `requests` as the stream's requests.
    fn open(
        conn: Conn,
        requests: Request<ReceiverStream<Self>>,
    ) -> impl Future<Output = Opened<Self::Response>> + Send;
}

impl ServerStreamRpc for RangeRequest {
    type Response = RangeStreamResponse;
    fn rpc(&self) -> Rpc {
        Rpc::RangeStream {
            serializable: self.serializable,
        }
    }
    async fn open(conn: Conn, request: Request<Self>) -> Opened<Self::Response> {
        conn.kv().range_stream(request).await
    }
}

impl ServerStreamRpc for SnapshotRequest {
    type Response = SnapshotResponse;
    fn rpc(&self) -> Rpc {
        Rpc::Snapshot
    }
    async fn open(conn: Conn, request: Request<Self>) -> Opened<Self::Response> {
        conn.maintenance().snapshot(request).await
    }
}

impl ServerStreamRpc for LeaderRequest {
    type Response = LeaderResponse;
    fn rpc(&self) -> Rpc {
        Rpc::Observe
    }
    async fn open(conn: Conn, request: Request<Self>) -> Opened<Self::Response> {
        conn.election().observe(request).await
    }
}

impl BidiRpc for WatchRequest {
    type Response = WatchResponse;
    const RPC: Rpc = Rpc::Watch;
    async fn open(conn: Conn, requests: Request<ReceiverStream<Self>>) -> Opened<Self::Response> {
        conn.watch().watch(requests).await
    }
}

impl BidiRpc for LeaseKeepAliveRequest {
    type Response = LeaseKeepAliveResponse;
    const RPC: Rpc = Rpc::LeaseKeepAlive;
    async fn open(conn: Conn, requests: Request<ReceiverStream<Self>>) -> Opened<Self::Response> {
        conn.lease().lease_keep_alive(requests).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stream_names_its_own_row() {
        let range = |serializable| RangeRequest {
            serializable,
            ..RangeRequest::default()
        };
        assert_eq!(range(true).rpc(), Rpc::RangeStream { serializable: true });
        assert_eq!(
            range(false).rpc(),
            Rpc::RangeStream {
                serializable: false
            }
        );
        assert_eq!(SnapshotRequest {}.rpc(), Rpc::Snapshot);
        assert_eq!(LeaderRequest::default().rpc(), Rpc::Observe);
        assert_eq!(<WatchRequest as BidiRpc>::RPC, Rpc::Watch);
        assert_eq!(<LeaseKeepAliveRequest as BidiRpc>::RPC, Rpc::LeaseKeepAlive);
    }
}
