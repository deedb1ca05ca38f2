//! TLS settings: which CA to trust and which client certificate to present, read once at connect.

use std::path::PathBuf;

#[cfg(feature = "tls")]
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::error::{Error, Result};

/// TLS settings (rustls). Server certificates are always verified: against `ca_file` when given,
/// else against the system's roots.
///
/// They need the `tls` feature (on by default): without it, [`Client::connect`] with TLS
/// options fails with [`Error::TlsNotCompiled`].
///
/// [`Client::connect`]: crate::Client::connect
///
/// ```
/// let tls = etcd_ha::TlsOptions::new()
///     .with_ca_file("/etc/etcd/ca.pem")
///     .with_client_cert("/etc/etcd/client.pem", "/etc/etcd/client-key.pem")
///     .with_server_name("etcd.internal");
/// ```
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// PEM file with the CA certificate(s) that signed the members' certificates.
    pub(crate) ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS.
    pub(crate) client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`; `Debug` shows the path, never the key.
    pub(crate) client_key: Option<PathBuf>,
    /// Name to verify in the server certificate instead of the endpoint's host.
    pub(crate) server_name: Option<String>,
}

impl TlsOptions {
    /// No CA (system roots), no client certificate, host name from the endpoint.
    ///
    /// ```
    /// let tls = etcd_ha::TlsOptions::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Trust the CA certificates in this PEM file.
    ///
    /// ```
    /// let tls = etcd_ha::TlsOptions::new().with_ca_file("ca.pem");
    /// ```
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Present this client certificate and key (PEM files) for mutual TLS.
    ///
    /// ```
    /// let tls = etcd_ha::TlsOptions::new().with_client_cert("client.pem", "client-key.pem");
    /// ```
    pub fn with_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert = Some(cert.into());
        self.client_key = Some(key.into());
        self
    }

    /// Verify the server certificate against this name instead of the endpoint's host.
    ///
    /// ```
    /// let tls = etcd_ha::TlsOptions::new().with_server_name("localhost");
    /// ```
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Without the `tls` feature there is nothing to read the files into.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn client_config(&self) -> Result<std::convert::Infallible> {
        Err(Error::TlsNotCompiled)
    }

    /// Read the TLS files once, at connect, into tonic's rustls configuration.
    #[cfg(feature = "tls")]
    pub(crate) fn client_config(&self) -> Result<ClientTlsConfig> {
        let read = |path: &std::path::Path| {
            let bytes = std::fs::read(path).map_err(|source| Error::TlsFile {
                path: path.to_owned(),
                source,
            })?;
            // tonic only finds out later that a file holds no PEM; say so now, with the path.
            if !bytes.windows(10).any(|w| w == b"-----BEGIN") {
                return Err(Error::TlsFile {
                    path: path.to_owned(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "no PEM block in file",
                    ),
                });
            }
            Ok(bytes)
        };
        let mut config = ClientTlsConfig::new();
        config = match &self.ca_file {
            Some(ca) => config.ca_certificate(Certificate::from_pem(read(ca)?)),
            None => config.with_native_roots(),
        };
        if let (Some(cert), Some(key)) = (&self.client_cert, &self.client_key) {
            config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(name) = &self.server_name {
            config = config.domain_name(name.clone());
        }
        Ok(config)
    }
}
