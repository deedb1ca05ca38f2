//! What [`Client::connect`](crate::Client::connect) checks and does before a client exists:
//! unix sockets that must be there, credentials never sent in plain text, and the first
//! contact, which finds one cluster among the endpoints given.

use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::call::Transport;
use crate::call::attempt::Sent;
use crate::endpoint;
use crate::endpoint::Endpoint;
use crate::endpoint::RaftView;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::{StatusRequest, StatusResponse};
use crate::rpc::Rpc;

/// A `unix://` endpoint given to [`Client::connect`] must name an existing socket: a missing
/// file is a typo or an etcd that was never started, said at once rather than after the connect
/// timeout. (A member's socket that goes away later is a down member like any other.)
pub(crate) fn check_unix_socket(url: &str) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;

    let Some(path) = endpoint::unix_path(url) else {
        return Ok(());
    };
    let invalid = |reason| Error::InvalidEndpoint {
        endpoint: endpoint::redact(url),
        reason,
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => Ok(()),
        Ok(_) => Err(invalid("not a unix socket")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(invalid("no unix socket at this path"))
        }
        Err(_) => Err(invalid("the unix socket's path cannot be read")),
    }
}

/// Ask every member for its status at once; the first one that answers (even with an error of
/// etcd's own, which proves it is there) wins. Bounded by the connect timeout. What the answers
/// say (member id, leader, term) goes into the endpoints' state, so the first request is routed
/// well.
pub(crate) async fn first_contact(transport: &Transport) -> Result<Arc<str>> {
    let deadline = tokio::time::Instant::now() + transport.options.connect_timeout;
    let endpoints = transport.balancer.endpoints();
    let mut attempts: FuturesUnordered<_> = endpoints
        .iter()
        .map(|ep| async move {
            // Counted in flight as every attempt is (`call/attempt.rs`).
            let sent = Sent::start(ep, false, tokio::time::Instant::now());
            // Straight on the channel, like a probe: a health check bypasses user layers.
            let result = MaintenanceClient::new(ep.channel.clone())
                .status(StatusRequest {})
                .await;
            (ep, sent.started().elapsed(), result)
        })
        .collect();
    let mut last = Error::Timeout;
    loop {
        match tokio::time::timeout_at(deadline, attempts.next()).await {
            Err(_) | Ok(None) => return Err(last),
            Ok(Some((ep, latency, Ok(status)))) => {
                let view = RaftView::from_status(&status.into_inner());
                match transport.balancer.record_status(ep, view) {
                    Ok(()) => {
                        ep.on_probe_ok(view.leader_id != 0, latency);
                        // The others get a moment to answer too: a list that names members
                        // of two clusters (a typo, a copied config) is refused here, instead
                        // of whichever cluster answered first winning.
                        let settle =
                            (tokio::time::Instant::now() + latency * 2 + SETTLE).min(deadline);
                        one_cluster(transport, &mut attempts, settle).await?;
                        return Ok(ep.url.clone());
                    }
                    // A member of another cluster than one reached already (by this loop,
                    // or by a prober that answered first): the list mixes clusters, refused
                    // whichever answered first.
                    Err(err) => return Err(err),
                }
            }
            Ok(Some((ep, _, Err(status)))) => {
                // Classified and learned from as every attempt's refusal is (`call/attempt.rs`).
                let (err, _) = transport.refused(ep, Some(Rpc::Status), status);
                if !err.is_transport() {
                    return Ok(ep.url.clone());
                }
                last = err;
            }
        }
    }
}

/// A Status call's outcome.
type StatusResult = std::result::Result<tonic::Response<StatusResponse>, tonic::Status>;

/// How long, past twice the first answer's latency, the other members' first answers are
/// awaited at connect: members of one cluster on one network answer within it. (The probers
/// start at once too: an answer they record first still fails the connect, see above.)
const SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

/// The Status answers that come until `settle`: one from another cluster than the first fails
/// the connect (the endpoint list mixes clusters); the others are recorded like probes.
async fn one_cluster<'a, F>(
    transport: &Transport,
    attempts: &mut FuturesUnordered<F>,
    settle: tokio::time::Instant,
) -> Result<()>
where
    F: std::future::Future<Output = (&'a Arc<Endpoint>, std::time::Duration, StatusResult)>,
{
    while let Ok(Some((ep, latency, result))) =
        tokio::time::timeout_at(settle, attempts.next()).await
    {
        let status = match result {
            Ok(status) => status,
            // Learned from as any attempt's refusal (a member that is down is ejected before
            // the first call is routed), and no reason to fail the connect.
            Err(status) => {
                transport.refused(ep, Some(Rpc::Status), status);
                continue;
            }
        };
        let view = RaftView::from_status(&status.into_inner());
        transport.balancer.record_status(ep, view)?;
        ep.on_probe_ok(view.leader_id != 0, latency);
    }
    Ok(())
}

/// A list that mixes `https://` and `http://` members is refused (a typo or a copied config:
/// the client would talk in plain text to some members of a cluster it reaches over TLS), and
/// so are credentials with any `http://` member unless the options allow it: the password,
/// and the token it buys, would cross the network in the clear.
pub(crate) fn refuse_plain_text(urls: &[String], options: &Options) -> Result<()> {
    let plain = urls.iter().find(|u| u.starts_with("http://"));
    let Some(plain) = plain else {
        return Ok(());
    };
    if options.tls.is_some() || urls.iter().any(|u| u.starts_with("https://")) {
        return Err(Error::InvalidEndpoint {
            endpoint: endpoint::redact(plain),
            reason: "plain http:// in a list of https:// endpoints (or with TLS options)",
        });
    }
    if options.credentials.is_some() && !options.plaintext_credentials {
        return Err(Error::PlaintextCredentials {
            endpoint: endpoint::redact(plain),
        });
    }
    Ok(())
}
