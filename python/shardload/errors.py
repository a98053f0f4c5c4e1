"""errors.py -- shardload.Error and one subclass per C status code, generated from the C table.

The class of status SL_STATUS_MISSING_WEIGHTS is MissingWeightsError (the sl_status_name
"MISSING_WEIGHTS" in CamelCase + "Error"); every instance carries .status (the number),
.status_name and .message (the C library's message: the handle's, else the generic one).
"""

from . import _lib


class Error(Exception):
    """Base of every shardload error."""

    status = None
    status_name = None
    # A collective Loader call sets them: the rank whose failure this is (None on that rank itself)
    # and the ranks lost (dead, stopped) over a torch.distributed group.
    peer_rank = None
    lost_ranks = ()

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


def _class_name(status_name):
    return "".join(part.capitalize() for part in status_name.split("_")) + "Error"


BY_STATUS = {}
_code = 1
while True:
    _name = _lib.text(_lib.lib.sl_status_name(_code))
    if _name is None or _name == "UNKNOWN":
        break
    _cls = type(_class_name(_name), (Error,),
                {"status": _code, "status_name": _name,
                 "__doc__": "SL_STATUS_%s: %s" % (_name, _lib.text(_lib.lib.sl_status_message(_code)))})
    BY_STATUS[_code] = _cls
    globals()[_cls.__name__] = _cls
    _code += 1
STATUS_COUNT = _code

__all__ = ["Error"] + [c.__name__ for c in BY_STATUS.values()]


def error_for(status, message=None):
    """The exception for a non-zero status with the C message (or the generic one)."""
    cls = BY_STATUS.get(status, Error)
    if not message:
        message = _lib.text(_lib.lib.sl_status_message(status))
    return cls(message, status)


def check(status, message_fn=None):
    if status != 0:
        raise error_for(status, message_fn() if message_fn is not None else None)
