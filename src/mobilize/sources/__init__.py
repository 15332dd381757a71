"""Model references, input specs and data sources."""
