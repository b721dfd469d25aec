//! Unit tests of [`super`] (ovo.rs), kept apart so the module reads as code.

use super::*;

fn cluster_primitive() -> Value {
    json!({
        "magnum_object.name": "Cluster", "magnum_object.namespace": "magnum",
        "magnum_object.version": "1.24",
        "magnum_object.data": {
            "uuid": "5f0e7a2c-1b3d-4e5f-8a9b-0c1d2e3f4a5b", "name": "k8s",
            "labels": {"kube_tag": "v1.30.4", "auto_healing_enabled": false, "boot_volume_size": 20},
            "docker_volume_size": null, "create_timeout": "60", "floating_ip_enabled": true,
            "created_at": "2025-03-04T10:20:30.123456+00:00",
            "cluster_template": {
                "magnum_object.name": "ClusterTemplate", "magnum_object.namespace": "magnum",
                "magnum_object.version": "1.21", "magnum_object.data": {"id": 3, "coe": "kubernetes"}
            }
        },
        "magnum_object.changes": ["name", "labels", "bogus"]
    })
}

#[test]
fn decodes_and_coerces_like_ovo() {
    let c = MagnumObject::from_primitive_of(&cluster_primitive(), &CLUSTER).unwrap();
    assert_eq!(c.get_str("name"), Some("k8s"));
    assert_eq!(c.get("labels").unwrap()["auto_healing_enabled"], "False");
    assert_eq!(c.get("labels").unwrap()["boot_volume_size"], "20");
    assert_eq!(c.get_i64("create_timeout"), Some(60));
    assert_eq!(c.get_str("created_at"), Some("2025-03-04T10:20:30Z"));
    assert!(c.get("docker_volume_size").unwrap().is_null());
    assert_eq!(c.changes, vec!["name", "labels"]);
    assert_eq!(
        c.get_object("cluster_template").unwrap().get_i64("id"),
        Some(3)
    );
}

#[test]
fn round_trips_and_omits_empty_changes() {
    let c = MagnumObject::from_primitive(&cluster_primitive()).unwrap();
    let again = MagnumObject::from_primitive(&c.to_primitive()).unwrap();
    assert_eq!(again, c);
    let fresh = MagnumObject::new(&CERTIFICATE).to_primitive();
    assert!(fresh.get(CHANGES_KEY).is_none());
    assert_eq!(fresh[VERSION_KEY], "1.2");
}

#[test]
fn accepts_older_minor_and_keeps_unknown_fields() {
    let mut p = cluster_primitive();
    p[VERSION_KEY] = json!("1.23");
    p[DATA_KEY]["trust_id"] = json!("t-1");
    let c = MagnumObject::from_primitive(&p).unwrap();
    assert_eq!(c.version, (1, 23));
    assert_eq!(c.extra["trust_id"], "t-1");
    assert!(!c.to_primitive().to_string().contains("trust_id"));
}

#[test]
fn backport_drops_newer_fields() {
    let mut ng = MagnumObject::new(&NODE_GROUP);
    ng.set("name", json!("ng")).unwrap();
    ng.set("node_labels", json!({"a": "b"})).unwrap();
    let old = ng.to_primitive_at(1);
    assert_eq!(old[VERSION_KEY], "1.1");
    assert!(old[DATA_KEY].get("node_labels").is_none());
    assert_eq!(old[CHANGES_KEY], json!(["name"]));
}

#[test]
fn refuses_what_python_refuses() {
    let mut p = cluster_primitive();
    p[VERSION_KEY] = json!("1.25");
    assert!(matches!(
        MagnumObject::from_primitive(&p),
        Err(ObjectError::IncompatibleVersion { .. })
    ));
    p[VERSION_KEY] = json!("2.0");
    assert!(matches!(
        MagnumObject::from_primitive(&p),
        Err(ObjectError::IncompatibleVersion { .. })
    ));
    let mut p = cluster_primitive();
    p[NAMESPACE_KEY] = json!("nova");
    assert!(matches!(
        MagnumObject::from_primitive(&p),
        Err(ObjectError::UnsupportedObject(_))
    ));
    let mut p = cluster_primitive();
    p[NAME_KEY] = json!("Bay");
    assert_eq!(
        MagnumObject::from_primitive(&p)
            .unwrap_err()
            .to_failure()
            .class,
        "UnsupportedObjectError"
    );
    let mut p = cluster_primitive();
    p[DATA_KEY]["status"] = json!("BROKEN");
    assert_eq!(
        MagnumObject::from_primitive(&p)
            .unwrap_err()
            .to_failure()
            .class,
        "InvalidParameterValue"
    );
    let mut p = cluster_primitive();
    p[DATA_KEY]["id"] = json!(null);
    assert!(MagnumObject::from_primitive(&p).is_err());
    let mut p = cluster_primitive();
    p[DATA_KEY]["labels"] = json!(["x"]);
    assert!(MagnumObject::from_primitive(&p).is_err());
    assert!(MagnumObject::from_primitive_of(&cluster_primitive(), &NODE_GROUP).is_err());
}

#[test]
fn replies_at_the_callers_versions() {
    use std::collections::BTreeMap;
    // What Magnum 22.0.0's magnum-api sends: Cluster 1.23 (with its trust
    // fields), NodeGroup 1.1.
    let mut sent = cluster_primitive();
    sent[VERSION_KEY] = json!("1.23");
    sent[DATA_KEY]["trust_id"] = json!("t-1");
    let cluster = MagnumObject::from_primitive_of(&sent, &CLUSTER).unwrap();
    let mut versions = BTreeMap::new();
    cluster.versions_into(&mut versions);
    assert_eq!(versions["Cluster"], (1, 23));
    assert_eq!(versions["ClusterTemplate"], (1, 21));
    versions.insert("NodeGroup", (1, 1));

    // Our reply (newest versions) comes back at theirs.
    let ours = MagnumObject::from_primitive_of(&cluster_primitive(), &CLUSTER)
        .unwrap()
        .to_primitive();
    assert_eq!(ours[VERSION_KEY], "1.24");
    let back = for_caller(ours.clone(), &versions).unwrap();
    assert_eq!(back[VERSION_KEY], "1.23");
    assert_eq!(back[DATA_KEY]["name"], "k8s");
    assert_eq!(back[DATA_KEY]["cluster_template"][VERSION_KEY], "1.21");
    let mut ng = MagnumObject::new(&NODE_GROUP);
    ng.set("name", json!("ng")).unwrap();
    ng.set("node_labels", json!({"a": "b"})).unwrap();
    ng.set("node_taints", json!([])).unwrap();
    let list = for_caller(json!([ng.to_primitive(), ng.to_primitive()]), &versions).unwrap();
    for n in list.as_array().unwrap() {
        assert_eq!(n[VERSION_KEY], "1.1");
        assert!(
            n[DATA_KEY].get("node_labels").is_none() && n[DATA_KEY].get("node_taints").is_none()
        );
    }
    // A caller at our version, or one that sent no such class, gets it as is;
    // plain values pass.
    let newest: BTreeMap<&'static str, (u32, u32)> = [("Cluster", (1, 24))].into();
    assert_eq!(for_caller(ours.clone(), &newest).unwrap(), ours);
    assert_eq!(for_caller(ours.clone(), &BTreeMap::new()).unwrap(), ours);
    assert_eq!(for_caller(json!(true), &versions).unwrap(), json!(true));
    // A major it does not know: what oslo.versionedobjects says.
    let other: BTreeMap<&'static str, (u32, u32)> = [("Cluster", (2, 0))].into();
    let e = for_caller(ours, &other).unwrap_err();
    assert!(matches!(e, ObjectError::IncompatibleVersion { .. }), "{e}");
    assert_eq!(e.to_failure().class, "IncompatibleObjectVersion");
}
