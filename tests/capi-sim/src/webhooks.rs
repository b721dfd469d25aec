//! CAPI's admission webhooks, as far as a client can observe them (pure;
//! served to the apiserver by [`crate::admission`]).
//!
//! A real management cluster runs CAPI's defaulting and validating webhooks
//! on every write of its kinds (clients and controllers alike), called by
//! the apiserver itself. Modelled here, from the upstream source:
//!
//! - **MachineDeployment defaulting** (cluster-api v1.10
//!   `internal/webhooks/machinedeployment.go` `Default`; v1.14
//!   `core/webhooks/admission/machinedeployment.go`): the
//!   `cluster.x-k8s.io/cluster-name` label on the object, its selector and
//!   its template; the rolling-update strategy (maxSurge 1, maxUnavailable
//!   0); v1beta1 also `minReadySeconds` 0, `revisionHistoryLimit` 1,
//!   `progressDeadlineSeconds` 600; and `spec.replicas` when absent
//!   (`calculateMachineDeploymentReplicas`): with both autoscaler
//!   annotations, a new MachineDeployment gets the min size and an existing
//!   one keeps its count clamped to [min, max] (the autoscaler takes the
//!   field over); without them, 1.
//! - **KubeadmControlPlane validation** (v1.10
//!   `controlplane/kubeadm/internal/webhooks/kubeadm_control_plane.go`
//!   `validateVersion`): an update may not reach the minor after next
//!   ("cannot update Kubernetes version from X to Y"); downgrades are not
//!   refused there.

use serde_json::{Value, json};

/// A webhook's refusal: the HTTP code and message the apiserver passes on
/// (it prefixes `admission webhook "<name>" denied the request: `), and the
/// `details` of the Status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }
}

const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";
const MIN: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
const MAX: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";

fn group_of(obj: &Value) -> &str {
    obj.get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|a| a.split_once('/'))
        .map_or("", |(g, _)| g)
}

/// The mutating webhooks (run before schema validation). `v2`: the
/// object is stored as v1beta2.
pub fn mutate(kind: &str, v2: bool, old: Option<&Value>, obj: &mut Value) -> Result<(), ApiError> {
    if kind == "MachineDeployment" && group_of(obj) == "cluster.x-k8s.io" {
        default_machine_deployment(v2, old, obj)?;
    }
    Ok(())
}

/// The validating webhooks (run after schema validation).
pub fn validate(kind: &str, old: Option<&Value>, obj: &Value) -> Result<(), ApiError> {
    if kind == "KubeadmControlPlane"
        && let Some(old) = old
    {
        validate_kcp_version(old, obj)?;
    }
    Ok(())
}

fn parse_count(v: &Value, annotation: &str, name: &str) -> Result<Option<i64>, ApiError> {
    let Some(s) = v
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(annotation))
    else {
        return Ok(None);
    };
    s.as_str()
        .and_then(|s| s.parse::<i64>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::new(
                400,
                "BadRequest",
                format!(
                    "failed to caculate MachineDeployment replicas value: could not parse the value of the {annotation:?} annotation ({name})"
                ),
            )
        })
}

/// `calculateMachineDeploymentReplicas`.
fn replicas(old: Option<&Value>, new: &Value) -> Result<i64, ApiError> {
    if let Some(r) = new.pointer("/spec/replicas").and_then(Value::as_i64) {
        return Ok(r);
    }
    let name = new
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (min, max) = (parse_count(new, MIN, name)?, parse_count(new, MAX, name)?);
    if let (Some(min), Some(max)) = (min, max) {
        let Some(old) = old else { return Ok(min) };
        return Ok(
            match old.pointer("/spec/replicas").and_then(Value::as_i64) {
                None => min,
                Some(r) if r < min => min,
                Some(r) if r > max => max,
                Some(r) => r,
            },
        );
    }
    Ok(1)
}

fn default_machine_deployment(
    v2: bool,
    old: Option<&Value>,
    m: &mut Value,
) -> Result<(), ApiError> {
    let cluster = m
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    m["metadata"]["labels"][CLUSTER_LABEL] = json!(cluster);
    let r = replicas(old, m)?;
    m["spec"]["replicas"] = json!(r);
    let strategy_ptr = if v2 {
        if m["spec"].get("rollout").is_none() {
            m["spec"]["rollout"] = json!({});
        }
        "/spec/rollout/strategy"
    } else {
        for (k, d) in [
            ("minReadySeconds", 0),
            ("revisionHistoryLimit", 1),
            ("progressDeadlineSeconds", 600),
        ] {
            if m["spec"].get(k).is_none() {
                m["spec"][k] = json!(d);
            }
        }
        "/spec/strategy"
    };
    let parent = strategy_ptr.rsplit_once('/').map_or("", |(p, _)| p);
    let Some(holder) = m.pointer_mut(parent) else {
        return Ok(());
    };
    if holder.get("strategy").is_none() {
        holder["strategy"] = json!({});
    }
    let s = &mut holder["strategy"];
    if s.get("type").is_none() {
        s["type"] = json!("RollingUpdate");
    }
    if s["type"] == "RollingUpdate" {
        if s.get("rollingUpdate").is_none() {
            s["rollingUpdate"] = json!({});
        }
        if s["rollingUpdate"].get("maxSurge").is_none() {
            s["rollingUpdate"]["maxSurge"] = json!(1);
        }
        if s["rollingUpdate"].get("maxUnavailable").is_none() {
            s["rollingUpdate"]["maxUnavailable"] = json!(0);
        }
    }
    m["spec"]["selector"]["matchLabels"][CLUSTER_LABEL] = json!(cluster);
    m["spec"]["template"]["metadata"]["labels"][CLUSTER_LABEL] = json!(cluster);
    Ok(())
}

/// `(minor, patch)` of `v1.MINOR.PATCH`.
fn version(v: &Value) -> Option<(u64, u64)> {
    let s = v.pointer("/spec/version")?.as_str()?;
    let core = s.strip_prefix('v').unwrap_or(s);
    let mut it = core.split('.');
    let (_, minor, patch) = (it.next()?, it.next()?, it.next()?);
    Some((
        minor.parse().ok()?,
        patch.split(['-', '+']).next()?.parse().ok()?,
    ))
}

fn validate_kcp_version(old: &Value, new: &Value) -> Result<(), ApiError> {
    let (Some(from), Some(to)) = (version(old), version(new)) else {
        return Ok(());
    };
    if to.0 >= from.0 + 2 {
        let name = new
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let (f, t) = (
            old.pointer("/spec/version")
                .and_then(Value::as_str)
                .unwrap_or(""),
            new.pointer("/spec/version")
                .and_then(Value::as_str)
                .unwrap_or(""),
        );
        let msg = format!("cannot update Kubernetes version from {f} to {t}");
        return Err(ApiError {
            details: Some(
                json!({"name": name, "group": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane",
                                 "causes": [{"reason": "FieldValueForbidden", "message": format!("Forbidden: {msg}"), "field": "spec.version"}]}),
            ),
            ..ApiError::new(
                422,
                "Invalid",
                format!(
                    "KubeadmControlPlane.controlplane.cluster.x-k8s.io \"{name}\" is invalid: spec.version: Forbidden: {msg}"
                ),
            )
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(replicas: Option<i64>, bounds: Option<(&str, &str)>) -> Value {
        let mut m = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
                           "metadata": {"name": "w"}, "spec": {"clusterName": "c", "selector": {}, "template": {"spec": {}}}});
        if let Some(r) = replicas {
            m["spec"]["replicas"] = json!(r);
        }
        if let Some((lo, hi)) = bounds {
            m["metadata"]["annotations"] = json!({MIN: lo, MAX: hi});
        }
        m
    }

    #[test]
    fn replicas_are_handed_to_the_autoscaler() {
        let mut new = md(None, None);
        mutate("MachineDeployment", false, None, &mut new).unwrap();
        assert_eq!(new["spec"]["replicas"], 1);
        assert_eq!(
            new["spec"]["strategy"]["rollingUpdate"],
            json!({"maxSurge": 1, "maxUnavailable": 0})
        );
        assert_eq!(new["spec"]["selector"]["matchLabels"][CLUSTER_LABEL], "c");
        let mut created = md(None, Some(("2", "5")));
        mutate("MachineDeployment", false, None, &mut created).unwrap();
        assert_eq!(created["spec"]["replicas"], 2, "new: the min size");
        for (old, want) in [(3, 3), (1, 2), (9, 5)] {
            let mut upd = md(None, Some(("2", "5")));
            mutate(
                "MachineDeployment",
                false,
                Some(&md(Some(old), None)),
                &mut upd,
            )
            .unwrap();
            assert_eq!(upd["spec"]["replicas"], want, "old {old}");
        }
        let mut bad = md(None, Some(("x", "5")));
        assert_eq!(
            mutate("MachineDeployment", false, None, &mut bad)
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn kcp_minor_skips_are_refused() {
        let k = |v: &str| json!({"metadata": {"name": "cp"}, "spec": {"version": v}});
        assert!(validate("KubeadmControlPlane", Some(&k("v1.30.4")), &k("v1.31.9")).is_ok());
        assert!(validate("KubeadmControlPlane", Some(&k("v1.31.0")), &k("v1.30.4")).is_ok());
        let e = validate("KubeadmControlPlane", Some(&k("v1.30.4")), &k("v1.32.0")).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message
                .contains("cannot update Kubernetes version from v1.30.4 to v1.32.0")
        );
    }
}
