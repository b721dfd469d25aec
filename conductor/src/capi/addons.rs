//! Addons through the CAPI Helm addon provider (pure): one HelmChartProxy
//! per addon, selecting the cluster by its Magnum uuid label. CNI (Calico
//! by default, Cilium when `network_driver=cilium`), the OpenStack
//! cloud-controller-manager and the Cinder CSI plugin, with chart
//! repositories and versions configurable (air-gapped mirrors). The
//! cloud-config the OpenStack charts need reaches the workload cluster
//! through their values (the charts create the `cloud-config` Secret).

use serde_json::{Value, json};

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

fn hcp(c: &ClusterInput, addon: &str, chart: &Chart, namespace: &str, values: String) -> Value {
    json!({
        "apiVersion": HCP_API,
        "kind": "HelmChartProxy",
        "metadata": {"name": object_name(&c.stack_id, addon), "namespace": c.namespace,
                     "labels": {UUID_LABEL: c.cluster_uuid, PROJECT_LABEL: c.project_id, CLUSTER_NAME_LABEL: c.stack_id}},
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
    let cni = if network_driver == "cilium" {
        let values = format!(
            "ipam:\n  operator:\n    clusterPoolIPv4PodCIDRList: [\"{}\"]\nimage:\n  repository: {}/cilium/cilium\n",
            c.labels.pod_cidr,
            registry("quay.io")
        );
        hcp(c, "cni-cilium", &charts.cilium, "kube-system", values)
    } else {
        let values = format!(
            "installation:\n  registry: {}\n  calicoNetwork:\n    ipPools:\n    - cidr: {}\n      encapsulation: IPIP\n",
            registry("quay.io"),
            c.labels.pod_cidr
        );
        hcp(c, "cni-calico", &charts.calico, "tigera-operator", values)
    };
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
        conf.push_str("ca-file=/etc/config/ca.crt\n");
    }
    conf.push_str(&format!(
        "\n[LoadBalancer]\nlb-provider={}\n",
        c.labels.octavia_provider
    ));
    let indented: String = conf.lines().map(|l| format!("    {l}\n")).collect();
    let identity = serde_json::to_string(identity).unwrap_or_default();
    let occm_values = format!(
        "cloudConfigContents: |\n{indented}cluster:\n  name: {identity}\nnodeSelector:\n  node-role.kubernetes.io/control-plane: \"\"\n"
    );
    let csi_values = format!(
        "secret:\n  enabled: true\n  create: true\n  name: cinder-csi-cloud-config\nstorageClass:\n  enabled: true\nclusterID: {identity}\ncloudConfigContents: |\n{indented}"
    );
    vec![
        cni,
        hcp(c, "openstack-ccm", &charts.occm, "kube-system", occm_values),
        hcp(
            c,
            "cinder-csi",
            &charts.cinder_csi,
            "kube-system",
            csi_values,
        ),
    ]
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
