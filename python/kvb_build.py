"""kvb_build.py — a minimal PEP 517 build backend for the kvbound bindings:
a pure-Python wheel (py3-none-any) of the kvbound package, written with the
standard library only, so `pip install ./python` works without network."""
import base64
import hashlib
import os
import tarfile
import zipfile

NAME, VERSION = "kvbound", "0.2.0"
HERE = os.path.dirname(os.path.abspath(__file__))
DIST = "%s-%s.dist-info" % (NAME, VERSION)
METADATA = "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: Python bindings for libkvbound\nRequires-Python: >=3.8\n" % (NAME, VERSION)
WHEEL = "Wheel-Version: 1.0\nGenerator: kvb_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files():
    root = os.path.join(HERE, NAME)
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(dirpath, f)
                yield full, os.path.relpath(full, HERE).replace(os.sep, "/")


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, DIST)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(METADATA)
    with open(os.path.join(d, "WHEEL"), "w") as f:
        f.write(WHEEL)
    return DIST


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "%s-%s-py3-none-any.whl" % (NAME, VERSION)
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for full, arc in _package_files():
            with open(full, "rb") as f:
                data = f.read()
            z.writestr(arc, data)
            records.append(_record_line(arc, data))
        for fname, text in (("METADATA", METADATA), ("WHEEL", WHEEL)):
            arc = "%s/%s" % (DIST, fname)
            z.writestr(arc, text)
            records.append(_record_line(arc, text.encode()))
        records.append("%s/RECORD,," % DIST)
        z.writestr("%s/RECORD" % DIST, "\n".join(records) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, VERSION)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ("pyproject.toml", "kvb_build.py"):
            t.add(os.path.join(HERE, rel), arcname="%s/%s" % (base, rel))
        for full, arc in _package_files():
            t.add(full, arcname="%s/%s" % (base, arc))
        info = tarfile.TarInfo("%s/PKG-INFO" % base)
        data = METADATA.encode()
        info.size = len(data)
        import io
        t.addfile(info, io.BytesIO(data))
    return name
