#!/usr/bin/env python3
"""Check a release's SBOMs against what was built, from the judge's side.

    check-sbom.py binary SBOM.cdx.json CRATES.txt CARGO.lock METADATA.json [--allow-extra NAME]...
    check-sbom.py image SBOM.cdx.json IMAGE.oci.tar
    check-sbom.py extract-binary IMAGE.oci.tar OUT

binary: CRATES.txt lists the crates compiled into the binary, one
`name@version` a line (`cargo tree -e normal --prefix none`, the root
left out); METADATA.json is `cargo metadata`'s output. Every crate must
be a component of the SBOM, once, with that version, the licence its
manifest declares, its purl, and the SHA-256 that Cargo.lock records. A
component that is not compiled in fails, unless named by --allow-extra
(a crate the SBOM tool lists although the build leaves it out).

image: the Debian packages of the image, read from its OCI archive (one
image, linux/amd64: the dpkg status files of its layers, applied in
order with their whiteouts, `var/lib/dpkg/status.d/*` as distroless
keeps them, or `var/lib/dpkg/status`). The SBOM's Debian components must
be exactly those packages, each with its version and a
`pkg:deb/debian/NAME@VERSION?arch=amd64|all` purl.

Exits 1 with every problem found, 0 with a one-line summary.
"""

import io
import json
import posixpath
import re
import sys
import tarfile
import tomllib
from urllib.parse import quote, unquote


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


def normal_licence(text):
    """A licence expression in one form: the old `A/B` is `A OR B`, and
    the order of an OR's terms does not matter."""
    text = re.sub(r"\s*/\s*", " OR ", text.strip())
    text = re.sub(r"\s+", " ", text)
    if "(" not in text and " AND " not in text and " WITH " not in text:
        return " OR ".join(sorted(t.strip() for t in text.split(" OR ")))
    return text


def check_binary(sbom, crates_file, lock_file, metadata_file, allow_extra):
    _, components = load_components(sbom)
    with open(lock_file, "rb") as f:
        lock = tomllib.load(f)
    checksums = {(p["name"], p["version"]): p.get("checksum") for p in lock.get("package", [])}
    with open(metadata_file, encoding="utf-8") as f:
        declared = {(p["name"], p["version"]): p.get("license") for p in json.load(f)["packages"]}
    with open(crates_file, encoding="utf-8") as f:
        compiled = {tuple(line.strip().split("@", 1)) for line in f if line.strip()}
    problems = []
    if not compiled:
        problems.append("no crate is compiled in: the crate list is empty")
    seen = {}
    for c in components:
        key = (c.get("name"), c.get("version"))
        crate = f"{key[0]}@{key[1]}"
        if key in seen:
            problems.append(f"{crate}: listed twice")
        seen[key] = c
        if key not in checksums:
            problems.append(f"{crate}: in the SBOM, not in Cargo.lock")
            continue
        if key not in compiled and key[0] not in allow_extra:
            problems.append(f"{crate}: in the SBOM, not compiled in")
        if c.get("purl") != f"pkg:cargo/{key[0]}@{key[1]}":
            problems.append(f"{crate}: purl {c.get('purl')!r}")
        want = checksums[key]
        hashes = {h.get("alg"): h.get("content") for h in c.get("hashes", [])}
        if want and hashes.get("SHA-256") != want:
            problems.append(f"{crate}: SHA-256 {hashes.get('SHA-256')!r}, Cargo.lock {want!r}")
        licences = licences_of(c)
        if not licences:
            problems.append(f"{crate}: no licence")
        elif declared.get(key) and [normal_licence(l) for l in licences] != [normal_licence(declared[key])]:
            problems.append(f"{crate}: licence {licences}, its manifest {declared[key]!r}")
    for key in sorted(compiled - set(seen)):
        problems.append(f"{key[0]}@{key[1]}: compiled in, not in the SBOM")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    extra = sorted(f"{n}@{v}" for n, v in set(seen) - compiled)
    print(f"binary SBOM: the {len(compiled)} crates compiled in, each once, with its version, its "
          f"manifest's licence, purl and Cargo.lock's checksum"
          + (f"; listed though not compiled in: {', '.join(extra)}" if extra else ""))


def stanzas(text):
    """The (Package, Version, Architecture) of each stanza of a dpkg
    status file."""
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if line[:1].isspace() or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if "Package" in fields and "Version" in fields:
            yield fields["Package"], fields["Version"], fields.get("Architecture", "")


def is_status(name):
    return name.startswith("var/lib/dpkg/status.d/") or name == "var/lib/dpkg/status"


def image_layers(archive):
    """Each layer of the one linux/amd64 image of an OCI archive, in
    order, as an open tar file."""
    with tarfile.open(archive) as outer:
        index = json.load(outer.extractfile("index.json"))
        manifests = index.get("manifests", [])
        if len(manifests) != 1:
            sys.exit(f"{archive}: {len(manifests)} manifests, one image expected")

        def blob(digest):
            return outer.extractfile("blobs/" + digest.replace(":", "/")).read()

        manifest = json.loads(blob(manifests[0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        if (config.get("os"), config.get("architecture")) != ("linux", "amd64"):
            sys.exit(f"{archive}: an image for {config.get('os')}/{config.get('architecture')}, not linux/amd64")
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as tar:
                yield tar


def image_packages(archive):
    """The Debian packages of the image of an OCI archive, from its
    layers' dpkg status files, applied in order as a container runtime
    applies them (a whiteout removes a file, an opaque whiteout a
    directory's earlier contents). A status file that is a link is
    refused rather than followed."""
    files = {}
    for tar in image_layers(archive):
        for member in tar:
            name = posixpath.normpath(member.name.lstrip("./")).lstrip("/")
            directory, base = posixpath.split(name)
            if base == ".wh..wh..opq":
                for path in [p for p in files if p.startswith(directory + "/")]:
                    del files[path]
                continue
            if base.startswith(".wh."):
                files.pop(posixpath.join(directory, base[4:]), None)
                continue
            if not is_status(name) or member.isdir():
                continue
            if not member.isfile():
                sys.exit(f"{archive}: {name} is a link, not a status file: refused")
            files[name] = tar.extractfile(member).read().decode("utf-8", "replace")
    packages = set()
    for text in files.values():
        packages.update(stanzas(text))
    return sorted(packages)


def check_image(sbom, archive):
    _, components = load_components(sbom)
    packages = image_packages(archive)
    problems = []
    if not packages:
        problems.append("the image holds no Debian package: nothing was read")
    want = {(name, version): arch for name, version, arch in packages}
    listed = set()
    for c in components:
        purl = c.get("purl") or ""
        if not purl.startswith("pkg:deb/"):
            continue
        key = (c.get("name"), c.get("version"))
        if key in listed:
            problems.append(f"{key[0]} {key[1]}: listed twice")
        listed.add(key)
        if key not in want:
            problems.append(f"{key[0]} {key[1]}: in the SBOM, not in the image")
            continue
        head, _, query = purl.partition("?")
        arch = dict(p.partition("=")[::2] for p in query.split("&") if p).get("arch")
        if unquote(head) != f"pkg:deb/debian/{key[0]}@{key[1]}" or arch != want[key] or arch not in ("amd64", "all"):
            problems.append(f"{key[0]} {key[1]}: purl {purl!r}, want pkg:deb/debian/{quote(key[0])}@{quote(key[1])}?arch={want[key]}")
    for name, version in sorted(set(want) - listed):
        problems.append(f"{name} {version}: in the image, not in the SBOM")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"image SBOM: exactly the image's {len(packages)} Debian packages, each with its version and purl")


def extract_binary(archive, out):
    """Write the image's /usr/local/bin/ownerguard (its last layer's copy)
    to `out`, so that what it says of itself can be compared with the
    checkout the SBOMs describe."""
    found = None
    for tar in image_layers(archive):
        for member in tar:
            if member.isfile() and member.name.lstrip("./") == "usr/local/bin/ownerguard":
                found = tar.extractfile(member).read()
    if found is None:
        sys.exit(f"{archive}: no /usr/local/bin/ownerguard")
    with open(out, "wb") as f:
        f.write(found)


def main():
    args = sys.argv[1:]
    allow_extra = set()
    while "--allow-extra" in args:
        i = args.index("--allow-extra")
        allow_extra.add(args[i + 1])
        del args[i:i + 2]
    if len(args) == 5 and args[0] == "binary":
        check_binary(*args[1:], allow_extra)
    elif len(args) == 3 and args[0] == "image":
        check_image(*args[1:])
    elif len(args) == 3 and args[0] == "extract-binary":
        extract_binary(*args[1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
