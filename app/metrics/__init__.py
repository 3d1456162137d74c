"""Prometheus metrics of the controller and its segment stores: the name table (names.py), one
registry per process (registry.py) and the helpers that record where events happen (record.py)."""
