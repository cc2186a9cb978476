#!/usr/bin/env python3
"""Check a release's SBOMs against what was built, from the judge's side.

    check-sbom.py binary SBOM.cdx.json CRATES.txt CARGO.lock
    check-sbom.py image SBOM.cdx.json IMAGE.oci.tar

binary: CRATES.txt lists the crates compiled into the binary, one
`name@version` a line (`cargo tree -e normal --prefix none`, the root
left out); every one must be a component of the SBOM with that version,
a licence, its purl, and the SHA-256 that Cargo.lock records for it. A
component that Cargo.lock does not hold fails too.

image: the Debian packages of the image, read from its OCI archive (the
dpkg status files of its layers, `var/lib/dpkg/status.d/*` as distroless
keeps them, or `var/lib/dpkg/status`); every one must be a component of
the SBOM with that version and a `pkg:deb/debian/` purl.

Exits 1 with every problem found, 0 with a one-line summary.
"""

import io
import json
import sys
import tarfile
import tomllib


def load_components(path):
    with open(path, encoding="utf-8") as f:
        bom = json.load(f)
    if bom.get("bomFormat") != "CycloneDX":
        sys.exit(f"{path}: not a CycloneDX document")
    return bom, bom.get("components", [])


def licences_of(component):
    out = []
    for entry in component.get("licenses", []):
        if "expression" in entry:
            out.append(entry["expression"])
        elif "license" in entry:
            lic = entry["license"]
            out.append(lic.get("id") or lic.get("name") or "")
    return [l for l in out if l]


def check_binary(sbom, crates_file, lock_file):
    _, components = load_components(sbom)
    with open(lock_file, "rb") as f:
        lock = tomllib.load(f)
    checksums = {
        (p["name"], p["version"]): p.get("checksum") for p in lock.get("package", [])
    }
    by_key = {}
    problems = []
    for c in components:
        key = (c.get("name"), c.get("version"))
        by_key[key] = c
        if key not in checksums:
            problems.append(f"{key[0]}@{key[1]}: in the SBOM, not in Cargo.lock")
    with open(crates_file, encoding="utf-8") as f:
        compiled = sorted({line.strip() for line in f if line.strip()})
    for crate in compiled:
        name, _, version = crate.partition("@")
        c = by_key.get((name, version))
        if c is None:
            problems.append(f"{crate}: compiled in, not in the SBOM")
            continue
        if not licences_of(c):
            problems.append(f"{crate}: no licence")
        if c.get("purl") != f"pkg:cargo/{name}@{version}":
            problems.append(f"{crate}: purl {c.get('purl')!r}")
        want = checksums.get((name, version))
        hashes = {h.get("alg"): h.get("content") for h in c.get("hashes", [])}
        if want and hashes.get("SHA-256") != want:
            problems.append(f"{crate}: SHA-256 {hashes.get('SHA-256')!r}, Cargo.lock {want!r}")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    extra = len(components) - len(compiled)
    print(f"binary SBOM: {len(compiled)} crates compiled in, each with its version, licence, purl "
          f"and Cargo.lock's checksum ({extra} more listed that Cargo.lock holds)")


def stanzas(text):
    """The (Package, Version) of each stanza of a dpkg status file."""
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if line[:1].isspace() or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if "Package" in fields and "Version" in fields:
            yield fields["Package"], fields["Version"]


def image_packages(archive):
    """The Debian packages of the image in an OCI archive, from its layers'
    dpkg status files (a later layer's file replaces an earlier one's)."""
    files = {}
    with tarfile.open(archive) as outer:
        index = json.load(outer.extractfile("index.json"))
        manifest_digest = index["manifests"][0]["digest"]

        def blob(digest):
            return outer.extractfile("blobs/" + digest.replace(":", "/")).read()

        manifest = json.loads(blob(manifest_digest))
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as tar:
                for member in tar:
                    name = member.name.lstrip("./")
                    if member.isfile() and (
                        name.startswith("var/lib/dpkg/status.d/") or name == "var/lib/dpkg/status"
                    ):
                        files[name] = tar.extractfile(member).read().decode("utf-8", "replace")
    packages = set()
    for text in files.values():
        packages.update(stanzas(text))
    return sorted(packages)


def check_image(sbom, archive):
    _, components = load_components(sbom)
    debs = {}
    for c in components:
        purl = c.get("purl") or ""
        if purl.startswith("pkg:deb/debian/"):
            debs.setdefault(c.get("name"), set()).add(c.get("version"))
    packages = image_packages(archive)
    problems = []
    for name, version in packages:
        if version not in debs.get(name, set()):
            problems.append(f"{name} {version}: in the image, not in the SBOM "
                            f"(SBOM: {sorted(debs.get(name, set())) or 'absent'})")
    if not packages:
        problems.append("the image holds no Debian package: nothing was read")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"image SBOM: its {len(packages)} Debian packages, each with its version")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "binary":
        check_binary(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "image":
        check_image(*sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
