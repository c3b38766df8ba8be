"""The model catalog: what each model name resolves to, and downloads with verification."""

from edge_agent.models.catalog import Catalog, ModelSpec, ModelStatus, load_catalog
from edge_agent.models.fetch import fetch_model

__all__ = ["Catalog", "ModelSpec", "ModelStatus", "fetch_model", "load_catalog"]
