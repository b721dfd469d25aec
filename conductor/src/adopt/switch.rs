//! The writes of `adopt` (thin I/O; what to write is decided in
//! [`super::plan`]).
//!
//! Order, for a crash at any point and for conductors serving meanwhile:
//! 1. the marks on the objects (labels and annotations by merge patch,
//!    the CAPI Cluster last): while the row still names the other
//!    driver's template every conductor leaves the cluster alone, so marks
//!    alone change nothing; a second run writes the same marks;
//! 2. the twin template: a copy of the cluster's template with this
//!    conductor's driver, hidden (found again by name on a second run);
//! 3. the cluster row's `cluster_template_id`, written only if the row is
//!    unchanged since it was read: from then on the cluster is ours.
//!
//! `--undo` writes the row back to the template named on the CAPI Cluster
//! and removes the adoption annotations (labels stay: harmless, and the
//! other driver's objects never depended on their absence).

use common::db::Db;
use common::db::model::{CLUSTER, CLUSTER_TEMPLATE, SqlValue};
use common::db::repo::{self, Scope};
use kube::Client;
use kube::api::{Patch, PatchParams};
use rpc_schema::ovo::{self, MagnumObject};
use serde_json::{Value, json};

use super::plan::{Mark, Subject, idle, marks};
use super::read::{Reading, kinds};
use crate::capi::naming;
use crate::capi::render::{
    ADOPTED_ANNOTATION, ADOPTED_TEMPLATE_ANNOTATION, ADOPTED_TWIN_ANNOTATION, CapiLine,
};
use crate::lifecycle::engine::{dynamic_api, obj_with};
use crate::lifecycle::rows;
use crate::ownership::OUR_DRIVER;

const FIELD_MANAGER: &str = "magnum-conductor";

async fn patch(
    client: &Client,
    line: CapiLine,
    ns: &str,
    kind: &str,
    name: &str,
    body: Value,
) -> Result<(), String> {
    let (av, _, plural) = kinds(line)
        .into_iter()
        .find(|(_, k, _)| *k == kind)
        .ok_or_else(|| format!("{kind}: not a kind adopt writes"))?;
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    dynamic_api(client, ns, av, kind, plural)
        .patch(name, &pp, &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|e| format!("{kind} {name}: {e}"))
}

/// The twin template's name.
fn twin_name(template: &MagnumObject) -> String {
    format!("{}-adopted", template.get_str("name").unwrap_or("template"))
}

/// The twin of the cluster's template: found, or made.
async fn twin(db: &Db, template: &MagnumObject) -> Result<MagnumObject, String> {
    let name = twin_name(template);
    let found = repo::select(
        db,
        &CLUSTER_TEMPLATE,
        &Scope::admin(),
        &[
            ("name", SqlValue::Str(name.clone())),
            ("driver", SqlValue::Str(OUR_DRIVER.into())),
        ],
        None,
    )
    .await
    .map_err(|e| format!("templates named {name}: {e}"))?;
    if let Some(t) = found
        .into_iter()
        .find(|t| t.get_str("project_id") == template.get_str("project_id"))
    {
        return Ok(t);
    }
    let mut copy = template.clone();
    for (k, v) in [
        ("uuid", json!(uuid::Uuid::new_v4().to_string())),
        ("name", json!(name)),
        ("driver", json!(OUR_DRIVER)),
        ("hidden", json!(true)),
        ("updated_at", Value::Null),
    ] {
        copy.set(k, v).map_err(|e| format!("template {k}: {e}"))?;
    }
    repo::create(db, &CLUSTER_TEMPLATE, &copy)
        .await
        .map_err(|e| format!("creating template {name}: {e}"))
}

/// Point the cluster row at `template` and set or drop its
/// [`rows::ADOPTED_NAMESPACE_LABEL`] (`namespace`), if the row is
/// unchanged since `read`.
async fn switch_row(
    db: &Db,
    read: &MagnumObject,
    template: &str,
    namespace: Option<&str>,
) -> Result<(), String> {
    let uuid = read.get_str("uuid").unwrap_or_default();
    let mut labels = read
        .get("labels")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    if let Some(m) = labels.as_object_mut() {
        match namespace {
            Some(ns) => {
                m.insert(rows::ADOPTED_NAMESPACE_LABEL.into(), json!(ns));
            }
            None => {
                m.remove(rows::ADOPTED_NAMESPACE_LABEL);
            }
        }
    }
    let mut changes = vec![("cluster_template_id", json!(template))];
    if read.get("labels") != Some(&labels) {
        changes.push(("labels", labels));
    }
    let change = obj_with(&ovo::CLUSTER, &changes);
    match repo::save_changed_if(db, &CLUSTER, uuid, &change, Some(read)).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(format!(
            "cluster {uuid} changed while adopt ran (an operation started?): nothing switched; \
             run adopt again once it is idle"
        )),
        Err(e) => Err(format!("cluster {uuid}: {e}")),
    }
}

/// Adopt the cluster of an adoptable `reading`. Returns what was done.
pub async fn adopt(db: &Db, client: &Client, reading: &Reading) -> Result<String, String> {
    let c = &reading.cluster;
    let uuid = c.get_str("uuid").unwrap_or_default();
    let stack = c.get_str("stack_id").unwrap_or_default();
    let project = c.get_str("project_id").unwrap_or_default();
    let ns = &reading.plan.namespace;
    let old_template = c.get_str("cluster_template_id").unwrap_or_default();
    let twin = twin(db, &reading.template).await?;
    let twin_uuid = twin.get_str("uuid").unwrap_or_default().to_string();
    let subject = Subject {
        uuid,
        status: c.get_str("status").unwrap_or_default(),
        driver: &reading.driver,
        stack_id: stack,
        namespace: ns,
    };
    let all = if reading.topology {
        super::topology::marks(&subject, project, &reading.live, old_template, &twin_uuid)
    } else {
        marks(
            &subject,
            project,
            &reading.live,
            &reading.ours,
            old_template,
            &twin_uuid,
        )
    };
    for Mark {
        kind,
        name,
        labels,
        annotations,
    } in &all
    {
        let mut body = json!({"metadata": {"labels": labels}});
        if !annotations.is_empty() {
            body["metadata"]["annotations"] = Value::Object(annotations.clone());
        }
        patch(client, reading.line, ns, kind, name, body).await?;
    }
    switch_row(db, c, &twin_uuid, reading.topology.then_some(ns.as_str())).await?;
    Ok(format!(
        "adopted: {} objects marked; cluster {uuid} now uses template {} ({twin_uuid}, driver \
         {OUR_DRIVER}, hidden); it was on {old_template} ({}). Undo: magnum-conductor adopt --undo {uuid}\n",
        all.len(),
        twin_name(&reading.template),
        reading.driver,
    ))
}

/// Hand an adopted cluster back to the driver it came from.
pub async fn undo(
    cfg: &common::config::Config,
    db: &Db,
    client: &Client,
    ident: &str,
) -> Result<String, String> {
    let (cluster, template, driver) = super::read::rows_of(cfg, db, ident).await?;
    let uuid = cluster.get_str("uuid").unwrap_or_default();
    if driver.is_some() {
        return Err(format!(
            "cluster {uuid} is not this conductor's: nothing to undo"
        ));
    }
    let status = cluster.get_str("status").unwrap_or_default();
    if !idle(status) {
        return Err(format!(
            "cluster {uuid} is busy (status {status}): undo once its operation is over"
        ));
    }
    let line = crate::mgmt::detect_line(client, cfg.capi.api_version)
        .await
        .map_err(|e| e.to_string())?;
    let ns = rows::namespace(&cfg.capi.namespace_prefix, &cluster);
    let stack = cluster.get_str("stack_id").unwrap_or_default();
    let (av, kind, plural) = kinds(line)[0];
    let capi = dynamic_api(client, &ns, av, kind, plural)
        .get_opt(stack)
        .await
        .map_err(|e| format!("Cluster {stack}: {e}"))?
        .ok_or_else(|| format!("no CAPI Cluster {stack} in {ns}"))?;
    let ann = |k: &str| {
        capi.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .cloned()
    };
    let (Some(from), Some(before), Some(twin)) = (
        ann(ADOPTED_ANNOTATION),
        ann(ADOPTED_TEMPLATE_ANNOTATION),
        ann(ADOPTED_TWIN_ANNOTATION),
    ) else {
        return Err(format!("cluster {uuid} was not adopted: nothing to undo"));
    };
    let now = template.get_str("uuid").unwrap_or_default();
    if now != twin {
        return Err(format!(
            "cluster {uuid} moved to template {now} after its adoption (an upgrade): its machines \
             are this conductor's now; {from} would replace them all. Not undone"
        ));
    }
    switch_row(db, &cluster, &before, None).await?;
    let clear = json!({"metadata": {"annotations": {
        ADOPTED_ANNOTATION: null, ADOPTED_TEMPLATE_ANNOTATION: null, ADOPTED_TWIN_ANNOTATION: null}}});
    patch(client, line, &ns, "Cluster", stack, clear.clone()).await?;
    let cp = naming::object_name(stack, "control-plane");
    let _ = patch(client, line, &ns, "KubeadmControlPlane", &cp, clear.clone()).await;
    Ok(format!(
        "undone: cluster {uuid} is on template {before} again (driver {from})\n"
    ))
}
