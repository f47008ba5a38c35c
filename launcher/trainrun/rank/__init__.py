"""What runs on the rank side: the uniform rank environment, the entry points of ranks and their status record."""
