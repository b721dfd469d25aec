"""The identities this project ships for the management cluster
(deploy/kubernetes/*-rbac.yaml), for the tests that run under them (issue
53): applied to a real kube-apiserver, a kubeconfig holding only a token of
the ServiceAccount, and the apiserver's audit of its requests read back.

`MC_RBAC_DROP=[IDENTITY=]GROUP/RESOURCE:VERB` (GROUP empty for the core
group; IDENTITY `magnum-conductor` unless given, or `magnum-capi-proxy`)
applies that identity without that one verb: its test must then fail, the
apiserver refusing a request (`refused`)."""
import collections
import contextlib
import json
import os

import yaml

from conftest import ROOT

DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")


class Identity:
    """One shipped identity: a ServiceAccount in `namespace` and the roles
    bound to it, from `deploy/kubernetes/<name>-rbac.yaml`."""

    def __init__(self, name, namespace="magnum-system"):
        self.name, self.namespace = name, namespace
        self.path = os.path.join(DEPLOY, f"{name}-rbac.yaml")
        self.user = f"system:serviceaccount:{namespace}:{name}"

    def docs(self):
        """The shipped documents, less the verb MC_RBAC_DROP names for this
        identity."""
        docs = list(yaml.safe_load_all(open(self.path)))
        drop = os.environ.get("MC_RBAC_DROP")
        if not drop:
            return docs
        who, _, what = drop.rpartition("=")
        if (who or "magnum-conductor") != self.name:
            return docs
        target, verb = what.rsplit(":", 1)
        group, resource = target.split("/", 1)
        found = False
        for d in docs:
            if d["kind"] not in ("ClusterRole", "Role"):
                continue
            rules = []
            for rule in d["rules"]:
                if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                    found = True
                    rules.append(dict(rule, resources=[r for r in rule["resources"] if r != resource]))
                    rules.append(dict(rule, resources=[resource], verbs=[v for v in rule["verbs"] if v != verb]))
                else:
                    rules.append(rule)
            d["rules"] = [r for r in rules if r["resources"] and r["verbs"]]
        assert found, f"MC_RBAC_DROP={drop}: {self.name} has no such rule"
        return docs

    def apply(self, cp, tmp, docs=None):
        """Apply `docs` (the shipped ones by default) with the control
        plane's administrator."""
        manifest = tmp / f"{self.name}-rbac.json"
        manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                        "items": self.docs() if docs is None else docs}))
        cp.kubectl("apply", "-f", str(manifest))

    def kubeconfig(self, cp, tmp, sa=None):
        """A kubeconfig holding only a token of the ServiceAccount (`sa`, or
        this identity's), as an operator hands it to a host."""
        sa = sa or self.name
        token = cp.kubectl("create", "token", sa, "-n", self.namespace, "--duration=4h").strip()
        path = tmp / f"{sa}.kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "m", "cluster": {
                "server": cp.server, "certificate-authority": os.path.join(cp.dir, "pki", "ca.crt")}}],
            "users": [{"name": sa, "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "m", "user": sa}}]}))
        return str(path)

    def used(self, audit_log):
        return used(audit_log, self.user)


def granted(docs):
    """Every (apiGroup, resource, verb) the roles in `docs` grant."""
    out = set()
    for d in docs:
        if d["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in d["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out.add((g, r, v))
    return out


def used(audit_log, user):
    """(apiGroup, resource[/subresource], verb) -> [codes] of `user`'s
    requests, and the refused ones."""
    seen = collections.defaultdict(list)
    refused = []
    with open(audit_log) as f:
        for line in f:
            e = json.loads(line)
            # A watch is audited when its answer starts (it may never end
            # while the client runs); every other request when complete.
            stage = "ResponseStarted" if e.get("verb") == "watch" else "ResponseComplete"
            if e.get("user", {}).get("username") != user or e.get("stage") != stage:
                continue
            ref = e.get("objectRef")
            code = e.get("responseStatus", {}).get("code")
            if not ref:
                continue  # discovery (non-resource URLs), which every authenticated user may read
            resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            key = (ref.get("apiGroup", ""), resource, e["verb"])
            seen[key].append(code)
            if e["verb"] == "patch" and code == 201:
                # A server-side apply that made the object: the apiserver
                # authorizes it as a create too.
                seen[(key[0], key[1], "create")].append(code)
            if code == 403:
                refused.append((key, ref.get("namespace"), ref.get("name")))
    return seen, refused


def discovered(seen):
    """The rules `seen` used, in a role's YAML shape (what a maintainer
    pastes when a program starts using a new resource)."""
    by = collections.defaultdict(set)
    for (g, r, v) in seen:
        by[(g, r)].add(v)
    return yaml.safe_dump([{"apiGroups": [g], "resources": [r], "verbs": sorted(v)}
                           for (g, r), v in sorted(by.items())], sort_keys=False)


def audit(cp, tmp, users):
    """Restart the control plane's apiserver auditing `users`' requests
    (Metadata level, JSON, blocking: a request is in the log before its
    answer); returns the apiserver's former command line (`unaudit`)."""
    policy = tmp / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": list(users)}, {"level": "None"}]}))
    cp.audit_log = tmp / "audit.log"
    argv = cp.stop_apiserver()
    cp.start_apiserver(argv + [f"--audit-policy-file={policy}", f"--audit-log-path={cp.audit_log}",
                               "--audit-log-format=json", "--audit-log-mode=blocking"])
    return argv


def unaudit(cp, argv):
    """The apiserver as it was before `audit` (a pooled control plane goes
    back to the pool as it came)."""
    cp.stop_apiserver()
    cp.start_apiserver(argv)



DISCOVER = os.environ.get("MC_RBAC_DISCOVER") == "1"


def discovering(identity):
    """The identity's documents with its ServiceAccount bound to
    cluster-admin instead of its roles (MC_RBAC_DISCOVER=1)."""
    return [d for d in identity.docs() if d["kind"] in ("Namespace", "ServiceAccount")] + [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{identity.name}-discover"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "namespace": identity.namespace, "name": identity.name}]}]


# Rules of the conductor's role that test_rbac.py's lifecycle does not use,
# and the module whose paths use them (it asserts so from the audit).
ELSEWHERE = {("cluster.x-k8s.io", "clusters", "get"): "test_adopt_topology.py"}


@contextlib.contextmanager
def conductor_env(line, tmp, audited=False):
    """A control plane of the pool with the conductor's shipped identity
    applied, and a kubeconfig of that identity: (cp, kubeconfig), for
    test_lifecycle.Env(cp=, kubeconfig=). With MC_RBAC_DISCOVER=1 the
    identity is cluster-admin, audited, and the rules it used are printed
    when the block ends (what to add to the role for a module's paths).
    `audited`: the apiserver audits the identity (`cp.audit_log`)."""
    import k8s
    conductor = Identity("magnum-conductor")
    cp = k8s.control_plane(line)
    plain = audit(cp, tmp, [conductor.user]) if DISCOVER or audited else None
    try:
        conductor.apply(cp, tmp, discovering(conductor) if DISCOVER else None)
        yield cp, conductor.kubeconfig(cp, tmp)
        if DISCOVER:
            rules = discovered(used(cp.audit_log, conductor.user)[0])
            (tmp / "rbac-used.yaml").write_text(rules)
            print(f"[rbac] the rules {conductor.name} used ({tmp / 'rbac-used.yaml'}):\n{rules}")
    finally:
        if plain is not None:
            unaudit(cp, plain)
        cp.stop()
