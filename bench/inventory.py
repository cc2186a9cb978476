#!/usr/bin/env python3
"""A pod inventory as `kubectl get pods -A -o json` (or `-o yaml`) prints it,
for `ownerguard serve --pods FILE` benchmarks (bench/inventory.sh, load.sh,
abuse.sh). Deterministic: the same arguments give the same bytes.

    bench/inventory.py --pods N --shape real|names --format json|yaml --out FILE

Shapes:
  real   a Deployment's pod as the API server returns it, managedFields
         left out (kubectl hides them by default): metadata with labels,
         annotations, an ownerReference to its ReplicaSet, a spec with one
         container (ports, env, resources, probe, the service-account
         volume), a status with phase, five conditions and a container
         status. About 3.9 KB per pod in JSON, 2.6 KB in YAML.
  names  metadata.name, namespace and uid only, compact JSON: the
         13 MB file of 150,000 pods the memory goal is measured with
         (about 90 bytes a pod).

Pods spread over 1,000 namespaces (team-0000...), named as ReplicaSets name
them. Pod #0 is always agents/worker-0 with uid
3c5b1f4e-8a0d-4f6e-9b1a-2d7c0e4f5a61, the owner the bench reviews name.
"""

import argparse
import json
import re
import sys

OWNER = ("agents", "worker-0", "3c5b1f4e-8a0d-4f6e-9b1a-2d7c0e4f5a61")
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what ReplicaSets use for suffixes


def uid(i, salt):
    """A canonical version-4 UUID, distinct for each (i, salt)."""
    x = (i * 2654435761 + salt * 40503) & 0xFFFFFFFFFFFFFFFF
    y = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
    return "%08x-%04x-4%03x-%04x-%012x" % (
        (x ^ (i * 0x9E3779B9)) & 0xFFFFFFFF,
        (y >> 16) & 0xFFFF,
        (y >> 32) & 0xFFF,
        0x8000 | ((y >> 44) & 0x3FFF),
        (y ^ (i << 8) ^ salt) & 0xFFFFFFFFFFFF,
    )


def suffix(i, length):
    out = []
    for _ in range(length):
        out.append(ALPHABET[i % len(ALPHABET)])
        i //= len(ALPHABET)
    return "".join(out)


def identity(i):
    """(namespace, app, replicaset hash, pod name, pod uid) of pod i."""
    if i == 0:
        return OWNER[0], "worker", "7d9f8c6b5", OWNER[1], OWNER[2]
    namespace = "team-%04d" % (i % 1000)
    app = ["api", "worker", "indexer", "gateway", "batch-runner"][(i // 1000) % 5]
    # ReplicaSets of 50 replicas, with hashes that look like hashes.
    rs_hash = suffix((i // 50) * 2654435761 % 27**9 + 27**8, 9)
    # 2654435761 is prime to 27: i -> i * it mod 27^5 is one-to-one, so
    # names stay distinct up to 14 million pods.
    name = "%s-%s-%s" % (app, rs_hash, suffix(i * 2654435761 % 27**5, 5))
    return namespace, app, rs_hash, name, uid(i, 1)


def stamp(i, offset=0):
    seconds = (i * 37 + offset) % 86400
    return "2026-11-%02dT%02d:%02d:%02dZ" % (
        1 + i % 28,
        seconds // 3600,
        seconds // 60 % 60,
        seconds % 60,
    )


def names_pod(i):
    namespace, _, _, name, pod_uid = identity(i)
    return {"metadata": {"name": name, "namespace": namespace, "uid": pod_uid}}


def real_pod(i):
    namespace, app, rs_hash, name, pod_uid = identity(i)
    node = "node-%04d" % (i % 1500)
    pod_ip = "10.%d.%d.%d" % (64 + i // 65536 % 64, i // 256 % 256, i % 256)
    host_ip = "172.20.%d.%d" % (i % 1500 // 250, i % 1500 % 250 + 1)
    volume = "kube-api-access-" + suffix(i * 31 + 7, 5)
    image = "registry.example/%s/%s:1.%d.%d" % (namespace, app, i % 7, i % 13)
    created, started = stamp(i), stamp(i, 4)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": stamp(i, -3600),
                "prometheus.io/port": "9090",
                "prometheus.io/scrape": "true",
            },
            "creationTimestamp": created,
            "generateName": "%s-%s-" % (app, rs_hash),
            "labels": {
                "app.kubernetes.io/instance": "%s-%s" % (app, namespace),
                "app.kubernetes.io/name": app,
                "pod-template-hash": rs_hash,
            },
            "name": name,
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": "ReplicaSet",
                    "name": "%s-%s" % (app, rs_hash),
                    "uid": uid(i // 50, 2),
                }
            ],
            "resourceVersion": str(1000000 + i * 3),
            "uid": pod_uid,
        },
        "spec": {
            "containers": [
                {
                    "env": [
                        {"name": "LOG_LEVEL", "value": "info"},
                        {
                            "name": "POD_NAME",
                            "valueFrom": {
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": "metadata.name",
                                }
                            },
                        },
                    ],
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "name": app,
                    "ports": [
                        {"containerPort": 8080, "name": "http", "protocol": "TCP"},
                        {"containerPort": 9090, "name": "metrics", "protocol": "TCP"},
                    ],
                    "readinessProbe": {
                        "failureThreshold": 3,
                        "httpGet": {"path": "/readyz", "port": "http", "scheme": "HTTP"},
                        "periodSeconds": 10,
                        "successThreshold": 1,
                        "timeoutSeconds": 1,
                    },
                    "resources": {
                        "limits": {"memory": "512Mi"},
                        "requests": {"cpu": "100m", "memory": "256Mi"},
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "volumeMounts": [
                        {
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "name": volume,
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "nodeName": node,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": app,
            "serviceAccountName": app,
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
            ],
            "volumes": [
                {
                    "name": volume,
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "expirationSeconds": 3607,
                                    "path": "token",
                                }
                            },
                            {
                                "configMap": {
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                    "name": "kube-root-ca.crt",
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                            "path": "namespace",
                                        }
                                    ]
                                }
                            },
                        ],
                    },
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "lastProbeTime": None,
                    "lastTransitionTime": started,
                    "status": "True",
                    "type": kind,
                }
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                {
                    "containerID": "containerd://%064x" % (i * 0x9E3779B97F4A7C15 % (1 << 256)),
                    "image": image,
                    "imageID": "%s@sha256:%064x"
                    % (image.split(":")[0], (i % 91) * 0x51ED2701F3A5),
                    "lastState": {},
                    "name": app,
                    "ready": True,
                    "restartCount": i % 3,
                    "started": True,
                    "state": {"running": {"startedAt": started}},
                }
            ],
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "phase": "Running",
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "qosClass": "Burstable",
            "startTime": created,
        },
    }


# --- YAML as kubectl (sigs.k8s.io/yaml) prints it: keys sorted, block style,
# list items at their parent key's indentation, strings quoted when plain
# style would read as something else.

PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./@:+-]*$")
RESERVED = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}


def scalar(value):
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if PLAIN.match(value) and value.lower() not in RESERVED and ": " not in value:
        return value
    return json.dumps(value)


def yaml_lines(value, indent, out):
    pad = " " * indent
    if isinstance(value, dict):
        for key in sorted(value):
            item = value[key]
            if isinstance(item, dict) and item:
                out.append("%s%s:" % (pad, key))
                yaml_lines(item, indent + 2, out)
            elif isinstance(item, list) and item:
                out.append("%s%s:" % (pad, key))
                yaml_lines(item, indent, out)
            elif isinstance(item, dict):
                out.append("%s%s: {}" % (pad, key))
            elif isinstance(item, list):
                out.append("%s%s: []" % (pad, key))
            else:
                out.append("%s%s: %s" % (pad, key, scalar(item)))
    else:  # a non-empty list
        for item in value:
            if isinstance(item, dict) and item:
                lines = []
                yaml_lines(item, indent + 2, lines)
                lines[0] = pad + "- " + lines[0][indent + 2 :]
                out.extend(lines)
            else:
                out.append("%s- %s" % (pad, scalar(item)))


def write_json(out, pods, make):
    # kubectl's -o json: four-space indentation, struct order at the top.
    out.write('{\n    "apiVersion": "v1",\n    "items": [\n')
    for i in range(pods):
        text = json.dumps(make(i), indent=4)
        out.write("        " + text.replace("\n", "\n        "))
        out.write(",\n" if i + 1 < pods else "\n")
    out.write('    ],\n    "kind": "List",\n    "metadata": {\n        "resourceVersion": ""\n    }\n}\n')


def write_compact_json(out, pods, make):
    out.write('{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""},"items":[')
    for i in range(pods):
        if i:
            out.write(",")
        out.write(json.dumps(make(i), separators=(",", ":")))
    out.write("]}\n")


def write_yaml(out, pods, make):
    out.write("apiVersion: v1\nitems:\n")
    for i in range(pods):
        lines = []
        yaml_lines(make(i), 2, lines)
        lines[0] = "- " + lines[0][2:]
        out.write("\n".join(lines))
        out.write("\n")
    out.write('kind: List\nmetadata:\n  resourceVersion: ""\n')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=150000)
    parser.add_argument("--shape", choices=["real", "names"], default="real")
    parser.add_argument("--format", choices=["json", "yaml"], default="json")
    parser.add_argument("--out", required=True)
    parser.add_argument("--check", action="store_true",
                        help="parse the file back (PyYAML or json) and compare: slow, for small N")
    args = parser.parse_args()
    make = real_pod if args.shape == "real" else names_pod
    with open(args.out, "w", buffering=1 << 20) as out:
        if args.format == "yaml":
            write_yaml(out, args.pods, make)
        elif args.shape == "names":
            write_compact_json(out, args.pods, make)
        else:
            write_json(out, args.pods, make)
    if args.check:
        with open(args.out) as f:
            if args.format == "yaml":
                import yaml  # only for --check

                parsed = yaml.safe_load(f)
            else:
                parsed = json.load(f)
        items = parsed["items"]
        expected = [make(i) for i in range(args.pods)]
        if items != expected:
            sys.exit("check failed: %s does not parse back to the pods generated" % args.out)
        names = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in items}
        if len(names) != args.pods:
            sys.exit("check failed: %d distinct (namespace, name) of %d" % (len(names), args.pods))
        print("checked: %d pods parse back identical" % args.pods, file=sys.stderr)


if __name__ == "__main__":
    main()
