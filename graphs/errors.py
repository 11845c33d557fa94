"""The exception hierarchy shared by every layer (graphs, solvers, placement).

A user mistake raises a :class:`PlacementError` subclass with a message that names the file, node or
field at fault; the command line turns it into one error line and a non-zero exit code.  A solver that
stops at a limit is *not* an error: it returns a result with an honest status.
"""

from __future__ import annotations


class PlacementError(Exception):
    """Base class of every error this project raises on purpose."""


class InputError(PlacementError, ValueError):
    """Malformed input: a file, a node, an edge or a field that does not make sense.

    ``source`` is the file (or other origin) the input came from, when known; it prefixes the message.
    """

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.source = source
        self.detail = message
        super().__init__(f"{source}: {message}" if source else message)


class CycleError(InputError):
    """The operator graph is not a DAG. ``cycle`` lists the node ids along one cycle."""

    def __init__(self, cycle: list, *, source: str | None = None) -> None:
        self.cycle = list(cycle)
        shown = " -> ".join(str(c) for c in self.cycle[:12])
        if len(self.cycle) > 12:
            shown += f" -> ... ({len(self.cycle)} nodes)"
        super().__init__(f"the graph has a cycle: {shown} -> {self.cycle[0]}", source=source)


class InfeasibleError(PlacementError):
    """No placement satisfies the constraints (e.g. a node that no device can hold). Says why."""


class ProblemTooLargeError(PlacementError):
    """The exact method would exceed its size budget (e.g. too many ideals); says by how much."""


class NoPlacementError(PlacementError, ValueError):
    """A placement was asked of a result that has none (status infeasible, stopped or unknown): its
    ``solution.message`` says why."""
