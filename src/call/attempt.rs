//! One attempt's bookkeeping on its member, the same for every way out of the client: the
//! typed API's driver and [`BalancedChannel`](crate::BalancedChannel) both go through it, so
//! what a member's answer (or its silence) teaches cannot drift between them.
//!
//! ```text
//!   sent ──► in flight (counted), a debt on the member when the attempt needs the leader
//!    │
//!    ├─ answered ──► health and pace learn its latency; the debt ends
//!    ├─ refused ───► the status classified once; methods, health and leader learn from it
//!    └─ silent past its member's pace, the member's streams silent too ──► blamed
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Transport;
use crate::endpoint::{Endpoint, InFlight};
use crate::error::{Error, ErrorClass};
use crate::rpc::{Route, Rpc};

/// An attempt on its way to (or waiting on) one member.
pub(crate) struct Sent {
    started: Instant,
    /// The in-flight count on the member; dropped when its answer comes (or the caller gives
    /// up), not when the answer is judged.
    _counted: InFlight,
}

/// A prompt attempt that needs the leader leaves a debt on its member until answered: the next
/// leader-bound call sees a stalled leader at once, even when this one's caller gives up and
/// drops it (see `endpoint/silence.rs`). Calls that wait by design (a lock, a campaign, a
/// stream) owe nothing.
pub(crate) fn owes(route: Route, prompt: bool) -> bool {
    prompt && route.is_leader_bound()
}

impl Sent {
    /// An attempt goes to `ep` at `now`; `owes` as [`owes`] says (such an attempt is also
    /// counted as leader-bound on its member: see `Endpoint::leader_bound_in_flight`).
    pub(crate) fn start(ep: &Arc<Endpoint>, owes: bool, now: Instant) -> Sent {
        if owes {
            ep.owe(now);
        }
        Sent {
            started: now,
            _counted: InFlight::start(ep, owes),
        }
    }

    /// When it went out.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }
}

/// What an answered attempt teaches its member: its latency (health, and with `pace_cap` the
/// hedge pace of a call that hedges), and that a debt is paid. The time it was judged.
pub(crate) fn answered(
    ep: &Endpoint,
    started: Instant,
    owed: bool,
    pace_cap: Option<Duration>,
) -> Instant {
    let now = Instant::now();
    let latency = now.saturating_duration_since(started);
    // Health and pace in one lock.
    ep.on_success(latency, pace_cap, now);
    if owed {
        ep.served();
    }
    now
}

/// Whether an attempt to `ep` sent at `started` and still unanswered counts against it: it has
/// owed its answer longer than the member's own pace allows (see [`Endpoint::is_overdue`]),
/// and the member's streams fell silent too. On a saturated box every member is slow and none
/// is broken, and an overloaded leader still answers its keep-alive streams: their late
/// answers eject nobody.
pub(crate) fn silent(ep: &Endpoint, started: Instant, now: Instant) -> bool {
    ep.is_overdue(now.saturating_duration_since(started)) && !ep.heard.still_answering(started, now)
}

impl Transport {
    /// A member answered an attempt of `rpc` with `status`: classified once, and learned from
    /// (a method it lacks, its health, a leader change). The error, and whether the request
    /// provably never reached the member. `rpc` is `None` for a request that names no etcd
    /// method (through [`BalancedChannel`](crate::BalancedChannel)): nothing to learn about
    /// methods then.
    pub(crate) fn refused(
        &self,
        ep: &Endpoint,
        rpc: Option<Rpc>,
        status: tonic::Status,
    ) -> (Error, bool) {
        if let Some(rpc) = rpc {
            self.methods.learn(ep, rpc, &status);
        }
        let error = Error::from_status(status, &ep.url);
        self.learn(ep, &error);
        // Whether it was sent is the error's class, decided once (`error/class.rs`).
        let unsent = error.class() == ErrorClass::NeverSent;
        (error, unsent)
    }
}

impl Transport {
    /// An attempt sent to `ep` at `started` ended with no answer from the member: `status`
    /// says why (its connection failed, or a layer's deadline, such as the caller's
    /// `grpc-timeout`, ran out). Classified once; a failed connection is learned from as any
    /// refusal is, a deadline that ran out counts against the member only when [`silent`].
    /// The error, and whether the request provably never reached the member.
    pub(crate) fn unanswered(
        &self,
        ep: &Endpoint,
        status: tonic::Status,
        started: Instant,
    ) -> (Error, bool) {
        let error = Error::from_status(status, &ep.url);
        if !matches!(error, Error::Timeout) || silent(ep, started, Instant::now()) {
            self.learn(ep, &error);
        }
        let unsent = error.class() == ErrorClass::NeverSent;
        (error, unsent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_prompt_leader_bound_attempts_owe() {
        let route = |rpc: Rpc| rpc.route();
        assert!(owes(route(Rpc::Put), true));
        assert!(owes(
            route(Rpc::Range {
                serializable: false
            }),
            true
        ));
        assert!(!owes(route(Rpc::Range { serializable: true }), true));
        assert!(!owes(route(Rpc::Put), false), "a call that waits by design");
        assert!(!owes(route(Rpc::Status), true));
    }
}
