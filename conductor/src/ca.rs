//! The certificate RPCs (magnum/conductor/handlers/ca_conductor.py):
//! `get_ca_certificate`, `sign_certificate` and `rotate_ca_certificate`.
//!
//! Nothing here writes to the database. Keys are read with the caller's
//! context (tenant-scoped, as Python's cert manager does), decrypted and
//! used off the async runtime, and never logged.

use common::certs::store::{self, Owner};
use common::certs::x509::{self, CertError};
use common::config::X509Opts;
use common::db::Db;
use common::db::repo::Scope;
use rpc_schema::ovo::{self, MagnumObject};
use rpc_schema::{Outcome, RemoteFailure, RequestContext};
use serde_json::{Map, Value, json};

/// Statuses from which Magnum lets a CA rotation start: its "completed" group.
const ROTATE_FROM: &[&str] = crate::lifecycle::plan::COMPLETED;

/// Key generation runs at most one per core at a time. A cluster's four
/// RSA-2048 keys cost ~0.6 s of CPU; run for every create of a burst at
/// once (up to a handler slot each, on the blocking pool's threads), they
/// each took ~30 s and crowded out the runtime's own threads (replies,
/// status). Taken in turn, they finish in arrival order at the same total
/// rate, and the runtime keeps its share of the CPU.
fn keygen_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        tokio::sync::Semaphore::new(cores)
    })
}

fn kw(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect()
}

/// What Python raises for each certificate error.
pub fn cert_failure(e: &CertError) -> RemoteFailure {
    match e {
        CertError::InvalidCsr(csr) => RemoteFailure::magnum("InvalidCsr", kw(&[("csr", csr)])),
        CertError::Validation(ext) => {
            RemoteFailure::magnum("CertificateValidationError", kw(&[("extension", ext)]))
        }
        CertError::Value(m) => RemoteFailure::builtin("ValueError", m),
        CertError::Key(m) => RemoteFailure::builtin("ValueError", m),
        CertError::Internal(m) => RemoteFailure::builtin("RuntimeError", m),
    }
}

/// The CA keypair of `cluster` for `ca_cert_type`, read as the caller.
async fn load_ca(
    db: &Db,
    ctx: &RequestContext,
    cluster: &MagnumObject,
    ca_cert_type: Option<&str>,
) -> Result<x509::StoredKeyPair, RemoteFailure> {
    let field = store::ca_ref_field(ca_cert_type);
    store::get_cert(db, &Scope::from_context(ctx), cluster.get_str(field))
        .await
        .map_err(|e| e.to_failure())
}

pub async fn get_ca_certificate(
    db: &Db,
    ctx: &RequestContext,
    cluster: &MagnumObject,
    ca_cert_type: Option<&str>,
) -> Outcome {
    let kp = match load_ca(db, ctx, cluster, ca_cert_type).await {
        Ok(kp) => kp,
        Err(f) => return Outcome::Failure(f),
    };
    // Certificate.from_object_cluster(cluster), then pem.
    let mut cert = MagnumObject::new(&ovo::CERTIFICATE);
    let fields = [
        ("project_id", cluster.get("project_id").cloned()),
        ("user_id", cluster.get("user_id").cloned()),
        ("cluster_uuid", cluster.get("uuid").cloned()),
        ("pem", Some(json!(kp.certificate))),
    ];
    for (k, v) in fields {
        if let Err(e) = cert.set(k, v.unwrap_or(Value::Null)) {
            return Outcome::Failure(e.to_failure());
        }
    }
    Outcome::Result(cert.to_primitive())
}

pub async fn sign_certificate(
    db: &Db,
    opts: &X509Opts,
    ctx: &RequestContext,
    cluster: &MagnumObject,
    mut certificate: MagnumObject,
) -> Outcome {
    let ca_cert_type = certificate
        .get_str("ca_cert_type")
        .unwrap_or("kubernetes")
        .to_string();
    let kp = match load_ca(db, ctx, cluster, Some(&ca_cert_type)).await {
        Ok(kp) => kp,
        Err(f) => return Outcome::Failure(f),
    };
    let csr = certificate.get_str("csr").unwrap_or_default().to_string();
    let issuer = store::issuer_name(cluster);
    let opts = opts.clone();
    let signed = tokio::task::spawn_blocking(move || {
        let key = store::private_key(&kp)?;
        x509::sign_csr(&csr, &issuer, &key, &opts)
    })
    .await;
    let pem = match signed {
        Ok(Ok(pem)) => pem,
        Ok(Err(e)) => {
            tracing::info!(cluster = ?cluster.get_str("uuid"), error = %e, "CSR refused");
            return Outcome::Failure(cert_failure(&e));
        }
        Err(e) => {
            return Outcome::Failure(RemoteFailure::builtin(
                "RuntimeError",
                &format!("signing task failed: {e}"),
            ));
        }
    };
    match certificate.set("pem", json!(pem)) {
        Ok(()) => Outcome::Result(certificate.to_primitive()),
        Err(e) => Outcome::Failure(e.to_failure()),
    }
}

/// Rotation is not implemented by this conductor (nor by either CAPI
/// driver). Unlike Python, nothing is generated or saved first: the
/// cluster keeps the CAs its nodes trust.
pub fn rotate_ca_certificate(cluster: &MagnumObject) -> Outcome {
    let status = cluster.get_str("status").unwrap_or("None");
    if !ROTATE_FROM.contains(&status) {
        return Outcome::Failure(RemoteFailure::not_supported(&format!(
            "Updating a cluster when status is \"{status}\""
        )));
    }
    Outcome::Failure(RemoteFailure::magnum_with_message(
        "NotSupported",
        "'rotate_ca_certificate' is not supported by this driver.",
        Map::new(),
    ))
}

/// `generate_certificates_to_cluster` for `cluster` (used by cluster
/// create): generate off the runtime, store as `owner` (under `uuids`, or
/// fresh ones), set the refs.
pub async fn generate_certificates_to_cluster(
    db: &Db,
    opts: &X509Opts,
    owner: &Owner,
    cluster: &mut MagnumObject,
    uuids: Option<[String; 4]>,
) -> Result<(), ToClusterError> {
    let issuer = store::issuer_name(cluster);
    let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
    let failed = || {
        RemoteFailure::magnum(
            "CertificatesToClusterFailed",
            kw(&[("cluster_uuid", &uuid)]),
        )
    };
    let opts = opts.clone();
    let slot = keygen_slots()
        .acquire()
        .await
        .map_err(|_| ToClusterError::Failed(failed()))?;
    let certs = tokio::task::spawn_blocking(move || store::generate_cluster_certs(&issuer, &opts))
        .await
        .map_err(|_| ToClusterError::Failed(failed()))?;
    drop(slot);
    let certs = certs.map_err(|e| {
        tracing::error!(cluster = %uuid, error = %e, "certificate generation failed");
        ToClusterError::Failed(failed())
    })?;
    store::store_cluster_certs(db, owner, cluster, &certs, uuids)
        .await
        .map_err(|e| {
            tracing::error!(cluster = %uuid, error = %e, "storing certificates failed");
            if e.is_transient() {
                ToClusterError::Unavailable(e)
            } else {
                ToClusterError::Failed(failed())
            }
        })
}

/// Why a cluster's certificates were not made and stored.
#[derive(Debug)]
pub enum ToClusterError {
    /// Magnum's `CertificatesToClusterFailed`.
    Failed(RemoteFailure),
    /// The database is unavailable: nothing is lost by trying again.
    Unavailable(common::db::DbError),
}

impl ToClusterError {
    /// As the RPC layer reports it.
    pub fn to_failure(&self) -> RemoteFailure {
        match self {
            ToClusterError::Failed(f) => f.clone(),
            ToClusterError::Unavailable(e) => e.to_failure(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_refused_before_anything() {
        let mut c = MagnumObject::new(&ovo::CLUSTER);
        c.set("status", json!("CREATE_IN_PROGRESS")).unwrap();
        let Outcome::Failure(f) = rotate_ca_certificate(&c) else {
            panic!("refused")
        };
        assert_eq!(f.class, "NotSupported");
        assert!(f.message.contains("CREATE_IN_PROGRESS"), "{}", f.message);
        c.set("status", json!("CREATE_COMPLETE")).unwrap();
        let Outcome::Failure(f) = rotate_ca_certificate(&c) else {
            panic!("refused")
        };
        assert_eq!(
            f.message,
            "'rotate_ca_certificate' is not supported by this driver."
        );
        assert_eq!(f.http_code(), 400);
    }

    #[test]
    fn failures_are_magnum_classes() {
        let f = cert_failure(&CertError::InvalidCsr("x".into()));
        assert_eq!((f.class.as_str(), f.http_code()), ("InvalidCsr", 400));
        let f = cert_failure(&CertError::Validation("keyUsage".into()));
        assert_eq!(f.class, "CertificateValidationError");
    }
}
