"""Every ```python block of README.md and docs/*.md runs as written.

Each block runs alone, in a fresh interpreter, in an empty temporary folder,
with this checkout first on ``PYTHONPATH``: a reader copies one block, so a
block must import what it uses. Blocks are read when the tests are
collected, so the test follows whatever the documents say.

Stand-ins. Where a block names the reader's own objects, it runs after a
preamble that defines exactly those of them it uses without defining them
itself (nothing else, not even ``torch``, leaks into its namespace):

* ``model``: a small MLP, ``nn.Sequential(Linear(16, 32), ReLU(), Linear(32, 4))``;
* ``x`` and ``batch``: ``torch.randn(8, 16)``;
* ``train_step(batch)``: forward, ``.sum().backward()`` and an SGD step on ``model``;
* ``"graph.json"``: a copy of the bundled ``mlp_train_1.json`` in the folder.

A block that cannot run anywhere is marked in the Markdown by an HTML comment
on the line before its fence, with the reason: ``<!-- snippet: skip (reason) -->``.
Blocks that call ``torch.compile`` are marked ``slow``.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import GRAPHS, ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(\s*)```python\s*$")
SKIP = re.compile(r"^\s*<!--\s*snippet:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->\s*$")

STAND_INS = {
    "model": "torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))",
    "x": "torch.randn(8, 16)",
    "batch": "torch.randn(8, 16)",
    "train_step": "train_step",
}
PREAMBLE = '''\
def _stand_ins(wanted):
    import torch

    torch.manual_seed(0)
    model = {model}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_step(batch):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    made = {{"model": model, "x": {x}, "batch": {batch}, "train_step": {train_step}}}
    return {{name: made[name] for name in wanted}}


globals().update(_stand_ins({wanted!r}))
del _stand_ins
'''


@dataclass(frozen=True)
class Snippet:
    """One ```python block: where it is, its code, and the reason it is skipped (None if it runs)."""

    document: Path
    line: int
    code: str
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def snippets(document: Path) -> list[Snippet]:
    """The ```python blocks of ``document``, in order, with the skip comment on the line before each, if any."""
    lines = document.read_text().splitlines()
    found = []
    k = 0
    while k < len(lines):
        fence = FENCE.match(lines[k])
        if fence is None:
            k += 1
            continue
        indent = fence.group(1)
        end = next(j for j in range(k + 1, len(lines)) if lines[j].strip() == "```")
        code = "\n".join(line.removeprefix(indent) for line in lines[k + 1:end]) + "\n"
        skip = SKIP.match(lines[k - 1]) if k else None
        found.append(Snippet(document, k + 1, code, skip.group("reason").strip() if skip else None))
        k = end + 1
    return found


def free_names(code: str) -> set[str]:
    """Names the code reads but never binds (assignment, import, def, class, loop or comprehension target)."""
    tree = ast.parse(code)
    read, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound


def program(snippet: Snippet) -> str:
    """The block as written, after the preamble that defines the stand-ins it uses (none: the block alone)."""
    wanted = sorted(free_names(snippet.code) & set(STAND_INS))
    if not wanted:
        return snippet.code
    return PREAMBLE.format(wanted=wanted, **STAND_INS) + "\n" + snippet.code


ALL = [s for document in DOCUMENTS for s in snippets(document)]


def run_snippet(snippet: Snippet, folder: Path, **env) -> subprocess.CompletedProcess:
    """``snippet`` as a reader runs it: its program written to ``folder``, run there by a fresh interpreter with
    this checkout first on ``PYTHONPATH`` (and ``env`` added to the environment)."""
    script = folder / "snippet.py"
    script.write_text(program(snippet))
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(script)], cwd=folder, env={**os.environ, "PYTHONPATH": path, **env},
                          capture_output=True, text=True, timeout=900)


def test_the_documents_have_snippets_and_every_skip_says_why():
    assert {s.document.name for s in ALL} >= {"README.md", "inductor.md"}
    assert all(s.skip is None or s.skip for s in ALL)


def test_the_extractor_reads_fences_skips_and_free_names(tmp_path):
    document = tmp_path / "doc.md"
    document.write_text("text\n```python\nimport torch\nprint(torch.ones(1), model(x))\n```\n\n"
                        "<!-- snippet: skip (needs a GPU) -->\n```python\ny = 1\n```\n```\nnot python\n```\n")
    first, second = snippets(document)
    assert (first.line, first.code, first.skip) == (2, "import torch\nprint(torch.ones(1), model(x))\n", None)
    assert (second.line, second.code, second.skip) == (8, "y = 1\n", "needs a GPU")
    assert free_names(first.code) == {"print", "model", "x"}
    assert program(second) == "y = 1\n"
    assert "_stand_ins(['model', 'x'])" in program(first)


@pytest.mark.parametrize(
    "snippet",
    [pytest.param(s, id=s.name, marks=[pytest.mark.slow] if "torch.compile" in s.code else [])
     for s in ALL],
)
def test_snippet_runs_as_written(snippet, tmp_path):
    if snippet.skip:
        pytest.skip(snippet.skip)
    if '"graph.json"' in snippet.code:
        shutil.copy(GRAPHS / "mlp_train_1.json", tmp_path / "graph.json")
    done = run_snippet(snippet, tmp_path)
    assert done.returncode == 0, f"{snippet.name} failed:\n{done.stderr[-4000:]}"


@pytest.mark.slow
def test_the_step_measuring_snippet_runs_again_when_inductors_cache_serves_the_compile(tmp_path):
    """A reader runs a block twice: the second compile comes from Inductor's cache, which skips the partitioner, so
    the session has no partition to read. The block must still run (it indexed ``session.partitions[0]``, and the
    suite failed whenever an earlier run with the same sources had left the cache warm). Both runs share one cache
    folder of their own: the first fills it, the second is served by it."""
    snippet, = [s for s in ALL if s.document.name == "inductor.md" and "session.measure_step" in s.code]
    runs = [run_snippet(snippet, tmp_path, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache")) for _ in range(2)]
    for k, done in enumerate(runs):
        assert done.returncode == 0, f"run {k + 1} of {snippet.name} failed:\n{done.stderr[-4000:]}"
    first, second = (done.stdout.splitlines() for done in runs)
    assert len(first) == 2 and first[1].startswith("model__0_joint_0 ")  # the measurement, then the one region's
    assert len(second) == 1  # served by the cache: the measurement alone
