"""What `gradexp compare` selected to show (gradexp.compare), which its ranking
(gradexp.compare_ranking) and its groups (gradexp.compare_groups) read: the runs and what they
are, and the one error a person's argument can cause."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_SORT = "final_loss"


class BadInput(Exception):
    """A value the person typed that names nothing in the store; the message is one line."""


@dataclass
class Selection:
    """The runs to show, in order, and what they are."""

    title: str
    experiment_id: str
    runs: list = field(default_factory=list)  # mlflow.entities.Run
    in_sweep: bool = False
    more: bool = False  # --limit left some out
    hint: str | None = None
    swept: list[str] | None = None  # a sweep's swept keys or groups (its gradexp.swept tag)
    objective: tuple[str, str] | None = None  # a sweep's (objective, direction): its parent's
    reused: set[str] = field(default_factory=set)  # ids of the earlier runs a sweep reused
