"""Spark barrier stages: the driver side (driver.py) and what each barrier task runs (task.py)."""
