"""A results folder of ``pidkl reproduce``: ``results.json`` and the per-fit log
``records.jsonl``, read back merged, written so that a kill at any moment keeps every
finished fit (an atomic replace, a line flushed and synced per fit)."""

import json
import os
from pathlib import Path

import numpy as np

__all__ = ["read_records"]


def _record_key(record):
    """What makes two records the same fit: experiment, method, seed, steps and the
    cross-validation score when one was used."""
    hyper = record.get("hyper", {})
    return (record["experiment"], record["method"], int(record["seed"]),
            hyper.get("steps"), hyper.get("cv_score"))


def read_records(out):
    """Every record in ``out``: ``results.json`` merged with the per-fit log
    ``records.jsonl`` (one line per finished fit; a later line replaces an earlier record of
    the same fit). A last line cut short by a kill is ignored; anything else unreadable
    raises a ``ValueError`` naming the file."""
    out = Path(out)
    merged = {}
    path = out / "results.json"
    if path.exists():
        try:
            records = json.loads(path.read_text())
            if not isinstance(records, list):
                raise ValueError("not a list of records")
            for r in records:
                merged[_record_key(r)] = r
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"Expected {path} to hold a JSON list of records; it cannot be "
                             f"read ({e}); move it away or pass another --out") from None
    log = out / "records.jsonl"
    if log.exists():
        lines = log.read_text().split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                merged[_record_key(r)] = r
            except (ValueError, KeyError, TypeError) as e:
                if i >= len(lines) - 2:   # the last line, cut short by a kill: not a record
                    continue
                raise ValueError(f"Expected one JSON record per line in {log}; line {i + 1} "
                                 f"cannot be read ({e})") from None
    return list(merged.values())


def _write_json_atomic(path, obj):
    """Write ``obj`` as JSON to ``path`` through a temporary file and ``os.replace``: a kill
    at any moment leaves the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1, default=_json_default)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _append_record(log, record):
    with open(log, "a") as fh:
        fh.write(json.dumps(record, default=_json_default) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _check_writable(out):
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"Expected a writable output folder; {out} is not ({e.strerror})") \
            from None


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
