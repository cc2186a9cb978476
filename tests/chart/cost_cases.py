#!/usr/bin/env python3
"""UPDATE cases for .ci/chart-cel at the labelled filter's size bounds.

The labelled webhooks' CEL filter runs within the API server's cost limit
for an expression; past it the condition errors, and under failurePolicy
Fail the update is refused with ownerguard never asked. So the filter
scans no list or map of more than 64 entries (references, a template's
labels or annotations, claim templates, a pod spec's volumes, the
selector's labels) and no claim template in those lists with more than
16 labels or annotations: an object past a bound is sent unscanned, as
is one with a kind or a uid longer than 253 characters. These cases
hold both sides of that promise with the API server's own CEL code:

  - an object at every bound at once (64 of each, 16 in each list entry,
    64 references whose kinds and uids are 253 characters long, the
    kinds read as pod-like), updated in nothing ownerguard judges:
    evaluated without error, and not sent;
  - one entry past each bound, on the new or the old side: sent;
  - long strings (names, an owner key's value), which are compared and
    never scanned: not sent, without error;
  - such objects near a megabyte: sent, without error.

The cases are generated (tens of megabytes), so they are not kept in the
repository. Usage: cost_cases.py > cases.json; chart-cel RENDERED cases.json
"""

import copy
import json
import sys

BOUND = 64
ENTRY_BOUND = 16  # the labels, and the annotations, of one entry of a scanned list
OWNER = {"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": "3c5b"}


def entries(n, prefix, value="v" * 63):
    return {f"example.com/{prefix}{i:05d}": value for i in range(n)}


def meta(labels=2, annotations=2):
    return {"labels": entries(labels, "l"), "annotations": entries(annotations, "a")}


def ephemeral_volume(i, labels=2, annotations=2):
    return {"name": f"scratch-{i}",
            "ephemeral": {"volumeClaimTemplate": {"metadata": meta(labels, annotations), "spec": {}}}}


def pod_spec(volumes=1, labels=2, annotations=2):
    return {"containers": [{"name": "c", "image": "i"}],
            "volumes": [ephemeral_volume(i, labels, annotations) for i in range(volumes)]}


def widget(references=1, kind_length=3, uid_length=36, template=2, lists=1, entry=2, selector=2):
    """A custom resource with every template shape the filter reads."""
    kind = "P" + "-" * (kind_length - 2) + "d"  # pod-like: the regex reads all of it
    refs = [{"apiVersion": "v1", "kind": kind, "name": f"w-{i}",
             "uid": (f"{i:05d}" + "u" * uid_length)[:uid_length],
             "controller": False, "blockOwnerDeletion": False} for i in range(references)]
    spec = pod_spec(lists, entry, entry)
    spec.update({
        "selector": {"matchLabels": entries(selector, "s")},
        "template": {"metadata": meta(template, template), "spec": pod_spec(lists, entry, entry)},
        "jobTemplate": {"metadata": meta(template, template),
                        "spec": {"template": {"metadata": meta(template, template),
                                              "spec": pod_spec(lists, entry, entry)}}},
        "volumeClaimTemplates": [dict(metadata=dict(name=f"data-{i}", **meta(entry, entry)), spec={})
                                 for i in range(lists)],
        "metadata": meta(template, template),
    })
    return {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "agents", "labels": dict(OWNER),
                         "ownerReferences": refs, "finalizers": []},
            "spec": spec}


def finalizer_removal(name, expect, new, old=None):
    """An UPDATE that removes a finalizer and changes nothing else, unless old differs."""
    old = copy.deepcopy(new if old is None else old)
    old["metadata"]["finalizers"] = ["example.com/keep"]
    return {"name": name, "webhooks": "labelled", "operation": "UPDATE", "group": "example.com",
            "version": "v1", "kind": "Widget", "resource": "widgets",
            "object": new, "oldObject": old, "expect": expect}


def one_past(path, grow):
    """The small widget with the entry at path grown to BOUND + 1 entries by grow."""
    w = widget()
    at = w
    for step in path[:-1]:
        at = at[step]
    at[path[-1]] = grow(at[path[-1]])
    return w


def cases():
    out = [finalizer_removal(
        "every scanned list and map at its bound, references at theirs: not sent, no cost error",
        False,
        widget(references=BOUND, kind_length=253, uid_length=253, template=BOUND, lists=BOUND,
               entry=ENTRY_BOUND, selector=BOUND))]
    more = lambda prefix: (lambda _: entries(BOUND + 1, prefix))  # noqa: E731
    templates = {
        "spec.template": ["spec", "template", "metadata"],
        "spec.jobTemplate": ["spec", "jobTemplate", "metadata"],
        "spec.jobTemplate.spec.template": ["spec", "jobTemplate", "spec", "template", "metadata"],
        "spec.metadata": ["spec", "metadata"],
    }
    for name, path in templates.items():
        for field in ("labels", "annotations"):
            out.append(finalizer_removal(f"{name} with {BOUND + 1} {field}: sent unscanned", True,
                                         one_past(path + [field], more(field[0]))))
    out.append(finalizer_removal(f"spec.selector with {BOUND + 1} matchLabels: sent unscanned", True,
                                 one_past(["spec", "selector", "matchLabels"], more("s"))))
    volume_lists = {
        "spec.volumes": ["spec", "volumes"],
        "spec.template.spec.volumes": ["spec", "template", "spec", "volumes"],
        "spec.jobTemplate.spec.template.spec.volumes": ["spec", "jobTemplate", "spec", "template", "spec", "volumes"],
    }
    for name, path in volume_lists.items():
        out.append(finalizer_removal(f"{name} with {BOUND + 1} volumes: sent unscanned", True,
                                     one_past(path, lambda _: [ephemeral_volume(i) for i in range(BOUND + 1)])))
        for field in ("labels", "annotations"):
            grown = one_past(path, lambda _: [ephemeral_volume(0, 2, 2)])
            at = grown
            for step in path:
                at = at[step]
            at[0]["ephemeral"]["volumeClaimTemplate"]["metadata"][field] = entries(ENTRY_BOUND + 1, field[0])
            out.append(finalizer_removal(
                f"{name}: a claim template with {ENTRY_BOUND + 1} {field}: sent unscanned", True, grown))
    out.append(finalizer_removal(
        f"spec.volumeClaimTemplates with {BOUND + 1} claim templates: sent unscanned", True,
        one_past(["spec", "volumeClaimTemplates"],
                 lambda _: [{"metadata": {"name": f"data-{i}"}, "spec": {}} for i in range(BOUND + 1)])))
    for field in ("labels", "annotations"):
        grown = widget()
        grown["spec"]["volumeClaimTemplates"][0]["metadata"][field] = entries(ENTRY_BOUND + 1, field[0])
        out.append(finalizer_removal(
            f"spec.volumeClaimTemplates: one with {ENTRY_BOUND + 1} {field}: sent unscanned", True, grown))
    # Past a bound on the old side only: the update shrinks the map.
    old = widget()
    old["spec"]["template"]["metadata"]["annotations"] = entries(BOUND + 1, "a")
    out.append(finalizer_removal(
        f"spec.template's annotations from {BOUND + 1} to 2 (the old side past the bound): sent", True,
        widget(), old))
    # Strings are compared, never scanned: long ones cost little.
    long = widget(references=BOUND, uid_length=253)
    for ref in long["metadata"]["ownerReferences"]:
        ref["name"], ref["apiVersion"] = "n" * 15000, "v" * 5000
    long["spec"]["template"]["metadata"]["labels"]["ownerguard.io/owner-pod"] = "x" * 300000
    long["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] = "y" * 300000
    out.append(finalizer_removal("long names and owner-key values: not sent, no cost error", False, long))
    # A uid is compared with every owner uid: bounded as a kind is.
    for kind in ("Pod", "Widget"):
        long_uid = widget(references=BOUND)
        long_uid["metadata"]["ownerReferences"][-1]["kind"] = kind
        long_uid["metadata"]["ownerReferences"][-1]["uid"] = "u" * 254
        out.append(finalizer_removal(f"a {kind} reference with a uid of 254 characters: sent unscanned", True, long_uid))
    # Near a megabyte: what used to pass the cost limit.
    out.append(finalizer_removal("a template with 15,000 labels: sent, no cost error", True,
                                 one_past(["spec", "template", "metadata", "labels"],
                                          lambda _: entries(15000, "l", "v"))))
    out.append(finalizer_removal("1,000 claim templates and ephemeral volumes in each list, each with 3 labels: sent, no cost error",
                                 True, widget(lists=1000, entry=3)))
    return out


if __name__ == "__main__":
    json.dump(cases(), sys.stdout)
