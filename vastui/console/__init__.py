"""The Textual console. The only package allowed to import Textual."""
