"""Vast.ai REST client: query syntax, typed models, retrying async HTTP."""
