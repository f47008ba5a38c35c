"""A local Spark standalone pool of containers, made from the local-pool plan through the docker SDK."""
from .plan import DEFAULT_POOL, pool_plan
from .runner import down, status, up
from .submit import submit

__all__ = ["DEFAULT_POOL", "down", "pool_plan", "status", "submit", "up"]
