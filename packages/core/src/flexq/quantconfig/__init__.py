"""What config.json's ``quantization_config`` says, read below the plugin layer.

For the core's detection (:mod:`flexq.plugin.known` asks which formats a
compressed-tensors config declares) and, through the re-exports of
:mod:`flexq.formatkit`, for format authors: the pydantic base of config models and
the parse helpers (:mod:`~flexq.quantconfig.base`), the one rule for ignore lists
(:mod:`~flexq.quantconfig.ignore`) and the one model of compressed-tensors configs
(:mod:`~flexq.quantconfig.compressed_tensors`). Nothing here imports
:mod:`flexq.formatkit` or :mod:`flexq.plugin`; pydantic is imported only by the
modules that build models, on first use.
"""
