"""The pool products' host side: clusters of containers on this machine, made from a plan through the docker SDK and
found again by their labels. pool/ is the local Spark standalone pool (`invoke pool.*`), nodes/ the multi-node
clusters over ssh (`invoke nodes.*`), lab.py reads a JupyterLab container's URL, and containers.py is what they
share."""
