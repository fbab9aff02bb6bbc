"""The ``odradek`` command line: the only entry point that wires the layers together."""
