#!/usr/bin/python3
"""Checks deploy/proxy/envoy.yaml without Envoy (none is available where the tests run).

It must be well-formed YAML (Debian's python3-yaml) and keep the settings a shared-cache cluster
depends on: a RING_HASH cluster with a hash balance factor (bounded loads), every route to it
hashing on the x-manyshot-task header, gRPC health checks that eject a dead replica, and retries
only of calls that never reached a replica. v3 typed configs only; route timeouts off (the
client's gRPC deadline bounds a call).

    /usr/bin/python3 tests/deploy/proxy/envoy_yaml_test.py deploy/proxy/envoy.yaml
"""

import sys

import yaml

HEADER = "x-manyshot-task"
CLUSTER = "manyshot_replicas"
SAFE_RETRIES = {"connect-failure", "refused-stream"}


def walk(node, path=""):
    """Every (path, key, value) below node."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


def check_cluster(cluster, check):
    check(cluster.get("lb_policy") == "RING_HASH", "the replicas' cluster must use RING_HASH")
    hashing = cluster.get("common_lb_config", {}).get("consistent_hashing_lb_config", {})
    factor = hashing.get("hash_balance_factor")
    check(isinstance(factor, int) and factor >= 100,
          f"hash_balance_factor must be set (>= 100) for bounded loads, not {factor}")
    checks = cluster.get("health_checks", [])
    check(len(checks) == 1 and "grpc_health_check" in checks[0],
          "one grpc_health_check must eject a dead replica")
    for health in checks:
        check(health.get("unhealthy_threshold", 0) >= 1 and "interval" in health,
              "the health check needs an interval and an unhealthy threshold")
    endpoints = [e for group in cluster.get("load_assignment", {}).get("endpoints", [])
                 for e in group.get("lb_endpoints", [])]
    check(len(endpoints) >= 1, "the cluster lists no endpoint")
    check(cluster.get("type") == "STRICT_DNS", "STRICT_DNS: one endpoint per pod of the Service")


def check_route(i, action, check):
    check(action.get("cluster") == CLUSTER, f"route {i}: goes to {action.get('cluster')}")
    headers = [h.get("header", {}).get("header_name") for h in action.get("hash_policy", [])]
    check(headers == [HEADER], f"route {i}: must hash on {HEADER} only, not {headers}")
    check(action.get("timeout") == "0s", f"route {i}: the route timeout must be off (0s)")
    retry = action.get("retry_policy")
    if retry is not None:
        causes = set(retry.get("retry_on", "").split(","))
        check(causes <= SAFE_RETRIES,
              f"route {i}: retries only calls that never reached a replica, not {causes}")


def main():
    path = sys.argv[1]
    text = open(path, encoding="utf-8").read()
    errors = []

    def check(condition, message):
        if not condition:
            errors.append(message)

    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        print(f"FAIL: {path} is not valid YAML: {error}", file=sys.stderr)
        return 1
    check("NOT RUN" in text, "the header must say that the tests do not run Envoy")

    for where, key, value in walk(config):
        if key == "@type":
            check(value.startswith("type.googleapis.com/envoy.") and ".v3." in value,
                  f"{where}: not a v3 Envoy type: {value}")

    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    check(CLUSTER in clusters, f"no cluster {CLUSTER}")
    check_cluster(clusters.get(CLUSTER, {}), check)

    listeners = config["static_resources"]["listeners"]
    managers = [f["typed_config"] for listener in listeners
                for chain in listener["filter_chains"] for f in chain["filters"]
                if f["name"] == "envoy.filters.network.http_connection_manager"]
    check(len(managers) == 1, "one HTTP connection manager")
    routes = [route for manager in managers
              for host in manager["route_config"]["virtual_hosts"] for route in host["routes"]]
    check(len(routes) >= 1, "no route")
    for i, route in enumerate(routes):
        # Every replica answers every call (ListTasks included): nothing is refused any more.
        check("direct_response" not in route, f"route {i}: refuses calls a replica would answer")
        if "route" in route:
            check_route(i, route["route"], check)

    if errors:
        for message in errors:
            print(f"FAIL: {path}: {message}", file=sys.stderr)
        return 1
    print(f"ok: {path}: {len(routes)} routes, ring hash on {HEADER} with bounded loads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
