"""Plugins: modules that register their own extensions (a positional scheme, ...) when imported.

Your code registers an extension by calling the registry's function (``register_scheme``, ...) before it
uses it. For a process you do not write yourself, such as the ``tokembed`` command, name the module:

* ``TOKEMBED_PLUGINS=mypackage.schemes,other.module:register tokembed train ...`` (comma-separated: a module
  is imported; ``module:function`` is imported, then the function is called with no arguments), or
* an entry point of the group ``tokembed.plugins`` in your package's ``pyproject.toml``::

      [project.entry-points."tokembed.plugins"]
      my-schemes = "mypackage.schemes"            # imported
      my-setup = "mypackage.setup:register_all"   # imported, then called with no arguments

The registries load the plugins once, the first time they list their entries or are asked for a name they
do not hold. A plugin that fails to import is an error naming it (never a silently missing extension).
"""

from __future__ import annotations

import importlib
import os

__all__ = ["ENTRY_POINT_GROUP", "PLUGINS_ENV", "load_plugins"]

PLUGINS_ENV = "TOKEMBED_PLUGINS"
ENTRY_POINT_GROUP = "tokembed.plugins"
_loaded = False


def load_plugins() -> None:
    """Import the modules named by ``TOKEMBED_PLUGINS`` and the ``tokembed.plugins`` entry points (once).

    Raises:
        ImportError: a plugin cannot be imported (or its entry point's function fails); the message names it.
    """
    global _loaded
    if _loaded:
        return
    _loaded = True  # first: a plugin that asks a registry for names must not load the plugins again
    for name in filter(None, (n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(","))):
        module, _, function = name.partition(":")
        try:
            loaded = importlib.import_module(module)
            if function:
                getattr(loaded, function)()
        except Exception as e:
            raise ImportError(
                f"tokembed plugin {name!r} (from {PLUGINS_ENV}) failed to import: {type(e).__name__}: {e}; "
                f"fix it, or remove it from {PLUGINS_ENV}"
            ) from e
    from importlib.metadata import entry_points  # here, not at the top: `import tokembed` stays light

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = ep.load()
            if ep.attr and callable(loaded):
                loaded()
        except Exception as e:
            dist = getattr(ep.dist, "name", "an installed package")
            raise ImportError(
                f"tokembed plugin {ep.name!r} = {ep.value!r} (entry point of {dist}) failed: {type(e).__name__}: {e}; "
                f"fix or uninstall {dist}"
            ) from e
