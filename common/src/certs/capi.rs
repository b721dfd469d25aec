//! The four management-cluster Secrets that make kubeadm use Magnum's CAs
//! (`<cluster>-ca`, `-etcd`, `-proxy`, `-sa`, type `cluster.x-k8s.io/secret`,
//! `tls.crt` + decrypted `tls.key`), as both existing CAPI drivers write
//! them; the client keypair doubles as the service-account key pair.
//! Pure: the lifecycle applies what this renders.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value, json};

use super::der::base64;
use super::x509::PrivateKey;

/// One certificate with its decrypted key.
pub struct CertAndKey<'a> {
    pub certificate: &'a str,
    pub key: &'a PrivateKey,
}

/// A rendered Secret manifest. `Debug` never shows the data.
pub struct RenderedSecret {
    pub name: String,
    pub manifest: Value,
}

impl fmt::Debug for RenderedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RenderedSecret")
            .field("name", &self.name)
            .field("data", &"<redacted>")
            .finish()
    }
}

/// Render the four Secrets for CAPI cluster `cluster_name` in `namespace`.
/// `labels` are added to `cluster.x-k8s.io/cluster-name`.
pub fn ca_secrets(
    cluster_name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    ca: CertAndKey<'_>,
    etcd_ca: CertAndKey<'_>,
    front_proxy_ca: CertAndKey<'_>,
    service_account: CertAndKey<'_>,
) -> Vec<RenderedSecret> {
    let mut all_labels: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    all_labels.insert("cluster.x-k8s.io/cluster-name".into(), json!(cluster_name));
    [
        ("ca", ca),
        ("etcd", etcd_ca),
        ("proxy", front_proxy_ca),
        ("sa", service_account),
    ]
    .into_iter()
    .map(|(suffix, pair)| {
        let name = format!("{cluster_name}-{suffix}");
        let mut crt = pair.certificate.trim_end().to_string();
        crt.push('\n');
        let manifest = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": all_labels},
            "type": "cluster.x-k8s.io/secret",
            "data": {
                "tls.crt": base64(crt.as_bytes()),
                "tls.key": base64(pair.key.to_pem().expose().as_bytes()),
            },
        });
        RenderedSecret { name, manifest }
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::x509;
    use crate::config::X509Opts;

    #[test]
    fn four_secrets_never_printed() {
        let (ca, key) = x509::generate_ca("demo", &X509Opts::default()).unwrap();
        let pair = || CertAndKey {
            certificate: &ca.certificate,
            key: &key,
        };
        let labels = BTreeMap::from([(
            "magnum.openstack.org/cluster-uuid".to_string(),
            "u".to_string(),
        )]);
        let s = ca_secrets(
            "demo-abc",
            "magnum-system",
            &labels,
            pair(),
            pair(),
            pair(),
            pair(),
        );
        let names: Vec<&str> = s.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "demo-abc-ca",
                "demo-abc-etcd",
                "demo-abc-proxy",
                "demo-abc-sa"
            ]
        );
        let m = &s[0].manifest;
        assert_eq!(m["type"], "cluster.x-k8s.io/secret");
        assert_eq!(
            m["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
            "demo-abc"
        );
        assert_eq!(
            m["metadata"]["labels"]["magnum.openstack.org/cluster-uuid"],
            "u"
        );
        assert!(
            m["data"]["tls.key"]
                .as_str()
                .unwrap()
                .starts_with("LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t")
        );
        let debug = format!("{s:?}");
        assert!(!debug.contains("LS0t") && debug.contains("<redacted>"));
    }
}
