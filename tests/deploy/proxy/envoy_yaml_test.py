#!/usr/bin/python3
"""Checks deploy/proxy/envoy.yaml without Envoy (none is available where the tests run).

It must be well-formed YAML (Debian's python3-yaml) and keep the settings task affinity depends on:
a RING_HASH cluster, every route to it hashing on the x-manyshot-task header, per-task calls
without the header and ListTasks (one replica's tasks only) refused, and nothing that would send a task's calls to another replica: no
retries, no health checks, no outlier detection. v3 typed configs only; route timeouts off (the
client's gRPC deadline bounds a call).

    /usr/bin/python3 tests/deploy/proxy/envoy_yaml_test.py deploy/proxy/envoy.yaml
"""

import sys

import yaml

HEADER = "x-manyshot-task"
CLUSTER = "manyshot_replicas"


def walk(node, path=""):
    """Every (path, key, value) below node."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


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
        check(key not in ("retry_policy", "health_checks", "outlier_detection", "retry_on"),
              f"{where}: {key} would move a task's calls to another replica")

    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    check(CLUSTER in clusters, f"no cluster {CLUSTER}")
    cluster = clusters.get(CLUSTER, {})
    check(cluster.get("lb_policy") == "RING_HASH", "the replicas' cluster must use RING_HASH")
    hashing = cluster.get("common_lb_config", {}).get("consistent_hashing_lb_config", {})
    check(hashing.get("use_hostname_for_hashing") is True,
          "the ring must be built from stable host names, not pod IPs")
    endpoints = [e for group in cluster.get("load_assignment", {}).get("endpoints", [])
                 for e in group.get("lb_endpoints", [])]
    check(len(endpoints) >= 2, "list the replicas as separate endpoints")

    listeners = config["static_resources"]["listeners"]
    managers = [f["typed_config"] for listener in listeners
                for chain in listener["filter_chains"] for f in chain["filters"]
                if f["name"] == "envoy.filters.network.http_connection_manager"]
    check(len(managers) == 1, "one HTTP connection manager")
    routes = [route for manager in managers
              for host in manager["route_config"]["virtual_hosts"] for route in host["routes"]]
    refused = False
    for i, route in enumerate(routes):
        action = route.get("route")
        if action is not None:
            check(action.get("cluster") == CLUSTER, f"route {i}: goes to {action.get('cluster')}")
            headers = [h.get("header", {}).get("header_name") for h in action.get("hash_policy", [])]
            check(headers == [HEADER], f"route {i}: must hash on {HEADER} only, not {headers}")
            check(action.get("timeout") == "0s", f"route {i}: the route timeout must be off (0s)")
        elif "direct_response" in route:
            matchers = route["match"].get("headers", [])
            refused = refused or (
                route["match"].get("prefix") == "/manyshot.v1.ManyShot/"
                and any(h.get("name") == HEADER and h.get("present_match") is True
                        and h.get("invert_match") is True for h in matchers))
    check(refused, f"per-task calls without {HEADER} must be refused")
    # The refusal must come before the per-task route that would otherwise match them.
    per_task = [i for i, r in enumerate(routes)
                if r.get("match", {}).get("prefix") == "/manyshot.v1.ManyShot/"]
    check(len(per_task) == 2 and "direct_response" in routes[per_task[0]],
          "the refusal route must precede the per-task route")
    # ListTasks would list one replica's tasks only: refused, before the per-task routes.
    lists = [i for i, r in enumerate(routes)
             if r.get("match", {}).get("path") == "/manyshot.v1.ManyShot/ListTasks"]
    check(len(lists) == 1 and "direct_response" in routes[lists[0]]
          and (not per_task or lists[0] < per_task[0]),
          "ListTasks must be refused before the per-task routes")

    if errors:
        for message in errors:
            print(f"FAIL: {path}: {message}", file=sys.stderr)
        return 1
    print(f"ok: {path}: {len(routes)} routes, {len(endpoints)} endpoints, ring hash on {HEADER}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
