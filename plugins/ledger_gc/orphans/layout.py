"""Run ids, and the run folders in the state dir (empty since the survey keeps its
snapshot and scans on its executors, ``spark.session.hold``; still removed at its end, and
those of older versions pruned).

(What crosses steps is in the state store: run_steps.py; the registry and the run
summaries too: registry.py, run_log.py.)

``<run>`` (``<state_dir>/orphans/runs/<run>/``) is the run id made safe for a path
(Airflow's ``manual__2026-01-01T00:00:00+00:00`` has characters Hadoop paths reject).
Older versions kept the survey's Parquet datasets there; nothing reads them now.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ORPHANS_DIR = "orphans"
RUNS_DIR = "runs"

SNAPSHOT = "snapshot"
SCAN = "scan"
#: The offload bucket's listing, written by the scan step beside ``scan/``.
OFFLOAD_SCAN = "offload-scan"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def new_run_id(prefix: str = "cli", now_ms: int | None = None) -> str:
    """A run id for a cycle started outside Airflow: ``cli-20260101T120000Z-1a2b``."""
    now = (now_ms if now_ms is not None else int(time.time() * 1000)) / 1000
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return f"{prefix}-{stamp}-{secrets.token_hex(2)}"


def run_dir_name(run_id: str) -> str:
    """``run_id`` as one safe path segment; a short hash keeps altered ids distinct."""
    if not run_id:
        raise ValueError("run id is empty")
    safe = _UNSAFE.sub("_", run_id)
    if safe == run_id and safe not in (".", ".."):
        return safe
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    return f"{safe}-{digest}"


@dataclass(frozen=True)
class RunPaths:
    """The files of one run under ``<state_dir>/orphans/runs/<run>/``."""

    state_dir: Path
    run_id: str

    @property
    def orphans_dir(self) -> Path:
        return Path(self.state_dir).resolve() / ORPHANS_DIR

    @property
    def root(self) -> Path:
        return self.orphans_dir / RUNS_DIR / run_dir_name(self.run_id)

    def data(self, step: str) -> Path:
        """The Parquet dataset (a directory) of a Spark step."""
        return self.root / step

    def data_uri(self, step: str) -> str:
        """``file://`` URI of a step's dataset: a bare path would go to a cluster's
        default file system (HDFS) instead of the state dir."""
        return self.data(step).as_uri()

    def remove(self) -> None:
        """Remove the run's scratch (its end: nothing else reads it)."""
        shutil.rmtree(self.root, ignore_errors=True)


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True, default=str)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def prune_runs(state_dir: Path, keep: int, current: str | None = None) -> list[Path]:
    """Remove all but the newest ``keep`` run folders (never ``current``'s).

    Scan outputs of a large store are big (a listing of every object); the registry and
    the run log keep what matters, so old folders are only a debugging aid.
    """
    runs = Path(state_dir).resolve() / ORPHANS_DIR / RUNS_DIR
    if not runs.is_dir():
        return []
    keep_name = run_dir_name(current) if current else None
    folders = sorted(
        (p for p in runs.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True
    )
    removed = []
    for folder in folders[keep:]:
        if folder.name == keep_name:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
