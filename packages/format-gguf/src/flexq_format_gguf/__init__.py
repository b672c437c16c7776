"""flexq-format-gguf: GGUF files (llama.cpp) into PaddlePaddle through flexq."""

from __future__ import annotations
