//! Helm's release history, as CAAPH's Helm client keeps it in the workload
//! cluster: Helm's `secret` storage driver in the release's namespace
//! (cluster-api-addon-provider-helm `internal/helm_client.go`, `HelmInit`:
//! `actionConfig.Init(..., namespace, "secret", ...)`), so that the release
//! outlives the controller's process: a restarted CAAPH finds it
//! (`InstallOrUpgradeHelmRelease` -> `GetHelmRelease`, Helm's `action.Get`:
//! the latest revision) and `helm list`/`history` show it.
//!
//! What it follows upstream (Helm v3.16, the line both pinned CAAPH
//! versions build with):
//! - the record (`pkg/storage/driver/secrets.go`, `newSecretsObject`): a
//!   Secret `sh.helm.release.v1.<release>.v<revision>` of type
//!   `helm.sh/release.v1`, labels `name`, `owner=helm`, `status`,
//!   `version`, and `createdAt` when created (`Create`) or `modifiedAt`
//!   when rewritten (`Update`); its `release` key holds the release as
//!   JSON, gzipped, base64 (`pkg/storage/driver/util.go`, `encodeRelease`
//!   /`decodeRelease`: a payload without gzip's magic is read as JSON);
//! - the release (`pkg/release/release.go`, `info.go`, `hook.go`): name,
//!   namespace, version, `info` (first and last deployed, status,
//!   description, notes), the chart, `config` (the values given, not
//!   merged with the chart's), the manifest (`pkg/action/action.go`,
//!   `renderResources`: each object `---\n# Source: <template>\n...`, in
//!   install order, hooks apart) and the hooks;
//! - statuses and descriptions (`pkg/action/install.go`,
//!   `performInstall`/`failRelease`; `upgrade.go`, `performUpgrade`,
//!   `releasingUpgrade`, `failRelease`): `pending-install` "Initial install
//!   underway" / `pending-upgrade` "Preparing upgrade" while the objects go
//!   in, then `deployed` "Install complete"/"Upgrade complete" (the
//!   revision before it `superseded`), or `failed` `Release "x" failed: ...`
//!   / `Upgrade "x" failed: ...` (the deployed one stays deployed);
//! - CAAPH's choice (`internal/helm_client.go`,
//!   `UpgradeHelmReleaseIfChanged` -> `shouldUpgradeHelmRelease`): a release
//!   whose chart version and values are the proxy's, and that has not
//!   failed, is left as it is; a pending one is marked failed first
//!   (`InstallOrUpgradeHelmRelease`, `updateLastReleaseStatus`);
//! - history: an upgrade keeps `maxHistory` revisions (HelmReleaseProxy
//!   `spec.options.upgrade.maxHistory`, 10 by the CRD's default:
//!   `api/v1alpha1/helmchartproxy_types.go`), never the last deployed one
//!   (`pkg/storage/storage.go`, `Create` -> `removeLeastRecent`);
//!   an uninstall deletes every revision (`pkg/action/uninstall.go`, no
//!   `KeepHistory`).
//!
//! Simplified: the chart is kept as its metadata (`Chart.yaml`), not with
//! its templates and files; the manifest's objects are written back as
//! YAML from what was parsed, not as the template's text.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

/// The Secret type Helm's storage driver writes.
pub const SECRET_TYPE: &str = "helm.sh/release.v1";
/// HelmReleaseProxy `options.upgrade.maxHistory`'s default.
pub const MAX_HISTORY: usize = 10;

/// A revision's Secret name.
pub fn key(release: &str, version: i64) -> String {
    format!("sh.helm.release.v1.{release}.v{version}")
}

/// The release as Helm stores it: JSON, gzip, base64 (pure).
pub fn encode(release: &Value) -> Result<String, String> {
    let json = serde_json::to_vec(release).map_err(|e| e.to_string())?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&json).map_err(|e| e.to_string())?;
    let bytes = gz.finish().map_err(|e| e.to_string())?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// A stored release back (pure): base64, gunzipped when it starts with
/// gzip's magic, JSON.
pub fn decode(data: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(data).map_err(|e| format!("not base64 text: {e}"))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    let json = if bytes.starts_with(&[0x1f, 0x8b, 0x08]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .map_err(|e| format!("not gzip: {e}"))?;
        out
    } else {
        bytes
    };
    serde_json::from_slice(&json).map_err(|e| format!("not a release: {e}"))
}

/// What a new revision is made of.
#[derive(Debug, Clone)]
pub struct Revision<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub version: i64,
    /// The chart's metadata (`Chart.yaml`).
    pub chart: &'a Value,
    /// The values the proxy gave.
    pub config: &'a Value,
    pub manifest: String,
    pub hooks: Vec<Value>,
    pub notes: Option<&'a str>,
    /// The first revision's `first_deployed` (an upgrade keeps it).
    pub first_deployed: Option<String>,
    /// RFC 3339, now.
    pub now: String,
}

/// A new revision in its pending state (pure).
pub fn pending(r: &Revision<'_>) -> Value {
    let install = r.first_deployed.is_none();
    let (status, description) = if install {
        ("pending-install", "Initial install underway")
    } else {
        ("pending-upgrade", "Preparing upgrade")
    };
    let mut info = json!({
        "first_deployed": r.first_deployed.clone().unwrap_or_else(|| r.now.clone()),
        "last_deployed": r.now,
        "deleted": "",
        "description": description,
        "status": status,
    });
    if let Some(n) = r.notes.filter(|n| !n.is_empty()) {
        info["notes"] = json!(n);
    }
    let mut rel = json!({
        "name": r.name,
        "info": info,
        "chart": {"metadata": r.chart},
        "manifest": r.manifest,
        "version": r.version,
        "namespace": r.namespace,
    });
    if r.config.as_object().is_some_and(|m| !m.is_empty()) {
        rel["config"] = r.config.clone();
    }
    if !r.hooks.is_empty() {
        rel["hooks"] = json!(r.hooks);
    }
    rel
}

/// A pending revision's outcome (pure): deployed, or failed with Helm's
/// description of `error`.
pub fn settled(pending: &Value, error: Option<&str>) -> Value {
    let mut rel = pending.clone();
    let name = rel["name"].as_str().unwrap_or_default().to_string();
    let install = rel["info"]["status"] == "pending-install";
    let (status, description) = match (error, install) {
        (None, true) => ("deployed", "Install complete".to_string()),
        (None, false) => ("deployed", "Upgrade complete".to_string()),
        (Some(e), true) => ("failed", format!("Release {name:?} failed: {e}")),
        (Some(e), false) => ("failed", format!("Upgrade {name:?} failed: {e}")),
    };
    rel["info"]["status"] = json!(status);
    rel["info"]["description"] = json!(description);
    rel
}

/// A stored revision with another status, its description kept (pure).
pub fn with_status(release: &Value, status: &str) -> Value {
    let mut rel = release.clone();
    rel["info"]["status"] = json!(status);
    rel
}

/// The Secret Helm stores `release` in (pure); `created` tells `Create`
/// (a `createdAt` label) from `Update` (`modifiedAt`), both Unix seconds.
pub fn secret(release: &Value, created: bool, unix_now: i64) -> Result<Secret, String> {
    let name = release["name"].as_str().unwrap_or_default();
    let version = release["version"].as_i64().unwrap_or_default();
    let status = release["info"]["status"].as_str().unwrap_or_default();
    let stamp = if created { "createdAt" } else { "modifiedAt" };
    serde_json::from_value(json!({
        "metadata": {
            "name": key(name, version),
            "namespace": release["namespace"],
            "labels": {"name": name, "owner": "helm", "status": status,
                       "version": version.to_string(), stamp: unix_now.to_string()},
        },
        "type": SECRET_TYPE,
        "stringData": {"release": encode(release)?},
    }))
    .map_err(|e| e.to_string())
}

/// CAAPH's `shouldUpgradeHelmRelease`, inverted (pure): the stored
/// release already is what the proxy asks for. An error when it names no
/// chart version (CAAPH: "Failed to resolve chart version of existing
/// release").
pub fn up_to_date(existing: &Value, version: &str, values: &Value) -> Result<bool, String> {
    let Some(have) = existing
        .pointer("/chart/metadata/version")
        .and_then(Value::as_str)
    else {
        return Err("Failed to resolve chart version of existing release".into());
    };
    if have != version || existing["info"]["status"] == "failed" {
        return Ok(false);
    }
    let empty = json!({});
    let config = existing
        .get("config")
        .filter(|c| !c.is_null())
        .unwrap_or(&empty);
    let given = if values.is_null() { &empty } else { values };
    Ok(config == given)
}

/// Helm's `removeLeastRecent` (pure): which revisions to delete so that at
/// most `max` are left, oldest first, never the last deployed one.
pub fn to_prune(history: &BTreeMap<i64, String>, max: usize) -> Vec<i64> {
    if history.len() <= max {
        return Vec::new();
    }
    let last_deployed = history
        .iter()
        .rev()
        .find(|(_, s)| *s == "deployed")
        .map(|(v, _)| *v);
    let mut out = Vec::new();
    for v in history.keys() {
        if history.len() - out.len() == max {
            break;
        }
        if Some(*v) != last_deployed {
            out.push(*v);
        }
    }
    out
}

/// Every stored revision of `release` in `ns`, by revision (I/O). A record
/// that does not decode is an error, as Helm's `Query` fails on it.
pub async fn history(
    client: &kube::Client,
    ns: &str,
    release: &str,
) -> Result<BTreeMap<i64, Value>, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default().labels(&format!("owner=helm,name={release}")))
        .await
        .map_err(|e| format!("list: failed to query with labels: {e}"))?;
    let mut out = BTreeMap::new();
    for s in list.items {
        if s.type_.as_deref() != Some(SECRET_TYPE) {
            continue;
        }
        let name = s.metadata.name.clone().unwrap_or_default();
        let data = s
            .data
            .as_ref()
            .and_then(|d| d.get("release"))
            .ok_or_else(|| format!("{ns}/{name}: no release in it"))?;
        let rel = decode(&data.0).map_err(|e| format!("{ns}/{name}: {e}"))?;
        let version = rel["version"].as_i64().unwrap_or_default();
        out.insert(version, rel);
    }
    Ok(out)
}

/// Stores a revision (I/O): created, or rewritten in place.
pub async fn store(
    client: &kube::Client,
    release: &Value,
    created: bool,
    unix_now: i64,
) -> Result<(), String> {
    let s = secret(release, created, unix_now)?;
    let ns = s.metadata.namespace.clone().unwrap_or_default();
    let name = s.metadata.name.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let r = if created {
        api.create(&PostParams::default(), &s).await.map(|_| ())
    } else {
        api.replace(&name, &PostParams::default(), &s)
            .await
            .map(|_| ())
    };
    let verb = if created { "create" } else { "update" };
    r.map_err(|e| format!("{verb}: failed to {verb}: {e}"))
}

/// Deletes revision `version` of `release` (I/O); gone already is fine.
pub async fn forget(
    client: &kube::Client,
    ns: &str,
    release: &str,
    version: i64,
) -> Result<(), String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    match api
        .delete(&key(release, version), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(format!("delete: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev<'a>(chart: &'a Value, config: &'a Value, first: Option<String>) -> Revision<'a> {
        Revision {
            name: "metrics-server",
            namespace: "kube-system",
            version: if first.is_some() { 2 } else { 1 },
            chart,
            config,
            manifest: "---\n# Source: m/templates/a.yaml\nkind: ConfigMap\n".into(),
            hooks: Vec::new(),
            notes: Some("hello"),
            first_deployed: first,
            now: "2026-12-05T00:00:00.000000001Z".into(),
        }
    }

    #[test]
    fn a_release_round_trips_as_helm_encodes_it() {
        let chart = json!({"name": "metrics-server", "version": "3.12.2", "appVersion": "0.7.2"});
        let config = json!({"replicas": 1, "args": ["--kubelet-insecure-tls"]});
        let p = pending(&rev(&chart, &config, None));
        assert_eq!(p["info"]["status"], "pending-install");
        assert_eq!(p["info"]["first_deployed"], p["info"]["last_deployed"]);
        assert_eq!(p["info"]["notes"], "hello");
        let text = encode(&p).unwrap_or_default();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&text)
            .unwrap_or_default();
        assert_eq!(&bytes[..3], &[0x1f, 0x8b, 0x08], "gzip, as Helm writes it");
        assert_eq!(decode(text.as_bytes()), Ok(p.clone()));
        // A payload without gzip's magic is JSON (decodeRelease).
        let plain = base64::engine::general_purpose::STANDARD.encode(p.to_string());
        assert_eq!(decode(plain.as_bytes()), Ok(p.clone()));
        assert!(decode(b"%%%").is_err());
        assert!(
            decode(
                base64::engine::general_purpose::STANDARD
                    .encode("{")
                    .as_bytes()
            )
            .is_err()
        );

        let s = secret(&p, true, 1_700_000_000).unwrap_or_default();
        assert_eq!(
            s.metadata.name.as_deref(),
            Some("sh.helm.release.v1.metrics-server.v1")
        );
        assert_eq!(s.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(s.type_.as_deref(), Some(SECRET_TYPE));
        let labels = s.metadata.labels.clone().unwrap_or_default();
        let want: BTreeMap<String, String> = [
            ("name", "metrics-server"),
            ("owner", "helm"),
            ("status", "pending-install"),
            ("version", "1"),
            ("createdAt", "1700000000"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(labels, want);
        let updated = secret(&p, false, 1_700_000_001).unwrap_or_default();
        let labels = updated.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("modifiedAt").map(String::as_str),
            Some("1700000001")
        );
        assert!(!labels.contains_key("createdAt"));
    }

    #[test]
    fn statuses_and_descriptions_as_helm_writes_them() {
        let chart = json!({"name": "c", "version": "1.0.0"});
        let none = json!({});
        let install = pending(&rev(&chart, &none, None));
        assert!(install.get("config").is_none(), "no values, no config");
        let ok = settled(&install, None);
        assert_eq!(
            (&ok["info"]["status"], &ok["info"]["description"]),
            (&json!("deployed"), &json!("Install complete"))
        );
        let bad = settled(&install, Some("boom"));
        assert_eq!(
            bad["info"]["description"],
            "Release \"metrics-server\" failed: boom"
        );
        let upgrade = pending(&rev(&chart, &none, Some("2026-01-01T00:00:00Z".into())));
        assert_eq!(upgrade["info"]["status"], "pending-upgrade");
        assert_eq!(upgrade["info"]["first_deployed"], "2026-01-01T00:00:00Z");
        assert_eq!(
            settled(&upgrade, None)["info"]["description"],
            "Upgrade complete"
        );
        assert_eq!(
            settled(&upgrade, Some("x"))["info"]["description"],
            "Upgrade \"metrics-server\" failed: x"
        );
        let old = with_status(&ok, "superseded");
        assert_eq!(old["info"]["status"], "superseded");
        assert_eq!(old["info"]["description"], "Install complete");
    }

    #[test]
    fn caaph_upgrades_only_what_changed_or_failed() {
        let chart = json!({"name": "c", "version": "1.0.0"});
        let values = json!({"a": 1});
        let stored = settled(&pending(&rev(&chart, &values, None)), None);
        assert_eq!(up_to_date(&stored, "1.0.0", &values), Ok(true));
        assert_eq!(up_to_date(&stored, "1.0.1", &values), Ok(false));
        assert_eq!(up_to_date(&stored, "1.0.0", &json!({"a": 2})), Ok(false));
        let failed = settled(&pending(&rev(&chart, &values, None)), Some("x"));
        assert_eq!(up_to_date(&failed, "1.0.0", &values), Ok(false));
        let none = json!({});
        let empty = settled(&pending(&rev(&chart, &none, None)), None);
        assert_eq!(up_to_date(&empty, "1.0.0", &Value::Null), Ok(true));
        assert!(up_to_date(&json!({"info": {}}), "1.0.0", &values).is_err());
    }

    #[test]
    fn history_is_pruned_as_helm_prunes_it() {
        let h = |pairs: &[(i64, &str)]| -> BTreeMap<i64, String> {
            pairs.iter().map(|(v, s)| (*v, s.to_string())).collect()
        };
        assert_eq!(
            to_prune(&h(&[(1, "superseded"), (2, "deployed")]), 9),
            Vec::<i64>::new()
        );
        assert_eq!(
            to_prune(
                &h(&[
                    (1, "superseded"),
                    (2, "superseded"),
                    (3, "deployed"),
                    (4, "pending-upgrade")
                ]),
                2
            ),
            vec![1, 2]
        );
        // The last deployed revision is kept, even the oldest.
        assert_eq!(
            to_prune(
                &h(&[
                    (1, "deployed"),
                    (2, "failed"),
                    (3, "failed"),
                    (4, "pending-upgrade")
                ]),
                2
            ),
            vec![2, 3]
        );
    }
}
