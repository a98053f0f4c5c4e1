"""config.py -- shardload.Config: the C library's configuration keys, validated by the C library.

The key list comes from sl_config_keys() and every value goes through sl_config_set(), so names,
defaults and validation messages are the C table's (one source of truth): vLLM's spellings
(tensor_parallel_size, pipeline_parallel_size, data_parallel_size, download_dir) set the same keys
as in the CLI, and an unknown key's message suggests the nearest one ("did you mean ...?"). Python values are
converted to the C text form: bool -> "true"/"false", int/float -> str, list/tuple (include) ->
newline-separated, dict (extra_config) -> JSON.
"""

import ctypes
import json

from . import _lib
from .errors import ConfigError, InvalidArgumentError


def _parse_keys():
    keys = {}
    for line in _lib.text(_lib.lib.sl_config_keys()).splitlines():
        parts = line.split(None, 1)
        if parts:
            keys[parts[0]] = parts[1] if len(parts) > 1 else ""
    return keys


KEYS = _parse_keys()


def to_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


class Config:
    """Config(model=..., tp=2, ...): a validated configuration (sl_config)."""

    def __init__(self, **values):
        handle = ctypes.c_void_p()
        if _lib.lib.sl_config_create(ctypes.byref(handle)) != 0:
            raise InvalidArgumentError("cannot create a configuration")
        self._h = handle
        for key, value in values.items():
            self.set(key, value)

    @staticmethod
    def keys():
        """{key: description with its default}, from the C library."""
        return dict(KEYS)

    def set(self, key, value):
        """Sets one key (or its vLLM spelling: tensor_parallel_size for tp, ...); a bad key or value
        raises ConfigError with the C message (an unknown key's names the nearest one)."""
        if value is None:
            return self
        st = _lib.lib.sl_config_set(self._h, key.encode(), to_text(value).encode())
        if st != 0:
            msg = _lib.last_error()
            from .errors import error_for
            raise error_for(st, msg) if st != ConfigError.status else ConfigError(msg)
        return self

    def get(self, key):
        return _lib.text(_lib.lib.sl_config_get(self._h, key.encode()))

    def error(self):
        """The message of this thread's last failed call (sl_last_error; the exceptions carry it)."""
        return _lib.last_error()

    @property
    def handle(self):
        return self._h

    def close(self):
        if self._h:
            _lib.lib.sl_config_destroy(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
