//! Addons through the CAPI Helm addon provider (pure): one HelmChartProxy
//! per addon, selecting the cluster by its Magnum uuid label. CNI (Calico
//! by default, Cilium when `network_driver=cilium`), the OpenStack
//! cloud-controller-manager and the Cinder CSI plugin; what labels ask
//! for (metrics-server by default, ingress-nginx, kube-prometheus-stack,
//! Cilium's Hubble); chart repositories and versions configurable
//! (air-gapped mirrors); the k8s-keystone-auth webhook through a
//! ClusterResourceSet (`super::keystone_auth`: no upstream chart). The
//! cloud config OCCM and Cinder CSI mount reaches the workload cluster as
//! Secrets of ours through a ClusterResourceSet ([`cloud_config_set`]);
//! their charts only name them.

use serde_json::{Value, json};

use super::keystone_auth;
use super::naming::object_name;
use super::render::{CLUSTER_NAME_LABEL, ClusterInput, PROJECT_LABEL, UUID_LABEL};

/// One chart: repository, name and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    pub repo: String,
    pub name: String,
    pub version: String,
}

/// `[capi_addons]`-style settings (defaults: upstream repositories).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonCharts {
    pub calico: Chart,
    pub cilium: Chart,
    pub occm: Chart,
    pub cinder_csi: Chart,
    pub metrics_server: Chart,
    pub ingress_nginx: Chart,
    pub monitoring: Chart,
    pub manila_csi: Chart,
    pub nfs_csi: Chart,
}

impl Default for AddonCharts {
    fn default() -> Self {
        let c = |repo: &str, name: &str, version: &str| Chart {
            repo: repo.into(),
            name: name.into(),
            version: version.into(),
        };
        AddonCharts {
            calico: c(
                "https://docs.tigera.io/calico/charts",
                "tigera-operator",
                "v3.29.1",
            ),
            cilium: c("https://helm.cilium.io/", "cilium", "1.16.5"),
            occm: c(
                "https://kubernetes.github.io/cloud-provider-openstack",
                "openstack-cloud-controller-manager",
                "2.31.1",
            ),
            cinder_csi: c(
                "https://kubernetes.github.io/cloud-provider-openstack",
                "openstack-cinder-csi",
                "2.31.2",
            ),
            metrics_server: c(
                "https://kubernetes-sigs.github.io/metrics-server/",
                "metrics-server",
                "3.12.2",
            ),
            ingress_nginx: c(
                "https://kubernetes.github.io/ingress-nginx",
                "ingress-nginx",
                "4.11.3",
            ),
            monitoring: c(
                "https://prometheus-community.github.io/helm-charts",
                "kube-prometheus-stack",
                "66.3.1",
            ),
            manila_csi: c(
                "https://kubernetes.github.io/cloud-provider-openstack",
                "openstack-manila-csi",
                "2.32.0",
            ),
            nfs_csi: c(
                "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts",
                "csi-driver-nfs",
                "v4.9.0",
            ),
        }
    }
}

impl From<&common::config::CapiOpts> for AddonCharts {
    fn from(o: &common::config::CapiOpts) -> Self {
        let c = |(repo, name, version): &(String, String, String)| Chart {
            repo: repo.clone(),
            name: name.clone(),
            version: version.clone(),
        };
        AddonCharts {
            calico: c(&o.calico_chart),
            cilium: c(&o.cilium_chart),
            occm: c(&o.occm_chart),
            cinder_csi: c(&o.cinder_csi_chart),
            metrics_server: c(&o.metrics_server_chart),
            ingress_nginx: c(&o.ingress_nginx_chart),
            monitoring: c(&o.monitoring_chart),
            manila_csi: c(&o.manila_csi_chart),
            nfs_csi: c(&o.nfs_csi_chart),
        }
    }
}

/// The `[Global]` part of cloud.conf the OpenStack charts receive.
#[derive(Clone, PartialEq, Eq)]
pub struct CloudConfig {
    pub auth_url: String,
    pub region: Option<String>,
    pub application_credential_id: String,
    /// A secret: never printed.
    pub application_credential_secret: common::secret::Secret,
    pub ca_file_content: Option<String>,
}

impl std::fmt::Debug for CloudConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudConfig")
            .field("auth_url", &self.auth_url)
            .field("region", &self.region)
            .field("application_credential_id", &self.application_credential_id)
            .field("application_credential_secret", &"<redacted>")
            .finish()
    }
}

/// CAAPH's HelmChartProxy apiVersion, on both lines.
pub const HCP_API: &str = "addons.cluster.x-k8s.io/v1alpha1";

pub(super) fn hcp(
    c: &ClusterInput,
    addon: &str,
    chart: &Chart,
    namespace: &str,
    values: String,
) -> Value {
    json!({
        "apiVersion": HCP_API,
        "kind": "HelmChartProxy",
        "metadata": c.meta(&object_name(&c.stack_id, addon), &[]),
        "spec": {
            "clusterSelector": {"matchLabels": {UUID_LABEL: c.cluster_uuid}},
            "repoURL": chart.repo, "chartName": chart.name, "version": chart.version,
            "releaseName": addon, "namespace": namespace,
            "valuesTemplate": values,
            "options": {"waitForJobs": true, "wait": true, "timeout": "10m0s", "install": {"createNamespace": true}},
        }
    })
}

/// The HelmChartProxies of a cluster. `network_driver` is the template's;
/// `identity` the name OCCM and Cinder CSI give the cluster in OpenStack
/// (`crate::cloud::identity`: its uuid, or the chart default a cluster
/// made before identities keeps): OCCM's `cluster.name`
/// (`--cluster-name`: load balancer names and descriptions, floating IP
/// and security group descriptions), Cinder CSI's `clusterID` (`--cluster`:
/// the `cinder.csi.openstack.org/cluster` metadata of volumes and
/// snapshots). Both charts' values: kubernetes/cloud-provider-openstack
/// `charts/openstack-cloud-controller-manager/values.yaml` (`cluster.name`)
/// and `charts/cinder-csi-plugin/values.yaml` (`clusterID`).
pub fn render(
    c: &ClusterInput,
    network_driver: &str,
    charts: &AddonCharts,
    cloud: &CloudConfig,
    identity: &str,
) -> Vec<Value> {
    let prefix = c
        .labels
        .container_infra_prefix
        .as_deref()
        .map(|p| p.trim_end_matches('/').to_string());
    let registry = |default: &str| prefix.clone().unwrap_or_else(|| default.to_string());
    let addons = &c.labels.infra.addons;
    // Every other image of a chart, under `container_infra_prefix` too: the
    // chart's key for it and its upstream repository (each chart's
    // values.yaml at the pinned version), the registry host replaced.
    let mirrored = |keys: &[(&str, &str)]| mirrored(prefix.as_deref(), keys);
    let cni = if network_driver == "cilium" {
        let mut values = format!(
            "ipam:\n  operator:\n    clusterPoolIPv4PodCIDRList: [\"{}\"]\nimage:\n  repository: {}/cilium/cilium\n",
            c.labels.pod_cidr,
            registry("quay.io")
        );
        // `cilium_hubble_ui_enabled`: the chart's `hubble.relay.enabled`
        // and `hubble.ui.enabled` (cilium `install/kubernetes/cilium/values.yaml`).
        let mut tree: Vec<(String, String)> = Vec::new();
        if addons.hubble_ui {
            for k in [
                "hubble.enabled",
                "hubble.relay.enabled",
                "hubble.ui.enabled",
            ] {
                tree.push((k.into(), "true".into()));
            }
        }
        tree.extend(mirrored(&[
            ("certgen.image.repository", "quay.io/cilium/certgen"),
            (
                "hubble.relay.image.repository",
                "quay.io/cilium/hubble-relay",
            ),
            (
                "hubble.ui.backend.image.repository",
                "quay.io/cilium/hubble-ui-backend",
            ),
            (
                "hubble.ui.frontend.image.repository",
                "quay.io/cilium/hubble-ui",
            ),
            ("envoy.image.repository", "quay.io/cilium/cilium-envoy"),
            ("operator.image.repository", "quay.io/cilium/operator"),
            ("nodeinit.image.repository", "quay.io/cilium/startup-script"),
            ("preflight.image.repository", "quay.io/cilium/cilium"),
            (
                "clustermesh.apiserver.image.repository",
                "quay.io/cilium/clustermesh-apiserver",
            ),
            (
                "authentication.mutual.spire.install.initImage.repository",
                "docker.io/library/busybox",
            ),
        ]));
        values.push_str(&yaml_tree(&tree));
        hcp(c, "cni-cilium", &charts.cilium, "kube-system", values)
    } else {
        let mut values = format!(
            "installation:\n  registry: {}\n  calicoNetwork:\n    ipPools:\n    - cidr: {}\n      encapsulation: IPIP\n",
            registry("quay.io"),
            c.labels.pod_cidr
        );
        // The operator's own image (`tigeraOperator.registry`); the
        // Installation's `registry` covers what the operator starts.
        if let Some(p) = &prefix {
            values.push_str(&yaml_tree(&[("tigeraOperator.registry".into(), quoted(p))]));
        }
        hcp(c, "cni-calico", &charts.calico, "tigera-operator", values)
    };
    let mut occm_values = format!(
        "secret:\n  enabled: true\n  create: false\n  name: {OCCM_SECRET}\ncommonAnnotations:\n  {CONFIG_ANNOTATION}: {}\ncluster:\n  name: {identity}\nnodeSelector:\n  node-role.kubernetes.io/control-plane: \"\"\n",
        config_digest(&cloud_conf(c, cloud, OCCM_MOUNT), cloud),
        identity = serde_json::to_string(identity).unwrap_or_default(),
    );
    occm_values.push_str(&yaml_tree(&mirrored(&[(
        "image.repository",
        "registry.k8s.io/provider-os/openstack-cloud-controller-manager",
    )])));
    let mut csi_values = format!(
        "secret:\n  enabled: true\n  create: false\n  name: {CSI_SECRET}\ncommonAnnotations:\n  {CONFIG_ANNOTATION}: {}\nstorageClass:\n  enabled: true\nclusterID: {identity}\n",
        config_digest(&cloud_conf(c, cloud, CSI_MOUNT), cloud),
        identity = serde_json::to_string(identity).unwrap_or_default(),
    );
    csi_values.push_str(&yaml_tree(&mirrored(&[
        (
            "csi.attacher.image.repository",
            "registry.k8s.io/sig-storage/csi-attacher",
        ),
        (
            "csi.provisioner.image.repository",
            "registry.k8s.io/sig-storage/csi-provisioner",
        ),
        (
            "csi.snapshotter.image.repository",
            "registry.k8s.io/sig-storage/csi-snapshotter",
        ),
        (
            "csi.resizer.image.repository",
            "registry.k8s.io/sig-storage/csi-resizer",
        ),
        (
            "csi.livenessprobe.image.repository",
            "registry.k8s.io/sig-storage/livenessprobe",
        ),
        (
            "csi.nodeDriverRegistrar.image.repository",
            "registry.k8s.io/sig-storage/csi-node-driver-registrar",
        ),
        (
            "csi.plugin.image.repository",
            "registry.k8s.io/provider-os/cinder-csi-plugin",
        ),
    ])));
    let mut out = vec![
        cni,
        hcp(c, "openstack-ccm", &charts.occm, "kube-system", occm_values),
        hcp(
            c,
            "cinder-csi",
            &charts.cinder_csi,
            "kube-system",
            csi_values,
        ),
    ];
    // kubeadm's kubelets serve with self-signed certificates (no
    // `serverTLSBootstrap`): metrics-server cannot verify them
    // (kubernetes-sigs/metrics-server README, "Requirements").
    if addons.metrics_server {
        let mut values = "args:\n- --kubelet-insecure-tls\n".to_string();
        if let Some(p) = &prefix {
            values.push_str(&format!(
                "image:\n  repository: {p}/metrics-server/metrics-server\n"
            ));
        }
        out.push(hcp(
            c,
            "metrics-server",
            &charts.metrics_server,
            "kube-system",
            values,
        ));
    }
    // The controller's Service of type LoadBalancer is OCCM's (an Octavia
    // load balancer, deleted by the clean-up with the cluster).
    if addons.ingress_nginx {
        let mut tree = vec![(
            "controller.service.type".to_string(),
            "LoadBalancer".to_string(),
        )];
        if let Some(p) = &prefix {
            tree.push(("controller.image.registry".into(), quoted(p)));
            // The admission webhook's certificate job.
            tree.push((
                "controller.admissionWebhooks.patch.image.registry".into(),
                quoted(p),
            ));
        }
        let values = yaml_tree(&tree);
        out.push(hcp(
            c,
            "ingress-nginx",
            &charts.ingress_nginx,
            "ingress-nginx",
            values,
        ));
    }
    // `keystone_auth_enabled`: the webhook's workload half (its
    // control-plane half is the KubeadmControlPlane's, `render`).
    if let Some(tag) = &addons.keystone_auth {
        out.extend(keystone_auth_set(
            c,
            &cloud.auth_url,
            cloud.ca_file_content.as_deref(),
            &registry("registry.k8s.io"),
            tag,
        ));
    }
    if addons.monitoring {
        let mut values = String::from(
            "prometheus:\n  prometheusSpec:\n    retention: 10d\nalertmanager:\n  enabled: true\ngrafana:\n  enabled: true\n",
        );
        if let Some(p) = &prefix {
            values.push_str(&format!("global:\n  imageRegistry: {p}\n"));
        }
        out.push(hcp(
            c,
            "monitoring",
            &charts.monitoring,
            "monitoring-system",
            values,
        ));
    }
    // Last: the Secrets OCCM's and Cinder CSI's pods wait for.
    out.extend(cloud_config_set(c, cloud));
    out
}

/// `upstream` (`registry/path/name`) from the mirror `prefix` instead:
/// `prefix/path/name` (pure).
pub fn under_prefix(prefix: &str, upstream: &str) -> String {
    let path = upstream.split_once('/').map_or(upstream, |(_, p)| p);
    format!("{}/{path}", prefix.trim_end_matches('/'))
}

/// The values that take each image of a chart from the mirror (pure): for
/// each (chart key, upstream repository), the key and the repository under
/// `prefix` as a YAML scalar; nothing without a prefix.
pub fn mirrored(prefix: Option<&str>, keys: &[(&str, &str)]) -> Vec<(String, String)> {
    let Some(p) = prefix else {
        return Vec::new();
    };
    keys.iter()
        .map(|(k, upstream)| ((*k).to_string(), quoted(&under_prefix(p, upstream))))
        .collect()
}

/// A string as a YAML scalar (JSON's quoting is YAML's double-quoted form).
pub fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// `a.b.c` key paths and their YAML scalars as a block mapping (pure):
/// paths sharing a prefix share its keys, in the order first given.
pub fn yaml_tree(pairs: &[(String, String)]) -> String {
    #[derive(Default)]
    struct Node {
        keys: Vec<(String, Node)>,
        leaf: Option<String>,
    }
    fn insert(node: &mut Node, path: &[&str], value: &str) {
        let Some((first, rest)) = path.split_first() else {
            node.leaf = Some(value.to_string());
            return;
        };
        let i = match node.keys.iter().position(|(k, _)| k == first) {
            Some(i) => i,
            None => {
                node.keys.push(((*first).to_string(), Node::default()));
                node.keys.len() - 1
            }
        };
        insert(&mut node.keys[i].1, rest, value);
    }
    fn emit(node: &Node, depth: usize, out: &mut String) {
        for (k, child) in &node.keys {
            out.push_str(&"  ".repeat(depth));
            out.push_str(k);
            out.push(':');
            match &child.leaf {
                Some(v) => {
                    out.push(' ');
                    out.push_str(v);
                    out.push('\n');
                }
                None => {
                    out.push('\n');
                    emit(child, depth + 1, out);
                }
            }
        }
    }
    let mut root = Node::default();
    for (path, value) in pairs {
        insert(&mut root, &path.split('.').collect::<Vec<_>>(), value);
    }
    let mut out = String::new();
    emit(&root, 0, &mut out);
    out
}

/// The Secret OCCM mounts (the chart's `secret.name`, `secret.create:
/// false`), and where: kubernetes/cloud-provider-openstack
/// `charts/openstack-cloud-controller-manager/templates/daemonset.yaml`
/// mounts it at `/etc/config` and runs with
/// `--cloud-config=/etc/config/cloud.conf`. Not the chart's default name
/// (`cloud-config`): a release made by an earlier conductor owns that one,
/// and Helm deletes it when the release upgrades to `create: false`.
pub const OCCM_SECRET: &str = "magnum-occm-cloud-config";
pub const OCCM_MOUNT: &str = "/etc/config";
/// The Secret Cinder CSI's controller and node plugins mount, and where:
/// `charts/cinder-csi-plugin/values.yaml` (`csi.plugin.volumeMounts`:
/// `cloud-config` at `/etc/kubernetes`) with `CLOUD_CONFIG=/etc/kubernetes/
/// <secret.filename>` (`templates/controllerplugin-deployment.yaml`,
/// `nodeplugin-daemonset.yaml`). The chart's own Secret template writes
/// only `.Values.secret.data`, never `cloudConfigContents`.
pub const CSI_SECRET: &str = "magnum-cinder-csi-cloud-config";
pub const CSI_MOUNT: &str = "/etc/kubernetes";
/// The pod annotation (both charts' `commonAnnotations` reach their pod
/// templates) carrying a digest of the cloud config: a rotated credential
/// or a new CA changes it, so the pods restart with what the Secret now
/// holds (OCCM and Cinder CSI read their cloud.conf once, at start).
pub const CONFIG_ANNOTATION: &str = "magnum.openstack.org/cloud-config-sha256";

/// The cloud.conf of a plugin whose Secret is mounted at `mount`: the
/// cluster's application credential and region, the private CA as the
/// file `ca.crt` of the same Secret, and the load balancers OCCM makes for
/// Services: `octavia_lb_algorithm` and `octavia_lb_healthcheck`
/// (cloud-provider-openstack
/// `docs/openstack-cloud-controller-manager/using-openstack-cloud-controller-manager.md`,
/// `[LoadBalancer]` `lb-method`, `create-monitor`).
pub fn cloud_conf(c: &ClusterInput, cloud: &CloudConfig, mount: &str) -> String {
    let mut conf = format!(
        "[Global]\nauth-url={}\napplication-credential-id={}\napplication-credential-secret={}\n",
        cloud.auth_url,
        cloud.application_credential_id,
        cloud.application_credential_secret.expose()
    );
    if let Some(r) = &cloud.region {
        conf.push_str(&format!("region={r}\n"));
    }
    if cloud.ca_file_content.is_some() {
        conf.push_str(&format!("ca-file={mount}/ca.crt\n"));
    }
    conf.push_str(&format!(
        "\n[LoadBalancer]\nlb-provider={}\nlb-method={}\ncreate-monitor={}\n",
        c.labels.octavia_provider, c.labels.infra.lb_method, c.labels.infra.lb_healthcheck
    ));
    conf
}

/// A digest of what a plugin's Secret holds (its cloud.conf and the CA).
fn config_digest(conf: &str, cloud: &CloudConfig) -> String {
    let mut all = conf.as_bytes().to_vec();
    all.push(0);
    all.extend_from_slice(cloud.ca_file_content.as_deref().unwrap_or("").as_bytes());
    common::certs::der::sha256_hex(&all)
}

/// The Secrets OCCM and Cinder CSI mount, in `kube-system` of the workload
/// cluster, through a ClusterResourceSet (`Reconcile`: a rotated
/// credential reaches the cluster), whose holder is a Secret: the
/// credential never sits in a HelmChartProxy's values, nor in a Helm
/// release. Each holds `cloud.conf` and, with a private CA, `ca.crt` at
/// the path its cloud.conf names.
pub fn cloud_config_set(c: &ClusterInput, cloud: &CloudConfig) -> [Value; 2] {
    let secret = |name: &str, mount: &str| {
        let mut data = serde_json::Map::new();
        data.insert("cloud.conf".into(), json!(cloud_conf(c, cloud, mount)));
        if let Some(ca) = &cloud.ca_file_content {
            data.insert("ca.crt".into(), json!(ca));
        }
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": name, "namespace": "kube-system"},
               "stringData": data})
    };
    resource_set(
        c,
        "cloud-provider-config",
        &[
            secret(OCCM_SECRET, OCCM_MOUNT),
            secret(CSI_SECRET, CSI_MOUNT),
        ],
        true,
        "Reconcile",
    )
}

/// A ClusterResourceSet `<stack_id>-<part>` applying `docs` to the
/// cluster (selected by its uuid label, as the HelmChartProxies), and the
/// object of ours holding them under the key `<part>.yaml` (one YAML
/// document each, written as JSON; CAPI `exp/addons` applies every data
/// value): a ConfigMap, or a Secret (`addons.cluster.x-k8s.io/resource-set`)
/// when they hold a credential. `strategy`: `ApplyOnce` or `Reconcile`.
pub(super) fn resource_set(
    c: &ClusterInput,
    part: &str,
    docs: &[Value],
    secret: bool,
    strategy: &str,
) -> [Value; 2] {
    let name = object_name(&c.stack_id, part);
    let joined = docs
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n");
    let key = format!("{part}.yaml");
    let holder = if secret {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "addons.cluster.x-k8s.io/resource-set",
               "metadata": c.meta(&name, &[]),
               "data": {key: common::certs::der::base64(joined.as_bytes())}})
    } else {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": c.meta(&name, &[]),
               "data": {key: joined}})
    };
    let set = json!({"apiVersion": c.line.addons_api(), "kind": "ClusterResourceSet",
        "metadata": c.meta(&name, &[]),
        "spec": {"clusterSelector": {"matchLabels": {UUID_LABEL: c.cluster_uuid}},
                 "resources": [{"kind": holder["kind"], "name": name}],
                 "strategy": strategy}});
    [holder, set]
}

/// k8s-keystone-auth's workload objects (`super::keystone_auth`) in a
/// ClusterResourceSet applied once: the policy ConfigMap is then the
/// cluster owner's to edit.
pub fn keystone_auth_set(
    c: &ClusterInput,
    auth_url: &str,
    ca: Option<&str>,
    registry: &str,
    tag: &str,
) -> [Value; 2] {
    let image = format!("{registry}/{}:{tag}", keystone_auth::IMAGE);
    let docs = keystone_auth::workload_manifests(&c.project_id, auth_url, ca, &image);
    resource_set(c, "keystone-auth", &docs, false, "ApplyOnce")
}

/// The `<stack_id>-cloud-credentials` Secret CAPO reads (`identityRef`):
/// a clouds.yaml with the cluster's application credential under the cloud
/// name `openstack`, and the CA bundle when the cloud uses a private CA.
/// `Debug` of the result never shows the data.
pub fn credentials_secret(
    c: &ClusterInput,
    cloud: &CloudConfig,
    interface: &str,
    verify: bool,
) -> common::certs::capi::RenderedSecret {
    let mut clouds = format!(
        "clouds:\n  openstack:\n    auth:\n      auth_url: {}\n      application_credential_id: {}\n      application_credential_secret: {}\n    auth_type: v3applicationcredential\n    identity_api_version: 3\n    interface: {interface}\n    verify: {verify}\n",
        cloud.auth_url,
        cloud.application_credential_id,
        cloud.application_credential_secret.expose()
    );
    if let Some(r) = &cloud.region {
        clouds.push_str(&format!("    region_name: {r}\n"));
    }
    let mut data = serde_json::Map::new();
    data.insert(
        "clouds.yaml".into(),
        json!(common::certs::der::base64(clouds.as_bytes())),
    );
    if let Some(ca) = &cloud.ca_file_content {
        data.insert(
            "cacert".into(),
            json!(common::certs::der::base64(ca.as_bytes())),
        );
    }
    let name = object_name(&c.stack_id, "cloud-credentials");
    let manifest = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": c.namespace,
                     "labels": {UUID_LABEL: c.cluster_uuid, PROJECT_LABEL: c.project_id, CLUSTER_NAME_LABEL: c.stack_id}},
        "data": data,
    });
    common::certs::capi::RenderedSecret { name, manifest }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_become_one_mapping_in_the_order_given() {
        let pairs: Vec<(String, String)> = [
            ("controller.service.type", "LoadBalancer"),
            ("controller.image.registry", "\"m.local\""),
            (
                "controller.admissionWebhooks.patch.image.registry",
                "\"m.local\"",
            ),
            ("top", "true"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
        assert_eq!(
            yaml_tree(&pairs),
            "controller:\n  service:\n    type: LoadBalancer\n  image:\n    registry: \"m.local\"\n  \
             admissionWebhooks:\n    patch:\n      image:\n        registry: \"m.local\"\ntop: true\n"
        );
        assert_eq!(yaml_tree(&[]), "");
    }

    #[test]
    fn an_upstream_image_from_the_mirror_keeps_its_path() {
        assert_eq!(
            under_prefix(
                "m.local:5000/mirror/",
                "registry.k8s.io/sig-storage/csi-attacher"
            ),
            "m.local:5000/mirror/sig-storage/csi-attacher"
        );
        assert_eq!(
            under_prefix("m.local", "docker.io/library/busybox"),
            "m.local/library/busybox"
        );
        assert_eq!(quoted("a\"b"), "\"a\\\"b\"");
    }
}
