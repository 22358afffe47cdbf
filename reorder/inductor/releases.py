"""The torch releases the hook is tested with, and the one line a user gets under any other.

The hook reaches into Inductor's internals (its scheduler nodes, the wrapper's
memory passes, the partitioner's joint graph), which change from release to
release. It is tested on :data:`SUPPORTED_RELEASES`; under another release
(an older 2.12, a future 2.16 or a nightly) :func:`~reorder.inductor.install`
leaves Inductor alone and says so in one line, instead of failing a user's
compile deep inside Inductor. The standalone API and the command line read
graph files and need none of this: they work on any torch from 2.13 on.

Setting the environment variable ``REORDER_ANY_TORCH=1`` switches the hook on
under an unsupported release anyway, with a warning that it is untested there.
"""

from __future__ import annotations

import logging
import os
import re

__all__ = ["SUPPORTED_RELEASES", "hook_base", "hook_refusal", "installed_version", "running_release"]

log = logging.getLogger("reorder")

#: The torch releases (major.minor) the hook is tested with, oldest first.
SUPPORTED_RELEASES: tuple[str, ...] = ("2.13", "2.14", "2.15")

#: Inductor's classes the hook's passes derive from (``torch._inductor.custom_graph_pass``).
HOOK_BASES: tuple[str, ...] = ("CustomSchedulerPass", "CustomPartitionerFn")

#: The environment variable that switches the hook on under an unsupported release.
ANY_TORCH_VARIABLE = "REORDER_ANY_TORCH"


def running_release(version: str | None = None) -> str:
    """The major.minor release of ``version`` (default: the installed torch's), such as ``"2.15"`` for
    ``"2.15.0+cu132"`` or ``"2.16"`` for a nightly ``"2.16.0.dev20261101"``."""
    if version is None:
        version = installed_version()
    match = re.match(r"(\d+)\.(\d+)", version)
    return f"{match[1]}.{match[2]}" if match else version


def hook_refusal(version: str | None = None) -> str | None:
    """Why the hook stays off under ``version`` (default: the installed torch's), as one sentence; None where it
    runs.

    Under an unsupported release with ``REORDER_ANY_TORCH=1`` set, the hook runs and this logs (once per
    call) that it is untested there.
    """
    shown = installed_version() if version is None else version
    missing = []
    if version is None:
        from torch._inductor import custom_graph_pass

        missing = [name for name in HOOK_BASES if not hasattr(custom_graph_pass, name)]
    if missing:
        return (f"the Inductor hook is off: torch {shown} has no {' or '.join(missing)}, which the hook plugs "
                f"into; torch.compile runs as stock. Install one of {', '.join(SUPPORTED_RELEASES)}")
    if running_release(shown) in SUPPORTED_RELEASES:
        return None
    supported = ", ".join(SUPPORTED_RELEASES)
    if os.environ.get(ANY_TORCH_VARIABLE) == "1":
        log.warning("reorder: torch %s is not a release the hook is tested with (%s); it runs anyway because "
                    "%s=1 is set", shown, supported, ANY_TORCH_VARIABLE)
        return None
    return (f"the Inductor hook is off: torch {shown} is not a supported release ({supported}); "
            f"torch.compile runs as stock. Install one of those, or set {ANY_TORCH_VARIABLE}=1 to try it anyway")


def installed_version() -> str:
    """The installed torch's version string."""
    import torch

    return str(torch.__version__)


def hook_base(name: str) -> type:
    """Inductor's base class ``torch._inductor.custom_graph_pass.<name>`` for one of the hook's classes, or
    an empty stand-in under a release that has none (``CustomSchedulerPass`` is newer than torch 2.11):
    ``import reorder.inductor`` then still works, and :func:`hook_refusal` keeps the hook off there, so the
    class is never handed to Inductor."""
    from torch._inductor import custom_graph_pass

    return getattr(custom_graph_pass, name, None) or type(name, (), {"__doc__": f"torch {installed_version()} "
                                                                                 f"has no {name}"})
