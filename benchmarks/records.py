"""What the benchmarks share: JSON-lines records (appended and flushed one fit at a time,
so an interrupted run keeps what it finished), the commit and thread count they ran with,
seed ranges, medians, and the call of a peer in its own environment."""

import json
import math
import os
import statistics
import subprocess
import sys

__all__ = ["append", "call_peer", "commit", "latest", "median", "read_records", "run_jobs",
           "seeds", "set_threads", "threads"]


def read_records(path):
    """Every record of a JSON-lines file (a truncated last line is skipped with a note)."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as fh:
        for i, line in enumerate(fh, 1):
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    print(f"{path}:{i}: skipping a truncated line", file=sys.stderr)
    return out


def latest(recs, key):
    """The last record of each ``key(record)``: a rerun replaces earlier ones.

    :returns: a dict from key to record, in first-seen order.
    """
    out = {}
    for r in recs:
        out[key(r)] = r
    return out


def append(fh, record):
    """Write one record and flush it."""
    fh.write(json.dumps(record) + "\n")
    fh.flush()


def commit():
    """The repository's commit (with ``+`` when tracked files have changes), or ``None``."""
    try:
        root = os.path.dirname(os.path.abspath(__file__))
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, text=True, capture_output=True).stdout.strip()
        return head + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def run_jobs(path, jobs, key, threads=1):
    """Run each ``(meta, job)`` of ``jobs`` whose ``key(meta)`` ``path`` does not hold yet,
    one after the other with ``threads`` torch threads, and append its record (``meta``,
    what ``job()`` returns, the thread count and the commit) as soon as it is done, printed
    too: an interrupted run keeps what it finished and the next one resumes."""
    set_threads(threads)
    head = commit()
    done = {key(r) for r in read_records(path)}
    with open(path, "a") as fh:
        for meta, job in jobs:
            if key(meta) in done:
                continue
            rec = dict(meta)
            rec.update(job())
            rec.update(threads=threads, commit=head)
            append(fh, rec)
            print({k: (round(v, 6) if isinstance(v, float) else v) for k, v in rec.items()
                   if k != "commit"}, flush=True)


def set_threads(n):
    """``n`` torch threads for this process and for every ``pk.fit`` in it (whose default,
    ``threads="auto"``, would otherwise run small problems with one): ``PIDKL_THREADS``."""
    import torch
    torch.set_num_threads(int(n))
    os.environ["PIDKL_THREADS"] = str(int(n))


def threads():
    """The number of torch threads this process uses."""
    import torch
    return torch.get_num_threads()


def seeds(text):
    """``"0-39"`` or ``"1,4,7"`` as a list of ints."""
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def median(xs):
    """The median of the finite numbers in ``xs`` (NaN when there are none)."""
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else float("nan")


def call_peer(python, spec, peer="numpyro_ode.py", env=None):
    """Run ``benchmarks/peers/<peer>`` with interpreter ``python`` (or ``Rscript``) on problem
    ``spec``, with ``env`` added to the environment: its JSON answer, or ``{"refused":
    why}``."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", peer)
    done = subprocess.run([python, script], input=json.dumps(spec), capture_output=True,
                          text=True, env=dict(os.environ, **(env or {})))
    if done.returncode:
        tail = done.stderr.strip().splitlines()
        return {"refused": "peer failed: " + (tail[-1][:200] if tail else "no output")}
    return json.loads(done.stdout)
