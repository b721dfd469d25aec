//! Unit tests of [`super`] (plan.rs), kept apart so the module reads as code.

use super::*;
use crate::capi::render::CapiLine;
use rpc_schema::ovo;
use serde_json::json;

fn obj(class: &'static ovo::ClassSpec, v: Value) -> MagnumObject {
    let mut o = MagnumObject::new(class);
    for (k, v) in v.as_object().unwrap() {
        o.set(k, v.clone()).unwrap();
    }
    o
}

#[test]
fn status_rules_and_wording_are_magnums() {
    assert!(check_status(Checked::Update, "CREATE_COMPLETE", None).is_ok());
    let e = check_status(Checked::Update, "UPDATE_IN_PROGRESS", None).unwrap_err();
    assert_eq!(e.class, "NotSupported");
    assert_eq!(
        e.message,
        "Updating a cluster when status is \"UPDATE_IN_PROGRESS\" is not supported."
    );
    for s in ["UPDATE_FAILED", "UPDATE_IN_PROGRESS", "ADOPT_COMPLETE"] {
        assert!(check_status(Checked::Resize, s, None).is_ok(), "{s}");
    }
    let e = check_status(Checked::Resize, "CREATE_FAILED", None).unwrap_err();
    assert!(
        e.message
            .starts_with("Resizing a cluster when status is \"CREATE_FAILED\"")
    );
    let e = check_status(Checked::Upgrade, "UPDATE_FAILED", None).unwrap_err();
    assert!(e.message.starts_with("Upgrading a cluster"));
    assert!(
        check_status(
            Checked::Nodegroup("nodegroup_create"),
            "CREATE_IN_PROGRESS",
            None
        )
        .is_ok()
    );
    let e = check_status(
        Checked::Nodegroup("nodegroup_update"),
        "UPDATE_COMPLETE",
        Some("CREATE_IN_PROGRESS"),
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        "nodegroup_update when nodegroup status is \"UPDATE_COMPLETE\" is not supported."
    );
}

fn rows_for(worker_version: Option<&str>) -> (MagnumObject, MagnumObject, Vec<MagnumObject>) {
    let c = obj(
        &ovo::CLUSTER,
        json!({"uuid": "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e", "project_id": "p1", "stack_id": "k8s-abcdefghijkl",
               "labels": {"kube_tag": "v1.31.2", "auto_scaling_enabled": "true", "max_node_count": "5"},
               "master_lb_enabled": true, "coe_version": "v1.30.4"}),
    );
    let t = obj(
        &ovo::CLUSTER_TEMPLATE,
        json!({"uuid": "t1", "image_id": "img-131", "network_driver": "calico", "coe": "kubernetes",
               "server_type": "vm", "cluster_distro": "ubuntu", "labels": {"kube_tag": "v1.31.2"}}),
    );
    let ng = |name: &str, role: &str, n: i64, v: Option<&str>| {
        let mut o = obj(
            &ovo::NODE_GROUP,
            json!({"uuid": format!("{name}-0000-0000"), "name": name, "role": role, "node_count": n,
                   "flavor_id": "m1", "is_default": true, "status": "UPDATE_IN_PROGRESS",
                   "labels": {"kube_tag": "v1.30.4"}, "min_node_count": 1}),
        );
        if let Some(v) = v {
            o.set("version", json!(v)).unwrap();
        }
        o
    };
    (
        c,
        t,
        vec![
            ng("default-master", "master", 3, Some("v1.31.2")),
            ng("default-worker", "worker", 2, worker_version),
        ],
    )
}

fn kcp(status_version: &str) -> Value {
    json!({"spec": {"version": "v1.31.2", "replicas": 3}, "status": {"version": status_version}})
}

fn md(version: &str) -> Value {
    json!({"metadata": {"labels": {render::NODEGROUP_LABEL: "default-worker"}},
           "spec": {"replicas": 4, "strategy": {"rollingUpdate": {"maxSurge": 3, "maxUnavailable": 0}},
                    "template": {"metadata": {"creationTimestamp": null}, "spec": {"version": version}}}})
}

#[test]
fn workers_wait_for_the_control_plane() {
    let (c, t, ngs) = rows_for(Some("v1.31.2"));
    let (input, _) = rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
    assert_eq!(input.master_version, "v1.31.2");
    assert_eq!(input.workers[0].autoscale, Some((1, 5)));
    // The control plane still runs v1.30 on some machine: hold.
    let o = Observed {
        control_plane: Some(kcp("v1.30.4")),
        machine_deployments: vec![md("v1.30.4")],
        ..Observed::default()
    };
    let d = desired(input.clone(), &ngs, &o, None);
    let w = &d.input.workers[0];
    assert_eq!(
        w.held_template.as_ref().unwrap(),
        &json!({"metadata": {}, "spec": {"version": "v1.30.4"}}),
        "the MachineDeployment keeps the template it has"
    );
    assert!(
        !w.set_replicas,
        "autoscaled and existing: replicas left to the autoscaler"
    );
    assert_eq!(
        w.rollout,
        Rollout {
            max_surge: 3,
            max_unavailable: 0
        },
        "sticky batch"
    );
    assert!(d.targets.workers[0].held);
    // Every control-plane machine runs v1.31: go.
    let o = Observed {
        control_plane: Some(kcp("v1.31.2")),
        machine_deployments: vec![md("v1.30.4")],
        ..Observed::default()
    };
    let d = desired(input.clone(), &ngs, &o, None);
    assert!(d.input.workers[0].held_template.is_none());
    assert_eq!(
        d.targets.workers[0].template.as_deref(),
        Some(render::group_template_name(&d.input, &d.input.workers[0]).as_str())
    );
    // A new group ahead of the control plane is not created yet.
    let o = Observed {
        control_plane: Some(kcp("v1.30.4")),
        ..Observed::default()
    };
    let d = desired(input.clone(), &ngs, &o, None);
    assert_eq!(d.waiting, ["default-worker"]);
    assert!(d.input.workers.is_empty());
    assert!(d.targets.workers[0].held, "and it is not done");
    // An upgrade's batch wins over what the MachineDeployment has.
    let b = Batch {
        groups: vec!["default-worker".into()],
        rollout: batch_rollout(2),
    };
    let o = Observed {
        control_plane: Some(kcp("v1.31.2")),
        machine_deployments: vec![md("v1.30.4")],
        ..Observed::default()
    };
    let d = desired(input, &ngs, &o, Some(&b));
    assert_eq!(
        d.input.workers[0].rollout,
        Rollout {
            max_surge: 2,
            max_unavailable: 0
        }
    );
}

#[test]
fn an_adopted_cluster_keeps_what_it_has_until_an_upgrade() {
    let (c, t, ngs) = rows_for(Some("v1.31.2"));
    let (input, _) = rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
    let adopted = json!({render::ADOPTED_ANNOTATION: "k8s_capi_helm_v1"});
    let theirs_ref = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                            "kind": "OpenStackMachineTemplate", "name": "k8s-abcdefghijkl-control-plane-3f2a9c1d"});
    let kcp = |v: &str| {
        json!({"metadata": {"annotations": adopted},
               "spec": {"version": v, "replicas": 3, "machineTemplate": {"infrastructureRef": theirs_ref}},
               "status": {"version": v}})
    };
    let theirs_labels = json!({"capi.stackhpc.com/node-group": "default-worker"});
    let md = |v: &str| {
        json!({"metadata": {"labels": {render::NODEGROUP_LABEL: "default-worker"}, "annotations": adopted},
               "spec": {"replicas": 2, "template": {"metadata": {"labels": theirs_labels},
                                                    "spec": {"version": v, "infrastructureRef": {"name": "w-8b7e"}}}}})
    };
    let observed = |v: &str| Observed {
        cluster: Some(json!({"metadata": {"annotations": adopted}})),
        control_plane: Some(kcp(v)),
        machine_deployments: vec![md(v)],
        ..Observed::default()
    };
    // Not adopted (no annotation on the Cluster): ours, as always.
    let plain = Observed {
        cluster: Some(json!({"metadata": {}})),
        ..observed("v1.31.2")
    };
    assert!(
        desired(input.clone(), &ngs, &plain, None)
            .input
            .adopted
            .is_none()
    );

    // Same versions: their machine templates and labels stay, no health
    // check, no kubeadm configuration, no selector.
    let d = desired(input.clone(), &ngs, &observed("v1.31.2"), None);
    let a = d.input.adopted.as_ref().expect("adopted");
    assert_eq!(a.driver, "k8s_capi_helm_v1");
    assert_eq!(a.control_plane_template.as_ref(), Some(&theirs_ref));
    assert_eq!(
        d.targets.control_plane.template.as_deref(),
        Some("k8s-abcdefghijkl-control-plane-3f2a9c1d")
    );
    let w = &d.input.workers[0];
    assert_eq!(w.adopted_labels.as_ref(), Some(&theirs_labels));
    assert_eq!(
        w.held_template.as_ref().unwrap()["spec"]["infrastructureRef"]["name"],
        "w-8b7e"
    );
    assert_eq!(d.targets.workers[0].template, None, "held: not checked");
    let objs = render::render_control_plane(&d.input);
    assert_eq!(objs.len(), 1, "no template, no health check: {objs:?}");
    assert!(objs[0]["spec"].get("kubeadmConfigSpec").is_none());
    assert_eq!(
        objs[0]["spec"]["machineTemplate"]["infrastructureRef"],
        theirs_ref
    );
    let objs = render::render_group(&d.input, w);
    assert_eq!(objs.len(), 1, "no templates, no health check: {objs:?}");
    assert!(objs[0]["spec"].get("selector").is_none());
    assert_eq!(
        objs[0]["spec"]["template"]["spec"]["infrastructureRef"]["name"],
        "w-8b7e"
    );

    // An upgrade (the rows ahead of what runs): ours, their labels kept.
    let d = desired(input, &ngs, &observed("v1.30.4"), None);
    assert_eq!(
        d.input.adopted.as_ref().unwrap().control_plane_template,
        None
    );
    let objs = render::render_control_plane(&d.input);
    assert_eq!(objs[0]["kind"], "OpenStackMachineTemplate");
    assert!(objs[1]["spec"].get("kubeadmConfigSpec").is_none());
    // (workers wait for the control plane: held as they are)
    assert!(d.input.workers[0].held_template.is_some());
    let upgraded = Observed {
        control_plane: Some(json!({"metadata": {"annotations": adopted},
                                   "spec": {"version": "v1.31.2"}, "status": {"version": "v1.31.2"}})),
        ..observed("v1.30.4")
    };
    let d = desired(
        rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs)
            .unwrap()
            .0,
        &ngs,
        &upgraded,
        None,
    );
    let w = &d.input.workers[0];
    assert!(w.held_template.is_none());
    let objs = render::render_group(&d.input, w);
    let md = objs
        .iter()
        .find(|o| o["kind"] == "MachineDeployment")
        .unwrap();
    let labels = &md["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["capi.stackhpc.com/node-group"], "default-worker");
    assert_eq!(labels[render::NODEGROUP_LABEL], "default-worker");
    assert!(md["spec"].get("selector").is_none());
}

#[test]
fn drift_names_what_to_repair() {
    let (c, t, mut ngs) = rows_for(Some("v1.31.2"));
    let (input, _) = rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
    // Nothing applied yet: everything.
    let d = desired(input.clone(), &ngs, &Observed::default(), None);
    assert_eq!(
        drift(&d, &Observed::default()),
        [Repair::ControlPlane, Repair::Group("default-worker".into())]
    );
    // What the renderer would apply, observed as such: nothing to do.
    let objects = render::render(&d.input);
    let kcp = objects
        .iter()
        .find(|o| o["kind"] == "KubeadmControlPlane")
        .unwrap()
        .clone();
    let mut md = objects
        .iter()
        .find(|o| o["kind"] == "MachineDeployment")
        .unwrap()
        .clone();
    let o = Observed {
        control_plane: Some(kcp.clone()),
        machine_deployments: vec![md.clone()],
        ..Observed::default()
    };
    let d = desired(input.clone(), &ngs, &o, None);
    assert_eq!(drift(&d, &o), [], "{:?}", d.input.workers);
    // The autoscaler changed the count: not drift.
    md["spec"]["replicas"] = json!(4);
    let o2 = Observed {
        control_plane: Some(kcp.clone()),
        machine_deployments: vec![md.clone()],
        ..Observed::default()
    };
    assert_eq!(drift(&desired(input.clone(), &ngs, &o2, None), &o2), []);
    // Its bounds changed (nodegroup_update): drift.
    md["metadata"]["annotations"][render::AUTOSCALER_MAX] = json!("9");
    let o3 = Observed {
        control_plane: Some(kcp),
        machine_deployments: vec![md],
        ..Observed::default()
    };
    assert_eq!(
        drift(&desired(input, &ngs, &o3, None), &o3),
        [Repair::Group("default-worker".into())]
    );
    // A group being deleted whose MachineDeployment is still there.
    ngs[1].set("status", json!("DELETE_IN_PROGRESS")).unwrap();
    let (input, _) = rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
    assert!(input.workers.is_empty());
    let d = desired(input, &ngs, &o3, None);
    assert!(drift(&d, &o3).contains(&Repair::DeleteGroup("default-worker".into())));
}

#[test]
fn upgrade_paths() {
    let (c, t, ngs) = rows_for(None);
    let with = |f: &str, v: Value| {
        let mut n = t.clone();
        n.set(f, v).unwrap();
        n
    };
    let tag = |v: &str| with("labels", json!({"kube_tag": v}));
    // The cluster asks for v1.31.2, the workers run v1.30.4.
    assert_eq!(
        check_upgrade(&c, &t, &tag("v1.32.0"), &ngs, true)
            .unwrap()
            .to_string(),
        "v1.32.0"
    );
    assert_eq!(
        check_upgrade(&c, &t, &tag("v1.31.2"), &ngs, true)
            .unwrap()
            .minor,
        31,
        "same: fine"
    );
    let e = check_upgrade(&c, &t, &tag("v1.31.1"), &ngs, true).unwrap_err();
    assert!(
        e.contains("downgrades are not supported") && e.contains("v1.31.2"),
        "{e}"
    );
    let e = check_upgrade(&c, &t, &tag("v1.33.0"), &ngs, true).unwrap_err();
    assert!(
        e.contains("skips a minor version") && e.contains("v1.32.x"),
        "{e}"
    );
    let e =
        check_upgrade(&c, &t, &with("network_driver", json!("cilium")), &ngs, true).unwrap_err();
    assert!(
        e.starts_with("network_driver differs (calico -> cilium)"),
        "{e}"
    );
    let e = check_upgrade(&c, &t, &with("server_type", json!("bm")), &ngs, true).unwrap_err();
    assert!(e.starts_with("server_type differs (vm -> bm)"), "{e}");
    let e = check_upgrade(&c, &t, &with("labels", json!({})), &ngs, true).unwrap_err();
    assert!(e.contains("kube_tag"), "{e}");
    let e = check_upgrade(&c, &t, &tag("latest"), &ngs, true).unwrap_err();
    assert!(e.contains("kube_tag"), "{e}");
}

#[test]
fn nodes_to_remove_by_name_node_or_server() {
    let m = |name: &str, server: &str| {
        json!({"metadata": {"name": name}, "spec": {"providerID": format!("openstack:///{server}")},
               "status": {"nodeRef": {"name": format!("node-{name}")}}})
    };
    let ms = [m("w-1", "aaaa"), m("w-2", "bbbb"), m("w-3", "cccc")];
    let refs: Vec<&Value> = ms.iter().collect();
    let pick = |names: &[&str]| {
        machines_to_remove(
            &refs,
            &names.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
        .map(|v| {
            v.iter()
                .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(pick(&["w-2"]).unwrap(), ["w-2"]);
    assert_eq!(pick(&["cccc", "node-w-1"]).unwrap(), ["w-3", "w-1"]);
    assert_eq!(
        pick(&["w-2", "bbbb"]).unwrap(),
        ["w-2"],
        "one machine named twice"
    );
    assert!(pick(&["w-9"]).unwrap_err().contains("\"w-9\""));
    assert!(pick(&[""]).is_err());
}

#[test]
fn a_topology_cluster_is_repaired_through_its_topology_only() {
    let (mut c, t, ngs) = rows_for(Some("v1.31.2"));
    let mut labels = c.get("labels").cloned().unwrap();
    labels[rows::ADOPTED_NAMESPACE_LABEL] = json!("magnum-system");
    labels["auto_scaling_enabled"] = json!("false");
    // A refused label is the ClusterClass's business, not a refusal here.
    labels["keystone_auth_enabled"] = json!("true");
    c.set("labels", labels).unwrap();
    let (input, _) = rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
    assert_eq!(input.namespace, "magnum-system");
    assert!(input.adopted.as_ref().is_some_and(|a| a.topology));
    // The label cannot point a cluster into any other namespace.
    let mut elsewhere = c.clone();
    let mut l = c.get("labels").cloned().unwrap();
    l[rows::ADOPTED_NAMESPACE_LABEL] = json!("magnum-otherproject");
    elsewhere.set("labels", l).unwrap();
    assert_eq!(rows::namespace("magnum-", &elsewhere), "magnum-p1");
    assert_eq!(rows::adopted_namespace(&elsewhere), None);
    let topo = |version: &str, workers: i64| Observed {
        cluster: Some(
            json!({"metadata": {"annotations": {render::ADOPTED_ANNOTATION: "k8s_cluster_api"}},
            "spec": {"topology": {"class": "magnum-v0.38.1", "version": version,
                "controlPlane": {"replicas": 3},
                "workers": {"machineDeployments": [{"class": "default-worker", "name": "default-worker",
                                                     "replicas": workers}]}}}}),
        ),
        // Behind the topology: its control plane on the old version (CAPI
        // orders the upgrade), no template this conductor would name.
        control_plane: Some(kcp("v1.30.4")),
        ..Observed::default()
    };
    let o = topo("v1.31.2", 2);
    let d = desired(input.clone(), &ngs, &o, None);
    assert_eq!(
        d.input.adopted.as_ref().map(|a| a.driver.as_str()),
        Some("k8s_cluster_api")
    );
    assert!(
        d.waiting.is_empty(),
        "no group waits: CAPI orders the versions"
    );
    assert_eq!(d.targets.control_plane.template, None);
    assert!(
        d.targets
            .workers
            .iter()
            .all(|w| w.template.is_none() && !w.held)
    );
    assert_eq!(drift(&d, &o), [], "the topology says what the rows say");
    // Rows ask for other counts or another version: the topology is written.
    for o in [topo("v1.31.2", 3), topo("v1.30.4", 2)] {
        let d = desired(input.clone(), &ngs, &o, None);
        assert_eq!(drift(&d, &o), [Repair::Topology]);
    }
    // Without a topology on its Cluster nothing is rendered in its place.
    let d = desired(input, &ngs, &Observed::default(), None);
    assert_eq!(drift(&d, &Observed::default()), []);
}

#[test]
fn a_new_templates_flavor_moves_what_followed_the_old_one() {
    let (_, mut t, ngs) = rows_for(None);
    t.set("flavor_id", json!("m1.small")).unwrap();
    t.set("master_flavor_id", json!("m1.medium")).unwrap();
    let mut new = t.clone();
    new.set("flavor_id", json!("m1.large")).unwrap();
    new.set("master_flavor_id", json!("m1.xlarge")).unwrap();
    let old_worker = t.get_str("flavor_id").unwrap().to_string();
    let old_master = t.get_str("master_flavor_id").unwrap().to_string();
    // A group on the template's flavor follows; one with its own stays.
    assert_eq!(
        flavor_after_upgrade(Some(&old_worker), "flavor_id", &t, &new).as_deref(),
        Some("m1.large")
    );
    assert_eq!(
        flavor_after_upgrade(Some(&old_master), "master_flavor_id", &t, &new).as_deref(),
        Some("m1.xlarge")
    );
    assert_eq!(
        flavor_after_upgrade(Some("m1.gpu"), "flavor_id", &t, &new),
        None
    );
    // The same flavor, or a template without one: nothing rolls for it.
    assert_eq!(
        flavor_after_upgrade(Some(&old_worker), "flavor_id", &t, &t),
        None
    );
    new.set("flavor_id", Value::Null).unwrap();
    assert_eq!(
        flavor_after_upgrade(Some(&old_worker), "flavor_id", &t, &new),
        None
    );
    let roles: Vec<&str> = ngs.iter().map(template_flavor_field).collect();
    assert!(roles.contains(&"master_flavor_id") && roles.contains(&"flavor_id"));
}
