"""Runs in a built GPU image (the build's verification and the image tests run it as the image's user):
imports torch, TensorFlow where installed, and Horovod's extensions in one process, and prints as JSON
what they are built with and which CUDA library files that process maps (see write_manifest.cuda_stack).
"""
from __future__ import annotations

import importlib.util
import json

from write_manifest import cuda_stack

if __name__ == "__main__":
    print(json.dumps(cuda_stack(with_tensorflow=importlib.util.find_spec("tensorflow") is not None), sort_keys=True))
