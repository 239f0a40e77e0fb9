"""The engine: offer ranking, provisioning, lifecycle, deadlines, auto-destroy. No Textual."""
