//! TLS as a connection applies it: the checked certificates, and the
//! process's rustls crypto provider.

use redis::{Client, ConnectionAddr};

use super::Tls;

/// How TLS applies to a connection, once the configuration is checked.
#[derive(Clone)]
pub(super) struct TlsSetup {
    pub(super) certs: Option<redis::TlsCertificates>,
    pub(super) insecure: bool,
}

impl TlsSetup {
    pub(super) fn new(tls: &Tls) -> Self {
        let certs =
            (tls.ca_pem.is_some() || tls.client.is_some()).then(|| redis::TlsCertificates {
                client_tls: tls
                    .client
                    .as_ref()
                    .map(|(cert, key)| redis::ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.clone(),
                    }),
                root_cert: tls.ca_pem.clone(),
            });
        TlsSetup {
            certs,
            insecure: tls.insecure,
        }
    }

    /// A client for `info`, whose address is made TLS.
    pub(super) fn client(&self, mut info: redis::ConnectionInfo) -> redis::RedisResult<Client> {
        let addr = match info.addr().clone() {
            ConnectionAddr::Tcp(host, port) => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: self.insecure,
                tls_params: None,
            },
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: insecure || self.insecure,
                tls_params,
            },
            other => other,
        };
        info = info.set_addr(addr);
        match &self.certs {
            Some(certs) => Client::build_with_tls(info, certs.clone()),
            None => Client::open(info),
        }
    }
}

/// Installs ring's rustls crypto provider when the process has none yet.
pub(super) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may win the race; either provider works.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
