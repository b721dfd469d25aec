//! The class methods magnum-api calls through `object_class_action_versions`
//! (lookups by id, uuid or name, lists with Magnum's filters and
//! pagination, counts and stats, quotas), each as Magnum 23's object and
//! `db/sqlalchemy/api.py` answer it. The entry point is
//! [`super::Indirection::class_action`].

use common::db::model::QUOTA;
use common::db::repo::{self, Page, Scope};
use rpc_schema::ovo::{self, MagnumObject};
use rpc_schema::{RemoteFailure, RequestContext};
use serde_json::{Map, Value, json};

use super::call::{self, Param, bind, magnum};
use super::{Indirection, Ret, db_failure, opt, params, req, table_of, text};

impl Indirection {
    pub(super) async fn class_method(
        &self,
        ctx: &RequestContext,
        class: &'static ovo::ClassSpec,
        method: &str,
        args: &[Value],
        kwargs: &Map<String, Value>,
    ) -> Result<Ret, RemoteFailure> {
        let scope = Scope::from_context(ctx);
        let name = class.name;
        let qual = format!("{name}.{method}");
        let b = |p: &[Param]| bind(&qual, p, args, kwargs);
        let missing = || call::no_attribute(name, method, true);
        let Some(table) = table_of(name) else {
            // Stats and Certificate.
            return match (name, method) {
                ("Stats", "get_cluster_stats") => {
                    let v = b(&[opt("project_id")])?;
                    let project = v[0].as_str().filter(|s| !s.is_empty());
                    let (clusters, nodes) = repo::cluster_stats(&self.db, project)
                        .await
                        .map_err(db_failure)?;
                    let mut s = MagnumObject::new(&ovo::STATS);
                    s.set("clusters", json!(clusters))
                        .map_err(|e| e.to_failure())?;
                    s.set("nodes", json!(nodes)).map_err(|e| e.to_failure())?;
                    // `cls(clusters=..., nodes=...)`: both stay marked changed.
                    Ok(Ret::Obj(s))
                }
                _ => Err(missing()),
            };
        };
        let tenant = match table.name {
            "magnum_service" | "quotas" => None,
            _ => Some(&scope),
        };
        match (name, method) {
            ("Cluster" | "X509KeyPair" | "Federation", "get") => {
                let v = b(&[req(if name == "Cluster" {
                    "cluster_id"
                } else if name == "Federation" {
                    "federation_id"
                } else {
                    "x509keypair_id"
                })])?;
                self.get_identity(table, tenant, &[], &v[0], false)
                    .await
                    .map(Ret::Obj)
            }
            ("ClusterTemplate", "get") => {
                let v = b(&[req("cluster_template_id")])?;
                self.get_identity(table, tenant, &[], &v[0], true)
                    .await
                    .map(Ret::Obj)
            }
            (_, "get_by_id") if name != "NodeGroup" => {
                let arg = match name {
                    "Cluster" => "cluster_id",
                    "ClusterTemplate" => "cluster_template_id",
                    "X509KeyPair" => "x509keypair_id",
                    "Federation" => "federation_id",
                    "Quota" => "quota_id",
                    _ => return Err(missing()),
                };
                let v = b(&[req(arg)])?;
                if name == "Quota" {
                    let rows = repo::query(
                        &self.db,
                        table,
                        None,
                        &[Self::by_id(&v[0])],
                        &Page::default(),
                    )
                    .await
                    .map_err(db_failure)?;
                    return rows.into_iter().next().map(Ret::Obj).ok_or_else(|| {
                        magnum(
                            "QuotaNotFound",
                            &[("msg", json!(format!("quota id {} .", text(&v[0]))))],
                        )
                    });
                }
                self.one(table, tenant, &[Self::by_id(&v[0])], &v[0])
                    .await
                    .map(Ret::Obj)
            }
            ("Cluster" | "ClusterTemplate" | "X509KeyPair" | "Federation", "get_by_uuid") => {
                let v = b(&[req("uuid")])?;
                self.one(table, tenant, &[Self::eq("uuid", &v[0])], &v[0])
                    .await
                    .map(Ret::Obj)
            }
            ("Cluster" | "ClusterTemplate" | "Federation", "get_by_name") => {
                let v = b(&[req("name")])?;
                self.one(table, tenant, &[Self::eq("name", &v[0])], &v[0])
                    .await
                    .map(Ret::Obj)
            }
            ("Cluster", "get_count_all") => {
                let v = b(&[opt("filters")])?;
                let conds = call::filters(table, &self.db.schema, &v[0])?;
                repo::count(&self.db, table, tenant, &conds)
                    .await
                    .map(|n| Ret::Json(json!(n)))
                    .map_err(db_failure)
            }
            ("Federation", "get_count_all") => {
                b(&[opt("filters")])?;
                Err(RemoteFailure::builtin(
                    "AttributeError",
                    "'Connection' object has no attribute 'get_federation_count_all'",
                ))
            }
            ("Cluster" | "X509KeyPair" | "Federation" | "Quota", "list") => {
                let v = b(&params(&[], true, true))?;
                self.list(table, tenant, Vec::new(), &v, 0, Some(4)).await
            }
            ("ClusterTemplate" | "MagnumService", "list") => {
                let v = b(&params(&[], true, false))?;
                self.list(table, tenant, Vec::new(), &v, 0, None).await
            }
            ("Cluster", "get_stats") => {
                b(&[opt("project_id")])?;
                // Magnum passes project_id as the context: every project counts.
                let (c, n) = repo::cluster_stats(&self.db, None)
                    .await
                    .map_err(db_failure)?;
                Ok(Ret::Json(json!([c, n])))
            }
            ("NodeGroup", "get") => {
                let v = b(&[req("cluster_id"), req("nodegroup_id")])?;
                self.get_identity(table, tenant, &[Self::eq("cluster_id", &v[0])], &v[1], true)
                    .await
                    .map(Ret::Obj)
            }
            ("NodeGroup", "get_by_id" | "get_by_uuid" | "get_by_name") => {
                let last = match method {
                    "get_by_id" => "id_",
                    "get_by_uuid" => "uuid",
                    _ => "name",
                };
                let v = b(&[req("cluster"), req(last)])?;
                let cond = match method {
                    "get_by_id" => Self::by_id(&v[1]),
                    "get_by_uuid" => Self::eq("uuid", &v[1]),
                    _ => Self::eq("name", &v[1]),
                };
                self.one(table, tenant, &[Self::eq("cluster_id", &v[0]), cond], &v[1])
                    .await
                    .map(Ret::Obj)
            }
            ("NodeGroup", "get_count_all") => {
                let v = b(&[req("cluster_id")])?;
                repo::count(&self.db, table, tenant, &[Self::eq("cluster_id", &v[0])])
                    .await
                    .map(|n| Ret::Json(json!(n)))
                    .map_err(db_failure)
            }
            ("NodeGroup", "list") => {
                let v = b(&params(&[req("cluster_id")], true, true))?;
                let front = vec![Self::eq("cluster_id", &v[0])];
                self.list(table, tenant, front, &v, 1, Some(5)).await
            }
            ("NodeGroup", "update_nodegroup") => {
                let v = b(&[req("cluster_id"), req("nodegroup_id"), req("values")])?;
                let current = self
                    .get_identity(table, tenant, &[Self::eq("cluster_id", &v[0])], &v[1], true)
                    .await?;
                let values = v[2].as_object().cloned().unwrap_or_default();
                let mut changes = MagnumObject::new(&ovo::NODE_GROUP);
                for (k, val) in &values {
                    changes.set(k, val.clone()).map_err(|e| e.to_failure())?;
                }
                let uuid = current.get_str("uuid").unwrap_or_default().to_string();
                repo::save(&self.db, table, &uuid, &changes)
                    .await
                    .map(Ret::Obj)
                    .map_err(db_failure)
            }
            ("MagnumService", "get_by_host_and_binary") => {
                let v = b(&[req("host"), req("binary")])?;
                let rows = repo::query(
                    &self.db,
                    table,
                    None,
                    &[Self::eq("host", &v[0]), Self::eq("binary", &v[1])],
                    &Page::default(),
                )
                .await
                .map_err(db_failure)?;
                Ok(match rows.into_iter().next() {
                    Some(o) => Ret::Obj(o),
                    None => Ret::Json(Value::Null),
                })
            }
            ("Quota", "get_quota_by_project_id_resource") => {
                let v = b(&[req("project_id"), req("resource")])?;
                self.quota(&v[0], &v[1]).await.map(Ret::Obj)
            }
            ("Quota", "quota_get_all_by_project_id") => {
                b(&[req("project_id")])?;
                Err(RemoteFailure::builtin(
                    "AttributeError",
                    "'Connection' object has no attribute 'get_quota_by_project_id'",
                ))
            }
            ("Quota", "update_quota") => {
                let v = b(&[req("project_id"), req("quota")])?;
                let values = v[1].as_object().cloned().unwrap_or_default();
                let resource = values
                    .get("resource")
                    .cloned()
                    .ok_or_else(|| RemoteFailure::builtin("KeyError", "'resource'"))?;
                let current = self.quota(&v[0], &resource).await?;
                let mut changes = MagnumObject::new(&ovo::QUOTA);
                for (k, val) in &values {
                    changes.set(k, val.clone()).map_err(|e| e.to_failure())?;
                }
                let id = current.get_i64("id").unwrap_or(-1).to_string();
                repo::save(&self.db, table, &id, &changes)
                    .await
                    .map(Ret::Obj)
                    .map_err(db_failure)
            }
            _ => Err(missing()),
        }
    }

    pub(super) async fn quota(
        &self,
        project_id: &Value,
        resource: &Value,
    ) -> Result<MagnumObject, RemoteFailure> {
        let rows = repo::query(
            &self.db,
            &QUOTA,
            None,
            &[
                Self::eq("project_id", project_id),
                Self::eq("resource", resource),
            ],
            &Page::default(),
        )
        .await
        .map_err(db_failure)?;
        rows.into_iter().next().ok_or_else(|| {
            magnum(
                "QuotaNotFound",
                &[(
                    "msg",
                    json!(format!(
                        "project_id {} resource {}.",
                        text(project_id),
                        text(resource)
                    )),
                )],
            )
        })
    }
}
