//! The keep-alive stream's states (down, opening, up) and the next thing each waits for.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::call::supervise;
use crate::endpoint::Endpoint;
use crate::error::Result;
use crate::proto::etcdserverpb::{LeaseKeepAliveRequest, LeaseKeepAliveResponse};
use crate::stream::ResponseStream;

/// An open keep-alive stream.
type Opened = supervise::Opened<LeaseKeepAliveRequest, LeaseKeepAliveResponse>;

/// The keep-alive stream's state.
// One value per task, moved rarely: boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Link {
    /// No stream; open one at `retry_at`.
    Down {
        retry_at: Instant,
        /// Consecutive failed opens (drives the backoff).
        failures: u32,
    },
    /// Being opened with a first keep-alive already queued.
    Opening {
        open: supervise::Opening<LeaseKeepAliveRequest, LeaseKeepAliveResponse>,
        started: Instant,
        failures: u32,
    },
    /// Open on `endpoint` since `opened`.
    Up {
        tx: mpsc::Sender<LeaseKeepAliveRequest>,
        answers: ResponseStream<LeaseKeepAliveResponse>,
        endpoint: Arc<Endpoint>,
        opened: Instant,
        failures: u32,
        /// Wakes when `endpoint` becomes suspected.
        suspected: watch::Receiver<()>,
    },
}

/// What happened on the link.
// Lives for one turn of the loop: boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum LinkEvent {
    Opened(Result<Opened>),
    Answer(Result<Option<LeaseKeepAliveResponse>>),
    /// The stream's member became suspected (the next advance looks at it).
    Suspected,
}

impl Link {
    /// The next thing the stream does; pending while there is none.
    pub(super) async fn event(&mut self) -> LinkEvent {
        match self {
            Link::Opening { open, .. } => LinkEvent::Opened(open.await),
            Link::Up {
                answers, suspected, ..
            } => tokio::select! {
                // An answer, the server's end or the stream's failure.
                answer = answers.message() => LinkEvent::Answer(answer),
                // The member became suspected (the sender lives as long as the endpoint).
                Ok(()) = suspected.changed() => LinkEvent::Suspected,
            },
            Link::Down { .. } => std::future::pending().await,
        }
    }
}
