"""_errors.py — the library's status codes as Python exceptions.

Every exception carries the C library's message (as the command line
prints it: "FILE: node 'N' (Op): what is wrong") and .status, the status
name of shardc_status.h ("io", "parse", "invalid", ...). The class says what
went wrong, from the status and from what the call was doing:

    Error                 any failure of the library
      ModelError          the model (or a bundle, a checkpoint) is bad:
                          unreadable, malformed, invalid or unsupported
      PlanError           the mesh or plan does not fit the model
      RankError           a run over several ranks (threads or processes)
                          failed on one of them
      OutOfMemoryError    an allocation failed (also a MemoryError)
      UsageError          a wrong call: unknown input, bad option value
                          (also a ValueError)
"""
from ._lib import STATUS_NAMES, SC_ERR_NOMEM, SC_ERR_USAGE


class Error(Exception):
    def __init__(self, message, status="invalid"):
        super().__init__(message)
        self.status = status


class ModelError(Error):
    pass


class PlanError(Error):
    pass


class RankError(Error):
    pass


class OutOfMemoryError(Error, MemoryError):
    pass


class UsageError(Error, ValueError):
    pass


_BY_WHERE = {"model": ModelError, "plan": PlanError, "run": RankError}


def raise_for(where, status, message):
    """Raises the exception of a failed call: where is "model" (loading,
    compiling, a bundle or checkpoint), "plan" (planning a mesh) or "run"
    (running over ranks); status the sc_status code."""
    name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
    if status == SC_ERR_NOMEM:
        cls = OutOfMemoryError
    elif status == SC_ERR_USAGE and where != "plan":
        cls = UsageError
    else:
        cls = _BY_WHERE.get(where, Error)
    raise cls(message or name, name)
