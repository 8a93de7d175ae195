"""What raysight is sent, a signal each — Ray's events, log lines, spans, metric scrapes, dashboard polls, Ray's
aggregator metrics, node sightings, run exits — and each a vertical: a package holding its pure parser, the tables it
fills (``raysight/tables.py``), its writes into a transaction of the store and its read models. What a signal is:
``signal.py``; the signals there are, in the order the store makes their tables: ``registry.py``."""
