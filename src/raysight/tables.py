"""Tables declared once, as data: the DDL that makes a table, the Arrow shape of its rows and its column lists all
come from its declaration, never written again. Pure (pyarrow only): a parser imports the declarations of the tables
it fills, and the store (``store/schema.py``) makes them all.

A :class:`Table` keeps rows as they are written. A :class:`FoldedTable` is a fold of raw events: key columns, merged
columns and derived columns (SQL over the merged values). Every merged column has a merge rule — ``latest`` (a
non-null newcomer wins), ``keep`` (the first non-null stays), ``least``, ``greatest``, ``sum`` (of what each event
brought: only first sightings are folded), or ``union`` (a sorted set-union list, for histories) — applied the same
way when one batch's rows of a key are combined (in SQL by :meth:`Column.aggregate_sql`, in Python by
:mod:`raysight.signals.ray_events.fold`) and when a row already in the store is updated (:meth:`FoldedTable.merge_sql`).
Apart from ``latest``, the rules are commutative and idempotent, so events may arrive in any order and any number
of times.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

_MERGE_SQL = {
    "latest": "coalesce({new}, {old})",
    "keep": "coalesce({old}, {new})",
    "least": "least({old}, {new})",
    "greatest": "greatest({old}, {new})",
    "sum": "coalesce({old}, 0) + coalesce({new}, 0)",
    "union": "merge_list({old}, {new})",
}
_AGGREGATE_SQL = {
    "latest": "arg_max({c}, {order})",  # DuckDB's arg_max/arg_min pass over rows whose value is NULL
    "keep": "arg_min({c}, {order})",
    "least": "min({c})",
    "greatest": "max({c})",
    "sum": "sum({c})",
    "union": "flatten(list({c}) FILTER (WHERE {c} IS NOT NULL))",
}
# DuckDB's types as Arrow's, those of the rows staged (JSON is text to both); a type no one stages has none
_ARROW = {
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
}

Fields = dict[str, str]


@dataclass(frozen=True)
class Column:
    name: str
    type: str | Fields  # a DuckDB type, or the fields of a STRUCT
    rule: str = "latest"  # how a folded table merges it (see the module docstring); "union": a list of the struct
    default: str | None = None  # SQL: the value of a row written without it
    compression: str | None = None  # DuckDB's, where its own choice would not do
    unique: bool = False
    added: bool = False  # added to a table that stores had before: each open adds it where it is missing

    @property
    def ddl_type(self) -> str:
        if isinstance(self.type, dict):
            struct = "STRUCT(" + ", ".join(f"{k} {v}" for k, v in self.type.items()) + ")"
            return struct + "[]" if self.rule == "union" else struct
        return self.type

    def ddl(self, primary_key: bool = False) -> str:
        """The column as CREATE TABLE declares it (the primary key, when it is the key alone)."""
        return " ".join(
            [self.name, self.ddl_type]
            + ["PRIMARY KEY"] * primary_key
            + ["UNIQUE"] * self.unique
            + ([f"DEFAULT {self.default}"] if self.default is not None else [])
            + ([f"USING COMPRESSION {self.compression}"] if self.compression else [])
        )

    @property
    def arrow_type(self) -> pa.DataType:
        if isinstance(self.type, dict):
            struct = pa.struct([(k, _ARROW[v]) for k, v in self.type.items()])
            return pa.list_(struct) if self.rule == "union" else struct
        if self.type not in _ARROW:
            raise TypeError(f"column {self.name}: no Arrow type stands for {self.type}")
        return _ARROW[self.type]

    def merge_sql(self, old: str, new: str) -> str:
        return _MERGE_SQL[self.rule].format(old=old, new=new)

    def aggregate_sql(self, order: str) -> str:
        """The rule as an aggregate over one batch's rows of a key, ``order`` being their arrival order."""
        return _AGGREGATE_SQL[self.rule].format(c=self.name, order=order)


def columns(**types: str | Fields) -> list[Column]:
    """Columns of these names and types, in order (merged by the rule ``latest`` in a folded table)."""
    return [Column(name, kind) for name, kind in types.items()]


def arrow_rows(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """``rows`` as an Arrow table of ``schema``; ValueError when they name what is not a column of it, or not a field
    of a column's structs (pyarrow would leave it out without a word: a misspelt key would be lost). The keys are
    gathered in C (a tenth of a microsecond a row of two dozen), the structs' only where there are any."""
    unknown = set().union(*rows) - set(schema.names)
    for column in schema:
        if fields := _struct(column.type):
            items = (item for row in rows for item in _items(row.get(column.name)))
            unknown |= {f"{column.name}.{k}" for k in set().union(*items) - {f.name for f in fields}}
    if unknown:
        raise ValueError(f"{sorted(unknown)}: not columns of {schema.names} (nor fields of their structs)")
    return pa.Table.from_pylist(rows, schema=schema)


def _struct(kind: pa.DataType) -> list[pa.Field]:
    """The fields of a struct type, or of a list's structs; none for any other type."""
    if pa.types.is_list(kind):
        kind = kind.value_type
    return list(kind) if pa.types.is_struct(kind) else []


def _items(value: Any) -> list[Any]:
    """A struct column's value as its structs: a list's items, the struct alone, or none (NULL)."""
    return [item for item in value if item is not None] if isinstance(value, list) else [value] if value else []


def _schema(columns: Iterable[Column]) -> pa.Schema:
    return pa.schema([(c.name, c.arrow_type) for c in columns])


def _added(table: str, columns: Iterable[Column]) -> list[str]:
    return [f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {c.ddl()}" for c in columns if c.added]


@dataclass(frozen=True)
class Table:
    """Rows as they are written: raw input, what the store keeps of it, or rows that only accumulate (no key)."""

    name: str
    columns: list[Column]
    key: tuple[str, ...] = ()  # the primary key's columns
    sequences: tuple[str, ...] = ()  # made with it: what its rows are numbered by

    def __post_init__(self) -> None:
        if unknown := set(self.key) - set(self.names):
            raise ValueError(f"{self.name}: its key names {sorted(unknown)}, not columns of it")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def arrow_schema(self, omit: Iterable[str] = (), add: Iterable[Column] = ()) -> pa.Schema:
        """The Arrow shape of rows written to it: its columns less ``omit`` (what the store computes), then ``add``
        (what a parser stages for the store to compute them from)."""
        left_out = set(omit)
        if unknown := left_out - set(self.names):
            raise ValueError(f"{self.name} has no columns {sorted(unknown)}")
        return _schema([c for c in self.columns if c.name not in left_out] + list(add))

    def ddl(self) -> str:
        inline = len(self.key) == 1
        cols = [c.ddl(primary_key=inline and c.name == self.key[0]) for c in self.columns]
        if len(self.key) > 1:
            cols.append(f"PRIMARY KEY ({', '.join(self.key)})")
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(cols)})"

    def create(self) -> list[str]:
        """The statements that make it, or bring a store's older one up to it (idempotent)."""
        return (
            [f"CREATE SEQUENCE IF NOT EXISTS {s}" for s in self.sequences]
            + [self.ddl()]
            + _added(self.name, self.columns)
        )


@dataclass(frozen=True)
class Derived:
    name: str
    type: str
    expr: str  # SQL over the merged columns, named in braces: {history}, {state_key}, …


@dataclass(frozen=True)
class FoldedTable:
    """A fold of raw events, one row per key: see the module docstring."""

    name: str
    keys: list[Column]
    columns: list[Column]
    derived: list[Derived] = field(default_factory=list)
    inferred: list[Column] = field(
        default_factory=list
    )  # what reconciliation writes (``signals/ray_events/reconcile.py``)

    @property
    def staged(self) -> list[Column]:
        return self.keys + self.columns

    @property
    def names(self) -> list[str]:
        """The columns a fold writes (the staged: keys and merged)."""
        return [c.name for c in self.staged]

    def arrow_schema(self) -> pa.Schema:
        return _schema(self.staged)

    def ddl(self) -> str:
        cols = [c.ddl() for c in self.staged] + [f"{d.name} {d.type}" for d in self.derived]
        cols += [c.ddl() for c in self.inferred]
        keys = ", ".join(c.name for c in self.keys)
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(cols)}, PRIMARY KEY ({keys}))"

    def create(self) -> list[str]:
        """The statements that make it, or bring a store's older one up to it (idempotent)."""
        return [self.ddl()] + _added(self.name, self.staged + self.inferred)

    @property
    def null_keeps(self) -> bool:
        """Whether merging a NULL into any of its columns keeps the stored value (no ``sum``: NULL becomes 0; no
        ``union``: NULL becomes [])."""
        return all(c.rule in ("latest", "keep", "least", "greatest") for c in self.columns)

    @property
    def fresh(self) -> dict[str, str]:
        """Each staged column as a new row takes it (histories sorted and deduplicated)."""
        return {c.name: (f"merge_list(NULL, {c.name})" if c.rule == "union" else c.name) for c in self.staged}

    def aggregate_sql(self, rows: str, order: str) -> str:
        """One row per key from the relation ``rows`` (several per key, any subset of the columns set)."""
        keys = ", ".join(c.name for c in self.keys)
        columns = ", ".join(f"{c.aggregate_sql(order)} AS {c.name}" for c in self.columns)
        return f"SELECT {keys}, {columns} FROM ({rows}) GROUP BY {keys}"

    def insert_sql(self, staged: str) -> str:
        """INSERT the rows of the registered relation ``staged`` whose keys are new; returns the keys inserted."""
        select = list(self.fresh.values()) + [d.expr.format_map(self.fresh) for d in self.derived]
        names = self.names + [d.name for d in self.derived]
        keys = ", ".join(c.name for c in self.keys)
        return (
            f"INSERT INTO {self.name} ({', '.join(names)}) SELECT {', '.join(select)} FROM {staged} "
            f"ON CONFLICT DO NOTHING RETURNING {keys}"
        )

    def unchanged_sql(self, staged: str) -> str:
        """SQL: whether merging the rows of ``staged`` would leave the table as it is: each key stored, and each
        column, merged by its rule, as stored (derived columns follow the merged). A scan of the table, which the
        zone maps of the staged keys narrow: ask it of a few rows."""
        on = " AND ".join(f"s.{c.name} = t.{c.name}" for c in self.keys)
        differs = " OR ".join(
            f"{c.merge_sql(f't.{c.name}', f's.{c.name}')} IS DISTINCT FROM t.{c.name}" for c in self.columns
        )
        return (
            f"SELECT NOT EXISTS (SELECT 1 FROM {staged} s LEFT JOIN {self.name} t ON {on} "
            f"WHERE t.{self.keys[0].name} IS NULL OR {differs})"
        )

    def merge_sql(self, staged: str, columns: list[str]) -> str:
        """Merge the rows of ``staged`` into the rows with their keys, touching only ``columns`` (and the derived).

        DuckDB's ON CONFLICT costs per column updated, so the columns no staged row sets are left out.
        """
        merged = {c.name: f"{self.name}.{c.name}" for c in self.columns}
        merged.update(
            {
                c.name: c.merge_sql(f"{self.name}.{c.name}", f"excluded.{c.name}")
                for c in self.columns
                if c.name in columns
            }
        )
        sets = [f"{name} = {merged[name]}" for name in columns]
        sets += [f"{d.name} = {d.expr.format_map(merged)}" for d in self.derived]
        names = self.names + [d.name for d in self.derived]
        select = list(self.fresh.values()) + [d.expr.format_map(self.fresh) for d in self.derived]
        return (
            f"INSERT INTO {self.name} ({', '.join(names)}) SELECT {', '.join(select)} FROM {staged} "
            f"ON CONFLICT DO UPDATE SET {', '.join(sets)}"
        )
