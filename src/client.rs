//! [`Client`]: connect to a cluster and hand out the typed sub-clients; cheap to clone.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::auth::Auth;
use crate::call::Transport;
use crate::channel::BalancedChannel;
use crate::cluster::Cluster;
use crate::election::ElectionService;
use crate::endpoint;
use crate::endpoint::EndpointInfo;
use crate::error::{Error, Result};
use crate::events::EndpointEvents;
use crate::keeper::Keeper;
use crate::kv::Kv;
use crate::lease::Lease;
use crate::lock::Lock;
use crate::maintenance::Maintenance;
use crate::namespace::Namespace;
use crate::options::Options;
use crate::watch::Watch;

/// A handle to an etcd cluster. Clone it freely: clones share the connections.
///
/// ```no_run
/// # async fn demo() -> etcd_ha::Result<()> {
/// use etcd_ha::{Client, Options};
///
/// let client = Client::connect(["http://127.0.0.1:2379"], Options::default()).await?;
/// client.kv().put("greeting", "hello", Default::default()).await?;
/// let got = client.kv().get("greeting", Default::default()).await?;
/// assert_eq!(got.kvs[0].value, b"hello");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    transport: Arc<Transport>,
    /// The lease keeper shared by every handle, started on first use (it holds the transport
    /// weakly, so it does not keep it alive).
    keeper: Arc<OnceLock<Keeper>>,
    /// The task owning the managed watches' shared stream, started on first use.
    watch_hub: Arc<crate::watch::HubCell>,
    /// The key prefix of this handle ([`with_namespace`](Self::with_namespace)), passed to
    /// every sub-client it hands out; `None` for the whole keyspace.
    namespace: Option<Namespace>,
}

impl Client {
    /// Connect to the cluster behind `endpoints`.
    ///
    /// Checks the options and every endpoint first (typed errors, nothing is dialled), then waits
    /// until one member answers, within the connect timeout, and authenticates if credentials were
    /// given. Members that are down now are dialled again when they are needed.
    ///
    /// ```no_run
    /// # async fn demo() -> etcd_ha::Result<()> {
    /// let client = etcd_ha::Client::connect(
    ///     ["127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"],
    ///     etcd_ha::Options::new(),
    /// )
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect<I, S>(endpoints: I, options: Options) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        options.validate()?;
        let mut urls: Vec<String> = Vec::new();
        for e in endpoints {
            let url = endpoint::normalize(e.as_ref(), options.tls.is_some())?;
            crate::connect::check_unix_socket(&url)?;
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
        if urls.is_empty() {
            return Err(Error::NoEndpoints);
        }
        crate::connect::refuse_plain_text(&urls, &options)?;
        let timeout = options.connect_timeout;
        let transport = Transport::start(&urls, options)?;
        let first =
            crate::connect::first_contact(&transport)
                .await
                .map_err(|source| match source {
                    // Every endpoint that answered belongs to another cluster than the first: say so.
                    mismatch @ Error::ClusterIdMismatch { .. } => mismatch,
                    source => Error::Connect {
                        endpoints: urls.clone(),
                        timeout,
                        source: Box::new(source),
                    },
                })?;
        if transport.options.credentials.is_some() {
            transport.renew_token(0, None).await?;
        }
        tracing::debug!(endpoints = ?urls, first = %first, "connected");
        Ok(Client {
            transport,
            keeper: Arc::default(),
            watch_hub: Arc::default(),
            namespace: None,
        })
    }

    /// The client's endpoints as one tower `Service`, for etcd's generated gRPC clients and
    /// tower layers: the same routing, health and leader tracking as the typed API, without its
    /// retries (see [`BalancedChannel`]).
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> Result<(), tonic::Status> {
    /// use etcd_ha::proto::etcdserverpb::{RangeRequest, kv_client::KvClient};
    ///
    /// let mut kv = KvClient::new(client.balanced_channel());
    /// let got = kv.range(RangeRequest { key: b"k".to_vec(), ..Default::default() }).await?;
    /// println!("{} keys", got.into_inner().count);
    /// # Ok(())
    /// # }
    /// ```
    pub fn balanced_channel(&self) -> BalancedChannel {
        BalancedChannel::new(self.transport.clone())
    }

    /// Keys, values and transactions.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// client.kv().put("k", "v", Default::default()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn kv(&self) -> Kv {
        Kv::new(self.transport.clone(), self.namespace.clone())
    }

    /// A view of this client confined to the keys that start with `prefix`: the same
    /// connections, but every key its KV, txns, watches and lease key listings send is prefixed
    /// with `prefix`, and every key they receive has it removed. Everything built on the view
    /// (sessions, [`concurrency`](crate::concurrency) recipes, STM) lives inside the namespace
    /// too, so two views with different prefixes never see each other's keys, and recipes with
    /// the same name in two namespaces do not interfere.
    ///
    /// Ranges stay inside the namespace: a prefix read of `""`, a from-key read and a delete
    /// of everything from a key cover the namespace's keys and nothing else. Calling it on a
    /// namespaced client nests: `with_namespace("a/")?.with_namespace("b/")?` is the namespace
    /// `"a/b/"`. Leases themselves (ids, TTLs) are cluster-wide; only their keys are filtered.
    /// Not namespaced: [`balanced_channel`](Self::balanced_channel) (raw gRPC), the
    /// server-side [`election`](Self::election) and [`lock`](Self::lock) services, and the
    /// cluster, maintenance and auth services, which have no keys.
    ///
    /// An empty `prefix` is refused with [`Error::InvalidNamespace`]: it would isolate nothing.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// use etcd_ha::{GetOptions, PutOptions};
    ///
    /// let tenant = client.with_namespace("tenant-a/")?;
    /// tenant.kv().put("config", "x", PutOptions::new()).await?;
    /// // Stored as "tenant-a/config"; the tenant sees "config".
    /// let raw = client.kv().get("tenant-a/config", GetOptions::new()).await?;
    /// assert_eq!(raw.count, 1);
    /// let mine = tenant.kv().get("", GetOptions::new().with_prefix()).await?;
    /// assert_eq!(mine.kvs[0].key, b"config");
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_namespace(&self, prefix: impl AsRef<[u8]>) -> Result<Client> {
        let namespace = Namespace::new(self.namespace.as_ref(), prefix.as_ref())?;
        Ok(Client {
            namespace: Some(namespace),
            ..self.clone()
        })
    }

    /// The whole key prefix of this handle (nested namespaces concatenated), `None` for a
    /// client that is not namespaced.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let nested = client.with_namespace("a/")?.with_namespace("b/")?;
    /// assert_eq!(nested.namespace(), Some(&b"a/b/"[..]));
    /// assert_eq!(client.namespace(), None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn namespace(&self) -> Option<&[u8]> {
        self.namespace.as_ref().map(Namespace::prefix)
    }

    /// Leases: grant, revoke, time to live, keep-alive.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let lease = client.lease().grant(10, None).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lease(&self) -> Lease {
        Lease::new(self.transport.clone(), self.namespace.clone())
    }

    /// The client's lease keeper: keeps any number of leases alive over one stream (see
    /// [`Keeper`]). Every call returns the same keeper.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let lease = client.keeper().grant(std::time::Duration::from_secs(10)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn keeper(&self) -> Keeper {
        self.keeper
            .get_or_init(|| {
                let (streams, per_stream) = self.transport.options.keep_alive_streams;
                Keeper::new(Arc::downgrade(&self.transport), streams, per_stream)
            })
            .clone()
    }

    /// Watches: the managed watch (shared stream, failover, exactly-once resume) and the raw
    /// bidirectional stream.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let mut config = client.watch().watch("config/", etcd_ha::WatchOptions::new().with_prefix()).await?;
    /// let first = config.next_batch().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn watch(&self) -> Watch {
        Watch::new(
            self.transport.clone(),
            self.watch_hub.clone(),
            self.namespace.clone(),
        )
    }

    /// Cluster membership.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let members = client.cluster().member_list().await?.members;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cluster(&self) -> Cluster {
        Cluster::new(self.transport.clone())
    }

    /// Maintenance: status, alarms, defragment, hashes, leader moves, snapshots.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let status = client.maintenance().status().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn maintenance(&self) -> Maintenance {
        Maintenance::new(self.transport.clone())
    }

    /// Authentication, users and roles.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let enabled = client.auth().status().await?.enabled;
    /// # Ok(())
    /// # }
    /// ```
    pub fn auth(&self) -> Auth {
        Auth::new(self.transport.clone())
    }

    /// The server-side Election service (`v3electionpb`).
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let leader = client.election().leader("my-election").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self) -> ElectionService {
        ElectionService::new(self.transport.clone())
    }

    /// The server-side Lock service (`v3lockpb`).
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let lease = client.lease().grant(10, None).await?.id;
    /// let held = client.lock().lock("my-lock", lease).await?;
    /// client.lock().unlock(held.key).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> Lock {
        Lock::new(self.transport.clone())
    }

    /// The normalised endpoint URLs, in the order given.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// for url in client.endpoint_urls() {
    ///     println!("{url}");
    /// }
    /// # }
    /// ```
    pub fn endpoint_urls(&self) -> Vec<String> {
        self.transport
            .balancer
            .endpoints()
            .iter()
            .map(|e| e.url.to_string())
            .collect()
    }

    /// A snapshot of every endpoint: URL, member id, health, leader or not, latency, last
    /// error, and since when it is in its state.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// use etcd_ha::HealthState;
    /// let healthy = client.endpoints().iter().filter(|e| e.health == HealthState::Healthy).count();
    /// let leader = client.endpoints().into_iter().find(|e| e.is_leader).map(|e| e.url);
    /// # }
    /// ```
    pub fn endpoints(&self) -> Vec<EndpointInfo> {
        self.transport.infos()
    }

    /// Counters of what the calls did since connect: calls, attempts, hedges (early and
    /// refused), suspicions and ejections. For the project's own tests and benchmarks; not a
    /// stable interface.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// let before = client.call_stats();
    /// // ... traffic ...
    /// let after = client.call_stats();
    /// println!("{} hedges for {} calls", after.hedges - before.hedges, after.calls - before.calls);
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn call_stats(&self) -> crate::call::stats::CallStats {
        self.transport.call_stats()
    }

    /// The shared transport (for the operations written outside this file, like draining).
    pub(crate) fn transport(&self) -> &Arc<Transport> {
        &self.transport
    }

    /// Wakes on every endpoint health transition (for the recipes' unavailability bound).
    pub(crate) fn health_changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.transport.health_changes()
    }

    /// The transitions behind [`endpoints`](Self::endpoints) as a stream: health changes,
    /// leader changes, endpoints added or removed by member sync (see [`EndpointEvents`]).
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) {
    /// use etcd_ha::{EndpointEvent, HealthState};
    /// let mut events = client.endpoint_events();
    /// while let Some(event) = events.next().await {
    ///     if let EndpointEvent::Health { url, to: HealthState::Ejected, .. } = event {
    ///         eprintln!("{url} ejected");
    ///     }
    /// }
    /// # }
    /// ```
    pub fn endpoint_events(&self) -> EndpointEvents {
        EndpointEvents::new(&self.transport.balancer)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.transport.balancer.endpoints())
            .field("options", &self.transport.options)
            .field("namespace", &self.namespace)
            .finish()
    }
}
