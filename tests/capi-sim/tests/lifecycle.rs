//! A scripted CAPI lifecycle against the simulated controllers, on both
//! release lines: create a full object set (server-side apply, as the
//! conductor will) -> Provisioned with N Running machines; scale a
//! MachineDeployment down with `cluster.x-k8s.io/delete-machine` -> exactly
//! that machine goes; bump the version -> machines roll; delete the Cluster
//! -> everything goes, machines before infrastructure before the Cluster
//! (cluster-api v1.10 `cluster_controller.go` `reconcileDelete`), and what
//! the Cluster owned is garbage-collected by the real controller manager.
//!
//! The apiserver is the real one (`scripts/k8s-up.sh`): every controller write
//! below passed its validation, or the test fails on `controller errors`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capi_sim::Line;
use capi_sim::kinds::Kind;
use futures_util::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

mod support;
use support::{Env, start};

/// When each object of these kinds disappeared from the namespace.
fn record_deletions(env: &Env, kinds: &[Kind]) -> Arc<Mutex<Vec<(&'static str, Instant)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    for kind in kinds {
        let api: Api<DynamicObject> =
            Api::namespaced_with(env.client.clone(), &env.ns, &kind.api_resource(env.line));
        let (seen, name) = (seen.clone(), kind.name());
        tokio::spawn(async move {
            let mut s = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = s.next().await {
                if let Ok(watcher::Event::Delete(_)) = ev {
                    seen.lock().unwrap().push((name, Instant::now()));
                }
            }
        });
    }
    seen
}

async fn lifecycle(line: Line) {
    let v2 = line == Line::V1beta2;
    let version = if v2 { "v1beta2" } else { "v1beta1" };
    let env = start(line).await;
    let sim = &env;
    env.apply_all(|_, _| {}).await;
    let clusters = env.api("cluster.x-k8s.io", version, "Cluster", "clusters");
    let machines = env.api("cluster.x-k8s.io", version, "Machine", "machines");
    let mds = env.api(
        "cluster.x-k8s.io",
        version,
        "MachineDeployment",
        "machinedeployments",
    );
    let kcp_version = if v2 { "v1beta2" } else { "v1beta1" };
    let kcps = env.api(
        "controlplane.cluster.x-k8s.io",
        kcp_version,
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    );
    let running = |l: &Vec<DynamicObject>| {
        l.iter()
            .filter(|m| m.data.pointer("/status/phase") == Some(&json!("Running")))
            .count()
    };

    sim.eventually("Provisioned with 3 + 2 Running machines", || async {
        let c = clusters.get("c1").await.unwrap();
        let ms = machines
            .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=c1"))
            .await
            .unwrap()
            .items;
        c.data.pointer("/status/phase") == Some(&json!("Provisioned"))
            && ms.len() == 5
            && running(&ms) == 5
            && kcps
                .get("c1-cp")
                .await
                .unwrap()
                .data
                .pointer("/status/readyReplicas")
                == Some(&json!(3))
            && mds
                .get("c1-md")
                .await
                .unwrap()
                .data
                .pointer("/status/readyReplicas")
                == Some(&json!(2))
    })
    .await;
    // The Cluster sees its control plane's readiness on the next pass.
    let ready_type = if v2 { "Available" } else { "Ready" };
    sim.eventually("the Cluster's readiness condition", || async {
        clusters.get("c1").await.unwrap().data["status"]["conditions"]
            .as_array()
            .is_some_and(|a| {
                a.iter()
                    .any(|x| x["type"] == ready_type && x["status"] == "True")
            })
    })
    .await;
    let c = clusters.get("c1").await.unwrap();
    assert_eq!(
        c.data["spec"]["controlPlaneEndpoint"]["host"],
        "203.0.113.10"
    );
    if v2 {
        assert_eq!(
            c.data["status"]["initialization"]["infrastructureProvisioned"],
            true
        );
        assert!(
            c.data["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["type"] == "Available" && x["status"] == "True")
        );
    } else {
        assert_eq!(c.data["status"]["infrastructureReady"], true);
        assert!(
            c.data["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["type"] == "Ready" && x["status"] == "True")
        );
    }
    for m in machines.list(&ListParams::default()).await.unwrap().items {
        assert!(
            m.data["spec"]["providerID"]
                .as_str()
                .unwrap()
                .starts_with("openstack:///")
        );
        assert_eq!(m.data["status"]["nodeRef"]["name"], m.name_any());
        assert_eq!(m.data["spec"]["version"], "v1.30.4");
        assert!(
            m.finalizers()
                .contains(&"machine.cluster.x-k8s.io".to_string())
        );
    }

    // Addons and health checks.
    let hrps = env.api(
        "addons.cluster.x-k8s.io",
        "v1alpha1",
        "HelmReleaseProxy",
        "helmreleaseproxies",
    );
    let hcps = env.api(
        "addons.cluster.x-k8s.io",
        "v1alpha1",
        "HelmChartProxy",
        "helmchartproxies",
    );
    let mhcs = env.api(
        "cluster.x-k8s.io",
        version,
        "MachineHealthCheck",
        "machinehealthchecks",
    );
    let crs_version = if v2 { "v1beta2" } else { "v1beta1" };
    let bindings = env.api(
        "addons.cluster.x-k8s.io",
        crs_version,
        "ClusterResourceSetBinding",
        "clusterresourcesetbindings",
    );
    sim.eventually("addons deployed and health checks counted", || async {
        let hrp_ok = env
            .list(&hrps, "cluster.x-k8s.io/cluster-name=c1")
            .await
            .iter()
            .any(|h| h.data.pointer("/status/status") == Some(&json!("deployed")));
        let hcp_ok = hcps
            .get("ccm")
            .await
            .unwrap()
            .data
            .pointer("/status/conditions/0/status")
            == Some(&json!("True"));
        let mhc = mhcs.get("c1").await.unwrap();
        let mhc_ok = mhc.data.pointer("/status/expectedMachines") == Some(&json!(5))
            && mhc.data.pointer("/status/currentHealthy") == Some(&json!(5));
        let crs_ok = bindings.get_opt("c1").await.unwrap().is_some_and(|b| {
            b.data.pointer("/spec/bindings/0/clusterResourceSetName") == Some(&json!("c1-cni"))
        });
        hrp_ok && hcp_ok && mhc_ok && crs_ok
    })
    .await;
    let [hrp] = &env
        .list(&hrps, "helmchartproxy.addons.cluster.x-k8s.io/name=ccm")
        .await[..]
    else {
        panic!("one HelmReleaseProxy for the one matching Cluster");
    };
    // CAAPH's generateName: <chart>-<cluster>-<random>.
    assert!(
        hrp.name_any()
            .starts_with("openstack-cloud-controller-manager-c1-")
    );
    assert_eq!(hrp.data["spec"]["clusterRef"]["name"], "c1");
    assert_eq!(
        hrp.data["spec"]["chartName"],
        "openstack-cloud-controller-manager"
    );

    // Remediation: an unhealthy worker is replaced.
    let sick = machines
        .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=c1-md"))
        .await
        .unwrap()
        .items[0]
        .name_any();
    machines
        .patch(
            &sick,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"capi-sim/unhealthy": "NodeNotReady"}}}),
            ),
        )
        .await
        .unwrap();
    sim.eventually("the unhealthy worker replaced", || async {
        let ws = machines
            .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=c1-md"))
            .await
            .unwrap()
            .items;
        ws.len() == 2 && running(&ws) == 2 && ws.iter().all(|m| m.name_any() != sick)
    })
    .await;

    // Scale down 2 -> 1, choosing the victim with delete-machine.
    let workers = machines
        .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=c1-md"))
        .await
        .unwrap()
        .items;
    let (victim, keeper) = (workers[1].name_any(), workers[0].name_any());
    machines
        .patch(
            &victim,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"cluster.x-k8s.io/delete-machine": "yes"}}}),
            ),
        )
        .await
        .unwrap();
    mds.patch(
        "c1-md",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    sim.eventually("the annotated worker to go", || async {
        let names: Vec<String> = machines
            .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=c1-md"))
            .await
            .unwrap()
            .items
            .iter()
            .map(|m| m.name_any())
            .collect();
        names == vec![keeper.clone()]
    })
    .await;

    // Version bump: the worker is replaced by a v1.31 one (surge, then the old goes).
    mds.patch(
        "c1-md",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"version": "v1.31.0"}}}})),
    )
    .await
    .unwrap();
    sim.eventually("workers rolled to v1.31.0", || async {
        let ws = machines
            .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=c1-md"))
            .await
            .unwrap()
            .items;
        ws.len() == 1
            && ws[0].data["spec"]["version"] == "v1.31.0"
            && running(&ws) == 1
            && ws[0].name_any() != keeper
    })
    .await;
    // Control plane version bump rolls all three.
    kcps.patch(
        "c1-cp",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"version": "v1.31.0"}})),
    )
    .await
    .unwrap();
    sim.eventually("control plane rolled to v1.31.0", || async {
        let cp = machines
            .list(&ListParams::default().labels("cluster.x-k8s.io/control-plane-name=c1-cp"))
            .await
            .unwrap()
            .items;
        cp.len() == 3
            && running(&cp) == 3
            && cp.iter().all(|m| m.data["spec"]["version"] == "v1.31.0")
    })
    .await;

    // Delete the Cluster: everything goes, in dependency order.
    let deletions = record_deletions(
        &env,
        &[
            Kind::Machine,
            Kind::OpenStackCluster,
            Kind::KubeadmControlPlane,
            Kind::Cluster,
        ],
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    clusters
        .delete("c1", &DeleteParams::background())
        .await
        .unwrap();
    // Owned by the Cluster (directly or through the controllers' owner
    // references): deleted by the controllers or collected by the real
    // garbage collector. Left: what the Cluster does not own here.
    sim.eventually("everything owned gone", || async {
        let mut left = 0;
        for kind in [
            Kind::Cluster,
            Kind::OpenStackCluster,
            Kind::KubeadmControlPlane,
            Kind::MachineDeployment,
            Kind::MachineSet,
            Kind::Machine,
            Kind::OpenStackMachine,
            Kind::MachineHealthCheck,
            Kind::HelmReleaseProxy,
            Kind::OpenStackMachineTemplate,
            Kind::ClusterResourceSetBinding,
        ] {
            let api: Api<DynamicObject> =
                Api::namespaced_with(env.client.clone(), &env.ns, &kind.api_resource(line));
            left += api.list(&ListParams::default()).await.unwrap().items.len();
        }
        left == 0
    })
    .await;
    let deletions = deletions.lock().unwrap().clone();
    let last = |k: &str| {
        deletions
            .iter()
            .filter(|(kind, _)| *kind == k)
            .map(|(_, t)| *t)
            .max()
            .unwrap_or_else(|| panic!("no {k} deleted: {deletions:?}"))
    };
    assert!(
        last("Machine") < last("OpenStackCluster"),
        "machines before infrastructure: {deletions:?}"
    );
    assert!(
        last("KubeadmControlPlane") < last("OpenStackCluster"),
        "control plane before infrastructure"
    );
    assert!(
        last("OpenStackCluster") < last("Cluster"),
        "infrastructure before the Cluster"
    );
    env.assert_no_controller_errors();
}

#[tokio::test]
async fn capi_lifecycle_v1beta1() {
    lifecycle(Line::V1beta1).await;
}

#[tokio::test]
async fn capi_lifecycle_v1beta2() {
    lifecycle(Line::V1beta2).await;
}

#[tokio::test]
async fn faults_quota_exceeded_and_machines_never_ready() {
    let env = start(Line::V1beta1).await;
    let sim = &env;
    env.apply_all(|kind, obj| {
        if kind == "OpenStackCluster" {
            obj["metadata"]["annotations"] =
                json!({"capi-sim/fail-reason": "Quota exceeded for resources: ['floatingip']"});
        }
    })
    .await;
    let clusters = env.api("cluster.x-k8s.io", "v1beta1", "Cluster", "clusters");
    sim.eventually("the cluster to fail with the quota message", || async {
        let c = clusters.get("c1").await.unwrap();
        c.data.pointer("/status/phase") == Some(&json!("Failed"))
            && c.data
                .pointer("/status/failureMessage")
                .and_then(Value::as_str)
                .is_some_and(|m| m.contains("Quota exceeded"))
    })
    .await;
    // Workers exist (their MachineSet made them) but wait, Pending, for infrastructure.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let machines = env.machines();
    let ms = machines.list(&ListParams::default()).await.unwrap().items;
    assert!(!ms.is_empty());
    assert!(
        ms.iter()
            .all(|m| m.data.pointer("/status/phase") == Some(&json!("Pending"))),
        "{ms:?}"
    );
    assert!(
        ms.iter()
            .all(|m| m.labels().contains_key("cluster.x-k8s.io/deployment-name")),
        "no control plane machines"
    );
    env.assert_no_controller_errors();
}

#[tokio::test]
async fn fault_control_plane_stuck() {
    let env = start(Line::V1beta2).await;
    let sim = &env;
    env.apply_all(|kind, obj| {
        if kind == "KubeadmControlPlane" {
            obj["metadata"]["annotations"] = json!({"capi-sim/never-ready": "true"});
        }
    })
    .await;
    let machines = env.machines();
    sim.eventually("a control plane machine stuck in Provisioning", || async {
        let cp = machines
            .list(&ListParams::default().labels("cluster.x-k8s.io/control-plane"))
            .await
            .unwrap()
            .items;
        !cp.is_empty()
            && cp
                .iter()
                .all(|m| m.data.pointer("/status/phase") == Some(&json!("Provisioning")))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let clusters = env.api("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters");
    let c = clusters.get("c1").await.unwrap();
    // CAPI's phase says nothing of the control plane: Provisioned once the
    // infrastructure is ready with an endpoint (v1.10
    // `cluster_controller_phases.go` `reconcilePhase`); the conditions do.
    assert_eq!(c.data["status"]["phase"], "Provisioned");
    assert_eq!(
        c.data["status"]["initialization"]["infrastructureProvisioned"],
        true
    );
    assert_eq!(
        c.data["status"]["initialization"]["controlPlaneInitialized"],
        false
    );
    let cp = machines
        .list(&ListParams::default().labels("cluster.x-k8s.io/control-plane"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        cp.len(),
        1,
        "KCP waits for its first machine before adding more"
    );
    let workers = machines
        .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=c1-md"))
        .await
        .unwrap()
        .items;
    assert!(
        workers
            .iter()
            .all(|m| m.data.pointer("/status/phase") == Some(&json!("Pending"))),
        "workers wait for the control plane"
    );
    env.assert_no_controller_errors();
}
