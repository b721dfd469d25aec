//! A scripted CAPI lifecycle against the simulated controllers, on both
//! release lines: create a full object set (server-side apply, as the
//! conductor will) -> Provisioned with N Running machines; scale a
//! MachineDeployment down with `cluster.x-k8s.io/delete-machine` -> exactly
//! that machine goes; bump the version -> machines roll; delete the Cluster
//! -> everything goes, machines before infrastructure before the Cluster.

use std::time::Duration;

use capi_sim::resources::Line;
use capi_sim::store::EventType;
use kube::ResourceExt;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

mod support;
use support::{api, apply_all, eventually, start};

async fn lifecycle(line: Line) {
    let v2 = line == Line::V1beta2;
    let version = if v2 { "v1beta2" } else { "v1beta1" };
    let (client, sim) = start(line).await;
    apply_all(&client, v2, |_, _| {}).await;
    let clusters = api(&client, "cluster.x-k8s.io", version, "Cluster", "clusters");
    let machines = api(&client, "cluster.x-k8s.io", version, "Machine", "machines");
    let mds = api(
        &client,
        "cluster.x-k8s.io",
        version,
        "MachineDeployment",
        "machinedeployments",
    );
    let kcp_version = if v2 { "v1beta2" } else { "v1beta1" };
    let kcps = api(
        &client,
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

    eventually(&sim, "Provisioned with 3 + 2 Running machines", || async {
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
    eventually(&sim, "the Cluster's readiness condition", || async {
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
    let hrps = api(
        &client,
        "addons.cluster.x-k8s.io",
        "v1alpha1",
        "HelmReleaseProxy",
        "helmreleaseproxies",
    );
    let hcps = api(
        &client,
        "addons.cluster.x-k8s.io",
        "v1alpha1",
        "HelmChartProxy",
        "helmchartproxies",
    );
    let mhcs = api(
        &client,
        "cluster.x-k8s.io",
        version,
        "MachineHealthCheck",
        "machinehealthchecks",
    );
    let crs_version = if v2 { "v1beta2" } else { "v1beta1" };
    let bindings = api(
        &client,
        "addons.cluster.x-k8s.io",
        crs_version,
        "ClusterResourceSetBinding",
        "clusterresourcesetbindings",
    );
    eventually(
        &sim,
        "addons deployed and health checks counted",
        || async {
            let hrp_ok = hrps
                .get_opt("ccm-c1")
                .await
                .unwrap()
                .is_some_and(|h| h.data.pointer("/status/status") == Some(&json!("deployed")));
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
        },
    )
    .await;
    let hrp = hrps.get("ccm-c1").await.unwrap();
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
    eventually(&sim, "the unhealthy worker replaced", || async {
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
    eventually(&sim, "the annotated worker to go", || async {
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
    eventually(&sim, "workers rolled to v1.31.0", || async {
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
    eventually(&sim, "control plane rolled to v1.31.0", || async {
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
    let rv = sim.read(|s| s.resource_version());
    clusters
        .delete("c1", &DeleteParams::background())
        .await
        .unwrap();
    // Templates are not owned by the Cluster (whoever created them deletes them).
    eventually(&sim, "everything owned gone", || async {
        sim.read(|s| s.dump())["objects"]
            .as_object()
            .is_some_and(|m| {
                m.keys().all(|k| {
                    k.starts_with("namespaces")
                        || k.contains("templates")
                        || k.starts_with("helmchartproxies")
                        || k.starts_with("clusterresourcesets.")
                })
            })
    })
    .await;
    let deletions: Vec<(String, u64)> = sim.read(|s| {
        s.events_since(rv)
            .unwrap()
            .iter()
            .filter(|e| e.ty == EventType::Deleted)
            .map(|e| (s.resources[e.res].kind.clone(), e.rv))
            .collect()
    });
    let last = |k: &str| {
        deletions
            .iter()
            .filter(|(kind, _)| kind == k)
            .map(|(_, rv)| *rv)
            .max()
            .unwrap_or_else(|| panic!("no {k} deleted: {deletions:?}"))
    };
    assert!(
        last("Machine") < last("OpenStackCluster"),
        "machines before infrastructure: {deletions:?}"
    );
    assert!(
        last("OpenStackCluster") < last("Cluster"),
        "infrastructure before the Cluster"
    );
    assert!(last("KubeadmControlPlane") < last("Cluster"));
    let errors = sim.controller_errors();
    assert!(errors.is_empty(), "controller writes refused: {errors:?}");
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
    let (client, sim) = start(Line::V1beta1).await;
    apply_all(&client, false, |kind, obj| {
        if kind == "OpenStackCluster" {
            obj["metadata"]["annotations"] =
                json!({"capi-sim/fail-reason": "Quota exceeded for resources: ['floatingip']"});
        }
    })
    .await;
    let clusters = api(
        &client,
        "cluster.x-k8s.io",
        "v1beta1",
        "Cluster",
        "clusters",
    );
    eventually(
        &sim,
        "the cluster to fail with the quota message",
        || async {
            let c = clusters.get("c1").await.unwrap();
            c.data.pointer("/status/phase") == Some(&json!("Failed"))
                && c.data
                    .pointer("/status/failureMessage")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.contains("Quota exceeded"))
        },
    )
    .await;
    // Workers exist (their MachineSet made them) but wait, Pending, for infrastructure.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let machines = api(
        &client,
        "cluster.x-k8s.io",
        "v1beta1",
        "Machine",
        "machines",
    );
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
    assert!(
        sim.controller_errors().is_empty(),
        "{:?}",
        sim.controller_errors()
    );
}

#[tokio::test]
async fn fault_control_plane_stuck() {
    let (client, sim) = start(Line::V1beta2).await;
    apply_all(&client, true, |kind, obj| {
        if kind == "KubeadmControlPlane" {
            obj["metadata"]["annotations"] = json!({"capi-sim/never-ready": "true"});
        }
    })
    .await;
    let machines = api(
        &client,
        "cluster.x-k8s.io",
        "v1beta2",
        "Machine",
        "machines",
    );
    eventually(
        &sim,
        "a control plane machine stuck in Provisioning",
        || async {
            let cp = machines
                .list(&ListParams::default().labels("cluster.x-k8s.io/control-plane"))
                .await
                .unwrap()
                .items;
            !cp.is_empty()
                && cp
                    .iter()
                    .all(|m| m.data.pointer("/status/phase") == Some(&json!("Provisioning")))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let clusters = api(
        &client,
        "cluster.x-k8s.io",
        "v1beta2",
        "Cluster",
        "clusters",
    );
    let c = clusters.get("c1").await.unwrap();
    assert_eq!(c.data["status"]["phase"], "Provisioning");
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
    assert!(
        sim.controller_errors().is_empty(),
        "{:?}",
        sim.controller_errors()
    );
}
