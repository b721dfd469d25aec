//! The rendered CAPI objects pass Strict validation by a real kube-apiserver
//! holding the CRDs of each release line (`scripts/k8s-up.sh`: a server-side
//! apply with `dryRun=All`, as the conductor applies them, CEL rules and
//! all), are written in each CRD's stored version, reference each other
//! consistently, and are named stably.

use std::collections::BTreeMap;

use capi_sim::Line;
use conductor::capi::labels;
use conductor::capi::render::{CapiLine, ClusterInput, Rollout, WorkerGroup, render};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, ValidationDirective,
};
use serde_json::Value;

fn input(line: CapiLine, extra: &[(&str, &str)], fixed: bool) -> ClusterInput {
    let mut l: BTreeMap<String, String> = [
        ("kube_tag", "v1.30.4"),
        ("boot_volume_size", "40"),
        ("boot_volume_type", "ssd"),
        ("docker_volume_type", "fast"),
        ("availability_zone", "nova"),
        ("api_master_lb_allowed_cidrs", "10.0.0.0/8,192.168.0.0/16"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        l.insert(k.to_string(), v.to_string());
    }
    let (labels, _) = labels::parse(&l, "calico").unwrap();
    ClusterInput {
        line,
        stack_id: "k8s-demo-abcdefghijkl".into(),
        namespace: "magnum-9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5".into(),
        cluster_uuid: "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e".into(),
        project_id: "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5".into(),
        labels,
        master_version: "v1.30.4".into(),
        master_image: "ubuntu-2204-kube-v1.30.4".into(),
        master_flavor: "m1.medium".into(),
        master_count: 3,
        master_docker_volume_gb: fixed.then_some(50),
        keypair: Some("mykey".into()),
        external_network_id: Some("public".into()),
        fixed_network: fixed.then(|| "private".into()),
        fixed_subnet: fixed.then(|| "0f6a1b2c-3d4e-4b8a-9d3e-5b7c6a526f3e".into()),
        dns_nameservers: vec!["8.8.8.8".into()],
        master_lb_enabled: true,
        api_proxy: false,
        workers: vec![WorkerGroup {
            name: "default-worker".into(),
            key: "default-worker".into(),
            flavor: "m1.small".into(),
            image: "7d3c1b2a-4e5f-46a7-b8c9-d0e1f2a3b4c5".into(),
            version: "v1.30.4".into(),
            count: 2,
            autoscale: None,
            set_replicas: true,
            rollout: Rollout::default(),
            held_template: None,
            adopted_labels: None,
            docker_volume_gb: Some(20),
            node_labels: [("tier".to_string(), "web".to_string())]
                .into_iter()
                .collect(),
            node_taints: vec![("dedicated".into(), Some("gpu".into()), "NoSchedule".into())],
        }],
        adopted: None,
    }
}

/// Send `o` as the conductor does (server-side apply, Strict), as a dry run.
async fn dry_run(client: &kube::Client, o: &Value) -> Result<(), kube::Error> {
    let av = o["apiVersion"].as_str().unwrap();
    let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
    let kind = o["kind"].as_str().unwrap();
    let (ar, _) =
        kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await?;
    let api: Api<DynamicObject> = match o["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let mut pp = PatchParams::apply("magnum-conductor");
    pp.dry_run = true;
    pp.field_validation = Some(ValidationDirective::Strict);
    api.patch(
        o["metadata"]["name"].as_str().unwrap(),
        &pp,
        &Patch::Apply(o),
    )
    .await
    .map(|_| ())
}

/// The version a CRD stores (`None` for built-in kinds).
async fn stored_version(client: &kube::Client, group: &str, kind: &str) -> Option<String> {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let list = crds.list(&Default::default()).await.unwrap();
    list.items.into_iter().find_map(|c| {
        (c.data["spec"]["group"] == group && c.data["spec"]["names"]["kind"] == kind).then(|| {
            c.data["spec"]["versions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["storage"] == true)
                .and_then(|v| v["name"].as_str())
                .unwrap()
                .to_string()
        })
    })
}

async fn ensure_namespace(client: &kube::Client, ns: &str) {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Namespace"),
            "namespaces",
        ),
    );
    api.patch(
        ns,
        &PatchParams::apply("test"),
        &Patch::Apply(
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        ),
    )
    .await
    .unwrap();
}

async fn client(line: Line) -> kube::Client {
    let client = capi_sim::controlplane::shared(line).client().await.unwrap();
    ensure_namespace(&client, "magnum-9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5").await;
    client
}

fn references(v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            if let (Some(k), Some(n)) = (
                m.get("kind").and_then(Value::as_str),
                m.get("name").and_then(Value::as_str),
            ) && (m.contains_key("apiGroup") || m.contains_key("apiVersion"))
            {
                out.push((k.to_string(), n.to_string()));
            }
            for x in m.values() {
                references(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| references(x, out)),
        _ => {}
    }
}

async fn check(line: Line, capi: CapiLine, objects: &[Value]) {
    let client = client(line).await;
    for o in objects {
        let av = o["apiVersion"].as_str().unwrap();
        let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
        let kind = o["kind"].as_str().unwrap();
        if let Some(stored) = stored_version(&client, group, kind).await {
            assert_eq!(
                stored, version,
                "{kind} must be written in the stored version ({capi:?})"
            );
        }
        if let Err(e) = dry_run(&client, o).await {
            panic!("{kind} ({capi:?}) refused by the apiserver: {e}");
        }
    }
    // Every reference points at a rendered object.
    let names: Vec<(String, String)> = objects
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut refs = Vec::new();
    for o in objects {
        references(&o["spec"], &mut refs);
    }
    assert!(!refs.is_empty());
    for r in refs {
        assert!(names.contains(&r), "dangling reference {r:?}");
    }
}

#[tokio::test]
async fn rendered_objects_are_strict_valid_on_both_lines() {
    for (line, capi) in [
        (Line::V1beta1, CapiLine::V1beta1),
        (Line::V1beta2, CapiLine::V1beta2),
    ] {
        for fixed in [false, true] {
            let objs = render(&input(capi, &[], fixed));
            let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
            assert_eq!(
                kinds,
                [
                    "OpenStackCluster",
                    "Cluster",
                    "OpenStackMachineTemplate",
                    "KubeadmControlPlane",
                    "MachineHealthCheck",
                    "OpenStackMachineTemplate",
                    "KubeadmConfigTemplate",
                    "MachineDeployment",
                    "MachineHealthCheck"
                ]
            );
            check(line, capi, &objs).await;
        }
        let no_heal = render(&input(capi, &[("auto_healing_enabled", "false")], false));
        assert!(no_heal.iter().all(|o| o["kind"] != "MachineHealthCheck"));
        check(line, capi, &no_heal).await;
    }
}

#[tokio::test]
async fn a_cluster_without_an_api_floating_ip_is_published_for_the_proxy() {
    for (line, capi) in [
        (Line::V1beta1, CapiLine::V1beta1),
        (Line::V1beta2, CapiLine::V1beta2),
    ] {
        let mut c = input(capi, &[("master_lb_floating_ip_enabled", "false")], false);
        c.api_proxy = true;
        let objs = render(&c);
        let name = common::api_proxy::server_name(&c.stack_id, &c.namespace);
        let osc = objs
            .iter()
            .find(|o| o["kind"] == "OpenStackCluster")
            .unwrap();
        assert_eq!(osc["spec"]["disableAPIServerFloatingIP"], true);
        let kcp = objs
            .iter()
            .find(|o| o["kind"] == "KubeadmControlPlane")
            .unwrap();
        assert_eq!(
            kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["certSANs"],
            serde_json::json!([name])
        );
        let svc = objs.iter().find(|o| o["kind"] == "Service").unwrap();
        assert_eq!(
            svc["metadata"]["name"],
            common::api_proxy::service_name(&c.stack_id)
        );
        assert_eq!(
            svc["metadata"]["labels"][common::api_proxy::SERVICE_LABEL],
            c.stack_id.as_str()
        );
        assert!(svc["spec"].get("selector").is_none());
        assert_eq!(svc["spec"]["ports"][0]["name"], "https");
        // The Service's namespace is the cluster's.
        ensure_namespace(&client(line).await, &c.namespace).await;
        check(line, capi, &objs).await;
        // An adopted control plane keeps its own certificate: not proxied.
        c.adopted = Some(conductor::capi::render::Adopted::default());
        assert!(!c.proxied());
        assert!(render(&c).iter().all(|o| o["kind"] != "Service"));
    }
}

#[tokio::test]
async fn api_server_labels_are_flags_on_both_lines() {
    let labels = [
        ("api_server_cert_sans", "api.example.com,192.0.2.7"),
        (
            "api_server_tls_cipher_suites",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        ),
        (
            "kubelet_tls_cipher_suites",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        ),
        ("admission_control_list", "AlwaysPullImages"),
        ("oidc_issuer_url", "https://issuer.example.com"),
        ("oidc_client_id", "kubernetes"),
    ];
    for (line, capi) in [
        (Line::V1beta1, CapiLine::V1beta1),
        (Line::V1beta2, CapiLine::V1beta2),
    ] {
        let objs = render(&input(capi, &labels, false));
        // A flag of kubeadm extraArgs in either line's shape.
        let arg = |args: &Value, name: &str| -> Option<String> {
            match args {
                Value::Object(m) => m.get(name).and_then(Value::as_str).map(str::to_string),
                Value::Array(a) => a
                    .iter()
                    .find(|e| e["name"] == name)
                    .and_then(|e| e["value"].as_str())
                    .map(str::to_string),
                _ => None,
            }
        };
        let kcp = objs
            .iter()
            .find(|o| o["kind"] == "KubeadmControlPlane")
            .unwrap();
        let cc = &kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"];
        let api = &cc["apiServer"]["extraArgs"];
        assert_eq!(arg(api, "cloud-provider").as_deref(), Some("external"));
        assert_eq!(
            arg(api, "tls-cipher-suites").as_deref(),
            Some("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
        );
        assert_eq!(
            arg(api, "enable-admission-plugins").as_deref(),
            Some("NodeRestriction,AlwaysPullImages")
        );
        assert_eq!(
            arg(api, "oidc-issuer-url").as_deref(),
            Some("https://issuer.example.com")
        );
        assert_eq!(arg(api, "oidc-client-id").as_deref(), Some("kubernetes"));
        assert_eq!(
            cc["apiServer"]["certSANs"],
            serde_json::json!(["api.example.com", "192.0.2.7"])
        );
        // Every kubelet: the control plane's (init, join) and the workers'.
        let kct = objs
            .iter()
            .find(|o| o["kind"] == "KubeadmConfigTemplate")
            .unwrap();
        for nr in [
            &kcp["spec"]["kubeadmConfigSpec"]["initConfiguration"]["nodeRegistration"],
            &kcp["spec"]["kubeadmConfigSpec"]["joinConfiguration"]["nodeRegistration"],
            &kct["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"],
        ] {
            assert_eq!(
                arg(&nr["kubeletExtraArgs"], "tls-cipher-suites").as_deref(),
                Some("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
                "{nr}"
            );
        }
        check(line, capi, &objs).await;
    }
}

/// Issue 32: the placement, network, storage, load balancer and audit
/// labels, in the objects and accepted by both lines' CRDs.
#[tokio::test]
async fn infrastructure_labels_on_both_lines() {
    let labels = [
        ("boot_volume_availability_zone", "az-volumes"),
        ("control_plane_availability_zones", "az-1,az-2,az-3"),
        ("api_server_lb_flavor", "ha"),
        ("api_server_lb_availability_zone", "az-lb"),
        ("api_server_floating_ip", "203.0.113.7"),
        (
            "extra_network_names",
            "storage,0f6a1b2c-3d4e-4b8a-9d3e-5b7c6a526f3e",
        ),
        ("etcd_volume_size", "20"),
        ("etcd_volume_type", "nvme"),
        ("server_group_policies", "soft-anti-affinity"),
        ("different_failure_domain", "true"),
        ("audit_log_enabled", "true"),
        ("audit_log_max_age", "7"),
        ("keystone_auth_enabled", "true"),
    ];
    for (line, capi) in [
        (Line::V1beta1, CapiLine::V1beta1),
        (Line::V1beta2, CapiLine::V1beta2),
    ] {
        let c = input(capi, &labels, true);
        let objs = render(&c);
        let of =
            |kind: &str| -> Vec<&Value> { objs.iter().filter(|o| o["kind"] == kind).collect() };
        let osc = &of("OpenStackCluster")[0]["spec"];
        assert_eq!(osc["apiServerLoadBalancer"]["flavor"], "ha");
        assert_eq!(osc["apiServerLoadBalancer"]["availabilityZone"], "az-lb");
        assert_eq!(osc["apiServerFloatingIP"], "203.0.113.7");
        assert_eq!(
            osc["controlPlaneAvailabilityZones"],
            serde_json::json!(["az-1", "az-2", "az-3"])
        );
        let omts = of("OpenStackMachineTemplate");
        let (cp, worker) = (
            &omts[0]["spec"]["template"]["spec"],
            &omts[1]["spec"]["template"]["spec"],
        );
        // The etcd volume on the control plane only, before containerd's.
        let names = |m: &Value| -> Vec<String> {
            m["additionalBlockDevices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(cp), ["etcd", "containerd"]);
        assert_eq!(names(worker), ["containerd"]);
        let etcd = &cp["additionalBlockDevices"][0];
        assert_eq!(etcd["sizeGiB"], 20);
        assert_eq!(etcd["storage"]["volume"]["type"], "nvme");
        for (m, group) in [(cp, "control-plane"), (worker, "default-worker")] {
            assert_eq!(m["rootVolume"]["availabilityZone"]["name"], "az-volumes");
            assert_eq!(
                m["ports"],
                serde_json::json!([{}, {"network": {"filter": {"name": "storage"}}},
                                   {"network": {"id": "0f6a1b2c-3d4e-4b8a-9d3e-5b7c6a526f3e"}}])
            );
            assert_eq!(
                m["serverGroup"]["filter"]["name"],
                format!("magnum-{}-{group}", c.cluster_uuid)
            );
            assert_eq!(
                m["schedulerHintAdditionalProperties"],
                serde_json::json!([{"name": "different_failure_domain",
                                    "value": {"type": "Bool", "bool": true}}])
            );
        }
        let kcp = &of("KubeadmControlPlane")[0]["spec"]["kubeadmConfigSpec"];
        assert_eq!(
            kcp["mounts"],
            serde_json::json!([
                ["LABEL=etcd_disk", "/var/lib/etcd"],
                ["LABEL=containerd", "/var/lib/containerd"]
            ])
        );
        assert_eq!(kcp["diskSetup"]["partitions"][0]["device"], "/dev/vdb");
        assert_eq!(kcp["diskSetup"]["partitions"][1]["device"], "/dev/vdc");
        // Workers keep containerd on their first extra disk.
        let kct = &of("KubeadmConfigTemplate")[0]["spec"]["template"]["spec"];
        assert_eq!(kct["diskSetup"]["partitions"][0]["device"], "/dev/vdb");
        // The audit log: flags, the policy file, the two host directories.
        let api = &kcp["clusterConfiguration"]["apiServer"];
        let args: BTreeMap<String, String> = match &api["extraArgs"] {
            Value::Object(m) => m
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect(),
            Value::Array(a) => a
                .iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap().to_string(),
                        e["value"].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
            other => panic!("extraArgs {other}"),
        };
        assert_eq!(args["audit-log-maxage"], "7");
        assert_eq!(args["audit-log-maxbackup"], "10");
        assert_eq!(
            args["audit-log-path"],
            "/var/log/audit/kube-apiserver-audit.log"
        );
        let policy = &args["audit-policy-file"];
        assert_eq!(kcp["files"][0]["path"], policy.as_str());
        assert!(
            kcp["files"][0]["content"]
                .as_str()
                .unwrap()
                .starts_with("apiVersion: audit.k8s.io/v1\nkind: Policy\n")
        );
        let mounts: Vec<&str> = api["extraVolumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["mountPath"].as_str().unwrap())
            .collect();
        assert!(policy.starts_with(mounts[0]) && args["audit-log-path"].starts_with(mounts[1]));
        // Keystone: both webhooks read the kubeconfig the control plane
        // writes, in a directory the static pod mounts; RBAC before it.
        assert_eq!(args["authorization-mode"], "Node,RBAC,Webhook");
        let hook = &args["authentication-token-webhook-config-file"];
        assert_eq!(&args["authorization-webhook-config-file"], hook);
        assert_eq!(kcp["files"][1]["path"], hook.as_str());
        assert!(
            kcp["files"][1]["content"]
                .as_str()
                .unwrap()
                .contains("server: https://127.0.0.1:8443/webhook")
        );
        assert!(hook.starts_with(mounts[2]));
        check(line, capi, &objs).await;
    }
    // Without an API load balancer, its flavor and zone have nowhere to go.
    let mut c = input(CapiLine::V1beta1, &labels, false);
    c.master_lb_enabled = false;
    let osc = render(&c)
        .into_iter()
        .find(|o| o["kind"] == "OpenStackCluster")
        .unwrap();
    assert!(osc["spec"]["apiServerLoadBalancer"].get("flavor").is_none());
    assert_eq!(osc["spec"]["apiServerFloatingIP"], "203.0.113.7");
}

#[tokio::test]
async fn docker_volume_size_and_flavor_ids() {
    for (line, capi) in [
        (Line::V1beta1, CapiLine::V1beta1),
        (Line::V1beta2, CapiLine::V1beta2),
    ] {
        let objs = render(&input(capi, &[], true));
        let of =
            |kind: &str| -> Vec<&Value> { objs.iter().filter(|o| o["kind"] == kind).collect() };
        let omts = of("OpenStackMachineTemplate");
        let sizes: Vec<i64> = omts
            .iter()
            .map(|o| {
                o["spec"]["template"]["spec"]["additionalBlockDevices"][0]["sizeGiB"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        assert_eq!(sizes, [50, 20], "control plane, then the worker group");
        let dev = &omts[1]["spec"]["template"]["spec"]["additionalBlockDevices"][0];
        assert_eq!(dev["storage"]["volume"]["type"], "fast");
        let kct = &of("KubeadmConfigTemplate")[0]["spec"]["template"]["spec"];
        assert_eq!(kct["mounts"][0][1], "/var/lib/containerd");
        assert_eq!(kct["diskSetup"]["filesystems"][0]["label"], "containerd");
        let kcp = &of("KubeadmControlPlane")[0]["spec"]["kubeadmConfigSpec"];
        assert_eq!(kcp["mounts"][0][0], "LABEL=containerd");
        // Flavors: names as `flavor`, UUIDs as `flavorID`.
        assert_eq!(omts[0]["spec"]["template"]["spec"]["flavor"], "m1.medium");
        let mut by_id = input(capi, &[], true);
        by_id.master_flavor = "8c2e0a31-5f4b-4d8e-9a7c-1b2c3d4e5f60".into();
        let objs = render(&by_id);
        let omt = objs
            .iter()
            .find(|o| o["kind"] == "OpenStackMachineTemplate")
            .unwrap();
        assert_eq!(
            omt["spec"]["template"]["spec"]["flavorID"],
            "8c2e0a31-5f4b-4d8e-9a7c-1b2c3d4e5f60"
        );
        assert!(omt["spec"]["template"]["spec"].get("flavor").is_none());
        check(line, capi, &objs).await;
        // Without it: no volume, no disk setup.
        let plain = render(&input(capi, &[], false));
        let kcp = plain
            .iter()
            .find(|o| o["kind"] == "KubeadmControlPlane")
            .unwrap();
        assert!(kcp["spec"]["kubeadmConfigSpec"].get("mounts").is_none());
    }
}

#[test]
fn template_names_follow_their_spec() {
    let a = render(&input(CapiLine::V1beta1, &[], false));
    let b = render(&input(CapiLine::V1beta1, &[], false));
    assert_eq!(a, b, "rendering is deterministic");
    let mut changed = input(CapiLine::V1beta1, &[], false);
    changed.workers[0].flavor = "m1.large".into();
    let c = render(&changed);
    let name = |objs: &[Value], i: usize| objs[i]["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(name(&a, 2), name(&c, 2), "control plane template unchanged");
    assert_ne!(
        name(&a, 5),
        name(&c, 5),
        "worker template renamed: machines roll"
    );
    assert_eq!(
        c[7]["spec"]["template"]["spec"]["infrastructureRef"]["name"],
        name(&c, 5)
    );
    // A long cluster name keeps the whole hash in template names.
    let mut long = changed.clone();
    long.stack_id = format!("{}-abcdefghijkl", "x".repeat(30));
    let mut long2 = long.clone();
    long2.workers[0].flavor = "m1.xlarge".into();
    let (l1, l2) = (render(&long), render(&long2));
    assert!(name(&l1, 5).len() <= 63);
    assert_ne!(name(&l1, 5), name(&l2, 5));
    // The allowed CIDRs reach CAPO.
    assert_eq!(
        a[0]["spec"]["apiServerLoadBalancer"]["allowedCIDRs"][1],
        "192.168.0.0/16"
    );
}

#[tokio::test]
async fn rollouts_autoscaling_and_held_groups_are_strict_valid() {
    use conductor::capi::render::{AUTOSCALER_MAX, AUTOSCALER_MIN};
    for (line, capi) in [
        (Line::V1beta1, CapiLine::V1beta1),
        (Line::V1beta2, CapiLine::V1beta2),
    ] {
        let mut i = input(capi, &[("auto_scaling_enabled", "true")], false);
        let g = &mut i.workers[0];
        g.autoscale = Some((1, 5));
        g.rollout = Rollout {
            max_surge: 3,
            max_unavailable: 0,
        };
        let objs = render(&i);
        check(line, capi, &objs).await;
        let md = objs
            .iter()
            .find(|o| o["kind"] == "MachineDeployment")
            .unwrap();
        assert_eq!(
            md["spec"]["replicas"], 2,
            "a new MachineDeployment gets its count"
        );
        assert_eq!(md["metadata"]["annotations"][AUTOSCALER_MIN], "1");
        assert_eq!(md["metadata"]["annotations"][AUTOSCALER_MAX], "5");
        let strategy = if capi == CapiLine::V1beta2 {
            &md["spec"]["rollout"]["strategy"]
        } else {
            &md["spec"]["strategy"]
        };
        assert_eq!(strategy["rollingUpdate"]["maxSurge"], 3);
        // Existing: the autoscaler owns the count.
        i.workers[0].set_replicas = false;
        let md2 = render(&i)
            .into_iter()
            .find(|o| o["kind"] == "MachineDeployment")
            .unwrap();
        assert!(md2["spec"].get("replicas").is_none());
        // Held: the MachineDeployment keeps its template, no new templates.
        i.workers[0].held_template = Some(md["spec"]["template"].clone());
        i.workers[0].version = "v1.31.0".into();
        let held = conductor::capi::render::render_group(&i, &i.workers[0]);
        let kinds: Vec<&str> = held.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["MachineDeployment", "MachineHealthCheck"]);
        assert_eq!(held[0]["spec"]["template"], md["spec"]["template"]);
        // The autoscaler's own objects.
        let a = conductor::capi::autoscaler::render(
            &i,
            "registry.k8s.io/autoscaling/cluster-autoscaler",
        );
        let kinds: Vec<&str> = a.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["ServiceAccount", "Role", "RoleBinding", "Deployment"]
        );
        let client = client(line).await;
        for o in &a {
            if let Err(e) = dry_run(&client, o).await {
                panic!("{} refused: {e}", o["kind"]);
            }
        }
        let c = &a[3]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            c["image"],
            "registry.k8s.io/autoscaling/cluster-autoscaler:v1.30.0"
        );
        assert!(c["args"].as_array().unwrap().iter().any(|x| x
            == &serde_json::json!(format!(
                "--node-group-auto-discovery=clusterapi:namespace={},clusterName={}",
                i.namespace, i.stack_id
            ))));
        assert!(conductor::capi::autoscaler::render(&input(capi, &[], false), "x").is_empty());
    }
}

#[tokio::test]
async fn the_check_catches_mistakes() {
    let client = client(Line::V1beta2).await;
    let objs = render(&input(CapiLine::V1beta2, &[], false));
    let kcp = objs
        .iter()
        .find(|o| o["kind"] == "KubeadmControlPlane")
        .unwrap();
    // A v1beta1-shaped extraArgs map is wrong on v1beta2 (a list there), and
    // an unknown field: a real apiserver refuses both server-side applies
    // with a 500 "failed to create typed patch object ..." naming the field
    // (kube-apiserver 1.28, whatever fieldValidation says), which the
    // conductor must treat as a refusal, not retry as an outage.
    let mut wrong = kcp.clone();
    wrong["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"] =
        serde_json::json!({"cloud-provider": "external"});
    let mut unknown = kcp.clone();
    unknown["spec"]["bogus"] = serde_json::json!(1);
    for (o, field) in [
        (wrong, "apiServer.extraArgs: expected list"),
        (unknown, ".spec.bogus"),
    ] {
        match dry_run(&client, &o).await {
            Err(kube::Error::Api(s)) => {
                assert!(s.message.contains(field), "{}", s.message);
                assert!(
                    !conductor::mgmt::is_transient(&kube::Error::Api(s.clone())),
                    "a refused object is not retried: {s:?}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    // A value outside the schema's enum: 422, as any schema violation.
    let mut md = objs
        .iter()
        .find(|o| o["kind"] == "MachineDeployment")
        .unwrap()
        .clone();
    md["spec"]["rollout"]["strategy"]["type"] = serde_json::json!("Sideways");
    match dry_run(&client, &md).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422, "{s:?}"),
        other => panic!("{other:?}"),
    }
}

/// The documents a ClusterResourceSet's Secret holder applies.
fn resource_set_docs(holder: &Value) -> Vec<Value> {
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(holder.clone()).unwrap();
    let data = secret.data.unwrap();
    assert_eq!(data.len(), 1);
    let (_, bytes) = data.into_iter().next().unwrap();
    String::from_utf8(bytes.0)
        .unwrap()
        .split("\n---\n")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn addons_are_strict_valid_and_configurable() {
    use conductor::capi::addons::{self, AddonCharts, CloudConfig};
    let cloud = CloudConfig {
        auth_url: "https://keystone.example.com/v3".into(),
        region: Some("RegionOne".into()),
        application_credential_id: "ac-id".into(),
        application_credential_secret: common::secret::Secret::new("ac-SECRET"),
        ca_file_content: None,
    };
    assert!(!format!("{cloud:?}").contains("ac-SECRET"));
    for (line, capi) in [
        (Line::V1beta1, CapiLine::V1beta1),
        (Line::V1beta2, CapiLine::V1beta2),
    ] {
        let c = input(
            capi,
            &[("container_infra_prefix", "registry.local:5000/mirror/")],
            false,
        );
        let mut charts = AddonCharts::default();
        charts.occm.repo = "https://charts.mirror.local/cpo".into();
        let calico = addons::render(&c, "calico", &charts, &cloud, &c.cluster_uuid);
        let cilium = addons::render(&c, "cilium", &charts, &cloud, "kubernetes");
        assert_eq!(calico[0]["spec"]["chartName"], "tigera-operator");
        assert_eq!(cilium[0]["spec"]["chartName"], "cilium");
        assert_eq!(
            calico[1]["spec"]["repoURL"],
            "https://charts.mirror.local/cpo"
        );
        assert!(
            calico[0]["spec"]["valuesTemplate"]
                .as_str()
                .unwrap()
                .contains("registry: registry.local:5000/mirror")
        );
        // The credential is in no HelmChartProxy: the charts mount Secrets
        // of ours (`secret.create: false`), which a ClusterResourceSet
        // (Reconcile: a rotation reaches them) applies in kube-system.
        for o in calico.iter().filter(|o| o["kind"] == "HelmChartProxy") {
            let v = o["spec"]["valuesTemplate"].as_str().unwrap();
            assert!(!v.contains("ac-SECRET") && !v.contains("ac-id"), "{v}");
        }
        let n = calico.len();
        let (holder, crs) = (&calico[n - 2], &calico[n - 1]);
        assert_eq!(holder["type"], "addons.cluster.x-k8s.io/resource-set");
        assert_eq!(crs["spec"]["strategy"], "Reconcile");
        let secrets = resource_set_docs(holder);
        let names: Vec<&str> = secrets
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, [addons::OCCM_SECRET, addons::CSI_SECRET]);
        for d in &secrets {
            assert_eq!(d["metadata"]["namespace"], "kube-system");
            let conf = d["stringData"]["cloud.conf"].as_str().unwrap();
            assert!(
                conf.contains("application-credential-id=ac-id\n")
                    && conf.contains("application-credential-secret=ac-SECRET\n")
                    && conf.contains("region=RegionOne\n")
                    && !conf.contains("ca-file"),
                "{conf}"
            );
            assert!(d["stringData"].get("ca.crt").is_none());
        }
        // The cluster's identity in OpenStack: OCCM's cluster.name and
        // Cinder CSI's clusterID, read back as the clean-up reads it.
        let occm = calico[1]["spec"]["valuesTemplate"].as_str().unwrap();
        let csi = calico[2]["spec"]["valuesTemplate"].as_str().unwrap();
        assert!(
            occm.contains(&format!("cluster:\n  name: \"{}\"\n", c.cluster_uuid)),
            "{occm}"
        );
        assert!(
            csi.contains(&format!("clusterID: \"{}\"\n", c.cluster_uuid)),
            "{csi}"
        );
        assert_eq!(
            conductor::cloud::identity::identity_from_occm_values(Some(occm), "other"),
            c.cluster_uuid
        );
        let legacy = cilium[1]["spec"]["valuesTemplate"].as_str().unwrap();
        assert_eq!(
            conductor::cloud::identity::identity_from_occm_values(Some(legacy), &c.cluster_uuid),
            "kubernetes"
        );
        // The label addons (issue 32): metrics-server by default; with the
        // labels, ingress-nginx, kube-prometheus-stack and (Cilium's)
        // Hubble, from the configured charts, images from the mirror.
        let release = |objs: &[Value]| -> Vec<String> {
            objs.iter()
                .filter(|o| o["kind"] == "HelmChartProxy")
                .map(|o| o["spec"]["releaseName"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            release(&calico),
            [
                "cni-calico",
                "openstack-ccm",
                "cinder-csi",
                "metrics-server"
            ]
        );
        let ms = calico[3]["spec"]["valuesTemplate"].as_str().unwrap();
        assert!(
            ms.contains("--kubelet-insecure-tls")
                && ms.contains("repository: registry.local:5000/mirror/metrics-server/"),
            "{ms}"
        );
        let mut with = input(
            capi,
            &[
                ("metrics_server_enabled", "false"),
                ("ingress_controller", "nginx"),
                ("monitoring_enabled", "true"),
                ("keystone_auth_enabled", "true"),
            ],
            false,
        );
        // `input` parses for Calico, which refuses Hubble (a unit test).
        with.labels.infra.addons.hubble_ui = true;
        charts.monitoring.version = "60.0.0".into();
        let private_ca = CloudConfig {
            ca_file_content: Some(
                "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            ),
            ..cloud.clone()
        };
        let more = addons::render(&with, "cilium", &charts, &private_ca, &with.cluster_uuid);
        assert_eq!(
            release(&more),
            [
                "cni-cilium",
                "openstack-ccm",
                "cinder-csi",
                "ingress-nginx",
                "monitoring"
            ]
        );
        assert!(
            more[0]["spec"]["valuesTemplate"]
                .as_str()
                .unwrap()
                .contains("hubble:\n  enabled: true\n  relay:\n    enabled: true\n  ui:\n    enabled: true\n")
        );
        // A private CA: `ca.crt` beside each cloud.conf, which names it at
        // the path its chart mounts the Secret; the pods' annotation
        // changes with it (they restart on a new CA or credential).
        let n = more.len();
        let secrets = resource_set_docs(&more[n - 2]);
        for (d, mount) in secrets.iter().zip([addons::OCCM_MOUNT, addons::CSI_MOUNT]) {
            let conf = d["stringData"]["cloud.conf"].as_str().unwrap();
            assert!(
                conf.contains(&format!("ca-file={mount}/ca.crt\n")),
                "{conf}"
            );
            assert_eq!(
                d["stringData"]["ca.crt"],
                private_ca.ca_file_content.as_deref().unwrap()
            );
        }
        let annotation = |objs: &[Value], i: usize| {
            let v = objs[i]["spec"]["valuesTemplate"].as_str().unwrap();
            let line = v
                .lines()
                .find(|l| l.trim_start().starts_with(addons::CONFIG_ANNOTATION))
                .unwrap_or_else(|| panic!("{v}"));
            line.to_string()
        };
        let plain = addons::render(&with, "cilium", &charts, &cloud, &with.cluster_uuid);
        assert_ne!(annotation(&more, 1), annotation(&plain, 1));
        assert_ne!(annotation(&more, 2), annotation(&plain, 2));
        assert_eq!(more[3]["spec"]["chartName"], "ingress-nginx");
        assert_eq!(more[3]["spec"]["namespace"], "ingress-nginx");
        assert_eq!(more[6]["spec"]["chartName"], "kube-prometheus-stack");
        assert_eq!(more[6]["spec"]["version"], "60.0.0");
        // `keystone_auth_enabled`: a ClusterResourceSet applying, once, the
        // ConfigMap of k8s-keystone-auth's objects to this cluster only.
        let (cm, crs) = (&more[4], &more[5]);
        assert_eq!(
            (cm["kind"].as_str(), crs["kind"].as_str()),
            (Some("ConfigMap"), Some("ClusterResourceSet"))
        );
        assert_eq!(
            crs["apiVersion"],
            format!(
                "addons.cluster.x-k8s.io/{}",
                if capi == CapiLine::V1beta2 {
                    "v1beta2"
                } else {
                    "v1beta1"
                }
            )
        );
        assert_eq!(
            crs["spec"]["resources"],
            serde_json::json!([{"kind": "ConfigMap", "name": cm["metadata"]["name"]}])
        );
        assert_eq!(crs["spec"]["strategy"], "ApplyOnce");
        assert_eq!(
            crs["spec"]["clusterSelector"]["matchLabels"]["magnum.openstack.org/cluster-uuid"],
            with.cluster_uuid.as_str()
        );
        let docs: Vec<Value> = cm["data"]["keystone-auth.yaml"]
            .as_str()
            .unwrap()
            .split("\n---\n")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
        let container = &ds["spec"]["template"]["spec"]["containers"][0];
        // Upstream's registry (test_labels_all.py: from the mirror).
        assert_eq!(
            container["image"],
            "registry.k8s.io/provider-os/k8s-keystone-auth:v1.31.1"
        );
        let args = container["args"].to_string();
        assert!(
            args.contains("--keystone-url=https://keystone.example.com/v3"),
            "{args}"
        );
        assert!(args.contains("--keystone-ca-file="), "{args}");
        let policy = docs
            .iter()
            .find(|d| d["metadata"]["name"] == "k8s-keystone-auth-policy")
            .unwrap();
        assert!(
            policy["data"]["policies"]
                .as_str()
                .unwrap()
                .contains(&with.project_id)
        );
        let client = client(line).await;
        // What the set applies in the workload cluster: valid objects of
        // this Kubernetes (the management apiserver, same version).
        for d in &docs {
            if let Err(e) = dry_run(&client, d).await {
                panic!("{} {} refused: {e}", d["kind"], d["metadata"]["name"]);
            }
        }
        // `manila_csi_enabled` with a share network: the two charts, and a
        // ClusterResourceSet (Reconcile: rotations reach it) of a Secret
        // holding the credential Secret and a StorageClass per share type.
        let manila = conductor::capi::infra_labels::Manila {
            tag: "v1.32.0".into(),
            share_network_id: Some("0f6a1b2c-3d4e-4b8a-9d3e-5b7c6a526f3e".into()),
        };
        let types = ["default".to_string(), "Gold NFS".to_string()];
        let objs = conductor::capi::manila::render(
            &with,
            &manila,
            &charts,
            &private_ca,
            true,
            &types,
            &with.cluster_uuid,
            Some("registry.local:5000/mirror"),
        );
        let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "HelmChartProxy",
                "HelmChartProxy",
                "Secret",
                "ClusterResourceSet"
            ]
        );
        assert_eq!(objs[0]["spec"]["chartName"], "csi-driver-nfs");
        assert_eq!(objs[1]["spec"]["chartName"], "openstack-manila-csi");
        let values = objs[1]["spec"]["valuesTemplate"].as_str().unwrap();
        assert!(
            values.contains("dir: /var/lib/kubelet/plugins/csi-nfsplugin")
                && values.contains(&format!("clusterID: \"{}\"", with.cluster_uuid))
                && values.contains(
                    "repository: registry.local:5000/mirror/provider-os/manila-csi-plugin"
                ),
            "{values}"
        );
        assert_eq!(objs[2]["type"], "addons.cluster.x-k8s.io/resource-set");
        assert_eq!(objs[3]["spec"]["strategy"], "Reconcile");
        assert_eq!(
            objs[3]["spec"]["resources"],
            serde_json::json!([{"kind": "Secret", "name": objs[2]["metadata"]["name"]}])
        );
        let wl = conductor::capi::manila::workload_manifests(&manila, &private_ca, true, &types);
        assert_eq!(wl.len(), 3);
        for o in objs.iter().chain(wl.iter()) {
            if let Err(e) = dry_run(&client, o).await {
                panic!("{} {} refused: {e}", o["kind"], o["metadata"]["name"]);
            }
        }
        for o in calico.iter().chain(cilium.iter()).chain(more.iter()) {
            if let Err(e) = dry_run(&client, o).await {
                panic!("{} refused: {e}", o["metadata"]["name"]);
            }
        }
    }
}

#[test]
fn credentials_secret_matches_the_identity_ref() {
    use conductor::capi::addons::{CloudConfig, credentials_secret};
    let cloud = CloudConfig {
        auth_url: "https://keystone.example.com/v3".into(),
        region: Some("RegionOne".into()),
        application_credential_id: "ac-id".into(),
        application_credential_secret: common::secret::Secret::new("ac-SECRET"),
        ca_file_content: Some(
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
        ),
    };
    let c = input(CapiLine::V1beta1, &[], false);
    let s = credentials_secret(&c, &cloud, "public", true);
    let osc = render(&c)
        .into_iter()
        .find(|o| o["kind"] == "OpenStackCluster")
        .unwrap();
    assert_eq!(
        osc["spec"]["identityRef"]["name"],
        s.manifest["metadata"]["name"]
    );
    assert_eq!(osc["spec"]["identityRef"]["cloudName"], "openstack");
    assert!(s.manifest["data"]["cacert"].is_string());
    assert!(!format!("{s:?}").contains("ac-SECRET"));
    // The clouds.yaml decodes and names the application credential.
    let b64 = s.manifest["data"]["clouds.yaml"].as_str().unwrap();
    let decoded = String::from_utf8(decode(b64)).unwrap();
    assert!(
        decoded.contains("auth_type: v3applicationcredential")
            && decoded.contains("application_credential_id: ac-id")
    );
}

fn decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            _ => 63,
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|b| *b != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, c)| acc | (val(*c) << (18 - 6 * i)));
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}

#[test]
fn charts_come_from_the_config() {
    use conductor::capi::addons::AddonCharts;
    let mut l = common::config::ini::Layered::default();
    l.push_text(
        std::path::Path::new("t.conf"),
        "[capi]\ncalico_chart_repo = https://mirror.local/calico\ncalico_chart_version = v3.28.0\n",
    )
    .unwrap();
    let cfg = common::config::Config::from_layered(&l).unwrap();
    let charts = AddonCharts::from(&cfg.capi);
    assert_eq!(charts.calico.repo, "https://mirror.local/calico");
    assert_eq!(charts.calico.version, "v3.28.0");
    assert_eq!(
        charts,
        AddonCharts {
            calico: charts.calico.clone(),
            ..AddonCharts::default()
        }
    );
}
