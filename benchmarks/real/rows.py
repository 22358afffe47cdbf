"""The cache of benchmark rows: one JSON file per (model, mode), run only where none is cached."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from reorder.inductor.releases import installed_version

__all__ = ["run_rows"]


def run_rows(cases: Sequence[tuple[str, str]], folder: Path, run: Callable[[str, str], dict], again: bool = False,
             merge: Callable[[dict, dict], dict] | None = None, describe: Callable[[dict], str] = lambda row: ""
             ) -> None:
    """Run each ``(model, mode)`` case whose row ``folder/<model>_<mode>.json`` is not cached (every case with
    ``again``) and write the row, with its ``seconds`` and the ``torch`` version it ran under. ``merge(cached, new)`` combines a rerun with the row
    already cached, where there is one. Progress on stderr: a line as a row starts, one as it ends (with
    ``describe(row)``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for k, (model, mode) in enumerate(cases, 1):
        path = folder / f"{model}_{mode}.json"
        if path.exists() and not again:
            continue
        t0 = time.perf_counter()
        print(f"[{k}/{len(cases)}] {model} {mode} ...", file=sys.stderr, flush=True)
        row = run(model, mode)
        row["seconds"] = time.perf_counter() - t0
        row["torch"] = installed_version()
        if merge is not None and path.exists():
            row = merge(json.loads(path.read_text()), row)
        path.write_text(json.dumps(row) + "\n")
        print(f"    {time.perf_counter() - t0:.0f}s  {describe(row)}", file=sys.stderr, flush=True)
