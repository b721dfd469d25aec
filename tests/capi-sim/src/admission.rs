//! CAPI's admission webhooks served to the real apiserver (I/O): an HTTPS
//! endpoint on loopback and the Mutating/ValidatingWebhookConfigurations
//! that make the apiserver call it, as CAPI's webhook server is called in
//! a real management cluster (`failurePolicy: Fail`, as CAPI registers
//! them: while the webhook is down, those writes fail). What the webhooks
//! decide is [`crate::webhooks`].

use std::net::SocketAddr;

use http_body_util::BodyExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::kinds::{Kind, Line};
use crate::tls::{self, Body};
use crate::webhooks;

const MUTATE_MD: &str = "/mutate-machinedeployment";
const VALIDATE_KCP: &str = "/validate-kubeadmcontrolplane";

/// The webhook endpoint, serving.
pub struct Webhooks {
    pub addr: SocketAddr,
    ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Webhooks {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn base64_of(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Answer one AdmissionReview (pure).
pub fn review(path: &str, review: &Value) -> Value {
    let req = &review["request"];
    let uid = req["uid"].clone();
    let v2 = req.pointer("/kind/version").and_then(Value::as_str) == Some("v1beta2");
    let old = req.get("oldObject").filter(|o| !o.is_null());
    let obj = req.get("object").cloned().unwrap_or(Value::Null);
    let kind = req
        .pointer("/kind/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let outcome = match path {
        MUTATE_MD => {
            let mut mutated = obj.clone();
            webhooks::mutate(kind, v2, old, &mut mutated)
                .map(|()| crate::obj::json_patch(&obj, &mutated))
        }
        VALIDATE_KCP => webhooks::validate(kind, old, &obj).map(|()| Vec::new()),
        _ => Ok(Vec::new()),
    };
    let response = match outcome {
        Ok(ops) if ops.is_empty() => json!({"uid": uid, "allowed": true}),
        Ok(ops) => json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                          "patch": base64_of(Value::Array(ops).to_string().as_bytes())}),
        Err(e) => {
            let mut status = json!({"code": e.code, "reason": e.reason, "message": e.message});
            if let Some(d) = e.details {
                status["details"] = d;
            }
            json!({"uid": uid, "allowed": false, "status": status})
        }
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

async fn handle(req: hyper::Request<hyper::body::Incoming>) -> hyper::Response<Body> {
    let path = req.uri().path().to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return tls::json_response(400, &json!({"error": e.to_string()})),
    };
    match serde_json::from_slice::<Value>(&body) {
        Ok(v) => tls::json_response(200, &review(&path, &v)),
        Err(e) => tls::json_response(
            400,
            &json!({"error": format!("not an AdmissionReview: {e}")}),
        ),
    }
}

impl Webhooks {
    /// Serve on a free loopback port.
    pub async fn serve() -> Result<Webhooks, Box<dyn std::error::Error + Send + Sync>> {
        let id = tls::identity(None)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(tls::serve(listener, id.config, |req, _| handle(req)));
        Ok(Webhooks {
            addr,
            ca_pem: id.ca_pem,
            task,
        })
    }

    fn client_config(&self, path: &str) -> Value {
        json!({"url": format!("https://{}{path}", self.addr), "caBundle": base64_of(self.ca_pem.as_bytes())})
    }

    /// Register (or re-point) the webhook configurations named `name`.
    pub async fn register(
        &self,
        client: &kube::Client,
        line: Line,
        name: &str,
    ) -> Result<(), kube::Error> {
        let (group, version, _, _) = Kind::MachineDeployment.gvk(line);
        let (kgroup, kversion, _, _) = Kind::KubeadmControlPlane.gvk(line);
        let common = |n: &str, path: &str, g: &str, v: &str, res: &str, ops: Value| {
            json!({"name": n, "clientConfig": self.client_config(path),
                   "rules": [{"apiGroups": [g], "apiVersions": [v], "operations": ops, "resources": [res], "scope": "Namespaced"}],
                   "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                   "matchPolicy": "Equivalent", "timeoutSeconds": 10})
        };
        let mutating = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [common("default.machinedeployment.cluster.x-k8s.io", MUTATE_MD, group, version,
                                "machinedeployments", json!(["CREATE", "UPDATE"]))]});
        let validating = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [common("validation.kubeadmcontrolplane.controlplane.cluster.x-k8s.io", VALIDATE_KCP, kgroup, kversion,
                                "kubeadmcontrolplanes", json!(["UPDATE"]))]});
        let pp = PatchParams::apply(crate::runtime::FIELD_MANAGER).force();
        for (kind, plural, obj) in [
            (
                "MutatingWebhookConfiguration",
                "mutatingwebhookconfigurations",
                mutating,
            ),
            (
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
                validating,
            ),
        ] {
            let ar = kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
                plural,
            );
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            api.patch(name, &pp, &Patch::Apply(&obj)).await?;
        }
        Ok(())
    }

    /// Remove the webhook configurations named `name`.
    pub async fn unregister(client: &kube::Client, name: &str) {
        for (kind, plural) in [
            (
                "MutatingWebhookConfiguration",
                "mutatingwebhookconfigurations",
            ),
            (
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
            ),
        ] {
            let ar = kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
                plural,
            );
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let _ = api.delete(name, &Default::default()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_of(i.as_bytes()), o);
        }
    }

    #[test]
    fn reviews_answer_with_a_patch_or_a_refusal() {
        let md = json!({"request": {"uid": "u1", "kind": {"group": "cluster.x-k8s.io", "version": "v1beta1", "kind": "MachineDeployment"},
            "operation": "CREATE", "object": {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
                "metadata": {"name": "w"}, "spec": {"clusterName": "c", "selector": {}, "template": {"spec": {}}}}}});
        let r = review(MUTATE_MD, &md);
        assert_eq!(r["response"]["uid"], "u1");
        assert_eq!(r["response"]["allowed"], true);
        assert_eq!(r["response"]["patchType"], "JSONPatch");
        let kcp = |v: &str| {
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
                                   "metadata": {"name": "cp"}, "spec": {"version": v}})
        };
        let skip = json!({"request": {"uid": "u2", "kind": {"group": "controlplane.cluster.x-k8s.io", "version": "v1beta1", "kind": "KubeadmControlPlane"},
            "operation": "UPDATE", "object": kcp("v1.32.0"), "oldObject": kcp("v1.30.4")}});
        let r = review(VALIDATE_KCP, &skip);
        assert_eq!(r["response"]["allowed"], false);
        assert_eq!(r["response"]["status"]["code"], 422);
    }
}
