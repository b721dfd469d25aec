//! `cluster_upgrade` (a call): another template's Kubernetes version and
//! image, rolled through new hash-named machine templates.
//!
//! What is upgraded follows Magnum's API, which always names a nodegroup
//! (the default worker when the user names none):
//!
//! - a new template and a worker group: **the whole cluster**: the
//!   cluster's `cluster_template_id` and `kube_tag` move to the template,
//!   the control plane first, then every worker group (each held on its
//!   current machines until every control-plane machine runs the new
//!   version: kubelets never newer than the API server);
//! - a new template and the master group: the control plane only (the
//!   workers follow later, one `--nodegroup` at a time);
//! - the cluster's own template and one group: that group catches up.
//!
//! **Vertical resize**: a new template with other flavors moves the groups
//! (and the cluster's `flavor_id`/`master_flavor_id`) that still have the
//! current template's flavor to the new one; a flavor given at cluster or
//! node-group create stays. Their machines roll like an upgrade's (new
//! hash-named machine templates), in the same order and batches. A worker
//! group catching up later (`--nodegroup`, the cluster's own template)
//! keeps its flavor: the template it followed is no longer known.
//!
//! `max_batch_size` is the workers' rollout: that many new machines at a
//! time, none removed before its replacement is ready (the control plane
//! rolls one machine at a time, as KubeadmControlPlane allows).
//!
//! Refused before anything is written (HTTP 409,
//! `InvalidClusterTemplateForUpgrade`): downgrades, minor skips, a change
//! that cannot be rolled (COE, server type, OS family, network driver,
//! external or fixed network, TLS), a template the cluster could not be
//! rendered from. An upgrade while another operation runs is refused with
//! Magnum's status check (`NotSupported`).

use common::db::model::CLUSTER_TEMPLATE;
use common::db::repo::{self, Scope};
use rpc_schema::ovo::MagnumObject;
use rpc_schema::{Outcome, RemoteFailure};
use serde_json::{Map, Value, json};

use crate::capi::render::ClusterInput;
use crate::capi::{label_upgrade, topology};
use crate::handlers::DurableSignal;
use crate::lifecycle::engine::{Engine, Parts};
use crate::lifecycle::error::StepError;
use crate::lifecycle::plan::{self, Batch, Checked};
use crate::lifecycle::rows;
use crate::lifecycle::runner::{OnFailure, Op, Run};

fn refuse(reason: &str) -> StepError {
    let mut kw = Map::new();
    kw.insert("reason".into(), json!(reason));
    StepError::Refused(RemoteFailure::magnum(
        "InvalidClusterTemplateForUpgrade",
        kw,
    ))
}

/// What an upgrade request covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    WholeCluster,
    ControlPlane,
    OneGroup,
}

/// Decide the scope (pure): `template_changes`, and the named group's role.
pub fn scope(template_changes: bool, master: bool) -> Coverage {
    match (template_changes, master) {
        (_, true) => Coverage::ControlPlane,
        (true, false) => Coverage::WholeCluster,
        (false, false) => Coverage::OneGroup,
    }
}

impl Engine {
    /// `cluster_upgrade` (a call; the reply is the cluster object).
    pub async fn cluster_upgrade(
        &self,
        ctx: &rpc_schema::RequestContext,
        cluster: &MagnumObject,
        cluster_template: &MagnumObject,
        max_batch_size: i64,
        nodegroup: &MagnumObject,
        durable: &mut DurableSignal,
    ) -> Outcome {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        self.operate(Op::Upgrade, &uuid, ctx, durable, async |run| {
            self.upgrade_steps(run, cluster_template, max_batch_size, nodegroup)
                .await
        })
        .await
    }

    async fn upgrade_steps(
        &self,
        run: &mut Run<'_>,
        new_template: &MagnumObject,
        max_batch_size: i64,
        nodegroup: &MagnumObject,
    ) -> Result<Value, StepError> {
        let uuid = run.uuid.clone();
        let row = self.cluster_allowing(&uuid, Checked::Upgrade, None).await?;
        let current = self.template(&row).await?;
        let new_id = new_template.get_str("uuid").unwrap_or_default();
        let new = repo::get(&self.0.db, &CLUSTER_TEMPLATE, &Scope::admin(), new_id)
            .await
            .map_err(|e| {
                if e.is_transient() {
                    StepError::Db(e)
                } else {
                    StepError::Refused(e.to_failure())
                }
            })?;
        let ngs = self.nodegroups(&uuid).await?;
        let wanted = nodegroup.get_str("uuid").unwrap_or_default();
        let ng = ngs
            .iter()
            .find(|n| n.get_str("uuid") == Some(wanted))
            .ok_or_else(|| {
                let mut kw = Map::new();
                kw.insert("nodegroup".into(), json!(wanted));
                StepError::Refused(RemoteFailure::magnum("NodeGroupNotFound", kw))
            })?
            .clone();
        let changes_template = row.get_str("cluster_template_id") != Some(new_id);
        let master = ng.get_str("role") == Some("master");
        if changes_template && !master && ng.get_bool("is_default") != Some(true) {
            return Err(refuse(&format!(
                "Nodegroup {} can be upgraded only to match cluster's template ({}).",
                ng.get_str("name").unwrap_or("?"),
                current.get_str("name").unwrap_or("?")
            )));
        }
        let scope = scope(changes_template, master);
        let target =
            plan::check_upgrade(&row, &current, &new, &ngs, scope == Coverage::WholeCluster)
                .map_err(|e| refuse(&e))?;
        let version = target.to_string();
        let image = new
            .get_str("image_id")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refuse("the new template has no image"))?
            .to_string();
        if rows::adopted_namespace(&row).is_some() {
            // A topology has one version and takes an image id
            // (`capi::topology`).
            if scope != Coverage::WholeCluster {
                return Err(refuse(
                    "this cluster is run by a ClusterClass topology (adopted from vexxhost                      magnum-cluster-api): it is upgraded as a whole, to another template",
                ));
            }
            if !topology::uuid_like(&image) {
                return Err(refuse(&format!(
                    "this cluster is run by a ClusterClass topology (adopted from vexxhost                      magnum-cluster-api), whose machines take their image by Glance id: the                      new template's image must be given by its id, not {image:?}"
                )));
            }
        }
        // The rows after the upgrade, checked (rendered) before any write.
        let participants: Vec<&MagnumObject> = ngs
            .iter()
            .filter(|n| !rows::is_deleting(n))
            .filter(|n| match scope {
                Coverage::WholeCluster => true,
                Coverage::ControlPlane => n.get_str("role") == Some("master"),
                Coverage::OneGroup => n.get_str("uuid") == Some(wanted),
            })
            .collect();
        // The labels: inherited ones follow the new template, the cluster's
        // own stay (`capi::label_upgrade`); an adopted cluster, or an
        // upgrade of the control plane alone (the workers would roll
        // outside it: their machine templates follow the labels), keeps all.
        let moves_template = changes_template && scope != Coverage::OneGroup;
        let adopted = self
            .desired(&row, &current, &ngs, None)
            .map(|(d, _)| d.input.adopted.is_some())
            .map_err(|e| refuse(&e.to_string()))?;
        let of = |o: &MagnumObject| {
            o.get("labels")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let relabel = if moves_template {
            let keep_all = if adopted {
                Some(label_upgrade::ADOPTED)
            } else if scope == Coverage::ControlPlane {
                Some(label_upgrade::CONTROL_PLANE_ONLY)
            } else {
                None
            };
            label_upgrade::after_upgrade(&of(&row), &of(&current), &of(&new), keep_all)
        } else {
            label_upgrade::LabelUpgrade {
                labels: of(&row),
                ..Default::default()
            }
        };
        let mut labels = relabel.labels.clone();
        if changes_template {
            labels.insert("kube_tag".into(), json!(version));
        }
        let mut after = row.clone();
        after
            .set("labels", Value::Object(labels.clone()))
            .map_err(|e| StepError::Invalid(e.to_string()))?;
        // Vertical resize: a new template's flavors move the groups still on
        // the current template's (plan::flavor_after_upgrade).
        let resizes = changes_template && scope != Coverage::OneGroup;
        let flavor_of = |n: &MagnumObject| {
            resizes
                .then(|| {
                    plan::flavor_after_upgrade(
                        n.get_str("flavor_id"),
                        plan::template_flavor_field(n),
                        &current,
                        &new,
                    )
                })
                .flatten()
        };
        let mut after_ngs = ngs.clone();
        for n in &mut after_ngs {
            if participants
                .iter()
                .any(|p| p.get_str("uuid") == n.get_str("uuid"))
            {
                let flavor = flavor_of(n);
                n.set("version", json!(version))
                    .and_then(|_| n.set("image_id", json!(image)))
                    .and_then(|_| match flavor {
                        Some(f) => n.set("flavor_id", json!(f)),
                        None => Ok(()),
                    })
                    .map_err(|e| StepError::Invalid(e.to_string()))?;
            }
        }
        let mut cluster_flavors = Vec::new();
        if resizes {
            let fields: &[&'static str] = if scope == Coverage::WholeCluster {
                &["master_flavor_id", "flavor_id"]
            } else {
                &["master_flavor_id"]
            };
            for f in fields {
                if let Some(v) = plan::flavor_after_upgrade(row.get_str(f), f, &current, &new) {
                    cluster_flavors.push((*f, json!(v)));
                }
            }
        }
        let template_after = if moves_template { &new } else { &current };
        let (checked, network_driver) = self
            .desired(&after, template_after, &after_ngs, None)
            .map_err(|e| refuse(&e.to_string()))?;
        for f in &relabel.followed {
            tracing::info!(cluster = %uuid, label = %f.label, from = ?f.from, to = ?f.to, "upgrade: the label follows the new template");
        }
        for k in &relabel.kept {
            tracing::info!(cluster = %uuid, label = %k.label, value = ?k.has, template = ?k.template, why = k.fixed.unwrap_or("the cluster's own value"), "upgrade: the label keeps its value");
        }
        // Addons the labels change, before any row: a refusal leaves the
        // rows as they were, and the same upgrade can be asked again (an
        // apply of the same objects changes nothing). The machines follow
        // the rows below (converge; the status pass repairs a drift).
        if relabel.changes_addons() {
            self.upgrade_addons(&checked.input, &network_driver).await?;
        }

        // Magnum's bookkeeping: the groups, then the cluster.
        run.notify_pending().await;
        run.on_failure(OnFailure::Cluster {
            status: "UPDATE_FAILED",
            reason: true,
        });
        run.on_failure(OnFailure::Nodegroup {
            uuid: wanted.to_string(),
            status: Some("UPDATE_FAILED"),
            reason: true,
            restore: Vec::new(),
        });
        for n in &participants {
            let u = n.get_str("uuid").unwrap_or_default();
            let mut changes = vec![
                ("version", json!(version)),
                ("image_id", json!(image)),
                ("status", json!("UPDATE_IN_PROGRESS")),
            ];
            if let Some(f) = flavor_of(n) {
                tracing::info!(cluster = %uuid, nodegroup = %u, flavor = %f, "upgrade resizes the group's machines");
                changes.push(("flavor_id", json!(f)));
            }
            self.save_nodegroup(u, &changes).await?;
        }
        crate::failpoint::hit("upgrade.after_nodegroups").await;
        let mut cluster_changes = vec![
            ("status", json!("UPDATE_IN_PROGRESS")),
            ("status_reason", Value::Null),
        ];
        if moves_template {
            cluster_changes.insert(0, ("cluster_template_id", json!(new_id)));
            cluster_changes.insert(1, ("labels", Value::Object(labels)));
        }
        cluster_changes.extend(cluster_flavors);
        let saved = self.save_cluster(&uuid, &cluster_changes).await?;
        run.recorded();
        self.progress_restart(&uuid);
        crate::failpoint::hit("upgrade.after_rows").await;
        let workers: Vec<String> = participants
            .iter()
            .filter(|n| n.get_str("role") != Some("master"))
            .map(|n| rows::group_key(n))
            .collect();
        let batch = Batch {
            groups: workers.clone(),
            rollout: plan::batch_rollout(max_batch_size),
        };
        let parts = match scope {
            Coverage::OneGroup => Parts::Groups(workers),
            _ => Parts::ControlPlaneAnd(workers),
        };
        self.converge(&uuid, parts, Some(&batch)).await?;
        tracing::info!(cluster = %uuid, to = %version, ?scope, max_batch_size, "upgrade started");
        self.kick_cluster(&saved);
        Ok(saved.to_primitive())
    }
}

impl Engine {
    /// An upgrade's labels switched addons on, off or changed them: render
    /// them again with the credential the cluster's addons were given,
    /// apply, and delete those no longer rendered.
    async fn upgrade_addons(
        &self,
        input: &ClusterInput,
        network_driver: &str,
    ) -> Result<(), StepError> {
        let cloud = self
            .0
            .credentials
            .stored_cloud(&self.0.client, &input.namespace, &input.stack_id)
            .await?
            .ok_or_else(|| {
                refuse(
                    "the new template's labels change the cluster's addons, which need the \
                     cluster's stored application credential: none is stored",
                )
            })?;
        let objects = self.addon_objects(input, network_driver, &cloud).await?;
        let applied = objects.len();
        self.apply_owned(input, objects.clone(), None).await?;
        let gone = self.prune_addons(input, &objects).await?;
        tracing::info!(cluster = %input.cluster_uuid, applied, deleted = ?gone, "upgrade: addons rendered again");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_upgrade_covers() {
        assert_eq!(scope(true, false), Coverage::WholeCluster);
        assert_eq!(scope(true, true), Coverage::ControlPlane);
        assert_eq!(scope(false, true), Coverage::ControlPlane);
        assert_eq!(scope(false, false), Coverage::OneGroup);
    }
}
