//! Go's clientv3 keeping many leases at once, for lease-scale-bench: one clientv3 3.6 driver
//! process (see [`crate::goclient`]) grants N leases and keeps each with clientv3's own
//! `KeepAlive`, as a Go service does, and answers polls with counts, never a line per lease.
//!
//! The driver does the counting (`bench/go/clientv3/leases.go`): a lease is lost once its
//! keep-alive channel closed or no renewal was answered for a TTL, and at risk with less than a
//! third of the TTL left. clientv3 hands over answers, not send times, so the time left counts
//! from an answer's arrival (etcd-ha and etcd-client count from the send, a round trip
//! earlier). The CPU time and resident memory are the driver's own, so that the Go client's
//! cost is charged to it and not to the bench.
//!
//! ```no_run
//! # async fn f(endpoints: Vec<String>) -> Result<(), String> {
//! use std::time::Duration;
//! use etcd_ha_bench::goclient::{self, Driver};
//! use etcd_ha_bench::golease::GoLeases;
//!
//! goclient::prepare(Driver::Current)?;
//! let (leases, failed) = GoLeases::grant(&endpoints, 10_000, Duration::from_secs(10)).await?;
//! let status = leases.status().await?;
//! println!("{failed} grants failed, {} lost, {} at risk", status.lost, status.at_risk);
//! # Ok(()) }
//! ```

use std::time::Duration;

use crate::access::Access;
use crate::goclient::{Driver, GoClient};

/// The deadline of each grant and each `TimeToLive` the driver makes: 5 s, since a grant may
/// queue behind 63 others on a busy 2-core box; a grant fails only when the cluster does.
const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// The leases one clientv3 driver keeps; the driver is killed when this goes (and the
/// clones of its [`GoLeases::client`] with it).
pub struct GoLeases {
    /// The driver (one clientv3 client), also shared by the bench's callers under `--load`.
    client: GoClient,
    /// The driver's name of the set: the id of the command that granted it.
    set: String,
    /// Leases granted.
    granted: usize,
    /// The driver's resident memory before it granted, in KiB, for the memory per lease.
    rss_at_start_kb: u64,
}

/// What the driver says of its leases now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Lost: channel closed, or no renewal answered for a TTL (a late answer makes a lease
    /// whose channel is still open count as held again).
    pub lost: usize,
    /// Less than a third of the TTL left.
    pub at_risk: usize,
    /// Of `lost`, those whose channel clientv3 closed (for good).
    pub closed: usize,
    /// Renewals answered since the grant, over all leases.
    pub renewals: u64,
    /// The member address ("127.0.0.1:2379") of clientv3's last keep-alive stream, if any.
    pub stream: Option<String>,
}

/// The driver process's own cost so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// User plus system CPU time (`getrusage` in the driver).
    pub cpu: Duration,
    /// Resident memory (`VmRSS` of its `/proc/self/status`), in KiB.
    pub rss_kb: u64,
}

impl GoLeases {
    /// Starts a clientv3 3.6 driver on `endpoints` (plain, no auth: the bench's local
    /// cluster), then grants `count` leases of `ttl` (64 in flight), each kept by `KeepAlive`
    /// from its grant. Returns the leases and how many grants failed, or why the driver cannot
    /// run ([`crate::goclient::prepare`] must have built it).
    ///
    /// ```no_run
    /// # async fn f(endpoints: Vec<String>) -> Result<(), String> {
    /// # use etcd_ha_bench::golease::GoLeases;
    /// let (leases, failed) =
    ///     GoLeases::grant(&endpoints, 1_000, std::time::Duration::from_secs(10)).await?;
    /// assert_eq!(leases.granted() + failed, 1_000);
    /// # Ok(()) }
    /// ```
    pub async fn grant(
        endpoints: &[String],
        count: usize,
        ttl: Duration,
    ) -> Result<(GoLeases, usize), String> {
        let client =
            GoClient::start(Driver::Current, endpoints, &Access::none(), CALL_DEADLINE).await?;
        let rss_at_start_kb = usage(&client).await?.rss_kb;
        let answer = client
            .ask(&format!("leases {count} {}", ttl.as_secs().max(1)))
            .await
            .map_err(|kind| format!("the clientv3 driver did not grant: {kind}"))?;
        let granted = parse_granted(&answer)?;
        let leases = GoLeases {
            client,
            set: granted.set,
            granted: granted.granted,
            rss_at_start_kb,
        };
        Ok((leases, granted.failed))
    }

    /// Leases granted (and kept from then on).
    ///
    /// ```no_run
    /// # fn f(leases: etcd_ha_bench::golease::GoLeases) {
    /// println!("{} leases", leases.granted());
    /// # }
    /// ```
    pub fn granted(&self) -> usize {
        self.granted
    }

    /// The driver: its client is the one keeping the leases, for callers sharing it.
    ///
    /// ```no_run
    /// # async fn f(leases: etcd_ha_bench::golease::GoLeases) {
    /// let put = leases.client().put(b"load/0", b"v").await;
    /// # }
    /// ```
    pub fn client(&self) -> &GoClient {
        &self.client
    }

    /// The driver's resident memory before it granted, in KiB.
    ///
    /// ```no_run
    /// # async fn f(leases: etcd_ha_bench::golease::GoLeases) -> Result<(), String> {
    /// let grown = leases.usage().await?.rss_kb.saturating_sub(leases.rss_at_start_kb());
    /// # Ok(()) }
    /// ```
    pub fn rss_at_start_kb(&self) -> u64 {
        self.rss_at_start_kb
    }

    /// Lost and at-risk counts, renewals and the stream's member, now (one short line from
    /// the driver, whatever the count).
    ///
    /// ```no_run
    /// # async fn f(leases: etcd_ha_bench::golease::GoLeases) -> Result<(), String> {
    /// let status = leases.status().await?;
    /// println!("{} lost, {} renewals", status.lost, status.renewals);
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<Status, String> {
        let answer = self
            .client
            .ask(&format!("leases-status {}", self.set))
            .await
            .map_err(|kind| format!("leases-status: {kind}"))?;
        parse_status(&answer)
    }

    /// The driver process's CPU time and resident memory so far.
    ///
    /// ```no_run
    /// # async fn f(leases: etcd_ha_bench::golease::GoLeases) -> Result<(), String> {
    /// let cpu = leases.usage().await?.cpu;
    /// # Ok(()) }
    /// ```
    pub async fn usage(&self) -> Result<Usage, String> {
        usage(&self.client).await
    }

    /// Up to `max` leases the driver still holds, spread over the set.
    ///
    /// ```no_run
    /// # async fn f(leases: etcd_ha_bench::golease::GoLeases) -> Result<(), String> {
    /// for id in leases.sample(200).await? {
    ///     let ttl = leases.time_to_live(id).await;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn sample(&self, max: usize) -> Result<Vec<i64>, String> {
        let answer = self
            .client
            .ask(&format!("leases-sample {} {max}", self.set))
            .await
            .map_err(|kind| format!("leases-sample: {kind}"))?;
        answer
            .split_whitespace()
            .map(|id| id.parse().map_err(|_| format!("leases-sample: {id:?}")))
            .collect()
    }

    /// The TTL the server has left for lease `id` (`LeaseTimeToLive` through clientv3; -1 when
    /// the server no longer knows it).
    ///
    /// ```no_run
    /// # async fn f(leases: etcd_ha_bench::golease::GoLeases, id: i64) {
    /// let alive = leases.time_to_live(id).await.is_ok_and(|ttl| ttl > 0);
    /// # }
    /// ```
    pub async fn time_to_live(&self, id: i64) -> Result<i64, String> {
        let answer = self
            .client
            .ask(&format!("alive {id}"))
            .await
            .map_err(|kind| format!("alive: {kind}"))?;
        answer
            .trim()
            .parse()
            .map_err(|_| format!("alive: {answer:?}"))
    }
}

/// The driver's `usage` answer.
async fn usage(client: &GoClient) -> Result<Usage, String> {
    let answer = client
        .ask("usage")
        .await
        .map_err(|kind| format!("usage: {kind}"))?;
    let words = words(&answer);
    Ok(Usage {
        cpu: Duration::from_micros(number(&words, "cpu-us")?),
        rss_kb: number(&words, "rss-kb")?,
    })
}

/// What the `leases` command answered.
#[derive(Debug, PartialEq, Eq)]
struct Granted {
    set: String,
    granted: usize,
    failed: usize,
}

/// Parses `set=<id> granted=<n> failed=<n>`.
fn parse_granted(answer: &str) -> Result<Granted, String> {
    let words = words(answer);
    let set = value(&words, "set")?.to_string();
    Ok(Granted {
        set,
        granted: number(&words, "granted")?,
        failed: number(&words, "failed")?,
    })
}

/// Parses `lost=<n> at-risk=<n> closed=<n> renewals=<n> stream=<addr|->`.
fn parse_status(answer: &str) -> Result<Status, String> {
    let words = words(answer);
    let stream = value(&words, "stream")?;
    Ok(Status {
        lost: number(&words, "lost")?,
        at_risk: number(&words, "at-risk")?,
        closed: number(&words, "closed")?,
        renewals: number(&words, "renewals")?,
        stream: (stream != "-").then(|| stream.to_string()),
    })
}

/// The `key=value` words of an answer.
fn words(answer: &str) -> Vec<(&str, &str)> {
    answer
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

/// The value of `key` among `words`.
fn value<'a>(words: &[(&str, &'a str)], key: &str) -> Result<&'a str, String> {
    words
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
        .ok_or_else(|| format!("the clientv3 driver's answer has no {key}="))
}

/// The number under `key` among `words`.
fn number<T: std::str::FromStr>(words: &[(&str, &str)], key: &str) -> Result<T, String> {
    let text = value(words, key)?;
    text.parse()
        .map_err(|_| format!("the clientv3 driver's {key}={text} is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The driver's answers, as leases.go writes them, parse into their fields; a missing or
    /// garbled field is an error that names it.
    #[test]
    fn answers_parse() {
        assert_eq!(
            parse_granted("set=7 granted=998 failed=2"),
            Ok(Granted {
                set: "7".into(),
                granted: 998,
                failed: 2
            })
        );
        assert_eq!(
            parse_status("lost=3 at-risk=10 closed=1 renewals=12345 stream=127.0.0.1:2379"),
            Ok(Status {
                lost: 3,
                at_risk: 10,
                closed: 1,
                renewals: 12345,
                stream: Some("127.0.0.1:2379".into()),
            })
        );
        let none = parse_status("lost=0 at-risk=0 closed=0 renewals=0 stream=-").unwrap();
        assert_eq!(none.stream, None);
        let missing = parse_status("lost=0 at-risk=0 closed=0 stream=-").unwrap_err();
        assert!(missing.contains("renewals="), "{missing}");
        let garbled = parse_granted("set=7 granted=x failed=0").unwrap_err();
        assert!(garbled.contains("granted=x"), "{garbled}");
    }
}
