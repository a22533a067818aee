"""``edgebert batch``'s output folder: Parquet parts written atomically, and the record that makes a run resumable.

The folder holds ``part-00000.parquet`` ... (the input's columns plus the task's result columns, one part per
``part_rows`` input rows, in input order), ``_batch.json`` (the job: bundle, task, input fingerprint, columns,
part size; and every part written: its rows and sha256) and ``_metrics.jsonl`` (one line per part written, one
per run). A part is written to a temp file and renamed into place, then recorded; a run killed at any moment
leaves whole parts only, and ``resume`` rewrites just the parts the record does not vouch for (missing, or a
file whose sha256 is not the recorded one). The folder follows ``files.outdirs``' rule: a new or empty folder,
or this command's own with ``resume`` / ``overwrite`` (which deletes only these files, and refuses a folder
holding anything else, naming it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from edgebert.errors import CheckpointError
from edgebert.files.atomic import atomic_path, write_json
from edgebert.files.hashing import sha256_file
from edgebert.files.outdirs import OutputDir

COMMAND = "batch"
RECORD = "_batch.json"      # "_" and "." files: not data to pyarrow, Spark or Ray readers
METRICS = "_metrics.jsonl"
PART_GLOB = "part-*.parquet"
FORMAT = 1
# what must be the same for a run to resume another (the rest of the job may change: engine, workers ...)
# "bundle_manifest_sha256": the same model (a bundle replaced at the same path is another); "input": the same
# content (tables.fingerprint hashes it)
SAME_JOB = ("task", "input", "columns", "part_rows", "parts", "rows", "precision", "aggregation", "bundle",
            "bundle_manifest_sha256")


# how a message names the job's fields (the rest by their own names)
_NAMES = {"bundle_manifest_sha256": ("bundle", "its manifest's sha256 "), "input": ("input", "its files ")}


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


class BatchOutput:
    """The output folder of one ``batch`` run (checked on construction, written by ``open`` / ``write_part``)."""

    def __init__(self, path: str | os.PathLike, *, resume: bool = False, overwrite: bool = False):
        self.path = Path(path)
        self.dir = OutputDir(self.path, COMMAND, names=(PART_GLOB, RECORD, METRICS), resume=resume,
                             overwrite=overwrite)
        self.record: dict[str, Any] = {}
        self.redone: list[str] = []        # parts the record vouched for whose file was missing or changed

    @property
    def resuming(self) -> bool:
        return self.dir.state == "resume"

    def previous_job(self) -> dict[str, Any]:
        """The job a resumed folder records (before ``open``)."""
        try:
            record = json.loads((self.path / RECORD).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"cannot resume: {self.path / RECORD} is missing or unreadable",
                                  "start again with --overwrite") from exc
        if not isinstance(record, dict) or record.get("format") != FORMAT or "job" not in record:
            raise CheckpointError(f"cannot resume: {self.path / RECORD} is not a batch record of this edgebert",
                                  "start again with --overwrite")
        return record

    def open(self, job: dict[str, Any]) -> set[int]:
        """Start or resume: the indices of the parts already written and verified. A resumed job must be the
        recorded one (``CheckpointError`` naming what differs). Called inside ``writing()``."""
        if self.resuming:
            record = self.previous_job()
            before = record["job"]
            differ = [k for k in SAME_JOB if before.get(k) != job.get(k)]
            if "bundle_manifest_sha256" in differ and "bundle_manifest_sha256" not in before:
                raise CheckpointError(f"cannot resume {self.path}: its record predates bundle fingerprints, so it "
                                      "cannot tell whether the bundle is the one its parts came from",
                                      "start again with --overwrite")
            if differ:
                changes = "; ".join(f"{_NAMES.get(k, (k, ''))[0]}: {_NAMES.get(k, (k, ''))[1]}was "
                                    f"{_short(before.get(k))}, now {_short(job.get(k))}" for k in differ)
                raise CheckpointError(f"cannot resume {self.path}: its run had another {changes}",
                                      "run the same job again, or start again with --overwrite")
            self.record = {"format": FORMAT, "job": job, "parts": dict(record.get("parts", {}))}
            done = set()
            for key, entry in sorted(self.record["parts"].items()):
                file = self.path / part_name(int(key))
                if file.is_file() and sha256_file(file) == entry.get("sha256"):
                    done.add(int(key))
                else:
                    self.redone.append(file.name)
                    del self.record["parts"][key]
            write_json(self.path / RECORD, self.record)
            return done
        self.record = {"format": FORMAT, "job": job, "parts": {}}
        write_json(self.path / RECORD, self.record)
        return set()

    def write_part(self, index: int, table) -> str:
        """Write part ``index`` (temp file, then rename), then record it; its sha256."""
        import pyarrow.parquet as pq

        target = self.path / part_name(index)
        with atomic_path(target) as tmp:
            pq.write_table(table, tmp)
        digest = sha256_file(target)
        self.record["parts"][str(index)] = {"rows": table.num_rows, "sha256": digest}
        write_json(self.path / RECORD, self.record)
        return digest

    def log(self, line: dict[str, Any]) -> None:
        with open(self.path / METRICS, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")

    def written(self) -> bool:
        """The folder holds at least one recorded part (a failed run keeps it, to resume)."""
        return bool(self.record.get("parts"))


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."
