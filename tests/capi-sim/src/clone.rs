//! Grow a fleet for benchmarks by copying one provisioned cluster's objects
//! under new names, through the apiserver (I/O): every object of the
//! cluster (by name, cluster-name label or Magnum uuid label) is created
//! again with the names and uuid replaced, its owner references pointing at
//! the copies' new uids, then its status written. Much cheaper than
//! provisioning each copy, and the copies are as real to a watcher.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use futures_util::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::kinds::{Kind, Line};
use crate::obj::{CLUSTER_LABEL, label, meta, name};

const UUID_LABEL: &str = "magnum.openstack.org/cluster-uuid";

/// The kinds copied, owners before what they own.
fn kinds(line: Line) -> Vec<ApiResource> {
    let mut out: Vec<ApiResource> = [
        Kind::Cluster,
        Kind::OpenStackCluster,
        Kind::KubeadmControlPlane,
        Kind::MachineDeployment,
        Kind::MachineSet,
        Kind::Machine,
        Kind::OpenStackMachineTemplate,
        Kind::OpenStackMachine,
        Kind::MachineHealthCheck,
        Kind::HelmChartProxy,
        Kind::HelmReleaseProxy,
    ]
    .iter()
    .map(|k| k.api_resource(line))
    .collect();
    let boot = if line.v2() { "v1beta2" } else { "v1beta1" };
    out.push(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bootstrap.cluster.x-k8s.io", boot, "KubeadmConfigTemplate"),
        "kubeadmconfigtemplates",
    ));
    out.push(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "Secret"),
        "secrets",
    ));
    out
}

fn belongs(o: &Value, cluster: &str, uuid: &str) -> bool {
    let n = name(o);
    n == cluster
        || n.starts_with(&format!("{cluster}-"))
        || label(o, CLUSTER_LABEL) == Some(cluster)
        || label(o, UUID_LABEL) == Some(uuid)
}

fn scrub(mut o: Value, from: &str, from_uuid: &str, to: &str, to_uuid: &str) -> Option<Value> {
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
            "deletionTimestamp",
        ] {
            m.remove(k);
        }
    }
    let text = o.to_string().replace(from, to).replace(from_uuid, to_uuid);
    serde_json::from_str(&text).ok()
}

/// A seed's objects, as first read.
type Seed = Arc<Vec<(ApiResource, Value)>>;

/// A seed's line (v1beta2 or not), namespace, cluster name and uuid.
type SeedKey = (bool, String, String, String);

/// Seeds read so far.
static SEEDS: LazyLock<Mutex<HashMap<SeedKey, Seed>>> = LazyLock::new(Default::default);

/// The objects of cluster `from` in `ns`, read once per seed for the
/// simulator's life: a fleet is grown 100 copies a request, and reading the
/// seed lists every object of 13 kinds in the namespace (an object belongs by
/// name prefix or by either of two labels, which no one selector says), so
/// each request cost more as the fleet grew (docs/benchmarks.md: 1,000
/// copies in 169 s at first, the last 900 of 2,900 in ~450 s). A seed's
/// objects do not change while a fleet grows: the benchmark pauses the
/// controllers first.
async fn seed(
    client: &kube::Client,
    line: Line,
    ns: &str,
    from: &str,
    from_uuid: &str,
) -> Result<Seed, kube::Error> {
    let key = (
        line.v2(),
        ns.to_string(),
        from.to_string(),
        from_uuid.to_string(),
    );
    let known = SEEDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    if let Some(seed) = known {
        return Ok(seed);
    }
    let mut originals: Vec<(ApiResource, Value)> = Vec::new();
    for ar in kinds(line) {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        for o in api.list(&ListParams::default()).await?.items {
            let mut v = serde_json::to_value(&o).unwrap_or(Value::Null);
            if belongs(&v, from, from_uuid) {
                v["apiVersion"] = json!(ar.api_version);
                v["kind"] = json!(ar.kind);
                originals.push((ar.clone(), v));
            }
        }
    }
    let seed = Arc::new(originals);
    SEEDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, seed.clone());
    Ok(seed)
}

/// Copy cluster `from` (Magnum uuid `from_uuid`) in `ns` once per
/// `(name, uuid)` of `copies`, `parallel` copies at a time. Returns the
/// objects created.
pub async fn clone_cluster(
    client: &kube::Client,
    line: Line,
    ns: &str,
    from: &str,
    from_uuid: &str,
    copies: &[(String, String)],
    parallel: usize,
) -> Result<usize, kube::Error> {
    let originals = seed(client, line, ns, from, from_uuid).await?;
    let originals = &*originals;
    let counts: Vec<Result<usize, kube::Error>> = futures_util::stream::iter(copies.to_vec())
        .map(|(to, to_uuid)| async move {
            let (to, to_uuid) = (to.as_str(), to_uuid.as_str());
            let mut uids: HashMap<String, String> = HashMap::new();
            let mut n = 0;
            for (ar, orig) in originals {
                let Some(mut o) = scrub(orig.clone(), from, from_uuid, to, to_uuid) else {
                    continue;
                };
                let status = o.as_object_mut().and_then(|m| m.remove("status"));
                if let Some(refs) = o
                    .pointer_mut("/metadata/ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain_mut(|r| match r["uid"].as_str().and_then(|u| uids.get(u)) {
                        Some(new) => {
                            r["uid"] = json!(new);
                            true
                        }
                        None => false,
                    });
                }
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
                let obj: DynamicObject =
                    serde_json::from_value(o).map_err(kube::Error::SerdeError)?;
                let created = api.create(&PostParams::default(), &obj).await?;
                if let (Some(old), Some(new)) = (meta(orig, "uid"), created.metadata.uid.clone()) {
                    uids.insert(old.to_string(), new);
                }
                if let Some(st) = status
                    && ar.kind != "Secret"
                {
                    let cname = created.metadata.name.clone().unwrap_or_default();
                    api.patch_status(
                        &cname,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": st})),
                    )
                    .await?;
                }
                n += 1;
            }
            Ok(n)
        })
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    let mut total = 0;
    for c in counts {
        total += c?;
    }
    Ok(total)
}
