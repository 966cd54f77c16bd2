"""The ``ledger_gc`` package as one zip: what spark-submit's ``py_files`` ships.

Spark's way to give a PySpark application its own code is ``--py-files`` (the Spark
provider's ``py_files``; ``spark.submit.pyFiles`` for a session built in-process): the
zip goes on the driver's ``sys.path`` and to every executor. So a cluster's executors
need only the pinned packages (kazoo, boto3, protobuf, ...), not this project. Built
once per process, named by a hash of its content, in the temporary directory: a worker
builds it once per change of the code, whatever the number of tasks.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

import ledger_gc

#: What the package holds besides code: the .proto, py.typed, the migrations' template.
PACKAGE_SUFFIXES = (".py", ".proto", ".typed", ".mako")

_LIBRARY_ZIP: Path | None = None


def library_zip() -> Path:
    """The zip of ``ledger_gc`` (with the state store's migrations, which
    ``state.store.migrations_dir`` extracts on a driver that imports from it)."""
    global _LIBRARY_ZIP
    if _LIBRARY_ZIP is not None and _LIBRARY_ZIP.exists():
        return _LIBRARY_ZIP
    package = Path(ledger_gc.__file__).resolve().parent
    files = sorted(
        p
        for p in package.rglob("*")
        if p.is_file() and p.suffix in PACKAGE_SUFFIXES and "__pycache__" not in p.parts
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    target = Path(tempfile.gettempdir()) / f"ledger_gc-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, Path("ledger_gc") / path.relative_to(package))
        os.replace(tmp, target)
    _LIBRARY_ZIP = target
    return target
