//! Unit tests of [`super`] (status.rs), kept apart so the module reads as code.

use super::*;
use serde_json::json;

const V: &str = "v1.30.4";

fn machine(name: &str, labels: Value, ip: &str, ready: bool, version: &str) -> Value {
    json!({"metadata": {"name": name, "labels": labels}, "spec": {"version": version},
           "status": if ready { json!({"phase": "Running", "nodeRef": {"name": name}, "addresses": [{"type": "InternalIP", "address": ip}]}) } else { json!({"phase": "Provisioning"}) }})
}

fn observed(v2: bool, ready: bool) -> Observed {
    let ng = |g: &str| json!({NODEGROUP_LABEL: g});
    let cond = |t: &str, ok: bool| {
        if ok {
            json!({"type": t, "status": "True"})
        } else {
            json!({"type": t, "status": "False", "reason": "WaitingForControlPlane", "message": "0 of 3 machines ready"})
        }
    };
    let cp = json!({"cluster.x-k8s.io/control-plane": ""});
    let ready_type = if v2 { "Available" } else { "Ready" };
    let upd = if v2 {
        "upToDateReplicas"
    } else {
        "updatedReplicas"
    };
    let n = if ready { 3 } else { 0 };
    let tpl = if v2 {
        json!({"spec": {"infrastructureRef": {"name": "cp-tpl"}}})
    } else {
        json!({"infrastructureRef": {"name": "cp-tpl"}})
    };
    Observed {
        cluster: Some(
            json!({"metadata": {"finalizers": ["cluster.cluster.x-k8s.io"]}, "spec": {"controlPlaneEndpoint": {"host": "203.0.113.10", "port": 6443}},
                   "status": {"conditions": [cond(ready_type, ready)]}}),
        ),
        infra: Some(json!({"status": {"ready": true}})),
        control_plane: Some(
            json!({"metadata": {"generation": 1}, "spec": {"replicas": 3, "version": V, "machineTemplate": tpl},
                   "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": n, upd: n, "version": V}}),
        ),
        machine_deployments: vec![
            json!({"metadata": {"generation": 2, "labels": ng("default-worker")},
                   "spec": {"replicas": 2, "template": {"spec": {"version": V, "infrastructureRef": {"name": "w-tpl"}}}},
                   "status": {"observedGeneration": 2, "replicas": 2, "readyReplicas": if ready { 2 } else { 0 }, upd: if ready { 2 } else { 0 }}}),
        ],
        machines: vec![
            machine("cp-1", cp.clone(), "10.0.0.5", ready, V),
            machine("cp-2", cp.clone(), "10.0.0.6", ready, V),
            machine("cp-3", cp, "10.0.0.4", ready, V),
            machine("w-1", ng("default-worker"), "10.0.0.7", ready, V),
            machine("w-2", ng("default-worker"), "10.0.0.8", ready, V),
        ],
        helm_releases: vec![
            json!({"spec": {"releaseName": "cni-calico"}, "status": {"status": if ready { "deployed" } else { "pending-install" }}}),
        ],
        api_slices: Vec::new(),
    }
}

fn targets() -> Targets {
    Targets {
        control_plane: GroupTarget {
            key: String::new(),
            replicas: Some(3),
            version: V.into(),
            template: Some("cp-tpl".into()),
            ..GroupTarget::default()
        },
        workers: vec![GroupTarget {
            key: "default-worker".into(),
            replicas: Some(2),
            version: V.into(),
            template: Some("w-tpl".into()),
            ..GroupTarget::default()
        }],
        proxied: false,
    }
}

fn clock(elapsed: u64) -> Clock {
    Clock {
        elapsed_min: elapsed,
        create_timeout_min: 60,
        stalled_min: 0,
        update_timeout_min: 60,
    }
}

#[test]
fn create_progress_and_completion_on_both_shapes() {
    for v2 in [false, true] {
        let waiting = map(
            Operation::Create,
            &observed(v2, false),
            &targets(),
            clock(3),
        );
        assert_eq!(waiting.status, "CREATE_IN_PROGRESS");
        assert!(
            waiting
                .status_reason
                .as_deref()
                .unwrap()
                .contains("0 of 3 machines ready"),
            "{waiting:?}"
        );
        assert_eq!(
            waiting.api_address.as_deref(),
            Some("https://203.0.113.10:6443"),
            "api_address as soon as the endpoint exists"
        );
        assert_eq!(waiting.health_status, "UNHEALTHY");
        let done = map(Operation::Create, &observed(v2, true), &targets(), clock(9));
        assert_eq!(done.status, "CREATE_COMPLETE", "{done:?}");
        assert_eq!(done.status_reason, None);
        assert_eq!(done.coe_version.as_deref(), Some(V));
        assert_eq!(done.master.status, "CREATE_COMPLETE");
        assert_eq!(
            done.master.node_addresses,
            ["10.0.0.4", "10.0.0.5", "10.0.0.6"]
        );
        assert_eq!(
            done.workers["default-worker"].node_addresses,
            ["10.0.0.7", "10.0.0.8"]
        );
        assert_eq!(done.health_status, "HEALTHY");
        assert_eq!(done.health_status_reason["api"], "ok");
    }
}

#[test]
fn a_proxied_cluster_no_proxy_host_reaches_says_so() {
    let mut t = targets();
    t.proxied = true;
    let mut o = observed(false, false);
    o.cluster.as_mut().unwrap()["metadata"]["name"] = json!("k1-abc");
    o.infra = Some(json!({"status": {"ready": true, "network": {"id": "net-1"}}}));
    let v = map(Operation::Create, &o, &t, clock(3));
    let why = v.status_reason.unwrap_or_default();
    assert!(
        why.contains("no magnum-capi-proxy host reaches network net-1")
            && why.contains("k1-abc-apiserver"),
        "{why}"
    );
    // A host that withdrew (not ready) is no path either.
    let slice = |ready: bool| {
        json!({"metadata": {"name": "k1-abc-apiserver-net1", "labels": {
                   "endpointslice.kubernetes.io/managed-by": common::api_proxy::MANAGED_BY}},
               "endpoints": [{"addresses": ["192.0.2.1"], "conditions": {"ready": ready}}]})
    };
    o.api_slices = vec![slice(false)];
    let why = map(Operation::Create, &o, &t, clock(3))
        .status_reason
        .unwrap_or_default();
    assert!(why.contains("magnum-capi-proxy"), "{why}");
    // A ready one: the usual reason again.
    o.api_slices = vec![slice(true)];
    let why = map(Operation::Create, &o, &t, clock(3))
        .status_reason
        .unwrap_or_default();
    assert!(why.contains("0 of 3 machines ready"), "{why}");
    // Not proxied, or before CAPO made the network: not this reason.
    o.api_slices.clear();
    let why = map(Operation::Create, &o, &targets(), clock(3))
        .status_reason
        .unwrap_or_default();
    assert!(!why.contains("magnum-capi-proxy"), "{why}");
    o.infra = Some(json!({"status": {"ready": false}}));
    let why = map(Operation::Create, &o, &t, clock(3))
        .status_reason
        .unwrap_or_default();
    assert!(!why.contains("magnum-capi-proxy"), "{why}");
    // CAPI reached it (every machine is up): complete, slices or not.
    let mut done = observed(false, true);
    done.cluster.as_mut().unwrap()["metadata"]["name"] = json!("k1-abc");
    let v = map(Operation::Create, &done, &t, clock(9));
    assert_eq!(v.status, "CREATE_COMPLETE", "{v:?}");
}

#[test]
fn complete_only_once_every_machine_is_seen_with_its_address() {
    for v2 in [false, true] {
        // The counters say ready, but one control-plane Machine's update
        // (and one worker's) has not arrived through its watch yet.
        for name in ["cp-3", "w-2"] {
            let mut o = observed(v2, true);
            o.machines.retain(|m| m["metadata"]["name"] != name);
            let early = map(Operation::Create, &o, &targets(), clock(9));
            assert_eq!(early.status, "CREATE_IN_PROGRESS", "{name}: {early:?}");
            let mut o = observed(v2, true);
            for m in &mut o.machines {
                if m["metadata"]["name"] == name {
                    m["status"]["addresses"] = json!([]);
                }
            }
            let early = map(Operation::Create, &o, &targets(), clock(9));
            assert_eq!(early.status, "CREATE_IN_PROGRESS", "{name}: {early:?}");
        }
    }
}

#[test]
fn updates_complete_only_at_the_target() {
    let done = observed(false, true);
    assert_eq!(
        map(Operation::Update, &done, &targets(), clock(0)).status,
        "UPDATE_COMPLETE"
    );
    // A scale the MachineDeployment has not got yet (cache behind our apply).
    let mut t = targets();
    t.workers[0].replicas = Some(4);
    let v = map(Operation::Update, &done, &t, clock(0));
    assert_eq!(v.status, "UPDATE_IN_PROGRESS");
    assert!(
        v.status_reason.unwrap().contains("scaling to 4"),
        "reason names it"
    );
    // CAPI has not observed the new generation yet.
    let mut o = done.clone();
    o.machine_deployments[0]["metadata"]["generation"] = json!(3);
    assert_eq!(
        map(Operation::Update, &o, &targets(), clock(0)).status,
        "UPDATE_IN_PROGRESS"
    );
    // Scaling down: a machine still being deleted keeps it in progress,
    // and its address is gone from the row already.
    let mut o = done.clone();
    o.machine_deployments[0]["spec"]["replicas"] = json!(1);
    for k in ["replicas", "readyReplicas", "updatedReplicas"] {
        o.machine_deployments[0]["status"][k] = json!(1);
    }
    o.machines[4]["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut t = targets();
    t.workers[0].replicas = Some(1);
    let v = map(Operation::Update, &o, &t, clock(0));
    assert_eq!(v.workers["default-worker"].status, "UPDATE_IN_PROGRESS");
    assert!(
        v.workers["default-worker"]
            .reason
            .as_ref()
            .unwrap()
            .contains("1 being deleted")
    );
    assert_eq!(v.workers["default-worker"].node_addresses, ["10.0.0.7"]);
    o.machines.remove(4);
    assert_eq!(
        map(Operation::Update, &o, &t, clock(0)).status,
        "UPDATE_COMPLETE"
    );
    // An upgrade: machines at the old version do not count.
    let mut t = targets();
    t.control_plane.version = "v1.31.0".into();
    let v = map(Operation::Update, &done, &t, clock(0));
    assert!(
        v.master
            .reason
            .as_ref()
            .unwrap()
            .contains("version v1.31.0 is not applied"),
        "{v:?}"
    );
    // A held group is not done; an autoscaled group takes any count.
    let mut t = targets();
    t.workers[0].held = true;
    let v = map(Operation::Update, &done, &t, clock(0));
    assert!(
        v.status_reason
            .unwrap()
            .contains("waits for the control plane")
    );
    let mut t = targets();
    t.workers[0].replicas = None;
    assert_eq!(
        map(Operation::Update, &done, &t, clock(0)).workers["default-worker"].replicas,
        Some(2)
    );
    assert_eq!(
        map(Operation::Update, &done, &t, clock(0)).status,
        "UPDATE_COMPLETE"
    );
}

#[test]
fn stalled_updates_fail_with_the_capi_reason() {
    let mut o = observed(true, true);
    o.machine_deployments[0]["spec"]["template"]["spec"]["version"] = json!("v1.31.0");
    o.machines.push(json!({"metadata": {"name": "w-3", "labels": {NODEGROUP_LABEL: "default-worker"}},
        "spec": {"version": "v1.31.0"},
        "status": {"phase": "Provisioning", "conditions": [{"type": "InfrastructureReady", "status": "False", "reason": "InstanceCreating", "message": "instance is in BUILD"}]}}));
    let mut t = targets();
    t.workers[0].version = "v1.31.0".into();
    let mut c = clock(0);
    c.stalled_min = 59;
    assert_eq!(
        map(Operation::Update, &o, &t, c).status,
        "UPDATE_IN_PROGRESS"
    );
    c.stalled_min = 60;
    let v = map(Operation::Update, &o, &t, c);
    assert_eq!(v.status, "UPDATE_FAILED");
    let r = v.status_reason.unwrap();
    assert!(
        r.starts_with("No progress for 60 minutes; nodegroup default-worker"),
        "{r}"
    );
    assert!(
        r.contains("machine w-3: InfrastructureReady: instance is in BUILD"),
        "names the stuck machine's condition: {r}"
    );
    // Progress changes the fingerprint.
    let before = map(Operation::Update, &o, &t, clock(0)).progress;
    o.machines[5]["status"]["phase"] = json!("Provisioned");
    assert_ne!(before, map(Operation::Update, &o, &t, clock(0)).progress);
}

#[test]
fn failures_timeouts_and_deletion() {
    let mut o = observed(false, false);
    o.infra = Some(
        json!({"status": {"ready": false, "failureReason": "CreateError", "failureMessage": "Quota exceeded for floatingip"}}),
    );
    let f = map(Operation::Create, &o, &targets(), clock(1));
    assert_eq!(f.status, "CREATE_FAILED");
    assert!(f.status_reason.unwrap().contains("Quota exceeded"));
    let t = map(
        Operation::Create,
        &observed(true, false),
        &targets(),
        clock(61),
    );
    assert_eq!(t.status, "CREATE_FAILED");
    assert!(
        t.status_reason
            .unwrap()
            .starts_with("Timed out after 60 minutes")
    );
    let mut addon = observed(false, true);
    addon.helm_releases = vec![
        json!({"spec": {"releaseName": "openstack-ccm"}, "status": {"status": "failed", "conditions": [{"type": "Ready", "status": "False", "reason": "HelmInstallOrUpgradeFailed", "message": "timed out"}]}}),
    ];
    let a = map(Operation::Create, &addon, &targets(), clock(5));
    assert_eq!(a.status, "CREATE_FAILED");
    assert!(a.status_reason.unwrap().contains("openstack-ccm"));
    let mut failed = observed(false, true);
    failed.machines[3]["status"]["failureMessage"] = json!("server in ERROR");
    let u = map(Operation::Update, &failed, &targets(), clock(5));
    assert_eq!(u.status, "UPDATE_FAILED");
    assert_eq!(
        u.status_reason.as_deref(),
        Some("machine w-1 failed: server in ERROR")
    );

    let d = map(
        Operation::Delete,
        &observed(false, true),
        &targets(),
        clock(1),
    );
    assert_eq!(d.status, "DELETE_IN_PROGRESS");
    assert!(d.status_reason.unwrap().contains("5 machine(s)"));
    let mut blocked = observed(false, true);
    blocked.machines.clear();
    let b = map(Operation::Delete, &blocked, &targets(), clock(1));
    assert!(
        b.status_reason
            .unwrap()
            .contains("cluster.cluster.x-k8s.io")
    );
    let gone = map(
        Operation::Delete,
        &Observed::default(),
        &targets(),
        clock(2),
    );
    assert_eq!(gone.status, "DELETE_COMPLETE");
    assert_eq!(gone.workers["default-worker"].status, "DELETE_COMPLETE");
    // One group being deleted inside an update.
    let mut t = targets();
    t.workers[0].deleting = true;
    let v = map(Operation::Update, &observed(false, true), &t, clock(1));
    assert_eq!(v.workers["default-worker"].status, "DELETE_IN_PROGRESS");
    assert_eq!(v.status, "UPDATE_IN_PROGRESS");
    let mut o = observed(false, true);
    o.machine_deployments.clear();
    o.machines.truncate(3);
    let v = map(Operation::Update, &o, &t, clock(1));
    assert_eq!(v.workers["default-worker"].status, "DELETE_COMPLETE");
    assert_eq!(v.status, "UPDATE_COMPLETE");
}

/// CAPI v1beta2 conditions of normal-False polarity are never named as a
/// blocker (issue 34); a positive one that is not True, or a Remediating
/// that is True, is.
#[test]
fn blockers_follow_each_conditions_polarity() {
    let c = |t: &str, s: &str, reason: &str, msg: &str| json!({"type": t, "status": s, "reason": reason, "message": msg});
    let healthy = [
        c("Available", "True", "Available", ""),
        c("RollingOut", "False", "NotRollingOut", ""),
        c("ScalingUp", "False", "NotScalingUp", ""),
        c("ScalingDown", "False", "NotScalingDown", ""),
        c("Remediating", "False", "NotRemediating", ""),
        c("Deleting", "False", "NotDeleting", ""),
        c("Paused", "False", "NotPaused", ""),
    ];
    let obj = |conds: Vec<Value>| json!({"status": {"conditions": conds}});
    assert_eq!(blocking_condition(&obj(healthy.to_vec())), None);
    // What an operation is doing is not what blocks it.
    let mut scaling = healthy.to_vec();
    scaling[2] = c(
        "ScalingUp",
        "True",
        "ScalingUp",
        "Scaling up from 1 to 2 replicas",
    );
    scaling[1] = c(
        "RollingOut",
        "True",
        "RollingOut",
        "Rolling out 1 not up-to-date replicas",
    );
    assert_eq!(blocking_condition(&obj(scaling.clone())), None);
    // The real blocker, wherever it is in the list.
    scaling.push(c(
        "MachinesReady",
        "False",
        "NotReady",
        "* Machine w-1: waiting for the server to become ACTIVE",
    ));
    assert_eq!(
        blocking_condition(&obj(scaling.clone())).as_deref(),
        Some("MachinesReady: * Machine w-1: waiting for the server to become ACTIVE")
    );
    let mut remediating = healthy.to_vec();
    remediating[4] = c(
        "Remediating",
        "True",
        "Remediating",
        "Machine cp-2 is being remediated",
    );
    assert_eq!(
        blocking_condition(&obj(remediating)).as_deref(),
        Some("Remediating: Machine cp-2 is being remediated")
    );
    assert_eq!(polarity("Ready"), Polarity::Positive);
    assert_eq!(polarity("Paused"), Polarity::Ignored);
}
