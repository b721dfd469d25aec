//! capi-sim at fleet scale: `cargo bench -p capi-sim --bench scale [-- CLUSTERS]`
//!
//! Loads N clusters (default 10,000) with the objects a CAPI cluster has
//! (Cluster, OpenStackCluster, KubeadmControlPlane, MachineDeployment, two
//! OpenStackMachineTemplates, KubeadmConfigTemplate, MachineHealthCheck,
//! four CA Secrets, three Machines) through the store, then measures over
//! HTTP with kube-rs: memory, full and selective lists, and watch delivery.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use capi_sim::resources::Line;
use futures_util::TryStreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, WatchEvent, WatchParams,
};
use serde_json::json;

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(str::to_string)
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map(|kib| kib / 1024.0)
        .unwrap_or(0.0)
}

fn objects(i: usize) -> Vec<(&'static str, &'static str, serde_json::Value)> {
    let name = format!("c{i:05}");
    let labels = json!({"cluster.x-k8s.io/cluster-name": name, "magnum.openstack.org/cluster-uuid": format!("uuid-{i}")});
    let meta = |n: String| json!({"name": n, "labels": labels});
    let capi = "cluster.x-k8s.io";
    let mut v = vec![
        (
            capi,
            "clusters",
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": meta(name.clone()),
            "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["10.100.0.0/16"]}}, "controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}}}),
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "openstackclusters",
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": meta(name.clone()), "spec": {"identityRef": {"name": format!("{name}-cloud-config"), "cloudName": "openstack"}}}),
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "kubeadmcontrolplanes",
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
            "metadata": meta(format!("{name}-cp")), "spec": {"replicas": 3, "version": "v1.30.4", "kubeadmConfigSpec": {},
            "machineTemplate": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachineTemplate", "name": format!("{name}-cp")}}}}),
        ),
        (
            capi,
            "machinedeployments",
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment", "metadata": meta(format!("{name}-md")),
            "spec": {"clusterName": name, "replicas": 3, "selector": {}, "template": {"spec": {"clusterName": name, "bootstrap": {},
            "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachineTemplate", "name": format!("{name}-md")}}}}}),
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            "kubeadmconfigtemplates",
            json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfigTemplate",
            "metadata": meta(format!("{name}-md")), "spec": {"template": {"spec": {}}}}),
        ),
        (
            capi,
            "machinehealthchecks",
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineHealthCheck", "metadata": meta(name.clone()),
            "spec": {"clusterName": name, "selector": {}}}),
        ),
    ];
    for t in ["cp", "md"] {
        v.push(("infrastructure.cluster.x-k8s.io", "openstackmachinetemplates", json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "OpenStackMachineTemplate", "metadata": meta(format!("{name}-{t}")), "spec": {"template": {"spec": {"flavor": "m1.small", "image": {"filter": {"name": "ubuntu"}}}}}})));
    }
    for s in ["ca", "etcd", "proxy", "sa"] {
        v.push(("", "secrets", json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta(format!("{name}-{s}")), "type": "cluster.x-k8s.io/secret",
            "data": {"tls.crt": "LS0tLS1CRUdJTi".repeat(40), "tls.key": "LS0tLS1CRUdJTi".repeat(60)}})));
    }
    for m in 0..3 {
        v.push((capi, "machines", json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "metadata": meta(format!("{name}-m{m}")),
            "spec": {"clusterName": name, "bootstrap": {}, "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine", "name": format!("{name}-m{m}")}}})));
    }
    v
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds");
    let all = capi_sim::load_line(&crds, Line::V1beta1).expect("CRDs");
    let sim = capi_sim::Sim::new(all, 100_000);
    let rss0 = rss_mib();

    let t = Instant::now();
    let mut count = 0usize;
    sim.with(|s| {
        let ns_res = s.find("", "namespaces").unwrap();
        for p in 0..100 {
            let _ = s.create(ns_res, None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("p{p:03}")}}));
        }
        for i in 0..n {
            let ns = format!("p{:03}", i % 100);
            for (group, plural, obj) in objects(i) {
                let res = s.find(group, plural).unwrap();
                s.create_with(res, Some(&ns), obj, capi_sim::validate::FieldValidation::Strict).expect("valid object");
                count += 1;
            }
        }
        ((), vec![])
    });
    let load = t.elapsed();
    let rss1 = rss_mib();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = capi_sim::api::router(sim.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let client =
        kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap()))
            .unwrap();
    let ar = |g: &str, v: &str, k: &str, p: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), p)
    };
    let clusters: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ar("cluster.x-k8s.io", "v1beta1", "Cluster", "clusters"),
    );
    let machines: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ar("cluster.x-k8s.io", "v1beta1", "Machine", "machines"),
    );

    let t = Instant::now();
    let full = clusters.list(&ListParams::default()).await.unwrap();
    let full_list = t.elapsed();
    assert_eq!(full.items.len(), n);

    let lists = 200;
    let t = Instant::now();
    for i in 0..lists {
        let sel = format!("cluster.x-k8s.io/cluster-name=c{:05}", (i * 37) % n);
        let l = machines
            .list(&ListParams::default().labels(&sel))
            .await
            .unwrap();
        assert_eq!(l.items.len(), 3);
    }
    let sel_rate = lists as f64 / t.elapsed().as_secs_f64();

    let rv = machines
        .list(&ListParams::default().limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = Box::pin(
        machines
            .watch(
                &WatchParams::default().timeout(120).disable_bookmarks(),
                &rv,
            )
            .await
            .unwrap(),
    );
    let updates = 10_000.min(n * 3);
    let t = Instant::now();
    let writer = {
        let sim = sim.clone();
        tokio::task::spawn_blocking(move || {
            for i in 0..updates {
                let name = format!("c{:05}-m{}", i / 3, i % 3);
                let ns = format!("p{:03}", (i / 3) % 100);
                sim.with(|s| {
                    let res = s.find("cluster.x-k8s.io", "machines").unwrap();
                    let patch = json!({"status": {"phase": "Running", "nodeRef": {"name": name}}});
                    match s.patch(
                        res,
                        Some(&ns),
                        &name,
                        (capi_sim::store::PatchKind::Merge, &patch),
                        true,
                        capi_sim::validate::FieldValidation::Ignore,
                    ) {
                        Ok((_, ev)) => ((), ev),
                        Err(e) => panic!("{}", e.message),
                    }
                });
            }
        })
    };
    let mut got = 0;
    while got < updates {
        match tokio::time::timeout(Duration::from_secs(60), stream.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(WatchEvent::Modified(_)) => got += 1,
            Some(other) => panic!("unexpected {other:?}"),
            None => panic!("watch ended after {got}"),
        }
    }
    writer.await.unwrap();
    let watch_rate = updates as f64 / t.elapsed().as_secs_f64();

    println!(
        "| clusters | objects | load (store, validated) | RSS before → after | full list of {n} Clusters (HTTP) | selective list (3 of {} Machines) | watch delivery |",
        n * 3
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {n} | {count} | {:.1} s ({:.0} objects/s) | {rss0:.0} → {rss1:.0} MiB ({:.1} KiB/object) | {:.0} ms | {sel_rate:.0} lists/s | {watch_rate:.0} events/s ({updates} status patches) |",
        load.as_secs_f64(),
        count as f64 / load.as_secs_f64(),
        (rss1 - rss0) * 1024.0 / count as f64,
        full_list.as_secs_f64() * 1000.0,
    );
}
