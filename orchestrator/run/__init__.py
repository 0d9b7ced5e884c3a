"""run.

The package is also callable: ``orchestrator.run(fn, ...)`` is ``orchestrator.api.run``, a function as the job. It is
the package, not the function, that ``orchestrator.run`` names, so that importing one of its modules (which binds the
package there) and dotted paths such as ``orchestrator.run.start.up`` keep working; a type checker sees the function
(``orchestrator/__init__.py``).
"""
from __future__ import annotations

import sys
import types
from typing import Any

_PACKAGE_DOC = __doc__


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from orchestrator.api import run

        return run(*args, **kwargs)

    # help(orchestrator.run): the function first, as one calls it, then the package.
    @property
    def __doc__(self) -> str:  # type: ignore[override]
        import inspect

        from orchestrator.api import run

        return f"run{inspect.signature(run)}\n\n{inspect.getdoc(run)}\n\n{_PACKAGE_DOC}"


def __getattr__(name: str) -> Any:
    if name == "__signature__":  # the function's, for help() and a notebook's hints
        import inspect

        from orchestrator.api import run

        return inspect.signature(run)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


sys.modules[__name__].__class__ = _CallablePackage
