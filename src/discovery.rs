//! DNS SRV discovery (feature `dns-srv`): the endpoints a domain publishes for etcd's clients.
//!
//! etcd's convention (its `--discovery-srv` and Go's `clientv3` share it) is two SRV names per
//! domain: `_etcd-client-ssl._tcp.<domain>` for members serving TLS and `_etcd-client._tcp.<domain>`
//! for plain HTTP/2. Each record names a member's host and client port.
//!
//! Unlike Go's client, which merges both, this one takes the TLS records when there are any and
//! the plain ones only when there are none: a client that was offered TLS never talks plain text
//! to part of the cluster (the same rule member sync follows). The endpoints found are ordinary
//! `https://host:port` or `http://host:port` URLs, so everything else (TLS verification against
//! the host name, member sync, failover) works as with endpoints given by hand; discovery runs
//! once, and member sync keeps the set current afterwards.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;

use crate::error::{Error, Result};

/// How long one DNS query may take before it is sent again (twice at most).
pub const DEFAULT_DNS_TIMEOUT: Duration = Duration::from_secs(2);

/// The endpoints a domain publishes in DNS SRV records, looked up with hickory-resolver.
///
/// ```no_run
/// # async fn demo() -> etcd_ha::Result<()> {
/// use etcd_ha::discovery::SrvDiscovery;
///
/// // _etcd-client-ssl._tcp.example.com, else _etcd-client._tcp.example.com
/// let endpoints = SrvDiscovery::new("example.com").lookup().await?;
/// let client = etcd_ha::Client::connect(endpoints, etcd_ha::Options::new()).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct SrvDiscovery {
    /// The domain the SRV names are under, e.g. `example.com`.
    domain: String,
    /// etcd's `--discovery-srv-name`: `_etcd-client-<name>._tcp` instead of `_etcd-client._tcp`,
    /// for several clusters under one domain.
    service_name: Option<String>,
    /// Ask this name server instead of the system's (`/etc/resolv.conf`).
    name_server: Option<SocketAddr>,
    /// Per-query timeout.
    timeout: Duration,
    /// Look up the TLS records only: no fall back to plain `http://` members.
    tls_only: bool,
}

impl SrvDiscovery {
    /// Discovery under `domain`, asking the system's name servers.
    ///
    /// ```
    /// let srv = etcd_ha::discovery::SrvDiscovery::new("example.com");
    /// ```
    pub fn new(domain: impl Into<String>) -> Self {
        SrvDiscovery {
            domain: domain.into(),
            service_name: None,
            name_server: None,
            timeout: DEFAULT_DNS_TIMEOUT,
            tls_only: false,
        }
    }

    /// Look up the TLS records (`_etcd-client-ssl`) only. Without it, a name that has none
    /// falls back to the plain records, and an NXDOMAIN is easy to forge on the path: a client
    /// that must reach its cluster over TLS should say so here. (Whatever the records say,
    /// [`Client::connect`](crate::Client::connect) never sends credentials to `http://` members
    /// unless allowed, nor mixes `http://` with TLS options.)
    ///
    /// ```
    /// let srv = etcd_ha::discovery::SrvDiscovery::new("example.com").with_tls_only();
    /// ```
    pub fn with_tls_only(mut self) -> Self {
        self.tls_only = true;
        self
    }

    /// Look up `_etcd-client-<name>._tcp` (and `_etcd-client-ssl-<name>._tcp`), as etcd's
    /// `--discovery-srv-name` does.
    ///
    /// ```
    /// let srv = etcd_ha::discovery::SrvDiscovery::new("example.com").with_service_name("prod");
    /// ```
    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// Ask this name server (UDP, then TCP for long answers) instead of the system's.
    ///
    /// ```
    /// let srv = etcd_ha::discovery::SrvDiscovery::new("example.com")
    ///     .with_name_server("10.0.0.53:53".parse().unwrap());
    /// ```
    pub fn with_name_server(mut self, addr: SocketAddr) -> Self {
        self.name_server = Some(addr);
        self
    }

    /// How long one query may take before it is sent again (twice at most). Default
    /// [`DEFAULT_DNS_TIMEOUT`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let srv = etcd_ha::discovery::SrvDiscovery::new("example.com")
    ///     .with_timeout(Duration::from_millis(500));
    /// ```
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The SRV names looked up, TLS first: `(name, scheme)`.
    ///
    /// ```
    /// let srv = etcd_ha::discovery::SrvDiscovery::new("example.com");
    /// assert_eq!(
    ///     srv.names()[0],
    ///     ("_etcd-client-ssl._tcp.example.com.".to_string(), "https")
    /// );
    /// ```
    pub fn names(&self) -> [(String, &'static str); 2] {
        let domain = self.domain.trim().trim_end_matches('.');
        let suffix = match &self.service_name {
            Some(name) => format!("-{name}"),
            None => String::new(),
        };
        [
            (format!("_etcd-client-ssl{suffix}._tcp.{domain}."), "https"),
            (format!("_etcd-client{suffix}._tcp.{domain}."), "http"),
        ]
    }

    /// The endpoints (`https://host:port` from the TLS records if there are any, else
    /// `http://host:port`), in the order the name server gave them, ready for
    /// [`Client::connect`](crate::Client::connect).
    ///
    /// Errors: [`Error::SrvNotFound`] when neither name has a usable record,
    /// [`Error::Dns`] when the lookup itself fails, [`Error::InvalidOptions`] for an empty
    /// domain or a zero timeout.
    ///
    /// ```no_run
    /// # async fn demo() -> etcd_ha::Result<()> {
    /// let endpoints = etcd_ha::discovery::SrvDiscovery::new("example.com").lookup().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lookup(&self) -> Result<Vec<String>> {
        let domain = self.domain.trim().trim_end_matches('.');
        if domain.is_empty() {
            return Err(Error::InvalidOptions {
                option: "domain",
                reason: "the SRV domain must not be empty",
            });
        }
        if self.timeout.is_zero() {
            return Err(Error::InvalidOptions {
                option: "timeout",
                reason: "the DNS timeout must be above zero",
            });
        }
        let resolver = self.resolver()?;
        let names = self.names();
        let asked = if self.tls_only {
            &names[..1]
        } else {
            &names[..]
        };
        for (name, scheme) in asked {
            let records = match resolver.srv_lookup(name.as_str()).await {
                Ok(lookup) => lookup,
                // NXDOMAIN or an empty answer: try the next name.
                Err(e) if e.is_no_records_found() => continue,
                Err(e) => {
                    return Err(Error::Dns {
                        name: name.clone(),
                        source: Box::new(e),
                    });
                }
            };
            let urls = endpoints(
                scheme,
                records.answers().iter().filter_map(|r| match &r.data {
                    RData::SRV(srv) => Some((srv.target.to_ascii(), srv.port)),
                    _ => None,
                }),
            );
            if !urls.is_empty() {
                tracing::debug!(%name, endpoints = ?urls, "SRV discovery");
                return Ok(urls);
            }
        }
        Err(Error::SrvNotFound {
            name: if self.tls_only {
                names[0].0.clone()
            } else {
                format!("{} or {}", names[0].0, names[1].0)
            },
        })
    }

    /// A resolver asking the given name server, or the system's.
    fn resolver(&self) -> Result<TokioResolver> {
        let mut builder = match self.name_server {
            Some(addr) => {
                let mut udp = ConnectionConfig::udp();
                udp.port = addr.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = addr.port();
                let server = NameServerConfig::new(addr.ip(), true, vec![udp, tcp]);
                TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![server]),
                    TokioRuntimeProvider::default(),
                )
            }
            None => TokioResolver::builder_tokio().map_err(|e| Error::Dns {
                name: self.domain.clone(),
                source: Box::new(e),
            })?,
        };
        let mut opts = ResolverOpts::default();
        opts.timeout = self.timeout;
        opts.attempts = 2;
        // Members come and go: never answer from a cache filled by an earlier lookup.
        opts.cache_size = 0;
        *builder.options_mut() = opts;
        builder.build().map_err(|e| Error::Dns {
            name: self.domain.clone(),
            source: Box::new(e),
        })
    }
}

/// Endpoint URLs from SRV `(target, port)` pairs: the target's trailing dot dropped, records
/// with port 0 or the root target (RFC 2782: "the service is decidedly not available") and
/// repeats left out.
fn endpoints(scheme: &str, records: impl IntoIterator<Item = (String, u16)>) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for (target, port) in records {
        let host = target.trim_end_matches('.');
        if host.is_empty() || port == 0 {
            continue;
        }
        let url = format!("{scheme}://{host}:{port}");
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_etcds_convention() {
        let srv = SrvDiscovery::new("example.com.");
        assert_eq!(
            srv.names(),
            [
                ("_etcd-client-ssl._tcp.example.com.".to_string(), "https"),
                ("_etcd-client._tcp.example.com.".to_string(), "http"),
            ]
        );
        let named = SrvDiscovery::new("example.com").with_service_name("prod");
        assert_eq!(named.names()[1].0, "_etcd-client-prod._tcp.example.com.");
    }

    #[test]
    fn endpoints_drop_the_dot_unusable_records_and_repeats() {
        let urls = endpoints(
            "https",
            [
                ("m0.example.com.".to_string(), 2379),
                (".".to_string(), 2379),
                ("m1.example.com.".to_string(), 0),
                ("m0.example.com.".to_string(), 2379),
                ("m2.example.com".to_string(), 2380),
            ],
        );
        assert_eq!(
            urls,
            ["https://m0.example.com:2379", "https://m2.example.com:2380"]
        );
    }

    #[tokio::test]
    async fn bad_options_are_typed_errors() {
        assert!(matches!(
            SrvDiscovery::new(" ").lookup().await,
            Err(Error::InvalidOptions {
                option: "domain",
                ..
            })
        ));
        assert!(matches!(
            SrvDiscovery::new("example.com")
                .with_timeout(Duration::ZERO)
                .lookup()
                .await,
            Err(Error::InvalidOptions {
                option: "timeout",
                ..
            })
        ));
    }
}
