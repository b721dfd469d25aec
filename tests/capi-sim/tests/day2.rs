//! What day-2 operations rely on, on both release lines, each behaviour
//! checked against the upstream controller it imitates:
//!
//! - rolling updates in batches (cluster-api v1.10
//!   `machinedeployment_rolling.go`): with maxSurge N / maxUnavailable 0, at
//!   most replicas + N machines exist and never fewer than replicas are
//!   available while a MachineDeployment rolls to a new template;
//! - a KubeadmControlPlane scales down the machines annotated
//!   `cluster.x-k8s.io/delete-machine` first (`scale.go`
//!   `selectMachineForScaleDown`) and reports the lowest machine version
//!   (`status.go`);
//! - replicas owned by the autoscaler (`calculateMachineDeploymentReplicas`):
//!   an apply without `replicas` keeps the count, the `scale` subresource
//!   changes it;
//! - the KubeadmControlPlane webhook refuses a minor-version skip.
//!
//! The webhooks are CAPI's as served by `capi_sim::admission` and called by
//! the real apiserver (`scripts/k8s-up.sh`), with its server-side apply.

mod support;

use capi_sim::Line;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::{Env, running, start};

fn lines() -> [(Line, &'static str); 2] {
    [(Line::V1beta1, "v1beta1"), (Line::V1beta2, "v1beta2")]
}

/// The MachineDeployment's machines, as the controllers' cache holds them.
fn worker_machines(env: &Env) -> Vec<Value> {
    env.controllers.read(|c| {
        c.labelled(
            capi_sim::kinds::Kind::Machine,
            &env.ns,
            &[("cluster.x-k8s.io/deployment-name", "c1-md")],
        )
        .into_iter()
        .cloned()
        .collect()
    })
}

#[tokio::test]
async fn rolling_updates_keep_within_the_batch() {
    for (line, v) in lines() {
        let env = start(line).await;
        let sim = &env;
        let v2 = line == Line::V1beta2;
        env.apply_all(|kind, o| {
            if kind == "MachineDeployment" {
                o["spec"]["replicas"] = json!(4);
                let rolling = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0}});
                if v2 {
                    o["spec"]["rollout"] = json!({"strategy": rolling});
                } else {
                    o["spec"]["strategy"] = rolling;
                }
            }
        })
        .await;
        let machines = env.api("cluster.x-k8s.io", v, "Machine", "machines");
        sim.eventually("4 workers running", || async {
            let ms = machines
                .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=c1-md"))
                .await
                .unwrap()
                .items;
            ms.len() == 4 && running(&ms) == 4
        })
        .await;
        // Roll: a new version in the template.
        let mds = env.api(
            "cluster.x-k8s.io",
            v,
            "MachineDeployment",
            "machinedeployments",
        );
        mds.patch(
            "c1-md",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"version": "v1.31.0"}}}})),
        )
        .await
        .unwrap();
        let (mut most, mut fewest_ready) = (0usize, usize::MAX);
        let mut done = false;
        for _ in 0..6000 {
            let ms = worker_machines(&env);
            let live: Vec<&Value> = ms
                .iter()
                .filter(|m| m.pointer("/metadata/deletionTimestamp").is_none())
                .collect();
            most = most.max(live.len());
            let ready = live
                .iter()
                .filter(|m| m.pointer("/status/phase") == Some(&json!("Running")))
                .count();
            fewest_ready = fewest_ready.min(ready);
            let rolled = live.len() == 4
                && ms.len() == 4
                && ready == 4
                && live
                    .iter()
                    .all(|m| m.pointer("/spec/version") == Some(&json!("v1.31.0")));
            if rolled {
                done = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert!(
            done,
            "{v}: never rolled; errors {:?}",
            env.controllers.errors()
        );
        assert!(
            most <= 6,
            "{v}: {most} machines at once, more than replicas + maxSurge"
        );
        assert!(most > 4, "{v}: the rollout surged");
        assert_eq!(
            fewest_ready, 4,
            "{v}: maxUnavailable 0 keeps every replica available"
        );
        let md = mds.get("c1-md").await.unwrap();
        let updated = if v2 {
            "upToDateReplicas"
        } else {
            "updatedReplicas"
        };
        sim.eventually("the MachineDeployment's counters", || async {
            let md = mds.get("c1-md").await.unwrap();
            md.data["status"][updated] == json!(4) && md.data["status"]["replicas"] == json!(4)
        })
        .await;
        let available = md.data["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Available")
            .cloned()
            .unwrap();
        assert_eq!(available["status"], "True", "{v}: {available}");
        env.assert_no_controller_errors();
    }
}

#[tokio::test]
async fn control_plane_scale_down_honours_delete_machine_and_reports_lowest_version() {
    for (line, v) in lines() {
        let env = start(line).await;
        let sim = &env;
        env.apply_all(|_, _| {}).await;
        let machines = env.api("cluster.x-k8s.io", v, "Machine", "machines");
        let cp = ListParams::default().labels("cluster.x-k8s.io/control-plane");
        sim.eventually("3 control-plane machines running", || async {
            running(&machines.list(&cp).await.unwrap().items) == 3
        })
        .await;
        let all = machines.list(&cp).await.unwrap().items;
        let marked: Vec<String> = all
            .iter()
            .skip(1)
            .map(|m| m.metadata.name.clone().unwrap())
            .collect();
        for m in &marked {
            machines
                .patch(
                    m,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"cluster.x-k8s.io/delete-machine": "yes"}}})),
                )
                .await
                .unwrap();
        }
        let kcps = env.api(
            "controlplane.cluster.x-k8s.io",
            v,
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
        );
        kcps.patch(
            "c1-cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
        sim.eventually("one control-plane machine left", || async {
            machines.list(&cp).await.unwrap().items.len() == 1
        })
        .await;
        let left = machines.list(&cp).await.unwrap().items;
        assert_eq!(
            left[0].metadata.name, all[0].metadata.name,
            "{v}: the unmarked one stays"
        );
        // A version upgrade: status.version is the lowest machine version
        // until every machine runs the new one.
        kcps.patch(
            "c1-cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "v1.31.2"}})),
        )
        .await
        .unwrap();
        let mut saw_old_while_rolling = false;
        let mut upgraded = false;
        for _ in 0..6000 {
            let k = kcps.get("c1-cp").await.unwrap();
            let ms = machines.list(&cp).await.unwrap().items;
            let versions: Vec<Value> = ms
                .iter()
                .map(|m| m.data["spec"]["version"].clone())
                .collect();
            if versions.contains(&json!("v1.30.4"))
                && k.data["status"]["version"] == json!("v1.30.4")
            {
                saw_old_while_rolling = true;
            }
            if k.data["status"]["version"] == json!("v1.31.2") && ms.len() == 1 && running(&ms) == 1
            {
                upgraded = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(upgraded, "{v}: the control plane never reached v1.31.2");
        assert!(
            saw_old_while_rolling,
            "{v}: status.version stayed at the lowest while rolling"
        );
        // Skipping a minor is refused by the webhook.
        let e = kcps
            .patch(
                "c1-cp",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"version": "v1.33.0"}})),
            )
            .await
            .unwrap_err();
        match e {
            kube::Error::Api(s) => {
                assert_eq!(s.code, 422);
                assert!(
                    s.message
                        .contains("cannot update Kubernetes version from v1.31.2 to v1.33.0"),
                    "{}",
                    s.message
                );
            }
            other => panic!("{other}"),
        }
    }
}

#[tokio::test]
async fn the_autoscaler_owns_annotated_replicas() {
    for (line, v) in lines() {
        let env = start(line).await;
        let sim = &env;
        let bounds = |o: &mut Value| {
            o["metadata"]["annotations"] = json!({
                "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1",
                "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5"});
        };
        env.apply_all(|kind, o| {
            if kind == "MachineDeployment" {
                bounds(o);
            }
        })
        .await;
        let mds = env.api(
            "cluster.x-k8s.io",
            v,
            "MachineDeployment",
            "machinedeployments",
        );
        assert_eq!(mds.get("c1-md").await.unwrap().data["spec"]["replicas"], 2);
        // Our next apply leaves replicas out: the count stays.
        env.apply_all(|kind, o| {
            if kind == "MachineDeployment" {
                bounds(o);
                o["spec"].as_object_mut().unwrap().remove("replicas");
            }
        })
        .await;
        assert_eq!(
            mds.get("c1-md").await.unwrap().data["spec"]["replicas"],
            2,
            "{v}: kept"
        );
        // The autoscaler writes the scale subresource.
        let scale = mds.get_scale("c1-md").await.unwrap();
        assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
        let pp = PatchParams::default();
        mds.patch_scale(
            "c1-md",
            &pp,
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
        let machines = env.api("cluster.x-k8s.io", v, "Machine", "machines");
        sim.eventually("4 workers", || async {
            running(
                &machines
                    .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=c1-md"))
                    .await
                    .unwrap()
                    .items,
            ) == 4
        })
        .await;
        env.apply_all(|kind, o| {
            if kind == "MachineDeployment" {
                bounds(o);
                o["spec"].as_object_mut().unwrap().remove("replicas");
            }
        })
        .await;
        assert_eq!(
            mds.get("c1-md").await.unwrap().data["spec"]["replicas"],
            4,
            "{v}: not reverted"
        );
        // An explicit scale outside the bounds stays: the webhook only fills an absent field.
        mds.patch_scale(
            "c1-md",
            &pp,
            &Patch::Merge(json!({"spec": {"replicas": 9}})),
        )
        .await
        .unwrap();
        env.apply_all(|kind, o| {
            if kind == "MachineDeployment" {
                bounds(o);
                o["spec"].as_object_mut().unwrap().remove("replicas");
            }
        })
        .await;
        let md = mds.get("c1-md").await.unwrap();
        assert_eq!(
            md.data["spec"]["replicas"], 9,
            "an explicit scale is an explicit value"
        );
        env.assert_no_controller_errors();
    }
}
