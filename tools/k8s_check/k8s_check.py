#!/usr/bin/python3
"""Offline checker for the Kubernetes manifests of deploy/k8s (no cluster, no network).

Usage:
  k8s_check.py [--kubectl=kubectl] --kustomize DIR [--kustomize DIR2 ...] [options]
  k8s_check.py FILE.yaml [...] [options]        # already rendered manifests
  k8s_check.py --upstream NPM_DIR --kustomize DIR ...   # the npm kubernetes-models validators

Exit status: 0 all good, 1 problems found (each printed as an ERROR line), 2 usage error,
77 a tool it needs is missing (ctest SKIP_RETURN_CODE): kubectl, or for --upstream node and the
npm packages.

Why: kubeconform is not packaged for Debian 12, Debian's kubectl cannot validate without an API
server, and no Debian package ships the Kubernetes OpenAPI/JSON schemas. So this checker brings a
committed, hand-written schema subset (schema/k8s-subset.schema.json) and checks the rest in code.
With --upstream it instead runs the validators that the npm package kubernetes-models (and
@kubernetes-models/prometheus-operator) generate from the upstream Kubernetes OpenAPI spec and the
ServiceMonitor CRD: those know every field's type, enum and required-ness, but accept unknown
fields, which the closed subset below rejects; the two complement each other.

WHAT IT CHECKS (default mode), on the objects `kubectl kustomize` renders:
  Schema (schema/k8s-subset.schema.json; closed objects):
  - the apiVersion/kind pair is one of the few this deployment uses (apps/v1 Deployment and
    StatefulSet, batch/v1 CronJob, v1 Service/ConfigMap/Secret/PersistentVolumeClaim, policy/v1
    PodDisruptionBudget, autoscaling/v2 HorizontalPodAutoscaler, monitoring.coreos.com/v1
    ServiceMonitor); removed or misspelled API versions fail;
  - required fields are present; no field outside the subset (typos fail); field types; enums;
    names (DNS-1123), label keys/values, container port numbers (1-65535) and names (IANA service
    names, at most 15 characters), resource quantities ("4", 12Gi, 500m), Prometheus durations,
    file modes; probes, volumes and valueFrom have exactly one handler/source.
  Cross-references (code below):
  - names are unique per kind; a StatefulSet name is at most 52 characters;
  - a workload's selector matches its pod template's labels; its serviceName names a rendered
    headless Service (clusterIP: None) that selects its pods;
  - every Service selects some rendered pod template and its targetPorts (names or numbers) exist
    as container ports there; Service port names/numbers are unique;
  - the PodDisruptionBudget selects a rendered pod template;
  - the ServiceMonitor selects a rendered Service, and its endpoint ports are named ports of it;
  - every volumeMount names a pod volume or a volumeClaimTemplate; volume names are unique and do
    not clash with claim templates; mount paths are unique; every volume is mounted somewhere;
    a persistentVolumeClaim volume names a rendered claim that every pod can mount at once
    (ReadWriteMany, or ReadOnlyMany mounted read-only);
  - a HorizontalPodAutoscaler scales a rendered Deployment/StatefulSet, minReplicas <=
    maxReplicas, and a Pods metric named manyshot_* is one the server exports (server/*.cc);
  - every ConfigMap referenced (volume, env, envFrom) is rendered and has the keys referenced;
    every Secret referenced is rendered or named by --external-secret (a Secret the operator
    creates by hand, as deploy/k8s/README.md documents); optional: true references may be absent;
  - probe ports (grpc number; tcpSocket/httpGet number or name) are container ports;
  - resources: requests <= limits; extended resources (nvidia.com/gpu) are whole numbers, have a
    limit, and requests equal limits.
  Policy of this deployment (the task's requirements):
  - pod security: runAsNonRoot, a non-zero runAsUser, allowPrivilegeEscalation: false,
    readOnlyRootFilesystem: true with a volume mounted at /tmp, capabilities drop ALL and add
    none, not privileged, seccompProfile RuntimeDefault (or Localhost);
  - every container of a long-running workload (Deployment, StatefulSet) has startup, readiness
    and liveness probes, every container cpu/memory requests, and a PodDisruptionBudget covers
    the pods; a workload whose pods are labelled app.kubernetes.io/component server (or gc) has
    exactly one manyshot-server container; the server's has a ServiceMonitor reaching its
    metrics port and the prometheus.io/scrape annotation; a CronJob's manyshot-server runs --gc
    with --shared_dir on a mounted ReadWriteMany claim; other workloads (the router) get the
    generic checks only;
  - the manyshot-server container's flags (args and every --flagfile, with --flagfile=a,b lists
    and nested flagfiles, later overriding earlier, as absl does): each flagfile path is a key of
    a rendered ConfigMap mounted at that path; every line is blank, a '#' comment or --flag[=value];
    every flag is defined by server/main.cc (--server-flags) with a value of the right type;
    listen/metrics addresses are not loopback and their ports are container ports; the grpc
    probes use the listen port and, with TLS on, no probe is a grpc probe (the kubelet's grpc
    probe is plaintext only); the ServiceMonitor and prometheus.io/port reach the metrics port;
    --shared_dir (when set) is on a writable ReadWriteMany claim; --data_dir is on a writable
    volumeClaimTemplate mount, or with --shared_dir (the local tier is then a cache) on an emptyDir
    with a sizeLimit; file flags (tokens, TLS files, model dir) lie under
    a mounted volume; TLS cert and key come together, a client CA or auth tokens need TLS (tokens
    without TLS are loopback-only in this server); --shutdown_grace_seconds is below
    terminationGracePeriodSeconds; --backend=cuda has an nvidia.com/gpu limit and a GPU limit is
    not paired with --backend=cpu; the KV memory budgets fit in the memory limit; a non-zero
    --disk_budget_bytes is set and below the data volume's size; --threads fits the CPU limit.
    Flags left unset take the defaults that server/main.cc declares.

WHAT IT DOES NOT CHECK:
  - fields outside the subset are rejected, not validated: extend the subset when you add one;
  - server-side admission: defaulting, immutability of fields on update, quotas, LimitRanges,
    Pod Security Admission as a cluster enforces it, webhooks, CRD presence in the cluster;
  - that images exist or run, that the node labels/taints/storage classes exist in your cluster,
    that external Secrets exist or hold the right keys, that certificates are valid;
  - kinds other than those listed; anything across namespaces; whether the flag values are
    accepted by the server beyond their type (e.g. --log_level names) -- the server itself does
    that at start-up and exits 2;
  - the Kubernetes version skew of individual fields (the subset follows Kubernetes 1.27+).
"""

import argparse
import ast
import decimal
import json
import os
import re
import shutil
import subprocess
import sys

try:
    import yaml  # Debian python3-yaml
except ImportError:  # pragma: no cover - reported as a skip
    yaml = None

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SCHEMA = os.path.join(HERE, "schema", "k8s-subset.schema.json")
SKIP = 77

# ---------------------------------------------------------------------------------------------
# Formats

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
IANA_SVC_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?=[a-z0-9]))*$")
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
QUANTITY = re.compile(
    r"^(?P<num>[+-]?(\d+(\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
DURATION = re.compile(r"^((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?$")

BINARY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL_SUFFIX = {"n": decimal.Decimal("1e-9"), "u": decimal.Decimal("1e-6"),
                  "m": decimal.Decimal("1e-3"), "k": 10**3, "M": 10**6, "G": 10**9,
                  "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(value):
    """Kubernetes resource.Quantity -> decimal.Decimal, or None when malformed."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return decimal.Decimal(str(value))
    if not isinstance(value, str):
        return None
    m = QUANTITY.match(value)
    if not m:
        return None
    number = decimal.Decimal(m.group("num"))
    suffix = m.group("suffix") or ""
    if suffix in BINARY_SUFFIX:
        return number * BINARY_SUFFIX[suffix]
    if suffix in DECIMAL_SUFFIX:
        return number * decimal.Decimal(DECIMAL_SUFFIX[suffix])
    if suffix:
        return number * (decimal.Decimal(10) ** int(suffix[1:]))
    return number


def qualified_name_ok(key):
    """A label/annotation key: optional DNS-subdomain prefix '/', then a 63-char name."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(QUALIFIED_NAME.match(name))


def format_error(fmt, value):
    """The message when value does not satisfy the named format, else None."""
    if fmt == "dns1123-label":
        ok = isinstance(value, str) and len(value) <= 63 and DNS1123_LABEL.match(value)
        return None if ok else \
            f"{value!r} is not a DNS-1123 label (lower-case alphanumerics and '-', at most 63)"
    if fmt == "dns1123-subdomain":
        ok = isinstance(value, str) and len(value) <= 253 and DNS1123_SUBDOMAIN.match(value)
        return None if ok else f"{value!r} is not a DNS-1123 subdomain"
    if fmt == "qualified-name":
        return None if qualified_name_ok(value) else f"{value!r} is not a valid label/annotation key"
    if fmt == "label-value":
        ok = isinstance(value, str) and len(value) <= 63 and LABEL_VALUE.match(value)
        return None if ok else f"{value!r} is not a valid label value"
    if fmt == "iana-svc-name":
        ok = isinstance(value, str) and len(value) <= 15 and IANA_SVC_NAME.match(value)
        return None if ok else \
            f"{value!r} is not a valid port name (IANA service name, at most 15 characters)"
    if fmt == "port-or-name":
        if isinstance(value, int):
            return None if 1 <= value <= 65535 else f"port {value} is outside 1-65535"
        return format_error("iana-svc-name", value)
    if fmt == "quantity":
        return None if parse_quantity(value) is not None else f"{value!r} is not a resource quantity"
    if fmt == "resource-name":
        ok = isinstance(value, str) and qualified_name_ok(value)
        return None if ok else f"{value!r} is not a resource name"
    if fmt == "config-key":
        ok = isinstance(value, str) and len(value) <= 253 and CONFIG_KEY.match(value)
        return None if ok else f"{value!r} is not a valid ConfigMap/Secret key"
    if fmt == "prometheus-duration":
        ok = isinstance(value, str) and value and DURATION.match(value)
        return None if ok else f"{value!r} is not a Prometheus duration (e.g. 30s, 1m)"
    raise ValueError(f"schema uses unknown format {fmt!r}")


# ---------------------------------------------------------------------------------------------
# The JSON-schema subset

TYPE_CHECKS = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def child(path, key):
    return f"{path}.{key}" if path else key


class Schema:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.doc = json.load(f)
        self.kinds = self.doc["kinds"]

    def resolve(self, schema):
        while "$ref" in schema:
            ref = schema["$ref"]
            if not ref.startswith("#/definitions/"):
                raise ValueError(f"unsupported $ref {ref}")
            schema = self.doc["definitions"][ref[len("#/definitions/"):]]
        return schema

    def validate(self, value, schema, path, out):
        """Appends 'path: message' to out for every violation of schema by value."""
        at = path or "(top level)"
        schema = self.resolve(schema)
        types = schema.get("type")
        if types is not None:
            types = [types] if isinstance(types, str) else types
            if not any(TYPE_CHECKS[t](value) for t in types):
                out.append(f"{at}: expected {' or '.join(types)}, got {type(value).__name__} {value!r}")
                return
        if "enum" in schema and value not in schema["enum"]:
            out.append(f"{at}: {value!r} is not one of {schema['enum']}")
            return
        if "format" in schema:
            message = format_error(schema["format"], value)
            if message:
                out.append(f"{at}: {message}")
        if isinstance(value, str):
            if "pattern" in schema and not re.search(schema["pattern"], value):
                out.append(f"{at}: {value!r} does not match {schema['pattern']}")
            if len(value) < schema.get("minLength", 0):
                out.append(f"{at}: must not be empty")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                out.append(f"{at}: {value} is below the minimum {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                out.append(f"{at}: {value} is above the maximum {schema['maximum']}")
        if isinstance(value, list):
            if len(value) < schema.get("minItems", 0):
                out.append(f"{at}: needs at least {schema['minItems']} item(s)")
            if "items" in schema:
                for i, item in enumerate(value):
                    self.validate(item, schema["items"], f"{path}[{i}]", out)
        if isinstance(value, dict):
            for name in schema.get("required", []):
                if name not in value or value[name] is None:
                    out.append(f"{at}: missing required field {name!r}")
            one_of = schema.get("x-exactly-one-of")
            if one_of is not None:
                present = [k for k in one_of if value.get(k) is not None]
                if len(present) != 1:
                    out.append(f"{at}: needs exactly one of {one_of}, has {present or 'none'}")
            properties = schema.get("properties", {})
            additional = schema.get("additionalProperties", True)
            for key, item in value.items():
                if "propertyNames" in schema:
                    message = format_error(self.resolve(schema["propertyNames"])["format"], key)
                    if message:
                        out.append(f"{at}: key {message}")
                if key in properties:
                    if item is not None:
                        self.validate(item, properties[key], child(path, key), out)
                elif additional is False:
                    out.append(f"{at}: unknown field {key!r} (not in the schema subset; known: "
                               f"{', '.join(sorted(properties))})")
                elif isinstance(additional, dict):
                    self.validate(item, additional, child(path, key), out)


# ---------------------------------------------------------------------------------------------
# manyshot-server flags

# absl's own flags that may appear in a flagfile or on the command line.
ABSL_BUILTIN_FLAGS = ("flagfile", "fromenv", "tryfromenv", "undefok")
FLAG_LINE = re.compile(r"^--([A-Za-z_][A-Za-z0-9_]*)(=(.*))?$")
ABSL_FLAG_DEF = re.compile(r"ABSL_FLAG\(\s*([^,]+?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*,\s*(.*?)\s*,",
                           re.S)


class ServerFlag:
    def __init__(self, ctype, default):
        self.ctype = ctype.replace("std::", "").replace(" ", "")
        self.default = default  # the default as flag text, or None when not a plain literal


def parse_default(text):
    """A C++ default like 8ull << 30, 64 * 1024, "text" or false -> flag text, else None."""
    text = text.strip()
    if re.fullmatch(r'"[^"\\]*"', text):
        return text[1:-1]
    if text in ("true", "false"):
        return text
    expression = re.sub(r"(?<=\d)(ull|ul|ll|u|l)\b", "", text, flags=re.I)
    if re.fullmatch(r"[\d\s*+<()-]+", expression):
        try:
            tree = ast.parse(expression, mode="eval")
        except SyntaxError:
            return None
        allowed = (ast.Expression, ast.BinOp, ast.Constant, ast.LShift, ast.Mult, ast.Add, ast.Sub)
        if all(isinstance(node, allowed) for node in ast.walk(tree)):
            return str(eval(compile(tree, "<default>", "eval")))  # integer arithmetic only
    return None


def load_server_flags(path):
    """{flag name: ServerFlag} from the ABSL_FLAG definitions of server/main.cc, plus absl's own."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    flags = {m.group(2): ServerFlag(m.group(1), parse_default(m.group(3)))
             for m in ABSL_FLAG_DEF.finditer(text)}
    if not flags:
        raise ValueError(f"no ABSL_FLAG definitions found in {path}")
    for name in ABSL_BUILTIN_FLAGS:
        flags[name] = ServerFlag("vector<string>", None)
    return flags


def flag_value_error(ctype, value):
    if ctype in ("int", "int32_t", "int64_t"):
        return None if re.fullmatch(r"[+-]?\d+", value) else "is not an integer"
    if ctype in ("uint32_t", "uint64_t", "unsignedint", "size_t"):
        return None if re.fullmatch(r"\+?\d+", value) else "is not a non-negative integer"
    if ctype == "bool":
        ok = value.lower() in ("true", "false", "t", "f", "yes", "no", "y", "n", "1", "0")
        return None if ok else "is not a boolean"
    if ctype in ("double", "float"):
        try:
            float(value)
            return None
        except ValueError:
            return "is not a number"
    return None


def split_host_port(address):
    host, _, port = address.rpartition(":")
    return host.strip("[]"), port


# ---------------------------------------------------------------------------------------------
# Helpers over rendered objects


def obj_id(obj):
    meta = obj.get("metadata")
    return f"{obj.get('kind', '?')}/{meta.get('name', '?') if isinstance(meta, dict) else '?'}"


def selector_matches(selector, labels):
    """A LabelSelector (dict with matchLabels/matchExpressions) against a label map."""
    if not isinstance(selector, dict) or not selector:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def service_selects(selector, labels):
    return bool(selector) and all((labels or {}).get(k) == v for k, v in selector.items())


LONG_RUNNING = ("StatefulSet", "Deployment")


def workloads(objects):
    """(object, pod template) for every rendered workload."""
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj.get("kind") in LONG_RUNNING:
            yield obj, spec.get("template") or {}
        elif obj.get("kind") == "CronJob":
            yield obj, ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}


def pod_component(template):
    """The app.kubernetes.io/component label of a pod template ("server", "gc", "router", ...)."""
    return ((template.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")


def container_ports(pod_spec):
    ports = []
    for container in pod_spec.get("containers") or []:
        for port in container.get("ports") or []:
            ports.append(port)
    return ports


def resolve_port(ref, ports):
    """A number or name against container ports -> the port number, or None."""
    for port in ports:
        if (isinstance(ref, int) and port.get("containerPort") == ref) or \
                (isinstance(ref, str) and port.get("name") == ref):
            return port.get("containerPort")
    return None


class Checker:
    def __init__(self, schema, external_secrets=(), external_configmaps=(), server_flags=None,
                 server_flags_path=None):
        self.schema = schema
        self.server_flags_path = server_flags_path
        self.external_secrets = set(external_secrets)
        self.external_configmaps = set(external_configmaps)
        self.server_flags = server_flags
        self.errors = []

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")

    # -- entry point ------------------------------------------------------------------------

    def check(self, objects):
        """Every problem found in objects (rendered manifests), as 'where: message' lines."""
        self.by_kind = {}
        for index, obj in enumerate(objects):
            if not isinstance(obj, dict):
                self.error(f"document {index}", f"expected a mapping, got {type(obj).__name__}")
                continue
            self.check_schema(obj)
            kind = obj.get("kind")
            self.by_kind.setdefault(kind if isinstance(kind, str) else repr(kind), []).append(obj)
        self.objects = [o for o in objects if isinstance(o, dict)]
        schema_errors = len(self.errors)
        try:
            self.check_references()
        except (AttributeError, TypeError, KeyError, ValueError) as e:
            # The code below trusts the types the schema guarantees; with schema errors it may
            # trip over a malformed field: say so instead of a traceback.
            if not schema_errors:
                raise
            self.error("(checker)", f"cross-reference checks stopped ({type(e).__name__}: {e}); "
                                    "fix the schema errors above first")
        return self.errors

    def check_references(self):
        self.check_unique_names()
        for obj, template in workloads(self.objects):
            self.check_workload(obj, template)
        for svc in self.by_kind.get("Service", []):
            self.check_service(svc)
        for pdb in self.by_kind.get("PodDisruptionBudget", []):
            self.check_pdb(pdb)
        for hpa in self.by_kind.get("HorizontalPodAutoscaler", []):
            self.check_hpa(hpa)
        for sm in self.by_kind.get("ServiceMonitor", []):
            self.check_service_monitor(sm)

    # -- schema -----------------------------------------------------------------------------

    def check_schema(self, obj):
        pair = f"{obj.get('apiVersion')} {obj.get('kind')}"
        schema = self.schema.kinds.get(pair)
        if schema is None:
            self.error(obj_id(obj), f"apiVersion/kind {pair!r} is not one this deployment uses "
                                    f"(known: {', '.join(sorted(self.schema.kinds))})")
            return
        out = []
        self.schema.validate(obj, schema, "", out)
        for message in out:
            self.error(obj_id(obj), message)

    def check_unique_names(self):
        seen = set()
        for obj in self.objects:
            key = (obj.get("kind"), (obj.get("metadata") or {}).get("name"))
            if key in seen:
                self.error(obj_id(obj), "defined twice")
            seen.add(key)

    def find(self, kind, name):
        for obj in self.by_kind.get(kind, []):
            if (obj.get("metadata") or {}).get("name") == name:
                return obj
        return None

    # -- workloads --------------------------------------------------------------------------

    def check_workload(self, sts, template):
        where = obj_id(sts)
        spec = sts.get("spec") or {}
        name = (sts.get("metadata") or {}).get("name") or ""
        if sts.get("kind") == "StatefulSet" and len(name) > 52:
            self.error(where, "StatefulSet names longer than 52 characters break the "
                              "controller-revision-hash label")
        labels = (template.get("metadata") or {}).get("labels") or {}
        selector = spec.get("selector") or {}
        if sts.get("kind") in LONG_RUNNING and not selector_matches(selector, labels):
            self.error(where, f"spec.selector {selector} does not match the pod template labels {labels}")
        service_name = spec.get("serviceName")
        if service_name:
            svc = self.find("Service", service_name)
            if svc is None:
                self.error(where, f"spec.serviceName {service_name!r} names no rendered Service")
            else:
                svc_spec = svc.get("spec") or {}
                if svc_spec.get("clusterIP") != "None":
                    self.error(where, f"spec.serviceName {service_name!r} is not a headless Service "
                                      "(clusterIP: None), so the replicas get no per-pod DNS names")
                if not service_selects(svc_spec.get("selector"), labels):
                    self.error(where, f"the governing Service {service_name!r} does not select the pods")
        pod = template.get("spec") or {}
        self.check_pod(where, sts, template, pod)

    def check_pod(self, where, sts, template, pod):
        claims = [((c.get("metadata") or {}).get("name")) for c in
                  ((sts.get("spec") or {}).get("volumeClaimTemplates") or [])]
        volumes = pod.get("volumes") or []
        names = [v.get("name") for v in volumes]
        for n in set(names):
            if names.count(n) > 1:
                self.error(where, f"volume {n!r} is defined twice")
            if n in claims:
                self.error(where, f"volume {n!r} clashes with the volumeClaimTemplate of that name")
        known = set(names) | set(claims)
        mounted = set()
        containers = (pod.get("initContainers") or []) + (pod.get("containers") or [])
        for container in containers:
            cwhere = f"{where} container {container.get('name')!r}"
            paths = []
            for mount in container.get("volumeMounts") or []:
                if mount.get("name") not in known:
                    self.error(cwhere, f"volumeMount {mount.get('name')!r} (at {mount.get('mountPath')}) "
                                       "names no volume and no volumeClaimTemplate")
                mounted.add(mount.get("name"))
                paths.append(mount.get("mountPath"))
            for p in set(paths):
                if paths.count(p) > 1:
                    self.error(cwhere, f"two volumes are mounted at {p}")
        for n in known - mounted:
            self.error(where, f"volume or claim {n!r} is mounted by no container")
        for volume in volumes:
            if volume.get("configMap"):
                ref = volume["configMap"]
                keys = [i.get("key") for i in ref.get("items") or []]
                self.check_ref(where, "ConfigMap", ref.get("name"), keys, ref.get("optional"),
                               f"volume {volume.get('name')!r}")
            if volume.get("secret"):
                ref = volume["secret"]
                keys = [i.get("key") for i in ref.get("items") or []]
                self.check_ref(where, "Secret", ref.get("secretName"), keys, ref.get("optional"),
                               f"volume {volume.get('name')!r}")
            if volume.get("persistentVolumeClaim"):
                self.check_shared_claim(where, volume, containers)
        self.check_pod_security(where, pod, containers)
        long_running = sts.get("kind") in LONG_RUNNING
        for container in pod.get("containers") or []:
            cwhere = f"{where} container {container.get('name')!r}"
            self.check_container_refs(cwhere, container)
            if long_running:
                self.check_probes(cwhere, container)
            self.check_resources(cwhere, container)
        self.check_ports(where, pod)
        servers = [c for c in pod.get("containers") or []
                   if (c.get("command") or [""])[0].rsplit("/", 1)[-1] == "manyshot-server"]
        if pod_component(template) in ("server", "gc") and len(servers) != 1:
            self.error(where, f"needs exactly one container with command [manyshot-server, ...], "
                              f"has {len(servers)}")
        for container in servers:
            cwhere = f"{where} container {container.get('name')!r}"
            if long_running:
                self.check_manyshot(cwhere, sts, pod, container)
            else:
                self.check_manyshot_gc(cwhere, pod, container)
        labels = (template.get("metadata") or {}).get("labels") or {}
        if long_running and not any(selector_matches((p.get("spec") or {}).get("selector"), labels)
                                    for p in self.by_kind.get("PodDisruptionBudget", [])):
            self.error(where, "no PodDisruptionBudget covers the pods")

    def check_shared_claim(self, where, volume, containers):
        """A claim that every pod of the workload mounts: rendered, and mountable by all at once."""
        ref = volume["persistentVolumeClaim"]
        claim = self.find("PersistentVolumeClaim", ref.get("claimName"))
        what = f"volume {volume.get('name')!r}"
        if claim is None:
            self.error(where, f"{what} references PersistentVolumeClaim {ref.get('claimName')!r}, "
                              "which is not rendered")
            return
        modes = (claim.get("spec") or {}).get("accessModes") or []
        read_only = ref.get("readOnly") or all(
            m.get("readOnly") for c in containers for m in c.get("volumeMounts") or []
            if m.get("name") == volume.get("name"))
        if "ReadWriteMany" not in modes and not (read_only and "ReadOnlyMany" in modes):
            self.error(where, f"{what}: claim {ref.get('claimName')!r} is {modes}, but every pod "
                              "mounts it: a shared claim must be ReadWriteMany")

    def check_hpa(self, hpa):
        where = obj_id(hpa)
        spec = hpa.get("spec") or {}
        target = spec.get("scaleTargetRef") or {}
        if target.get("kind") not in LONG_RUNNING or self.find(target.get("kind"),
                                                               target.get("name")) is None:
            self.error(where, f"scaleTargetRef {target.get('kind')}/{target.get('name')} names no "
                              "rendered Deployment or StatefulSet")
        if spec.get("minReplicas", 1) > spec.get("maxReplicas", 1):
            self.error(where, "minReplicas is above maxReplicas")
        exported = self.exported_metrics()
        for metric in spec.get("metrics") or []:
            name = ((metric.get("pods") or {}).get("metric") or {}).get("name") or ""
            if metric.get("type") == "Pods" and name.startswith("manyshot_") and \
                    exported is not None and name not in exported:
                self.error(where, f"metric {name!r} is not one manyshot-server exports")

    def exported_metrics(self):
        """Metric names registered in server/*.cc (next to --server-flags), or None."""
        if not self.server_flags_path:
            return None
        names = set()
        server_dir = os.path.dirname(self.server_flags_path)
        for name in os.listdir(server_dir):
            if name.endswith(".cc"):
                with open(os.path.join(server_dir, name), encoding="utf-8") as f:
                    names.update(re.findall(r'\.Name\("(manyshot_[a-z0-9_]+)"\)', f.read()))
        return names

    def check_ref(self, where, kind, name, keys, optional, what):
        if name is None:
            return
        obj = self.find(kind, name)
        if obj is None:
            external = self.external_secrets if kind == "Secret" else self.external_configmaps
            if name in external or optional:
                return
            self.error(where, f"{what} references {kind} {name!r}, which is neither rendered nor "
                              f"declared external (--external-{kind.lower()})")
            return
        data = dict(obj.get("data") or {})
        data.update(obj.get("stringData") or {})
        for key in keys:
            if key is not None and key not in data:
                self.error(where, f"{what} uses key {key!r}, which {kind} {name!r} does not have")

    def check_container_refs(self, where, container):
        for env in container.get("env") or []:
            source = env.get("valueFrom") or {}
            if source.get("configMapKeyRef"):
                r = source["configMapKeyRef"]
                self.check_ref(where, "ConfigMap", r.get("name"), [r.get("key")], r.get("optional"),
                               f"env {env.get('name')!r}")
            if source.get("secretKeyRef"):
                r = source["secretKeyRef"]
                self.check_ref(where, "Secret", r.get("name"), [r.get("key")], r.get("optional"),
                               f"env {env.get('name')!r}")
        for env_from in container.get("envFrom") or []:
            if env_from.get("configMapRef"):
                r = env_from["configMapRef"]
                self.check_ref(where, "ConfigMap", r.get("name"), [], r.get("optional"), "envFrom")
            if env_from.get("secretRef"):
                r = env_from["secretRef"]
                self.check_ref(where, "Secret", r.get("name"), [], r.get("optional"), "envFrom")

    def check_ports(self, where, pod):
        ports = container_ports(pod)
        for field in ("name", "containerPort"):
            values = [p.get(field) for p in ports if p.get(field) is not None]
            for v in set(values):
                if values.count(v) > 1:
                    self.error(where, f"container port {field} {v!r} is used twice in the pod")

    def check_probes(self, where, container):
        ports = container.get("ports") or []
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container.get(kind)
            if not probe:
                self.error(where, f"has no {kind}")
                continue
            if probe.get("grpc"):
                port = probe["grpc"].get("port")
                if resolve_port(port, ports) is None:
                    self.error(where, f"{kind}.grpc.port {port} is not a port of this container")
            for handler in ("tcpSocket", "httpGet"):
                if probe.get(handler):
                    port = probe[handler].get("port")
                    if resolve_port(port, ports) is None:
                        self.error(where, f"{kind}.{handler}.port {port!r} is not a port of this container")

    def check_resources(self, where, container):
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for name in ("cpu", "memory"):
            if name not in requests:
                self.error(where, f"resources: no {name} request (the scheduler needs one)")
        for name in set(requests) | set(limits):
            request, limit = parse_quantity(requests.get(name)), parse_quantity(limits.get(name))
            extended = "/" in name and not name.startswith("kubernetes.io/")
            if request is not None and limit is not None and request > limit:
                self.error(where, f"resources: request {name}={requests[name]} exceeds the limit "
                                  f"{limits[name]}")
            if extended:
                for value, raw in ((request, requests.get(name)), (limit, limits.get(name))):
                    if value is not None and value != value.to_integral_value():
                        self.error(where, f"resources: {name}={raw} must be a whole number")
                if limit is None:
                    self.error(where, f"resources: extended resource {name} needs a limit")
                elif request is not None and request != limit:
                    self.error(where, f"resources: {name} request and limit must be equal")

    def check_pod_security(self, where, pod, containers):
        psc = pod.get("securityContext") or {}
        for container in containers:
            cwhere = f"{where} container {container.get('name')!r}"
            sc = container.get("securityContext") or {}

            def effective(field):
                return sc[field] if field in sc else psc.get(field)
            if effective("runAsNonRoot") is not True:
                self.error(cwhere, "securityContext: runAsNonRoot must be true")
            user = effective("runAsUser")
            if user is None or user == 0:
                self.error(cwhere, "securityContext: runAsUser must be set to a non-zero UID")
            if sc.get("allowPrivilegeEscalation") is not False:
                self.error(cwhere, "securityContext: allowPrivilegeEscalation must be false")
            if sc.get("privileged"):
                self.error(cwhere, "securityContext: privileged must not be true")
            if sc.get("readOnlyRootFilesystem") is not True:
                self.error(cwhere, "securityContext: readOnlyRootFilesystem must be true")
            elif "/tmp" not in [m.get("mountPath") for m in container.get("volumeMounts") or []]:
                self.error(cwhere, "readOnlyRootFilesystem needs a writable volume (emptyDir) at /tmp")
            caps = sc.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []):
                self.error(cwhere, "securityContext: capabilities.drop must contain ALL")
            if caps.get("add"):
                self.error(cwhere, f"securityContext: adds capabilities {caps['add']}")
            seccomp = (effective("seccompProfile") or {}).get("type")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                self.error(cwhere, "securityContext: seccompProfile.type must be RuntimeDefault")

    # -- Services, PDB, ServiceMonitor ------------------------------------------------------

    def pods_selected(self, match):
        return [(w, t) for w, t in workloads(self.objects)
                if match(((t.get("metadata") or {}).get("labels")) or {})]

    def check_service(self, svc):
        where = obj_id(svc)
        spec = svc.get("spec") or {}
        selector = spec.get("selector") or {}
        selected = self.pods_selected(lambda labels: service_selects(selector, labels))
        if not selected:
            self.error(where, f"selector {selector} selects no rendered pod template")
        ports = spec.get("ports") or []
        for field in ("name", "port"):
            values = [p.get(field) for p in ports if p.get(field) is not None]
            for v in set(values):
                if values.count(v) > 1:
                    self.error(where, f"port {field} {v!r} is used twice")
        if len(ports) > 1 and any(not p.get("name") for p in ports):
            self.error(where, "every port needs a name when there are several")
        for port in ports:
            target = port.get("targetPort", port.get("port"))
            for _, template in selected:
                if resolve_port(target, container_ports(template.get("spec") or {})) is None:
                    self.error(where, f"port {port.get('name') or port.get('port')}: targetPort "
                                      f"{target!r} is not a container port of the selected pods")

    def check_pdb(self, pdb):
        selector = (pdb.get("spec") or {}).get("selector") or {}
        if not self.pods_selected(lambda labels: selector_matches(selector, labels)):
            self.error(obj_id(pdb), f"selector {selector} selects no rendered pod template")

    def check_service_monitor(self, sm):
        where = obj_id(sm)
        spec = sm.get("spec") or {}
        selector = spec.get("selector") or {}
        services = [s for s in self.by_kind.get("Service", [])
                    if selector_matches(selector, (s.get("metadata") or {}).get("labels"))]
        if not services:
            self.error(where, f"selector {selector} selects no rendered Service")
        for endpoint in spec.get("endpoints") or []:
            port = endpoint.get("port")
            for svc in services:
                names = [p.get("name") for p in (svc.get("spec") or {}).get("ports") or []]
                if port not in names:
                    self.error(where, f"endpoint port {port!r} is not a named port of {obj_id(svc)} "
                                      f"(has {names})")

    # -- manyshot-server ------------------------------------------------------------------

    def mount_for(self, container, path):
        """(mount, relative path) of the deepest volumeMount holding path, or (None, None)."""
        best = (None, None)
        for mount in container.get("volumeMounts") or []:
            root = (mount.get("mountPath") or "").rstrip("/")
            if path == root or path.startswith(root + "/"):
                if best[0] is None or len(root) > len(best[0]["mountPath"].rstrip("/")):
                    best = (mount, path[len(root):].lstrip("/"))
        return best

    def read_flagfile(self, where, pod, container, path):
        """The lines of a flagfile that comes from a rendered ConfigMap, or None (error given)."""
        mount, rel = self.mount_for(container, path)
        if mount is None:
            self.error(where, f"--flagfile={path} lies under no volumeMount")
            return None
        volume = next((v for v in pod.get("volumes") or [] if v.get("name") == mount.get("name")), None)
        if volume is None or not volume.get("configMap"):
            self.error(where, f"--flagfile={path} must come from a ConfigMap volume")
            return None
        ref = volume["configMap"]
        key = rel
        if ref.get("items"):
            key = next((i.get("key") for i in ref["items"] if i.get("path") == rel), None)
        cm = self.find("ConfigMap", ref.get("name"))
        if cm is None or key not in (cm.get("data") or {}):
            self.error(where, f"--flagfile={path}: ConfigMap {ref.get('name')!r} has no key {key!r}")
            return None
        return cm["data"][key].splitlines()

    def collect_flags(self, where, pod, container):
        """Effective flags {name: value} as absl would see them, in order."""
        flags = {}
        problems = []

        def apply(arg, origin, depth):
            m = FLAG_LINE.match(arg)
            if not m:
                problems.append(f"{origin}: {arg!r} is not --flag or --flag=value")
                return
            name, value = m.group(1), m.group(3)
            flag = self.server_flags.get(name)
            negated = self.server_flags.get(name[2:]) if name.startswith("no") else None
            if flag is None and negated is not None and negated.ctype == "bool" and value is None:
                name, value, flag = name[2:], "false", negated
            if flag is None:
                problems.append(f"{origin}: unknown flag --{name} (not defined in server/main.cc)")
                return
            if value is None:
                if flag.ctype != "bool":
                    problems.append(f"{origin}: --{name} needs a value")
                    return
                value = "true"
            message = flag_value_error(flag.ctype, value)
            if message:
                problems.append(f"{origin}: --{name}={value} {message} ({flag.ctype})")
                return
            if name == "flagfile":
                if depth > 8:
                    problems.append(f"{origin}: flagfiles nest too deep")
                    return
                for path in value.split(","):
                    lines = self.read_flagfile(where, pod, container, path)
                    for number, line in enumerate(lines or [], 1):
                        line = line.strip()
                        if line and not line.startswith("#"):
                            apply(line, f"{path}:{number}", depth + 1)
                return
            flags[name] = value

        for arg in container.get("args") or []:
            apply(arg, "args", 0)
        for problem in problems:
            self.error(where, problem)
        return flags

    # Flags whose values the policy below reads; a rename in server/main.cc must reach here too.
    POLICY_FLAGS = ("listen_address", "metrics_address", "data_dir", "shutdown_grace_seconds",
                    "backend", "threads", "memory_budget_bytes", "host_memory_budget_bytes",
                    "disk_budget_bytes", "tls_cert_file", "tls_key_file", "tls_client_ca_file",
                    "auth_tokens_file", "model_dir", "port_file", "shared_dir", "gc")

    def check_manyshot_gc(self, where, pod, container):
        """A Job's manyshot-server: --gc with --shared_dir on a writable, shared claim."""
        if self.server_flags is None:
            return
        flags = {name: flag.default for name, flag in self.server_flags.items()}
        flags.update(self.collect_flags(where, pod, container))
        if flags.get("gc") != "true":
            self.error(where, "a Job's manyshot-server must run --gc (serving needs a Deployment)")
        if not flags.get("shared_dir"):
            self.error(where, "--gc needs --shared_dir")
        else:
            self.check_shared_dir(where, flags, pod, container)

    def check_shared_dir(self, where, flags, pod, container):
        path = flags["shared_dir"]
        mount = self.mount_for(container, path)[0] if path.startswith("/") else None
        volume = next((v for v in pod.get("volumes") or []
                       if mount and v.get("name") == mount.get("name")), None)
        if volume is None or not volume.get("persistentVolumeClaim"):
            self.error(where, f"--shared_dir={path} is not on a persistentVolumeClaim volume "
                              "(the replicas must share it)")
        elif mount.get("readOnly") or volume["persistentVolumeClaim"].get("readOnly"):
            self.error(where, f"--shared_dir={path} is mounted read-only")

    def check_manyshot(self, where, sts, pod, container):
        if self.server_flags is None:
            return
        missing = [f for f in self.POLICY_FLAGS if f not in self.server_flags]
        if missing:
            self.error(where, f"server/main.cc no longer defines {missing}: update k8s_check.py")
            return
        flags = {name: flag.default for name, flag in self.server_flags.items()}
        flags.update(self.collect_flags(where, pod, container))
        ports = container.get("ports") or []
        grpc_port = self.address_port(where, flags, "listen_address", ports)
        metrics_port = None
        if flags["metrics_address"]:
            metrics_port = self.address_port(where, flags, "metrics_address", ports)
        self.check_tls_and_probes(where, flags, container, grpc_port)
        if metrics_port is not None:
            self.check_scraping(where, sts, container, metrics_port)
        self.check_storage(where, flags, sts, pod, container)
        self.check_sizing(where, flags, pod, container)

    def address_port(self, where, flags, flag, ports):
        """The port of --flag=host:port if the container exposes it (errors otherwise)."""
        host, port = split_host_port(flags[flag])
        if host in ("localhost", "::1") or host.startswith("127."):
            self.error(where, f"--{flag}={flags[flag]} listens on loopback only: unreachable "
                              "from the Services and probes (use 0.0.0.0)")
        if not port.isdigit() or resolve_port(int(port), ports) is None:
            self.error(where, f"--{flag}={flags[flag]}: port {port} is not a container port")
            return None
        return int(port)

    def check_tls_and_probes(self, where, flags, container, grpc_port):
        tls = bool(flags["tls_cert_file"])
        if bool(flags["tls_cert_file"]) != bool(flags["tls_key_file"]):
            self.error(where, "--tls_cert_file and --tls_key_file must be given together")
        if flags["tls_client_ca_file"] and not tls:
            self.error(where, "--tls_client_ca_file needs --tls_cert_file and --tls_key_file")
        if flags["auth_tokens_file"] and not tls:
            self.error(where, "--auth_tokens_file without TLS accepts loopback peers only (gRPC "
                              "local credentials): no other pod could call; add components/tls")
        ports = container.get("ports") or []
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container.get(kind) or {}
            if probe.get("grpc"):
                port = probe["grpc"].get("port")
                if tls:
                    self.error(where, f"{kind} is a grpc probe but the port serves TLS; the kubelet's "
                                      "grpc probe is plaintext only (use tcpSocket)")
                elif grpc_port is not None and port != grpc_port:
                    self.error(where, f"{kind}.grpc.port {port} is not the --listen_address port "
                                      f"{grpc_port}")
            if probe.get("tcpSocket") and grpc_port is not None and \
                    resolve_port(probe["tcpSocket"].get("port"), ports) != grpc_port:
                self.error(where, f"{kind}.tcpSocket does not probe the gRPC port {grpc_port}")
        if not tls and not (container.get("readinessProbe") or {}).get("grpc"):
            self.error(where, "readinessProbe should be a native grpc probe (grpc.health.v1) on a "
                              "plaintext port")

    def check_scraping(self, where, sts, container, metrics_port):
        template_meta = ((sts.get("spec") or {}).get("template") or {}).get("metadata") or {}
        annotations = template_meta.get("annotations") or {}
        labels = template_meta.get("labels") or {}
        if annotations.get("prometheus.io/scrape") != "true":
            self.error(where, "the pod template lacks the annotation prometheus.io/scrape: \"true\"")
        annotated = annotations.get("prometheus.io/port")
        if annotated is not None and annotated != str(metrics_port):
            self.error(where, f"prometheus.io/port {annotated!r} is not the metrics port {metrics_port}")
        # ServiceMonitor -> the Services it selects that select these pods -> port by name -> target.
        scraped = False
        ports = container.get("ports") or []
        for sm in self.by_kind.get("ServiceMonitor", []):
            spec = sm.get("spec") or {}
            for svc in self.by_kind.get("Service", []):
                svc_spec = svc.get("spec") or {}
                if not selector_matches(spec.get("selector"), (svc.get("metadata") or {}).get("labels")) \
                        or not service_selects(svc_spec.get("selector"), labels):
                    continue
                for endpoint in spec.get("endpoints") or []:
                    for port in svc_spec.get("ports") or []:
                        if port.get("name") != endpoint.get("port"):
                            continue
                        target = resolve_port(port.get("targetPort", port.get("port")), ports)
                        if target is not None and target != metrics_port:
                            self.error(where, f"{obj_id(sm)} scrapes port {target}, not the metrics "
                                              f"port {metrics_port}")
                        scraped = scraped or target == metrics_port
        if not scraped:
            self.error(where, f"no ServiceMonitor scrapes the metrics port {metrics_port}")

    def data_volume_size(self, where, flags, sts, pod, container):
        """The size of the volume under --data_dir, or None (errors given when it is no fit)."""
        claims = {((c.get("metadata") or {}).get("name")): c for c in
                  ((sts.get("spec") or {}).get("volumeClaimTemplates") or [])}
        data_dir = flags["data_dir"] or ""
        mount = self.mount_for(container, data_dir)[0] if data_dir.startswith("/") else None
        claim = claims.get(mount.get("name")) if mount else None
        volume = next((v for v in pod.get("volumes") or []
                       if mount and v.get("name") == mount.get("name")), {})
        if mount is not None and mount.get("readOnly"):
            self.error(where, f"--data_dir={data_dir} is mounted read-only")
            return None
        if claim is not None:
            return parse_quantity(((claim.get("spec") or {}).get("resources") or {})
                                  .get("requests", {}).get("storage"))
        if volume.get("emptyDir") is not None and flags["shared_dir"]:
            # With a shared tier the local tier is a cache: node-local disk will do.
            size = parse_quantity((volume["emptyDir"] or {}).get("sizeLimit"))
            if size is None:
                self.error(where, f"--data_dir={data_dir}: the emptyDir needs a sizeLimit")
            return size
        self.error(where, f"--data_dir={data_dir} is not on a volumeClaimTemplate "
                          "(RocksDB must be on a persistent disk, or be a cache of --shared_dir "
                          "on an emptyDir)")
        return None

    def check_storage(self, where, flags, sts, pod, container):
        if flags["shared_dir"]:
            self.check_shared_dir(where, flags, pod, container)
        storage = self.data_volume_size(where, flags, sts, pod, container)
        disk = int(flags["disk_budget_bytes"])
        if disk == 0:
            self.error(where, "--disk_budget_bytes=0 (unlimited) would let RocksDB fill the "
                              "data volume; set it below the volume's size")
        elif storage is not None and disk >= storage:
            self.error(where, f"--disk_budget_bytes={disk} is not below the data volume's size")
        for flag in ("auth_tokens_file", "tls_cert_file", "tls_key_file", "tls_client_ca_file",
                     "model_dir", "port_file"):
            path = flags[flag]
            if path and (not path.startswith("/") or self.mount_for(container, path)[0] is None):
                self.error(where, f"--{flag}={path} lies under no volumeMount")

    def check_sizing(self, where, flags, pod, container):
        grace = pod.get("terminationGracePeriodSeconds")
        grace = 30 if grace is None else grace  # the Kubernetes default
        if int(flags["shutdown_grace_seconds"]) >= grace:
            self.error(where, f"--shutdown_grace_seconds={flags['shutdown_grace_seconds']} must be "
                              f"below terminationGracePeriodSeconds ({grace}), or the kubelet kills "
                              "the drain")
        limits = (container.get("resources") or {}).get("limits") or {}
        backend = flags["backend"]
        gpus = parse_quantity(limits.get("nvidia.com/gpu", 0))
        if backend == "cuda" and not gpus:
            self.error(where, "--backend=cuda without an nvidia.com/gpu limit")
        if backend == "cpu" and gpus:
            self.error(where, "nvidia.com/gpu limit with --backend=cpu: the GPU would sit idle")
        if "memory" in limits:
            # On CUDA the memory tier is GPU memory, and the pinned host tier counts here instead.
            budget = "host_memory_budget_bytes" if backend == "cuda" else "memory_budget_bytes"
            if decimal.Decimal(flags[budget]) >= parse_quantity(limits["memory"]):
                self.error(where, f"--{budget}={flags[budget]} does not fit in the memory limit "
                                  f"{limits['memory']}")
        if "cpu" in limits and backend != "cuda":
            threads = int(flags["threads"])
            cpu = parse_quantity(limits["cpu"]).to_integral_value(rounding=decimal.ROUND_CEILING)
            if threads == 0 or threads > cpu:
                self.error(where, f"--threads={threads} does not fit the CPU limit {limits['cpu']} "
                                  "(0 means every core of the node, which the limit then throttles)")


# ---------------------------------------------------------------------------------------------
# Loading, rendering, upstream validation, CLI


def load_yaml_documents(text, source):
    if yaml is None:
        raise RuntimeError("python3-yaml is not installed")
    return [d for d in yaml.safe_load_all(text) if d is not None]


def kustomize_too_old(kubectl):
    """A reason to skip when kubectl's built-in kustomize predates components (Debian 12's
    kubernetes-client 1.20 has kustomize v2.0.3, which cannot render these manifests), else None."""
    result = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True,
                            check=False)
    m = re.search(r"Kustomize Version: v?(\d+)", result.stdout)
    if m is None or int(m.group(1)) < 4:
        found = result.stdout.strip().splitlines()[:1] or ["no version"]
        return (f"{kubectl} ({found[0]}) has no kustomize v4 or newer, which these manifests "
                "need (tested: kubectl 1.27, 1.28, 1.32, 1.33)")
    return None


def render_many(kubectl, directories):
    """`kubectl kustomize DIR` for each, run in parallel -> [(text, None) or (None, problem)]."""
    processes = [subprocess.Popen([kubectl, "kustomize", d], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for d in directories]
    results = []
    for directory, process in zip(directories, processes):
        out, err = process.communicate()
        if process.returncode != 0:
            results.append((None, f"kubectl kustomize {directory} failed: {err.strip()}"))
        elif not out.strip():
            results.append((None, f"kubectl kustomize {directory} rendered nothing"))
        else:
            results.append((out, None))
    return results


def render(kubectl, directory):
    """`kubectl kustomize DIR` -> (text, None) or (None, error message)."""
    return render_many(kubectl, [directory])[0]


def upstream_validate(npm_dir, documents, source="input"):
    """Runs upstream_schema.mjs under node on documents (a list of objects, or of (source,
    object) pairs); returns (exit code, output)."""
    node = shutil.which("node")
    if node is None:
        return SKIP, "node is not installed"
    items = [{"source": d[0], "object": d[1]} if isinstance(d, tuple) else
             {"source": source, "object": d} for d in documents]
    script = os.path.join(HERE, "upstream_schema.mjs")
    result = subprocess.run([node, script, npm_dir], input=json.dumps(items),
                            capture_output=True, text=True, check=False)
    return result.returncode, (result.stdout + result.stderr).strip()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="rendered manifest files")
    parser.add_argument("--kustomize", action="append", default=[], metavar="DIR",
                        help="render DIR with `kubectl kustomize` and check the result")
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--schema", default=DEFAULT_SCHEMA)
    parser.add_argument("--server-flags", metavar="MAIN_CC",
                        help="server/main.cc: check manyshot-server flags against its ABSL_FLAGs")
    parser.add_argument("--external-secret", action="append", default=[], metavar="NAME",
                        help="a Secret created outside kustomize (documented in deploy/k8s/README.md)")
    parser.add_argument("--external-configmap", action="append", default=[], metavar="NAME")
    parser.add_argument("--upstream", metavar="NPM_DIR",
                        help="instead: validate with the npm kubernetes-models packages in NPM_DIR")
    args = parser.parse_args(argv)
    if not args.files and not args.kustomize:
        parser.error("give manifest files or --kustomize DIR")
    if yaml is None:
        print("SKIP: python3-yaml is not installed (apt-get install python3-yaml)")
        return SKIP

    inputs = []  # (source, text)
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            inputs.append((path, f.read()))
    if args.kustomize:
        kubectl = shutil.which(args.kubectl)
        if kubectl is None:
            print(f"SKIP: {args.kubectl} is not installed (kubectl kustomize renders the manifests)")
            return SKIP
        reason = kustomize_too_old(kubectl)
        if reason:
            print(f"SKIP: {reason}")
            return SKIP
        for directory, (text, problem) in zip(args.kustomize,
                                              render_many(kubectl, args.kustomize)):
            if problem:
                print(f"ERROR {problem}")
                return 1
            inputs.append((directory, text))

    failures = 0
    upstream_items = []
    for source, text in inputs:
        try:
            documents = load_yaml_documents(text, source)
        except yaml.YAMLError as e:
            print(f"ERROR {source}: not valid YAML: {e}")
            failures += 1
            continue
        if args.upstream:
            upstream_items += [(source, d) for d in documents]
            continue
        server_flags = load_server_flags(args.server_flags) if args.server_flags else None
        checker = Checker(Schema(args.schema), args.external_secret, args.external_configmap,
                          server_flags, args.server_flags)
        errors = checker.check(documents)
        kinds = sorted({obj_id(d).split("/")[0] for d in documents if isinstance(d, dict)})
        for message in errors:
            print(f"ERROR {source}: {message}")
        print(f"{source}: {len(documents)} objects ({', '.join(kinds)}), {len(errors)} problem(s)")
        failures += bool(errors)
    if args.upstream:  # one node process for every render: its start-up dominates
        code, output = upstream_validate(args.upstream, upstream_items)
        if code == SKIP:
            print(f"SKIP: {output}")
            return SKIP
        print(output)
        failures += code != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
