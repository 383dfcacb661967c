"""A PEP 517 build backend for `pip install ./python`, offline.

setuptools would do this, but pip runs a backend in an isolated
environment it fills from PyPI, which this project never reaches; a
backend with no requirements needs nothing. It builds the extension with
the repository's Makefile for the interpreter pip runs and writes the
wheel (a zip with a dist-info directory, PEP 427) itself.
"""

import base64
import hashlib
import os
import re
import subprocess
import sys
import sysconfig
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
ROOT = os.path.dirname(HERE)
PKG = os.path.join(HERE, "inflight")
NAME = "inflight"


def _version():
    with open(os.path.join(ROOT, "src", "core", "err.c"), encoding="utf-8") as f:
        m = re.search(r'IFL_VERSION_STRING "([0-9.]+)"', f.read())
    if not m:
        raise RuntimeError("inflight: cannot find the version in src/core/err.c")
    return m.group(1)


def _tag():
    impl = sys.implementation.name[:2] if sys.implementation.name == "cpython" else "py"
    ver = f"{sys.version_info.major}{sys.version_info.minor}"
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return f"{impl}{ver}", f"{impl}{ver}", plat


def _build_extension():
    if not os.path.exists(os.path.join(ROOT, "Makefile")):
        raise RuntimeError("inflight: build from the repository's python/ directory (the "
                           "extension is built by its Makefile)")
    subprocess.run(["make", "-C", ROOT, "-j2", "python", f"PYTHON={sys.executable}"],
                   check=True, stdout=sys.stderr)


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            "Summary: An in-flight batching LLM executor for CPUs (GGUF models)\n"
            "Requires-Python: >=3.9\n")


def _files():
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    out = []
    for name in sorted(os.listdir(PKG)):
        if name.endswith(".py") or name in ("libinflight.so", "py.typed", "_core" + ext):
            out.append(name)
    if "_core" + ext not in out or "libinflight.so" not in out:
        raise RuntimeError(f"inflight: make python did not produce _core{ext} and "
                           "libinflight.so in python/inflight")
    return out


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    di = f"{NAME}-{_version()}.dist-info"
    os.makedirs(os.path.join(metadata_directory, di), exist_ok=True)
    with open(os.path.join(metadata_directory, di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return di


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _build_extension()
    py, abi, plat = _tag()
    ver = _version()
    whl = f"{NAME}-{ver}-{py}-{abi}-{plat}.whl"
    di = f"{NAME}-{ver}.dist-info"
    records = []
    path = os.path.join(wheel_directory, whl)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in _files():
            with open(os.path.join(PKG, name), "rb") as f:
                data = f.read()
            arc = f"{NAME}/{name}"
            info = zipfile.ZipInfo(arc)
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            records.append(_record_line(arc, data))
        meta = {
            "METADATA": _metadata().encode(),
            "WHEEL": (f"Wheel-Version: 1.0\nGenerator: inflight_build\nRoot-Is-Purelib: false\n"
                      f"Tag: {py}-{abi}-{plat}\n").encode(),
        }
        for name, data in meta.items():
            z.writestr(f"{di}/{name}", data)
            records.append(_record_line(f"{di}/{name}", data))
        records.append(f"{di}/RECORD,,")
        z.writestr(f"{di}/RECORD", "\n".join(records) + "\n")
    return whl
