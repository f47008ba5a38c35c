"""The documentation site in docs/: the pages generated from the code (CLI, tasks, template fields, matrix,
in-image contract), the error families the catalogue must cover, the code maps, the executed notebooks, and the
strict Sphinx build that `invoke docs` runs."""
