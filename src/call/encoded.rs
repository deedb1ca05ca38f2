//! A unary request encoded once, sent as many times as its call makes attempts.
//!
//! A call keeps its request until it ends, since any attempt may have to be sent again
//! (a retry, a hedge, a renewed token). Kept as the message, each attempt deep-cloned it: a
//! txn's compares and operations, a put's key and value, one allocation each (a txn of two
//! compares and two operations: 10 allocations a call above the bare channel, `call-cost`).
//! Encoded once, each attempt clones the bytes, and the encoder copies them into the frame. A
//! small request (most gets, deletes, small txns) is held inline and copied, which allocates
//! nothing; a larger one is shared behind a reference count (`Bytes`, whose first clone
//! allocates its counter).
//!
//! The bytes go out on the request type's own path, with tonic's prost codec and the same
//! method extension the generated clients set (a user's tower layers may read it); the answer
//! is decoded as the generated client would.

use std::fmt;

use prost::Message;
use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{GrpcMethod, Request, Response, Status};

use super::Conn;
use crate::rpc::Rpc;

/// Requests up to this many bytes are held inline (a copy costs less than an allocation).
const INLINE: usize = 128;

/// A request's encoded fields (no length prefix: the gRPC frame adds its own).
#[derive(Clone)]
pub(crate) enum Encoded {
    /// `len` bytes at the start of the array.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// Larger requests.
    Shared(Bytes),
}

impl Default for Encoded {
    fn default() -> Self {
        Encoded::Shared(Bytes::new())
    }
}

impl Encoded {
    /// `message`, encoded.
    pub(crate) fn of(message: &impl Message) -> Self {
        let len = message.encoded_len();
        if let Ok(short) = u8::try_from(len)
            && len <= INLINE
        {
            let mut bytes = [0u8; INLINE];
            // Room for exactly `len`, which `encode` checks.
            if message.encode(&mut &mut bytes[..len]).is_ok() {
                return Encoded::Inline { len: short, bytes };
            }
        }
        Encoded::Shared(Bytes::from(message.encode_to_vec()))
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Encoded::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Encoded::Shared(bytes) => bytes,
        }
    }
}

// Never the bytes: a request may carry a password or a token.
impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Encoded({} bytes)", self.as_slice().len())
    }
}

impl Message for Encoded {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(self.as_slice());
    }

    // Only sent, never received: whatever arrives is skipped.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.as_slice().len()
    }

    fn clear(&mut self) {
        *self = Encoded::default();
    }
}

/// The gRPC path of `rpc` (`/etcdserverpb.KV/Put`).
pub(crate) fn path_of(rpc: Rpc) -> PathAndQuery {
    PathAndQuery::try_from(format!("/{}/{}", rpc.service(), rpc.name()))
        .expect("service and method names make a path")
}

impl Conn {
    /// Send `request` on `path` (the RPC `rpc`'s), once, and decode the answer as `U`.
    pub(crate) async fn unary<U: Message + Default + Send + 'static>(
        self,
        rpc: Rpc,
        path: PathAndQuery,
        mut request: Request<Encoded>,
    ) -> Result<Response<U>, Status> {
        let mut grpc = tonic::client::Grpc::new(self.service)
            .max_decoding_message_size(self.max_response_bytes)
            .max_encoding_message_size(usize::MAX);
        grpc.ready()
            .await
            .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
        request
            .extensions_mut()
            .insert(GrpcMethod::new(rpc.service(), rpc.name()));
        let codec = tonic_prost::ProstCodec::<Encoded, U>::default();
        grpc.unary(request, path, codec).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::etcdserverpb::{Compare, PutRequest, RequestOp, TxnRequest, request_op};

    #[test]
    fn the_bytes_are_the_message_and_decode_back() {
        let txn = TxnRequest {
            compare: vec![Compare {
                key: b"k".to_vec(),
                ..Compare::default()
            }],
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                    ..PutRequest::default()
                })),
            }],
            ..TxnRequest::default()
        };
        let encoded = Encoded::of(&txn);
        assert!(
            matches!(encoded, Encoded::Inline { .. }),
            "a small txn is held inline"
        );
        assert_eq!(encoded.encoded_len(), txn.encoded_len());
        let sent = encoded.clone().encode_to_vec();
        assert_eq!(TxnRequest::decode(sent.as_slice()).unwrap(), txn);
        // Past the inline size: shared, the same bytes.
        let large = PutRequest {
            key: b"k".to_vec(),
            value: vec![7; 4 * INLINE],
            ..PutRequest::default()
        };
        let encoded = Encoded::of(&large);
        assert!(matches!(encoded, Encoded::Shared(_)));
        let sent = encoded.clone().encode_to_vec();
        assert_eq!(PutRequest::decode(sent.as_slice()).unwrap(), large);
        // Exactly at the edge, and empty.
        for value in [INLINE - 4, INLINE - 3, INLINE - 2, 0] {
            let put = PutRequest {
                key: b"k".to_vec(),
                value: vec![1; value],
                ..PutRequest::default()
            };
            let sent = Encoded::of(&put).encode_to_vec();
            assert_eq!(PutRequest::decode(sent.as_slice()).unwrap(), put, "{value}");
        }
    }

    #[test]
    fn its_debug_never_shows_the_bytes() {
        let login = crate::proto::etcdserverpb::AuthenticateRequest {
            name: "root".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{:?}", Encoded::of(&login));
        assert!(
            !shown.contains("hunter2") && !shown.contains("root"),
            "{shown}"
        );
    }

    #[test]
    fn paths_are_the_generated_clients() {
        assert_eq!(path_of(Rpc::Put).as_str(), "/etcdserverpb.KV/Put");
        assert_eq!(
            path_of(Rpc::Campaign).as_str(),
            "/v3electionpb.Election/Campaign"
        );
    }
}
