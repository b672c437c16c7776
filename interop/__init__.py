"""Interop tests: real producers build tiny checkpoints, their own dequantizers are the oracle.

Run with ``nox -s interop`` (it installs torch and the producers); see README.md.
"""
