//! The `x509keypair` cert manager (magnum/common/cert_manager/
//! x509keypair_cert_manager.py) and `generate_certificates_to_cluster`.
//!
//! Rows hold the certificate PEM (no trailing newline), the encrypted key
//! PEM, the passphrase in plain text, NULL intermediates, and the project
//! and user of the context that created them; reads are tenant-scoped with
//! the caller's context, so another project's CA is `X509KeyPairNotFound`.

use rpc_schema::ovo::{self, MagnumObject};
use serde_json::{Value, json};

use super::x509::{self, CertError, PrivateKey, StoredKeyPair};
use crate::config::X509Opts;
use crate::db::model::X509KEYPAIR;
use crate::db::repo::{self, Scope};
use crate::db::{Db, DbError};
use crate::secret::Secret;

/// Who owns stored rows: the request context's project and user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub project_id: Option<String>,
    pub user_id: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Cert(#[from] CertError),
}

/// `store_cert`: INSERT a row, return its uuid (the `*_cert_ref`).
pub async fn store_cert(db: &Db, owner: &Owner, kp: &StoredKeyPair) -> Result<String, DbError> {
    store_cert_as(db, owner, kp, &uuid::Uuid::new_v4().to_string()).await
}

/// The uuids of a cluster's four keypairs (CA, etcd CA, front-proxy CA,
/// client), derived from the cluster uuid: a create interrupted between
/// storing the keypairs and saving the refs finds (and replaces) its own
/// leftovers instead of leaking them. Random-looking version-4 uuids, as
/// Magnum's.
pub fn cluster_keypair_uuids(cluster_uuid: &str) -> [String; 4] {
    ["ca", "etcd-ca", "front-proxy-ca", "client"].map(|role| {
        let d = aws_lc_rs::digest::digest(
            &aws_lc_rs::digest::SHA256,
            format!("magnum-conductor/x509keypair/{cluster_uuid}/{role}").as_bytes(),
        );
        let mut b = [0u8; 16];
        b.copy_from_slice(&d.as_ref()[..16]);
        uuid::Builder::from_random_bytes(b).into_uuid().to_string()
    })
}

/// [`store_cert`] with a given uuid.
pub async fn store_cert_as(
    db: &Db,
    owner: &Owner,
    kp: &StoredKeyPair,
    uuid: &str,
) -> Result<String, DbError> {
    let uuid = uuid.to_string();
    let mut obj = MagnumObject::new(&ovo::X509_KEY_PAIR);
    let set = |obj: &mut MagnumObject, k: &str, v: Value| {
        obj.set(k, v)
            .map_err(|e| DbError::magnum("InvalidParameterValue", &[("err", &e.to_string())]))
    };
    set(&mut obj, "uuid", json!(uuid))?;
    set(&mut obj, "certificate", json!(kp.certificate))?;
    set(&mut obj, "private_key", json!(kp.private_key.expose()))?;
    set(
        &mut obj,
        "private_key_passphrase",
        json!(kp.passphrase.expose()),
    )?;
    set(&mut obj, "intermediates", Value::Null)?;
    set(&mut obj, "project_id", json!(owner.project_id))?;
    set(&mut obj, "user_id", json!(owner.user_id))?;
    repo::create(db, &X509KEYPAIR, &obj).await?;
    Ok(uuid)
}

/// `get_cert(ref, context)`: the stored row, tenant-scoped.
pub async fn get_cert(
    db: &Db,
    scope: &Scope,
    cert_ref: Option<&str>,
) -> Result<StoredKeyPair, DbError> {
    let Some(r) = cert_ref else {
        return Err(DbError::magnum(
            "X509KeyPairNotFound",
            &[("x509keypair", "None")],
        ));
    };
    // Magnum looks refs up by uuid only: anything else is simply not found.
    if uuid::Uuid::try_parse(r).is_err() {
        return Err(DbError::magnum(
            "X509KeyPairNotFound",
            &[("x509keypair", r)],
        ));
    }
    let obj = repo::get(db, &X509KEYPAIR, scope, r).await?;
    let s = |k: &str| obj.get_str(k).unwrap_or_default().to_string();
    Ok(StoredKeyPair {
        certificate: s("certificate"),
        private_key: Secret::new(s("private_key")),
        passphrase: Secret::new(s("private_key_passphrase")),
    })
}

/// The cluster field holding the CA for `ca_cert_type`, as Magnum picks it.
pub fn ca_ref_field(ca_cert_type: Option<&str>) -> &'static str {
    match ca_cert_type {
        Some("etcd") => "etcd_ca_cert_ref",
        Some("front_proxy" | "front-proxy") => "front_proxy_ca_cert_ref",
        _ => "ca_cert_ref",
    }
}

/// `_get_issuer_name`: the cluster's name, or its uuid when it has none.
pub fn issuer_name(cluster: &MagnumObject) -> String {
    cluster
        .get_str("name")
        .or_else(|| cluster.get_str("uuid"))
        .unwrap_or_default()
        .to_string()
}

/// The decrypted private key of a stored pair.
pub fn private_key(kp: &StoredKeyPair) -> Result<PrivateKey, CertError> {
    let pass = kp.passphrase.expose();
    x509::decrypt_private_key(kp.private_key.expose(), (!pass.is_empty()).then_some(pass))
}

/// The four generated pairs, before they are stored.
pub struct ClusterCerts {
    pub ca: StoredKeyPair,
    pub etcd_ca: StoredKeyPair,
    pub front_proxy_ca: StoredKeyPair,
    pub client: StoredKeyPair,
}

/// Generate the kubernetes, etcd and front-proxy CAs and the
/// `CN=admin, O=system:masters` client certificate. CPU-heavy: run it off
/// the async runtime.
pub fn generate_cluster_certs(issuer: &str, opts: &X509Opts) -> Result<ClusterCerts, CertError> {
    let (ca, ca_key) = x509::generate_ca(issuer, opts)?;
    let (etcd_ca, _) = x509::generate_ca(issuer, opts)?;
    let (front_proxy_ca, _) = x509::generate_ca(issuer, opts)?;
    let client = x509::generate_client(issuer, "admin", "system:masters", &ca_key, opts)?;
    Ok(ClusterCerts {
        ca,
        etcd_ca,
        front_proxy_ca,
        client,
    })
}

/// `generate_certificates_to_cluster`: store the four pairs (in Magnum's
/// order, under `uuids` or fresh ones) and set the cluster's four refs
/// (the caller saves the cluster).
pub async fn store_cluster_certs(
    db: &Db,
    owner: &Owner,
    cluster: &mut MagnumObject,
    certs: &ClusterCerts,
    uuids: Option<[String; 4]>,
) -> Result<(), DbError> {
    let fresh = || uuid::Uuid::new_v4().to_string();
    let uuids = uuids.unwrap_or_else(|| [fresh(), fresh(), fresh(), fresh()]);
    let ca = store_cert_as(db, owner, &certs.ca, &uuids[0]).await?;
    let etcd = store_cert_as(db, owner, &certs.etcd_ca, &uuids[1]).await?;
    let fp = store_cert_as(db, owner, &certs.front_proxy_ca, &uuids[2]).await?;
    let client = store_cert_as(db, owner, &certs.client, &uuids[3]).await?;
    for (field, v) in [
        ("ca_cert_ref", ca),
        ("magnum_cert_ref", client),
        ("etcd_ca_cert_ref", etcd),
        ("front_proxy_ca_cert_ref", fp),
    ] {
        cluster
            .set(field, json!(v))
            .map_err(|e| DbError::magnum("InvalidParameterValue", &[("err", &e.to_string())]))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keypair_uuids_are_stable_distinct_v4() {
        let a = cluster_keypair_uuids("5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e");
        assert_eq!(
            a,
            cluster_keypair_uuids("5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e")
        );
        assert_ne!(
            a,
            cluster_keypair_uuids("0b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e")
        );
        let set: std::collections::HashSet<_> = a.iter().collect();
        assert_eq!(set.len(), 4);
        for u in &a {
            assert_eq!(uuid::Uuid::parse_str(u).unwrap().get_version_num(), 4);
        }
    }

    #[test]
    fn ca_choice_follows_magnum() {
        assert_eq!(ca_ref_field(None), "ca_cert_ref");
        assert_eq!(ca_ref_field(Some("kubernetes")), "ca_cert_ref");
        assert_eq!(ca_ref_field(Some("etcd")), "etcd_ca_cert_ref");
        assert_eq!(ca_ref_field(Some("front-proxy")), "front_proxy_ca_cert_ref");
        assert_eq!(ca_ref_field(Some("front_proxy")), "front_proxy_ca_cert_ref");
        assert_eq!(ca_ref_field(Some("bogus")), "ca_cert_ref");
    }
}
