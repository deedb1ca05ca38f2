//! Per-call options of the typed sub-clients: a deadline, where the call goes, and whether it
//! asks for a leader. Each handle (`Kv`, `Lease`, ...) carries a [`CallOptions`]; its builder
//! methods return a changed copy, so `client.kv().with_timeout(..)` scopes them to the calls
//! made through that copy.

use std::time::Duration;

use super::{Call, Deadline, Target};

/// What a handle's calls are told, beyond the client's options.
#[derive(Clone, Debug, Default)]
pub(crate) struct CallOptions {
    /// The caller's own deadline for every call (instead of the request timeout).
    pub(crate) timeout: Option<Duration>,
    /// Where the calls go (default: the RPC table's route).
    pub(crate) target: Target,
    /// Ask for a leader (`hasleader`) or not, whatever the client's option says.
    pub(crate) require_leader: Option<bool>,
}

impl CallOptions {
    /// One call whose deadline is `default` unless the handle set its own.
    pub(crate) fn call(&self, default: Deadline) -> Call {
        Call {
            target: self.target.clone(),
            deadline: default.within(self.timeout),
            require_leader: self.require_leader,
            avoid: None,
        }
    }
}

/// The per-call builder methods of a sub-client handle whose getter on `Client` is `$getter`
/// and whose options field is `call`.
macro_rules! call_option_methods {
    ($getter:literal) => {
        /// The same handle with its own deadline for every call made through it, instead of
        /// the client's request timeout (also for calls that otherwise wait without one, such
        /// as a lock or a campaign). Hedging and retries follow this deadline: a short one still
        /// gets a hedge at a third of it.
        ///
        /// ```no_run
        /// # async fn demo(client: etcd_ha::Client) {
        /// use std::time::Duration;
        #[doc = concat!(
            "let handle = client.",
            $getter,
            "().with_timeout(Duration::from_millis(200));"
        )]
        /// # }
        /// ```
        pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.call.timeout = Some(timeout);
            self
        }

        /// The same handle routing every call as `route` says instead of the RPC's own route:
        /// [`Route::Any`](crate::rpc::Route::Any) spreads even leader-bound calls over healthy
        /// members (which forward them), [`Route::Leader`](crate::rpc::Route::Leader) sends even
        /// serializable reads to the leader. [`Route::Pinned`](crate::rpc::Route::Pinned) means
        /// nothing without a member: see `with_member`.
        ///
        /// ```no_run
        /// # async fn demo(client: etcd_ha::Client) {
        #[doc = concat!("let handle = client.", $getter, "().with_route(etcd_ha::Route::Any);")]
        /// # }
        /// ```
        pub fn with_route(mut self, route: crate::rpc::Route) -> Self {
            self.call.target = match route {
                crate::rpc::Route::Pinned => crate::call::Target::Any,
                route => crate::call::Target::Route(route),
            };
            self
        }

        /// The same handle sending every call to the member behind `endpoint` (one of the
        /// client's endpoints, any accepted spelling) and nowhere else: no hedging, and a
        /// retry only when the request never left the client.
        ///
        /// ```no_run
        /// # fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
        #[doc = concat!("let handle = client.", $getter, "().with_member(\"http://127.0.0.1:2379\")?;")]
        /// # Ok(())
        /// # }
        /// ```
        pub fn with_member(mut self, endpoint: &str) -> crate::error::Result<Self> {
            let ep = self.transport.endpoint(endpoint)?;
            self.call.target = crate::call::Target::Member(ep);
            Ok(self)
        }

        /// The same handle asking (`true`) or not asking (`false`) every leader-bound call to
        /// be refused at once by a member without a leader (etcd's `hasleader` metadata),
        /// whatever [`Options::with_require_leader`](crate::Options::with_require_leader)
        /// says for the client.
        ///
        /// ```no_run
        /// # async fn demo(client: etcd_ha::Client) {
        #[doc = concat!("let handle = client.", $getter, "().with_require_leader(false);")]
        /// # }
        /// ```
        pub fn with_require_leader(mut self, require_leader: bool) -> Self {
            self.call.require_leader = Some(require_leader);
            self
        }
    };
}

pub(crate) use call_option_methods;
