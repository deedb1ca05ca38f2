//! DNS SRV discovery against a real DNS server on 127.0.0.1 (a small one started by each test,
//! speaking the wire format over UDP) and real etcd clusters: the SRV records lead to a working
//! client, member sync keeps working from there, the TLS records win, and a name without
//! records is a typed error.

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use etcd_ha::discovery::SrvDiscovery;
use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, Error, GetOptions, Options, PutOptions};
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::SRV;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::net::UdpSocket;
use tokio::time::{Instant, sleep};

/// Member sync period of the clients: many syncs within the test's window.
const SYNC: Duration = Duration::from_millis(200);

/// What the test DNS server knows: SRV name (lower case, with the final dot) -> (target, port)
/// records. A name with an empty list answers NOERROR with no records; an unknown name NXDOMAIN.
type Zone = HashMap<String, Vec<(String, u16)>>;

/// A DNS server on 127.0.0.1 answering SRV queries from `zone` until the test ends.
async fn dns_server(zone: Zone) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind a UDP port");
    let addr = socket.local_addr().unwrap();
    let zone = Arc::new(zone);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let answer = answer(&zone, &query);
            let _ = socket.send_to(&answer.to_vec().unwrap(), peer).await;
        }
    });
    addr
}

/// The answer to one query, as an authoritative server for `zone` gives it.
fn answer(zone: &Zone, query: &Message) -> Message {
    let mut answer = Message::response(query.metadata.id, query.metadata.op_code);
    answer.metadata.message_type = MessageType::Response;
    answer.metadata.authoritative = true;
    answer.metadata.recursion_desired = query.metadata.recursion_desired;
    answer.add_queries(query.queries.clone());
    let Some(q) = query.queries.first() else {
        answer.metadata.response_code = ResponseCode::FormErr;
        return answer;
    };
    match zone.get(&q.name.to_ascii().to_lowercase()) {
        None => answer.metadata.response_code = ResponseCode::NXDomain,
        Some(records) if q.query_type == RecordType::SRV => {
            for (target, port) in records {
                let srv = SRV::new(0, 10, *port, Name::from_ascii(target).unwrap());
                answer.add_answer(Record::from_rdata(q.name.clone(), 5, RData::SRV(srv)));
            }
        }
        Some(_) => {}
    }
    answer
}

/// The client ports of `cluster`'s members.
fn ports(cluster: &Cluster) -> Vec<u16> {
    cluster
        .endpoints()
        .iter()
        .map(|u| u.rsplit(':').next().unwrap().parse().unwrap())
        .collect()
}

/// Wait until `client` has `n` endpoints, all healthy, or fail with what it has.
async fn endpoints_until(client: &Client, n: usize) -> Vec<String> {
    let until = Instant::now() + support::READY;
    loop {
        let eps = client.endpoints();
        if eps.len() == n
            && eps
                .iter()
                .all(|e| e.health == etcd_ha::HealthState::Healthy)
        {
            return eps.into_iter().map(|e| e.url).collect();
        }
        assert!(Instant::now() < until, "endpoints are {eps:?}");
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_records_lead_to_a_working_client_and_member_sync_goes_on() {
    let cluster = support::cluster3().await;
    let ports = ports(&cluster);
    let mut zone = Zone::new();
    zone.insert(
        "_etcd-client._tcp.all.etcd.test.".into(),
        ports
            .iter()
            .map(|p| ("localhost.".to_string(), *p))
            .collect(),
    );
    // One member only: member sync must find the two others.
    zone.insert(
        "_etcd-client._tcp.one.etcd.test.".into(),
        vec![("localhost.".to_string(), ports[0])],
    );
    let dns = dns_server(zone).await;

    let found = SrvDiscovery::new("all.etcd.test")
        .with_name_server(dns)
        .lookup()
        .await
        .expect("SRV lookup");
    let mut want: Vec<String> = ports
        .iter()
        .map(|p| format!("http://localhost:{p}"))
        .collect();
    let mut got = found.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let client = Client::connect(&found, Options::new().with_member_sync(SYNC))
        .await
        .expect("connect to the discovered endpoints");
    client
        .kv()
        .put("srv/k", "v", PutOptions::new())
        .await
        .expect("put");
    let value = client
        .kv()
        .get("srv/k", GetOptions::new())
        .await
        .expect("get");
    assert_eq!(value.kvs[0].value, b"v");
    // Members advertise 127.0.0.1 URLs: member sync keeps the discovered names, each matched
    // to its member by id, rather than dialling every member a second time.
    endpoints_until(&client, 3).await;
    sleep(SYNC * 5).await;
    let mut kept: Vec<String> = client.endpoints().into_iter().map(|e| e.url).collect();
    kept.sort();
    assert_eq!(kept, want);

    let one = SrvDiscovery::new("one.etcd.test")
        .with_name_server(dns)
        .lookup()
        .await
        .expect("SRV lookup");
    assert_eq!(one, [format!("http://localhost:{}", ports[0])]);
    let client = Client::connect(&one, Options::new().with_member_sync(SYNC))
        .await
        .expect("connect to the one discovered endpoint");
    let urls = endpoints_until(&client, 3).await;
    for advertised in &cluster.endpoints()[1..] {
        assert!(urls.contains(advertised), "{advertised} not in {urls:?}");
    }
    assert!(urls.contains(&one[0]), "{urls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ssl_records_win_and_give_https_endpoints() {
    support::init_tracing();
    let cluster = Cluster::builder()
        .members(3)
        .tls(true)
        .start()
        .await
        .expect("start a TLS cluster");
    cluster
        .leader(support::READY)
        .await
        .expect("the cluster elects a leader");
    let ports = ports(&cluster);
    let mut zone = Zone::new();
    zone.insert(
        "_etcd-client-ssl._tcp.etcd.test.".into(),
        ports
            .iter()
            .map(|p| ("localhost.".to_string(), *p))
            .collect(),
    );
    // Plain-text records too, to a port nobody serves: never used when TLS is offered.
    zone.insert(
        "_etcd-client._tcp.etcd.test.".into(),
        vec![("localhost.".to_string(), 9)],
    );
    let dns = dns_server(zone).await;

    let found = SrvDiscovery::new("etcd.test")
        .with_name_server(dns)
        .lookup()
        .await
        .expect("SRV lookup");
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(
        found.iter().all(|u| u.starts_with("https://localhost:")),
        "{found:?}"
    );
    // The testkit's server certificates name localhost: verification by host name passes.
    let client = Client::connect(&found, support::options_for(&cluster))
        .await
        .expect("connect over TLS to the discovered endpoints");
    client
        .kv()
        .put("srv/tls", "v", PutOptions::new())
        .await
        .expect("put over TLS");
    endpoints_until(&client, 3).await;
}

#[tokio::test]
async fn a_name_without_records_is_srv_not_found() {
    let mut zone = Zone::new();
    // NOERROR with no answer for the TLS name; the plain one does not exist (NXDOMAIN).
    zone.insert("_etcd-client-ssl._tcp.empty.test.".into(), Vec::new());
    // Records that say "no service here" (RFC 2782: target ".") count as none.
    zone.insert(
        "_etcd-client._tcp.dot.test.".into(),
        vec![(".".to_string(), 2379)],
    );
    let dns = dns_server(zone).await;
    for domain in ["empty.test", "dot.test", "missing.test"] {
        let started = Instant::now();
        let err = SrvDiscovery::new(domain)
            .with_name_server(dns)
            .lookup()
            .await
            .expect_err("no usable records");
        assert!(
            matches!(&err, Error::SrvNotFound { name } if name.contains(domain)),
            "{domain}: {err:?}"
        );
        // Answered, not timed out (generous margin for a loaded box).
        assert!(started.elapsed() < Duration::from_secs(3), "{domain}");
    }

    // Asked for TLS only, a domain with plain records alone is not found: no downgrade to
    // http:// on a missing (or forged-away) TLS name.
    let mut plain_only = Zone::new();
    plain_only.insert(
        "_etcd-client._tcp.plain.test.".into(),
        vec![("127.0.0.1".to_string(), 2379)],
    );
    let dns = dns_server(plain_only).await;
    let found = SrvDiscovery::new("plain.test")
        .with_name_server(dns)
        .lookup()
        .await
        .unwrap();
    assert_eq!(found, vec!["http://127.0.0.1:2379".to_string()]);
    let err = SrvDiscovery::new("plain.test")
        .with_name_server(dns)
        .with_tls_only()
        .lookup()
        .await
        .expect_err("no TLS records");
    assert!(
        matches!(&err, Error::SrvNotFound { name }
            if name.starts_with("_etcd-client-ssl._tcp.plain.test")),
        "{err:?}"
    );

    // No name server answers at all: a typed DNS error once the retries are spent.
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let err = SrvDiscovery::new("etcd.test")
        .with_name_server(silent.local_addr().unwrap())
        .with_timeout(Duration::from_millis(200))
        .lookup()
        .await
        .expect_err("nobody answers");
    assert!(matches!(err, Error::Dns { .. }), "{err:?}");
}
