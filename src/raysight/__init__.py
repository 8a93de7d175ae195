"""raysight: observability for Ray that outlives the cluster."""

from raysight.client import Client
from raysight.config import VERSION as __version__
from raysight.errors import BadQuery, NotFound, RaysightError, ServerUnreachable, Unauthorized

__all__ = ["BadQuery", "Client", "NotFound", "RaysightError", "ServerUnreachable", "Unauthorized", "__version__"]
