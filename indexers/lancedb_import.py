"""Import lancedb without paying for its REST namespace client.

``import lancedb`` costs about 1.3 s on the project's 2-core machine, and 0.6–0.75 s of it is the
package ``lance_namespace_urllib3_client``: its ``__init__`` imports nine generated REST API modules
whose 366 pydantic ``validate_call`` methods build their validators at import. lancedb itself only
needs the package's ``models`` (request and response types) at import; the API classes are used by
a REST namespace connection (``lancedb.connect_namespace("rest", …)``), which this project never
opens.

``import_lancedb`` puts the package in ``sys.modules`` *unexecuted* (its ``__path__`` set, so
``lance_namespace_urllib3_client.models`` imports normally) with a module ``__getattr__`` that runs
the real ``__init__`` the first time anything asks the package for a name it does not hold yet. So
nothing can see a difference but the time: every name the package defines is there the moment it is
asked for (``from lance_namespace_urllib3_client import ApiClient`` runs the ``__init__``, then
answers). If the package is already imported, or missing, or laid out differently, lancedb is
imported plainly.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType

REST_CLIENT = "lance_namespace_urllib3_client"
_lock = threading.RLock()


def import_lancedb() -> ModuleType:
    """``import lancedb``, with the REST client package's ``__init__`` deferred to its first use."""
    with _lock:
        if "lancedb" not in sys.modules:
            _defer_init(REST_CLIENT)
    import lancedb

    return lancedb


def _defer_init(name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    module = importlib.util.module_from_spec(spec)
    state = {"done": False}

    def __getattr__(attribute: str):
        # Called only for a name the module does not hold: the first such use runs the __init__.
        with _lock:
            if not state["done"]:
                state["done"] = True
                del module.__dict__["__getattr__"]
                spec.loader.exec_module(module)
        try:
            return module.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    module.__getattr__ = __getattr__
    sys.modules[name] = module
