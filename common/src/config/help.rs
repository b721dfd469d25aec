//! One line of help per option this conductor reads (`config-sample`).
//! Options Magnum, oslo.messaging or oslo.db define keep their meaning;
//! the help says what this conductor does with them.

/// (group, option, help). `keystone_authtoken` shares `keystone_auth`'s.
pub const HELP: &[(&str, &str, &str)] = &[
    (
        "DEFAULT",
        "transport_url",
        "The RabbitMQ URL (oslo.messaging syntax; several hosts for failover; query options as oslo.messaging).",
    ),
    (
        "DEFAULT",
        "host",
        "Name of this service in Magnum's magnum_service table and of its server queue.",
    ),
    (
        "DEFAULT",
        "control_exchange",
        "AMQP exchange of the RPC topic (Magnum sets magnum).",
    ),
    (
        "DEFAULT",
        "rpc_response_timeout",
        "Seconds a call this conductor makes waits for an answer.",
    ),
    ("DEFAULT", "debug", "Log at debug level."),
    (
        "DEFAULT",
        "rpc_ping_enabled",
        "Answer oslo.messaging's oslo_rpc_server_ping.",
    ),
    (
        "DEFAULT",
        "executor_thread_pool_size",
        "Calls handled at once; as many casts again (two lanes: casts waiting for a slot never hold up calls).",
    ),
    (
        "DEFAULT",
        "periodic_interval_max",
        "Seconds between magnum_service heartbeats.",
    ),
    (
        "DEFAULT",
        "log_file",
        "Log file (joined to log_dir when relative); reopened on SIGHUP.",
    ),
    (
        "DEFAULT",
        "log_dir",
        "Log directory; alone, logs go to <log_dir>/magnum-conductor.log.",
    ),
    (
        "DEFAULT",
        "use_stderr",
        "Also log to stderr when logging to a file or the journal.",
    ),
    ("DEFAULT", "use_json", "Log one JSON object per line."),
    (
        "DEFAULT",
        "use_journal",
        "Log to the systemd journal (native protocol).",
    ),
    (
        "DEFAULT",
        "default_log_levels",
        "target=LEVEL pairs; names of Python modules match nothing here.",
    ),
    (
        "database",
        "connection",
        "The Magnum database URL (mysql+pymysql://...); its schema belongs to magnum-db-manage.",
    ),
    ("database", "max_pool_size", "Connections kept open."),
    (
        "database",
        "max_overflow",
        "Connections opened beyond max_pool_size under load.",
    ),
    (
        "database",
        "pool_timeout",
        "Seconds to wait for a free connection.",
    ),
    (
        "database",
        "connection_recycle_time",
        "Seconds after which a connection is replaced.",
    ),
    (
        "database",
        "max_retries",
        "Connection attempts at startup (-1: for ever).",
    ),
    (
        "database",
        "retry_interval",
        "Seconds between connection attempts at startup.",
    ),
    (
        "database",
        "db_max_retries",
        "Retries of a statement that met a deadlock.",
    ),
    (
        "database",
        "db_retry_interval",
        "Seconds before the first deadlock retry.",
    ),
    (
        "database",
        "db_inc_retry_interval",
        "Double the wait after each deadlock retry.",
    ),
    (
        "database",
        "db_max_retry_interval",
        "Longest wait between deadlock retries, in seconds.",
    ),
    ("conductor", "topic", "The RPC topic magnum-api sends to."),
    (
        "conductor",
        "legacy_topic",
        "Topic of Python magnum-conductors running the other drivers' clusters: their requests \
         are forwarded there (unset: refused with ClusterDriverNotSupported).",
    ),
    (
        "conductor",
        "max_message_bytes",
        "Largest (decompressed) message body accepted.",
    ),
    (
        "oslo_messaging_rabbit",
        "amqp_durable_queues",
        "Declare durable queues (as the Python conductor does with this option).",
    ),
    (
        "oslo_messaging_rabbit",
        "amqp_auto_delete",
        "Declare auto-delete queues.",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_ha_queues",
        "Declare classic mirrored queues (x-ha-policy).",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_quorum_queue",
        "Declare quorum queues.",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_transient_quorum_queue",
        "Quorum queues for fanout and reply queues too.",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_quorum_delivery_limit",
        "x-delivery-limit of quorum queues (0: none).",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_quorum_max_memory_length",
        "x-max-in-memory-length of quorum queues (0: none).",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_quorum_max_memory_bytes",
        "x-max-in-memory-bytes of quorum queues (0: none).",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_transient_queues_ttl",
        "x-expires (seconds) of fanout and reply queues.",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_stream_fanout",
        "Stream queues for fanout.",
    ),
    (
        "oslo_messaging_rabbit",
        "use_queue_manager",
        "Name queues with the queue manager's hostname:processname scheme.",
    ),
    (
        "oslo_messaging_rabbit",
        "hostname",
        "Host name for use_queue_manager.",
    ),
    (
        "oslo_messaging_rabbit",
        "processname",
        "Process name for use_queue_manager.",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_qos_prefetch_count",
        "Messages delivered ahead (0: no limit).",
    ),
    (
        "oslo_messaging_rabbit",
        "heartbeat_timeout_threshold",
        "AMQP heartbeat timeout in seconds (0: off).",
    ),
    (
        "oslo_messaging_rabbit",
        "heartbeat_rate",
        "Heartbeats per timeout period.",
    ),
    (
        "oslo_messaging_rabbit",
        "kombu_reconnect_delay",
        "Seconds before reconnecting after a connection error.",
    ),
    (
        "oslo_messaging_rabbit",
        "kombu_missing_consumer_retry_timeout",
        "Seconds a reply to a vanished caller is retried.",
    ),
    (
        "oslo_messaging_rabbit",
        "kombu_reconnect_timeout",
        "Seconds one reconnection may take.",
    ),
    (
        "oslo_messaging_rabbit",
        "direct_mandatory_flag",
        "Publish replies with the mandatory flag.",
    ),
    (
        "oslo_messaging_rabbit",
        "enable_cancel_on_failover",
        "Ask the broker to cancel consumers on mirrored-queue failover.",
    ),
    (
        "oslo_messaging_rabbit",
        "kombu_compression",
        "Compression of the messages this conductor sends (gzip, bz2, lzma).",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_login_method",
        "SASL mechanism: AMQPLAIN, PLAIN or EXTERNAL.",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_retry_interval",
        "Seconds before the first reconnection attempt.",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_retry_backoff",
        "Seconds added to each further attempt.",
    ),
    (
        "oslo_messaging_rabbit",
        "rabbit_interval_max",
        "Longest wait between attempts, in seconds.",
    ),
    ("oslo_messaging_rabbit", "ssl", "Connect with TLS."),
    (
        "oslo_messaging_rabbit",
        "ssl_version",
        "TLS version (accepted for compatibility; TLS 1.2 and 1.3 are offered).",
    ),
    (
        "oslo_messaging_rabbit",
        "ssl_key_file",
        "Client private key (PEM).",
    ),
    (
        "oslo_messaging_rabbit",
        "ssl_cert_file",
        "Client certificate (PEM).",
    ),
    (
        "oslo_messaging_rabbit",
        "ssl_ca_file",
        "CA bundle that verifies the broker.",
    ),
    (
        "metrics",
        "listen",
        "Address of /metrics, /healthz and /readyz (unset: not served).",
    ),
    (
        "oslo_messaging_notifications",
        "driver",
        "Notification drivers (messagingv2, messaging, noop; unset: none, as Magnum).",
    ),
    (
        "oslo_messaging_notifications",
        "topics",
        "Topics notifications go to.",
    ),
    (
        "oslo_messaging_notifications",
        "transport_url",
        "Broker for notifications (unset: the RPC broker).",
    ),
    (
        "oslo_messaging_notifications",
        "retry",
        "Attempts to send a notification (-1: for ever).",
    ),
    (
        "certificates",
        "cert_manager_type",
        "Where cluster CAs live: x509keypair (Magnum's database) is supported.",
    ),
    (
        "x509",
        "allow_ca",
        "Let sign_certificate issue CA certificates.",
    ),
    (
        "x509",
        "allowed_extensions",
        "Extensions a signed CSR may keep.",
    ),
    (
        "x509",
        "allowed_key_usage",
        "Key usages a signed CSR may keep.",
    ),
    (
        "x509",
        "term_of_validity",
        "Days signed certificates are valid.",
    ),
    ("x509", "rsa_key_size", "Bits of generated RSA keys."),
    (
        "keystone_auth",
        "auth_url",
        "Keystone for the conductor's own credentials (application credential cleanup, check).",
    ),
    (
        "keystone_auth",
        "username",
        "The conductor's Keystone user. With the `service` role (Cinder's [service_user] service_token_roles) its token vouches for the clean-up's removal of a volume attachment to a server Nova no longer has.",
    ),
    (
        "keystone_auth",
        "user_id",
        "The conductor's Keystone user, by id.",
    ),
    ("keystone_auth", "password", "Its password."),
    (
        "keystone_auth",
        "user_domain_id",
        "The user's domain, by id.",
    ),
    (
        "keystone_auth",
        "user_domain_name",
        "The user's domain, by name.",
    ),
    ("keystone_auth", "project_id", "Project to scope to, by id."),
    (
        "keystone_auth",
        "project_name",
        "Project to scope to, by name.",
    ),
    (
        "keystone_auth",
        "project_domain_id",
        "The project's domain, by id.",
    ),
    (
        "keystone_auth",
        "project_domain_name",
        "The project's domain, by name.",
    ),
    (
        "keystone_auth",
        "system_scope",
        "Scope to the system instead of a project.",
    ),
    (
        "keystone_auth",
        "cafile",
        "CA bundle that verifies Keystone.",
    ),
    (
        "capi",
        "kubeconfig",
        "The management cluster's kubeconfig (unset: KUBECONFIG, then in-cluster; none: cluster operations answer NotSupported).",
    ),
    (
        "capi",
        "namespace_prefix",
        "Namespace per project: <prefix><project_id>.",
    ),
    (
        "capi",
        "api_version",
        "Cluster API line written: auto, v1beta1 or v1beta2.",
    ),
    (
        "capi",
        "calico_chart_repo",
        "Calico chart repository (air-gapped mirrors).",
    ),
    ("capi", "calico_chart_version", "Calico chart version."),
    ("capi", "cilium_chart_repo", "Cilium chart repository."),
    ("capi", "cilium_chart_version", "Cilium chart version."),
    (
        "capi",
        "occm_chart_repo",
        "OpenStack cloud controller manager chart repository.",
    ),
    (
        "capi",
        "occm_chart_version",
        "OpenStack cloud controller manager chart version.",
    ),
    (
        "capi",
        "cinder_csi_chart_repo",
        "Cinder CSI chart repository.",
    ),
    (
        "capi",
        "cinder_csi_chart_version",
        "Cinder CSI chart version.",
    ),
    (
        "capi",
        "metrics_server_chart_repo",
        "metrics-server (label metrics_server_enabled) chart repository.",
    ),
    (
        "capi",
        "metrics_server_chart_version",
        "metrics-server (label metrics_server_enabled) chart version.",
    ),
    (
        "capi",
        "manila_csi_chart_repo",
        "Manila CSI (label manila_csi_enabled) chart repository.",
    ),
    (
        "capi",
        "manila_csi_chart_version",
        "Manila CSI (label manila_csi_enabled) chart version.",
    ),
    (
        "capi",
        "nfs_csi_chart_repo",
        "NFS CSI node plugin Manila CSI forwards to (label manila_csi_enabled) chart repository.",
    ),
    (
        "capi",
        "nfs_csi_chart_version",
        "NFS CSI node plugin Manila CSI forwards to (label manila_csi_enabled) chart version.",
    ),
    (
        "capi",
        "ingress_nginx_chart_repo",
        "ingress-nginx (label ingress_controller=nginx) chart repository.",
    ),
    (
        "capi",
        "ingress_nginx_chart_version",
        "ingress-nginx (label ingress_controller=nginx) chart version.",
    ),
    (
        "capi",
        "monitoring_chart_repo",
        "kube-prometheus-stack (label monitoring_enabled) chart repository.",
    ),
    (
        "capi",
        "monitoring_chart_version",
        "kube-prometheus-stack (label monitoring_enabled) chart version.",
    ),
    (
        "capi",
        "resync_interval",
        "Seconds between full status passes behind the watches.",
    ),
    (
        "capi",
        "credentials_interface",
        "clouds.yaml interface given to clusters.",
    ),
    ("capi", "verify_ca", "clouds.yaml verify given to clusters."),
    (
        "capi",
        "ca_file",
        "CA bundle of the cloud's endpoints, given to clusters.",
    ),
    (
        "capi",
        "static_auth_url",
        "Keystone URL of a shared application credential (test and demo deployments).",
    ),
    ("capi", "region_name", "clouds.yaml region_name."),
    (
        "capi",
        "static_application_credential_id",
        "Shared application credential id (test and demo deployments).",
    ),
    (
        "capi",
        "static_application_credential_secret",
        "Its secret.",
    ),
    (
        "capi",
        "update_timeout",
        "Minutes an update may go without progress before UPDATE_FAILED (0: never).",
    ),
    (
        "capi",
        "cloud_cleanup",
        "Before a cluster's network is deleted, delete what its workload cluster made in OpenStack: \
         OCCM's load balancers, floating IPs and security groups, Cinder CSI's volumes and snapshots \
         (label volumes_policy=delete|keep), found by the cluster's identity only.",
    ),
    (
        "capi",
        "cloud_cleanup_timeout",
        "Seconds that clean-up may wait on OpenStack before the cluster is DELETE_FAILED (its finalizer still holds the network; delete again to retry).",
    ),
    (
        "capi",
        "autoscaler_image",
        "cluster-autoscaler image repository (tag by Kubernetes minor).",
    ),
    (
        "capi",
        "os_distros",
        "Image os_distro values served (the magnum-api driver package reads it too).",
    ),
    (
        "capi",
        "other_drivers",
        "The other magnum.drivers entry points installed beside ours on the magnum-api hosts \
         (k8s_capi_helm_v1, k8s_cluster_api_ubuntu...): decides who owns the clusters of templates \
         without a driver; a tuple several drivers provide is nobody's (left alone).",
    ),
    (
        "capi",
        "ha_leases",
        "Coordinate several conductors through Leases (false: a lone conductor).",
    ),
    (
        "capi",
        "leader_election",
        "How the status leader is chosen: amqp (an exclusive queue on the broker, nothing \
         asked of the management cluster at rest) or lease (a Lease renewed in the management cluster).",
    ),
    (
        "capi",
        "lease_namespace",
        "Namespace of the conductors' Leases (created if missing).",
    ),
    (
        "capi",
        "lease_duration",
        "Seconds a Lease lives without renewal: a dead conductor's work is taken over after this.",
    ),
    (
        "capi",
        "api_proxy",
        "Reach clusters without an API floating IP through magnum-capi-proxy on the network hosts \
         (false: the management cluster routes to tenant networks itself).",
    ),
    (
        "capi",
        "unknown_labels",
        "A label this conductor does not know: warn (ignored, named in the cluster's status_reason) \
         or error (the create fails naming it). docs/labels.md lists every label.",
    ),
];

/// The help of `group`.`name`.
pub fn help(group: &str, name: &str) -> Option<&'static str> {
    let group = if group == "keystone_authtoken" {
        "keystone_auth"
    } else {
        group
    };
    HELP.iter()
        .find(|(g, n, _)| *g == group && *n == name)
        .map(|(_, _, h)| *h)
}
