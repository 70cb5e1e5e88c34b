"""What every request body of the query service shares: the strict base model and the number and name types
the resource modules of :mod:`.routes` build their bodies from.

The OpenAPI document is the contract, so the rules live in the types: a client generated from the document
refuses what the server refuses (``tests/test_service_openapi.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from .registry import NAME_PATTERN

__all__ = [
    "Alpha",
    "Beta",
    "Bins",
    "BoundValue",
    "Budget",
    "Delta",
    "Epsilon",
    "Finite",
    "Name",
    "RowsPerPerson",
    "StrictRequest",
]


class StrictRequest(BaseModel):
    """A request body. Numbers are strict (a JSON string or boolean is not read as a number: ``"epsilon":
    true`` must not spend 1) and finite: Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity``,
    and its parser reads them (as it reads ``1e400`` as infinity), so they are refused here, with 422, on
    every number of every request, before anything is read or written. A field the model does not know is
    refused too: a typo such as ``"detla"`` must not fall back to the default without a word."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid")


#: A name made by the administrator (analysts, datasets); see :func:`.registry.check_name`.
Name = Annotated[str, Field(min_length=1, max_length=64, pattern=NAME_PATTERN)]
Epsilon = Annotated[float, Field(gt=0, strict=True)]
Delta = Annotated[float, Field(ge=0, lt=1, strict=True)]
Alpha = Annotated[float, Field(gt=0, strict=True, description="the error bound of each COUNT and SUM")]
Beta = Annotated[float, Field(gt=0, lt=1, strict=True, description="the probability of a larger error")]
Budget = Annotated[float, Field(gt=0, strict=True, description="an epsilon budget")]
Finite = Annotated[float, Field(strict=True)]
BoundValue = StrictInt | Finite | Literal["auto"] | tuple[Finite, Finite]
#: bins of numeric columns the catalog gives none, by column (views, syntheses)
Bins = dict[Annotated[str, Field(max_length=64)], Annotated[StrictInt, Field(ge=1, le=65_536)]]
RowsPerPerson = Annotated[StrictInt, Field(ge=1, le=1_000, description="rows of each person kept")]
