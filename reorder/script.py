"""Running a user's script as ``python SCRIPT.py ARGS`` would, inside this process, and putting everything back.

``reorder capture`` and ``reorder compare`` run a person's own, unmodified
script with the hook around every ``torch.compile`` it makes. For the script
that must look exactly like ``python SCRIPT.py``: its ``__name__`` is
``"__main__"``, ``__file__`` is its path, ``sys.argv`` is the script and its
arguments, and the script's folder comes first on ``sys.path`` (so ``from
models import CNN`` finds the ``models.py`` beside it). Afterwards
``sys.argv``, ``sys.path`` and the ``__main__`` module are restored, whether
the script returned, raised or called ``sys.exit``.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Sequence

from .errors import ReorderError

__all__ = ["ScriptError", "run_script"]


class ScriptError(ReorderError):
    """The script itself raised (or exited with a non-zero status); the message names the script and the error."""


def run_script(path: str | Path, args: Sequence[str] = ()) -> None:
    """Run ``path`` as ``python path *args`` would; raise :class:`ScriptError` if it fails.

    ``sys.exit(0)`` (or ``sys.exit()``) inside the script is a normal end.
    Raises :class:`~reorder.errors.ReorderError` if ``path`` is not a file.
    """
    script = Path(path)
    if not script.is_file():
        raise ReorderError(f"no such script: {script}")
    saved_argv, saved_path, saved_main = sys.argv[:], sys.path[:], sys.modules.get("__main__")
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise ScriptError(f"{script} exited with status {exc.code}") from None
    except Exception as exc:  # noqa: BLE001 - the script's own error, reported as one line
        raise ScriptError(f"{script} raised {type(exc).__name__}: {exc}") from exc
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
