//! The addon controllers.
//!
//! HelmChartProxy (CAAPH v0.4/v0.6 `controllers/helmchartproxy`): one
//! HelmReleaseProxy per matching Cluster, created with `generateName`
//! `<chart>-<cluster>-`, the labels cluster-name and
//! `helmchartproxy.addons.cluster.x-k8s.io/name`, the proxy as controller
//! owner, and the proxy's chart, repository, release name and namespace,
//! version and values (`helmchartproxy_controller_phases.go`
//! `constructHelmReleaseProxy`; values are copied, not rendered as Go
//! templates); a release whose Cluster no longer matches is deleted
//! (`deleteOrphanedHelmReleaseProxies`). Status: matching clusters, Ready.
//!
//! HelmReleaseProxy (`controllers/helmreleaseproxy/helmreleaseproxy_
//! controller.go`, `Reconcile` -> `reconcileNormal`): waiting
//! (`ClusterAvailable` False) until its Cluster's control plane is
//! initialized; then, with the Helm engine ([`crate::helm`]), the release's
//! outcome in the workload cluster: `status.status` and `revision` of the
//! release, `HelmReleaseReady` True, or False with
//! `HelmInstallOrUpgradeFailed` and Helm's message, `Ready` their summary
//! (`patchHelmReleaseProxy`). Without it (no workload apiservers):
//! "deployed" (revision = generation) as soon as the control plane is.
//!
//! ClusterResourceSet: a ClusterResourceSetBinding per matching Cluster
//! once its control plane is up, resources recorded as applied.
//! Selectors: `matchLabels` only.

use serde_json::{Value, json};

use super::{Ctx, cp_initialized, selector_matches};
use crate::helm::Outcome;
use crate::kinds::Kind;
use crate::obj::{
    CLUSTER_LABEL, HCP_LABEL, deleting, keep_transition_times, label, meta, name, namespace,
    owned_by, owner_ref, short_hash,
};

pub fn reconcile_chart_proxy(c: &mut Ctx<'_>, cur: Value) {
    if deleting(&cur) {
        return;
    }
    let (ns, n) = (namespace(&cur).to_string(), name(&cur).to_string());
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let selector = cur.pointer("/spec/clusterSelector");
    let pairs: Vec<(String, String)> = selector
        .and_then(|s| s.get("matchLabels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let pairs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let clusters: Vec<Value> = c
        .labelled(Kind::Cluster, &ns, &pairs)
        .into_iter()
        .filter(|cl| !deleting(cl) && selector_matches(selector, cl))
        .collect();
    let existing: Vec<Value> = c
        .labelled(Kind::HelmReleaseProxy, &ns, &[(HCP_LABEL, &n)])
        .into_iter()
        .filter(|h| owned_by(h, &uid))
        .collect();
    let spec = &cur["spec"];
    let release_name = spec
        .get("releaseName")
        .cloned()
        .unwrap_or_else(|| spec["chartName"].clone());
    for cl in &clusters {
        let cname = name(cl);
        let mut want = json!({
            "clusterRef": {"apiVersion": cl["apiVersion"], "kind": "Cluster", "name": cname, "namespace": ns},
            "chartName": spec["chartName"], "repoURL": spec["repoURL"], "releaseName": release_name,
            "values": spec.get("valuesTemplate").cloned().unwrap_or(json!("")),
        });
        for k in ["namespace", "version", "options", "reconcileStrategy"] {
            if let Some(v) = spec.get(k) {
                want[k] = v.clone();
            }
        }
        match existing.iter().find(|h| label(h, CLUSTER_LABEL) == Some(cname)) {
            None => c.create(
                Kind::HelmReleaseProxy,
                &ns,
                json!({
                    "apiVersion": c.api_version(Kind::HelmReleaseProxy), "kind": "HelmReleaseProxy",
                    "metadata": {"generateName": format!("{}-{cname}-", spec["chartName"].as_str().unwrap_or("chart")),
                                 "labels": {CLUSTER_LABEL: cname, HCP_LABEL: n},
                                 "ownerReferences": [owner_ref(&cur, true)]},
                    "spec": want}),
            ),
            Some(h) if h["spec"]["version"] != want["version"] || h["spec"]["values"] != want["values"] => {
                let mut next = h.clone();
                next["spec"]["version"] = want["version"].clone();
                next["spec"]["values"] = want["values"].clone();
                c.write(Kind::HelmReleaseProxy, h, next);
            }
            Some(_) => {}
        }
    }
    for h in &existing {
        if !clusters
            .iter()
            .any(|cl| label(h, CLUSTER_LABEL) == Some(name(cl)))
        {
            c.delete(Kind::HelmReleaseProxy, h);
        }
    }
    let ready = !existing.is_empty()
        && existing
            .iter()
            .all(|h| h.pointer("/status/status").and_then(Value::as_str) == Some("deployed"));
    let refs: Vec<Value> = clusters
        .iter()
        .map(|cl| json!({"apiVersion": cl["apiVersion"], "kind": "Cluster", "name": name(cl), "namespace": ns}))
        .collect();
    let mut next = cur.clone();
    next["status"] = json!({"matchingClusters": refs, "observedGeneration": cur["metadata"]["generation"],
                            "conditions": [c.condition("Ready", ready, if ready { "Ready" } else { "HelmReleaseProxiesNotReady" }, "")]});
    keep_transition_times(&cur, &mut next);
    c.write(Kind::HelmChartProxy, &cur, next);
}

pub fn reconcile_release_proxy(c: &mut Ctx<'_>, cur: Value) {
    if deleting(&cur) {
        return;
    }
    let ns = namespace(&cur).to_string();
    let cname = cur
        .pointer("/spec/clusterRef/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let up = c
        .get(Kind::Cluster, &ns, cname)
        .is_some_and(|cl| cp_initialized(&cl));
    let mut next = cur.clone();
    let generation = cur["metadata"]["generation"].as_i64().unwrap_or(1);
    if let (true, Some(release)) = (up, c.release.take()) {
        next["status"] = release_status(c, generation, release);
        keep_transition_times(&cur, &mut next);
        c.write(Kind::HelmReleaseProxy, &cur, next);
        return;
    }
    next["status"] = if up {
        json!({"status": "deployed", "revision": generation, "observedGeneration": generation,
               "conditions": [c.condition("Ready", true, "Deployed", "")]})
    } else {
        json!({"observedGeneration": generation,
               "conditions": [c.condition("Ready", false, "WaitingForControlPlane", "waiting for the cluster's control plane")]})
    };
    keep_transition_times(&cur, &mut next);
    c.write(Kind::HelmReleaseProxy, &cur, next);
}

/// A HelmReleaseProxy's status from its release's outcome (see the module).
fn release_status(c: &Ctx<'_>, generation: i64, release: Option<Outcome>) -> Value {
    let available = c.condition("ClusterAvailable", true, "Available", "");
    let Some(o) = release else {
        return json!({"observedGeneration": generation, "conditions": [
            c.condition("Ready", false, "PreparingToHelmInstall", "Preparing to install Helm chart"),
            available,
            c.condition("HelmReleaseReady", false, "PreparingToHelmInstall", "Preparing to install Helm chart")]});
    };
    let (ok, reason, message) = match (&o.error, o.status.as_deref()) {
        (Some(e), _) => (false, "HelmInstallOrUpgradeFailed", e.clone()),
        (None, Some("deployed")) => (true, "Ready", String::new()),
        (None, s) => (
            false,
            "HelmReleasePending",
            format!(
                "Helm release is in a pending state: {}",
                s.unwrap_or("none")
            ),
        ),
    };
    let mut status = json!({"observedGeneration": o.generation, "conditions": [
        c.condition("Ready", ok, reason, &message),
        available,
        c.condition("HelmReleaseReady", ok, reason, &message)]});
    if let Some(s) = &o.status {
        status["status"] = json!(s);
        status["revision"] = json!(o.revision);
    }
    status
}

pub fn reconcile_resource_set(c: &mut Ctx<'_>, cur: Value) {
    if deleting(&cur) {
        return;
    }
    let (ns, n) = (namespace(&cur).to_string(), name(&cur).to_string());
    let resources: Vec<Value> = cur
        .pointer("/spec/resources")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|r| json!({"kind": r["kind"], "name": r["name"], "applied": true, "hash": short_hash(r), "lastAppliedTime": c.now}))
                .collect()
        })
        .unwrap_or_default();
    let clusters: Vec<Value> = c
        .cache
        .in_namespace(Kind::Cluster, &ns)
        .into_iter()
        .filter(|cl| {
            !deleting(cl)
                && cp_initialized(cl)
                && selector_matches(cur.pointer("/spec/clusterSelector"), cl)
        })
        .cloned()
        .collect();
    for cl in clusters {
        let cname = name(&cl).to_string();
        let binding = json!({"clusterResourceSetName": n, "resources": resources});
        match c.get(Kind::ClusterResourceSetBinding, &ns, &cname) {
            None => {
                c.create(Kind::ClusterResourceSetBinding, &ns, json!({
                    "apiVersion": c.api_version(Kind::ClusterResourceSetBinding), "kind": "ClusterResourceSetBinding",
                    "metadata": {"name": cname, "labels": {CLUSTER_LABEL: cname}, "ownerReferences": [owner_ref(&cl, false)]},
                    "spec": {"clusterName": cname, "bindings": [binding]}}));
            }
            Some(b) => {
                let has = b
                    .pointer("/spec/bindings")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x["clusterResourceSetName"] == json!(n)));
                if !has {
                    let mut next = b.clone();
                    let mut list = next["spec"]["bindings"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    list.push(binding);
                    next["spec"]["bindings"] = json!(list);
                    c.write(Kind::ClusterResourceSetBinding, &b, next);
                }
            }
        }
    }
}
