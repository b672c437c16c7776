"""Checkpoint files: the dtype table, safetensors headers, the reader, the writer, hub paths."""
