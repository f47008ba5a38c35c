"""invoke tasks, one module per collection: images (top level), templates, pool."""
