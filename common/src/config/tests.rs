//! Unit tests of [`super`] (config), kept apart so the module reads as code.

use super::known::KNOWN;
use super::*;
use std::path::Path;

fn conf(text: &str) -> Result<Config, ConfigError> {
    let mut l = Layered::default();
    l.push_text(Path::new("t.conf"), text)
        .map_err(LoadError::Parse)?;
    Config::from_layered(&l)
}

#[test]
fn defaults_match_magnum_and_oslo() {
    let c = conf("[DEFAULT]\n").unwrap();
    assert_eq!(c.default.control_exchange, "magnum");
    assert_eq!(c.conductor.topic, "magnum-conductor");
    assert_eq!(c.default.rpc_response_timeout, 60);
    assert!(!c.rabbit.durable());
    assert_eq!(c.rabbit.rabbit_transient_queues_ttl, 1800);
    assert_eq!(c.rabbit.heartbeat_timeout_threshold, 60);
    assert_eq!(c.rabbit.kombu_missing_consumer_retry_timeout, 60);
    assert!(c.rabbit.direct_mandatory_flag);
    assert!(c.default.host.is_none());
}

#[test]
fn capi_options() {
    let c = conf("[DEFAULT]\n").unwrap();
    assert_eq!(c.capi.namespace_prefix, "magnum-");
    assert_eq!(c.capi.api_version, CapiVersion::Auto);
    assert_eq!(c.capi.occm_chart.1, "openstack-cloud-controller-manager");
    let c = conf("[capi]\nkubeconfig = /etc/magnum/mgmt.kubeconfig\napi_version = v1beta2\noccm_chart_repo = https://mirror.local/cpo\n").unwrap();
    assert_eq!(
        c.capi.kubeconfig.as_deref(),
        Some("/etc/magnum/mgmt.kubeconfig")
    );
    assert_eq!(c.capi.api_version, CapiVersion::V1beta2);
    assert_eq!(c.capi.occm_chart.0, "https://mirror.local/cpo");
    assert!(
        conf("[capi]\napi_version = v1\n")
            .unwrap_err()
            .to_string()
            .contains("api_version")
    );
    assert!(
        conf("[capi]\nnamespace_prefix = Magnum_\n")
            .unwrap_err()
            .to_string()
            .contains("namespace_prefix")
    );
}

#[test]
fn url_query_overrides_rabbit_options() {
    let c = conf(
        "[DEFAULT]\ntransport_url = rabbit://u:p@h:5672/?amqp_durable_queues=true&ssl=1\n[oslo_messaging_rabbit]\namqp_durable_queues = false\n",
    )
    .unwrap();
    assert!(c.rabbit.amqp_durable_queues && c.rabbit.ssl);
}

#[test]
fn invalid_values_name_the_option() {
    let e = conf("[oslo_messaging_rabbit]\nrabbit_qos_prefetch_count = lots\n")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "invalid value for [oslo_messaging_rabbit] rabbit_qos_prefetch_count: \"lots\" is not an integer"
    );
    let e = conf("[DEFAULT]\ndebug = maybe\n").unwrap_err().to_string();
    assert!(e.contains("[DEFAULT] debug"), "{e}");
    assert!(
        conf("[oslo_messaging_rabbit]\nrabbit_quorum_queue = true\nrabbit_ha_queues = true\n")
            .is_err()
    );
    assert!(conf("[oslo_messaging_rabbit]\nrabbit_stream_fanout = true\nrabbit_transient_quorum_queue = true\n").is_err());
    assert!(conf("[oslo_messaging_rabbit]\nkombu_compression = snappy\n").is_err());
    assert!(conf("[oslo_messaging_rabbit]\nrabbit_login_method = NTLM\n").is_err());
    assert!(conf("[metrics]\nlisten = nowhere\n").is_err());
    let e = conf("[capi]\nleader_election = zookeeper\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("[capi] leader_election"), "{e}");
    assert_eq!(conf("").unwrap().capi.leader_election, "amqp");
    assert_eq!(
        conf("[capi]\nleader_election = lease\n")
            .unwrap()
            .capi
            .leader_election,
        "lease"
    );
}

#[test]
fn unknown_options_are_fine_and_secrets_hidden() {
    let c = conf("[DEFAULT]\ntransport_url = rabbit://u:s3cr%23t@h/\nfoo = bar\n[keystone_authtoken]\npassword = x\n").unwrap();
    assert_eq!(
        c.transport.hosts[0].password.as_ref().unwrap().expose(),
        "s3cr#t"
    );
    assert!(!format!("{c:?}").contains("s3cr#t"));
}

#[test]
fn interpolation() {
    let c = conf("[DEFAULT]\nmy_host = node7\nhost = $my_host\n[conductor]\ntopic = ${DEFAULT.my_host}-topic\n").unwrap();
    assert_eq!(c.default.host.as_deref(), Some("node7"));
    assert_eq!(c.conductor.topic, "node7-topic");
    let c = conf("[DEFAULT]\nhost = a$$b\\$c$unknown\n").unwrap();
    assert_eq!(c.default.host.as_deref(), Some("a$b$c$unknown"));
}

#[test]
fn the_sample_lists_every_option_with_help_and_the_code_s_default() {
    let s = sample();
    for (group, keys) in KNOWN {
        assert!(s.contains(&format!("\n[{group}]\n")), "{group}");
        for k in keys.iter() {
            assert!(s.contains(&format!("\n#{k} = ")), "{group}.{k} missing");
            assert!(help::help(group, k).is_some(), "{group}.{k} has no help");
        }
    }
    for (g, k, _) in help::HELP {
        assert!(is_known(g, k), "help for an option not read: {g}.{k}");
    }
    assert!(!s.contains("(undocumented)"));
    // Defaults as the code reads them.
    for line in [
        "#rpc_response_timeout = 60",
        "#lease_duration = 15",
        "#ha_leases = true",
        "#os_distros = ubuntu,rockylinux",
        "#namespace_prefix = magnum-",
        "#transport_url = <None>",
    ] {
        assert!(s.contains(line), "{line}");
    }
    assert!(s.contains("# Seconds a Lease lives without renewal"));
    assert!(s.contains("(integer value)\n#lease_duration = 15"));
}

#[test]
fn interpolation_that_explodes_is_bounded() {
    // Each level references the next eight times: 8^8 copies of "x"
    // (16 MiB) unbounded. Found by the oslo_config fuzz target.
    let mut text = String::from("[DEFAULT]\n");
    for l in 0..8 {
        text.push_str(&format!("v{l} = {}\n", format!("$v{} ", l + 1).repeat(8)));
    }
    text.push_str("v8 = xx\nhost = $v0\n");
    let c = conf(&text).unwrap();
    let host = c.default.host.unwrap_or_default();
    assert!(host.len() <= MAX_INTERPOLATED + 64, "{} bytes", host.len());
    assert!(host.contains("$v"), "the rest is left as written");
}

#[test]
fn metrics_listen() {
    assert_eq!(
        conf("[metrics]\nlisten = 0.0.0.0:9999\n")
            .unwrap()
            .metrics
            .listen
            .unwrap()
            .port(),
        9999
    );
    assert!(
        conf("[metrics]\nlisten =\n")
            .unwrap()
            .metrics
            .listen
            .is_none()
    );
}
