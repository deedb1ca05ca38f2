//! [`Candidate`]: what a pick policy sees of one endpoint, a copy taken for one pick.

use std::time::Duration;

use super::HealthState;

/// What a policy sees of one endpoint. Built with [`Candidate::new`] and read through its
/// accessors, so that it can learn more about an endpoint without breaking policies.
///
/// ```
/// use etcd_ha::{Candidate, HealthState};
/// let c = Candidate::new(HealthState::Healthy, true, None);
/// assert!(c.is_leader());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Health as the prober and past requests left it.
    pub(crate) state: HealthState,
    /// Whether this endpoint's member is the raft leader, as last learned.
    pub(crate) is_leader: bool,
    /// Smoothed latency of successful requests and probes; `None` before the first one.
    pub(crate) latency: Option<Duration>,
    /// How long the prober's linearizable reads took here; see [`Candidate::leader_path`].
    pub(crate) leader_path: Option<Duration>,
    /// The operator drains it: the balancer leaves it out of the pick while another member
    /// can take the call, so a policy sees it only when every member drains.
    pub(crate) draining: bool,
}

impl Candidate {
    /// A candidate in this health state, leader or not, with this smoothed latency (`None`:
    /// nothing measured yet). For tests of a [`PickPolicy`](crate::PickPolicy).
    ///
    /// ```
    /// use std::time::Duration;
    /// use etcd_ha::{Candidate, HealthState};
    /// let c = Candidate::new(HealthState::Probation, false, Some(Duration::from_millis(3)));
    /// assert_eq!(c.state(), HealthState::Probation);
    /// ```
    pub fn new(state: HealthState, is_leader: bool, latency: Option<Duration>) -> Self {
        Candidate {
            state,
            is_leader,
            latency,
            leader_path: None,
            draining: false,
        }
    }

    /// The same candidate with this [`leader_path`](Candidate::leader_path). For tests of a
    /// [`PickPolicy`](crate::PickPolicy).
    ///
    /// ```
    /// use std::time::Duration;
    /// use etcd_ha::{Candidate, HealthState};
    /// let c = Candidate::new(HealthState::Healthy, true, None)
    ///     .with_leader_path(Some(Duration::from_millis(200)));
    /// assert_eq!(c.leader_path(), Some(Duration::from_millis(200)));
    /// ```
    pub fn with_leader_path(mut self, leader_path: Option<Duration>) -> Self {
        self.leader_path = leader_path;
        self
    }

    /// Health as the prober and past requests left it.
    ///
    /// ```
    /// use etcd_ha::{Candidate, HealthState};
    /// assert_eq!(Candidate::new(HealthState::Ejected, false, None).state(), HealthState::Ejected);
    /// ```
    pub fn state(&self) -> HealthState {
        self.state
    }

    /// Whether this endpoint's member is the raft leader, as last learned.
    ///
    /// ```
    /// use etcd_ha::{Candidate, HealthState};
    /// assert!(!Candidate::new(HealthState::Healthy, false, None).is_leader());
    /// ```
    pub fn is_leader(&self) -> bool {
        self.is_leader
    }

    /// Smoothed latency of successful requests and probes; `None` before the first one.
    ///
    /// ```
    /// use etcd_ha::{Candidate, HealthState};
    /// assert_eq!(Candidate::new(HealthState::Healthy, false, None).latency(), None);
    /// ```
    pub fn latency(&self) -> Option<Duration> {
        self.latency
    }

    /// How long a leader-bound call takes through this endpoint, as the prober measures it:
    /// the time of its linearizable reads. On the leader that is the client's own link plus
    /// the read's quorum round (the better of its latest two reads, so one slow read changes
    /// nothing); on a follower, the link plus the forward to the leader (its latest read, and
    /// `None` while the follower is in doubt: failed or suspected since, or owing an answer
    /// past 100 ms). `None` before one was served. The two compare like with like, where
    /// [`latency`](Candidate::latency) mixes whatever calls each member served (a leader's
    /// writes wait for fsyncs, a follower's serializable reads do not).
    ///
    /// ```
    /// use etcd_ha::{Candidate, HealthState};
    /// assert_eq!(Candidate::new(HealthState::Healthy, true, None).leader_path(), None);
    /// ```
    pub fn leader_path(&self) -> Option<Duration> {
        self.leader_path
    }
}
