"""invoke tasks, one module per collection: images (top level), templates, pool, nodes;
program.py, invoke's own parse errors in the project's format."""
