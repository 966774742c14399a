#!/usr/bin/python3
"""Shows that k8s_check.py fails when it should: broken manifests must be rejected, each with the
expected message, and the unmodified renders must pass (the control).

1. Every file in broken/ goes through the checker's command line, which must exit 1 and print
   each of the file's '# expect: ...' lines.
2. The rendered overlays (cpu, gpu, and cpu + TLS/mTLS/auth components) are mutated one defect at
   a time in memory (a volumeMount without its volume, a misspelled field, a selector that misses
   the pods, a flag the server does not define, a grace period too short, ...); each mutation
   must produce its expected error.
3. With --upstream NPM_DIR and the npm packages installed there, a type error must also fail the
   upstream (kubernetes-models) validation; without them that part is reported as not run.

  k8s_check_selftest.py --repo ROOT [--kubectl kubectl] [--upstream NPM_DIR]
Exit status 0 when every expectation holds, 1 otherwise, 77 when kubectl or python3-yaml is
missing.
"""

import argparse
import copy
import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The validator lives in tools/k8s_check (a tool an operator can run on any render).
CHECKER_DIR = os.path.join(HERE, "..", "..", "..", "tools", "k8s_check")
sys.path.insert(0, CHECKER_DIR)
import k8s_check  # noqa: E402

EXTERNAL_SECRETS = ["manyshot-tls", "manyshot-auth"]


def first(docs, kind):
    return next(d for d in docs if d["kind"] == kind)


def named(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def server(docs):
    return named(docs, "Deployment", "manyshot")


def pod(docs):
    return server(docs)["spec"]["template"]["spec"]


def gc_container(docs):
    return first(docs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]


def container(docs):
    return pod(docs)["containers"][0]


def flags_cm(docs):
    return first(docs, "ConfigMap")["data"]


def add_flag(key, line):
    def mutate(docs):
        flags_cm(docs)[key] += line + "\n"
    return mutate


def set_path(getter, key, value):
    def mutate(docs):
        getter(docs)[key] = value
    return mutate


def remove_volume(name):
    def mutate(docs):
        p = pod(docs)
        p["volumes"] = [v for v in p["volumes"] if v["name"] != name]
    return mutate


def rename_key(getter, old, new):
    def mutate(docs):
        d = getter(docs)
        d[new] = d.pop(old)
    return mutate


def security(key, value):
    return set_path(lambda d: container(d)["securityContext"], key, value)


def resources(section, name, value):
    def mutate(docs):
        container(docs)["resources"].setdefault(section, {})[name] = value
    return mutate


def append(getter, item):
    def mutate(docs):
        getter(docs).append(copy.deepcopy(item))
    return mutate


def drop_tmp(docs):
    c = container(docs)
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["mountPath"] != "/tmp"]
    remove_volume("tmp")(docs)


def duplicate_pdb(docs):
    docs.append(copy.deepcopy(first(docs, "PodDisruptionBudget")))


def grpc_readiness(docs):
    probe = container(docs)["readinessProbe"]
    probe.pop("tcpSocket", None)
    probe["grpc"] = {"port": 50051}


def both_pdb_fields(docs):
    first(docs, "PodDisruptionBudget")["spec"]["minAvailable"] = 1


# (render, description, mutation, expected substring of one error)
MUTATIONS = [
    ("cpu", "volumeMount without its volume", remove_volume("tmp"),
     "volumeMount 'tmp' (at /tmp) names no volume"),
    ("cpu", "misspelled container field", rename_key(container, "readinessProbe", "readinesProbe"),
     "unknown field 'readinesProbe'"),
    ("cpu", "misspelled pod field",
     rename_key(pod, "terminationGracePeriodSeconds", "terminationGracePeriod"),
     "unknown field 'terminationGracePeriod'"),
    ("cpu", "removed PodDisruptionBudget API",
     set_path(lambda d: first(d, "PodDisruptionBudget"), "apiVersion", "policy/v1beta1"),
     "'policy/v1beta1 PodDisruptionBudget' is not one this deployment uses"),
    ("cpu", "Deployment without selector",
     lambda d: server(d)["spec"].pop("selector"),
     "missing required field 'selector'"),
    ("cpu", "selector misses the template labels",
     set_path(lambda d: server(d)["spec"]["template"]["metadata"]["labels"],
              "app.kubernetes.io/name", "worker"),
     "does not match the pod template labels"),
    ("cpu", "shared claim that one node at a time can mount",
     set_path(lambda d: first(d, "PersistentVolumeClaim")["spec"], "accessModes",
              ["ReadWriteOnce"]),
     "a shared claim must be ReadWriteMany"),
    ("cpu", "shared claim not rendered",
     lambda d: d.remove(first(d, "PersistentVolumeClaim")),
     "references PersistentVolumeClaim 'manyshot-shared', which is not rendered"),
    ("cpu", "shared tier mounted read-only",
     lambda d: next(m for m in container(d)["volumeMounts"] if m["name"] == "shared")
     .update(readOnly=True),
     "--shared_dir=/shared is mounted read-only"),
    ("cpu", "shared tier on no claim", add_flag("flags", "--shared_dir=/tmp/shared"),
     "--shared_dir=/tmp/shared is not on a persistentVolumeClaim volume"),
    ("cpu", "GC CronJob that does not collect",
     lambda d: gc_container(d)["args"].remove("--gc"), "a Job's manyshot-server must run --gc"),
    ("cpu", "GC CronJob on the wrong directory",
     lambda d: gc_container(d)["args"].append("--shared_dir=/tmp"),
     "--shared_dir=/tmp is not on a persistentVolumeClaim volume"),
    ("cpu", "router without a PodDisruptionBudget",
     lambda d: d.remove(named(d, "PodDisruptionBudget", "manyshot-router")),
     "Deployment/manyshot-router: no PodDisruptionBudget covers the pods"),
    ("secure-cpu", "HPA scaling nothing rendered",
     lambda d: first(d, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"].update(name="other"),
     "scaleTargetRef Deployment/other names no rendered Deployment"),
    ("secure-cpu", "HPA on a metric the server does not export",
     lambda d: first(d, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]["metric"]
     .update(name="manyshot_queue_depth"),
     "metric 'manyshot_queue_depth' is not one manyshot-server exports"),
    ("cpu", "PDB selector misses the pods",
     set_path(lambda d: first(d, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
              "app.kubernetes.io/name", "manyshoot"),
     "PodDisruptionBudget/manyshot: selector"),
    ("cpu", "PDB with both minAvailable and maxUnavailable", both_pdb_fields,
     "needs exactly one of ['minAvailable', 'maxUnavailable']"),
    ("cpu", "Service targetPort is no container port",
     lambda d: named(d, "Service", "manyshot")["spec"]["ports"][0].update(targetPort="gprc"),
     "targetPort 'gprc' is not a container port"),
    ("cpu", "Service selects nothing",
     set_path(lambda d: named(d, "Service", "manyshot")["spec"]["selector"],
              "app.kubernetes.io/name", "other"),
     "Service/manyshot: selector"),
    ("cpu", "ServiceMonitor endpoint port is not a Service port",
     lambda d: first(d, "ServiceMonitor")["spec"]["endpoints"][0].update(port="metric"),
     "endpoint port 'metric' is not a named port"),
    ("cpu", "ServiceMonitor selects no Service",
     set_path(lambda d: first(d, "ServiceMonitor")["spec"]["selector"]["matchLabels"],
              "manyshot/service", "nope"),
     "selects no rendered Service"),
    ("cpu", "container port out of range",
     lambda d: container(d)["ports"][1].update(containerPort=70000),
     "70000 is above the maximum 65535"),
    ("cpu", "port name too long",
     lambda d: container(d)["ports"][1].update(name="prometheus-metrics"),
     "is not a valid port name"),
    ("cpu", "malformed quantity", resources("limits", "memory", "12GB"),
     "'12GB' is not a resource quantity"),
    ("cpu", "request above limit", resources("requests", "cpu", "8"),
     "request cpu=8 exceeds the limit 4"),
    ("gpu", "fractional GPU", resources("limits", "nvidia.com/gpu", "500m"),
     "nvidia.com/gpu=500m must be a whole number"),
    ("gpu", "GPU request without limit",
     lambda d: container(d)["resources"]["limits"].pop("nvidia.com/gpu"),
     "extended resource nvidia.com/gpu needs a limit"),
    ("cpu", "probe with two handlers",
     lambda d: container(d)["readinessProbe"].update(tcpSocket={"port": "grpc"}),
     "needs exactly one of ['exec', 'httpGet', 'tcpSocket', 'grpc']"),
    ("cpu", "grpc probe on a port the container lacks",
     lambda d: container(d)["livenessProbe"]["grpc"].update(port=50052),
     "livenessProbe.grpc.port 50052 is not a port of this container"),
    ("cpu", "no liveness probe", lambda d: container(d).pop("livenessProbe"),
     "has no livenessProbe"),
    ("cpu", "ConfigMap reference without the kustomize hash",
     lambda d: pod(d)["volumes"][0]["configMap"].update(name="manyshot-flags"),
     "references ConfigMap 'manyshot-flags', which is neither rendered"),
    ("secure-cpu", "Secret neither rendered nor documented external", None,
     "references Secret 'manyshot-auth', which is neither rendered nor declared external"),
    ("cpu", "privilege escalation allowed", security("allowPrivilegeEscalation", True),
     "allowPrivilegeEscalation must be false"),
    ("cpu", "writable root filesystem", security("readOnlyRootFilesystem", False),
     "readOnlyRootFilesystem must be true"),
    ("cpu", "read-only root without /tmp", drop_tmp, "needs a writable volume (emptyDir) at /tmp"),
    ("cpu", "capabilities not dropped", security("capabilities", {"drop": ["NET_RAW"]}),
     "capabilities.drop must contain ALL"),
    ("cpu", "capability added", security("capabilities", {"drop": ["ALL"], "add": ["NET_ADMIN"]}),
     "adds capabilities ['NET_ADMIN']"),
    ("cpu", "runs as root", security("runAsUser", 0), "runAsUser must be set to a non-zero UID"),
    ("cpu", "root allowed", security("runAsNonRoot", False), "runAsNonRoot must be true"),
    ("cpu", "seccomp unconfined", security("seccompProfile", {"type": "Unconfined"}),
     "seccompProfile.type must be RuntimeDefault"),
    ("cpu", "annotation value not a string",
     set_path(lambda d: server(d)["spec"]["template"]["metadata"]["annotations"],
              "prometheus.io/scrape", True),
     "expected string, got bool True"),
    ("cpu", "invalid label value",
     set_path(lambda d: first(d, "PodDisruptionBudget")["metadata"]["labels"], "tier", "a b"),
     "'a b' is not a valid label value"),
    ("cpu", "object defined twice", duplicate_pdb, "PodDisruptionBudget/manyshot: defined twice"),
    ("cpu", "volume nobody mounts", append(lambda d: pod(d)["volumes"],
                                           {"name": "scratch", "emptyDir": {}}),
     "volume or claim 'scratch' is mounted by no container"),
    ("cpu", "two mounts at one path",
     append(lambda d: container(d)["volumeMounts"], {"name": "tmp", "mountPath": "/data"}),
     "two volumes are mounted at /data"),
    ("cpu", "no PodDisruptionBudget",
     lambda d: d.remove(first(d, "PodDisruptionBudget")), "no PodDisruptionBudget covers the pods"),
    ("cpu", "no ServiceMonitor", lambda d: d.remove(first(d, "ServiceMonitor")),
     "no ServiceMonitor scrapes the metrics port 9464"),
    ("cpu", "no scrape annotation",
     lambda d: server(d)["spec"]["template"]["metadata"]["annotations"]
     .pop("prometheus.io/scrape"), "lacks the annotation prometheus.io/scrape"),
    ("cpu", "no memory request",
     lambda d: container(d)["resources"]["requests"].pop("memory"), "no memory request"),
    ("cpu", "server started without its command (flags unchecked)",
     lambda d: container(d).pop("command"),
     "needs exactly one container with command [manyshot-server, ...], has 0"),
    ("cpu", "misspelled server flag", add_flag("flags", "--listen_adress=0.0.0.0:50051"),
     "unknown flag --listen_adress (not defined in server/main.cc)"),
    ("cpu", "flag value of the wrong type", add_flag("cpu.flags", "--threads=four"),
     "--threads=four is not an integer"),
    ("cpu", "flagfile line without --", add_flag("flags", "log_level=debug"),
     "'log_level=debug' is not --flag or --flag=value"),
    ("cpu", "flagfile key missing from the ConfigMap",
     lambda d: container(d)["args"].append("--flagfile=/etc/manyshot/extra.flags"),
     "ConfigMap 'manyshot-flags-"),
    ("cpu", "listening on loopback", add_flag("flags", "--listen_address=127.0.0.1:50051"),
     "listens on loopback only"),
    ("cpu", "metrics port not exposed", add_flag("flags", "--metrics_address=0.0.0.0:9100"),
     "--metrics_address=0.0.0.0:9100: port 9100 is not a container port"),
    ("cpu", "prometheus.io/port is not the metrics port",
     set_path(lambda d: server(d)["spec"]["template"]["metadata"]["annotations"],
              "prometheus.io/port", "9465"),
     "prometheus.io/port '9465' is not the metrics port 9464"),
    ("cpu", "RocksDB on an emptyDir without a shared tier", add_flag("flags", "--shared_dir="),
     "is not on a volumeClaimTemplate (RocksDB must be on a persistent disk"),
    ("cpu", "local tier on an emptyDir without a size limit",
     lambda d: next(v for v in pod(d)["volumes"] if v["name"] == "data").update(emptyDir={}),
     "--data_dir=/data: the emptyDir needs a sizeLimit"),
    ("cpu", "grace period shorter than the drain",
     set_path(pod, "terminationGracePeriodSeconds", 20),
     "--shutdown_grace_seconds=20 must be below terminationGracePeriodSeconds (20)"),
    ("cpu", "auth tokens without TLS", add_flag("flags", "--auth_tokens_file=/etc/manyshot/flags"),
     "--auth_tokens_file without TLS accepts loopback peers only"),
    ("cpu", "TLS key without certificate", add_flag("flags", "--tls_key_file=/etc/manyshot/flags"),
     "--tls_cert_file and --tls_key_file must be given together"),
    ("secure-cpu", "grpc probe on a TLS port", grpc_readiness,
     "readinessProbe is a grpc probe but the port serves TLS"),
    ("secure-cpu", "TLS file outside every mount",
     add_flag("tls.flags", "--tls_cert_file=/etc/tls/tls.crt"),
     "--tls_cert_file=/etc/tls/tls.crt lies under no volumeMount"),
    ("cpu", "CUDA backend without a GPU", add_flag("cpu.flags", "--backend=cuda"),
     "--backend=cuda without an nvidia.com/gpu limit"),
    ("gpu", "GPU requested for the CPU backend", add_flag("gpu.flags", "--backend=cpu"),
     "nvidia.com/gpu limit with --backend=cpu"),
    ("cpu", "KV memory budget above the memory limit",
     add_flag("cpu.flags", "--memory_budget_bytes=17179869184"),
     "--memory_budget_bytes=17179869184 does not fit in the memory limit 12Gi"),
    ("gpu", "pinned host budget above the memory limit",
     add_flag("gpu.flags", "--host_memory_budget_bytes=34359738368"),
     "--host_memory_budget_bytes=34359738368 does not fit in the memory limit 24Gi"),
    ("cpu", "unlimited disk budget", add_flag("flags", "--disk_budget_bytes=0"),
     "--disk_budget_bytes=0 (unlimited) would let RocksDB fill the data volume"),
    ("cpu", "disk budget above the local volume",
     add_flag("flags", "--disk_budget_bytes=107374182400"),
     "--disk_budget_bytes=107374182400 is not below the data volume's size"),
    ("cpu", "threads above the CPU limit", add_flag("cpu.flags", "--threads=0"),
     "--threads=0 does not fit the CPU limit 4"),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--upstream", metavar="NPM_DIR")
    args = parser.parse_args()
    if k8s_check.yaml is None:
        print("SKIP: python3-yaml is not installed")
        return k8s_check.SKIP
    kubectl = shutil.which(args.kubectl)
    if kubectl is None:
        print(f"SKIP: {args.kubectl} is not installed")
        return k8s_check.SKIP
    reason = k8s_check.kustomize_too_old(kubectl)
    if reason:
        print(f"SKIP: {reason}")
        return k8s_check.SKIP

    failures = []
    cases = [0]

    def case(ok, message):
        cases[0] += 1
        if not ok:
            failures.append(message)

    # 1. Committed broken manifests through the command line.
    script = os.path.join(CHECKER_DIR, "k8s_check.py")
    main_cc = os.path.join(args.repo, "server", "main.cc")
    for path in sorted(glob.glob(os.path.join(HERE, "broken", "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            expected = [line.split(":", 1)[1].strip() for line in f if line.startswith("# expect:")]
        result = subprocess.run([sys.executable, script, path, "--server-flags", main_cc],
                                capture_output=True, text=True, check=False)
        name = os.path.basename(path)
        missing = [t for t in expected or ["<no '# expect:' line>"] if t not in result.stdout]
        case(result.returncode == 1 and not missing,
             f"{name}: exit {result.returncode} (expected 1), missing {missing}; got:\n"
             f"{result.stdout}{result.stderr}")

    # 2. In-memory mutations of real renders.
    renders = {
        "cpu": os.path.join(args.repo, "deploy", "k8s", "overlays", "cpu"),
        "gpu": os.path.join(args.repo, "deploy", "k8s", "overlays", "gpu"),
        "secure-cpu": os.path.join(HERE, "kustomize", "secure-cpu"),
    }
    docs = {}
    rendered = k8s_check.render_many(kubectl, list(renders.values()))
    for (name, directory), (text, problem) in zip(renders.items(), rendered):
        if problem:
            print(f"FAIL {problem}")
            return 1
        docs[name] = k8s_check.load_yaml_documents(text, directory)
    schema = k8s_check.Schema(k8s_check.DEFAULT_SCHEMA)
    server_flags = k8s_check.load_server_flags(main_cc)

    def run(name, objects, external=EXTERNAL_SECRETS):
        return k8s_check.Checker(schema, external, (), server_flags, main_cc).check(objects)

    for name in renders:  # the control: unmodified renders pass
        errors = run(name, copy.deepcopy(docs[name]))
        case(not errors, f"control {name}: unexpected errors:\n  " + "\n  ".join(errors))
    for render_name, description, mutate, expected in MUTATIONS:
        objects = copy.deepcopy(docs[render_name])
        external = EXTERNAL_SECRETS
        if mutate is None:  # the Secret case: same objects, Secret not declared external
            external = ["manyshot-tls"]
        else:
            mutate(objects)
        errors = run(render_name, objects, external)
        case(any(expected in e for e in errors),
             f"{render_name} / {description}: no error containing {expected!r}; got:\n  "
             + "\n  ".join(errors or ["(no errors)"]))

    # 3. Upstream validators, when installed.
    if args.upstream:
        broken = copy.deepcopy(docs["cpu"])
        container(broken)["readinessProbe"]["grpc"]["port"] = "grpc"
        code, output = k8s_check.upstream_validate(args.upstream, broken)
        if code == k8s_check.SKIP:
            print(f"note: upstream part not run: {output}")
        else:
            case(code == 1 and "readinessProbe/grpc/port must be integer" in output,
                 f"upstream: expected a failure on grpc.port 'grpc', got exit {code}:\n{output}")
            code, output = k8s_check.upstream_validate(args.upstream, docs["cpu"])
            case(code == 0, f"upstream control: exit {code}:\n{output}")

    for failure in failures:
        print(f"FAIL {failure}")
    print(f"k8s_check self-test: {cases[0] - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
