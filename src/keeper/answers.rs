//! The keeper task's answers: what each keep-alive answer says about its lease, and the burst
//! of answers already received taken in one turn of the task.

use futures_util::FutureExt;
use tokio::time::Instant;

use super::report::{Change, LeaseId};
use super::state::Answer;
use super::task::KeeperTask;
use crate::error::Error;
use crate::proto::etcdserverpb::LeaseKeepAliveResponse;
use crate::stream::ResponseStream;

/// At most this many answers in one turn of the task (the first included). The server answers
/// a window of renewals back to back; one turn per answer paid the turn's own work (expiry,
/// risk, the member's health, the next deadline) per renewal, and at 200,000 leases of TTL 6 s
/// that work alone outran the renewals due. Bounded, so that sends and commands still get
/// turns while answers pour in.
const ANSWER_BURST: usize = 1024;

impl KeeperTask {
    /// Take the answers that have already arrived after the one just handled, up to the
    /// burst; `Some` when the stream ended among them (`Some(None)`: closed by the server).
    pub(super) fn take_burst(
        &mut self,
        answers: &mut ResponseStream<LeaseKeepAliveResponse>,
    ) -> Option<Option<Error>> {
        for _ in 1..ANSWER_BURST {
            // Polled once: `message` keeps nothing between polls, so a pending poll loses
            // nothing, and the task's `select!` waits for the next answer as before.
            match answers.message().now_or_never()? {
                Ok(Some(answer)) => self.on_answer(&answer),
                Ok(None) => return Some(None),
                Err(error) => return Some(Some(error)),
            }
        }
        None
    }

    pub(super) fn on_answer(&mut self, answer: &LeaseKeepAliveResponse) {
        // Formatted only when a line is written (a renewal is the keeper's hot path).
        let lease = LeaseId(answer.id);
        match self.table.answered(answer.id, answer.ttl) {
            Answer::Renewed(expires_at) => {
                tracing::trace!(
                    %lease,
                    ttl = answer.ttl,
                    expires_in = ?expires_at.saturating_duration_since(Instant::now()),
                    "lease renewed",
                );
            }
            Answer::Recovered(_) => self.report.add(Change::Recovered, answer.id),
            Answer::Gone => self.report.add(Change::Gone, answer.id),
            Answer::Late => self.report.add(Change::Late, answer.id),
            Answer::Unexpected => {}
        }
    }
}
