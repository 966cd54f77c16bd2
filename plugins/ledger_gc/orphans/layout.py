"""Where an orphan cycle keeps its files in the state dir, and how they are written.

(The registry and the run summaries are in the state store: registry.py, run_log.py.)

::

    <state_dir>/orphans/
      runs/<run>/                  one folder per run: a re-run of the same run id
        snapshot/                    overwrites this folder's files and nothing else
        snapshot.json
        scan/
        offload-scan/                the offload bucket's objects (tiered storage on)
        scan.json
        diff/candidates.parquet
        diff.json
        phases.json
        delete.json
        report.json

``<run>`` is the run id made safe for a path (Airflow's ``manual__2026-01-01T00:00:00+00:00``
has characters Hadoop paths reject). Every Parquet output has a JSON *manifest* beside it,
written atomically after the data: a step reads a previous step's output only if its
manifest says ``complete``. A step that is re-run removes its manifest first, so a crash
half-way through a re-run leaves "no output", never a half-written one that looks whole
(DESIGN.md: a partial snapshot is never used).
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

from ledger_gc.errors import LedgerGcError

ORPHANS_DIR = "orphans"
RUNS_DIR = "runs"
REGISTRY_FILE = "registry.sqlite"

SNAPSHOT = "snapshot"
SCAN = "scan"
#: The offload bucket's listing, written by the scan step beside ``scan/``.
OFFLOAD_SCAN = "offload-scan"
DIFF = "diff"
PHASES = "phases"
DELETE = "delete"
REPORT = "report"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class MissingStepOutputError(LedgerGcError):
    """A step needs the output of an earlier step of the same run, and it is not there."""


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

    def manifest(self, step: str) -> Path:
        return self.root / f"{step}.json"

    @property
    def candidates(self) -> Path:
        return self.root / DIFF / "candidates.parquet"

    # --- manifests ---------------------------------------------------------------------

    def start_step(self, step: str, *, keep_data: bool = False) -> None:
        """Forget an earlier attempt of ``step`` in this run (manifest first, then data)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.manifest(step).unlink(missing_ok=True)
        if not keep_data and self.data(step).exists():
            shutil.rmtree(self.data(step))

    def write_manifest(self, step: str, manifest: dict[str, Any]) -> None:
        """Write ``<step>.json`` atomically (temp file, fsync, rename)."""
        self.root.mkdir(parents=True, exist_ok=True)
        body = {"run_id": self.run_id, "step": step, "complete": True, **manifest}
        write_json_atomic(self.manifest(step), body)

    def read_manifest(self, step: str, *, required: bool = True) -> dict[str, Any] | None:
        """A step's manifest, or None / MissingStepOutputError if it did not complete."""
        path = self.manifest(step)
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {}
        except ValueError as exc:
            raise MissingStepOutputError(
                f"{path} is not valid JSON ({exc}); re-run the step"
            ) from exc
        if data.get("complete") and data.get("run_id") == self.run_id:
            return data
        if not required:
            return None
        raise MissingStepOutputError(
            f"the {step} step of run {self.run_id} has no complete output ({path}); run it "
            "(again) before the steps that follow it"
        )


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
