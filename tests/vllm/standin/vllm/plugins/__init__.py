"""STAND-IN for vllm.plugins: load_general_plugins() loads every entry point of the group
vllm.general_plugins (VLLM_PLUGINS, comma-separated names, restricts them) and calls each. As in
vLLM, loading an entry point is guarded (a failure is logged) but calling it is not: an exception
raised by a plugin's function ends the start of every vLLM process."""

import logging
import os
from importlib.metadata import entry_points

DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
logger = logging.getLogger("vllm.plugins")
plugins_loaded = False


def _entry_points(group):
    eps = entry_points()
    if hasattr(eps, "select"):
        return list(eps.select(group=group))
    return list(eps.get(group, []))


def load_plugins_by_group(group):
    allowed = os.environ.get("VLLM_PLUGINS")
    allowed = None if allowed is None else allowed.split(",")
    plugins = {}
    for ep in _entry_points(group):
        if allowed is not None and ep.name not in allowed:
            continue
        try:
            plugins[ep.name] = ep.load()
        except Exception:
            logger.exception("Failed to load plugin %s", ep.name)
    return plugins


def load_general_plugins():
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    for func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).values():
        func()   # not guarded, as in vLLM
