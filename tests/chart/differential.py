#!/usr/bin/env python3
"""The chart's matchConditions, compared with ownerguard's answers.

The chart's labelled webhooks (mutate.*, validate.*) carry a CEL
matchCondition that lets the API server skip UPDATEs that touch nothing
ownerguard judges; the cluster-wide one (validate-all.*) one that skips
CREATEs naming no pod-like kind. A review skipped on which ownerguard would
have denied, patched or warned is a hole. This differential run,
deterministic for a seed:

  1. makes UPDATE pairs: --cases random old/new objects (ConfigMap, Job,
     CronJob, Deployment, StatefulSet, ResourceClaimTemplate, a custom
     resource; owner labels, pod-like and other ownerReferences, templates
     of every shape rule 12 names (pod templates, claim templates and the
     selector, ephemeral volumes' claim templates, a ResourceClaimTemplate's
     spec.metadata), pod-bound and other requesters) from --seed; every UPDATE fixture of
     tests/fixtures/*/ and tests/fixtures/recorded/*/; and a fixed set of
     odd shapes (a custom resource whose spec, template, labels, references...
     are strings, numbers, lists or null, on either side; an object
     already over --max-pod-references);
  2. evaluates the rendered chart's conditions on all of them in one call
     of .ci/chart-cel (the API server's own CEL code);
  3. asks the built ownerguard (`ownerguard review --webhook mutate|validate`)
     about every pair a labelled webhook's condition skips while the object
     carries the owner-pod label on either side;
  4. makes CREATEs of an unlabelled pod whose reference has a kind spelt
     from the letters of pod and pods, digits, separators and non-ASCII
     look-alikes (every string of up to 3 of them), and asks ownerguard
     (`--webhook validate-all`) about each the cluster-wide condition skips;

and fails (exit 1), listing the smallest examples (the review, ownerguard's
answer, the condition's verdict), when a condition errors on any pair
(under failurePolicy Fail the API server would refuse the request), or
skips such a pair on which that webhook's answer is not "allowed, no patch,
no warnings".

Known exceptions, harmless and counted apart (never a failure):
  - malformed requester extras: the requester's userInfo.extra pod-name /
    pod-uid are malformed, and the same review without them is allowed
    unchanged. The condition cannot see userInfo's extras of a pod-bound
    token reliably (and need not): an UPDATE that changes no ownership is
    not a claim on any owner, so letting it through changes no ownership.
  - more than --max-pod-references pod references already in the old
    object: ownerguard refuses every UPDATE of such an object (400) before
    looking at it; the condition skips only those that change none of them,
    which leave the references as they were.

    python3 tests/chart/differential.py --ownerguard target/debug/ownerguard \\
        --chart-cel target/chart-check/chart-cel --rendered target/chart-check/rendered.yaml \\
        [--cases 3000] [--seed 1]
"""

import argparse
import base64
import copy
import glob
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

PREFIX = "ownerguard.io"  # the chart's default keyPrefix, as rendered by .ci/chart-check
P, U, N = f"{PREFIX}/owner-pod", f"{PREFIX}/owner-uid", f"{PREFIX}/owner-pod-name"
# The kinds ownerguard may read as pod-like (OwnerReference::means_pod), as
# the chart spells them (ownerguard.cel.podKindRegex): a superset, every kind
# with a character outside printable ASCII included.
POD_KIND = re.compile(r"^[^A-Za-z0-9]*[Pp][^A-Za-z0-9]*[Oo0][^A-Za-z0-9]*[Dd][^A-Za-z0-9]*([Ss][^A-Za-z0-9]*)?$|[^ -~]")
# Kinds a person reads as Pod that the collector cannot resolve (issue 14).
HOMOGLYPHS = ["P\u043ed", "\u0420od", "\uff30\uff4f\uff44", "P0d", "Po\u0301d", "Pod\u200b"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PODS = {
    "apiVersion": "v1",
    "kind": "PodList",
    "items": [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-1", "namespace": "agents", "uid": "U1"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-2", "namespace": "agents", "uid": "U2"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-t", "namespace": "agents", "uid": "UT",
                                                          "deletionTimestamp": "2024-01-01T00:00:00Z"}},
    ],
}
KINDS = [("", "v1", "ConfigMap", "configmaps"), ("batch", "v1", "Job", "jobs"),
         ("batch", "v1", "CronJob", "cronjobs"), ("example.com", "v1", "Widget", "widgets"),
         ("apps", "v1", "Deployment", "deployments"), ("apps", "v1", "StatefulSet", "statefulsets"),
         ("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates"),
         # Copied by the endpoints and endpointslice controllers (rule 16).
         ("", "v1", "Service", "services"), ("", "v1", "Endpoints", "endpoints"),
         ("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices")]
WORKER = "system:serviceaccount:agents:worker"
PODNAME, PODUID = "authentication.kubernetes.io/pod-name", "authentication.kubernetes.io/pod-uid"
USERS = [
    {"username": "system:serviceaccount:kube-system:job-controller"},
    {"username": WORKER, "extra": {PODNAME: ["w-1"], PODUID: ["U1"]}},
    {"username": WORKER, "extra": {PODNAME: ["w-2"], PODUID: ["U2"]}},
    {"username": WORKER, "extra": {PODNAME: ["w-1"]}},  # malformed: a name without a uid
    {"username": "system:serviceaccount:kube-system:generic-garbage-collector"},
    {"username": "system:serviceaccount:kube-system:statefulset-controller"},
    {"username": "system:serviceaccount:kube-system:endpoint-controller"},
    {"username": "system:kube-controller-manager"},
    {"username": "alice"},
]


def review(name, old, new, user=None, kind=KINDS[0]):
    g, v, k, r = kind
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-" + name, "kind": {"group": g, "version": v, "kind": k},
        "resource": {"group": g, "version": v, "resource": r}, "namespace": "agents", "name": "x",
        "operation": "UPDATE", "userInfo": user or {"username": "system:serviceaccount:agents:ctl"},
        "object": new, "oldObject": old}}


class Random:
    """Random UPDATE pairs (one object, then one to three edits of it)."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def ch(self, *xs):
        return self.r.choice(xs)

    def ref(self):
        ch = self.ch
        r = {"apiVersion": ch("v1", "v1", "apps/v1", "example.com/v1", "/v1"),
             "kind": ch("Pod", "Pod", "Pod", "pod", "Pods", "p-o-d", "ConfigMap", "Deployment", "Podx",
                        ch(*HOMOGLYPHS), "\u03a9mega"),
             "name": ch("w-1", "w-1", "w-2", "w-3", "w-t", "c", "Bad_Name", ""),
             "uid": ch("U1", "U1", "U2", "U3", "UT", "Z", "")}
        c, b = ch(None, False, True, False), ch(None, False, False, True)
        if c is not None:
            r["controller"] = c
        if b is not None:
            r["blockOwnerDeletion"] = b
        if self.r.random() < .03:
            del r[ch("kind", "uid", "name")]
        return r

    def labels(self):
        ch, l = self.ch, {}
        v = ch(None, "w-1", "w-1", "w-2", "Self", "", "w-3", "w-t")
        if v is not None:
            l[P] = v
        u = ch(None, "U1", "U1", "U2", "", "UT")
        if u is not None:
            l[U] = u
        if self.r.random() < .3:
            l["app"] = "a"
        return l

    def annotations(self):
        a = {}
        if self.r.random() < .3:
            a[N] = self.ch("w-1", "w-2", "")
        return a or None

    def template_metadata(self):
        md = {}
        l = self.labels() if self.r.random() < .8 else {}
        if self.r.random() < .3:
            l["v"] = self.ch(1, None, True, "1")
        md["labels"] = l
        a = self.annotations()
        if a is not None:
            md["annotations"] = a
        if self.r.random() < .1:
            md["annotations"] = self.ch("s", {"x": 2})
        return md

    def volumes(self):
        """A pod spec's volumes: some generic ephemeral ones, with claim templates of every shape (rule 12)."""
        vs = []
        for i in range(self.r.choice([0, 1, 1, 2])):
            if self.r.random() < .3:
                vs.append({"name": f"v{i}", "emptyDir": {}})
            else:
                vs.append({"name": f"v{i}", "ephemeral": {"volumeClaimTemplate": {"metadata": self.template_metadata()}}})
        return vs

    def claim_templates(self):
        return [{"metadata": dict(self.template_metadata(), name=f"c{i}")} for i in range(self.r.choice([0, 1, 2]))]

    def selector(self):
        m = {"app": "a"}
        if self.r.random() < .4:
            m[P] = self.ch("w-1", "Self", "w-2")
        if self.r.random() < .2:
            m[U] = self.ch("U1", "U2")
        return {"matchLabels": m}

    def object(self, kind):
        g, v, k, _ = kind
        md = {"name": "x", "namespace": "agents", "labels": self.labels()}
        if P not in md["labels"] and self.r.random() < .7:
            md["labels"][P] = "w-1"
        a = self.annotations()
        if a:
            md["annotations"] = a
        refs = [self.ref() for _ in range(self.r.choice([0, 1, 1, 1, 2, 2, 3]))]
        if refs or self.r.random() < .5:
            md["ownerReferences"] = refs
        o = {"apiVersion": (g + "/" if g else "") + v, "kind": k, "metadata": md}
        if k in ("Job", "Widget", "Deployment", "StatefulSet"):
            o["spec"] = {"template": {"metadata": self.template_metadata()}} if self.r.random() < .8 else {}
            if "template" in o["spec"] and self.r.random() < .5:
                o["spec"]["template"]["spec"] = {"volumes": self.volumes()}
        if k in ("CronJob", "Widget") and self.r.random() < .6:
            o.setdefault("spec", {})["jobTemplate"] = {
                "metadata": self.template_metadata(),
                "spec": {"template": {"metadata": self.template_metadata(), "spec": {"volumes": self.volumes()}}}}
        if k in ("StatefulSet", "Widget") and self.r.random() < .7:
            o.setdefault("spec", {})["volumeClaimTemplates"] = self.claim_templates()
            o["spec"]["selector"] = self.selector()
        if k == "ResourceClaimTemplate":
            o["spec"] = {"metadata": self.template_metadata(), "spec": {"devices": {}}}
        if k == "Widget" and self.r.random() < .3:
            o.setdefault("spec", {})["volumes"] = self.volumes()
        if k == "ConfigMap":
            o["data"] = {"k": "a"}
        if k == "Service":
            o["spec"] = {"ports": [{"port": 80}]}
        if k == "CronJob" and "jobTemplate" in o.get("spec", {}) and self.r.random() < .4:
            # The shape rule 16 refuses up front: a pod template saying Self.
            tm = o["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
            tm["labels"] = dict(tm["labels"] if isinstance(tm.get("labels"), dict) else {}, **{P: "Self"})
            tm["annotations"] = dict(tm["annotations"] if isinstance(tm.get("annotations"), dict) else {},
                                     **{N: "w-1"})
        return o

    def edit(self, o):
        R, ch = self.r, self.ch
        n = copy.deepcopy(o)
        md = n["metadata"]
        for _ in range(R.choice([1, 1, 2, 3])):
            m = R.randrange(24)
            refs = md.get("ownerReferences") or []
            spec = n.get("spec") if isinstance(n.get("spec"), dict) else None
            if m == 0:
                n.setdefault("data", {})["k"] = "b"
            elif m == 1 and refs:
                R.shuffle(refs)
            elif m == 2:
                md.setdefault("ownerReferences", []).append(self.ref())
            elif m == 3 and refs:
                refs.pop(R.randrange(len(refs)))
            elif m == 4 and refs:
                r = R.choice(refs)
                f = ch("controller", "blockOwnerDeletion", "apiVersion", "kind", "name", "uid")
                r[f] = self.ref().get(f, "") if f in ("apiVersion", "kind", "name", "uid") else ch(True, False)
            elif m == 5:
                md["labels"] = self.labels()
            elif m == 6 and spec:
                for t in (spec.get("template"), spec.get("jobTemplate")):
                    if isinstance(t, dict) and isinstance(t.get("metadata"), dict) \
                            and isinstance(t["metadata"].setdefault("labels", {}), dict):
                        t["metadata"]["labels"]["v"] = ch(1, "1", None, True)
            elif m == 7 and spec and isinstance(spec.get("template"), dict):
                spec["template"]["metadata"] = self.template_metadata()
            elif m == 8:
                a = self.annotations()
                if a is None:
                    md.pop("annotations", None)
                else:
                    md["annotations"] = a
            elif m == 9 and refs:
                refs.append(copy.deepcopy(R.choice(refs)))
            elif m == 10 and refs:
                R.choice(refs).pop(ch("controller", "blockOwnerDeletion", "uid"), None)
            elif m == 11 and spec and isinstance(spec.get("template"), dict) \
                    and isinstance(spec["template"].get("metadata"), dict):
                tm = spec["template"]["metadata"]
                a = ch(None, {"x": "1"}, {N: "w-1"}, "s") if tm.get("annotations") is not None \
                    else ch({"x": 1}, {N: "w-1"})
                if a is None:
                    tm.pop("annotations", None)
                else:
                    tm["annotations"] = a
            elif m == 12 and spec and "jobTemplate" in spec:
                spec["jobTemplate"]["spec"]["template"]["metadata"] = self.template_metadata()
            elif m == 13:
                md.setdefault("labels", {})["app"] = "z"
            elif m == 14:
                md.setdefault("finalizers", []).append("example.com/f")
            elif m == 15 and spec and "template" in spec:
                spec["template"] = ch(None, "s", [1], {"metadata": None}, {"metadata": {"labels": "x"}})
            elif m in (16, 17) and spec:
                # A volume's claim template (rule 12): relabelled, or the volumes reordered.
                pods = [t.get("spec") for t in (spec.get("template"),) if isinstance(t, dict)]
                jt = spec.get("jobTemplate")
                if isinstance(jt, dict) and isinstance(jt.get("spec"), dict) and isinstance(jt["spec"].get("template"), dict):
                    pods.append(jt["spec"]["template"].get("spec"))
                for ps in pods:
                    if isinstance(ps, dict) and isinstance(ps.get("volumes"), list) and ps["volumes"]:
                        if m == 16:
                            R.choice(ps["volumes"])["ephemeral"] = {"volumeClaimTemplate": {"metadata": self.template_metadata()}}
                        else:
                            R.shuffle(ps["volumes"])
            elif m == 18 and spec and isinstance(spec.get("volumeClaimTemplates"), list) and spec["volumeClaimTemplates"]:
                R.choice(spec["volumeClaimTemplates"])["metadata"] = dict(self.template_metadata(), name="c9")
            elif m == 19 and spec and "selector" in spec:
                spec["selector"] = self.selector()
            elif m == 20 and spec and "metadata" in spec:
                spec["metadata"] = self.template_metadata()
            elif m in (21, 22) and spec:
                # A template's labels emptied, dropped, or its metadata
                # dropped: what the API server's defaulting then copies
                # changes (a CronJob's Jobs take the pod template's labels
                # when their own template has none, rule 16).
                for t in (spec.get("template"), spec.get("jobTemplate")):
                    if isinstance(t, dict) and isinstance(t.get("metadata"), dict) and R.random() < .7:
                        if m == 21:
                            t["metadata"]["labels"] = ch({}, None)
                            if t["metadata"]["labels"] is None:
                                del t["metadata"]["labels"]
                        else:
                            del t["metadata"]
            elif m == 23:
                md.setdefault("labels", {})[P] = ch("Self", "w-1")
        return n

    def pairs(self, count):
        for i in range(count):
            kind = self.r.choice(KINDS)
            old = self.object(kind)
            new = self.edit(old)
            if self.r.random() < .1:
                old, new = new, old
            yield f"random-{i}", review(f"random-{i}", old, new, user=self.r.choice(USERS), kind=kind), []


def rule_shapes():
    """Each UPDATE a rule refuses for what is not an owner key, by name.

    A CronJob whose pod template says Self: the API server gives each Job
    the Job template's labels, or the pod template's when it has none
    (batch/v1 defaulting), so dropping the Job template's labels makes
    every Job the controller creates carry Self without the pod's name
    (rule 16): refused, so it must be sent.
    """
    def cronjob(job_labels):
        jt = {"spec": {"template": {"metadata": {"labels": {P: "Self"}, "annotations": {N: "w-1"}}}}}
        if job_labels is not None:
            jt["metadata"] = {"labels": job_labels}
        return {"apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "x", "namespace": "agents", "labels": {P: "w-1", U: "U1"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": "U1",
                                                  "controller": False, "blockOwnerDeletion": False}]},
                "spec": {"schedule": "* * * * *", "jobTemplate": jt}}
    kind = ("batch", "v1", "CronJob", "cronjobs")
    for name, before, after in [("job-labels-emptied", {"app": "a"}, {}),
                                ("job-labels-dropped", {"app": "a"}, None),
                                ("job-metadata-dropped", {"app": "a"}, "no metadata")]:
        old, new = cronjob(before), cronjob(after if after != "no metadata" else None)
        if after == "no metadata":
            new["spec"]["jobTemplate"].pop("metadata", None)
        elif after is None:
            new["spec"]["jobTemplate"]["metadata"] = {}
        yield f"rule-{name}", review(f"rule-{name}", old, new, kind=kind), []


def odd_shapes():
    """A custom resource whose spec's parts are each of odd JSON shapes, on either side."""
    base = {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "x", "namespace": "agents", "labels": {P: "w-1", U: "U1"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": "U1"}]},
            "spec": {"template": {"metadata": {"labels": {P: "w-1"}}}}}
    odd = [None, "s", 3, 1.5, True, [], [1, "a"], {}, {"a": 1}]
    paths = [("spec",), ("spec", "template"), ("spec", "template", "metadata"),
             ("spec", "template", "metadata", "labels"), ("spec", "template", "metadata", "annotations"),
             ("spec", "template", "metadata", "labels", P), ("spec", "jobTemplate"),
             ("spec", "jobTemplate", "metadata"), ("spec", "jobTemplate", "spec"),
             ("spec", "jobTemplate", "spec", "template"),
             ("spec", "jobTemplate", "spec", "template", "metadata", "labels"),
             ("spec", "jobTemplate", "spec", "template", "metadata", "annotations"),
             ("spec", "volumes"), ("spec", "volumeClaimTemplates"), ("spec", "selector"),
             ("spec", "selector", "matchLabels"), ("spec", "metadata"), ("spec", "metadata", "labels"),
             ("spec", "template", "spec"), ("spec", "template", "spec", "volumes"),
             ("spec", "jobTemplate", "spec", "template", "spec", "volumes")]
    # Only the parts no schema fixes: the API server decodes metadata into
    # ObjectMeta before admission (labels a list, ownerReferences a string
    # never reach a webhook).

    def put(o, path, v):
        cur = o
        for k in path[:-1]:
            if isinstance(k, int):
                cur = cur[k]
                continue
            if not isinstance(cur.get(k), (dict, list)):
                cur[k] = {}
            cur = cur[k]
        cur[path[-1]] = v

    i = 0
    for path in paths:
        for v in odd:
            for side in ("new", "old", "both"):
                old, new = copy.deepcopy(base), copy.deepcopy(base)
                for obj, s in ((old, "old"), (new, "new")):
                    if side in (s, "both"):
                        put(obj, path, v)
                name = f"odd-{i}"
                i += 1
                yield name, review(name, old, new, kind=KINDS[3]), []


def many_references():
    """An object from before --max-pod-references: 33 pod references, kept by an edit of its data."""
    refs = [{"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": "U1"}] + \
        [{"apiVersion": "v1", "kind": "Pod", "name": f"p-{i}", "uid": f"X{i}"} for i in range(32)]
    old = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "a"},
           "metadata": {"name": "x", "namespace": "agents", "labels": {P: "w-1", U: "U1"}, "ownerReferences": refs}}
    new = copy.deepcopy(old)
    new["data"]["k"] = "b"
    yield "odd-many-references", review("odd-many-references", old, new), []


def kind_spellings():
    """CREATEs of an unlabelled pod whose one reference (to a running pod) has
    a kind made of the letters of pod and pods, the digits and separators
    that read as them or not, a Cyrillic o, a fullwidth P, a zero-width space
    and the Kelvin sign: every one the cluster-wide webhook's condition skips
    must be one ownerguard's /validate-all allows unchanged."""
    alphabet = ["p", "O", "0", "d", "s", "-", "x", "1", "\u043e", "\uff30", "\u200b", "\u212a"]
    words = [""]
    i = 0
    for _ in range(3):
        words = [w + c for w in words for c in alphabet]
        for kind in words:
            name = f"kind-{i}"
            i += 1
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "x", "namespace": "agents",
                                "ownerReferences": [{"apiVersion": "v1", "kind": kind, "name": "w-1", "uid": "U1",
                                                     "controller": False, "blockOwnerDeletion": False}]}}
            rev = review(name, None, pod, user={"username": "alice"}, kind=("", "v1", "Pod", "pods"))
            rev["request"]["operation"] = "CREATE"
            del rev["request"]["oldObject"]
            yield name, rev, []


def fixtures():
    """The UPDATE fixtures, with their case.yaml's flags and pods.yaml."""
    try:
        import yaml
        load = yaml.safe_load
    except ImportError:  # the flags below are one-line scalars or flow lists
        def load(text):
            case = {}
            for m in re.finditer(r"^(\w+):[ \t]*(.*)$", text, re.M):
                v = m.group(2).strip()
                if v.startswith("["):
                    v = [x.strip().strip("\"'") for x in v.strip("[]").split(",") if x.strip()]
                elif v in ("true", "false"):
                    v = v == "true"
                else:
                    v = v.strip("\"'")
                case[m.group(1)] = v
            return case
    root = os.path.join(REPO, "tests", "fixtures")
    for path in sorted(glob.glob(f"{root}/*/request.json") + glob.glob(f"{root}/recorded/*/request.json")):
        d = os.path.dirname(path)
        with open(path) as f:
            rev = json.load(f)
        if rev.get("request", {}).get("operation") != "UPDATE":
            continue
        case = {}
        if os.path.exists(f"{d}/case.yaml"):
            with open(f"{d}/case.yaml") as f:
                text = f.read()
            case = load(text) or {}
        if case.get("keyPrefix"):
            continue  # the chart is rendered with the default keyPrefix
        flags = []
        if case.get("requesterCheck"):
            flags += ["--requester-check", case["requesterCheck"]]
        if case.get("failOpen"):
            flags.append("--fail-open")
        for d_ in case.get("delegates") or []:
            flags += ["--delegate", d_]
        if case.get("maxPodReferences") is not None:
            flags += ["--max-pod-references", str(case["maxPodReferences"])]
        # lookupFailures cannot be replayed offline: the owner is taken from pods.yaml.
        if os.path.exists(f"{d}/pods.yaml"):
            flags += ["--pods", f"{d}/pods.yaml"]
        yield "fixture-" + os.path.relpath(d, root).replace("/", "-"), rev, flags


def cel_case(name, rev, role):
    q = rev["request"]
    return {"name": name, "webhooks": role, "operation": q["operation"], "group": q["kind"].get("group", ""),
            "version": q["kind"].get("version", ""), "kind": q["kind"].get("kind", ""),
            "resource": q["resource"].get("resource", ""), "object": q.get("object"),
            "oldObject": q.get("oldObject"), "expect": True}


LINE = re.compile(r"^(ok  |FAIL) (\S+) / (\S+): (.*)$")


def evaluate(chart_cel, rendered, items, workdir):
    """{name: {webhook: True (sent) | False (skipped) | 'error message'}} and any other failure lines."""
    cases = [cel_case(n, r, role) for n, r, _ in items for role in ("labelled", "podReferences")]
    path = os.path.join(workdir, "cases.json")
    with open(path, "w") as f:
        json.dump(cases, f)
    p = subprocess.run([chart_cel, rendered, path], capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"chart-cel failed ({p.returncode}): {p.stderr}")
    verdicts, other, last = {}, [], None
    for line in p.stdout.splitlines():
        m = LINE.match(line)
        if not m:
            if last is not None and isinstance(verdicts[last[0]][last[1]], str):
                verdicts[last[0]][last[1]] += "\n" + line  # an error message's expression, quoted
            else:
                other.append(line)
            continue
        _, webhook, name, rest = m.groups()
        if rest.startswith("sent: "):
            v = rest == "sent: true"
        elif rest.startswith("sent to the webhook: false"):
            v = False
        else:
            v = rest
        verdicts.setdefault(name, {})[webhook] = v
        last = (name, webhook)
    return verdicts, other


def answer(ownerguard, rev, webhook, flags, pods):
    args = [ownerguard, "review", "--webhook", webhook]
    if "--pods" not in flags:
        args += ["--pods", pods]
    p = subprocess.run(args + flags + ["-"], input=json.dumps(rev).encode(), capture_output=True)
    try:
        r = json.loads(p.stdout)["response"]
    except (ValueError, KeyError):
        return {"error": f"exit {p.returncode}: {p.stderr.decode()[-500:]}"}
    a = {"allowed": r.get("allowed")}
    if r.get("status"):
        a["status"] = r["status"]
    if "patch" in r:
        a["patch"] = json.loads(base64.b64decode(r["patch"]))
    if r.get("warnings"):
        a["warnings"] = r["warnings"]
    return a


def trivial(a):
    return a.get("allowed") is True and not a.get("patch") and not a.get("warnings") and "error" not in a


def labelled(rev):
    q = rev["request"]
    for o in (q.get("object"), q.get("oldObject")):
        md = o.get("metadata") if isinstance(o, dict) else None
        labels = md.get("labels") if isinstance(md, dict) else None
        if isinstance(labels, dict) and P in labels:
            return True
    return False


def pod_references(o):
    md = o.get("metadata") if isinstance(o, dict) else None
    refs = md.get("ownerReferences") if isinstance(md, dict) else None
    if not isinstance(refs, list):
        return 0
    return sum(1 for r in refs if isinstance(r, dict) and isinstance(r.get("kind"), str) and POD_KIND.search(r["kind"]))


def flag(flags, name, default):
    return type(default)(flags[flags.index(name) + 1]) if name in flags else default


def exception(ownerguard, rev, webhook, flags, pods, got):
    """Why a skipped, non-trivial answer is a known, harmless exception (None if it is not)."""
    q = rev["request"]
    if pod_references(q.get("oldObject")) > flag(flags, "--max-pod-references", 32):
        return "more than --max-pod-references pod references already in the old object"
    extra = (q.get("userInfo") or {}).get("extra") or {}
    if (PODNAME in extra or PODUID in extra) and "malformed" in json.dumps(got.get("status", "")):
        plain = copy.deepcopy(rev)
        plain["request"]["userInfo"].pop("extra")
        if trivial(answer(ownerguard, plain, webhook, flags, pods)):
            return "malformed requester extras (the same review without them is allowed unchanged)"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ownerguard", default=os.path.join(REPO, "target", "debug", "ownerguard"))
    ap.add_argument("--chart-cel", default=os.path.join(REPO, "target", "chart-check", "chart-cel"))
    ap.add_argument("--rendered", default=os.path.join(REPO, "target", "chart-check", "rendered.yaml"),
                    help="the chart rendered with the default keyPrefix and validation.allPodOwnerReferences")
    ap.add_argument("--cases", type=int, default=int(os.environ.get("CEL_DIFF_CASES", 3000)))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CEL_DIFF_SEED", 1)))
    ap.add_argument("--jobs", type=int, default=2, help="review processes at once")
    ap.add_argument("--show", type=int, default=3, help="examples shown per kind of failure")
    ap.add_argument("--keep", help="write the cases and the findings (JSON) to this directory")
    args = ap.parse_args()
    start = time.monotonic()

    items = list(Random(args.seed).pairs(args.cases)) + list(odd_shapes()) + list(many_references()) \
        + list(fixtures()) + list(kind_spellings()) + list(rule_shapes())
    workdir = args.keep or tempfile.mkdtemp(prefix="celdiff-")
    os.makedirs(workdir, exist_ok=True)
    pods = os.path.join(workdir, "pods.json")
    with open(pods, "w") as f:
        json.dump(PODS, f)

    verdicts, other = evaluate(args.chart_cel, args.rendered, items, workdir)
    failures = [("chart-cel", None, line, None, None) for line in other if line.strip()]
    jobs = []
    for name, rev, flags in items:
        v = verdicts.get(name, {})
        if not any(w.startswith("mutate.") for w in v) or not any(w.startswith("validate.") for w in v):
            failures.append(("not evaluated", name, rev, None, v))
            continue
        for webhook, verdict in v.items():
            if isinstance(verdict, str):
                failures.append(("the condition errors", name, rev, None, {webhook: verdict}))
        for webhook, verdict in v.items():
            role = webhook.split(".", 1)[0]
            if verdict is False and role in ("mutate", "validate") and labelled(rev):
                jobs.append((name, rev, flags, role, webhook))
            creates = rev["request"]["operation"] == "CREATE"
            if verdict is False and role == "validate-all" and creates and not labelled(rev):
                jobs.append((name, rev, flags, role, webhook))

    def judge(job):
        name, rev, flags, role, webhook = job
        got = answer(args.ownerguard, rev, role, flags, pods)
        if trivial(got):
            return None
        why = exception(args.ownerguard, rev, role, flags, pods, got)
        return (name, rev, flags, role, webhook, got, why)

    with ThreadPoolExecutor(args.jobs) as pool:
        judged = [j for j in pool.map(judge, jobs) if j]
    excepted = {}
    for name, rev, flags, role, webhook, got, why in judged:
        if why:
            excepted[why] = excepted.get(why, 0) + 1
        else:
            failures.append((f"skipped by {webhook}, but /{role} answers otherwise than allowed unchanged",
                             name, rev, got, {webhook: False}))

    elapsed = time.monotonic() - start
    sources = {}
    for name, _, _ in items:
        k = name.split("-", 1)[0]
        sources[k] = sources.get(k, 0) + 1
    print(f"{len(items)} reviews (seed {args.seed}: " + ", ".join(f"{v} {k}" for k, v in sources.items())
          + f"); {len(jobs)} skipped (review, webhook) pairs reviewed by ownerguard; {elapsed:.1f}s")
    for why, count in excepted.items():
        print(f"  known exception, {count}x: {why}")
    if args.keep:
        with open(os.path.join(workdir, "findings.json"), "w") as f:
            json.dump([{"kind": k, "name": n, "review": r, "answer": a, "condition": v}
                       for k, n, r, a, v in failures], f, indent=1)
    if not failures:
        return 0
    kinds = {}
    for f in failures:
        kinds.setdefault(f[0], []).append(f)
    print(f"FAIL: {len(failures)} findings")
    for kind, fs in kinds.items():
        fs.sort(key=lambda f: len(json.dumps(f[2])))
        print(f"\n== {kind}: {len(fs)}; the smallest:")
        for _, name, rev, got, v in fs[:args.show]:
            print(f"-- {name}\nreview: {json.dumps(rev)}" if name else f"-- {rev}")
            if got is not None:
                print(f"answer: {json.dumps(got)}")
            if v is not None:
                print(f"condition: {json.dumps(v)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
