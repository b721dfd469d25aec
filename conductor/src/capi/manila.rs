//! `manila_csi_enabled` (pure): Manila CSI for NFS shares, as vexxhost
//! magnum-cluster-api gives it (`magnum_cluster_api/resources.py`,
//! `manila.is_enabled` and the `storageclass-share-*` objects).
//!
//! - cloud-provider-openstack's `openstack-manila-csi` chart (a
//!   HelmChartProxy), forwarding NFS to the node plugin of
//!   kubernetes-csi's `csi-driver-nfs` (another HelmChartProxy) at its
//!   default socket (`/var/lib/kubelet/plugins/csi-nfsplugin/csi.sock`,
//!   the chart's `shareProtocols[].fwdNodePluginEndpoint`); the plugin's
//!   `clusterID` is the cluster's identity, so the shares it makes carry
//!   `manila.csi.openstack.org/cluster=<identity>` metadata;
//! - a ClusterResourceSet (`Reconcile`: a rotated credential reaches the
//!   cluster) applying a Secret of ours: `kube-system/csi-manila-secrets`
//!   (the cluster's application credential in the plugin's `os-*` keys,
//!   cloud-provider-openstack `pkg/client/client.go` `AuthOpts`; a private
//!   CA as `os-certAuthority`, its contents) and, when
//!   `manila_csi_share_network_id` is set, one StorageClass per Manila
//!   share type the cluster's project sees (`share-<type>`, provisioner
//!   `nfs.manila.csi.openstack.org`, the share network and the secret for
//!   every CSI call, as vexxhost's).

use serde_json::{Value, json};

use super::addons::{AddonCharts, CloudConfig, hcp, mirrored, resource_set, yaml_tree};
use super::infra_labels::Manila;
use super::render::ClusterInput;

/// The CSI driver name of the NFS protocol (the chart's `driverName`
/// prefixed by the protocol, lowercased).
pub const PROVISIONER: &str = "nfs.manila.csi.openstack.org";
/// The workload Secret every StorageClass names.
pub const SECRET: &str = "csi-manila-secrets";

/// A share type's name as a DNS label: lowercase, runs of anything else
/// than letters and digits as one '-' (vexxhost `convert_to_rfc1123`).
pub fn rfc1123(name: &str) -> String {
    let mut out = String::new();
    for ch in name.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut s = out.trim_matches('-').to_string();
    s.truncate(57);
    s.trim_end_matches('-').to_string()
}

/// The objects `kube-system/csi-manila-secrets` and the StorageClasses.
pub fn workload_manifests(
    m: &Manila,
    cloud: &CloudConfig,
    verify: bool,
    share_types: &[String],
) -> Vec<Value> {
    let mut data = serde_json::Map::new();
    data.insert("os-authURL".into(), json!(cloud.auth_url));
    if let Some(r) = &cloud.region {
        data.insert("os-region".into(), json!(r));
    }
    data.insert(
        "os-applicationCredentialID".into(),
        json!(cloud.application_credential_id),
    );
    data.insert(
        "os-applicationCredentialSecret".into(),
        json!(cloud.application_credential_secret.expose()),
    );
    data.insert("os-TLSInsecure".into(), json!((!verify).to_string()));
    if let Some(ca) = &cloud.ca_file_content {
        data.insert("os-certAuthority".into(), json!(ca));
    }
    let mut out = vec![
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": SECRET, "namespace": "kube-system"}, "stringData": data}),
    ];
    if let Some(net) = &m.share_network_id {
        let mut params = serde_json::Map::new();
        params.insert("shareNetworkID".into(), json!(net));
        for call in [
            "provisioner",
            "controller-expand",
            "node-stage",
            "node-publish",
        ] {
            params.insert(
                format!("csi.storage.k8s.io/{call}-secret-name"),
                json!(SECRET),
            );
            params.insert(
                format!("csi.storage.k8s.io/{call}-secret-namespace"),
                json!("kube-system"),
            );
        }
        for t in share_types {
            let mut p = params.clone();
            p.insert("type".into(), json!(t));
            out.push(
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": format!("share-{}", rfc1123(t))},
                "provisioner": PROVISIONER, "parameters": p,
                "allowVolumeExpansion": true, "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate"}),
            );
        }
    }
    out
}

/// The cluster's Manila CSI objects when its labels ask for them (none
/// otherwise), its images under `container_infra_prefix` when set: what a
/// create and an upgrade apply, and `cluster-objects` prints.
pub fn render_labelled(
    c: &ClusterInput,
    charts: &AddonCharts,
    cloud: &CloudConfig,
    verify: bool,
    share_types: &[String],
    identity: &str,
) -> Vec<Value> {
    let Some(m) = &c.labels.infra.addons.manila else {
        return Vec::new();
    };
    let prefix = c
        .labels
        .container_infra_prefix
        .as_deref()
        .map(|p| p.trim_end_matches('/'));
    render(c, m, charts, cloud, verify, share_types, identity, prefix)
}

/// The cluster's Manila CSI objects in the management cluster.
/// `identity`: the cluster's name in OpenStack (`crate::cloud::identity`);
/// `registry`: where system images come from.
#[allow(clippy::too_many_arguments)]
pub fn render(
    c: &ClusterInput,
    m: &Manila,
    charts: &AddonCharts,
    cloud: &CloudConfig,
    verify: bool,
    share_types: &[String],
    identity: &str,
    prefix: Option<&str>,
) -> Vec<Value> {
    let registry = prefix.unwrap_or("registry.k8s.io");
    let identity = serde_json::to_string(identity).unwrap_or_default();
    // Every image of both charts from the mirror (their values.yaml at the
    // pinned versions).
    let mirrored = |keys: &[(&str, &str)]| yaml_tree(&mirrored(prefix, keys));
    let manila_values = format!(
        "shareProtocols:\n- protocolSelector: NFS\n  fsGroupPolicy: None\n  fwdNodePluginEndpoint:\n    dir: /var/lib/kubelet/plugins/csi-nfsplugin\n    sockFile: csi.sock\ncsimanila:\n  clusterID: {identity}\n  image:\n    repository: {registry}/provider-os/manila-csi-plugin\n    tag: {}\n",
        m.tag
    );
    let manila_values = manila_values
        + &mirrored(&[
            (
                "nodeplugin.registrar.image.repository",
                "registry.k8s.io/sig-storage/csi-node-driver-registrar",
            ),
            (
                "controllerplugin.provisioner.image.repository",
                "registry.k8s.io/sig-storage/csi-provisioner",
            ),
            (
                "controllerplugin.snapshotter.image.repository",
                "registry.k8s.io/sig-storage/csi-snapshotter",
            ),
            (
                "controllerplugin.resizer.image.repository",
                "registry.k8s.io/sig-storage/csi-resizer",
            ),
        ]);
    let nfs_values = mirrored(&[
        (
            "image.nfs.repository",
            "registry.k8s.io/sig-storage/nfsplugin",
        ),
        (
            "image.csiProvisioner.repository",
            "registry.k8s.io/sig-storage/csi-provisioner",
        ),
        (
            "image.csiSnapshotter.repository",
            "registry.k8s.io/sig-storage/csi-snapshotter",
        ),
        (
            "image.livenessProbe.repository",
            "registry.k8s.io/sig-storage/livenessprobe",
        ),
        (
            "image.nodeDriverRegistrar.repository",
            "registry.k8s.io/sig-storage/csi-node-driver-registrar",
        ),
        (
            "image.externalSnapshotter.repository",
            "registry.k8s.io/sig-storage/snapshot-controller",
        ),
    ]);
    let docs = workload_manifests(m, cloud, verify, share_types);
    let [holder, set] = resource_set(c, "manila-csi", &docs, true, "Reconcile");
    vec![
        hcp(c, "nfs-csi", &charts.nfs_csi, "kube-system", nfs_values),
        hcp(
            c,
            "manila-csi",
            &charts.manila_csi,
            "kube-system",
            manila_values,
        ),
        holder,
        set,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cloud(ca: Option<&str>) -> CloudConfig {
        CloudConfig {
            auth_url: "https://ks/v3".into(),
            region: Some("RegionOne".into()),
            application_credential_id: "ac".into(),
            application_credential_secret: common::secret::Secret::new("s3cret"),
            ca_file_content: ca.map(str::to_string),
        }
    }

    #[test]
    fn share_type_names_become_dns_labels() {
        assert_eq!(rfc1123("default"), "default");
        assert_eq!(rfc1123("CephFS_Gold tier"), "cephfs-gold-tier");
        assert_eq!(rfc1123("--x--"), "x");
        assert!(rfc1123(&"a".repeat(80)).len() <= 57);
    }

    #[test]
    fn a_storage_class_per_share_type_only_with_a_share_network() {
        let m = Manila {
            tag: "v1".into(),
            share_network_id: Some("net-1".into()),
        };
        let types = ["default".to_string(), "Fast SSD".to_string()];
        let docs = workload_manifests(&m, &cloud(Some("PEM")), true, &types);
        let secret = &docs[0];
        assert_eq!(secret["metadata"]["name"], SECRET);
        assert_eq!(
            secret["stringData"]["os-applicationCredentialSecret"],
            "s3cret"
        );
        assert_eq!(secret["stringData"]["os-TLSInsecure"], "false");
        assert_eq!(secret["stringData"]["os-certAuthority"], "PEM");
        assert_eq!(secret["stringData"]["os-region"], "RegionOne");
        let classes: Vec<&str> = docs[1..]
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(classes, ["share-default", "share-fast-ssd"]);
        let p = &docs[2]["parameters"];
        assert_eq!(p["type"], "Fast SSD");
        assert_eq!(p["shareNetworkID"], "net-1");
        assert_eq!(p["csi.storage.k8s.io/node-publish-secret-name"], SECRET);
        assert_eq!(docs[2]["provisioner"], PROVISIONER);
        let without = Manila {
            share_network_id: None,
            ..m
        };
        let docs = workload_manifests(&without, &cloud(None), false, &types);
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0]["stringData"]["os-TLSInsecure"], "true");
        assert!(docs[0]["stringData"].get("os-certAuthority").is_none());
    }
}
