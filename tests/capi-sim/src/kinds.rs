//! The kinds the controllers read and write, at the version each CAPI
//! release line stores (the CRDs carry no conversion webhook: only the
//! stored version round-trips: measured on kube-apiserver v1.28.7 with the
//! CRDs of `scripts/artifacts.lock`).

use kube::api::{ApiResource, GroupVersionKind};

/// Which release line: CAPI 1.10 + CAPO 0.12 + CAAPH 0.4 (`v1beta1`) or
/// CAPI 1.14 + CAPO 0.14 + CAAPH 0.6 (`v1beta2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Line {
    V1beta1,
    V1beta2,
}

impl Line {
    pub fn v2(self) -> bool {
        self == Line::V1beta2
    }
    /// `--crds` of `scripts/k8s-up.sh`.
    pub fn crds_flag(self) -> &'static str {
        match self {
            Line::V1beta1 => "v1beta1",
            Line::V1beta2 => "v1beta2",
        }
    }
}

impl std::str::FromStr for Line {
    type Err = String;
    fn from_str(s: &str) -> Result<Line, String> {
        match s {
            "v1beta1" => Ok(Line::V1beta1),
            "v1beta2" => Ok(Line::V1beta2),
            _ => Err(format!("unknown CAPI line {s:?} (v1beta1, v1beta2)")),
        }
    }
}

/// One kind the controllers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    OpenStackCluster,
    Cluster,
    KubeadmControlPlane,
    MachineDeployment,
    MachineSet,
    Machine,
    MachineHealthCheck,
    HelmChartProxy,
    HelmReleaseProxy,
    ClusterResourceSet,
    OpenStackMachine,
    OpenStackMachineTemplate,
    ClusterResourceSetBinding,
    Namespace,
    ClusterClass,
    KubeadmControlPlaneTemplate,
    KubeadmConfigTemplate,
    OpenStackClusterTemplate,
}

impl Kind {
    /// Every kind, reconciled ones first in the order a pass runs them
    /// (owners before what they own), then the ones only read.
    pub const ALL: [Kind; 18] = [
        Kind::OpenStackCluster,
        Kind::Cluster,
        Kind::KubeadmControlPlane,
        Kind::MachineDeployment,
        Kind::MachineSet,
        Kind::Machine,
        Kind::MachineHealthCheck,
        Kind::HelmChartProxy,
        Kind::HelmReleaseProxy,
        Kind::ClusterResourceSet,
        Kind::OpenStackMachine,
        Kind::OpenStackMachineTemplate,
        Kind::ClusterResourceSetBinding,
        Kind::Namespace,
        Kind::ClusterClass,
        Kind::KubeadmControlPlaneTemplate,
        Kind::KubeadmConfigTemplate,
        Kind::OpenStackClusterTemplate,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn reconciled(self) -> bool {
        self.index() <= Kind::ClusterResourceSet.index()
    }

    /// (group, version on `line`, kind, plural).
    pub fn gvk(self, line: Line) -> (&'static str, &'static str, &'static str, &'static str) {
        let v2 = line.v2();
        let capi = if v2 { "v1beta2" } else { "v1beta1" };
        match self {
            Kind::OpenStackCluster => (
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "OpenStackCluster",
                "openstackclusters",
            ),
            Kind::Cluster => ("cluster.x-k8s.io", capi, "Cluster", "clusters"),
            Kind::KubeadmControlPlane => (
                "controlplane.cluster.x-k8s.io",
                capi,
                "KubeadmControlPlane",
                "kubeadmcontrolplanes",
            ),
            Kind::MachineDeployment => (
                "cluster.x-k8s.io",
                capi,
                "MachineDeployment",
                "machinedeployments",
            ),
            Kind::MachineSet => ("cluster.x-k8s.io", capi, "MachineSet", "machinesets"),
            Kind::Machine => ("cluster.x-k8s.io", capi, "Machine", "machines"),
            Kind::MachineHealthCheck => (
                "cluster.x-k8s.io",
                capi,
                "MachineHealthCheck",
                "machinehealthchecks",
            ),
            Kind::HelmChartProxy => (
                "addons.cluster.x-k8s.io",
                "v1alpha1",
                "HelmChartProxy",
                "helmchartproxies",
            ),
            Kind::HelmReleaseProxy => (
                "addons.cluster.x-k8s.io",
                "v1alpha1",
                "HelmReleaseProxy",
                "helmreleaseproxies",
            ),
            Kind::ClusterResourceSet => (
                "addons.cluster.x-k8s.io",
                capi,
                "ClusterResourceSet",
                "clusterresourcesets",
            ),
            Kind::OpenStackMachine => (
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "OpenStackMachine",
                "openstackmachines",
            ),
            Kind::OpenStackMachineTemplate => (
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "OpenStackMachineTemplate",
                "openstackmachinetemplates",
            ),
            Kind::ClusterResourceSetBinding => (
                "addons.cluster.x-k8s.io",
                capi,
                "ClusterResourceSetBinding",
                "clusterresourcesetbindings",
            ),
            Kind::Namespace => ("", "v1", "Namespace", "namespaces"),
            Kind::ClusterClass => ("cluster.x-k8s.io", capi, "ClusterClass", "clusterclasses"),
            Kind::KubeadmControlPlaneTemplate => (
                "controlplane.cluster.x-k8s.io",
                capi,
                "KubeadmControlPlaneTemplate",
                "kubeadmcontrolplanetemplates",
            ),
            Kind::KubeadmConfigTemplate => (
                "bootstrap.cluster.x-k8s.io",
                capi,
                "KubeadmConfigTemplate",
                "kubeadmconfigtemplates",
            ),
            Kind::OpenStackClusterTemplate => (
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "OpenStackClusterTemplate",
                "openstackclustertemplates",
            ),
        }
    }

    pub fn api_version(self, line: Line) -> String {
        let (g, v, _, _) = self.gvk(line);
        if g.is_empty() {
            v.to_string()
        } else {
            format!("{g}/{v}")
        }
    }

    pub fn name(self) -> &'static str {
        self.gvk(Line::V1beta1).2
    }

    pub fn plural(self) -> &'static str {
        self.gvk(Line::V1beta1).3
    }

    pub fn api_resource(self, line: Line) -> ApiResource {
        let (g, v, k, p) = self.gvk(line);
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciled_kinds_come_first() {
        let reconciled: Vec<Kind> = Kind::ALL.into_iter().filter(|k| k.reconciled()).collect();
        assert_eq!(reconciled.len(), 10);
        assert_eq!(Kind::ALL[Kind::Namespace.index()], Kind::Namespace);
        assert_eq!(
            Kind::Machine.api_version(Line::V1beta2),
            "cluster.x-k8s.io/v1beta2"
        );
        assert_eq!(Kind::Namespace.api_version(Line::V1beta1), "v1");
    }
}
