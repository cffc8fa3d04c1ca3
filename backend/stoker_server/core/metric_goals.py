"""Which epoch metrics have a direction, and which: the one rule for a run's best values and
for the stars of compare (only a metric with a direction is starred).

A metric's direction is the one Keras gives it (its metric objects' `_direction`, "up" for
accuracy, AUC, precision..., "down" for losses and errors), read from its name, or the one
the user chose in the run's config (`{"stoker": {"metric_goals": {"my_score": "max"}}}`).
A value Keras logs that is no metric, such as `learning_rate`, has none.
"""

from typing import Any, Literal

Goal = Literal["min", "max"]

# Parts of Keras's metric names (and their `val_`/`evaluate_` forms), by direction.
_DOWN = ("loss", "error", "crossentropy", "hinge", "divergence", "kld", "poisson", "logcosh",
         "mse", "mae", "mape", "msle", "rmse")  # fmt: skip
_UP = ("accuracy", "acc", "auc", "precision", "recall", "f1", "fbeta", "iou", "r2",
       "correlation", "cosine_similarity", "specificity", "sensitivity")  # fmt: skip


def _chosen(name: str, config: dict[str, Any]) -> Goal | None:
    stoker = config.get("stoker")
    goals = stoker.get("metric_goals") if isinstance(stoker, dict) else None
    chosen = goals.get(name) if isinstance(goals, dict) else None
    return chosen if chosen in ("min", "max") else None


def named_direction(name: str) -> Goal | None:
    """The direction Keras gives a metric of this name, None for a value with none."""
    words = set(name.lower().replace("-", "_").split("_"))
    if "loss" in name.lower() or words & set(_DOWN):
        return "min"
    return "max" if words & set(_UP) else None


def metric_direction(name: str, config: dict[str, Any]) -> Goal | None:
    """The user's choice for this metric, else the one its name gives, else None."""
    return _chosen(name, config) or named_direction(name)
