//! Test certificates: a throw-away CA, a server certificate for 127.0.0.1, and a client certificate.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::TestkitError;

/// Default common name of the client certificate.
///
/// Not "root": with `--client-cert-auth`, etcd treats the certificate's CN as the user name of
/// any request that carries no auth token, so a CN of "root" would let unauthenticated requests
/// through with full rights and the auth tests could not observe a rejection.
pub(crate) const DEFAULT_CLIENT_CN: &str = "etcd-ha-testkit-client";

/// The PEM files of a TLS cluster, all inside the cluster's temporary directory.
///
/// # Example
///
/// ```no_run
/// use etcd_ha::testkit::Cluster;
///
/// # async fn demo() {
/// let cluster = Cluster::builder().tls(true).client_cert_auth(true).start().await.unwrap();
/// let tls = cluster.tls().unwrap();
/// let ca = std::fs::read_to_string(&tls.ca).unwrap();
/// assert_eq!(ca, tls.ca_pem);
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TlsFiles {
    /// The CA certificate that signed the server and client certificates.
    pub ca: PathBuf,
    /// The same CA certificate, as PEM text (what a client's trust store needs).
    pub ca_pem: String,
    /// Client certificate (PEM), signed by the CA; its CN is the builder's `client_cert_cn`.
    pub client_cert: PathBuf,
    /// The client certificate's private key (PKCS#8 PEM).
    pub client_key: PathBuf,
    /// Server certificate (PEM) for SAN IP 127.0.0.1 and DNS localhost (and, in an isolated
    /// network, every member's client address), signed by the CA.
    pub server_cert: PathBuf,
    /// The server certificate's private key (PKCS#8 PEM).
    pub server_key: PathBuf,
}

impl TlsFiles {
    /// A tonic TLS config that trusts the CA and presents the client certificate.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use etcd_ha::testkit::Cluster;
    /// use tonic::transport::Endpoint;
    ///
    /// # async fn demo() {
    /// let cluster = Cluster::builder().tls(true).start().await.unwrap();
    /// let tls = cluster.tls().unwrap().client_tls_config().unwrap();
    /// let channel = Endpoint::from_shared(cluster.endpoint(0)).unwrap()
    ///     .tls_config(tls).unwrap()
    ///     .connect().await.unwrap();
    /// # drop(channel);
    /// # }
    /// ```
    pub fn client_tls_config(&self) -> Result<ClientTlsConfig, TestkitError> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|e| TestkitError::io("read", path, e))
        };
        Ok(ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .identity(Identity::from_pem(
                read(&self.client_cert)?,
                read(&self.client_key)?,
            )))
    }

    /// Writes a fresh CA, server and client certificate into `dir`; the server certificate is
    /// also valid for `extra_ips` (the members' addresses in an isolated network).
    pub(crate) fn generate(
        dir: &Path,
        client_cn: &str,
        extra_ips: &[IpAddr],
    ) -> Result<TlsFiles, TestkitError> {
        let (ca_pem, ca) = new_ca("etcd-ha testkit CA")?;

        let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        names.extend(extra_ips.iter().map(IpAddr::to_string));
        let mut server = CertificateParams::new(names)?;
        server
            .distinguished_name
            .push(DnType::CommonName, "etcd-ha testkit server");
        // ClientAuth too: etcd's gRPC gateway dials its own client port with the server
        // certificate, which `--client-cert-auth` then checks as a client certificate.
        server.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &ca)?;

        let mut client = CertificateParams::new(vec![client_cn.to_string()])?;
        client
            .distinguished_name
            .push(DnType::CommonName, client_cn);
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate()?;
        let client_cert = client.signed_by(&client_key, &ca)?;

        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            ca_pem,
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client-key.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server-key.pem"),
        };
        write(&files.ca, &files.ca_pem)?;
        write(&files.server_cert, &server_cert.pem())?;
        write(&files.server_key, &server_key.serialize_pem())?;
        write(&files.client_cert, &client_cert.pem())?;
        write(&files.client_key, &client_key.serialize_pem())?;
        Ok(files)
    }
}

/// Writes a new CA certificate to `dir/unrelated-ca.pem`: one that signed nothing a testkit
/// cluster uses, for tests that check a client refuses a server it should not trust.
///
/// # Example
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let wrong_ca = etcd_ha::testkit::generate_unrelated_ca(dir.path()).unwrap();
/// let pem = std::fs::read_to_string(wrong_ca).unwrap();
/// assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
/// ```
pub fn generate_unrelated_ca(dir: &Path) -> Result<PathBuf, TestkitError> {
    let (pem, _issuer) = new_ca("etcd-ha testkit unrelated CA")?;
    let path = dir.join("unrelated-ca.pem");
    write(&path, &pem)?;
    Ok(path)
}

/// A self-signed CA: its PEM, and the issuer that signs leaf certificates with it.
fn new_ca(name: &str) -> Result<(String, Issuer<'static, KeyPair>), TestkitError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), Issuer::new(params, key)))
}

fn write(path: &Path, contents: &str) -> Result<(), TestkitError> {
    std::fs::write(path, contents).map_err(|e| TestkitError::io("write", path, e))
}
