"""The words of the problem, with no I/O: what a worker needs (plan.py). Everything above the
store may import it; it imports nothing of vastui's."""
