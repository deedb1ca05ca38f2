//! User tower layers around the typed API's attempts (`Options::with_layer`), against a real
//! 3-member cluster: every attempt passes through them in the order they were added, health
//! checks do not, and a layer can refuse an attempt that is then retried like any other.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use etcd_ha::{Client, GetOptions, PutOptions};
use tonic::body::Body;
use tower::{BoxError, Layer, Service};

type Log = Arc<Mutex<Vec<String>>>;

/// Records `tag path` for every request; with `refuse_first_range`, answers the first Range
/// itself with `unavailable` instead of sending it.
#[derive(Clone)]
struct Recording {
    tag: &'static str,
    log: Log,
    refuse_first_range: Option<Arc<Mutex<bool>>>,
}

impl<S> Layer<S> for Recording {
    type Service = Recorded<S>;
    fn layer(&self, inner: S) -> Recorded<S> {
        Recorded {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
struct Recorded<S> {
    inner: S,
    layer: Recording,
}

impl<S> Service<http::Request<Body>> for Recorded<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path().to_owned();
        self.layer
            .log
            .lock()
            .unwrap()
            .push(format!("{} {path}", self.layer.tag));
        if let Some(flag) = &self.layer.refuse_first_range
            && path.ends_with("/Range")
            && !std::mem::replace(&mut *flag.lock().unwrap(), true)
        {
            return Box::pin(async {
                Err(Box::new(tonic::Status::unavailable("refused by a user layer")) as BoxError)
            });
        }
        Box::pin(self.inner.call(request))
    }
}

fn recording(tag: &'static str, log: &Log) -> Recording {
    Recording {
        tag,
        log: log.clone(),
        refuse_first_range: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_passes_the_layers_in_order_and_probes_do_not() {
    let cluster = support::cluster3().await;
    let log = Log::default();
    let options = support::options_for(&cluster)
        .with_layer(recording("outer", &log))
        .with_layer(recording("inner", &log));
    let client = Client::connect(cluster.endpoints(), options).await.unwrap();
    let key = support::unique("layered");
    for i in 0..5 {
        client
            .kv()
            .put(key.as_str(), format!("{i}"), PutOptions::new())
            .await
            .unwrap();
        client
            .kv()
            .get(key.as_str(), GetOptions::new())
            .await
            .unwrap();
    }
    // Let the probers run a few rounds: none of their requests may show up.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let log = log.lock().unwrap().clone();
    let puts: Vec<&String> = log.iter().filter(|l| l.ends_with(".KV/Put")).collect();
    let ranges: Vec<&String> = log.iter().filter(|l| l.ends_with(".KV/Range")).collect();
    assert_eq!(puts.len(), 10, "5 puts, each through both layers: {log:?}");
    assert_eq!(
        ranges.len(),
        10,
        "5 gets, each through both layers: {log:?}"
    );
    // The first layer added is the outermost: it sees each request first.
    for pair in log.chunks(2) {
        assert!(pair[0].starts_with("outer "), "{log:?}");
        assert!(pair[1].starts_with("inner "), "{log:?}");
        assert_eq!(pair[0][6..], pair[1][6..], "{log:?}");
    }
    assert!(
        !log.iter().any(|l| l.ends_with("/Status")),
        "health checks bypass user layers: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_a_layer_refuses_is_retried_like_any_other() {
    let cluster = support::cluster3().await;
    let log = Log::default();
    let layer = Recording {
        tag: "gate",
        log: log.clone(),
        refuse_first_range: Some(Arc::default()),
    };
    let options = support::options_for(&cluster).with_layer(layer);
    let client = Client::connect(cluster.endpoints(), options).await.unwrap();
    let key = support::unique("refused");
    client
        .kv()
        .put(key.as_str(), "v", PutOptions::new())
        .await
        .unwrap();
    // The first attempt is refused with `unavailable` (transient): the read goes out again.
    let got = client
        .kv()
        .get(key.as_str(), GetOptions::new())
        .await
        .unwrap();
    assert_eq!(got.kvs[0].value, b"v");
    let ranges = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.ends_with(".KV/Range"))
        .count();
    assert_eq!(ranges, 2, "the refused attempt and its retry");
}
