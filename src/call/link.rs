//! A supervised stream's states (down, paused, opening, up) and the next event each waits for:
//! the one skeleton the keep-alive and watch tasks share. Each task keeps its own policy (when
//! to open, what to send, when to leave) in its own files; `supervise.rs` says where a stream
//! opens and how soon after a failure.
//!
//! ```text
//!            open due                 opened                      lost (supervise::lost)
//!   Down ---------------> Opening --------------> Up(stream) ------------------------> Down
//!    ^  ^                    | failed (supervise::failed_open)                          |
//!    |  +--------------------+                                                          |
//!    +---- Paused (the watch's token renewal, then Down at its retry time) <------------+
//! ```
//!
//! Before, each task had its own copy of these states and of the wait on an open stream (its
//! answers, its member falling under suspicion), and the copies drifted: the watch's learned
//! a pause the keeper's lacked, and each built an open stream's bookkeeping its own way.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::supervise::{Opened, Opening, Reopen};
use crate::endpoint::Endpoint;
use crate::error::Result;
use crate::stream::ResponseStream;

/// An open stream and what every task keeps of it.
pub(crate) struct Stream<Req, Resp> {
    /// Requests to the stream (bounded: a stuck stream pushes back).
    pub(crate) tx: mpsc::Sender<Req>,
    /// The server's answers.
    pub(crate) answers: ResponseStream<Resp>,
    /// The member serving it: blamed when the stream fails, watched for ejection.
    pub(crate) endpoint: Arc<Endpoint>,
    /// When it opened: a stream that dies young counts as a failed open.
    pub(crate) opened: Instant,
    /// Consecutive failed opens before this one, kept for the backoff if it dies young (reset
    /// only once it proves it lives, see `supervise::MIN_STREAM_LIFE`).
    pub(crate) failures: u32,
    /// Wakes when its member becomes suspected of stalling (by the unary calls). Its own
    /// channel, not the health changes: a suspicion is no health transition.
    suspected: watch::Receiver<()>,
}

impl<Req, Resp> Stream<Req, Resp> {
    /// The stream `opened` at `now`, after `failures` failed opens in a row.
    pub(crate) fn new(opened: Opened<Req, Resp>, failures: u32, now: Instant) -> Self {
        let (tx, answers, endpoint) = opened;
        // Only suspicions from now on wake the task.
        let mut suspected = endpoint.suspected_news();
        suspected.borrow_and_update();
        Stream {
            tx,
            answers,
            endpoint,
            opened: now,
            failures,
            suspected,
        }
    }
}

/// What a task keeps while its stream is up: the stream, and whatever its policy adds.
pub(crate) trait Holds<Req, Resp> {
    /// The stream itself.
    fn stream(&mut self) -> &mut Stream<Req, Resp>;
}

impl<Req, Resp> Holds<Req, Resp> for Stream<Req, Resp> {
    fn stream(&mut self) -> &mut Stream<Req, Resp> {
        self
    }
}

impl<Req, Resp, T: Holds<Req, Resp>> Holds<Req, Resp> for Box<T> {
    fn stream(&mut self) -> &mut Stream<Req, Resp> {
        (**self).stream()
    }
}

/// A task that never pauses its stream (the keeper): its pause never ends.
pub(crate) type NoPause = std::future::Pending<Result<()>>;

/// A supervised stream's state. `Up` is what the task keeps of an open stream, `First` what
/// an open carries for the task (the watch's first create), `Pause` a wait before the next
/// open (the watch's token renewal).
// One value per task, moved rarely: boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Link<Req, Resp, Up, First = (), Pause = NoPause> {
    /// No stream; open one at `retry_at` (when the task has something to send).
    Down {
        retry_at: Instant,
        /// Consecutive failed opens (drives the backoff).
        failures: u32,
    },
    /// No stream until `pause` ends; then down, to open at `retry_at`.
    Paused {
        pause: Pause,
        retry_at: Instant,
        failures: u32,
    },
    /// Being opened, its first message already queued.
    Opening {
        open: Opening<Req, Resp>,
        started: Instant,
        failures: u32,
        first: First,
    },
    /// Open.
    Up(Up),
}

/// What happened on the link.
// Lives for one turn of the loop: boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum LinkEvent<Req, Resp> {
    /// The open finished.
    Opened(Result<Opened<Req, Resp>>),
    /// An answer, the server's clean end (`None`), or the stream's failure.
    Answer(Result<Option<Resp>>),
    /// The pause ended.
    Resumed(Result<()>),
    /// The stream's member became suspected of stalling (the next advance looks at it).
    Suspected,
}

impl<Req, Resp, Up, First, Pause> Link<Req, Resp, Up, First, Pause>
where
    Up: Holds<Req, Resp>,
    Pause: Future<Output = Result<()>> + Unpin,
{
    /// Down, to open again as `reopen` says.
    pub(crate) fn down(reopen: Reopen) -> Self {
        Link::Down {
            retry_at: reopen.at,
            failures: reopen.failures,
        }
    }

    /// Whether a stream is open.
    pub(crate) fn is_up(&self) -> bool {
        matches!(self, Link::Up(_))
    }

    /// The next thing the stream does; pending while there is none (down).
    pub(crate) async fn event(&mut self) -> LinkEvent<Req, Resp> {
        match self {
            Link::Opening { open, .. } => LinkEvent::Opened(open.await),
            Link::Paused { pause, .. } => LinkEvent::Resumed(pause.await),
            Link::Up(up) => {
                let stream = up.stream();
                tokio::select! {
                    // An answer, the server's end or the stream's failure.
                    answer = stream.answers.message() => LinkEvent::Answer(answer),
                    // The member became suspected (the sender lives as long as the endpoint
                    // this stream holds).
                    Ok(()) = stream.suspected.changed() => LinkEvent::Suspected,
                }
            }
            Link::Down { .. } => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::Error;

    type Pause = std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>>;
    type TestLink = Link<(), (), Stream<(), ()>, u8, Pause>;

    #[tokio::test(start_paused = true)]
    async fn down_waits_for_nothing_and_the_others_end_with_their_future() {
        let now = Instant::now();
        let mut down = TestLink::down(Reopen {
            at: now,
            failures: 2,
        });
        assert!(matches!(down, Link::Down { failures: 2, .. }));
        assert!(!down.is_up());
        let waited = tokio::time::timeout(Duration::from_secs(3600), down.event()).await;
        assert!(
            waited.is_err(),
            "a link that is down has no event of its own"
        );

        let mut opening = TestLink::Opening {
            open: Box::pin(async { Err(Error::Timeout) }),
            started: now,
            failures: 0,
            first: 7,
        };
        assert!(matches!(
            opening.event().await,
            LinkEvent::Opened(Err(Error::Timeout))
        ));

        // The pause ends with what its future ended with (the watch's: a token renewal).
        let mut paused = TestLink::Paused {
            pause: Box::pin(async { Err(Error::Shutdown) }),
            retry_at: now,
            failures: 1,
        };
        assert!(matches!(
            paused.event().await,
            LinkEvent::Resumed(Err(Error::Shutdown))
        ));
    }
}
