"""PromQL, evaluated as Prometheus 2.42 does (the release Debian ships), over the samples a :class:`Source` gives
(``source.py``). Pure: parsing is `promql-parser`'s, the storage is the caller's
(``signals/scrapes/metrics_query.py``, over DuckDB, which this package never imports).

Every expression is evaluated at all steps of a query at once (an instant query is a range of one step): a vector is
series of labels with an array of values over the steps (NaN where the series has no value then), a scalar an array.
Prometheus's rules kept: a selector takes each step's latest sample within the 5-minute lookback, unless the series
went stale (its target scraped without it) since; a range selector the samples within ``[t - range, t]``; ``rate``
and ``increase`` extrapolate to the range's ends and correct counter resets; arithmetic drops the metric name.

Every query is bounded: its text (length, nesting) before it is parsed, its regexes by RE2's linear time, and its
evaluation by a :class:`Budget` of samples and seconds (``--query-max-samples``, ``--query-timeout``).

Its modules, each name imported from the one that owns it: ``evaluator.py`` (``evaluate``: the walk of the syntax
tree), ``parse.py`` (the text's bounds, promql-parser's tree), ``matchers.py`` (label matchers, RE2), ``budget.py``,
``source.py`` (the :class:`Source` protocol the caller implements), ``values.py`` (vectors, scalars… and numbers as
Prometheus writes them); a module for each kind of node: ``selectors.py``, ``functions.py`` and
``range_functions.py``, ``aggregate.py``, ``binary.py``.
"""
