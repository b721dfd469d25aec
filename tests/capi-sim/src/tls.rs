//! HTTPS on loopback for the admission webhooks and the apiserver proxy: a
//! throwaway CA and a serving certificate for 127.0.0.1/localhost, and an
//! HTTP/1.1 accept loop over TLS (I/O).

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client CA: {0}")]
    ClientCa(String),
}

/// A serving identity for loopback: the CA a client must trust (PEM) and
/// the server's configuration.
pub struct Identity {
    pub ca_pem: String,
    pub config: Arc<rustls::ServerConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A new CA and a certificate it signs for 127.0.0.1 and localhost. With
/// `client_roots`, clients presenting a certificate must present one those
/// roots issued (clients without one are let in: the upstream decides).
pub fn identity(client_roots: Option<Vec<CertificateDer<'static>>>) -> Result<Identity, TlsError> {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "capi-sim test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = rcgen::KeyPair::generate()?;
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "capi-sim");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    let chain = vec![cert.der().clone()];
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)?;
    let mut config = match client_roots {
        Some(roots) => {
            let mut store = RootCertStore::empty();
            for r in roots {
                store
                    .add(r)
                    .map_err(|e| TlsError::ClientCa(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::ClientCa(e.to_string()))?;
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key_der)?
        }
        None => builder
            .with_no_client_auth()
            .with_single_cert(chain, key_der)?,
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Identity {
        ca_pem: ca.pem(),
        config: Arc::new(config),
    })
}

/// Serve HTTP/1.1 over TLS on `listener` with `handler`, until the task is
/// dropped. Each connection gets its own task.
pub async fn serve<H, F>(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    handler: H,
) where
    H: Fn(hyper::Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = hyper::Response<Body>> + Send + 'static,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let handler = handler.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(error = %e, %peer, "TLS handshake failed");
                    return;
                }
            };
            let svc = hyper::service::service_fn(move |req| {
                let h = handler.clone();
                async move { Ok::<_, Infallible>(h(req, peer).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .await
            {
                tracing::debug!(error = %e, %peer, "connection ended");
            }
        });
    }
}

/// A whole body from bytes.
pub fn full(b: impl Into<Bytes>) -> Body {
    use http_body_util::BodyExt;
    http_body_util::Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A JSON response.
pub fn json_response(code: u16, v: &serde_json::Value) -> hyper::Response<Body> {
    let mut r = hyper::Response::new(full(v.to_string()));
    *r.status_mut() =
        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// Certificates of a PEM bundle.
pub fn pem_certs(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect()
}
