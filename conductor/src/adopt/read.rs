//! The I/O of `adopt`: read the cluster's rows and what the management
//! cluster holds for it, hand both to [`super::plan`], print the plan.
//! Reads only: nothing here writes a row or an object.

use common::config::Config;
use common::db::Db;
use common::db::model::{CLUSTER, CLUSTER_TEMPLATE, NODEGROUP, SqlValue};
use common::db::repo::{self, Scope};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use rpc_schema::ovo::MagnumObject;
use serde_json::Value;

use super::plan::{self, Plan, Subject};
use crate::capi::naming;
use crate::capi::render::{self, CapiLine};
use crate::capi::status::Observed;
use crate::lifecycle::rows;
use crate::ownership::{self, Owner};

/// The kinds read for a cluster on `line`: (apiVersion, kind, plural).
pub fn kinds(line: CapiLine) -> [(&'static str, &'static str, &'static str); 14] {
    let (capi, kcp, boot) = line.api_versions();
    let addons = line.addons_api();
    let infra = "infrastructure.cluster.x-k8s.io/v1beta1";
    let rbac = "rbac.authorization.k8s.io/v1";
    [
        (capi, "Cluster", "clusters"),
        (infra, "OpenStackCluster", "openstackclusters"),
        (kcp, "KubeadmControlPlane", "kubeadmcontrolplanes"),
        (capi, "MachineDeployment", "machinedeployments"),
        (capi, "Machine", "machines"),
        (capi, "MachineHealthCheck", "machinehealthchecks"),
        (
            infra,
            "OpenStackMachineTemplate",
            "openstackmachinetemplates",
        ),
        (boot, "KubeadmConfigTemplate", "kubeadmconfigtemplates"),
        ("v1", "Secret", "secrets"),
        ("apps/v1", "Deployment", "deployments"),
        ("v1", "ServiceAccount", "serviceaccounts"),
        (rbac, "Role", "roles"),
        (rbac, "RoleBinding", "rolebindings"),
        // vexxhost's addons (labelled `cluster-uuid`).
        (addons, "ClusterResourceSet", "clusterresourcesets"),
    ]
}

pub(super) fn api(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// The cluster row by uuid, or by name when exactly one has it.
async fn cluster_row(db: &Db, ident: &str) -> Result<MagnumObject, String> {
    if uuid::Uuid::try_parse(ident).is_ok() {
        return repo::get(db, &CLUSTER, &Scope::admin(), ident)
            .await
            .map_err(|e| e.to_string());
    }
    let mut found = repo::select(
        db,
        &CLUSTER,
        &Scope::admin(),
        &[("name", SqlValue::Str(ident.into()))],
        None,
    )
    .await
    .map_err(|e| e.to_string())?;
    match found.len() {
        0 => Err(format!("no cluster is named {ident}")),
        1 => Ok(found.remove(0)),
        n => Err(format!("{n} clusters are named {ident}: give its uuid")),
    }
}

/// Everything on the management cluster that belongs to the cluster whose
/// CAPI Cluster is `stack` in `ns`: found by the labels CAPI, the
/// openstack-cluster chart, Helm, the vexxhost driver and ours put on it.
/// Secrets come without their data.
async fn live_objects(
    client: &Client,
    line: CapiLine,
    ns: &str,
    stack: &str,
    uuid: &str,
) -> Result<Vec<Value>, String> {
    let selectors = [
        format!("{}={stack}", render::CLUSTER_NAME_LABEL),
        format!("capi.stackhpc.com/cluster={stack}"),
        format!("{}={uuid}", render::UUID_LABEL),
        format!("cluster-uuid={uuid}"),
        format!("owner=helm,name={stack}"),
        // A Helm chart's objects (vexxhost's cluster-autoscaler release).
        format!("app.kubernetes.io/instance={stack}"),
    ];
    let mut out: Vec<Value> = Vec::new();
    for (av, kind, plural) in kinds(line) {
        let a = api(client, ns, av, kind, plural);
        if kind == "Cluster"
            && let Some(c) = a.get_opt(stack).await.map_err(|e| format!("{kind}: {e}"))?
        {
            push(&mut out, av, kind, c);
        }
        for s in &selectors {
            let list = a
                .list(&ListParams::default().labels(s))
                .await
                .map_err(|e| format!("{kind} ({s}): {e}"))?;
            for o in list.items {
                push(&mut out, av, kind, o);
            }
        }
    }
    Ok(out)
}

fn push(out: &mut Vec<Value>, api_version: &str, kind: &str, o: DynamicObject) {
    let Ok(mut v) = serde_json::to_value(&o) else {
        return;
    };
    if let Some(m) = v.as_object_mut() {
        for k in ["data", "stringData"] {
            m.remove(k);
        }
        m.insert("apiVersion".into(), Value::from(api_version));
        m.insert("kind".into(), Value::from(kind));
    }
    let name = v["metadata"]["name"].clone();
    if !out
        .iter()
        .any(|x| x["kind"] == kind && x["metadata"]["name"] == name)
    {
        out.push(v);
    }
}

/// What `adopt` read for one cluster, and its plan.
pub struct Reading {
    pub cluster: MagnumObject,
    pub template: MagnumObject,
    pub driver: String,
    pub line: CapiLine,
    /// What the management cluster holds for it (Secrets without data).
    pub live: Vec<Value>,
    /// What this conductor would apply for it once adopted (nothing for
    /// a topology).
    pub ours: Vec<Value>,
    /// Its CAPI Cluster is run by a ClusterClass topology.
    pub topology: bool,
    pub plan: Plan,
}

/// The cluster, its template and the driver that owns it (`Ok(None)`:
/// this conductor).
pub(super) async fn rows_of(
    cfg: &Config,
    db: &Db,
    ident: &str,
) -> Result<(MagnumObject, MagnumObject, Option<String>), String> {
    let cluster = cluster_row(db, ident).await?;
    let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
    let template_id = cluster.get_str("cluster_template_id").unwrap_or_default();
    let template = repo::get(db, &CLUSTER_TEMPLATE, &Scope::admin(), template_id)
        .await
        .map_err(|e| format!("the cluster's template {template_id}: {e}"))?;
    let key = ownership::TemplateKey::from_fields(|k| template.get_str(k));
    let drivers = ownership::Drivers {
        ours: cfg.capi.os_distros.clone(),
        others: cfg.capi.other_drivers.clone(),
    };
    let driver = match ownership::owner(&key, &drivers) {
        Owner::Ours => None,
        Owner::Foreign(d) => Some(d),
        Owner::Unknown(why) => {
            return Err(format!(
                "no driver is known to own cluster {uuid} ({why}): give its template a driver first"
            ));
        }
    };
    Ok((cluster, template, driver))
}

/// The management cluster's view of `live` once `adopt` has marked it
/// (what this conductor's status cache would then hold): pure.
fn observed_after(
    live: &[Value],
    stack: &str,
    groups: &[(String, String)],
    driver: &str,
) -> Observed {
    let find = |kind: &str, name: &str| {
        live.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .cloned()
    };
    let annotate = |mut o: Value| {
        o["metadata"]["annotations"][render::ADOPTED_ANNOTATION] = Value::from(driver);
        o
    };
    let cp = naming::object_name(stack, "control-plane");
    Observed {
        cluster: find("Cluster", stack).map(annotate),
        infra: find("OpenStackCluster", stack),
        control_plane: find("KubeadmControlPlane", &cp).map(annotate),
        machine_deployments: groups
            .iter()
            .filter_map(|(key, name)| {
                find("MachineDeployment", name).map(|md| {
                    let mut md = annotate(md);
                    md["metadata"]["labels"][render::NODEGROUP_LABEL] = Value::from(key.as_str());
                    md
                })
            })
            .collect(),
        machines: live
            .iter()
            .filter(|o| o["kind"] == "Machine")
            .cloned()
            .collect(),
        helm_releases: Vec::new(),
        api_slices: Vec::new(),
    }
}

/// Read the rows and the objects of a cluster another driver owns, and
/// plan its adoption (`Ok(None)`: the cluster is this conductor's).
pub async fn read(
    cfg: &Config,
    db: &Db,
    client: &Client,
    ident: &str,
) -> Result<Option<Reading>, String> {
    let (cluster, template, driver) = rows_of(cfg, db, ident).await?;
    let Some(driver) = driver else {
        return Ok(None);
    };
    let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
    let ngs = repo::select(
        db,
        &NODEGROUP,
        &Scope::admin(),
        &[("cluster_id", SqlValue::Str(uuid.clone()))],
        None,
    )
    .await
    .map_err(|e| format!("the cluster's nodegroups: {e}"))?;
    let line = crate::mgmt::detect_line(client, cfg.capi.api_version)
        .await
        .map_err(|e| e.to_string())?;
    let project = cluster.get_str("project_id").unwrap_or_default();
    let ours_ns = naming::namespace(&cfg.capi.namespace_prefix, project);
    let stack = cluster.get_str("stack_id").unwrap_or_default().to_string();
    let mut found_in = None;
    let mut live = Vec::new();
    if !stack.is_empty() {
        for ns in [ours_ns.as_str(), "magnum-system"] {
            let objs = live_objects(client, line, ns, &stack, &uuid).await?;
            if objs
                .iter()
                .any(|o| o["kind"] == "Cluster" && o["metadata"]["name"] == stack.as_str())
            {
                found_in = Some(ns.to_string());
                live = objs;
                break;
            }
        }
    }
    let groups: Vec<(String, String)> = ngs
        .iter()
        .filter(|n| n.get_str("role") != Some("master"))
        .map(|n| {
            let key = rows::group_key(n);
            let name = naming::object_name(&stack, &key);
            (key, name)
        })
        .collect();
    let subject = Subject {
        uuid: &uuid,
        status: cluster.get_str("status").unwrap_or_default(),
        driver: &driver,
        stack_id: &stack,
        namespace: &ours_ns,
    };
    if let Some(ns) = &found_in
        && live.iter().any(|o| {
            o["kind"] == "Cluster"
                && o["metadata"]["name"] == stack.as_str()
                && crate::capi::topology::is_topology(o)
        })
    {
        // Read as it will be once adopted: with the row's namespace label.
        let mut as_adopted = cluster.clone();
        let mut labels = as_adopted
            .get("labels")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| serde_json::json!({}));
        labels[rows::ADOPTED_NAMESPACE_LABEL] = Value::from(ns.as_str());
        as_adopted
            .set("labels", labels)
            .map_err(|e| format!("cluster labels: {e}"))?;
        let input = rows::cluster_input(
            line,
            &cfg.capi.namespace_prefix,
            &as_adopted,
            &template,
            &ngs,
        )
        .map(|(i, _)| i);
        let plan = super::topology::plan(
            &subject,
            ns,
            line,
            &live,
            input.as_ref().map_err(String::as_str),
        );
        return Ok(Some(Reading {
            ours: Vec::new(),
            topology: true,
            cluster,
            template,
            driver,
            line,
            live,
            plan,
        }));
    }
    let observed = observed_after(&live, &stack, &groups, &driver);
    let rendered = rows::cluster_input(line, &cfg.capi.namespace_prefix, &cluster, &template, &ngs)
        .map(|(input, _)| {
            let mut d = crate::lifecycle::plan::desired(input, &ngs, &observed, None);
            // A group held only until the control plane reaches the rows'
            // version gets ours then: count it now.
            for g in &mut d.input.workers {
                let held_at = g
                    .held_template
                    .as_ref()
                    .and_then(|t| t.pointer("/spec/version"))
                    .and_then(Value::as_str)
                    .map(|v| v.trim_start_matches('v').to_string());
                if held_at.is_some_and(|v| v != g.version.trim_start_matches('v')) {
                    g.held_template = None;
                }
            }
            render::render(&d.input)
        });
    let plan = plan::plan(
        &subject,
        found_in.as_deref(),
        &live,
        rendered.as_deref().map_err(String::as_str),
    );
    Ok(Some(Reading {
        ours: rendered.unwrap_or_default(),
        topology: false,
        cluster,
        template,
        driver,
        line,
        live,
        plan,
    }))
}
