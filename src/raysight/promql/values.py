"""The values a PromQL expression has, over all the steps of a query at once: a vector (series of labels, each with
an array of values over the steps, NaN where it has none), a scalar (an array), a string, or a range selector's
samples (a matrix); and numbers written and read back as Prometheus does."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from raysight.errors import QueryFailed

NAME = "__name__"  # the label that holds a series' metric name


@dataclass
class Series:
    labels: dict[str, str]
    values: np.ndarray  # float64 a step, NaN where it has none


@dataclass
class Vector:
    series: list[Series] = field(default_factory=list)


@dataclass
class Scalar:
    values: np.ndarray


@dataclass
class String:
    value: str


@dataclass
class Matrix:
    """A range selector's samples, the answer of an instant query that asks for one."""

    series: list[tuple[dict[str, str], np.ndarray, np.ndarray]]  # labels, ts (ms), values


Value = Vector | Scalar | String | Matrix


def without_name(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != NAME}


def key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """``labels`` as a key: those of one series are equal whatever their order."""
    return tuple(sorted(labels.items()))


def integer(value: float) -> int:
    """A scalar parameter as Prometheus takes an integer (topk's k): refused where no int64 holds it."""
    if not -(2.0**63) <= value < 2.0**63:  # (NaN too)
        shown = repr(float(value))  # (as Go's %v writes it)
        raise QueryFailed(f"Scalar value {_SPECIAL.get(shown, shown)} overflows int64")
    return int(value)


def number_text(value: float) -> str:
    """``value`` as Prometheus writes one (strconv's 'f', -1): the shortest digits that read back the same, without
    an exponent; NaN, +Inf, -Inf."""
    text = repr(float(value))  # (a numpy float's repr names its type)
    if text.endswith(".0"):
        return text[:-2]
    if "e" in text or text in _SPECIAL:
        return _SPECIAL.get(text) or np.format_float_positional(value, trim="-")
    return text


_SPECIAL = {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}
