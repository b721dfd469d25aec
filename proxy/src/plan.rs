//! What to serve (pure): the clusters the conductor published a proxy
//! Service for ([`common::api_proxy`]), each with its tenant network and
//! the API addresses inside it, read from CAPO's objects:
//!
//! - the network: the OpenStackCluster's `status.network.id` (CAPO writes
//!   the network it made or found: `controllers/openstackcluster_controller.go`,
//!   `reconcileNetworkComponents`);
//! - with an API load balancer: its VIP, `status.apiServerLoadBalancer.internalIP`
//!   (`pkg/cloud/services/loadbalancer/loadbalancer.go`, `ReconcileLoadBalancer`,
//!   which sets `InternalIP` to the VIP address);
//! - without one: the control-plane endpoint's host when it is an address
//!   (`spec.apiServerFixedIP` becomes it, `reconcileControlPlaneEndpoint`),
//!   then each control-plane OpenStackMachine's `InternalIP`
//!   (`status.addresses`, from the server's ports), in name order;
//! - the port: `spec.controlPlaneEndpoint.port`, else 6443.
//!
//! A Service without its OpenStackCluster, or one not made yet, is listed
//! with the reason it waits, so the proxy can say so (a log line, a
//! metric) instead of dropping it silently.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use serde_json::Value;

use common::api_proxy;

const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";

/// A proxy Service as the proxy needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The CAPI cluster ([`api_proxy::SERVICE_LABEL`]'s value).
    pub cluster: String,
}

impl ServiceRef {
    /// From a Service object (JSON); None when it is not a proxy Service.
    pub fn of(svc: &Value) -> Option<ServiceRef> {
        let meta = svc.get("metadata")?;
        Some(ServiceRef {
            namespace: meta.get("namespace")?.as_str()?.to_string(),
            name: meta.get("name")?.as_str()?.to_string(),
            uid: meta.get("uid")?.as_str()?.to_string(),
            cluster: meta
                .pointer(&format!(
                    "/labels/{}",
                    api_proxy::SERVICE_LABEL.replace('/', "~1")
                ))?
                .as_str()?
                .to_string(),
        })
    }
}

/// One cluster to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub service: ServiceRef,
    /// The TLS server name clients send.
    pub server_name: String,
    /// Its tenant network (a Neutron network id).
    pub network_id: Option<String>,
    /// Its API inside that network, in the order to try.
    pub endpoints: Vec<SocketAddr>,
    /// Why it cannot be served yet, when it cannot.
    pub waiting: Option<String>,
}

fn str_at<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn label<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// The clusters to serve: every proxy Service, with its OpenStackCluster
/// (same namespace, labelled with the cluster or named as it) and its
/// control-plane OpenStackMachines.
pub fn served(services: &[ServiceRef], clusters: &[Value], machines: &[Value]) -> Vec<Served> {
    let mut out: Vec<Served> = services
        .iter()
        .map(|s| one(s, clusters, machines))
        .collect();
    out.sort_by(|a, b| a.server_name.cmp(&b.server_name));
    out
}

fn one(s: &ServiceRef, clusters: &[Value], machines: &[Value]) -> Served {
    let in_ns = |o: &&Value| str_at(o, "/metadata/namespace") == Some(s.namespace.as_str());
    let osc = clusters
        .iter()
        .filter(in_ns)
        .find(|o| label(o, CLUSTER_NAME_LABEL) == Some(s.cluster.as_str()))
        .or_else(|| {
            clusters
                .iter()
                .filter(in_ns)
                .find(|o| str_at(o, "/metadata/name") == Some(s.cluster.as_str()))
        });
    let mut served = Served {
        service: s.clone(),
        server_name: api_proxy::server_name(&s.cluster, &s.namespace),
        network_id: None,
        endpoints: Vec::new(),
        waiting: None,
    };
    let Some(osc) = osc else {
        served.waiting = Some(format!(
            "no OpenStackCluster of cluster {} in {}",
            s.cluster, s.namespace
        ));
        return served;
    };
    served.network_id = str_at(osc, "/status/network/id").map(str::to_string);
    let port = osc
        .pointer("/spec/controlPlaneEndpoint/port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .unwrap_or(api_proxy::PORT);
    let ip = |s: Option<&str>| s.and_then(|a| a.parse::<IpAddr>().ok());
    let mut addrs: Vec<IpAddr> = Vec::new();
    if let Some(vip) = ip(str_at(osc, "/status/apiServerLoadBalancer/internalIP")) {
        addrs.push(vip);
    } else {
        addrs.extend(ip(str_at(osc, "/spec/controlPlaneEndpoint/host")));
        let mut cps: Vec<&Value> = machines
            .iter()
            .filter(in_ns)
            .filter(|m| label(m, CLUSTER_NAME_LABEL) == Some(s.cluster.as_str()))
            .filter(|m| label(m, CONTROL_PLANE_LABEL).is_some())
            .filter(|m| m.pointer("/metadata/deletionTimestamp").is_none())
            .collect();
        cps.sort_by_key(|m| str_at(m, "/metadata/name").unwrap_or_default().to_string());
        for m in cps {
            let internal = m
                .pointer("/status/addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))
                .filter_map(|a| ip(a.get("address").and_then(Value::as_str)));
            addrs.extend(internal);
        }
    }
    let mut seen = BTreeMap::new();
    served.endpoints = addrs
        .into_iter()
        .filter(|a| seen.insert(*a, ()).is_none())
        .map(|a| SocketAddr::new(a, port))
        .collect();
    served.waiting = match (&served.network_id, served.endpoints.is_empty()) {
        (None, _) => Some("its OpenStackCluster names no network yet (status.network.id)".into()),
        (Some(_), true) => Some(
            "no API address yet (no load balancer VIP, fixed IP or control-plane machine address)"
                .into(),
        ),
        _ => None,
    };
    served
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(ns: &str, cluster: &str) -> ServiceRef {
        ServiceRef {
            namespace: ns.into(),
            name: api_proxy::service_name(cluster),
            uid: format!("uid-{cluster}"),
            cluster: cluster.into(),
        }
    }

    fn osc(ns: &str, name: &str, status: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": name,
                            "labels": {CLUSTER_NAME_LABEL: name}},
               "spec": {"controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}},
               "status": status})
    }

    #[test]
    fn a_proxy_service_is_read_from_its_object() {
        let s = json!({"metadata": {"namespace": "magnum-p", "name": "k1-apiserver", "uid": "u1",
                                    "labels": {api_proxy::SERVICE_LABEL: "k1"}}});
        assert_eq!(ServiceRef::of(&s), Some(svc_uid("magnum-p", "k1", "u1")));
        let other = json!({"metadata": {"namespace": "magnum-p", "name": "web", "uid": "u2"}});
        assert_eq!(ServiceRef::of(&other), None);
    }

    fn svc_uid(ns: &str, cluster: &str, uid: &str) -> ServiceRef {
        ServiceRef {
            uid: uid.into(),
            ..svc(ns, cluster)
        }
    }

    #[test]
    fn the_load_balancer_vip_inside_the_clusters_network() {
        let got = served(
            &[svc("magnum-p", "k1")],
            &[osc(
                "magnum-p",
                "k1",
                json!({"network": {"id": "net-1"},
                       "apiServerLoadBalancer": {"internalIP": "10.0.0.10", "ip": "10.0.0.10"}}),
            )],
            &[],
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].server_name, "k1-apiserver.magnum-p.svc");
        assert_eq!(got[0].network_id.as_deref(), Some("net-1"));
        assert_eq!(got[0].endpoints, ["10.0.0.10:6443".parse().unwrap()]);
        assert_eq!(got[0].waiting, None);
    }

    #[test]
    fn without_a_load_balancer_the_control_plane_machines() {
        let m = |name: &str, cp: bool, addr: &str, deleting: bool| {
            let mut labels = json!({CLUSTER_NAME_LABEL: "k1"});
            if cp {
                labels[CONTROL_PLANE_LABEL] = json!("");
            }
            let mut v = json!({"metadata": {"namespace": "magnum-p", "name": name, "labels": labels},
                               "status": {"addresses": [{"type": "InternalIP", "address": addr},
                                                        {"type": "ExternalIP", "address": "203.0.113.9"}]}});
            if deleting {
                v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            v
        };
        let mut o = osc("magnum-p", "k1", json!({"network": {"id": "net-1"}}));
        o["spec"]["controlPlaneEndpoint"] = json!({"host": "", "port": 6443});
        let got = served(
            &[svc("magnum-p", "k1")],
            &[o],
            &[
                m("k1-cp-b", true, "10.0.0.12", false),
                m("k1-cp-a", true, "10.0.0.11", false),
                m("k1-cp-c", true, "10.0.0.13", true),
                m("k1-w-a", false, "10.0.0.20", false),
            ],
        );
        assert_eq!(
            got[0].endpoints,
            [
                "10.0.0.11:6443".parse().unwrap(),
                "10.0.0.12:6443".parse().unwrap()
            ]
        );
        assert_eq!(got[0].waiting, None);
    }

    #[test]
    fn what_is_not_ready_says_why_and_other_namespaces_do_not_count() {
        let got = served(
            &[svc("magnum-p", "k1"), svc("magnum-p", "k2")],
            &[
                osc("magnum-q", "k1", json!({"network": {"id": "net-q"}})),
                osc("magnum-p", "k2", json!({})),
            ],
            &[],
        );
        let w = |i: usize| got[i].waiting.clone().unwrap_or_default();
        assert!(w(0).contains("no OpenStackCluster"), "{}", w(0));
        assert!(w(1).contains("no network yet"), "{}", w(1));
        assert_eq!(got[1].endpoints, ["10.0.0.10:6443".parse().unwrap()]);
    }
}
