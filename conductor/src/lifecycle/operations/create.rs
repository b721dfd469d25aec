//! `cluster_create` (a cast), in Magnum's order.
//!
//! 1. INSERT the cluster (CREATE_IN_PROGRESS), `default-master` and
//!    `default-worker` (rows as `_get_nodegroup_object`, [`crate::lifecycle::rows`]);
//! 2. the four keypairs, `stack_id`, saved with the cert refs and copied to
//!    the nodegroups;
//! 3. namespace, the cluster's credentials and their clouds.yaml Secret (the
//!    request is acknowledged here: the credential needs its token);
//! 4. the CAPI Cluster first, then the CA Secrets and every other object
//!    owned by it, addons and the autoscaler.
//!
//! Every step is idempotent (rows by uuid, refs and `stack_id` only if
//! unset, derived keypair uuids, server-side apply), so a redelivered cast
//! or the startup resume simply runs them again. The status worker takes
//! it from there (CREATE_COMPLETE or CREATE_FAILED).

use std::collections::BTreeMap;
use std::time::Duration;

use common::certs::capi::{CertAndKey, ca_secrets};
use common::certs::store::{self, Owner};
use common::db::DbError;
use common::db::model::{CLUSTER, NODEGROUP, X509KEYPAIR};
use common::db::repo::{self, Scope};
use rpc_schema::Outcome;
use rpc_schema::context::RequestContext;
use rpc_schema::ovo::MagnumObject;
use serde_json::{Value, json};

use crate::capi::addons;
use crate::capi::autoscaler;
use crate::capi::naming;
use crate::capi::render::{self, UUID_LABEL};
use crate::handlers::DurableSignal;
use crate::lifecycle::credentials::CredentialError;
use crate::lifecycle::engine::{Engine, age, destroy_if_present};
use crate::lifecycle::error::StepError;
use crate::lifecycle::rows;
use crate::lifecycle::runner::{OnFailure, Op, Run};

const CERT_REFS: [&str; 4] = [
    "ca_cert_ref",
    "etcd_ca_cert_ref",
    "front_proxy_ca_cert_ref",
    "magnum_cert_ref",
];

impl Engine {
    /// `cluster_create` (a cast): Magnum's rows, then the management cluster.
    pub async fn cluster_create(
        &self,
        ctx: &RequestContext,
        cast: MagnumObject,
        master_count: i64,
        node_count: i64,
        create_timeout: i64,
        durable: &mut DurableSignal,
    ) -> Outcome {
        let Some(uuid) = cast.get_str("uuid").map(str::to_string) else {
            return Outcome::Failure(rpc_schema::RemoteFailure::invalid_parameter(
                "cluster_create without a cluster uuid",
            ));
        };
        self.operate(Op::Create, &uuid, ctx, durable, async |run| {
            if !self
                .insert_rows(&cast, master_count, node_count, create_timeout)
                .await?
            {
                // A redelivered cast for a cluster that has moved on.
                return Ok(Value::Null);
            }
            crate::failpoint::hit("create.after_rows").await;
            run.on_failure(OnFailure::Cluster {
                status: "CREATE_FAILED",
                reason: true,
            });
            self.create_steps(run, Some(ctx)).await?;
            Ok(Value::Null)
        })
        .await
    }

    /// Steps 1-3 of Magnum's create. Returns false when the rows exist and
    /// the cluster is no longer CREATE_IN_PROGRESS (nothing to do).
    async fn insert_rows(
        &self,
        cast: &MagnumObject,
        master_count: i64,
        node_count: i64,
        create_timeout: i64,
    ) -> Result<bool, StepError> {
        let db = &self.0.db;
        let uuid = cast.get_str("uuid").unwrap_or_default().to_string();
        // A refusal to record is answered as Magnum's (e.g. a duplicate);
        // an outage is retried.
        let refused = |e: DbError| {
            if e.is_transient() {
                StepError::Db(e)
            } else {
                StepError::Refused(e.to_failure())
            }
        };
        let cluster = match self.cluster(&uuid).await {
            Ok(c) if c.get_str("status") != Some(rows::CREATE_IN_PROGRESS) => return Ok(false),
            Ok(c) => c,
            Err(DbError::Magnum { .. }) => {
                let invalid = |m: String| {
                    StepError::Refused(rpc_schema::RemoteFailure::invalid_parameter(&m))
                };
                let mut row = rows::new_cluster_row(cast).map_err(invalid)?;
                if !row.is_set("create_timeout") {
                    row.set("create_timeout", json!(create_timeout))
                        .map_err(|e| invalid(e.to_string()))?;
                }
                let c = repo::create(db, &CLUSTER, &row).await.map_err(refused)?;
                crate::failpoint::hit("create.after_cluster_row").await;
                c
            }
            Err(e) => return Err(refused(e)),
        };
        let template = self.template(&cluster).await.map_err(refused)?;
        let have = self.nodegroups(&uuid).await.map_err(refused)?;
        for (master, count) in [(true, master_count), (false, node_count)] {
            let name = if master {
                "default-master"
            } else {
                "default-worker"
            };
            if have.iter().any(|n| n.get_str("name") == Some(name)) {
                continue;
            }
            let ng = match rows::default_nodegroup(
                &cluster,
                &template,
                count,
                master,
                &uuid::Uuid::new_v4().to_string(),
            ) {
                Ok(ng) => ng,
                Err(reason) => {
                    // Magnum raises here and leaves the cluster
                    // CREATE_IN_PROGRESS forever; we report it.
                    self.save_cluster(
                        &uuid,
                        &[
                            ("status", json!("CREATE_FAILED")),
                            ("status_reason", json!(reason)),
                        ],
                    )
                    .await?;
                    return Err(StepError::Refused(
                        rpc_schema::RemoteFailure::invalid_parameter(&reason),
                    ));
                }
            };
            repo::create(db, &NODEGROUP, &ng).await.map_err(refused)?;
        }
        Ok(true)
    }

    /// Step 4 onwards, resumable: certificates, stack_id, credentials,
    /// namespace, Secrets, objects.
    pub(in crate::lifecycle) async fn create_steps(
        &self,
        run: &mut Run<'_>,
        ctx: Option<&RequestContext>,
    ) -> Result<(), StepError> {
        let db = &self.0.db;
        let uuid = run.uuid.clone();
        let mut cluster = self.cluster(&uuid).await?;
        if cluster.get_str("status") != Some(rows::CREATE_IN_PROGRESS) {
            return Ok(());
        }
        if cluster
            .get("labels")
            .and_then(|l| l.get(rows::ADOPTED_NAMESPACE_LABEL))
            .is_some()
        {
            // It would place the cluster in another driver's namespace.
            return Err(StepError::Invalid(format!(
                "label {} is set by `magnum-conductor adopt` only, on clusters it takes over;                  a new cluster cannot carry it",
                rows::ADOPTED_NAMESPACE_LABEL
            )));
        }
        let mut pending = Vec::new();
        // (b) certificates, unless a previous run stored them.
        if CERT_REFS.iter().any(|r| cluster.get_str(r).is_none()) {
            let owner = Owner {
                project_id: cluster.get_str("project_id").map(str::to_string),
                user_id: cluster.get_str("user_id").map(str::to_string),
            };
            // Leftovers of an interrupted earlier run (stored, refs never
            // saved) carry the same derived uuids: replace them.
            let uuids = store::cluster_keypair_uuids(&uuid);
            for u in &uuids {
                destroy_if_present(db, &X509KEYPAIR, u).await?;
            }
            crate::ca::generate_certificates_to_cluster(
                db,
                &self.0.x509,
                &owner,
                &mut cluster,
                Some(uuids),
            )
            .await
            .map_err(|e| match e {
                crate::ca::ToClusterError::Failed(f) => StepError::Certificates(f.message),
                crate::ca::ToClusterError::Unavailable(d) => StepError::Db(d),
            })?;
            crate::failpoint::hit("create.after_keypairs").await;
            for r in CERT_REFS {
                pending.push((r, cluster.get(r).cloned().unwrap_or(Value::Null)));
            }
        }
        // (c) stack_id, saved with the refs.
        if cluster.get_str("stack_id").is_none() {
            let short = common::short_id::generate_id();
            let s = naming::stack_id(cluster.get_str("name"), &short);
            cluster
                .set("stack_id", json!(s))
                .map_err(|e| StepError::Invalid(e.to_string()))?;
            pending.push(("stack_id", json!(s)));
        }
        if !pending.is_empty() {
            cluster = self.save_cluster(&uuid, &pending).await?;
        }
        let stack_id = cluster.get_str("stack_id").unwrap_or_default().to_string();
        let mut ngs = self.nodegroups(&uuid).await?;
        for ng in &mut ngs {
            if ng.get_str("stack_id") != Some(stack_id.as_str()) {
                let u = ng.get_str("uuid").unwrap_or_default().to_string();
                *ng = self
                    .save_nodegroup(&u, &[("stack_id", json!(stack_id))])
                    .await?;
            }
        }
        crate::failpoint::hit("create.after_stack_id").await;
        if ctx.is_some() {
            // Magnum: after the certificates, before the driver (not again on resume).
            run.notify_pending().await;
        }
        // (d) what to create.
        let template = self.template(&cluster).await?;
        // Magnum's conductor looks its driver up here (get_driver_for_cluster).
        if let Some(refusal) = rows::cluster_type_refusal(&template, &self.0.served_distros) {
            return Err(StepError::Invalid(refusal));
        }
        for w in rows::label_warnings(&cluster, &template) {
            tracing::warn!(cluster = %uuid, "{w}");
        }
        if let Some(refusal) = rows::unknown_label_refusal(
            &self.0.capi.unknown_labels,
            &rows::unknown_labels(&cluster),
        ) {
            return Err(StepError::Invalid(refusal));
        }
        let (desired, network_driver) = self.desired(&cluster, &template, &ngs, None)?;
        let input = desired.input;
        // (e) namespace, credentials, CA secrets, objects.
        self.0
            .applier
            .apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": input.namespace}}))
            .await?;
        let cloud = match self
            .0
            .credentials
            .for_cluster(
                &self.0.client,
                &input,
                cluster.get_str("name").unwrap_or(&uuid),
                ctx,
            )
            .await
        {
            Ok(c) => c,
            Err(CredentialError::NeedsRequest) => {
                tracing::info!(cluster = %uuid, "create resumed before its credentials existed; waiting for the redelivered cast");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let creds = addons::credentials_secret(
            &input,
            &cloud,
            &self.0.credentials.interface,
            self.0.credentials.verify,
        );
        self.0.applier.apply(&creds.manifest).await?;
        run.recorded();
        self.ensure_server_groups(&input).await?;
        let mut objects = render::render(&input);
        objects.extend(self.addon_objects(&input, &network_driver, &cloud).await?);
        objects.extend(autoscaler::render(&input, &self.0.capi.autoscaler_image));
        // The Cluster first: everything else is owned by it, so deleting
        // the Cluster collects all of it (HelmChartProxies and templates
        // included, which CAPI itself does not own). The clouds.yaml Secret
        // is not owned: CAPO needs it until the very end, and we remove it.
        let (first, rest): (Vec<Value>, Vec<Value>) =
            objects.into_iter().partition(|o| o["kind"] == "Cluster");
        let owner = self.apply_owned(&input, first, None).await?;
        let secrets = self
            .ca_secrets(&cluster, &input)
            .await?
            .into_iter()
            .map(|s| s.manifest)
            .collect();
        let owner = self.apply_owned(&input, secrets, owner).await?;
        if input.proxied() {
            self.proxy_kubeconfig(&cluster, &input, owner.as_ref())
                .await?;
        }
        crate::failpoint::hit("create.mid_apply").await;
        let count = rest.len() + 1;
        self.apply_owned(&input, rest, owner).await?;
        tracing::info!(cluster = %uuid, stack_id = %stack_id, namespace = %input.namespace, objects = count, "cluster objects applied");
        self.schedule_timeout(&cluster);
        self.kick_cluster(&cluster);
        Ok(())
    }

    /// The four CA Secrets CAPI's kubeadm uses instead of generating its own.
    async fn ca_secrets(
        &self,
        cluster: &MagnumObject,
        input: &render::ClusterInput,
    ) -> Result<Vec<common::certs::capi::RenderedSecret>, StepError> {
        let db = &self.0.db;
        let mut pairs = Vec::new();
        for r in CERT_REFS {
            let kp = store::get_cert(db, &Scope::admin(), cluster.get_str(r)).await?;
            let key =
                store::private_key(&kp).map_err(|e| StepError::Certificates(e.to_string()))?;
            pairs.push((kp.certificate, key));
        }
        let labels: BTreeMap<String, String> = [
            (UUID_LABEL.to_string(), input.cluster_uuid.clone()),
            (render::PROJECT_LABEL.to_string(), input.project_id.clone()),
        ]
        .into_iter()
        .collect();
        let ck = |i: usize| CertAndKey {
            certificate: &pairs[i].0,
            key: &pairs[i].1,
        };
        Ok(ca_secrets(
            &input.stack_id,
            &input.namespace,
            &labels,
            ck(0),
            ck(1),
            ck(2),
            ck(3),
        ))
    }

    /// For a cluster reached through `magnum-capi-proxy`: the kubeconfig
    /// CAPI's controllers read, naming the proxy ([`common::api_proxy`]),
    /// written before KCP would write its own with the private endpoint
    /// (KCP adopts it and keeps its server on rotation). One that exists
    /// (an earlier run's, another conductor's) is kept, its server set.
    async fn proxy_kubeconfig(
        &self,
        cluster: &MagnumObject,
        input: &render::ClusterInput,
        owner: Option<&Value>,
    ) -> Result<(), StepError> {
        use common::certs::capi;
        use k8s_openapi::api::core::v1::Secret;
        use kube::api::{Api, PostParams};
        let server = common::api_proxy::server_url(&input.stack_id, &input.namespace);
        let api: Api<Secret> = Api::namespaced(self.0.client.clone(), &input.namespace);
        let name = format!("{}-kubeconfig", input.stack_id);
        if let Some(have) = api.get_opt(&name).await? {
            return self.point_at_proxy(&api, &have, &server).await;
        }
        let db = &self.0.db;
        let ca = store::get_cert(db, &Scope::admin(), cluster.get_str("ca_cert_ref")).await?;
        let ca_key = store::private_key(&ca).map_err(|e| StepError::Certificates(e.to_string()))?;
        let client = common::certs::x509::generate_client(
            &store::issuer_name(cluster),
            "kubernetes-admin",
            "system:masters",
            &ca_key,
            &self.0.x509,
        )
        .and_then(|c| {
            let key = common::certs::x509::decrypt_private_key(
                c.private_key.expose(),
                Some(c.passphrase.expose()),
            )?;
            Ok((c.certificate, key))
        })
        .map_err(|e| StepError::Certificates(e.to_string()))?;
        let labels: BTreeMap<String, String> = [
            (UUID_LABEL.to_string(), input.cluster_uuid.clone()),
            (render::PROJECT_LABEL.to_string(), input.project_id.clone()),
        ]
        .into_iter()
        .collect();
        let mut manifest = capi::kubeconfig_secret(
            &input.stack_id,
            &input.namespace,
            &labels,
            &server,
            &ca.certificate,
            CertAndKey {
                certificate: &client.0,
                key: &client.1,
            },
        )
        .manifest;
        if let Some(plain) = owner.and_then(|o| o.get(0)) {
            manifest["metadata"]["ownerReferences"] =
                render::cluster_owner_refs(self.0.line, "Secret", plain);
        }
        let secret: Secret = serde_json::from_value(manifest)
            .map_err(|e| StepError::Invalid(format!("the kubeconfig Secret: {e}")))?;
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(cluster = %input.cluster_uuid, %server, "kubeconfig for CAPI written: through magnum-capi-proxy");
                Ok(())
            }
            // Another conductor (or KCP) was first: set its server.
            Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&name).await? {
                Some(have) => self.point_at_proxy(&api, &have, &server).await,
                None => Err(StepError::Busy {
                    cluster: input.cluster_uuid.clone(),
                    why: format!("{name} was created and deleted at once"),
                }),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Set the server of an existing kubeconfig Secret to the proxy's.
    async fn point_at_proxy(
        &self,
        api: &kube::Api<k8s_openapi::api::core::v1::Secret>,
        have: &k8s_openapi::api::core::v1::Secret,
        server: &str,
    ) -> Result<(), StepError> {
        use common::certs::capi::{kubeconfig_server, with_kubeconfig_server};
        use kube::api::{Patch, PatchParams};
        let name = have.metadata.name.clone().unwrap_or_default();
        let text = have
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(|v| String::from_utf8_lossy(&v.0).to_string())
            .unwrap_or_default();
        if kubeconfig_server(&text).as_deref() == Some(server) {
            return Ok(());
        }
        let Some(moved) = with_kubeconfig_server(&text, server) else {
            return Err(StepError::Invalid(format!(
                "{name}: not a kubeconfig with one cluster; its server cannot be set to {server}"
            )));
        };
        let patch = json!({"data": {"value": common::certs::der::base64(moved.as_bytes())}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        tracing::info!(secret = %name, %server, "kubeconfig for CAPI now points at magnum-capi-proxy");
        Ok(())
    }

    /// Kick the cluster when its `create_timeout` expires (no event may come).
    fn schedule_timeout(&self, cluster: &MagnumObject) {
        let minutes = cluster.get_i64("create_timeout").unwrap_or(0);
        if minutes <= 0 {
            return;
        }
        let left = chrono::Duration::minutes(minutes) - age(cluster);
        let wait = left.to_std().unwrap_or_default() + Duration::from_secs(1);
        let e = self.clone();
        let c = cluster.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            e.kick_cluster(&c);
        });
    }
}
