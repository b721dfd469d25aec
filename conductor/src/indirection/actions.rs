//! The instance methods magnum-api calls through `object_action`
//! (`create`, `save`, `destroy`, ...), each as Magnum 23's object does it,
//! returning the object afterwards and the fields that changed. The entry
//! point is [`super::Indirection::object_action`].

use common::db::DbError;
use common::db::model::{self, CLUSTER, SqlValue, Table};
use common::db::repo::{self, Cond, Page, Scope};
use rpc_schema::ovo::MagnumObject;
use rpc_schema::{RemoteFailure, RequestContext};
use serde_json::{Map, Value, json};

use super::call::{self, bind, magnum};
use super::{Indirection, db_failure, not_found, table_of};

impl Indirection {
    // -------------------------------------------------------------- actions

    /// Run an instance method; returns the object afterwards and its
    /// changed fields.
    pub(super) async fn instance_method(
        &self,
        ctx: &RequestContext,
        obj: &MagnumObject,
        method: &str,
        args: &[Value],
        kwargs: &Map<String, Value>,
    ) -> Result<(MagnumObject, Vec<String>), RemoteFailure> {
        let name = obj.class.name;
        let qual = format!("{name}.{method}");
        let missing = || call::no_attribute(name, method, false);
        let Some(table) = table_of(name) else {
            return Err(missing());
        };
        let allowed = match name {
            "MagnumService" => matches!(method, "create" | "destroy" | "save" | "report_state_up"),
            "Quota" => matches!(method, "create" | "delete"),
            _ => matches!(method, "create" | "destroy" | "save" | "refresh"),
        };
        if !allowed {
            return Err(missing());
        }
        bind(&qual, &[], args, kwargs)?;
        let uuid = || obj.get("uuid").cloned().unwrap_or(Value::Null);
        match method {
            "create" => {
                let mut values = MagnumObject::new(obj.class);
                for f in &obj.changes {
                    if let Some(v) = obj.get(f) {
                        values.set(f, v.clone()).map_err(|e| e.to_failure())?;
                    }
                }
                if table.column(&self.db.schema, "uuid").is_some() && !values.is_set("uuid") {
                    values
                        .set("uuid", json!(uuid::Uuid::new_v4().to_string()))
                        .map_err(|e| e.to_failure())?;
                }
                let after = match repo::insert(&self.db, table, &values).await {
                    Ok((id, created_at)) => created_in_memory(table, obj, &values, id, created_at),
                    Err(e @ DbError::Magnum { .. }) if table.name == "magnum_service" => {
                        // A duplicate (host, binary): Magnum returns the existing row.
                        let rows = repo::query(
                            &self.db,
                            table,
                            None,
                            &[
                                Self::eq("host", obj.get("host").unwrap_or(&Value::Null)),
                                Self::eq("binary", obj.get("binary").unwrap_or(&Value::Null)),
                            ],
                            &Page::default(),
                        )
                        .await
                        .map_err(db_failure)?;
                        let row = rows.into_iter().next().ok_or_else(|| db_failure(e))?;
                        let mut after = obj.clone();
                        for f in after.class.fields {
                            if let Some(v) = row.get(f.name) {
                                after.data.insert(f.name.into(), v.clone());
                            }
                        }
                        after
                    }
                    Err(e) => return Err(db_failure(e)),
                };
                Ok((after, Vec::new()))
            }
            "save" | "report_state_up" => {
                let mut changes = obj.clone();
                if method == "report_state_up" {
                    let n = obj.get_i64("report_count").unwrap_or(0) + 1;
                    changes
                        .set("report_count", json!(n))
                        .map_err(|e| e.to_failure())?;
                }
                self.save(ctx, table, &mut changes).await?;
                let mut after = obj.clone();
                if method == "report_state_up" {
                    after.data.insert(
                        "report_count".into(),
                        changes.get("report_count").cloned().unwrap_or(Value::Null),
                    );
                }
                Ok((after, Vec::new()))
            }
            "destroy" => {
                self.destroy(table, obj).await?;
                Ok((obj.clone(), Vec::new()))
            }
            "delete" => {
                let pid = obj.get("project_id").cloned().unwrap_or(Value::Null);
                let res = obj.get("resource").cloned().unwrap_or(Value::Null);
                let q = self.quota(&pid, &res).await?;
                repo::destroy(&self.db, table, &q.get_i64("id").unwrap_or(-1).to_string())
                    .await
                    .map_err(db_failure)?;
                Ok((obj.clone(), Vec::new()))
            }
            "refresh" => {
                let scope = Scope::from_context(ctx);
                let mut conds = vec![Self::eq("uuid", &uuid())];
                if name == "NodeGroup" {
                    conds.insert(
                        0,
                        Self::eq("cluster_id", obj.get("cluster_id").unwrap_or(&Value::Null)),
                    );
                }
                let current = self.one(table, Some(&scope), &conds, &uuid()).await?;
                let mut after = obj.clone();
                let mut changed = obj.changes.clone();
                for f in obj.class.fields {
                    if let (Some(mine), Some(theirs)) = (obj.get(f.name), current.get(f.name))
                        && mine != theirs
                    {
                        after.data.insert(f.name.into(), theirs.clone());
                        changed.push(f.name.to_string());
                    }
                }
                Ok((after, changed))
            }
            _ => Err(missing()),
        }
    }

    /// `update_<x>(<identity>, obj_get_changes())` with each table's rules.
    async fn save(
        &self,
        _ctx: &RequestContext,
        table: &'static Table,
        obj: &mut MagnumObject,
    ) -> Result<(), RemoteFailure> {
        let ident = match table.name {
            "magnum_service" | "quotas" => {
                obj.get_i64("id").map(|i| i.to_string()).unwrap_or_default()
            }
            _ => obj.get_str("uuid").unwrap_or_default().to_string(),
        };
        match table.name {
            "cluster_template" => {
                let referenced = repo::count(
                    &self.db,
                    &CLUSTER,
                    None,
                    &[Cond::Eq(
                        "cluster_template_id".into(),
                        SqlValue::Str(ident.clone()),
                    )],
                )
                .await
                .map_err(db_failure)?
                    > 0;
                let values: Vec<&str> = obj.changes.iter().map(String::as_str).collect();
                let publishing = values.len() == 1
                    && ((values[0] == "public" && obj.get_bool("public") == Some(true))
                        || values[0] == "hidden"
                        || (values[0] == "tags" && obj.get("tags").is_some_and(|t| !t.is_null())));
                if referenced && !publishing && values != ["name"] {
                    return Err(magnum(
                        "ClusterTemplateReferenced",
                        &[("clustertemplate", json!(ident))],
                    ));
                }
            }
            "nodegroup" => {
                // The row must belong to this object's cluster.
                let cid = obj.get("cluster_id").cloned().unwrap_or(Value::Null);
                let uuid = json!(ident);
                self.one(
                    table,
                    None,
                    &[Self::eq("cluster_id", &cid), Self::eq("uuid", &uuid)],
                    &uuid,
                )
                .await?;
            }
            "magnum_service" if obj.changes.iter().any(|c| c == "report_count") => {
                let current = self
                    .one(table, None, &[Self::by_id(&json!(ident))], &json!(ident))
                    .await
                    .map_err(|_| {
                        magnum(
                            "MagnumServiceNotFound",
                            &[("magnum_service_id", json!(ident))],
                        )
                    })?;
                if obj.get_i64("report_count").unwrap_or(0)
                    > current.get_i64("report_count").unwrap_or(0)
                {
                    obj.set("last_seen_up", json!(model::format_time(&model::utcnow())))
                        .map_err(|e| e.to_failure())?;
                }
            }
            _ => {}
        }
        repo::save(&self.db, table, &ident, obj)
            .await
            .map_err(|e| match (&e, table.name) {
                (DbError::Magnum { .. }, "magnum_service")
                    if !obj.changes.iter().any(|c| c == "uuid") =>
                {
                    magnum(
                        "MagnumServiceNotFound",
                        &[("magnum_service_id", json!(ident))],
                    )
                }
                _ => db_failure(e),
            })?;
        Ok(())
    }

    /// `destroy_<x>` with each table's rules.
    async fn destroy(
        &self,
        table: &'static Table,
        obj: &MagnumObject,
    ) -> Result<(), RemoteFailure> {
        let uuid = obj.get_str("uuid").unwrap_or_default().to_string();
        match table.name {
            "cluster_template" => {
                let found = self
                    .one(table, None, &[Self::eq("uuid", &json!(uuid))], &json!(uuid))
                    .await?;
                let referenced = repo::count(
                    &self.db,
                    &CLUSTER,
                    None,
                    &[Cond::Eq(
                        "cluster_template_id".into(),
                        SqlValue::Str(uuid.clone()),
                    )],
                )
                .await
                .map_err(db_failure)?;
                if referenced > 0 {
                    return Err(magnum(
                        "ClusterTemplateReferenced",
                        &[("clustertemplate", json!(uuid))],
                    ));
                }
                let _ = found;
            }
            "nodegroup" => {
                let cid = obj.get("cluster_id").cloned().unwrap_or(Value::Null);
                self.one(
                    table,
                    None,
                    &[Self::eq("cluster_id", &cid), Self::eq("uuid", &json!(uuid))],
                    &json!(uuid),
                )
                .await?;
            }
            _ => {}
        }
        let ident = if table.name == "magnum_service" {
            obj.get_i64("id").map(|i| i.to_string()).unwrap_or_default()
        } else {
            uuid.clone()
        };
        match repo::destroy(&self.db, table, &ident).await {
            Ok(()) => Ok(()),
            Err(DbError::Magnum { .. }) => Err(match table.name {
                // `X509KeyPairNotFound(x509keypair_id)`: the id becomes the message.
                "x509keypair" => {
                    RemoteFailure::magnum_with_message("X509KeyPairNotFound", &ident, Map::new())
                }
                "magnum_service" => magnum(
                    "MagnumServiceNotFound",
                    &[("magnum_service_id", json!(ident))],
                ),
                _ => not_found(table, &json!(ident)),
            }),
            Err(e) => Err(db_failure(e)),
        }
    }
}

/// The object as Magnum's `create()` leaves it in memory: `_from_db_object`
/// reads the SQLAlchemy instance just flushed, not the row, so the fields
/// the caller set keep their values, the model's Python defaults and `id`,
/// `created_at` are filled, and every other column reads None (even JSON
/// columns the database now holds as `{}`/`[]`, and `server_type`).
fn created_in_memory(
    table: &Table,
    obj: &MagnumObject,
    values: &MagnumObject,
    id: u64,
    created_at: chrono::NaiveDateTime,
) -> MagnumObject {
    let mut after = obj.clone();
    for f in after.class.fields {
        if table.not_columns.contains(&f.name) {
            continue;
        }
        let v = match f.name {
            "id" => json!(id),
            "created_at" => Value::String(model::format_time(&created_at)),
            name => match values.get(name) {
                Some(v) => v.clone(),
                None => table
                    .insert_defaults
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, d)| d.json())
                    .unwrap_or(Value::Null),
            },
        };
        after.data.insert(f.name.into(), v);
    }
    after
}
