"""Lint charts/ownerguard with Helm's own engine (helm-sdkpy), once with the
default values and once per file of charts/ownerguard/ci/ (each certificate
mode, the cluster-wide switch, fail-open). helm-sdkpy's Lint takes no
values file, so each override is merged into values.yaml of a copy of the
chart. Any warning or error fails."""

import asyncio
import copy
import pathlib
import shutil
import sys
import tempfile

import yaml
from helm_sdkpy import Configuration, Lint

CHART = pathlib.Path(__file__).resolve().parent.parent / "charts" / "ownerguard"
SEVERITY = {0: "unknown", 1: "info", 2: "warning", 3: "error"}


def merge(base, override):
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def lint(values_file):
    with tempfile.TemporaryDirectory() as tmp:
        chart = pathlib.Path(tmp) / "ownerguard"
        shutil.copytree(CHART, chart)
        if values_file is not None:
            base = yaml.safe_load((CHART / "values.yaml").read_text())
            override = yaml.safe_load(values_file.read_text()) or {}
            (chart / "values.yaml").write_text(yaml.safe_dump(merge(base, override)))
        return asyncio.run(Lint(Configuration()).run(str(chart)))


def main():
    failed = False
    for values_file in [None, *sorted((CHART / "ci").glob("*.yaml"))]:
        name = "default values" if values_file is None else values_file.name
        result = lint(values_file)
        problems = [m for m in result.get("Messages") or [] if m.get("Severity", 0) >= 2]
        if problems or result.get("Errors"):
            failed = True
            for message in problems:
                print(f"FAIL {name}: {SEVERITY.get(message['Severity'])} in {message.get('Path')}: {message.get('Err')}")
            if not problems:
                print(f"FAIL {name}: {result.get('Errors')}")
        else:
            print(f"ok   {name}: {result.get('TotalChartsLinted')} chart linted")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
