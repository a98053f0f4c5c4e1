"""errors.py -- shardload.Error and one subclass per C status code, generated from the C table.

The class of status SL_STATUS_MISSING_WEIGHTS is MissingWeightsError (the sl_status_name
"MISSING_WEIGHTS" in CamelCase + "Error"); every instance carries .status (the number),
.status_name and .message (the C library's message, sl_last_error, else the generic one).

A Hub or S3 failure is SL_STATUS_HUB, HubError, with .cause: what failed, the name of the C
library's sl_hub_cause ("GATED", "S3_NO_SUCH_KEY", ...). The classes of the former detailed codes
(HubGatedError for SL_STATUS_HUB_GATED, ...) are subclasses of HubError, raised for their cause:
`except HubGatedError` and `except HubError` both catch a gated repository.
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


def _names(name_of):
    out = []
    while True:
        name = _lib.text(name_of(len(out)))
        if name is None or name == "UNKNOWN":
            return out
        out.append(name)


_STATUS_NAMES = _names(_lib.lib.sl_status_name)
HUB_CAUSES = _names(_lib.lib.sl_hub_cause_name)  # index: the sl_hub_cause value; 0 is "NONE"


class HubError(Error):
    """SL_STATUS_HUB: a Hub or object-store request failed; .cause names what (an sl_hub_cause)."""

    status = _STATUS_NAMES.index("HUB")
    status_name = "HUB"
    cause = None

    def __init__(self, message, status=None, cause=None):
        super().__init__(message, status)
        if status == HubError.status:  # raised since 0.2: the status is HUB, the detail its cause
            self.status_name = "HUB"
        if cause is not None:
            self.cause = cause


BY_STATUS = {}
BY_CAUSE = {}  # cause name -> the HubError subclass of the former SL_STATUS_HUB_<cause>
for _code, _name in enumerate(_STATUS_NAMES):
    if _code == 0:
        continue
    if _name == "HUB":
        _cls = HubError
    else:
        _hub_cause = _name[4:] if _name.startswith("HUB_") and _name[4:] in HUB_CAUSES else None
        _doc = "SL_STATUS_%s: %s" % (_name, _lib.text(_lib.lib.sl_status_message(_code)))
        if _hub_cause is not None:
            _doc += " (since 0.2 raised for SL_STATUS_HUB with cause %s)" % _hub_cause
        _attrs = {"status": _code, "status_name": _name, "__doc__": _doc}
        if _hub_cause is not None:
            _attrs["cause"] = _hub_cause
        _cls = type(_class_name(_name), (HubError,) if _hub_cause is not None else (Error,), _attrs)
        if _hub_cause is not None:
            BY_CAUSE[_hub_cause] = _cls
    BY_STATUS[_code] = _cls
    globals()[_cls.__name__] = _cls
STATUS_COUNT = len(_STATUS_NAMES)

__all__ = ["Error"] + [c.__name__ for c in BY_STATUS.values()]


def error_for(status, message=None, cause=None):
    """The exception for a non-zero status with the C message (or the generic one). For
    SL_STATUS_HUB, cause (an sl_hub_cause value or name; default: sl_last_error_cause) picks the
    class: the former detailed one (HubGatedError, ...) where there is one, else HubError."""
    cls = BY_STATUS.get(status, Error)
    if not message:
        message = _lib.text(_lib.lib.sl_status_message(status))
    if cls is not HubError:
        return cls(message, status)
    if cause is None:
        cause = _lib.lib.sl_last_error_cause()
    if isinstance(cause, int):
        cause = HUB_CAUSES[cause] if 0 < cause < len(HUB_CAUSES) else None
    return BY_CAUSE.get(cause, HubError)(message, status, cause)


def check(status, message_fn=None):
    if status != 0:
        raise error_for(status, message_fn() if message_fn is not None else None)
