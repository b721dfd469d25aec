//! `magnum-conductor check`: what startup needs, one line per check with a
//! hint when it fails, before an operator cuts over (and as the
//! openstack-ansible role's gate). Exit status 0 only when nothing failed.
//!
//! Each check tries once, quickly (no startup retries), and prints URLs
//! redacted: no password, token or secret reaches the output.

use std::time::Duration;

use common::config::Config;
use common::db::Db;

use crate::capi::render::CapiLine;

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub status: Status,
    pub what: &'static str,
    pub detail: String,
    /// How to fix it (failures only).
    pub hint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Fail,
    Skip,
    /// Worth an operator's look, not a reason to stop (exit 0).
    Warn,
}

impl Line {
    fn ok(what: &'static str, detail: impl Into<String>) -> Line {
        Line {
            status: Status::Ok,
            what,
            detail: detail.into(),
            hint: None,
        }
    }
    pub fn fail(what: &'static str, detail: impl Into<String>, hint: impl Into<String>) -> Line {
        Line {
            status: Status::Fail,
            what,
            detail: detail.into(),
            hint: Some(hint.into()),
        }
    }
    fn warn(what: &'static str, detail: impl Into<String>, hint: impl Into<String>) -> Line {
        Line {
            status: Status::Warn,
            what,
            detail: detail.into(),
            hint: Some(hint.into()),
        }
    }
    fn skip(what: &'static str, detail: impl Into<String>) -> Line {
        Line {
            status: Status::Skip,
            what,
            detail: detail.into(),
            hint: None,
        }
    }

    /// `OK    database    ...` (and `      fix: ...` under a failure).
    pub fn render(&self) -> String {
        let word = match self.status {
            Status::Ok => "OK",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
            Status::Warn => "WARN",
        };
        let mut s = format!("{word:<5} {:<11} {}", self.what, self.detail);
        if let Some(h) = &self.hint {
            s.push_str(&format!("\n      fix: {h}"));
        }
        s
    }
}

/// The resources the conductor writes or watches, by CAPI line: (group
/// version, plural, provider).
pub fn required_resources(line: CapiLine) -> Vec<(&'static str, &'static str, &'static str)> {
    let (capi, kcp, bootstrap) = line.api_versions();
    let infra = "infrastructure.cluster.x-k8s.io/v1beta1";
    let addons = "addons.cluster.x-k8s.io/v1alpha1";
    vec![
        (capi, "clusters", "Cluster API"),
        (capi, "machinedeployments", "Cluster API"),
        (capi, "machines", "Cluster API"),
        (capi, "machinehealthchecks", "Cluster API"),
        (
            kcp,
            "kubeadmcontrolplanes",
            "Cluster API kubeadm control plane",
        ),
        (
            bootstrap,
            "kubeadmconfigtemplates",
            "Cluster API kubeadm bootstrap",
        ),
        (infra, "openstackclusters", "CAPO"),
        (infra, "openstackmachinetemplates", "CAPO"),
        (
            addons,
            "helmchartproxies",
            "the Cluster API Helm addon provider",
        ),
        (
            addons,
            "helmreleaseproxies",
            "the Cluster API Helm addon provider",
        ),
    ]
}

/// Where a permission is needed: everywhere (the clusters' namespaces are
/// made per project), or in `[capi] lease_namespace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Cluster,
    Leases,
}

/// The permissions the conductor needs on the management cluster: (API
/// group, resources, verbs, where). deploy/kubernetes/magnum-conductor-rbac.yaml
/// grants exactly these (a unit test compares them), and
/// tests/python/test_rbac.py sees a cluster's lifecycle use every one (the
/// autoscaler's: held to make its Role, RBAC's escalation check).
pub const RIGHTS: &[(&str, &[&str], &[&str], Scope)] = &[
    (
        "",
        &["namespaces"],
        &["create", "get", "patch"],
        Scope::Cluster,
    ),
    (
        "",
        &["secrets"],
        &["create", "delete", "get", "list", "patch"],
        Scope::Cluster,
    ),
    (
        "",
        &["configmaps", "serviceaccounts"],
        &["create", "delete", "list", "patch"],
        Scope::Cluster,
    ),
    (
        "apps",
        &["deployments"],
        &["create", "delete", "list", "patch"],
        Scope::Cluster,
    ),
    (
        "rbac.authorization.k8s.io",
        &["roles", "rolebindings"],
        &["create", "delete", "list", "patch"],
        Scope::Cluster,
    ),
    (
        "",
        &["services"],
        &["create", "list", "patch"],
        Scope::Cluster,
    ),
    (
        "discovery.k8s.io",
        &["endpointslices"],
        &["list", "watch"],
        Scope::Cluster,
    ),
    (
        "cluster.x-k8s.io",
        &["clusters", "machinedeployments"],
        &["create", "delete", "list", "patch", "watch"],
        Scope::Cluster,
    ),
    // An adopted topology's Cluster, read before its topology is patched.
    ("cluster.x-k8s.io", &["clusters"], &["get"], Scope::Cluster),
    (
        "cluster.x-k8s.io",
        &["machinehealthchecks"],
        &["create", "delete", "list", "patch"],
        Scope::Cluster,
    ),
    (
        "cluster.x-k8s.io",
        &["machines"],
        &["list", "watch"],
        Scope::Cluster,
    ),
    (
        "controlplane.cluster.x-k8s.io",
        &["kubeadmcontrolplanes"],
        &["create", "list", "patch", "watch"],
        Scope::Cluster,
    ),
    (
        "bootstrap.cluster.x-k8s.io",
        &["kubeadmconfigtemplates"],
        &["create", "delete", "list", "patch"],
        Scope::Cluster,
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        &["openstackclusters"],
        &["create", "list", "patch", "watch"],
        Scope::Cluster,
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        &["openstackmachinetemplates"],
        &["create", "delete", "list", "patch"],
        Scope::Cluster,
    ),
    (
        "addons.cluster.x-k8s.io",
        &["helmchartproxies"],
        &["create", "delete", "get", "list", "patch"],
        Scope::Cluster,
    ),
    (
        "addons.cluster.x-k8s.io",
        &["helmreleaseproxies"],
        &["list", "watch"],
        Scope::Cluster,
    ),
    (
        "addons.cluster.x-k8s.io",
        &["clusterresourcesets"],
        &["create", "delete", "list", "patch"],
        Scope::Cluster,
    ),
    // What the cluster autoscaler's Role grants (capi::autoscaler).
    (
        "cluster.x-k8s.io",
        &[
            "machinedeployments",
            "machinedeployments/scale",
            "machinesets",
            "machines",
            "machinepools",
            "machinepools/scale",
        ],
        &["get", "list", "watch", "update", "patch"],
        Scope::Cluster,
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        &["openstackmachinetemplates"],
        &["get", "list", "watch"],
        Scope::Cluster,
    ),
    (
        "coordination.k8s.io",
        &["leases"],
        &["create", "delete", "get", "list", "update", "watch"],
        Scope::Leases,
    ),
];

/// [`RIGHTS`], one (group, resource, verb, where) each, sorted, without
/// repeats (pure).
pub fn rights() -> Vec<(&'static str, &'static str, &'static str, Scope)> {
    let mut out: Vec<_> = RIGHTS
        .iter()
        .flat_map(|(g, rs, vs, s)| {
            rs.iter()
                .flat_map(move |r| vs.iter().map(move |v| (*g, *r, *v, *s)))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Which of [`rights`] the management cluster refuses this identity
/// (I/O: a SelfSubjectAccessReview each, which every authenticated identity
/// may ask): the refused ones, as `verb group/resource [in namespace]`.
async fn refused_rights(
    client: &kube::Client,
    lease_namespace: &str,
) -> Result<Vec<String>, kube::Error> {
    use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
    let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let mut refused = Vec::new();
    for (group, resource, verb, scope) in rights() {
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (resource, None),
        };
        let namespace = (scope == Scope::Leases).then_some(lease_namespace);
        let review: SelfSubjectAccessReview = serde_json::from_value(serde_json::json!({
            "spec": {"resourceAttributes": {"group": group, "resource": resource,
                     "subresource": subresource, "verb": verb, "namespace": namespace}}}))
        .map_err(kube::Error::SerdeError)?;
        let answer = api.create(&Default::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            let what = match subresource {
                Some(s) => format!("{resource}/{s}"),
                None => resource.to_string(),
            };
            let group = if group.is_empty() { "core" } else { group };
            refused.push(match namespace {
                Some(ns) => format!("{verb} {group}/{what} in {ns}"),
                None => format!("{verb} {group}/{what}"),
            });
        }
    }
    Ok(refused)
}

/// Which of `required` the served (group version, plural) pairs lack (pure).
pub fn missing<'a>(
    required: &'a [(&'static str, &'static str, &'static str)],
    served: &[(String, String)],
) -> Vec<&'a (&'static str, &'static str, &'static str)> {
    required
        .iter()
        .filter(|(gv, plural, _)| !served.iter().any(|(g, p)| g == gv && p == plural))
        .collect()
}

/// Run every check.
pub async fn run(cfg: &Config) -> Vec<Line> {
    let mut out = vec![Line::ok(
        "config",
        format!("{} parsed", cfg.files.join(", ")),
    )];
    out.extend(startup(cfg));
    out.push(database(cfg).await);
    out.push(clusters_by_driver(cfg).await);
    out.push(broker(cfg).await);
    out.extend(management(cfg).await);
    out.push(keystone(cfg).await);
    out.push(charts(cfg));
    out
}

/// What startup refuses before connecting ([`crate::startup`]): one FAIL
/// line each, else one OK line saying what was checked.
fn startup(cfg: &Config) -> Vec<Line> {
    let refused = crate::startup::refusals(cfg, true);
    if refused.is_empty() {
        let listen = cfg
            .metrics
            .listen
            .map(|a| format!(", [metrics] listen {a} free"))
            .unwrap_or_default();
        return vec![Line::ok(
            "startup",
            format!("log destination usable, certificates in x509keypair{listen}"),
        )];
    }
    refused
        .into_iter()
        .map(|r| Line::fail(r.name, r.detail, r.fix))
        .collect()
}

async fn database(cfg: &Config) -> Line {
    let mut opts = cfg.database.clone();
    opts.max_retries = 0;
    opts.pool_timeout = 5;
    let url = common::db::DbUrl::parse(opts.connection.expose())
        .map(|u| u.redacted())
        .unwrap_or_else(|_| "[database] connection".into());
    match tokio::time::timeout(Duration::from_secs(15), Db::connect(&opts)).await {
        Ok(Ok(db)) => {
            let s = &db.schema;
            db.pool.close().await;
            Line::ok(
                "database",
                format!("{url}: schema revision {} accepted", s.revision),
            )
        }
        Ok(Err(e)) => Line::fail(
            "database",
            {
                let e = e.to_string();
                if e.contains(&url) {
                    e
                } else {
                    format!("{url}: {e}")
                }
            },
            "check [database] connection (host, credentials, TLS); the schema must be Magnum's \
             (magnum-db-manage upgrade) at a revision this conductor supports",
        ),
        Err(_) => Line::fail(
            "database",
            format!("{url}: no answer within 15 s"),
            "check that the database host is reachable from this host",
        ),
    }
}

/// A template's uuid, driver, server_type, cluster_distro, coe, and how
/// many clusters use it (as read).
type TemplateRow = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
);

/// One template's driver columns and how many clusters use it.
type TemplateCount = (crate::ownership::TemplateKey, i64);

/// The `clusters` line: clusters per owning driver (pure).
/// `missing`: clusters whose template does not exist (nobody's).
pub fn drivers_line(
    templates: &[TemplateCount],
    missing: i64,
    drivers: &crate::ownership::Drivers,
    legacy_topic: Option<&str>,
) -> Line {
    use crate::ownership::{OUR_DRIVER, Owner, owner};
    let mut by: std::collections::BTreeMap<String, i64> = Default::default();
    let mut unknown: Vec<String> = Vec::new();
    let mut total = 0;
    for (t, n) in templates {
        if *n == 0 {
            continue;
        }
        total += n;
        let o = owner(t, drivers);
        *by.entry(o.driver().to_string()).or_default() += n;
        if let Owner::Unknown(why) = o {
            unknown.push(format!("{n} of template {}: {why}", t.uuid));
        }
    }
    if missing > 0 {
        total += missing;
        *by.entry("unknown".into()).or_default() += missing;
        unknown.push(format!("{missing} whose template does not exist"));
    }
    let mut parts = Vec::new();
    if let Some(n) = by.remove(OUR_DRIVER) {
        parts.push(format!("{n} {OUR_DRIVER} (ours)"));
    }
    let unknown_n = by.remove("unknown");
    let fate = match legacy_topic {
        Some(t) => format!("forwarded to topic {t}"),
        None => "refused".to_string(),
    };
    for (d, n) in &by {
        parts.push(format!(
            "{n} {d} (another driver's: {fate}, left untouched; \
             `magnum-conductor adopt --dry-run` tells which can be adopted)"
        ));
    }
    if let Some(n) = unknown_n {
        parts.push(format!("{n} of no known driver (refused, left untouched)"));
    }
    let detail = if parts.is_empty() {
        "no clusters".to_string()
    } else {
        format!("{total} clusters: {}", parts.join(", "))
    };
    if unknown.is_empty() {
        Line::ok("clusters", detail)
    } else {
        Line::fail(
            "clusters",
            format!("{detail}; {}", unknown.join("; ")),
            "give those templates a driver (cluster_template.driver: the entry point that \
             created their clusters), or list the other drivers installed on the magnum-api \
             hosts in [capi] other_drivers",
        )
    }
}

async fn clusters_by_driver(cfg: &Config) -> Line {
    let mut opts = cfg.database.clone();
    opts.max_retries = 0;
    opts.pool_timeout = 5;
    let read = async {
        let db = Db::connect(&opts).await.map_err(|e| e.to_string())?;
        let rows: Result<Vec<TemplateRow>, _> = sqlx::query_as(
            "SELECT t.uuid, t.driver, t.server_type, t.cluster_distro, t.coe, COUNT(c.id) \
                 FROM cluster_template t LEFT JOIN cluster c ON c.cluster_template_id = t.uuid \
                 GROUP BY t.id",
        )
        .fetch_all(&db.pool)
        .await;
        let orphans: Result<i64, _> = sqlx::query_scalar(
            "SELECT COUNT(*) FROM cluster c WHERE NOT EXISTS \
             (SELECT 1 FROM cluster_template t WHERE t.uuid = c.cluster_template_id)",
        )
        .fetch_one(&db.pool)
        .await;
        db.pool.close().await;
        let rows = rows.map_err(|e| e.to_string())?;
        let out: Vec<TemplateCount> = rows
            .into_iter()
            .map(|(uuid, driver, server_type, distro, coe, n)| {
                let f = |k: &str| match k {
                    "uuid" => uuid.as_deref(),
                    "driver" => driver.as_deref(),
                    "server_type" => server_type.as_deref(),
                    "cluster_distro" => distro.as_deref(),
                    "coe" => coe.as_deref(),
                    _ => None,
                };
                (crate::ownership::TemplateKey::from_fields(f), n)
            })
            .collect();
        let orphans = orphans.map_err(|e| e.to_string())?;
        Ok::<_, String>((out, orphans))
    };
    let drivers = crate::ownership::Drivers {
        ours: cfg.capi.os_distros.clone(),
        others: cfg.capi.other_drivers.clone(),
    };
    match tokio::time::timeout(Duration::from_secs(15), read).await {
        Ok(Ok((t, missing))) => {
            drivers_line(&t, missing, &drivers, cfg.conductor.legacy_topic.as_deref())
        }
        Ok(Err(e)) => Line::skip("clusters", format!("cannot read the clusters: {e}")),
        Err(_) => Line::skip("clusters", "the database did not answer within 15 s"),
    }
}

async fn broker(cfg: &Config) -> Line {
    let targets = crate::amqp::targets(cfg);
    let mut errors = Vec::new();
    for t in &targets {
        match tokio::time::timeout(Duration::from_secs(10), crate::amqp::connect(cfg, t)).await {
            Ok(Ok(conn)) => {
                let _ = conn.close(200, "magnum-conductor check").await;
                return Line::ok("broker", format!("{}: connected", t.label));
            }
            Ok(Err(e)) => errors.push(e.to_string()),
            Err(_) => errors.push(format!("{}: no answer within 10 s", t.label)),
        }
    }
    Line::fail(
        "broker",
        errors.join("; "),
        "check [DEFAULT] transport_url (user, password, virtual host) and \
         [oslo_messaging_rabbit] ssl options",
    )
}

async fn management(cfg: &Config) -> Vec<Line> {
    let client = match crate::mgmt::client(&cfg.capi).await {
        Ok(c) => c,
        Err(e) => {
            if cfg.capi.kubeconfig.is_none() {
                return vec![Line::skip(
                    "management",
                    format!(
                        "no [capi] kubeconfig and none found ({e}): cluster operations would answer NotSupported"
                    ),
                )];
            }
            return vec![Line::fail(
                "management",
                e.to_string(),
                "check [capi] kubeconfig (path, contexts, credentials)",
            )];
        }
    };
    let line = match tokio::time::timeout(
        Duration::from_secs(15),
        crate::mgmt::detect_line(&client, cfg.capi.api_version),
    )
    .await
    {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => {
            return vec![Line::fail(
                "management",
                e.to_string(),
                "check that the kubeconfig's apiserver is reachable and that Cluster API is installed",
            )];
        }
        Err(_) => {
            return vec![Line::fail(
                "management",
                "the apiserver did not answer within 15 s",
                "check that the kubeconfig's apiserver is reachable from this host",
            )];
        }
    };
    let required = required_resources(line);
    let mut served = Vec::new();
    let mut gvs: Vec<&str> = required.iter().map(|(gv, _, _)| *gv).collect();
    gvs.dedup();
    for gv in gvs {
        if let Ok(list) = client.list_api_group_resources(gv).await {
            served.extend(list.resources.into_iter().map(|r| (gv.to_string(), r.name)));
        }
    }
    let lacking = missing(&required, &served);
    let mut out = vec![if lacking.is_empty() {
        Line::ok(
            "management",
            format!(
                "Cluster API {} line: all {} resources served",
                match line {
                    CapiLine::V1beta1 => "v1beta1",
                    CapiLine::V1beta2 => "v1beta2",
                },
                required.len()
            ),
        )
    } else {
        let mut providers: Vec<&str> = lacking.iter().map(|(_, _, p)| *p).collect();
        providers.dedup();
        Line::fail(
            "management",
            format!(
                "not served: {}",
                lacking
                    .iter()
                    .map(|(gv, p, _)| format!("{p}.{gv}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!("install or upgrade {}", providers.join(", ")),
        )
    }];
    out.push(
        match tokio::time::timeout(
            Duration::from_secs(30),
            refused_rights(&client, &cfg.capi.lease_namespace),
        )
        .await
        {
            Ok(Ok(refused)) if refused.is_empty() => Line::ok(
                "rights",
                format!("all {} permissions granted", rights().len()),
            ),
            Ok(Ok(refused)) => Line::fail(
                "rights",
                format!("not granted: {}", refused.join(", ")),
                "grant them: deploy/kubernetes/magnum-conductor-rbac.yaml (docs/operator-guide.md, \
                 \"The conductor's identity on the management cluster\")",
            ),
            Ok(Err(e)) => Line::warn(
                "rights",
                format!("could not ask the apiserver (SelfSubjectAccessReview): {e}"),
                "the identity's permissions were not checked",
            ),
            Err(_) => Line::warn(
                "rights",
                "the apiserver did not answer the access reviews within 30 s",
                "the identity's permissions were not checked",
            ),
        },
    );
    if cfg.capi.api_proxy {
        out.push(api_proxy(&client, &cfg.capi.lease_namespace).await);
    }
    if cfg.capi.ha_leases {
        out.push(
            match crate::lifecycle::coordination::lease::prepare(&client, &cfg.capi.lease_namespace)
                .await
            {
                Ok(()) => Line::ok(
                    "leases",
                    format!("namespace {} usable", cfg.capi.lease_namespace),
                ),
                Err(e) => Line::fail(
                    "leases",
                    format!("namespace {}: {e}", cfg.capi.lease_namespace),
                    "grant get, list, create, update and delete on leases there, or set \
                     [capi] ha_leases = false for a lone conductor",
                ),
            },
        );
    }
    out
}

/// The clusters reached through `magnum-capi-proxy` (I/O: their Services,
/// the proxies' EndpointSlices and Leases), judged by [`proxy_paths`].
async fn api_proxy(client: &kube::Client, lease_namespace: &str) -> Line {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
    let list = |gv: (&str, &str, &str, &str), ns: Option<&str>, labels: String| {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(gv.0, gv.1, gv.2), gv.3);
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        async move {
            let l = api.list(&ListParams::default().labels(&labels)).await?;
            Ok::<Vec<serde_json::Value>, kube::Error>(
                l.items
                    .iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .collect(),
            )
        }
    };
    use common::api_proxy as p;
    let got = tokio::time::timeout(Duration::from_secs(15), async {
        Ok::<_, kube::Error>((
            list(
                ("", "v1", "Service", "services"),
                None,
                p::SERVICE_LABEL.to_string(),
            )
            .await?,
            list(
                ("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
                None,
                format!("endpointslice.kubernetes.io/managed-by={}", p::MANAGED_BY),
            )
            .await?,
            list(
                ("coordination.k8s.io", "v1", "Lease", "leases"),
                Some(lease_namespace),
                p::HOST_LABEL.to_string(),
            )
            .await?,
        ))
    })
    .await;
    match got {
        Ok(Ok((services, slices, leases))) => {
            proxy_paths(&services, &slices, &leases, chrono::Utc::now())
        }
        Ok(Err(e)) => Line::fail(
            "api-proxy",
            format!("cannot list the proxy Services, EndpointSlices or Leases: {e}"),
            "grant list on services and endpointslices, and on leases in the lease namespace",
        ),
        Err(_) => Line::fail(
            "api-proxy",
            "the apiserver did not answer within 15 s",
            "check that the kubeconfig's apiserver is reachable from this host",
        ),
    }
}

/// Which clusters without an API floating IP no live proxy host reaches
/// (pure): a Service of the conductor's with no ready EndpointSlice from a
/// host whose Lease is current.
pub fn proxy_paths(
    services: &[serde_json::Value],
    slices: &[serde_json::Value],
    leases: &[serde_json::Value],
    now: chrono::DateTime<chrono::Utc>,
) -> Line {
    use common::api_proxy as p;
    let s = |v: &serde_json::Value, ptr: &str| {
        v.pointer(ptr).and_then(|x| x.as_str()).map(str::to_string)
    };
    let alive: Vec<String> = leases
        .iter()
        .filter_map(p::lease_alive_until)
        .filter(|(_, until)| *until >= now)
        .map(|(host, _)| host)
        .collect();
    let label = |v: &serde_json::Value, k: &str| {
        v.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(|x| x.as_str())
            .map(str::to_string)
    };
    let mut lacking = Vec::new();
    for svc in services {
        let (Some(ns), Some(name)) = (s(svc, "/metadata/namespace"), s(svc, "/metadata/name"))
        else {
            continue;
        };
        let reached = slices.iter().any(|sl| {
            s(sl, "/metadata/namespace").as_deref() == Some(ns.as_str())
                && label(sl, "kubernetes.io/service-name").as_deref() == Some(name.as_str())
                && label(sl, p::HOST_LABEL).is_some_and(|h| alive.contains(&h))
                && p::slice_ready(sl)
        });
        if !reached {
            let cluster = label(svc, p::SERVICE_LABEL).unwrap_or(name);
            lacking.push(format!("{ns}/{cluster}"));
        }
    }
    let hosts = if alive.is_empty() {
        "no proxy host alive".to_string()
    } else {
        format!("proxy hosts alive: {}", alive.join(", "))
    };
    if lacking.is_empty() {
        return Line::ok(
            "api-proxy",
            format!(
                "{} cluster(s) without an API floating IP, each reached by a proxy host; {hosts}",
                services.len()
            ),
        );
    }
    Line::warn(
        "api-proxy",
        format!(
            "no proxy path to {} of {} cluster(s) without an API floating IP: {}; {hosts}",
            lacking.len(),
            services.len(),
            lacking.join(", ")
        ),
        "run magnum-capi-proxy (deploy/ansible/magnum-capi-proxy.yml) on the hosts holding these \
         clusters' network namespaces (qdhcp-<network> of the DHCP agent, ovnmeta-<network> of OVN's \
         metadata agent); its log says why a cluster is down there",
    )
}

async fn keystone(cfg: &Config) -> Line {
    let ka = &cfg.keystone_auth;
    if ka.auth_url.is_none() || (ka.username.is_none() && ka.user_id.is_none()) {
        return Line::skip(
            "keystone",
            if cfg.capi.static_application_credential_id.is_some() {
                "no [keystone_auth] credentials: clusters get the static application credential"
            } else {
                "no [keystone_auth] credentials configured"
            },
        );
    }
    match crate::lifecycle::keystone::Keystone::new(ka.clone()) {
        Ok(k) => match tokio::time::timeout(Duration::from_secs(15), k.check()).await {
            Ok(Ok(who)) => Line::ok("keystone", who),
            Ok(Err(e)) => Line::fail(
                "keystone",
                e.to_string(),
                "check [keystone_auth] (auth_url, user, password, domains, project)",
            ),
            Err(_) => Line::fail(
                "keystone",
                "no answer within 15 s",
                "check that [keystone_auth] auth_url is reachable from this host",
            ),
        },
        Err(e) => Line::fail("keystone", e.to_string(), "check [keystone_auth]"),
    }
}

fn charts(cfg: &Config) -> Line {
    let c = &cfg.capi;
    let list = [
        ("calico", &c.calico_chart),
        ("cilium", &c.cilium_chart),
        ("occm", &c.occm_chart),
        ("cinder-csi", &c.cinder_csi_chart),
        ("metrics-server", &c.metrics_server_chart),
        ("ingress-nginx", &c.ingress_nginx_chart),
        ("monitoring", &c.monitoring_chart),
        ("manila-csi", &c.manila_csi_chart),
        ("nfs-csi", &c.nfs_csi_chart),
    ];
    Line::ok(
        "charts",
        list.iter()
            .map(|(n, (repo, chart, version))| format!("{n} {chart} {version} from {repo}"))
            .collect::<Vec<_>>()
            .join("; "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What deploy/kubernetes/magnum-conductor-rbac.yaml grants, as
    /// (group, resource, verb, where): a Role's rules are the Leases'.
    fn shipped() -> Vec<(String, String, String, Scope)> {
        let text = include_str!("../../deploy/kubernetes/magnum-conductor-rbac.yaml");
        let mut out = Vec::new();
        for doc in serde_norway::Deserializer::from_str(text) {
            let d: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap_or_default();
            let scope = match d["kind"].as_str() {
                Some("ClusterRole") => Scope::Cluster,
                Some("Role") => Scope::Leases,
                _ => continue,
            };
            let strs = |v: &serde_json::Value| -> Vec<String> {
                v.as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for rule in d["rules"].as_array().into_iter().flatten() {
                for g in strs(&rule["apiGroups"]) {
                    for r in strs(&rule["resources"]) {
                        for v in strs(&rule["verbs"]) {
                            out.push((g.clone(), r.clone(), v, scope));
                        }
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn the_shipped_identity_grants_exactly_what_check_asks_for() {
        let ours: Vec<(String, String, String, Scope)> = rights()
            .into_iter()
            .map(|(g, r, v, s)| (g.to_string(), r.to_string(), v.to_string(), s))
            .collect();
        let shipped = shipped();
        assert!(shipped.len() > 50, "{shipped:?}");
        assert_eq!(ours, shipped);
    }

    #[test]
    fn clusters_no_live_proxy_host_reaches_are_named() {
        use serde_json::json;
        let now = chrono::Utc::now();
        let svc = |c: &str| {
            json!({"metadata": {"namespace": "magnum-p", "name": format!("{c}-apiserver"),
                                "labels": {common::api_proxy::SERVICE_LABEL: c}}})
        };
        let slice = |c: &str, host: &str, ready: bool| {
            json!({"metadata": {"namespace": "magnum-p", "name": format!("{c}-apiserver-{host}"),
                                "labels": {"kubernetes.io/service-name": format!("{c}-apiserver"),
                                           common::api_proxy::HOST_LABEL: host}},
                   "endpoints": [{"addresses": ["192.0.2.1"], "conditions": {"ready": ready}}]})
        };
        let lease = |host: &str, age: i64| {
            json!({"spec": {"holderIdentity": host, "leaseDurationSeconds": 30,
                            "renewTime": (now - chrono::Duration::seconds(age)).to_rfc3339()}})
        };
        let l = proxy_paths(&[], &[], &[], now);
        assert_eq!(l.status, Status::Ok);
        let l = proxy_paths(
            &[svc("k1"), svc("k2"), svc("k3")],
            &[
                slice("k1", "net-a", true),
                slice("k2", "net-b", true),
                slice("k3", "net-a", false),
            ],
            &[lease("net-a", 5), lease("net-b", 100)],
            now,
        );
        assert_eq!(l.status, Status::Warn);
        // k2's only host is dead, k3's only slice withdrawn.
        assert!(
            l.detail.contains("2 of 3") && l.detail.contains("magnum-p/k2, magnum-p/k3"),
            "{}",
            l.detail
        );
        assert!(
            l.detail.contains("proxy hosts alive: net-a"),
            "{}",
            l.detail
        );
        assert!(l.render().starts_with("WARN  api-proxy"), "{}", l.render());
        let l = proxy_paths(
            &[svc("k1")],
            &[slice("k1", "net-a", true)],
            &[lease("net-a", 1)],
            now,
        );
        assert_eq!(l.status, Status::Ok, "{}", l.detail);
    }

    #[test]
    fn missing_names_what_is_not_served() {
        let req = required_resources(CapiLine::V1beta1);
        let mut served: Vec<(String, String)> = req
            .iter()
            .map(|(gv, p, _)| (gv.to_string(), p.to_string()))
            .collect();
        assert!(missing(&req, &served).is_empty());
        served.retain(|(gv, _)| !gv.starts_with("addons."));
        let m = missing(&req, &served);
        assert_eq!(
            m.iter().map(|(_, p, _)| *p).collect::<Vec<_>>(),
            ["helmchartproxies", "helmreleaseproxies"]
        );
        // v1beta2 writes other versions: a v1beta1-only install lacks them.
        let v2 = required_resources(CapiLine::V1beta2);
        let v1_only: Vec<(String, String)> = req
            .iter()
            .map(|(gv, p, _)| (gv.to_string(), p.to_string()))
            .collect();
        assert_eq!(missing(&v2, &v1_only).len(), 6);
    }

    #[test]
    fn clusters_are_counted_by_their_owner() {
        use crate::ownership::{Drivers, TemplateKey};
        let t = |uuid: &str, driver: Option<&str>, os: &str| TemplateKey {
            uuid: uuid.into(),
            driver: driver.map(str::to_string),
            server_type: Some("vm".into()),
            cluster_distro: Some(os.into()),
            coe: Some("kubernetes".into()),
        };
        let d = Drivers {
            ours: vec!["ubuntu".into()],
            others: vec![],
        };
        let l = drivers_line(
            &[
                (t("a", Some("k8s_capi_rust"), "ubuntu"), 3),
                (t("b", None, "ubuntu"), 2),
                (t("c", Some("k8s_capi_helm_v1"), "ubuntu"), 4),
                (t("d", Some("k8s_cluster_api_ubuntu"), "ubuntu"), 0),
            ],
            0,
            &d,
            None,
        );
        assert_eq!(l.status, Status::Ok);
        assert_eq!(
            l.detail,
            "9 clusters: 5 k8s_capi_rust (ours), 4 k8s_capi_helm_v1 (another driver's: refused, \
             left untouched; `magnum-conductor adopt --dry-run` tells which can be adopted)"
        );
        let l = drivers_line(
            &[(t("c", Some("k8s_capi_helm_v1"), "ubuntu"), 4)],
            0,
            &d,
            Some("magnum-conductor-legacy"),
        );
        assert!(
            l.detail.starts_with(
                "4 clusters: 4 k8s_capi_helm_v1 (another driver's: forwarded to topic \
                 magnum-conductor-legacy, left untouched;"
            ),
            "{}",
            l.detail
        );
        // A driverless template two installed drivers provide, and a
        // cluster whose template is gone: nobody's, and said so.
        let d = Drivers {
            ours: vec!["ubuntu".into()],
            others: vec!["k8s_capi_helm_v1".into()],
        };
        let l = drivers_line(&[(t("b", None, "ubuntu"), 2)], 1, &d, None);
        assert_eq!(l.status, Status::Fail);
        assert!(
            l.detail.starts_with("3 clusters: 3 of no known driver"),
            "{}",
            l.detail
        );
        assert!(l.detail.contains("2 of template b:"), "{}", l.detail);
        assert!(
            l.detail.contains("1 whose template does not exist"),
            "{}",
            l.detail
        );
        assert_eq!(drivers_line(&[], 0, &d, None).detail, "no clusters");
    }

    #[test]
    fn lines_render_with_a_hint_on_failure() {
        assert_eq!(
            Line::ok("database", "db: ok").render(),
            "OK    database    db: ok"
        );
        assert_eq!(
            Line::fail("broker", "refused", "check it").render(),
            "FAIL  broker      refused\n      fix: check it"
        );
    }
}
