"""The packaged pool templates (*.yaml); a package so importlib.resources finds them."""
