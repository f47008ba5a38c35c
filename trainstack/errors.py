class TrainstackError(Exception):
    """An error the user can fix; its message says what and how. Tasks print it and exit non-zero."""
