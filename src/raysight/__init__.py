"""raysight: observability for Ray that outlives the cluster."""

from raysight.client import Client
from raysight.errors import BadQuery, NotFound, RaysightError, ServerUnreachable, Unauthorized

__version__ = "0.1.0"
__all__ = ["BadQuery", "Client", "NotFound", "RaysightError", "ServerUnreachable", "Unauthorized", "__version__"]
