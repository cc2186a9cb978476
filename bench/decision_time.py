#!/usr/bin/env python3
"""How long the longest decisions take: `serve --dev` (examples/pods.yaml)
decides, ROUNDS times each, the two reviews whose work is largest, and the
server's own decision log says how long each took (decode, decide, answer):

  - an UPDATE of a ConfigMap keeping 131,072 Pod references (the most a
    review keeps; an update that keeps its references is judged whatever
    their number), a 32 MB review, past what the API server accepts (3 MB
    a request) or stores (1.5 MiB an object in etcd by default);
  - an UPDATE of a StatefulSet with 10,000 labelled claim templates and a
    pod template of 10,000 labelled ephemeral volumes (the most kept of a
    list), one template changed: every template compared with its old self.

A decision runs on the server's async workers: `?timeout=` bounds the
lookups, not a decision's CPU. A benchmark: it prints, it asserts nothing.

    bench/decision_time.py [BINARY] [ROUNDS]   (BINARY: target/release/ownerguard)
"""
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OWNER = {"ownerguard.io/owner-pod": "worker-0",
         "ownerguard.io/owner-uid": "3c5b1f4e-8a0d-4f6e-9b1a-2d7c0e4f5a61"}


def envelope(group, kind, obj, old):
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
        "namespace": "agents", "operation": "UPDATE", "userInfo": {"username": "alice"},
        "object": obj, "oldObject": old}}).encode()


def references():
    refs = [{"apiVersion": "v1", "kind": "Pod", "name": f"p-{i}", "uid": f"u-{i}",
             "controller": False, "blockOwnerDeletion": False} for i in range(131072)]
    old = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "c", "namespace": "agents", "labels": OWNER, "ownerReferences": refs}}
    new = json.loads(json.dumps(old))
    new["metadata"]["annotations"] = {"edited": "yes"}
    return envelope("", "ConfigMap", new, old)


def templates():
    volumes = [{"name": f"v{i}", "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": dict(OWNER)}}}}
               for i in range(10000)]
    old = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "s", "namespace": "agents", "labels": OWNER, "ownerReferences": [
               {"apiVersion": "v1", "kind": "Pod", "name": "worker-0", "uid": OWNER["ownerguard.io/owner-uid"],
                "controller": False, "blockOwnerDeletion": False}]},
           "spec": {"selector": {"matchLabels": dict(OWNER)},
                    "template": {"metadata": {"labels": dict(OWNER)}, "spec": {"volumes": volumes}},
                    "volumeClaimTemplates": [{"metadata": {"name": f"c{i}", "labels": dict(OWNER)}}
                                             for i in range(10000)]}}
    new = json.loads(json.dumps(old))
    new["spec"]["volumeClaimTemplates"][5]["metadata"]["labels"]["tier"] = "b"
    return envelope("apps", "StatefulSet", new, old)


def main():
    binary = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(REPO, "target", "release", "ownerguard")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    work = tempfile.mkdtemp(prefix="decision-time-")
    log = open(os.path.join(work, "serve.log"), "w")
    server = subprocess.Popen([binary, "serve", "--dev", "--pods", os.path.join(REPO, "examples", "pods.yaml"),
                               "--addr", "127.0.0.1:18443", "--metrics-addr", "127.0.0.1:19090"],
                              cwd=work, stdout=log, stderr=log)
    try:
        ca = os.path.join(work, "certs", "ca.crt")
        for _ in range(100):
            if os.path.exists(ca):
                break
            time.sleep(0.1)
        time.sleep(0.5)
        context = ssl.create_default_context(cafile=ca)
        for name, body in [("131,072 references kept", references()),
                           ("10,000 claim templates and 10,000 volumes", templates())]:
            for _ in range(rounds):
                request = urllib.request.Request("https://localhost:18443/mutate?timeout=10s", data=body,
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, context=context, timeout=60) as answer:
                    answer.read()
            log.flush()
            with open(os.path.join(work, "serve.log")) as f:
                took = [float(m) for m in re.findall(r"duration_ms=([0-9.]+)", f.read())][-rounds:]
            took.sort()
            print(f"{name}: {len(body) / 2**20:.1f} MiB, decision {took[len(took) // 2]:.0f} ms median, "
                  f"{took[0]:.0f} to {took[-1]:.0f} ms over {rounds}")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
