"""Spark GPU pool templates: data checked before anything starts, rendered for each platform."""
from .errors import MAX_SHOWN, Problem, TemplateError, TemplateWarning, shown
from .loading import load_template, package_file, packaged_templates, read_template
from .overrides import parse_assignments
from .schema import PoolTemplate
from .targets import TARGETS, render
from .validation import check_barrier_job, validate

__all__ = [
    "MAX_SHOWN",
    "TARGETS",
    "PoolTemplate",
    "Problem",
    "TemplateError",
    "TemplateWarning",
    "check_barrier_job",
    "load_template",
    "package_file",
    "packaged_templates",
    "parse_assignments",
    "read_template",
    "render",
    "shown",
    "validate",
]
