//! Which Magnum driver owns a cluster: this conductor's, or another's.
//!
//! A cloud that installs this conductor usually has clusters made by one
//! of the Python drivers (vexxhost magnum-cluster-api, StackHPC
//! magnum-capi-helm). Magnum decides a cluster's driver from its template
//! (`magnum/drivers/common/driver.py`, `get_driver_for_cluster` and
//! `get_driver`, 23.0.0):
//!
//! - the template's `driver` column, when set, names the entry point;
//! - a template without one (Magnum 22 and older wrote it only from the
//!   image's `magnum_driver` property) gets the entry point whose
//!   `provides` holds its `(server_type, cluster_distro, coe)`: when
//!   several do, whichever loaded last, which nobody can predict.
//!
//! [`owner`] makes the same decision here, purely, from the template and
//! [`Drivers`] (what `[capi] os_distros` serves and which other entry
//! points `[capi] other_drivers` says are installed). A driverless
//! template that several drivers could claim is nobody's here
//! ([`Owner::Unknown`]): refused and left alone, never guessed.
//!
//! [`created_elsewhere`] is the second guard, against a template that
//! says "ours" for a cluster we did not create: a CAPI Cluster under the
//! name and namespace we would use that does not carry our uuid label.

/// Our `magnum.drivers` entry point (deploy/magnum-driver/pyproject.toml).
pub const OUR_DRIVER: &str = "k8s_capi_rust";

/// The other drivers of Magnum 20-23 clouds and the `os` values they
/// provide (all `vm`/`kubernetes`), read off their packages' `provides`:
/// magnum-capi-helm 1.4.0 `magnum_capi_helm/driver.py` (one entry point,
/// ubuntu and flatcar); magnum-cluster-api 0.38.2
/// `magnum_cluster_api/driver.py` (one entry point per distribution);
/// Magnum 22's Heat driver `k8s_fedora_coreos_v1`.
pub const KNOWN_DRIVERS: &[(&str, &[&str])] = &[
    ("k8s_capi_helm_v1", &["ubuntu", "flatcar"]),
    ("k8s_cluster_api_ubuntu", &["ubuntu"]),
    ("k8s_cluster_api_ubuntu_focal", &["ubuntu-focal"]),
    ("k8s_cluster_api_debian", &["debian"]),
    ("k8s_cluster_api_flatcar", &["flatcar"]),
    ("k8s_cluster_api_rockylinux", &["rockylinux"]),
    ("k8s_fedora_coreos_v1", &["fedora-coreos"]),
];

/// What decides driverless templates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drivers {
    /// `os_distro` values we serve (`[capi] os_distros`).
    pub ours: Vec<String>,
    /// The other entry points installed beside ours on the API hosts
    /// (`[capi] other_drivers`). A name not in [`KNOWN_DRIVERS`] is taken
    /// to provide every `vm`/`kubernetes` distribution: a template it
    /// might claim is never taken for ours.
    pub others: Vec<String>,
}

/// A template's driver-related columns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateKey {
    pub uuid: String,
    pub driver: Option<String>,
    pub server_type: Option<String>,
    pub cluster_distro: Option<String>,
    pub coe: Option<String>,
}

impl TemplateKey {
    /// From a `cluster_template` row's fields (`get`: a column's text).
    pub fn from_fields<'a>(get: impl Fn(&str) -> Option<&'a str>) -> TemplateKey {
        let s = |k: &str| {
            get(k)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        TemplateKey {
            uuid: s("uuid").unwrap_or_default(),
            driver: s("driver"),
            server_type: s("server_type"),
            cluster_distro: s("cluster_distro"),
            coe: s("coe"),
        }
    }
}

/// Who owns the clusters of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Ours,
    /// Another driver's (its entry point name).
    Foreign(String),
    /// A driverless template several drivers (or none) could claim.
    Unknown(String),
}

impl Owner {
    pub fn is_ours(&self) -> bool {
        matches!(self, Owner::Ours)
    }

    /// The driver named in errors and metrics (`unknown` for
    /// [`Owner::Unknown`]).
    pub fn driver(&self) -> &str {
        match self {
            Owner::Ours => OUR_DRIVER,
            Owner::Foreign(d) => d,
            Owner::Unknown(_) => "unknown",
        }
    }

    /// Why this conductor leaves a cluster of this owner alone (None if
    /// it is ours).
    pub fn refusal(&self, cluster: &str) -> Option<String> {
        match self {
            Owner::Ours => None,
            Owner::Foreign(d) => Some(format!(
                "Cluster driver ({d}) not supported. Cluster {cluster} belongs to the {d} driver; \
                 this conductor runs {OUR_DRIVER} clusters only and leaves it untouched \
                 (a Python magnum-conductor with {d} installed must handle it)."
            )),
            Owner::Unknown(why) => Some(format!(
                "Cluster driver (unknown) not supported. Cluster {cluster}: {why}; this conductor \
                 leaves it untouched. Set the template's driver (or [capi] other_drivers) so its \
                 owner is known."
            )),
        }
    }
}

/// The driver owning clusters of template `t` (see the module notes).
pub fn owner(t: &TemplateKey, d: &Drivers) -> Owner {
    if let Some(name) = &t.driver {
        return if name == OUR_DRIVER {
            Owner::Ours
        } else {
            Owner::Foreign(name.clone())
        };
    }
    // Magnum's columns: server_type defaults to 'vm' in the schema; coe
    // is 'kubernetes' for every template 20-23 accept.
    let server_type = t.server_type.as_deref().unwrap_or("vm");
    let coe = t.coe.as_deref().unwrap_or("kubernetes");
    let os = t.cluster_distro.as_deref().unwrap_or("");
    let tuple = format!("({server_type}, {os}, {coe})");
    let mut providers: Vec<&str> = Vec::new();
    if server_type == "vm" && coe == "kubernetes" {
        if d.ours.iter().any(|o| o.trim() == os) {
            providers.push(OUR_DRIVER);
        }
        for other in &d.others {
            let other = other.trim();
            if other.is_empty() || other == OUR_DRIVER {
                continue;
            }
            let provides = match KNOWN_DRIVERS.iter().find(|(n, _)| *n == other) {
                Some((_, oses)) => oses.contains(&os),
                None => true,
            };
            if provides && !providers.contains(&other) {
                providers.push(other);
            }
        }
    }
    match providers.as_slice() {
        [one] if *one == OUR_DRIVER => Owner::Ours,
        [one] => Owner::Foreign((*one).to_string()),
        [] => Owner::Unknown(format!(
            "template {} has no driver and no driver installed here provides {tuple}",
            t.uuid
        )),
        many => Owner::Unknown(format!(
            "template {} has no driver and {tuple} is provided by {}: Magnum picks whichever \
             loads last",
            t.uuid,
            many.join(", ")
        )),
    }
}

/// A CAPI Cluster exists where we would have put this cluster's (`label`:
/// its `magnum.openstack.org/cluster-uuid`, None if it has none) and does
/// not name this Magnum cluster: another driver (magnum-capi-helm uses our
/// namespace and naming) created it. `existing` is None when there is no
/// such CAPI Cluster.
pub fn created_elsewhere(uuid: &str, existing: Option<Option<&str>>) -> bool {
    match existing {
        None => false,
        Some(label) => label != Some(uuid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(driver: Option<&str>, os: &str) -> TemplateKey {
        TemplateKey {
            uuid: "t-1".into(),
            driver: driver.map(str::to_string),
            server_type: Some("vm".into()),
            cluster_distro: Some(os.into()),
            coe: Some("kubernetes".into()),
        }
    }

    fn drivers(others: &[&str]) -> Drivers {
        Drivers {
            ours: vec!["ubuntu".into(), "rockylinux".into()],
            others: others.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_named_driver_decides() {
        let d = drivers(&[]);
        assert_eq!(owner(&t(Some(OUR_DRIVER), "ubuntu"), &d), Owner::Ours);
        assert_eq!(
            owner(&t(Some("k8s_capi_helm_v1"), "ubuntu"), &d),
            Owner::Foreign("k8s_capi_helm_v1".into())
        );
        // Even for a distribution we serve, and a driver we never heard of.
        assert_eq!(
            owner(&t(Some("k8s_cluster_api_ubuntu"), "ubuntu"), &d),
            Owner::Foreign("k8s_cluster_api_ubuntu".into())
        );
        // Blank is no driver (Magnum 22 wrote "" from an empty property).
        assert_eq!(
            owner(
                &TemplateKey::from_fields(|k| match k {
                    "uuid" => Some("x"),
                    "driver" => Some(" "),
                    "server_type" => Some("vm"),
                    "cluster_distro" => Some("ubuntu"),
                    "coe" => Some("kubernetes"),
                    _ => None,
                }),
                &d
            ),
            Owner::Ours
        );
    }

    #[test]
    fn driverless_templates_resolve_as_magnum_does_or_not_at_all() {
        // Only us installed: what we provide is ours, the rest nobody's.
        assert_eq!(owner(&t(None, "ubuntu"), &drivers(&[])), Owner::Ours);
        assert!(matches!(
            owner(&t(None, "fedora-coreos"), &drivers(&[])),
            Owner::Unknown(_)
        ));
        // A tuple only the other driver provides is its.
        assert_eq!(
            owner(&t(None, "flatcar"), &drivers(&["k8s_capi_helm_v1"])),
            Owner::Foreign("k8s_capi_helm_v1".into())
        );
        assert_eq!(
            owner(
                &t(None, "ubuntu-focal"),
                &drivers(&["k8s_cluster_api_ubuntu", "k8s_cluster_api_ubuntu_focal"])
            ),
            Owner::Foreign("k8s_cluster_api_ubuntu_focal".into())
        );
        // A tuple both provide: Magnum takes whichever loaded last; we
        // take neither.
        let Owner::Unknown(why) = owner(&t(None, "ubuntu"), &drivers(&["k8s_capi_helm_v1"])) else {
            panic!("ubuntu is provided twice")
        };
        assert!(why.contains("k8s_capi_rust, k8s_capi_helm_v1"), "{why}");
        // An unknown driver may provide anything: never ours then.
        assert!(matches!(
            owner(&t(None, "rockylinux"), &drivers(&["site_custom_driver"])),
            Owner::Unknown(_)
        ));
        // Listing ourselves changes nothing.
        assert_eq!(
            owner(&t(None, "rockylinux"), &drivers(&[OUR_DRIVER])),
            Owner::Ours
        );
        // Bare metal is never ours.
        let mut bm = t(None, "ubuntu");
        bm.server_type = Some("bm".into());
        assert!(matches!(owner(&bm, &drivers(&[])), Owner::Unknown(_)));
    }

    #[test]
    fn refusals_name_the_driver_as_magnum_does() {
        let r = Owner::Foreign("k8s_capi_helm_v1".into())
            .refusal("c-1")
            .unwrap_or_default();
        assert!(
            r.starts_with("Cluster driver (k8s_capi_helm_v1) not supported."),
            "{r}"
        );
        assert!(Owner::Ours.refusal("c-1").is_none());
    }

    #[test]
    fn a_capi_cluster_we_did_not_create_is_not_ours() {
        assert!(!created_elsewhere("u-1", None));
        assert!(!created_elsewhere("u-1", Some(Some("u-1"))));
        assert!(created_elsewhere("u-1", Some(None)));
        assert!(created_elsewhere("u-1", Some(Some("u-2"))));
    }
}
