#!/usr/bin/env python3
"""The memory of the largest reviews: `serve --dev` (examples/pods.yaml)
answering K at once (default 1, then 19: the body budget of reviews over
1 MiB holds 19 of these) of a 2.9 MiB CREATE whose object carries a list
of a million `{}` entries, the shape a mutating webhook sees before the
API server validates it: `ownerReferences` (a ConfigMap) or `spec.volumes`
(a Pod). Prints the server's peak RSS (VmHWM) before and after, the time
and the answer. A benchmark: it prints, it asserts nothing.

    bench/oversized.py [BINARY] [K...]   (BINARY: target/release/ownerguard)
"""
import concurrent.futures
import json
import ssl
import subprocess
import sys
import time
import urllib.request

ENTRIES = 1_000_000


def review(what):
    if what == "references":
        meta = {"name": "c", "namespace": "agents",
                "labels": {"ownerguard.io/owner-pod": "w-1"}, "ownerReferences": "LIST"}
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    else:
        meta = {"name": "c", "namespace": "agents", "labels": {"ownerguard.io/owner-pod": "w-1"}}
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"volumes": "LIST"}}
    listed = json.dumps(obj).replace('"LIST"', "[" + ",".join(["{}"] * ENTRIES) + "]")
    return ('{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",'
            '"kind":{"group":"","version":"v1","kind":"' + obj["kind"] + '"},'
            '"resource":{"group":"","version":"v1","resource":"x"},'
            '"namespace":"agents","operation":"CREATE","userInfo":{"username":"alice"},'
            '"object":' + listed + '}}').encode()


def measure(binary, what, k):
    body = review(what)
    server = subprocess.Popen(
        [binary, "serve", "--dev", "--pods", "examples/pods.yaml",
         "--addr", "127.0.0.1:18443", "--metrics-addr", "127.0.0.1:19090"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen("http://127.0.0.1:19090/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)

        def peak():
            with open(f"/proc/{server.pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM"):
                        return int(line.split()[1]) / 1024
            return 0.0

        before = peak()
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE

        def one(_):
            request = urllib.request.Request("https://127.0.0.1:18443/mutate", data=body,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, context=tls, timeout=120) as answer:
                    return json.load(answer)["response"]
            except OSError as error:
                return {"allowed": None, "status": {"message": str(error)}}

        started = time.time()
        with concurrent.futures.ThreadPoolExecutor(k) as pool:
            answers = list(pool.map(one, range(k)))
        took = time.time() - started
        refused = sum(1 for a in answers if a.get("allowed") is False)
        message = answers[-1].get("status", {}).get("message", "")[:100]
        print(f"{what:10} x{k:<3} body {len(body) / 2**20:.2f} MiB  peak RSS {before:.1f} -> "
              f"{peak():.1f} MiB  {took * 1000:.0f} ms  refused {refused}/{k}: {message}")
    finally:
        server.terminate()
        server.wait()


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/ownerguard"
    counts = [int(k) for k in sys.argv[2:]] or [1, 19]
    for k in counts:
        for what in ("references", "volumes"):
            measure(binary, what, k)


if __name__ == "__main__":
    main()
