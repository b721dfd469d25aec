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

/// The `<cluster>-kubeconfig` Secret CAPI's controllers read to reach the
/// workload cluster, written as CAPI writes it (`util/kubeconfig`,
/// `GenerateSecretWithOwner` and `New`: key `value`, type
/// `cluster.x-k8s.io/secret`, the cluster label, a `system:masters`
/// client named `<cluster>-admin`), with `server` of our choosing: KCP
/// adopts such a Secret and keeps its server when it rotates the client
/// certificate (`reconcileKubeconfig`, `RegenerateSecret`). The kubeconfig
/// is JSON, which `clientcmd.Load` reads as it reads YAML.
pub fn kubeconfig_secret(
    cluster_name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    server: &str,
    ca_certificate: &str,
    client: CertAndKey<'_>,
) -> RenderedSecret {
    let mut all_labels: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    all_labels.insert("cluster.x-k8s.io/cluster-name".into(), json!(cluster_name));
    let config = kubeconfig(cluster_name, server, ca_certificate, client);
    let name = format!("{cluster_name}-kubeconfig");
    let manifest = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": all_labels},
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": base64(config.expose().as_bytes())},
    });
    RenderedSecret { name, manifest }
}

/// The kubeconfig itself (JSON; it holds a private key).
pub fn kubeconfig(
    cluster_name: &str,
    server: &str,
    ca_certificate: &str,
    client: CertAndKey<'_>,
) -> crate::secret::Secret {
    let user = format!("{cluster_name}-admin");
    let context = format!("{user}@{cluster_name}");
    let pem = |s: &str| {
        let mut s = s.trim_end().to_string();
        s.push('\n');
        base64(s.as_bytes())
    };
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {
            "server": server,
            "certificate-authority-data": pem(ca_certificate)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": pem(client.certificate),
            "client-key-data": base64(client.key.to_pem().expose().as_bytes())}}],
        "contexts": [{"name": context, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": context,
    });
    crate::secret::Secret::new(config.to_string())
}

/// The `server` of a kubeconfig CAPI or we wrote (JSON, or clientcmd's
/// YAML with its one cluster), if there is exactly one.
pub fn kubeconfig_server(kubeconfig: &str) -> Option<String> {
    if let Ok(v) = serde_json::from_str::<Value>(kubeconfig) {
        let clusters = v.get("clusters")?.as_array()?;
        return match clusters.as_slice() {
            [one] => one.pointer("/cluster/server")?.as_str().map(str::to_string),
            _ => None,
        };
    }
    let servers: Vec<&str> = kubeconfig
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("server:"))
        .map(|s| s.trim().trim_matches('"').trim_matches('\''))
        .collect();
    match servers.as_slice() {
        [one] => Some((*one).to_string()),
        _ => None,
    }
}

/// `kubeconfig` with its one `server` replaced (None when it has not
/// exactly one).
pub fn with_kubeconfig_server(kubeconfig: &str, server: &str) -> Option<String> {
    if let Ok(mut v) = serde_json::from_str::<Value>(kubeconfig) {
        let clusters = v.get_mut("clusters")?.as_array_mut()?;
        if clusters.len() != 1 {
            return None;
        }
        *clusters.first_mut()?.pointer_mut("/cluster/server")? = json!(server);
        return Some(v.to_string());
    }
    kubeconfig_server(kubeconfig)?;
    let out: Vec<String> = kubeconfig
        .lines()
        .map(|l| match l.trim_start().strip_prefix("server:") {
            Some(_) => {
                let indent = &l[..l.len() - l.trim_start().len()];
                format!("{indent}server: {server}")
            }
            None => l.to_string(),
        })
        .collect();
    let mut s = out.join("\n");
    if kubeconfig.ends_with('\n') {
        s.push('\n');
    }
    Some(s)
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

    #[test]
    fn a_kubeconfig_secret_as_capi_writes_it_with_our_server() {
        let opts = X509Opts::default();
        let (ca, ca_key) = x509::generate_ca("demo", &opts).unwrap();
        let client =
            x509::generate_client("demo", "kubernetes-admin", "system:masters", &ca_key, &opts)
                .unwrap();
        let key = x509::decrypt_private_key(
            client.private_key.expose(),
            Some(client.passphrase.expose()),
        )
        .unwrap();
        let pair = || CertAndKey {
            certificate: &client.certificate,
            key: &key,
        };
        let server = "https://demo-abc-apiserver.magnum-p.svc:6443";
        let s = kubeconfig_secret(
            "demo-abc",
            "magnum-p",
            &BTreeMap::new(),
            server,
            &ca.certificate,
            pair(),
        );
        assert_eq!(s.name, "demo-abc-kubeconfig");
        assert_eq!(s.manifest["type"], "cluster.x-k8s.io/secret");
        assert!(!format!("{s:?}").contains("BEGIN"));
        let text = kubeconfig("demo-abc", server, &ca.certificate, pair());
        assert_eq!(
            s.manifest["data"]["value"],
            base64(text.expose().as_bytes()),
            "the key is the client's own: one key, one kubeconfig"
        );
        let text = text.expose().to_string();
        let cfg: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(cfg["current-context"], "demo-abc-admin@demo-abc");
        assert_eq!(cfg["users"][0]["name"], "demo-abc-admin");
        assert_eq!(
            kubeconfig_server(&text).as_deref(),
            Some("https://demo-abc-apiserver.magnum-p.svc:6443")
        );
        let moved = with_kubeconfig_server(&text, "https://x:6443").unwrap();
        assert_eq!(kubeconfig_server(&moved).as_deref(), Some("https://x:6443"));
    }

    #[test]
    fn capis_yaml_kubeconfig_server_is_found_and_replaced() {
        let yaml = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: LS0t\n    server: https://10.0.0.10:6443\n  name: k1\nkind: Config\n";
        assert_eq!(
            kubeconfig_server(yaml).as_deref(),
            Some("https://10.0.0.10:6443")
        );
        let moved = with_kubeconfig_server(yaml, "https://k1-apiserver.p.svc:6443").unwrap();
        assert!(moved.contains("\n    server: https://k1-apiserver.p.svc:6443\n"));
        assert!(moved.ends_with('\n'));
        let two =
            "clusters:\n- cluster:\n    server: https://a\n- cluster:\n    server: https://b\n";
        assert_eq!(kubeconfig_server(two), None);
        assert_eq!(with_kubeconfig_server(two, "https://c"), None);
    }
}
