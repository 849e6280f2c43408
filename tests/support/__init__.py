"""What tests of every kind share and import: how they run drgpu (tests/support/runners.py).

The fixtures built on it (`cli`, `new_run`, `bed`) live in tests/conftest.py.
"""
