//! Dialing a member's unix socket (`unix://` endpoints): the connector tonic's channel uses.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

/// A tower `Service<Uri>` that opens a new connection to one socket path, whatever the URI
/// (HTTP/2 needs one for its `:authority`; the socket is the address).
#[derive(Clone, Debug)]
pub(crate) struct Connector {
    /// The socket, as etcd names it (relative paths from the client's working directory, like
    /// etcd's and Go's clientv3).
    path: Arc<PathBuf>,
}

impl Connector {
    /// A connector for the socket at `path`.
    pub(crate) fn new(path: &str) -> Self {
        Connector {
            path: Arc::new(PathBuf::from(path)),
        }
    }
}

impl tower::Service<Uri> for Connector {
    type Response = TokioIo<UnixStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.path.clone();
        // A missing socket fails at once (NotFound, ConnectionRefused for a stale file): the
        // endpoint is then unhealthy like a member that refuses TCP connections.
        Box::pin(async move { UnixStream::connect(&*path).await.map(TokioIo::new) })
    }
}

#[cfg(test)]
mod tests {
    use tower::{Service, ServiceExt};

    use super::*;

    #[tokio::test]
    async fn connects_to_the_socket_and_fails_fast_without_one() {
        let dir = std::env::temp_dir().join(format!(
            "etcd-ha-unix-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let mut connector = Connector::new(path.to_str().unwrap());
        let uri = Uri::from_static("http://localhost");
        let accepted = tokio::spawn(async move { listener.accept().await.map(|_| ()) });
        connector
            .ready()
            .await
            .unwrap()
            .call(uri.clone())
            .await
            .unwrap();
        accepted.await.unwrap().unwrap();

        let mut missing = Connector::new(dir.join("absent.sock").to_str().unwrap());
        let err = missing.ready().await.unwrap().call(uri).await.unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
