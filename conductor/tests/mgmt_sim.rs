//! Rendered objects applied through the conductor's management-cluster
//! adapter into a real kube-apiserver (`scripts/k8s-up.sh`, both CAPI lines,
//! detected), provisioned by the simulated controllers, then read back into
//! the status mapper: CREATE_COMPLETE, HEALTHY, api_address, coe_version and
//! node addresses.

use std::collections::BTreeMap;
use std::time::Duration;

use capi_sim::Line;
use common::config::CapiVersion;
use conductor::capi::addons::{self, AddonCharts, CloudConfig};
use conductor::capi::labels;
use conductor::capi::render::{self, CapiLine, ClusterInput, Rollout, WorkerGroup, render};
use conductor::capi::status::{self, Clock, GroupTarget, Observed, Operation, Targets};
use conductor::mgmt::{self, Applier};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};

fn input(line: CapiLine) -> ClusterInput {
    let l: BTreeMap<String, String> = [("kube_tag", "v1.30.4")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (labels, _) = labels::parse(&l, "calico").unwrap();
    ClusterInput {
        line,
        stack_id: "demo-abcdefghijkl".into(),
        namespace: "magnum-9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5".into(),
        cluster_uuid: "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e".into(),
        project_id: "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5".into(),
        labels,
        master_version: "v1.30.4".into(),
        master_image: "ubuntu-2204-kube-v1.30.4".into(),
        master_flavor: "m1.medium".into(),
        master_count: 3,
        master_docker_volume_gb: None,
        keypair: Some("mykey".into()),
        external_network_id: Some("public".into()),
        fixed_network: None,
        fixed_subnet: None,
        dns_nameservers: vec![],
        master_lb_enabled: true,
        api_proxy: false,
        workers: vec![WorkerGroup {
            name: "default-worker".into(),
            key: "default-worker".into(),
            flavor: "m1.small".into(),
            image: "ubuntu-2204-kube-v1.30.4".into(),
            version: "v1.30.4".into(),
            count: 2,
            autoscale: None,
            set_replicas: true,
            rollout: Rollout::default(),
            held_template: None,
            adopted_labels: None,
            docker_volume_gb: None,
            node_labels: BTreeMap::new(),
            node_taints: vec![],
        }],
        adopted: None,
    }
}

async fn list(client: &kube::Client, av: &str, kind: &str, plural: &str, ns: &str) -> Vec<Value> {
    let (group, version) = av.rsplit_once('/').unwrap();
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect()
}

async fn provision(line: Line) {
    let cp = capi_sim::controlplane::shared(line);
    let mut opts = common::config::Config::from_text("").unwrap().capi;
    opts.kubeconfig = Some(cp.kubeconfig().display().to_string());
    let client = mgmt::client(&opts).await.unwrap();
    let capi_line = mgmt::detect_line(&client, CapiVersion::Auto).await.unwrap();
    assert_eq!(
        capi_line,
        if line == Line::V1beta2 {
            CapiLine::V1beta2
        } else {
            CapiLine::V1beta1
        }
    );
    let mut c = input(capi_line);
    c.namespace = format!("magnum-{}", uuid::Uuid::new_v4().simple());
    let mut o = capi_sim::Options::new(line);
    o.tick = Duration::from_millis(5);
    o.namespace_prefix = Some(c.namespace.clone());
    let sim = capi_sim::Controllers::start(cp.client().await.unwrap(), o);
    sim.wait_synced().await;
    let cloud = CloudConfig {
        auth_url: "https://keystone.example.com/v3".into(),
        region: None,
        application_credential_id: "ac".into(),
        application_credential_secret: common::secret::Secret::new("s"),
        ca_file_content: None,
    };
    let applier = Applier::new(client.clone());
    applier
        .apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.namespace}}))
        .await
        .unwrap();
    let mut objects = render(&c);
    objects.extend(addons::render(
        &c,
        "calico",
        &AddonCharts::default(),
        &cloud,
        &c.cluster_uuid,
    ));
    objects.push(addons::credentials_secret(&c, &cloud, "public", true).manifest);
    // As the engine applies them: the Cluster first, then everything else
    // owned by it, with the owner references CAPI itself sets.
    let cluster = objects.iter().find(|o| o["kind"] == "Cluster").unwrap();
    let stored = applier.apply(cluster).await.unwrap();
    let plain = json!({"apiVersion": cluster["apiVersion"], "kind": "Cluster",
                       "name": stored.metadata.name, "uid": stored.metadata.uid});
    let objects: Vec<Value> = objects
        .into_iter()
        .filter(|o| o["kind"] != "Cluster")
        .map(|mut o| {
            let kind = o["kind"].as_str().unwrap().to_string();
            o["metadata"]["ownerReferences"] = render::cluster_owner_refs(capi_line, &kind, &plain);
            o
        })
        .collect();
    for o in &objects {
        applier
            .apply(o)
            .await
            .unwrap_or_else(|e| panic!("{} {}: {e}", o["kind"], o["metadata"]["name"]));
    }
    let capi = if capi_line == CapiLine::V1beta2 {
        "cluster.x-k8s.io/v1beta2"
    } else {
        "cluster.x-k8s.io/v1beta1"
    };
    let kcp_av = if capi_line == CapiLine::V1beta2 {
        "controlplane.cluster.x-k8s.io/v1beta2"
    } else {
        "controlplane.cluster.x-k8s.io/v1beta1"
    };
    let ns = c.namespace.clone();
    let mut view = None;
    for _ in 0..3000 {
        let observed = Observed {
            cluster: list(&client, capi, "Cluster", "clusters", &ns)
                .await
                .into_iter()
                .next(),
            infra: list(
                &client,
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackCluster",
                "openstackclusters",
                &ns,
            )
            .await
            .into_iter()
            .next(),
            control_plane: list(
                &client,
                kcp_av,
                "KubeadmControlPlane",
                "kubeadmcontrolplanes",
                &ns,
            )
            .await
            .into_iter()
            .next(),
            machine_deployments: list(
                &client,
                capi,
                "MachineDeployment",
                "machinedeployments",
                &ns,
            )
            .await,
            machines: list(&client, capi, "Machine", "machines", &ns).await,
            helm_releases: list(
                &client,
                "addons.cluster.x-k8s.io/v1alpha1",
                "HelmReleaseProxy",
                "helmreleaseproxies",
                &ns,
            )
            .await,
            api_slices: Vec::new(),
        };
        let targets = Targets {
            control_plane: GroupTarget {
                replicas: Some(3),
                version: "v1.30.4".into(),
                template: Some(render::control_plane_template_name(&c)),
                ..GroupTarget::default()
            },
            workers: vec![GroupTarget {
                key: "default-worker".into(),
                replicas: Some(2),
                version: "v1.30.4".into(),
                template: Some(render::group_template_name(&c, &c.workers[0])),
                ..GroupTarget::default()
            }],
            proxied: false,
        };
        let clock = Clock {
            elapsed_min: 1,
            create_timeout_min: 60,
            ..Clock::default()
        };
        let v = status::map(Operation::Create, &observed, &targets, clock);
        if v.status == "CREATE_COMPLETE" {
            view = Some(v);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let v = view.unwrap_or_else(|| {
        panic!(
            "never CREATE_COMPLETE; controller errors {:?}",
            sim.errors()
        )
    });
    // Day 2: every object applied again once CAPI's controllers have taken
    // them over (owner references, labels, finalizers): no conflict with
    // their field manager (the conductor's ownerReferences are what CAPI
    // sets: a different one is a 409 on a real apiserver).
    for o in &objects {
        applier
            .apply(o)
            .await
            .unwrap_or_else(|e| panic!("re-applying {} {}: {e}", o["kind"], o["metadata"]["name"]));
    }
    // Re-applying the same objects changes nothing (idempotent): a second
    // apply keeps their resourceVersion.
    for o in &objects {
        if o["kind"] != "OpenStackMachineTemplate" && o["kind"] != "KubeadmConfigTemplate" {
            continue;
        }
        let first = applier.apply(o).await.unwrap();
        let again = applier.apply(o).await.unwrap();
        assert_eq!(
            again.metadata.resource_version, first.metadata.resource_version,
            "{} re-applied",
            o["kind"]
        );
    }
    assert_eq!(v.health_status, "HEALTHY");
    assert_eq!(v.api_address.as_deref(), Some("https://203.0.113.10:6443"));
    assert_eq!(v.coe_version.as_deref(), Some("v1.30.4"));
    assert_eq!(v.master.node_addresses.len(), 3);
    assert_eq!(v.workers["default-worker"].node_addresses.len(), 2);
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    sim.stop();
}

#[tokio::test]
async fn rendered_cluster_provisions_on_v1beta1() {
    provision(Line::V1beta1).await;
}

#[tokio::test]
async fn rendered_cluster_provisions_on_v1beta2() {
    provision(Line::V1beta2).await;
}
